//! HTTP webhook delivery of hare-outbox (seed 001 § WebhookDelivery, DESIGN §9.4).
//!
//! [`WebhookDelivery`] POSTs every event to one URL: the body is [`OutboxEvent::body`] (the
//! payload as compact JSON), the headers are the configured ones, then the event's
//! [`OutboxEvent::message_headers`] (among them `hare-outbox-event-id` and `hare-outbox-topic`),
//! then — when a secret is set — a signature header `sha256=<hex HMAC-SHA256 of the body>`.
//! Any answer but 2xx is a failure; redirects are never followed. A delivery only sends: the relay
//! retries failed events and dead-letters them.
//!
//! Receivers check the signature with [`verify_signature`] and drop duplicates by
//! `hare-outbox-event-id` (delivery is at least once).
//!
//! ```no_run
//! use std::time::Duration;
//! use hare_outbox_webhook::WebhookDelivery;
//!
//! # fn main() -> hare_outbox_core::Result<()> {
//! let secret = std::env::var("BILLING_WEBHOOK_SECRET").unwrap_or_default();
//! let delivery = WebhookDelivery::new("https://billing.example.com/events")?
//!     .with_secret(secret)
//!     .with_timeout(Duration::from_secs(5))
//!     .with_header("authorization", "Bearer 3f9a")?;
//! // Hand `delivery` to an `OutboxRelay`, alone or behind a `TopicRouter`.
//! # let _ = delivery;
//! # Ok(())
//! # }
//! ```
//!
//! On the receiving side:
//!
//! ```
//! use hare_outbox_webhook::{sign, verify_signature};
//!
//! let body = br#"{"order":42}"#;
//! let header = sign(b"secret", body); // what the delivery sends
//! assert!(verify_signature(b"secret", body, &header));
//! assert!(!verify_signature(b"secret", br#"{"order":43}"#, &header));
//! ```

use std::time::Duration;

use async_trait::async_trait;
use hare_outbox_core::{Delivery, DeliveryError, Error, OutboxEvent, Result};
use hmac::{Hmac, KeyInit, Mac};
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, LOCATION};
use reqwest::{Client, Response, StatusCode, Url, redirect};
use sha2::Sha256;

/// The header that carries the signature unless [`WebhookDelivery::with_signature_header`]
/// names another (seed 001 § WebhookDelivery, `signature_header`).
pub const DEFAULT_SIGNATURE_HEADER: &str = "hare-outbox-signature";

/// The per-request timeout unless [`WebhookDelivery::with_timeout`] sets another: 10 s
/// (seed 001 § WebhookDelivery, `timeout_seconds=10`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// How many characters of a failed answer's body a [`DeliveryError`] carries.
pub const ERROR_BODY_CHARS: usize = 200;

/// Headers that frame or route the HTTP message itself; setting them would corrupt the request,
/// so neither the configuration nor an event may set them.
const RESERVED_HEADERS: &[&str] = &[
    "connection",
    "content-length",
    "host",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// How many bytes of a successful answer are read so the connection can be reused; a longer
/// body is dropped with its connection.
const DRAIN_LIMIT: usize = 64 * 1024;

type HmacSha256 = Hmac<Sha256>;

/// Delivers events by HTTP POST to one URL (seed 001 § WebhookDelivery, DESIGN §9.4).
///
/// Per event it sends one request:
/// - method `POST`, body exactly [`OutboxEvent::body`], `content-type: application/json`;
/// - the headers set with [`WebhookDelivery::with_header`], then the event's
///   [`OutboxEvent::message_headers`], which replace configured headers of the same name
///   (names compare case-insensitively), values sent as their UTF-8 bytes;
/// - with a secret, the signature header ([`DEFAULT_SIGNATURE_HEADER`] unless
///   [`WebhookDelivery::with_signature_header`] says otherwise) carrying [`sign`] of the body;
///   it replaces any header of the same name.
///
/// An event fails (a [`DeliveryError`], which the relay retries) when the answer is not 2xx —
/// 3xx included, since redirects are never followed, so the URL checked is the URL requested —,
/// on a connection error, when the request and the answer take longer than the timeout, and when
/// one of its headers cannot be sent over HTTP (a name that is not an HTTP token, a value with
/// control characters, or one of the framing headers `content-length`, `transfer-encoding`,
/// `host`, `connection`, `te`, `trailer`, `upgrade`, `keep-alive`, `proxy-connection`).
///
/// One HTTP client (with its connection pool) is built in [`WebhookDelivery::new`] and used for
/// every request. Proxies from the usual environment variables (`HTTPS_PROXY`, `NO_PROXY`, …)
/// apply.
///
/// Not implemented from the seed yet: per-event `target`, `allows_url` and the result column.
#[derive(Clone)]
pub struct WebhookDelivery {
    client: Client,
    url: Url,
    /// The URL as messages show it: a password in it is replaced by `***`.
    shown_url: String,
    secret: Option<Vec<u8>>,
    timeout: Duration,
    headers: HeaderMap,
    signature_header: HeaderName,
}

impl std::fmt::Debug for WebhookDelivery {
    /// Shows the URL (without a password), the timeout, the signature header and the configured
    /// header names; never the secret or header values.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let header_names: Vec<&str> = self.headers.keys().map(HeaderName::as_str).collect();
        f.debug_struct("WebhookDelivery")
            .field("url", &self.shown_url)
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .field("headers", &header_names)
            .field("signature_header", &self.signature_header.as_str())
            .finish()
    }
}

impl WebhookDelivery {
    /// A delivery to `url` (an absolute `http` or `https` URL), without a secret (no signature),
    /// with a timeout of [`DEFAULT_TIMEOUT`] (10 s) per request, no extra headers and the
    /// signature header [`DEFAULT_SIGNATURE_HEADER`].
    ///
    /// # Errors
    /// [`Error::Configuration`] naming the value when `url` does not parse or its scheme is not
    /// `http` or `https`, or when the HTTP client cannot be built (no TLS roots available).
    pub fn new(url: impl Into<String>) -> Result<Self> {
        let text = url.into();
        let parsed = Url::parse(&text).map_err(|e| {
            Error::configuration(format!(
                "webhook url {text:?} is not a valid absolute URL ({e}); expected e.g. \"https://example.com/hooks\""
            ))
        })?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(Error::configuration(format!(
                "webhook url {:?} has the scheme {:?}; only http and https are allowed",
                shown(&parsed),
                parsed.scheme()
            )));
        }
        let client = Client::builder()
            .redirect(redirect::Policy::none())
            .user_agent(concat!("hare-outbox-webhook/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| {
                Error::configuration(format!(
                    "building the HTTP client for webhook url {:?} failed: {}",
                    shown(&parsed),
                    error_chain(&e)
                ))
            })?;
        Ok(WebhookDelivery {
            client,
            shown_url: shown(&parsed),
            url: parsed,
            secret: None,
            timeout: DEFAULT_TIMEOUT,
            headers: HeaderMap::new(),
            signature_header: HeaderName::from_static(DEFAULT_SIGNATURE_HEADER),
        })
    }

    /// Signs every request with HMAC-SHA256 under `secret` (seed 001 § WebhookDelivery,
    /// `secret`). Unset by default: no signature header is sent. Any length is accepted, the
    /// empty secret included (which anyone can forge — make sure the secret was really found).
    pub fn with_secret(mut self, secret: impl Into<Vec<u8>>) -> Self {
        self.secret = Some(secret.into());
        self
    }

    /// The time one request may take, from connecting until the answer's body is read;
    /// [`DEFAULT_TIMEOUT`] (10 s) unless set. A slower request fails.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sends the header `name: value` with every request (seed 001 § WebhookDelivery,
    /// `headers`). Setting a name again replaces its value; an event header of the same name
    /// replaces it for that event, and the signature header always wins.
    ///
    /// # Errors
    /// [`Error::Configuration`] naming the header when `name` is not an HTTP header name (a token:
    /// letters, digits, ``!#$%&'*+-.^_`|~``), is one of the framing headers the HTTP client sets
    /// itself (`content-length`, `host`, …), or `value` holds control characters.
    pub fn with_header(mut self, name: &str, value: &str) -> Result<Self> {
        let header = header_name(name).map_err(Error::configuration)?;
        let value = header_value(name, value).map_err(Error::configuration)?;
        self.headers.insert(header, value);
        Ok(self)
    }

    /// Sends the signature in the header `name` instead of [`DEFAULT_SIGNATURE_HEADER`], for
    /// receivers that expect their own (e.g. `X-Webhook-Signature`; seed 001 § WebhookDelivery,
    /// `signature_header`). Only used with a secret.
    ///
    /// # Errors
    /// [`Error::Configuration`] naming the value when `name` is not an HTTP header name or is one
    /// of the framing headers (`content-length`, `host`, …).
    pub fn with_signature_header(mut self, name: &str) -> Result<Self> {
        self.signature_header = header_name(name)
            .map_err(|e| Error::configuration(format!("signature header: {e}")))?;
        Ok(self)
    }

    /// The headers of the request for `event` with `body`.
    fn request_headers(
        &self,
        event: &OutboxEvent,
        body: &[u8],
    ) -> std::result::Result<HeaderMap, DeliveryError> {
        let mut headers = HeaderMap::with_capacity(self.headers.len() + 8);
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        for (name, value) in &self.headers {
            headers.insert(name.clone(), value.clone());
        }
        for (name, value) in event.message_headers() {
            let refused = |reason: String| {
                DeliveryError::new(format!(
                    "event {} cannot be sent to webhook {}: {reason}",
                    event.id, self.shown_url
                ))
            };
            let header = header_name(&name).map_err(refused)?;
            let value = header_value(&name, &value).map_err(refused)?;
            headers.insert(header, value);
        }
        if let Some(secret) = &self.secret {
            let signature = HeaderValue::from_str(&sign(secret, body))
                .map_err(|e| DeliveryError::with_source("signature is not a header value", e))?;
            headers.insert(self.signature_header.clone(), signature);
        }
        Ok(headers)
    }

    fn send_error(&self, error: reqwest::Error) -> DeliveryError {
        let message = if error.is_timeout() {
            format!(
                "webhook {} timed out after {:.3} s",
                self.shown_url,
                self.timeout.as_secs_f64()
            )
        } else if error.is_connect() {
            format!("webhook {}: connecting failed", self.shown_url)
        } else {
            format!("webhook {}: request failed", self.shown_url)
        };
        // The URL is in the message already, without a password.
        DeliveryError::with_source(message, error.without_url())
    }
}

#[async_trait]
impl Delivery for WebhookDelivery {
    async fn deliver(&self, event: &OutboxEvent) -> std::result::Result<(), DeliveryError> {
        let body = event.body();
        let headers = self.request_headers(event, &body)?;
        let response = self
            .client
            .post(self.url.clone())
            .headers(headers)
            .body(body)
            .timeout(self.timeout)
            .send()
            .await
            .map_err(|e| self.send_error(e))?;
        let status = response.status();
        if status.is_success() {
            drain(response).await;
            return Ok(());
        }
        let location = response
            .headers()
            .get(LOCATION)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let snippet = body_snippet(response).await;
        let mut message = format!(
            "webhook {} answered {}",
            self.shown_url,
            show_status(status)
        );
        if status.is_redirection() {
            message.push_str(" (redirects are not followed");
            if let Some(location) = location {
                message.push_str("; location: ");
                message.push_str(&location);
            }
            message.push(')');
        }
        if !snippet.is_empty() {
            message.push_str(": ");
            message.push_str(&snippet);
        }
        Err(DeliveryError::new(message))
    }
}

/// The signature of `body` under `secret`: `"sha256=<lowercase hex HMAC-SHA256 of body>"`, the
/// value of the signature header (seed 001 § WebhookDelivery). 64 hex digits after the prefix.
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    let mut mac = new_mac(secret);
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Whether `header_value` is the signature of `body` under `secret`, for receivers (DESIGN §9.9).
///
/// Accepts `sha256=<hex>` with hex digits in either case and whitespace around the value;
/// anything else (another algorithm, no prefix, wrong length) is `false`. The digest comparison
/// takes constant time, so it leaks nothing about the expected signature.
pub fn verify_signature(secret: &[u8], body: &[u8], header_value: &str) -> bool {
    let Some(hex_digest) = header_value.trim().strip_prefix("sha256=") else {
        return false;
    };
    let Ok(expected) = hex::decode(hex_digest) else {
        return false;
    };
    let mut mac = new_mac(secret);
    mac.update(body);
    mac.verify_slice(&expected).is_ok()
}

fn new_mac(secret: &[u8]) -> HmacSha256 {
    // HMAC takes keys of any length (long keys are hashed), so this never fails.
    match <HmacSha256 as KeyInit>::new_from_slice(secret) {
        Ok(mac) => mac,
        Err(_) => unreachable!("HMAC accepts keys of every length"),
    }
}

/// A header name the request may carry, or why not.
fn header_name(name: &str) -> std::result::Result<HeaderName, String> {
    let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
        format!(
            "header name {name:?} is not an HTTP header name; names are non-empty tokens of \
             letters, digits and !#$%&'*+-.^_`|~"
        )
    })?;
    if RESERVED_HEADERS.contains(&header.as_str()) {
        return Err(format!(
            "header {name:?} is set by the HTTP client itself and cannot be set; reserved are {}",
            RESERVED_HEADERS.join(", ")
        ));
    }
    Ok(header)
}

/// `value` as its UTF-8 bytes, or why it cannot be sent.
fn header_value(name: &str, value: &str) -> std::result::Result<HeaderValue, String> {
    HeaderValue::from_bytes(value.as_bytes()).map_err(|_| {
        format!(
            "the value of header {name:?} holds control characters (e.g. a line break), which \
             HTTP header values cannot carry; any other UTF-8 text is allowed"
        )
    })
}

/// The URL as messages show it: a password in it becomes `***`.
fn shown(url: &Url) -> String {
    if url.password().is_some() {
        let mut hidden = url.clone();
        if hidden.set_password(Some("***")).is_ok() {
            return hidden.to_string();
        }
    }
    url.to_string()
}

/// `"500 Internal Server Error"`, or just `"599"` for a code without a reason phrase.
fn show_status(status: StatusCode) -> String {
    match status.canonical_reason() {
        Some(reason) => format!("{} {reason}", status.as_u16()),
        None => status.as_u16().to_string(),
    }
}

/// Up to [`ERROR_BODY_CHARS`] characters of the answer's body (lossy UTF-8, NUL as U+FFFD so the
/// message can be stored in PostgreSQL text), with `…` when there was more. Reads no more than
/// it needs; a body that fails midway gives what arrived.
async fn body_snippet(mut response: Response) -> String {
    let limit = ERROR_BODY_CHARS * 4 + 4;
    let mut bytes: Vec<u8> = Vec::new();
    let mut more = false;
    while bytes.len() <= limit {
        match response.chunk().await {
            Ok(Some(chunk)) => bytes.extend_from_slice(&chunk),
            Ok(None) | Err(_) => break,
        }
    }
    if bytes.len() > limit {
        more = true;
    }
    let text = String::from_utf8_lossy(&bytes);
    let text = text.trim_end();
    let mut snippet: String = text
        .chars()
        .take(ERROR_BODY_CHARS)
        .map(|c| if c == '\0' { '\u{FFFD}' } else { c })
        .collect();
    if more || text.chars().nth(ERROR_BODY_CHARS).is_some() {
        snippet.push('…');
    }
    snippet
}

/// Reads a successful answer's body (up to [`DRAIN_LIMIT`] bytes) so its connection returns to
/// the pool. Errors are ignored: the event was delivered.
async fn drain(mut response: Response) {
    let mut read = 0usize;
    while read <= DRAIN_LIMIT {
        match response.chunk().await {
            Ok(Some(chunk)) => read += chunk.len(),
            Ok(None) | Err(_) => return,
        }
    }
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(cause) = next {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        next = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 4231 test case 2.
    #[test]
    fn sign_matches_rfc_4231_case_2() {
        assert_eq!(
            sign(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn verify_accepts_own_signature_and_rejects_others() {
        let header = sign(b"k", b"body");
        assert!(verify_signature(b"k", b"body", &header));
        assert!(verify_signature(
            b"k",
            b"body",
            &header.to_uppercase().replace("SHA256=", "sha256=")
        ));
        assert!(verify_signature(b"k", b"body", &format!(" {header} ")));
        assert!(!verify_signature(b"k", b"body!", &header));
        assert!(!verify_signature(b"other", b"body", &header));
        assert!(!verify_signature(
            b"k",
            b"body",
            header.trim_start_matches("sha256=")
        ));
        assert!(!verify_signature(
            b"k",
            b"body",
            &header[..header.len() - 2]
        ));
        assert!(!verify_signature(b"k", b"body", "sha256=zz"));
        assert!(!verify_signature(b"k", b"body", ""));
    }

    #[test]
    fn debug_hides_secret_password_and_header_values() {
        let delivery = WebhookDelivery::new("https://user:hunter2@example.com/hook")
            .unwrap()
            .with_secret("s3cr3t-key")
            .with_header("authorization", "Bearer tok-123")
            .unwrap();
        let text = format!("{delivery:?}");
        assert!(!text.contains("s3cr3t-key"), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(!text.contains("tok-123"), "{text}");
        assert!(text.contains("authorization"), "{text}");
        assert!(text.contains("<redacted>"), "{text}");
    }

    #[test]
    fn status_shows_reason() {
        assert_eq!(
            show_status(StatusCode::INTERNAL_SERVER_ERROR),
            "500 Internal Server Error"
        );
        assert_eq!(show_status(StatusCode::from_u16(599).unwrap()), "599");
    }
}
