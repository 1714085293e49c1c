//! The receiving side of a webhook: check the signature of a request sent by
//! [`WebhookDelivery`](crate::WebhookDelivery) and read it as a [`ReceivedEvent`]. With the
//! `axum` feature, [`VerifiedEvent`] does both as an axum extractor.
//!
//! ```
//! use hare_outbox_webhook::receiver;
//! use hare_outbox_webhook::reqwest::header::{HeaderMap, HeaderValue};
//!
//! let body = br#"{"order":42}"#;
//! let mut headers = HeaderMap::new();
//! headers.insert("hare-outbox-event-id", HeaderValue::from_static("0190b6e4-1f2a-7c3d-9e4f-5a6b7c8d9e0f"));
//! headers.insert("hare-outbox-topic", HeaderValue::from_static("orders.created"));
//! let signature = hare_outbox_webhook::sign(b"secret", body);
//! headers.insert("hare-outbox-signature", HeaderValue::from_str(&signature).unwrap());
//!
//! let event = receiver::read_request(b"secret", &headers, body).unwrap();
//! assert_eq!(event.topic, "orders.created");
//! assert!(receiver::read_request(b"other secret", &headers, body).is_err());
//! ```

use hare_outbox_core::{Error, ReceivedEvent};
use reqwest::header::HeaderMap;

use crate::{DEFAULT_SIGNATURE_HEADER, verify_signature};

/// Request headers that HTTP itself adds, left out of [`ReceivedEvent::headers`].
const TRANSPORT_HEADERS: &[&str] = &[
    "host",
    "content-type",
    "content-length",
    "user-agent",
    "accept",
    "accept-encoding",
    "connection",
    "transfer-encoding",
];

/// Why a request was not taken.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReceiveError {
    /// The signature header is missing or does not match the body under the secret: answer 401.
    #[error("the request's {header} header is missing or does not sign its body")]
    Signature {
        /// The signature header's name.
        header: String,
    },
    /// The request is signed but not an event of hare-outbox (no event id or topic header, an id
    /// that is no UUID, a header that is not text): answer 400.
    #[error("the request is not a hare-outbox event: {0}")]
    Malformed(Error),
}

/// Checks the `hare-outbox-signature` header of a request against `body` under `secret`, then
/// reads it: id and topic from the `hare-outbox-event-id` and `hare-outbox-topic` headers, the
/// payload as the body, byte for byte. [`ReceivedEvent::headers`] are the request's headers
/// (names lower-case, in the order received) without HTTP's own (`host`, `content-type`,
/// `content-length`, `user-agent`, …) and without the signature. A webhook carries no ordering
/// key ([`ReceivedEvent::ordering_key`] is `None`).
///
/// # Errors
/// [`ReceiveError::Signature`] when the signature is missing or wrong (nothing else is read);
/// [`ReceiveError::Malformed`] when the signed request is not an event.
pub fn read_request(
    secret: &[u8],
    headers: &HeaderMap,
    body: &[u8],
) -> Result<ReceivedEvent, ReceiveError> {
    read_request_signed_in(DEFAULT_SIGNATURE_HEADER, secret, headers, body)
}

/// [`read_request`] for a delivery that signs in another header
/// ([`WebhookDelivery::with_signature_header`](crate::WebhookDelivery::with_signature_header)).
///
/// # Errors
/// As [`read_request`].
pub fn read_request_signed_in(
    signature_header: &str,
    secret: &[u8],
    headers: &HeaderMap,
    body: &[u8],
) -> Result<ReceivedEvent, ReceiveError> {
    let signed = headers
        .get(signature_header)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| verify_signature(secret, body, v));
    if !signed {
        return Err(ReceiveError::Signature {
            header: signature_header.to_owned(),
        });
    }
    let mut event_headers = Vec::with_capacity(headers.len());
    for (name, value) in headers {
        let name = name.as_str();
        if TRANSPORT_HEADERS.contains(&name) || name.eq_ignore_ascii_case(signature_header) {
            continue;
        }
        let value = value.to_str().map_err(|_| {
            ReceiveError::Malformed(Error::validation(
                format!("headers.{name}"),
                "the value is not visible ASCII text",
            ))
        })?;
        event_headers.push((name.to_owned(), value.to_owned()));
    }
    ReceivedEvent::from_headers(event_headers, None, body.to_vec()).map_err(ReceiveError::Malformed)
}

#[cfg(feature = "axum")]
pub use extractor::{VerifiedEvent, WebhookSecret};

#[cfg(feature = "axum")]
mod extractor {
    use std::sync::Arc;

    use axum::body::Bytes;
    use axum::extract::{FromRef, FromRequest, Request};
    use axum::http::StatusCode;
    use axum::response::{IntoResponse, Response};
    use hare_outbox_core::ReceivedEvent;

    use super::{ReceiveError, read_request_signed_in};
    use crate::DEFAULT_SIGNATURE_HEADER;

    /// The secret (and signature header) a [`VerifiedEvent`] checks against; put it in your
    /// router's state and implement `FromRef` for it (or use it as the state itself).
    #[derive(Clone)]
    pub struct WebhookSecret {
        secret: Arc<[u8]>,
        header: Arc<str>,
    }

    impl std::fmt::Debug for WebhookSecret {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("WebhookSecret")
                .field("secret", &"***")
                .field("header", &self.header)
                .finish()
        }
    }

    impl WebhookSecret {
        /// `secret`, checked in [`DEFAULT_SIGNATURE_HEADER`].
        pub fn new(secret: impl AsRef<[u8]>) -> Self {
            WebhookSecret {
                secret: Arc::from(secret.as_ref()),
                header: Arc::from(DEFAULT_SIGNATURE_HEADER),
            }
        }

        /// Checks the signature in header `name` instead.
        pub fn with_header(mut self, name: &str) -> Self {
            self.header = Arc::from(name);
            self
        }
    }

    /// An axum extractor: the request's body and headers, signature checked, read as a
    /// [`ReceivedEvent`]. Answers 401 for a missing or wrong signature, 400 for a signed request
    /// that is not an event (the text says why), 413 and the like as axum's `Bytes` does.
    ///
    /// ```no_run
    /// use axum::{Router, routing::post};
    /// use hare_outbox_webhook::receiver::{VerifiedEvent, WebhookSecret};
    ///
    /// async fn orders(VerifiedEvent(event): VerifiedEvent) -> &'static str {
    ///     // inbox.process_once(&mut tx, "billing", event.id) …
    ///     # let _ = event;
    ///     "ok"
    /// }
    ///
    /// let app: Router = Router::new()
    ///     .route("/hooks/orders", post(orders))
    ///     .with_state(WebhookSecret::new(std::env::var("WEBHOOK_SECRET").unwrap_or_default()));
    /// # let _ = app;
    /// ```
    #[derive(Debug, Clone)]
    pub struct VerifiedEvent(pub ReceivedEvent);

    impl<S> FromRequest<S> for VerifiedEvent
    where
        S: Send + Sync,
        WebhookSecret: FromRef<S>,
    {
        type Rejection = Response;

        async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
            let secret = WebhookSecret::from_ref(state);
            let headers = request.headers().clone();
            let body = Bytes::from_request(request, state)
                .await
                .map_err(IntoResponse::into_response)?;
            match read_request_signed_in(&secret.header, &secret.secret, &headers, &body) {
                Ok(event) => Ok(VerifiedEvent(event)),
                Err(e @ ReceiveError::Signature { .. }) => {
                    Err((StatusCode::UNAUTHORIZED, e.to_string()).into_response())
                }
                Err(e) => Err((StatusCode::BAD_REQUEST, e.to_string()).into_response()),
            }
        }
    }
}
