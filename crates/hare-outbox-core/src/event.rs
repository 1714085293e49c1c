//! The stored outbox event.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use uuid::Uuid;

/// Header that carries the event id in every delivery; receivers drop duplicates by it.
pub const EVENT_ID_HEADER: &str = "hare-outbox-event-id";
/// Header that carries the event topic in every delivery.
pub const TOPIC_HEADER: &str = "hare-outbox-topic";

/// One row of an outbox table, as stored.
///
/// Column meanings follow hare's table, so a table written by hare reads the
/// same; `docs/state_machine.md` tells how they make an event's state.
/// Backends build it with a struct literal from a row (no `#[non_exhaustive]` for that reason;
/// there is no `new_stored` constructor).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutboxEvent {
    /// Delivery order, given by the database at INSERT.
    pub sequence: i64,
    /// UUID v7 of the event; receivers drop duplicates by it.
    pub id: Uuid,
    /// Topic, 1 to 255 characters; deliveries choose the destination by it.
    pub topic: String,
    /// The JSON payload, sent as the message body.
    pub payload: Value,
    /// Metadata besides the payload (trace context, author); sent as message headers.
    pub headers: Map<String, Value>,
    /// Events of one ordering key are delivered strictly in order; `None` = unordered.
    pub ordering_key: Option<String>,
    /// At most one event exists per idempotency key.
    pub idempotency_key: Option<String>,
    /// When the event was written (the writing transaction's time).
    pub created_at: DateTime<Utc>,
    /// Failed delivery attempts so far.
    pub attempts: i32,
    /// The error of the last failed attempt.
    pub last_error: Option<String>,
    /// When a failed event is tried again; `None` = now.
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// Until when the relay named by `leased_by` holds the event.
    pub lease_until: Option<DateTime<Utc>>,
    /// Name of the relay holding the lease.
    pub leased_by: Option<String>,
    /// When the event was delivered.
    pub published_at: Option<DateTime<Utc>>,
    /// When the event ran out of attempts; it is not delivered any more.
    pub dead_lettered_at: Option<DateTime<Utc>>,
    /// The values of the table's extra columns (tenant, foreign key, …) by column name, in their
    /// JSON form ([`ExtraValue::to_json`](crate::ExtraValue::to_json)). Empty without extra
    /// columns.
    #[serde(default)]
    pub extra: Map<String, Value>,
}

/// Where an event stands, as the journal shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventStatus {
    /// Waiting for its first delivery.
    Pending,
    /// A relay holds a live lease on it.
    Leased,
    /// Failed at least once, waiting for `next_attempt_at`.
    Retrying,
    /// Out of attempts; held back until retried or deleted.
    Dead,
    /// Delivered.
    Published,
}

impl EventStatus {
    /// Every status, in the order of an event's life as the journal lists them.
    pub const ALL: [EventStatus; 5] = [
        EventStatus::Pending,
        EventStatus::Leased,
        EventStatus::Retrying,
        EventStatus::Dead,
        EventStatus::Published,
    ];

    /// The name the journal, its API and the command write: `pending`, `leased`, `retrying`,
    /// `dead` or `published` (the serde form too).
    pub fn name(self) -> &'static str {
        match self {
            EventStatus::Pending => "pending",
            EventStatus::Leased => "leased",
            EventStatus::Retrying => "retrying",
            EventStatus::Dead => "dead",
            EventStatus::Published => "published",
        }
    }
}

impl std::fmt::Display for EventStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for EventStatus {
    type Err = crate::Error;

    /// Reads a [`name`](EventStatus::name), ignoring ASCII case.
    ///
    /// # Errors
    /// [`Error::Validation`](crate::Error::Validation) naming the text and the five names.
    fn from_str(text: &str) -> crate::Result<Self> {
        EventStatus::ALL
            .into_iter()
            .find(|status| status.name().eq_ignore_ascii_case(text.trim()))
            .ok_or_else(|| {
                crate::Error::validation(
                    "status",
                    format!(
                        "status {text:?} is not known; use pending, leased, retrying, dead or published"
                    ),
                )
            })
    }
}

impl OutboxEvent {
    /// A never-stored event as a relay would hand it to a delivery: sequence 0, a fresh UUID v7,
    /// created now, no headers, no keys, never attempted. For testing deliveries — your own
    /// [`Delivery`](crate::Delivery) included — without a database; set other fields with struct
    /// update syntax (`OutboxEvent { ordering_key: Some(..), ..OutboxEvent::new(..) }`).
    pub fn new(topic: impl Into<String>, payload: Value) -> Self {
        OutboxEvent {
            sequence: 0,
            id: Uuid::now_v7(),
            topic: topic.into(),
            payload,
            headers: Map::new(),
            ordering_key: None,
            idempotency_key: None,
            created_at: Utc::now(),
            attempts: 0,
            last_error: None,
            next_attempt_at: None,
            lease_until: None,
            leased_by: None,
            published_at: None,
            dead_lettered_at: None,
            extra: Map::new(),
        }
    }

    /// The status at time `now`.
    pub fn status(&self, now: DateTime<Utc>) -> EventStatus {
        if self.published_at.is_some() {
            EventStatus::Published
        } else if self.dead_lettered_at.is_some() {
            EventStatus::Dead
        } else if self.lease_until.is_some_and(|until| until > now) {
            EventStatus::Leased
        } else if self.attempts > 0 {
            EventStatus::Retrying
        } else {
            EventStatus::Pending
        }
    }

    /// The message body every built-in delivery sends: the payload as compact JSON (UTF-8 bytes).
    pub fn body(&self) -> Vec<u8> {
        // Serializing a `Value` cannot fail: its map keys are strings.
        serde_json::to_vec(&self.payload).unwrap_or_default()
    }

    /// The message headers every built-in delivery sends, in this order: the event's own headers
    /// (a string value as is, any other JSON value as its compact JSON text), then
    /// [`EVENT_ID_HEADER`] and [`TOPIC_HEADER`], which replace headers of the same names.
    pub fn message_headers(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = self
            .headers
            .iter()
            .filter(|(name, _)| {
                !name.eq_ignore_ascii_case(EVENT_ID_HEADER)
                    && !name.eq_ignore_ascii_case(TOPIC_HEADER)
            })
            .map(|(name, value)| (name.clone(), header_text(value)))
            .collect();
        out.push((EVENT_ID_HEADER.to_owned(), self.id.to_string()));
        out.push((TOPIC_HEADER.to_owned(), self.topic.clone()));
        out
    }

    /// The message key every built-in delivery sends: the ordering key.
    pub fn message_key(&self) -> Option<&str> {
        self.ordering_key.as_deref()
    }
}

fn header_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn status_names_read_back_and_match_the_serde_form() {
        for status in EventStatus::ALL {
            assert_eq!(status.name().parse::<EventStatus>().unwrap(), status);
            assert_eq!(
                status.name().to_uppercase().parse::<EventStatus>().unwrap(),
                status
            );
            assert_eq!(
                serde_json::to_value(status).unwrap(),
                serde_json::json!(status.name())
            );
        }
        let e = "nope".parse::<EventStatus>().unwrap_err().to_string();
        assert!(e.contains("\"nope\"") && e.contains("published"), "{e}");
    }

    use super::*;
    use serde_json::json;

    pub(crate) fn sample() -> OutboxEvent {
        OutboxEvent {
            sequence: 7,
            id: Uuid::now_v7(),
            topic: "orders.created".into(),
            payload: json!({"b": 1, "a": [1.5, "x"]}),
            headers: json!({"author": "ann", "n": 3, "hare-outbox-topic": "spoofed"})
                .as_object()
                .cloned()
                .unwrap_or_default(),
            ordering_key: Some("order:1".into()),
            idempotency_key: None,
            created_at: Utc::now(),
            attempts: 0,
            last_error: None,
            next_attempt_at: None,
            lease_until: None,
            leased_by: None,
            published_at: None,
            dead_lettered_at: None,
            extra: Map::new(),
        }
    }

    #[test]
    fn headers_carry_id_and_topic_and_cannot_be_spoofed() {
        let e = sample();
        let h = e.message_headers();
        assert_eq!(
            h,
            vec![
                ("author".to_string(), "ann".to_string()),
                ("n".to_string(), "3".to_string()),
                (EVENT_ID_HEADER.to_string(), e.id.to_string()),
                (TOPIC_HEADER.to_string(), "orders.created".to_string()),
            ]
        );
    }

    #[test]
    fn body_is_compact_json() {
        assert_eq!(sample().body(), br#"{"a":[1.5,"x"],"b":1}"#.to_vec());
    }

    #[test]
    fn status_follows_columns() {
        let now = Utc::now();
        let mut e = sample();
        assert_eq!(e.status(now), EventStatus::Pending);
        e.lease_until = Some(now + chrono::Duration::seconds(5));
        assert_eq!(e.status(now), EventStatus::Leased);
        e.lease_until = Some(now - chrono::Duration::seconds(5));
        e.attempts = 1;
        assert_eq!(e.status(now), EventStatus::Retrying);
        e.dead_lettered_at = Some(now);
        assert_eq!(e.status(now), EventStatus::Dead);
        e.published_at = Some(now);
        assert_eq!(e.status(now), EventStatus::Published);
    }
}
