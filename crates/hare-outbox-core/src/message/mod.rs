//! The message a producer enqueues.

use serde::Serialize;
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::error::{Error, Result};

pub mod encoding;

use crate::extra::{ExtraValue, OWNED_COLUMNS};
use encoding::encode;

/// Longest topic, ordering key or idempotency key, in characters.
pub const MAX_KEY_CHARS: usize = 255;

/// One event to write: topic, JSON payload and options.
///
/// Built with [`OutboxMessage::new`] and the `with_*`-free builder methods below; checked by
/// [`OutboxMessage::validate`] before anything is written (enqueue calls it).
///
/// ```
/// use hare_outbox_core::OutboxMessage;
/// use serde_json::json;
///
/// let message = OutboxMessage::new("sales.order.updated", json!({"id": 22}))
///     .ordering_key("sales_order:22")
///     .idempotency_key("sales_order:22:v7")
///     .header("author", "admin");
/// assert!(message.validate().is_ok());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxMessage {
    pub(crate) id: Option<Uuid>,
    pub(crate) topic: String,
    pub(crate) payload: std::result::Result<Value, String>,
    pub(crate) headers: Map<String, Value>,
    /// The first refused header: its field (`headers.<name>`) and the message.
    pub(crate) header_error: Option<(String, String)>,
    pub(crate) ordering_key: Option<String>,
    pub(crate) idempotency_key: Option<String>,
    pub(crate) extra: Vec<(String, ExtraValue)>,
    pub(crate) strict_order: bool,
}

impl OutboxMessage {
    /// A message on `topic` carrying `payload`, any `serde::Serialize` value, encoded by
    /// [`encoding::encode`] (decimals as exact text, times as ISO 8601, durations as seconds, bytes
    /// as base64: the table in [`encoding`]).
    ///
    /// A payload without a JSON form (a float NaN or ±infinity at any depth, an integer beyond 64
    /// bits, a map key that is not text-like, a failing `Serialize`) is kept as an error that
    /// [`validate`](Self::validate) (and so enqueue) reports as [`Error::Validation`] on field
    /// `payload`, its message starting with the JSON path (`$.lines[2].price: …`).
    pub fn new(topic: impl Into<String>, payload: impl Serialize) -> Self {
        OutboxMessage {
            id: None,
            topic: topic.into(),
            payload: encode(&payload).map_err(|e| e.to_string()),
            headers: Map::new(),
            header_error: None,
            ordering_key: None,
            idempotency_key: None,
            extra: Vec::new(),
            strict_order: false,
        }
    }

    /// Sets an extra column of the outbox table (tenant, foreign key, …) to a typed value. Setting
    /// a column twice keeps the last value. Enqueue refuses a column the table does not declare, a
    /// value of the wrong type and the columns enqueue and the relay own
    /// ([`OWNED_COLUMNS`]).
    pub fn extra(mut self, column: impl Into<String>, value: impl Into<ExtraValue>) -> Self {
        let column = column.into();
        let value = value.into();
        match self.extra.iter_mut().find(|(c, _)| *c == column) {
            Some(slot) => slot.1 = value,
            None => self.extra.push((column, value)),
        }
        self
    }

    /// Events with the same ordering key are delivered strictly in `sequence` order. 1 to 255
    /// characters. Unset by default (the event waits for nothing).
    pub fn ordering_key(mut self, key: impl Into<String>) -> Self {
        self.ordering_key = Some(key.into());
        self
    }

    /// Strict per-key commit order for this message: enqueue takes a transaction-scoped lock on the
    /// ordering key before writing, so a concurrent transaction writing the same key with strict
    /// order waits until this one commits or rolls back, and the key's `sequence` order is its
    /// commit order (and so its delivery order). Off by default; a whole table opts in with
    /// [`OutboxTable::with_strict_key_order`](crate::OutboxTable::with_strict_key_order).
    ///
    /// The lock is held to the end of the caller's transaction: keep transactions that write a
    /// strict key short. Only writers that ask for strict order take the lock; a plain enqueue of
    /// the same key does not wait. Needs an ordering key: [`validate`](Self::validate) refuses
    /// strict order without one.
    pub fn strict_order(mut self) -> Self {
        self.strict_order = true;
        self
    }

    /// At most one event exists per idempotency key: enqueueing a stored key returns the stored
    /// event unchanged. 1 to 255 characters. Unset by default.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// Adds a header. The name must be non-empty; the value any `serde::Serialize` value, encoded
    /// like the payload by [`encoding::encode`] (strings are sent as they are, other values as JSON
    /// text).
    ///
    /// A value without a JSON form makes [`validate`](Self::validate) report
    /// [`Error::Validation`] on field `headers.<name>` (`headers."x-a"` for a name that is not a
    /// plain identifier); the first refused header is the one reported.
    pub fn header(mut self, name: impl Into<String>, value: impl Serialize) -> Self {
        let name = name.into();
        match encode(&value) {
            Ok(value) => {
                self.headers.insert(name, value);
            }
            Err(e) => {
                self.header_error.get_or_insert_with(|| {
                    (
                        format!("headers{}", encoding::key_step(&name)),
                        e.to_string(),
                    )
                });
            }
        }
        self
    }

    /// Sets an explicit event id instead of a fresh UUID v7. The id must be a UUID version 7;
    /// another version is a validation error.
    pub fn id(mut self, id: Uuid) -> Self {
        self.id = Some(id);
        self
    }

    /// The topic.
    pub fn topic_name(&self) -> &str {
        &self.topic
    }

    /// Checks every argument; [`Error::Validation`] names the first one that is refused.
    ///
    /// # Errors
    /// [`Error::Validation`] for an empty or over-255-character topic, ordering key or idempotency
    /// key, strict order without an ordering key, an empty header name, a payload or header value without a JSON form (NaN and ±infinity
    /// included), an explicit id that is not a UUID v7, an extra value for a column enqueue or the
    /// relay owns.
    pub fn validate(&self) -> Result<()> {
        check_key("topic", &self.topic)?;
        if let Some(key) = &self.ordering_key {
            check_key("ordering_key", key)?;
        } else if self.strict_order {
            return Err(Error::validation(
                "ordering_key",
                "strict_order() orders the writers of one ordering key; set ordering_key too",
            ));
        }
        if let Some(key) = &self.idempotency_key {
            check_key("idempotency_key", key)?;
        }
        if let Err(message) = &self.payload {
            return Err(Error::validation("payload", message.clone()));
        }
        if let Some((field, message)) = &self.header_error {
            return Err(Error::validation(field.clone(), message.clone()));
        }
        if self.headers.keys().any(|name| name.trim().is_empty()) {
            return Err(Error::validation(
                "headers",
                "a header name is empty; names must be non-empty text",
            ));
        }
        if let Some((column, _)) = self
            .extra
            .iter()
            .find(|(c, _)| OWNED_COLUMNS.contains(&c.as_str()))
        {
            return Err(Error::validation(
                format!("extra.{column}"),
                format!(
                    "{column:?} is set by enqueue or the relay and cannot be given as an extra value"
                ),
            ));
        }
        if let Some(id) = self.id
            && id.get_version_num() != 7
        {
            return Err(Error::validation(
                "id",
                format!(
                    "{id} is a UUID version {}; only version 7 is allowed",
                    id.get_version_num()
                ),
            ));
        }
        Ok(())
    }
}

fn check_key(field: &str, value: &str) -> Result<()> {
    let chars = value.chars().count();
    if value.trim().is_empty() {
        return Err(Error::validation(
            field,
            format!("{value:?} is empty; 1 to {MAX_KEY_CHARS} characters are allowed"),
        ));
    }
    if chars > MAX_KEY_CHARS {
        let start: String = value.chars().take(40).collect();
        return Err(Error::validation(
            field,
            format!("{start:?}… has {chars} characters; at most {MAX_KEY_CHARS} are allowed"),
        ));
    }
    if value.contains('\0') {
        return Err(Error::validation(
            field,
            format!("{value:?} contains a NUL character, which databases cannot store"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;

    fn field_of(e: Error) -> String {
        match e {
            Error::Validation { field, .. } => field,
            other => panic!("expected validation error, got {other:?}"),
        }
    }

    #[test]
    fn empty_and_long_keys_are_refused() {
        assert_eq!(
            field_of(OutboxMessage::new("", json!(1)).validate().unwrap_err()),
            "topic"
        );
        assert_eq!(
            field_of(OutboxMessage::new("  ", json!(1)).validate().unwrap_err()),
            "topic"
        );
        let long = "x".repeat(256);
        let e = OutboxMessage::new(long.clone(), json!(1))
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("256 characters"), "{e}");
        assert!(
            OutboxMessage::new("x".repeat(255), json!(1))
                .validate()
                .is_ok()
        );
        assert_eq!(
            field_of(
                OutboxMessage::new("t", json!(1))
                    .ordering_key(long.clone())
                    .validate()
                    .unwrap_err()
            ),
            "ordering_key"
        );
        assert_eq!(
            field_of(
                OutboxMessage::new("t", json!(1))
                    .idempotency_key("")
                    .validate()
                    .unwrap_err()
            ),
            "idempotency_key"
        );
        // 255 multi-byte characters are fine: the limit counts characters, not bytes.
        assert!(
            OutboxMessage::new("é".repeat(255), json!(1))
                .validate()
                .is_ok()
        );
    }

    #[test]
    fn empty_header_name_is_refused() {
        let e = OutboxMessage::new("t", json!(1))
            .header("", "x")
            .validate()
            .unwrap_err();
        assert_eq!(field_of(e), "headers");
    }

    #[test]
    fn non_finite_floats_are_refused_at_any_depth() {
        let mut inner = BTreeMap::new();
        inner.insert("price", vec![1.0, f64::NAN]);
        let e = OutboxMessage::new("t", &inner).validate().unwrap_err();
        assert!(e.to_string().contains("price"), "{e}");
        let e = OutboxMessage::new("t", json!(1))
            .header("h", f64::INFINITY)
            .validate()
            .unwrap_err();
        assert_eq!(field_of(e), "headers.h");
        assert!(OutboxMessage::new("t", 1.5f64).validate().is_ok());
    }

    #[test]
    fn payload_errors_name_the_json_path() {
        #[derive(serde::Serialize)]
        struct Line {
            qty: u32,
            prices: Vec<f64>,
        }
        let lines = vec![
            Line {
                qty: 1,
                prices: vec![1.0],
            },
            Line {
                qty: 2,
                prices: vec![2.0, f64::NEG_INFINITY],
            },
        ];
        match OutboxMessage::new("t", &lines).validate().unwrap_err() {
            Error::Validation { field, message } => {
                assert_eq!(field, "payload");
                assert_eq!(
                    message,
                    "$[1].prices[1]: -inf has no JSON number; only finite floats are allowed"
                );
            }
            other => panic!("expected validation error, got {other:?}"),
        }
        assert!(
            OutboxMessage::new("t", json!({"a": [1.0, 2.5]}))
                .validate()
                .is_ok()
        );
        let e = OutboxMessage::new("t", f32::NAN).validate().unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid payload: $: NaN has no JSON number; only finite floats are allowed"
        );
    }

    #[test]
    fn nan_in_a_header_value_names_the_header() {
        let mut nested = BTreeMap::new();
        nested.insert("limits", vec![1.0, f64::NAN]);
        let message = OutboxMessage::new("t", json!(1))
            .header("author", "admin")
            .header("x-rate", &nested)
            .header("later", f32::INFINITY);
        assert_eq!(message.headers.get("author"), Some(&json!("admin")));
        match message.validate().unwrap_err() {
            Error::Validation { field, message } => {
                assert_eq!(field, r#"headers."x-rate""#);
                assert!(message.starts_with("$.limits[1]: NaN"), "{message}");
            }
            other => panic!("expected validation error, got {other:?}"),
        }
        let e = OutboxMessage::new("t", json!(1))
            .header("retry_after", std::time::Duration::from_millis(1500))
            .header("at", chrono::DateTime::UNIX_EPOCH);
        assert!(e.validate().is_ok());
        assert_eq!(e.headers.get("retry_after"), Some(&json!(1.5)));
        assert_eq!(e.headers.get("at"), Some(&json!("1970-01-01T00:00:00Z")));
    }

    #[test]
    fn map_with_non_string_keys_has_no_json_form() {
        let mut m = BTreeMap::new();
        m.insert(vec![1u8], 1);
        let e = OutboxMessage::new("t", &m).validate().unwrap_err();
        assert!(e.to_string().contains("$: a map key is a sequence"), "{e}");
        assert_eq!(field_of(e), "payload");
    }

    #[test]
    fn explicit_id_must_be_v7() {
        let v4 = Uuid::from_u128(0x0190_0000_0000_4000_8000_0000_0000_0001);
        let e = OutboxMessage::new("t", json!(1))
            .id(v4)
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("version 4"), "{e}");
        assert!(
            OutboxMessage::new("t", json!(1))
                .id(Uuid::now_v7())
                .validate()
                .is_ok()
        );
    }
}
