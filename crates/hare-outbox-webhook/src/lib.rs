//! HTTP webhook delivery of hare-outbox.
//!
//! [`WebhookDelivery`] POSTs every event to one URL, or — built with a target function — to the
//! URL of the event's own subscriber ([`WebhookTarget`]: URL, signing secret, headers). The body
//! is [`OutboxEvent::body`] (the payload as compact JSON), the headers are the configured ones,
//! then the target's, then the event's [`OutboxEvent::message_headers`] (among them
//! `hare-outbox-event-id` and `hare-outbox-topic`), then — when a secret is set — a signature
//! header `sha256=<hex HMAC-SHA256 of the body>`. Any answer but 2xx is a failure; redirects are
//! never followed. An `allows_url` check refuses URLs before any request (against requests into
//! the service's own network). A delivery only sends: the relay retries failed events and
//! dead-letters them. With [`RelayConfig::result_column`](hare_outbox_core::RelayConfig) set, the
//! relay stores each attempt's [`WebhookResult`] in that column.
//!
//! What is shown never carries the URL's secrets: messages, `last_error`, the
//! [`WebhookResult`] and `Debug` give only the scheme, host and port
//! (`webhook https://billing.example.com/… answered 503 Service Unavailable`), a redirect's
//! `Location` likewise, and the stored answer body has every path segment and query value of 4
//! or more characters of the URL cut out (`***`), since webhook URLs often carry their token in
//! the path or query. [`WebhookDeliveryBuilder::with_public_url`] shows the path (the password
//! and query values stay hidden). Values of credential headers (`authorization`, `*-token`,
//! `*-key`, …) are `***` in `Debug`. See [`hare_outbox_core::redact`].
//!
//! Receivers check the signature with [`verify_signature`] and drop duplicates by
//! `hare-outbox-event-id` (delivery is at least once); [`receiver::read_request`] does both
//! checks and returns a [`ReceivedEvent`](hare_outbox_core::ReceivedEvent), and with the `axum`
//! feature [`receiver::VerifiedEvent`] is the same as an axum extractor.
//!
//! ```no_run
//! use std::time::Duration;
//! use hare_outbox_webhook::WebhookDelivery;
//!
//! # fn main() -> hare_outbox_core::Result<()> {
//! let secret = std::env::var("BILLING_WEBHOOK_SECRET").unwrap_or_default();
//! let delivery = WebhookDelivery::new("https://billing.example.com/events")?
//!     .with_secret(secret)?
//!     .with_timeout(Duration::from_secs(5))
//!     .with_header("authorization", "Bearer 3f9a")?;
//! // Hand `delivery` to an `OutboxRelay`, alone or behind a `TopicRouter`.
//! # let _ = delivery;
//! # Ok(())
//! # }
//! ```
//!
//! One subscriber per event, its URL and secret looked up from the event:
//!
//! ```no_run
//! use hare_outbox_core::{DeliveryError, OutboxEvent};
//! use hare_outbox_webhook::{WebhookDelivery, WebhookTarget};
//!
//! # fn main() -> hare_outbox_core::Result<()> {
//! let delivery = WebhookDelivery::builder()
//!     .with_target(|event: OutboxEvent| async move {
//!         // e.g. load the subscription named by an extra column of the event
//!         let subscription = event.extra.get("subscription_id").cloned();
//!         let _ = subscription;
//!         Ok::<_, DeliveryError>(
//!             WebhookTarget::new("https://hooks.example.com/in").with_secret("per-subscriber"),
//!         )
//!     })
//!     .with_allows_url(|url| url.scheme() == "https")
//!     .build()?;
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

mod config;

pub use config::WebhookDeliveryConfig;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use futures::future::BoxFuture;
use hare_outbox_core::redact::{self, UrlKind};
use hare_outbox_core::{
    Delivery, DeliveryError, DeliveryErrorKind, DeliveryReport, Error, OutboxEvent, Result,
};
use hmac::{Hmac, KeyInit, Mac};
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, LOCATION, RETRY_AFTER};
use reqwest::{Client, Response, StatusCode, redirect};
use sha2::Sha256;

/// Re-exported for the [`reqwest::header::HeaderMap`] that [`receiver::read_request`] takes
/// (the `http` crate's, as axum's).
pub use reqwest;
pub use reqwest::Url;

pub mod receiver;

/// The header that carries the signature unless [`WebhookDelivery::with_signature_header`]
/// names another.
pub const DEFAULT_SIGNATURE_HEADER: &str = "hare-outbox-signature";

/// The per-request timeout unless [`WebhookDelivery::with_timeout`] sets another: 10 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// How many characters of a failed answer's body a [`DeliveryError`] carries.
pub const ERROR_BODY_CHARS: usize = 200;

/// How many characters of the answer's body and of the error a [`WebhookResult`] keeps: 4000.
pub const RESULT_TEXT_CHARS: usize = 4000;

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

/// How many bytes of an answer are read so the connection can be reused; a longer body is
/// dropped with its connection.
const DRAIN_LIMIT: usize = 64 * 1024;

/// How many bytes of an answer's body are kept: enough for [`RESULT_TEXT_CHARS`] characters of
/// up to four bytes each, and one more to tell that the body was longer.
const KEPT_BODY_BYTES: usize = RESULT_TEXT_CHARS * 4 + 4;

type HmacSha256 = Hmac<Sha256>;

type TargetFn = Arc<
    dyn Fn(&OutboxEvent) -> BoxFuture<'static, std::result::Result<WebhookTarget, DeliveryError>>
        + Send
        + Sync,
>;

type AllowsUrlFn = Arc<dyn Fn(&Url) -> BoxFuture<'static, bool> + Send + Sync>;

/// Where one event goes: the URL, signing secret and headers of its subscriber, as the target
/// function of [`WebhookDeliveryBuilder::with_target`] gives them.
///
/// The URL is checked when the event is sent: one that does not parse or is not `http`/`https`
/// fails that event (recorded and retried like any failure).
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookTarget {
    url: String,
    secret: Option<Vec<u8>>,
    headers: Vec<(String, String)>,
}

impl std::fmt::Debug for WebhookTarget {
    /// Shows the scheme and host of the URL and the headers, credential header values
    /// (`authorization`, `*-token`, `*-key`, …) as `***`; never the secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookTarget")
            .field("url", &redact::redact_url(&self.url, UrlKind::Endpoint))
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .field("headers", &shown_headers(&self.headers))
            .finish()
    }
}

impl WebhookTarget {
    /// A target at `url`, without a secret (no signature) and without headers.
    pub fn new(url: impl Into<String>) -> Self {
        WebhookTarget {
            url: url.into(),
            secret: None,
            headers: Vec::new(),
        }
    }

    /// Signs the requests to this target with HMAC-SHA256 under `secret`. Unset by default.
    pub fn with_secret(mut self, secret: impl Into<Vec<u8>>) -> Self {
        self.secret = Some(secret.into());
        self
    }

    /// Adds the header `name: value` to the requests to this target. It replaces a configured
    /// header of the same name; an event header of that name and the signature replace it. A
    /// name or value HTTP cannot carry fails the event (see [`WebhookDelivery`]).
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The signing secret, if any.
    pub fn secret(&self) -> Option<&[u8]> {
        self.secret.as_deref()
    }

    /// The headers, in the order added.
    pub fn headers(&self) -> &[(String, String)] {
        &self.headers
    }
}

/// The record of one attempt, which the relay stores in its
/// [`result_column`](hare_outbox_core::RelayConfig): as JSON `{"status_code": int|null, "body":
/// str|null, "error": str|null}`.
///
/// `status_code` and `body` are `null` when no answer came (refused URL, connection error,
/// timeout); `error` is `null` after a 2xx. `body` and `error` are cut to
/// [`RESULT_TEXT_CHARS`] characters; the body is read as lossy UTF-8, and NUL becomes U+FFFD in
/// both (PostgreSQL's JSON cannot hold it).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
#[non_exhaustive]
pub struct WebhookResult {
    /// The answer's status code, if an answer came.
    pub status_code: Option<u16>,
    /// The answer's body, if an answer came.
    pub body: Option<String>,
    /// Why the attempt failed, if it did.
    pub error: Option<String>,
}

impl WebhookResult {
    /// The record as the JSON object stored in the result column.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "status_code": self.status_code,
            "body": self.body,
            "error": self.error,
        })
    }

    fn failed(error: &DeliveryError) -> Self {
        WebhookResult {
            status_code: None,
            body: None,
            error: Some(result_text(&error.chain())),
        }
    }
}

/// Where a [`WebhookDelivery`] sends.
#[derive(Clone)]
enum Destination {
    /// One URL for every event, with the delivery's secret.
    Url {
        url: Url,
        /// The URL as messages show it (see [`WebhookDeliveryBuilder::with_public_url`]).
        shown: String,
        secret: Option<Vec<u8>>,
    },
    /// Per event, from the target function.
    Target { target: TargetFn },
}

/// Why a delivery-wide secret is refused together with a target.
const SECRET_WITH_TARGET: &str = "webhook delivery has a secret and a target; with a target the signing secret belongs to the WebhookTarget (WebhookTarget::with_secret)";

/// Delivers events by HTTP POST, to one URL or to each event's [`WebhookTarget`].
///
/// Per event it sends one request:
/// - method `POST` to the URL (the delivery's, or the target's), body exactly
///   [`OutboxEvent::body`], `content-type: application/json`;
/// - the headers set with [`WebhookDelivery::with_header`], then the target's headers, then the
///   event's [`OutboxEvent::message_headers`]; a later header replaces an earlier one of the same
///   name (names compare case-insensitively); values are sent as their UTF-8 bytes;
/// - with a secret (the delivery's, or the target's), the signature header
///   ([`DEFAULT_SIGNATURE_HEADER`] unless [`WebhookDelivery::with_signature_header`] says
///   otherwise) carrying [`sign`] of the body; it replaces any header of the same name.
///
/// Before every request the URL is passed to the `allows_url` function, when one is set; a URL
/// it refuses is not requested and the event fails.
///
/// An event fails (a [`DeliveryError`], which the relay retries and eventually dead-letters) when
/// the target function fails or gives a URL that does not parse or is not `http`/`https`, when
/// `allows_url` refuses the URL, when the answer is not 2xx — 3xx included, since redirects are
/// never followed, so the URL checked is the URL requested —, on a connection error, when the
/// request and the answer take longer than the timeout, and when one of its headers cannot be
/// sent over HTTP (a name that is not an HTTP token, a value with control characters, or one of
/// the framing headers `content-length`, `transfer-encoding`, `host`, `connection`, `te`,
/// `trailer`, `upgrade`, `keep-alive`, `proxy-connection`).
///
/// Failures are classified for the relay ([`DeliveryErrorKind`]): a connection error, a timeout,
/// a 5xx, 408 or 429 answer is an outage (it counts towards the destination's circuit breaker);
/// with a `Retry-After` (seconds or an HTTP date) on a 429 or 5xx the event is tried again that
/// much later (at most the relay's `retry_max`), and an opening breaker waits at least as long;
/// 410 Gone and 413 Content Too Large are permanent (the event is dead-lettered at once); any
/// other answer (400, 404, a redirect) is the event's own fault: it counts an attempt and leaves
/// the breaker alone. A target function's error keeps its kind. With per-event targets each
/// target's `host:port` is a destination of its own ([`Delivery::destination_of`]).
///
/// The relay gets a [`WebhookResult`] for every attempt through
/// [`Delivery::deliver_batch_reported`].
///
/// One HTTP client (with its connection pool) is built with the delivery and used for every
/// request. Proxies from the usual environment variables (`HTTPS_PROXY`, `NO_PROXY`, …) apply.
#[derive(Clone)]
pub struct WebhookDelivery {
    client: Client,
    destination: Destination,
    /// Targets looked up for [`Delivery::destination_of`], kept for the send that follows.
    resolved: Arc<std::sync::Mutex<ResolvedTargets>>,
    timeout: Duration,
    headers: HeaderMap,
    signature_header: HeaderName,
    allows_url: Option<AllowsUrlFn>,
    public_url: bool,
}

impl std::fmt::Debug for WebhookDelivery {
    /// Shows the URL as messages show it or that targets are per event, the timeout, the
    /// signature header and the configured headers, credential header values
    /// (`authorization`, `*-token`, `*-key`, …) as `***`; never a secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let header_names: Vec<(String, String)> = self
            .headers
            .iter()
            .map(|(name, value)| {
                let value = String::from_utf8_lossy(value.as_bytes());
                (
                    name.as_str().to_owned(),
                    redact::header_value(name.as_str(), &value).into_owned(),
                )
            })
            .collect();
        let mut out = f.debug_struct("WebhookDelivery");
        match &self.destination {
            Destination::Url { shown, secret, .. } => out
                .field("url", shown)
                .field("secret", &secret.as_ref().map(|_| "<redacted>")),
            Destination::Target { .. } => out.field("target", &"<per event>"),
        };
        out.field("timeout", &self.timeout)
            .field("headers", &header_names)
            .field("signature_header", &self.signature_header.as_str())
            .field("allows_url", &self.allows_url.is_some())
            .field("public_url", &self.public_url)
            .finish()
    }
}

/// Builds a [`WebhookDelivery`]; every check runs in [`WebhookDeliveryBuilder::build`].
#[derive(Default)]
#[must_use]
pub struct WebhookDeliveryBuilder {
    url: Option<String>,
    target: Option<TargetFn>,
    secret: Option<Vec<u8>>,
    timeout: Option<Duration>,
    headers: Vec<(String, String)>,
    signature_header: Option<String>,
    allows_url: Option<AllowsUrlFn>,
    public_url: bool,
}

impl std::fmt::Debug for WebhookDeliveryBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookDeliveryBuilder")
            .field(
                "url",
                &self
                    .url
                    .as_deref()
                    .map(|url| redact::redact_url(url, UrlKind::Endpoint)),
            )
            .field("target", &self.target.is_some())
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .field("signature_header", &self.signature_header)
            .field("allows_url", &self.allows_url.is_some())
            .field("public_url", &self.public_url)
            .finish()
    }
}

impl WebhookDeliveryBuilder {
    /// Whether the URLs of this delivery may be shown with their path. Off by default: logs,
    /// `last_error`, result records and the dashboard show only the scheme, host and port
    /// (`webhook https://hooks.example.com/… answered 503`), because webhook URLs often carry a
    /// token in their path or query (`/hook/T000/B000/XXXX`, `?token=…`), and the answer's body
    /// loses every path segment and query value of 4 or more characters of the URL that it
    /// echoes. On (`url_public = true` in the command's config): the path is shown; the userinfo
    /// password and every query value are still `***`, and cut from answers.
    pub fn with_public_url(mut self, public: bool) -> Self {
        self.public_url = public;
        self
    }

    /// Sends every event to `url` (an absolute `http` or `https` URL). Exclusive with
    /// [`with_target`](Self::with_target).
    pub fn with_url(mut self, url: impl Into<String>) -> Self {
        self.url = Some(url.into());
        self
    }

    /// Sends each event where `target(event)` says: its URL, secret and headers. The function is
    /// async (e.g. it loads the event's subscription); an `Err` fails the event, which the relay
    /// retries. Exclusive with [`with_url`](Self::with_url) and with a delivery-wide
    /// [`with_secret`](Self::with_secret).
    pub fn with_target<F, Fut>(mut self, target: F) -> Self
    where
        F: Fn(OutboxEvent) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<WebhookTarget, DeliveryError>> + Send + 'static,
    {
        self.target = Some(Arc::new(move |event: &OutboxEvent| {
            Box::pin(target(event.clone())) as BoxFuture<'static, _>
        }));
        self
    }

    /// Like [`with_target`](Self::with_target) with a plain function.
    pub fn with_sync_target<F>(mut self, target: F) -> Self
    where
        F: Fn(&OutboxEvent) -> std::result::Result<WebhookTarget, DeliveryError>
            + Send
            + Sync
            + 'static,
    {
        self.target = Some(Arc::new(move |event: &OutboxEvent| {
            Box::pin(std::future::ready(target(event))) as BoxFuture<'static, _>
        }));
        self
    }

    /// Signs every request under `secret`; only with [`with_url`](Self::with_url) — with a
    /// target the secret belongs to the [`WebhookTarget`]. Unset by default.
    pub fn with_secret(mut self, secret: impl Into<Vec<u8>>) -> Self {
        self.secret = Some(secret.into());
        self
    }

    /// The time one request may take. Defaults to [`DEFAULT_TIMEOUT`] (10 s).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sends the header `name: value` with every request; checked by
    /// [`build`](Self::build) as in [`WebhookDelivery::with_header`].
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Sends the signature in the header `name`. Defaults to [`DEFAULT_SIGNATURE_HEADER`].
    pub fn with_signature_header(mut self, name: impl Into<String>) -> Self {
        self.signature_header = Some(name.into());
        self
    }

    /// Calls `allows(url)` before every request; `false` refuses the URL: the event is not sent
    /// and fails (retried like any failure, dead-lettered when attempts run out). For keeping
    /// requests out of the service's own network.
    /// Unset by default: every URL is allowed.
    pub fn with_allows_url<F>(mut self, allows: F) -> Self
    where
        F: Fn(&Url) -> bool + Send + Sync + 'static,
    {
        self.allows_url = Some(sync_allows(allows));
        self
    }

    /// Like [`with_allows_url`](Self::with_allows_url) with an async function (e.g. one that
    /// resolves the host name).
    pub fn with_allows_url_async<F, Fut>(mut self, allows: F) -> Self
    where
        F: Fn(Url) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = bool> + Send + 'static,
    {
        self.allows_url = Some(Arc::new(move |url: &Url| {
            Box::pin(allows(url.clone())) as BoxFuture<'static, bool>
        }));
        self
    }

    /// The delivery.
    ///
    /// # Errors
    /// [`Error::Configuration`] naming the problem when neither or both of `url` and `target`
    /// are set, when a secret is set together with a target (in either order), when the timeout
    /// is zero, when the URL does not parse or is
    /// not `http`/`https`, when a header or the signature header name is refused (see
    /// [`WebhookDelivery::with_header`]), or when the HTTP client cannot be built.
    pub fn build(self) -> Result<WebhookDelivery> {
        if self.timeout.is_some_and(|t| t.is_zero()) {
            return Err(Error::configuration(
                "webhook delivery timeout is 0; give each request a positive time (default 10 s)",
            ));
        }
        let destination = match (self.url, self.target) {
            (None, None) => {
                return Err(Error::configuration(
                    "webhook delivery needs a url or a target; set exactly one of them",
                ));
            }
            (Some(url), Some(_)) => {
                return Err(Error::configuration(format!(
                    "webhook delivery has both a url ({}) and a target; set exactly one of them",
                    shown(&url, self.public_url)
                )));
            }
            (Some(url), None) => {
                let url = parse_url(&url, self.public_url).map_err(Error::configuration)?;
                Destination::Url {
                    shown: shown(url.as_str(), self.public_url),
                    url,
                    secret: self.secret,
                }
            }
            (None, Some(target)) => {
                if self.secret.is_some() {
                    return Err(Error::configuration(SECRET_WITH_TARGET));
                }
                Destination::Target { target }
            }
        };
        let client = Client::builder()
            .redirect(redirect::Policy::none())
            .user_agent(concat!("hare-outbox-webhook/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| {
                Error::configuration(format!(
                    "building the HTTP client of the webhook delivery failed: {}",
                    error_chain(&e)
                ))
            })?;
        let mut delivery = WebhookDelivery {
            client,
            destination,
            resolved: Arc::default(),
            timeout: self.timeout.unwrap_or(DEFAULT_TIMEOUT),
            headers: HeaderMap::new(),
            signature_header: HeaderName::from_static(DEFAULT_SIGNATURE_HEADER),
            allows_url: self.allows_url,
            public_url: self.public_url,
        };
        for (name, value) in &self.headers {
            delivery = delivery.with_header(name, value)?;
        }
        if let Some(name) = &self.signature_header {
            delivery = delivery.with_signature_header(name)?;
        }
        Ok(delivery)
    }
}

impl WebhookDelivery {
    /// A delivery to `url` (an absolute `http` or `https` URL), without a secret (no signature),
    /// with a timeout of [`DEFAULT_TIMEOUT`] (10 s) per request, no extra headers and the
    /// signature header [`DEFAULT_SIGNATURE_HEADER`]. Shorthand for
    /// `WebhookDelivery::builder().with_url(url).build()`.
    ///
    /// # Errors
    /// [`Error::Configuration`] naming the value when `url` does not parse or its scheme is not
    /// `http` or `https`, or when the HTTP client cannot be built (no TLS roots available).
    pub fn new(url: impl Into<String>) -> Result<Self> {
        WebhookDelivery::builder().with_url(url).build()
    }

    /// A builder, for a delivery with a per-event target or with everything checked at once.
    pub fn builder() -> WebhookDeliveryBuilder {
        WebhookDeliveryBuilder::default()
    }

    /// Signs every request with HMAC-SHA256 under `secret`. Unset by default: no signature header
    /// is sent. Any length is accepted, the empty secret included (which anyone can forge — make
    /// sure the secret was really found).
    ///
    /// # Errors
    /// [`Error::Configuration`] for a delivery built with a target: there the secret belongs to
    /// each [`WebhookTarget`] ([`WebhookTarget::with_secret`]), as
    /// [`WebhookDeliveryBuilder::build`] also says for the same combination.
    pub fn with_secret(mut self, secret: impl Into<Vec<u8>>) -> Result<Self> {
        match &mut self.destination {
            Destination::Url { secret: kept, .. } => *kept = Some(secret.into()),
            Destination::Target { .. } => return Err(Error::configuration(SECRET_WITH_TARGET)),
        }
        Ok(self)
    }

    /// The time one request may take, from connecting until the answer's body is read;
    /// [`DEFAULT_TIMEOUT`] (10 s) unless set. A slower request fails.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sends the header `name: value` with every request. Setting a name again replaces its value;
    /// a target's or the event's header of the same name replaces it for that event, and the
    /// signature header always wins.
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
    /// receivers that expect their own (e.g. `X-Webhook-Signature`). Only used with a secret.
    ///
    /// # Errors
    /// [`Error::Configuration`] naming the value when `name` is not an HTTP header name or is one
    /// of the framing headers (`content-length`, `host`, …).
    pub fn with_signature_header(mut self, name: &str) -> Result<Self> {
        self.signature_header = header_name(name)
            .map_err(|e| Error::configuration(format!("signature header: {e}")))?;
        Ok(self)
    }

    /// Calls `allows(url)` before every request; see
    /// [`WebhookDeliveryBuilder::with_allows_url`]. Unset by default: every URL is allowed.
    pub fn with_allows_url<F>(mut self, allows: F) -> Self
    where
        F: Fn(&Url) -> bool + Send + Sync + 'static,
    {
        self.allows_url = Some(sync_allows(allows));
        self
    }

    /// Whether the URLs of this delivery may be shown with their path; see
    /// [`WebhookDeliveryBuilder::with_public_url`]. Off by default.
    pub fn with_public_url(mut self, public: bool) -> Self {
        self.public_url = public;
        if let Destination::Url {
            url, shown: kept, ..
        } = &mut self.destination
        {
            *kept = shown(url.as_str(), public);
        }
        self
    }

    /// Sends `event` once: the result, and the record of the attempt.
    async fn attempt(
        &self,
        event: &OutboxEvent,
    ) -> (std::result::Result<(), DeliveryError>, WebhookResult) {
        match self.send(event).await {
            Ok(result) => (Ok(()), result),
            Err((error, result)) => (Err(error), result),
        }
    }

    async fn send(
        &self,
        event: &OutboxEvent,
    ) -> std::result::Result<WebhookResult, (DeliveryError, WebhookResult)> {
        let fail = |error: DeliveryError| {
            let result = WebhookResult::failed(&error);
            (error, result)
        };
        let (url, shown_url, secret, target_headers) = match &self.destination {
            Destination::Url { url, shown, secret } => {
                (url.clone(), shown.clone(), secret.clone(), Vec::new())
            }
            Destination::Target { target } => {
                let cached = self.take_resolved(event);
                let target = match cached {
                    Some(target) => target,
                    None => target(event).await.map_err(|e| {
                        let kind = e.kind();
                        fail(
                            DeliveryError::with_source(
                                format!("the webhook target of event {} failed", event.id),
                                e,
                            )
                            .with_kind(kind),
                        )
                    })?,
                };
                let url = parse_url(&target.url, self.public_url).map_err(|e| {
                    fail(DeliveryError::new(format!(
                        "the webhook target of event {}: {e}",
                        event.id
                    )))
                })?;
                let shown_url = shown(url.as_str(), self.public_url);
                (url, shown_url, target.secret, target.headers)
            }
        };
        if let Some(allows) = &self.allows_url
            && !allows(&url).await
        {
            return Err(fail(DeliveryError::new(format!(
                "webhook url {shown_url} was refused by allows_url; event {} was not sent",
                event.id
            ))));
        }
        let parts = answer_secrets(&url, self.public_url);
        let body = event.body();
        let headers = self
            .request_headers(event, &body, &shown_url, secret.as_deref(), &target_headers)
            .map_err(fail)?;
        let response = self
            .client
            .post(url.clone())
            .headers(headers)
            .body(body)
            .timeout(self.timeout)
            .send()
            .await
            .map_err(|e| fail(self.send_error(&shown_url, e)))?;
        let status = response.status();
        let location = response
            .headers()
            .get(LOCATION)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let headers_of_answer = response.headers().get(RETRY_AFTER).cloned();
        let (text, more) = read_body(response).await;
        let text = redact::without_parts(&text, &parts);
        let result = WebhookResult {
            status_code: Some(status.as_u16()),
            body: Some(result_text(&text)),
            error: None,
        };
        if status.is_success() {
            return Ok(result);
        }
        let retry_after = response_retry_after(&headers_of_answer);
        let mut message = format!("webhook {shown_url} answered {}", show_status(status));
        if status.is_redirection() {
            message.push_str(" (redirects are not followed");
            if let Some(location) = location {
                // A redirect target may carry a token: scheme and host only.
                let location = url
                    .join(&location)
                    .map(|to| redact::redact_url(to.as_str(), UrlKind::Endpoint))
                    .unwrap_or_else(|_| "<unparsable>".to_owned());
                message.push_str("; location: ");
                message.push_str(&location);
            }
            message.push(')');
        }
        let snippet = snippet(&text, more);
        if !snippet.is_empty() {
            message.push_str(": ");
            message.push_str(&snippet);
        }
        let kind = status_kind(status, retry_after);
        if let DeliveryErrorKind::RetryAfter(after) = kind {
            message.push_str(&format!(" (retry after {:.3} s)", after.as_secs_f64()));
        }
        let error = DeliveryError::new(message).with_kind(kind);
        let result = WebhookResult {
            error: Some(result_text(&error.chain())),
            ..result
        };
        Err((error, result))
    }

    /// The headers of the request for `event` with `body`.
    fn request_headers(
        &self,
        event: &OutboxEvent,
        body: &[u8],
        shown_url: &str,
        secret: Option<&[u8]>,
        target_headers: &[(String, String)],
    ) -> std::result::Result<HeaderMap, DeliveryError> {
        let mut headers = HeaderMap::with_capacity(self.headers.len() + 8);
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        for (name, value) in &self.headers {
            headers.insert(name.clone(), value.clone());
        }
        let refused = |reason: String| {
            DeliveryError::new(format!(
                "event {} cannot be sent to webhook {shown_url}: {reason}",
                event.id
            ))
        };
        for (name, value) in target_headers
            .iter()
            .cloned()
            .chain(event.message_headers())
        {
            let header = header_name(&name).map_err(refused)?;
            let value = header_value(&name, &value).map_err(refused)?;
            headers.insert(header, value);
        }
        if let Some(secret) = secret {
            let signature = HeaderValue::from_str(&sign(secret, body))
                .map_err(|e| DeliveryError::with_source("signature is not a header value", e))?;
            headers.insert(self.signature_header.clone(), signature);
        }
        Ok(headers)
    }

    fn send_error(&self, shown_url: &str, error: reqwest::Error) -> DeliveryError {
        let message = if error.is_timeout() {
            format!(
                "webhook {shown_url} timed out after {:.3} s",
                self.timeout.as_secs_f64()
            )
        } else if error.is_connect() {
            format!("webhook {shown_url}: connecting failed")
        } else {
            format!("webhook {shown_url}: request failed")
        };
        // The URL is in the message already, without a password.
        DeliveryError::with_source(message, error.without_url())
            .with_kind(DeliveryErrorKind::Outage)
    }

    /// A target looked up for `event` by [`Delivery::destination_of`] a moment ago.
    fn take_resolved(&self, event: &OutboxEvent) -> Option<WebhookTarget> {
        let mut resolved = self
            .resolved
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (at, target) = resolved.remove(&event.id)?;
        (at.elapsed() <= RESOLVED_FOR).then_some(target)
    }
}

/// Targets looked up ahead of their send, by event id, with when.
type ResolvedTargets = std::collections::HashMap<uuid::Uuid, (std::time::Instant, WebhookTarget)>;

/// How long a target looked up by [`Delivery::destination_of`] is used for its event's send;
/// an older one is looked up again.
const RESOLVED_FOR: Duration = Duration::from_secs(30);

/// Most targets kept between their look-up and their send.
const RESOLVED_MAX: usize = 10_000;

/// How a failed answer counts: see [`WebhookDelivery`].
fn status_kind(status: StatusCode, retry_after: Option<Duration>) -> DeliveryErrorKind {
    let outage = status.is_server_error()
        || status == StatusCode::TOO_MANY_REQUESTS
        || status == StatusCode::REQUEST_TIMEOUT;
    match (status, retry_after) {
        (StatusCode::GONE | StatusCode::PAYLOAD_TOO_LARGE, _) => DeliveryErrorKind::Permanent,
        (_, Some(after)) if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() => {
            DeliveryErrorKind::RetryAfter(after)
        }
        _ if outage => DeliveryErrorKind::Outage,
        _ => DeliveryErrorKind::Event,
    }
}

/// The wait a `Retry-After` header asks for: delay-seconds, or an HTTP date (a date in the past
/// asks for no wait). `None` without the header or with a value that is neither.
fn response_retry_after(value: &Option<HeaderValue>) -> Option<Duration> {
    let text = value.as_ref()?.to_str().ok()?.trim();
    if let Ok(seconds) = text.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(text).ok()?;
    Some(
        at.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

#[async_trait]
impl Delivery for WebhookDelivery {
    async fn deliver(&self, event: &OutboxEvent) -> std::result::Result<(), DeliveryError> {
        self.attempt(event).await.0
    }

    /// With per-event targets, the `host:port` of `event`'s target (looked up now and kept
    /// for the send that follows); `None` for a delivery to one URL, or when the target
    /// cannot be looked up (the send then fails with the reason).
    async fn destination_of(&self, event: &OutboxEvent) -> Option<String> {
        let Destination::Target { target } = &self.destination else {
            return None;
        };
        let found = target(event).await.ok()?;
        let url = Url::parse(found.url()).ok()?;
        let host = format!("{}:{}", url.host_str()?, url.port_or_known_default()?);
        let mut resolved = self
            .resolved
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if resolved.len() >= RESOLVED_MAX {
            resolved.retain(|_, (at, _)| at.elapsed() <= RESOLVED_FOR);
            if resolved.len() >= RESOLVED_MAX {
                resolved.clear();
            }
        }
        resolved.insert(event.id, (std::time::Instant::now(), found));
        Some(host)
    }

    /// Sends up to `concurrency` events at once, each within `timeout`, and reports each
    /// attempt's [`WebhookResult`] as its record.
    async fn deliver_batch_reported(
        &self,
        events: &[OutboxEvent],
        concurrency: usize,
        timeout: Duration,
    ) -> Vec<DeliveryReport> {
        let sends: Vec<BoxFuture<'_, DeliveryReport>> = events
            .iter()
            .map(|event| {
                Box::pin(async move {
                    let (result, record) =
                        match tokio::time::timeout(timeout, self.attempt(event)).await {
                            Ok(attempt) => attempt,
                            Err(_) => {
                                let error = DeliveryError::outage(format!(
                                    "delivery timed out after {:.3} s",
                                    timeout.as_secs_f64()
                                ));
                                let record = WebhookResult::failed(&error);
                                (Err(error), record)
                            }
                        };
                    DeliveryReport::new(result).with_record(record.to_json())
                }) as BoxFuture<'_, DeliveryReport>
            })
            .collect();
        futures::stream::iter(sends)
            .buffered(concurrency.max(1))
            .collect()
            .await
    }
}

fn sync_allows<F>(allows: F) -> AllowsUrlFn
where
    F: Fn(&Url) -> bool + Send + Sync + 'static,
{
    Arc::new(move |url: &Url| Box::pin(std::future::ready(allows(url))) as BoxFuture<'static, bool>)
}

/// `text` parsed as an absolute `http`/`https` URL, or why not (the URL shown redacted).
fn parse_url(text: &str, public: bool) -> std::result::Result<Url, String> {
    let parsed = Url::parse(text).map_err(|e| {
        format!(
            "webhook url {} is not a valid absolute URL ({e}); expected e.g. \"https://example.com/hooks\"",
            shown(text, public)
        )
    })?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!(
            "webhook url {} has the scheme {:?}; only http and https are allowed",
            redact::redact_url(text, UrlKind::Endpoint),
            parsed.scheme()
        ));
    }
    Ok(parsed)
}

/// The configured headers as `Debug` shows them: credential values as `***`.
fn shown_headers(headers: &[(String, String)]) -> Vec<(&str, std::borrow::Cow<'_, str>)> {
    headers
        .iter()
        .map(|(name, value)| (name.as_str(), redact::header_value(name, value)))
        .collect()
}

/// The parts of `url` cut from its answers: with a public URL only the password and the query
/// values, otherwise also the user name and every path segment (4 characters or more).
fn answer_secrets(url: &Url, public: bool) -> Vec<String> {
    if !public {
        return redact::secret_parts(url.as_str());
    }
    let mut kept = url.clone();
    kept.set_path("/");
    let _ = kept.set_username("");
    redact::secret_parts(kept.as_str())
}

/// The signature of `body` under `secret`: `"sha256=<lowercase hex HMAC-SHA256 of body>"`, the
/// value of the signature header. 64 hex digits after the prefix.
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    let mut mac = new_mac(secret);
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Whether `header_value` is the signature of `body` under `secret`, for receivers.
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

/// The URL as messages show it: scheme, host and port, or — `public` — everything but the
/// password and the query values.
fn shown(url: &str, public: bool) -> String {
    let kind = if public {
        UrlKind::PublicEndpoint
    } else {
        UrlKind::Endpoint
    };
    redact::redact_url(url, kind)
}

/// `"500 Internal Server Error"`, or just `"599"` for a code without a reason phrase.
fn show_status(status: StatusCode) -> String {
    match status.canonical_reason() {
        Some(reason) => format!("{} {reason}", status.as_u16()),
        None => status.as_u16().to_string(),
    }
}

/// The answer's body as lossy UTF-8 text, at most [`KEPT_BODY_BYTES`] bytes of it, and whether
/// there was more. Reads on (discarding) up to [`DRAIN_LIMIT`] bytes so the connection can return
/// to the pool; a body that fails midway gives what arrived.
async fn read_body(mut response: Response) -> (String, bool) {
    let mut kept: Vec<u8> = Vec::new();
    let mut read = 0usize;
    let mut more = false;
    while read <= DRAIN_LIMIT {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                read += chunk.len();
                let room = KEPT_BODY_BYTES.saturating_sub(kept.len());
                if chunk.len() > room {
                    more = true;
                }
                kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            Ok(None) | Err(_) => break,
        }
    }
    if read > DRAIN_LIMIT {
        more = true;
    }
    (String::from_utf8_lossy(&kept).into_owned(), more)
}

/// Up to [`ERROR_BODY_CHARS`] characters of a failed answer's body for the error message, NUL as
/// U+FFFD so the message can be stored in PostgreSQL text, with `…` when there was more.
fn snippet(text: &str, more: bool) -> String {
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

/// `text` as a [`WebhookResult`] keeps it: at most [`RESULT_TEXT_CHARS`] characters, NUL as
/// U+FFFD.
fn result_text(text: &str) -> String {
    text.chars()
        .take(RESULT_TEXT_CHARS)
        .map(|c| if c == '\0' { '\u{FFFD}' } else { c })
        .collect()
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
            .unwrap()
            .with_header("authorization", "Bearer tok-123")
            .unwrap();
        let text = format!("{delivery:?}");
        assert!(!text.contains("s3cr3t-key"), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(!text.contains("tok-123"), "{text}");
        assert!(text.contains("authorization"), "{text}");
        assert!(text.contains("***"), "{text}");
        assert!(text.contains("<redacted>"), "{text}");
        let target = WebhookTarget::new("https://h.example/hook/PathSecret?token=QuerySecret")
            .with_header("x-api-key", "k-123456")
            .with_header("x-request-source", "erp");
        let text = format!("{target:?}");
        for secret in ["PathSecret", "QuerySecret", "k-123456"] {
            assert!(!text.contains(secret), "{text}");
        }
        assert!(
            text.contains("erp") && text.contains("https://h.example/…"),
            "{text}"
        );
    }

    #[test]
    fn result_text_cuts_and_replaces_nul() {
        assert_eq!(result_text("a\0b"), "a\u{FFFD}b");
        assert_eq!(
            result_text(&"é".repeat(RESULT_TEXT_CHARS + 10))
                .chars()
                .count(),
            RESULT_TEXT_CHARS
        );
        assert_eq!(
            snippet("x".repeat(300).as_str(), false).chars().count(),
            ERROR_BODY_CHARS + 1
        );
        assert_eq!(snippet("ok\n", false), "ok");
    }

    #[test]
    fn result_json_has_the_three_keys() {
        let record = WebhookResult {
            status_code: Some(500),
            body: Some("boom".into()),
            error: None,
        };
        assert_eq!(
            record.to_json(),
            serde_json::json!({"status_code": 500, "body": "boom", "error": null})
        );
    }

    #[test]
    fn answers_are_classified_for_the_relay() {
        let code = |c: u16| StatusCode::from_u16(c).unwrap();
        let three = Some(Duration::from_secs(3));
        assert_eq!(status_kind(code(503), None), DeliveryErrorKind::Outage);
        assert_eq!(status_kind(code(500), None), DeliveryErrorKind::Outage);
        assert_eq!(status_kind(code(429), None), DeliveryErrorKind::Outage);
        assert_eq!(status_kind(code(408), None), DeliveryErrorKind::Outage);
        assert_eq!(
            status_kind(code(429), three),
            DeliveryErrorKind::RetryAfter(Duration::from_secs(3))
        );
        assert_eq!(
            status_kind(code(503), three),
            DeliveryErrorKind::RetryAfter(Duration::from_secs(3))
        );
        assert_eq!(status_kind(code(410), None), DeliveryErrorKind::Permanent);
        assert_eq!(status_kind(code(413), three), DeliveryErrorKind::Permanent);
        for c in [400, 401, 404, 302, 422] {
            assert_eq!(status_kind(code(c), three), DeliveryErrorKind::Event, "{c}");
        }
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let header = |v: &str| Some(HeaderValue::from_str(v).unwrap());
        assert_eq!(
            response_retry_after(&header("3")),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            response_retry_after(&header(" 120 ")),
            Some(Duration::from_secs(120))
        );
        let in_a_minute =
            httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(61));
        let wait = response_retry_after(&header(&in_a_minute)).unwrap();
        assert!(
            wait > Duration::from_secs(55) && wait <= Duration::from_secs(61),
            "{wait:?}"
        );
        assert_eq!(
            response_retry_after(&header("Wed, 21 Oct 2015 07:28:00 GMT")),
            Some(Duration::ZERO),
            "a date in the past asks for no wait"
        );
        assert_eq!(response_retry_after(&header("soon")), None);
        assert_eq!(response_retry_after(&header("-1")), None);
        assert_eq!(response_retry_after(&None), None);
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
