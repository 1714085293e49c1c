//! [`ReceivedEvent`]: an outbox event as a consumer reads it from a broker or a webhook request.
//!
//! Each broker crate has a `reader` module that decodes what its delivery wrote (a Redis stream
//! entry, a Kafka message, a NATS message, an AMQP delivery, a webhook request) into this one
//! type. It composes with the [`Inbox`](crate::Inbox): record [`ReceivedEvent::id`] with
//! [`Inbox::process_once`](crate::Inbox::process_once) in the transaction that acts on the
//! event, and a redelivered event is skipped.

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde_json::Value;
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::event::{EVENT_ID_HEADER, TOPIC_HEADER};

/// An outbox event as received: what a built-in delivery sent, read back byte for byte.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReceivedEvent {
    /// The event id (UUID v7); consumers drop duplicates by it.
    pub id: Uuid,
    /// The event's topic.
    pub topic: String,
    /// The ordering key, or `None` when the event has none.
    pub ordering_key: Option<String>,
    /// The message headers as sent ([`OutboxEvent::message_headers`](crate::OutboxEvent::message_headers)):
    /// the event's headers, then `hare-outbox-event-id` and `hare-outbox-topic`, in that order
    /// where the transport keeps it.
    pub headers: Vec<(String, String)>,
    /// The body as sent ([`OutboxEvent::body`](crate::OutboxEvent::body)): the payload as compact
    /// JSON, UTF-8 bytes. [`json`](Self::json) or [`payload_as`](Self::payload_as) parse it.
    pub payload: Vec<u8>,
    /// The event's `sequence`, when the transport carries it (Redis stream entries do).
    pub sequence: Option<i64>,
    /// When the event was enqueued, when the transport carries it (Redis stream entries do).
    pub created_at: Option<DateTime<Utc>>,
}

impl ReceivedEvent {
    /// A received event of these parts, without `sequence` and `created_at`.
    pub fn new(
        id: Uuid,
        topic: impl Into<String>,
        ordering_key: Option<String>,
        headers: Vec<(String, String)>,
        payload: Vec<u8>,
    ) -> Self {
        ReceivedEvent {
            id,
            topic: topic.into(),
            ordering_key,
            headers,
            payload,
            sequence: None,
            created_at: None,
        }
    }

    /// A received event whose id and topic come from its headers (`hare-outbox-event-id`,
    /// `hare-outbox-topic`), as every built-in delivery sends them.
    ///
    /// # Errors
    /// [`Error::Validation`] naming the header when one is missing or the id is not a UUID.
    pub fn from_headers(
        headers: Vec<(String, String)>,
        ordering_key: Option<String>,
        payload: Vec<u8>,
    ) -> Result<Self> {
        let find = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
                .ok_or_else(|| {
                    Error::validation(
                        format!("headers.{name}"),
                        format!("the message has no {name} header; was it sent by hare-outbox?"),
                    )
                })
        };
        let id = parse_id(&find(EVENT_ID_HEADER)?, EVENT_ID_HEADER)?;
        let topic = find(TOPIC_HEADER)?;
        Ok(Self::new(id, topic, ordering_key, headers, payload))
    }

    /// The value of header `name` (compared without case), if it was sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The OpenTelemetry context of the event's `traceparent`/`tracestate` headers (feature
    /// `otel`): make it the parent of the span that handles the event. A context without a valid
    /// span when the event carries none (see [`crate::trace_context`]).
    ///
    /// ```
    /// # fn f(event: &hare_outbox_core::ReceivedEvent) {
    /// use tracing_opentelemetry::OpenTelemetrySpanExt;
    ///
    /// let span = tracing::info_span!("handle", event_id = %event.id);
    /// let _ = span.set_parent(event.trace_context()); // Err only without an OpenTelemetry layer
    /// # }
    /// ```
    #[cfg(feature = "otel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "otel")))]
    pub fn trace_context(&self) -> opentelemetry::Context {
        crate::trace_context::extract(
            self.headers
                .iter()
                .map(|(name, value)| (name.as_str(), value.as_str())),
        )
    }

    /// The payload parsed as JSON.
    ///
    /// # Errors
    /// [`Error::Validation`] on field `payload` when it is not JSON.
    pub fn json(&self) -> Result<Value> {
        self.payload_as()
    }

    /// The payload deserialized as `T`.
    ///
    /// # Errors
    /// [`Error::Validation`] on field `payload` when it is not JSON of `T`'s shape.
    pub fn payload_as<T: DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_slice(&self.payload).map_err(|e| {
            Error::validation(
                "payload",
                format!(
                    "the payload of event {} is not what was asked: {e}",
                    self.id
                ),
            )
        })
    }
}

/// `text` as an event id, or a validation error on `field`.
pub fn parse_id(text: &str, field: &str) -> Result<Uuid> {
    Uuid::parse_str(text).map_err(|e| {
        Error::validation(
            field.to_owned(),
            format!("{text:?} is not an event id (a UUID): {e}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_and_topic_come_from_the_headers_and_a_missing_one_is_named() {
        let id = Uuid::now_v7();
        let headers = vec![
            ("author".to_owned(), "ann".to_owned()),
            (EVENT_ID_HEADER.to_owned(), id.to_string()),
            (TOPIC_HEADER.to_owned(), "orders.created".to_owned()),
        ];
        let r = ReceivedEvent::from_headers(headers, Some("order:1".into()), b"{\"a\":1}".to_vec())
            .unwrap();
        assert_eq!(r.id, id);
        assert_eq!(r.topic, "orders.created");
        assert_eq!(r.header("AUTHOR"), Some("ann"));
        assert_eq!(r.json().unwrap(), serde_json::json!({"a": 1}));
        let e = ReceivedEvent::from_headers(vec![], None, vec![]).unwrap_err();
        assert!(
            matches!(&e, Error::Validation { field, .. } if field == "headers.hare-outbox-event-id"),
            "{e}"
        );
        let e = ReceivedEvent::from_headers(
            vec![
                (EVENT_ID_HEADER.to_owned(), "nope".to_owned()),
                (TOPIC_HEADER.to_owned(), "t".to_owned()),
            ],
            None,
            vec![],
        )
        .unwrap_err();
        assert!(e.to_string().contains("nope"), "{e}");
        let bad = ReceivedEvent::new(id, "t", None, vec![], b"not json".to_vec());
        assert!(bad.json().is_err());
    }
}
