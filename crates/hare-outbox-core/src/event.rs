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

/// Longest topic and ordering key a leased row may carry, in characters (the columns of the
/// PostgreSQL table are `VARCHAR(255)`; SQLite stores any length).
pub const MAX_KEY_CHARS: usize = 255;

/// What a backend read from a leased row, checked by [`StoredRow::problem`] before the row is
/// turned into an [`OutboxEvent`]. Any program may write the outbox table, so a row may hold
/// what the library never writes; such a row is dead-lettered at lease time with the reason
/// as `last_error`, never delivered with made-up data, and holds back the later events of its
/// ordering key like any dead letter.
#[derive(Debug, Clone, Copy)]
pub struct StoredRow<'a> {
    /// The `id` column; `None` when it is NULL.
    pub id: Option<Uuid>,
    /// The `topic` column; `None` when it is NULL.
    pub topic: Option<&'a str>,
    /// The `headers` column as JSON; `None` when it is NULL (no headers, like JSON `null`).
    pub headers: Option<&'a Value>,
    /// The `attempts` column.
    pub attempts: i64,
    /// The `ordering_key` column; `None` when it is NULL (no key).
    pub ordering_key: Option<&'a str>,
}

impl StoredRow<'_> {
    /// Why the row cannot be delivered, or `None` when it can. The reasons, in the order they
    /// are checked: `id is NULL`, `id is the nil UUID`, `topic is NULL`, `topic is empty`,
    /// `topic of N characters is longer than 255`, `ordering key is empty`,
    /// `ordering key of N characters is longer than 255`, `attempts N is negative`,
    /// `invalid headers: <JSON> is not a JSON object` (the JSON cut to 100 characters), and
    /// `invalid headers: a header name is empty`. JSON `null` headers are no headers; other UUID
    /// versions than 7 are accepted as stored.
    pub fn problem(&self) -> Option<String> {
        match self.id {
            None => return Some("id is NULL".to_owned()),
            Some(id) if id.is_nil() => return Some(format!("id is the nil UUID {id}")),
            Some(_) => {}
        }
        match self.topic {
            None => return Some("topic is NULL".to_owned()),
            Some("") => return Some("topic is empty".to_owned()),
            Some(topic) if topic.chars().count() > MAX_KEY_CHARS => {
                return Some(format!(
                    "topic of {} characters is longer than {MAX_KEY_CHARS}",
                    topic.chars().count()
                ));
            }
            Some(_) => {}
        }
        match self.ordering_key {
            Some("") => return Some("ordering key is empty".to_owned()),
            Some(key) if key.chars().count() > MAX_KEY_CHARS => {
                return Some(format!(
                    "ordering key of {} characters is longer than {MAX_KEY_CHARS}",
                    key.chars().count()
                ));
            }
            _ => {}
        }
        if self.attempts < 0 {
            return Some(format!("attempts {} is negative", self.attempts));
        }
        match self.headers {
            None | Some(Value::Null) => None,
            Some(Value::Object(map)) if map.keys().any(String::is_empty) => {
                Some("invalid headers: a header name is empty".to_owned())
            }
            Some(Value::Object(_)) => None,
            Some(other) => {
                let text = other.to_string();
                let mut shown: String = text.chars().take(100).collect();
                if shown.len() < text.len() {
                    shown.push('…');
                }
                Some(format!("invalid headers: {shown} is not a JSON object"))
            }
        }
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
    fn hand_written_rows_are_refused_with_the_reason() {
        let id = Uuid::now_v7();
        let headers = serde_json::json!({"a": "b"});
        let ok = StoredRow {
            id: Some(id),
            topic: Some("t"),
            headers: Some(&headers),
            attempts: 0,
            ordering_key: Some("k"),
        };
        assert_eq!(ok.problem(), None);
        let list = serde_json::json!([1, 2]);
        let text = serde_json::json!("text");
        let null = Value::Null;
        let empty_name = serde_json::json!({"": "x"});
        let long = "t".repeat(300);
        let cases = [
            (
                StoredRow {
                    headers: Some(&list),
                    ..ok
                },
                "invalid headers: [1,2] is not a JSON object",
            ),
            (
                StoredRow {
                    headers: Some(&text),
                    ..ok
                },
                "invalid headers: \"text\" is not a JSON object",
            ),
            (
                StoredRow {
                    headers: Some(&empty_name),
                    ..ok
                },
                "invalid headers: a header name is empty",
            ),
            (
                StoredRow {
                    attempts: -20,
                    ..ok
                },
                "attempts -20 is negative",
            ),
            (
                StoredRow {
                    topic: Some(&long),
                    ..ok
                },
                "topic of 300 characters is longer than 255",
            ),
            (
                StoredRow {
                    topic: Some(""),
                    ..ok
                },
                "topic is empty",
            ),
            (StoredRow { topic: None, ..ok }, "topic is NULL"),
            (
                StoredRow {
                    ordering_key: Some(&long),
                    ..ok
                },
                "ordering key of 300 characters is longer than 255",
            ),
            (
                StoredRow {
                    ordering_key: Some(""),
                    ..ok
                },
                "ordering key is empty",
            ),
            (StoredRow { id: None, ..ok }, "id is NULL"),
            (
                StoredRow {
                    id: Some(Uuid::nil()),
                    ..ok
                },
                "id is the nil UUID 00000000-0000-0000-0000-000000000000",
            ),
        ];
        for (row, reason) in cases {
            assert_eq!(row.problem().as_deref(), Some(reason));
        }
        assert_eq!(
            StoredRow {
                headers: Some(&null),
                ..ok
            }
            .problem(),
            None
        );
        assert_eq!(
            StoredRow {
                headers: None,
                ordering_key: None,
                ..ok
            }
            .problem(),
            None
        );
        assert_eq!(
            StoredRow {
                id: Some(Uuid::from_u128(0x0123_4567_89ab_4def_8123_4567_89ab_cdef)),
                ..ok
            }
            .problem(),
            None
        );
    }

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
