//! The message a producer enqueues (seed 001 § enqueue(), OutboxMessage).

use serde::Serialize;
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::error::{Error, Result};

/// Longest topic, ordering key or idempotency key, in characters (seed 001 § Модель outbox).
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
    pub(crate) header_error: Option<String>,
    pub(crate) ordering_key: Option<String>,
    pub(crate) idempotency_key: Option<String>,
}

impl OutboxMessage {
    /// A message on `topic` carrying `payload`, any `serde::Serialize` value.
    ///
    /// A payload without a JSON form (a map with non-string keys, a failing `Serialize`) and a float
    /// NaN or ±infinity at any depth are kept as an error that [`validate`](Self::validate) (and so
    /// enqueue) reports as [`Error::Validation`] on field `payload`.
    pub fn new(topic: impl Into<String>, payload: impl Serialize) -> Self {
        OutboxMessage {
            id: None,
            topic: topic.into(),
            payload: to_json(&payload),
            headers: Map::new(),
            header_error: None,
            ordering_key: None,
            idempotency_key: None,
        }
    }

    /// Events with the same ordering key are delivered strictly in `sequence` order. 1 to 255
    /// characters. Unset by default (the event waits for nothing).
    pub fn ordering_key(mut self, key: impl Into<String>) -> Self {
        self.ordering_key = Some(key.into());
        self
    }

    /// At most one event exists per idempotency key: enqueueing a stored key returns the stored
    /// event unchanged (seed 001 § idempotency_key=). 1 to 255 characters. Unset by default.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// Adds a header. The name must be non-empty; the value any `serde::Serialize` value (strings
    /// are sent as they are, other values as JSON text).
    pub fn header(mut self, name: impl Into<String>, value: impl Serialize) -> Self {
        let name = name.into();
        match to_json(&value) {
            Ok(value) => {
                self.headers.insert(name, value);
            }
            Err(message) => {
                self.header_error
                    .get_or_insert(format!("header {name:?}: {message}"));
            }
        }
        self
    }

    /// Sets an explicit event id instead of a fresh UUID v7. The id must be a UUID version 7
    /// (seed 001 § Модель outbox); another version is a validation error.
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
    /// key, an empty header name, a payload or header value without a JSON form (NaN and ±infinity
    /// included), an explicit id that is not a UUID v7.
    pub fn validate(&self) -> Result<()> {
        check_key("topic", &self.topic)?;
        if let Some(key) = &self.ordering_key {
            check_key("ordering_key", key)?;
        }
        if let Some(key) = &self.idempotency_key {
            check_key("idempotency_key", key)?;
        }
        if let Err(message) = &self.payload {
            return Err(Error::validation("payload", message.clone()));
        }
        if let Some(message) = &self.header_error {
            return Err(Error::validation("headers", message.clone()));
        }
        if self.headers.keys().any(|name| name.trim().is_empty()) {
            return Err(Error::validation(
                "headers",
                "a header name is empty; names must be non-empty text",
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

/// Serializes `value` to JSON, refusing non-finite floats at any depth (serde_json would write
/// `null` for them).
fn to_json(value: &impl Serialize) -> std::result::Result<Value, String> {
    let json = serde_json::to_value(value).map_err(|e| format!("has no JSON form: {e}"))?;
    // serde_json turns NaN and infinities into Null; detect them by serializing through a checker.
    if let Some(path) = non_finite_path(value) {
        return Err(format!(
            "{path} is NaN or infinite; JSON has no number for it"
        ));
    }
    Ok(json)
}

/// Walks the value with a serializer that only looks for non-finite floats.
fn non_finite_path(value: &impl Serialize) -> Option<String> {
    let mut finder = finite::Finder::default();
    match value.serialize(&mut finder) {
        Ok(()) => None,
        Err(finite::Found(path)) => Some(path),
    }
}

mod finite;

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
        assert_eq!(field_of(e), "headers");
        assert!(OutboxMessage::new("t", 1.5f64).validate().is_ok());
    }

    #[test]
    fn map_with_non_string_keys_has_no_json_form() {
        let mut m = BTreeMap::new();
        m.insert(vec![1u8], 1);
        let e = OutboxMessage::new("t", &m).validate().unwrap_err();
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
