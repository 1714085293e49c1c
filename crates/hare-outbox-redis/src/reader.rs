//! The consumer's side: a stream entry written by [`RedisStreamsDelivery`](crate::RedisStreamsDelivery)
//! read back as a [`ReceivedEvent`].
//!
//! ```no_run
//! use hare_outbox_redis::reader;
//! use hare_outbox_redis::redis::AsyncCommands;
//! use hare_outbox_redis::redis::streams::{StreamReadOptions, StreamReadReply};
//!
//! # async fn consume(mut redis: hare_outbox_redis::redis::aio::MultiplexedConnection) -> Result<(), Box<dyn std::error::Error>> {
//! let options = StreamReadOptions::default().group("billing", "worker-1").count(100);
//! let reply: StreamReadReply = redis.xread_options(&["orders.created"], &[">"], &options).await?;
//! for key in reply.keys {
//!     for entry in key.ids {
//!         let event = reader::read_entry(&entry)?;
//!         // Act once per event, in the transaction that acts on it:
//!         // if inbox.process_once(&mut tx, "billing", event.id).await? { … }
//!         println!("{} {} {:?}", event.topic, event.id, event.json()?);
//!     }
//! }
//! # Ok(()) }
//! ```

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use hare_outbox_core::received::parse_id;
use hare_outbox_core::{Error, ReceivedEvent, Result};
use redis::Value;
use redis::streams::StreamId;
use serde_json::Value as Json;

/// Reads one stream entry (from `XRANGE`, `XREAD` or `XREADGROUP`). The entry keeps the headers
/// as one JSON object, so [`ReceivedEvent::headers`] come sorted by name; names and values are
/// as sent.
///
/// # Errors
/// [`Error::Validation`] naming the field when the entry lacks one of `id`, `topic`,
/// `ordering_key`, `headers`, `payload`, or when one cannot be read (an id that is no UUID,
/// headers that are not a JSON object of strings, a `sequence` or `created_at` that does not
/// parse). Entries written before `sequence` and `created_at` were added read without them.
pub fn read_entry(entry: &StreamId) -> Result<ReceivedEvent> {
    read_fields(&entry.map)
}

/// Reads an entry's fields, name → value, as [`read_entry`] does.
///
/// # Errors
/// As [`read_entry`].
pub fn read_fields(fields: &HashMap<String, Value>) -> Result<ReceivedEvent> {
    let bytes = |name: &str| -> Result<Vec<u8>> {
        match fields.get(name) {
            Some(Value::BulkString(bytes)) => Ok(bytes.clone()),
            Some(Value::SimpleString(text)) => Ok(text.clone().into_bytes()),
            Some(other) => Err(Error::validation(
                format!("entry.{name}"),
                format!("{other:?} is not a string"),
            )),
            None => Err(Error::validation(
                format!("entry.{name}"),
                format!("the stream entry has no {name:?} field; was it written by hare-outbox?"),
            )),
        }
    };
    let text = |name: &str| -> Result<String> {
        String::from_utf8(bytes(name)?)
            .map_err(|_| Error::validation(format!("entry.{name}"), "the field is not UTF-8 text"))
    };
    let optional = |name: &str| -> Result<Option<String>> {
        if fields.contains_key(name) {
            text(name).map(Some)
        } else {
            Ok(None)
        }
    };
    let id = parse_id(&text("id")?, "entry.id")?;
    let topic = text("topic")?;
    let ordering_key = Some(text("ordering_key")?).filter(|k| !k.is_empty());
    let headers = match serde_json::from_slice::<Json>(&bytes("headers")?) {
        Ok(Json::Object(map)) => map
            .into_iter()
            .map(|(name, value)| match value {
                Json::String(value) => Ok((name, value)),
                other => Err(Error::validation(
                    format!("entry.headers.{name}"),
                    format!("{other} is not a string"),
                )),
            })
            .collect::<Result<Vec<_>>>()?,
        _ => {
            return Err(Error::validation(
                "entry.headers",
                "the headers field is not a JSON object",
            ));
        }
    };
    let mut event = ReceivedEvent::new(id, topic, ordering_key, headers, bytes("payload")?);
    event.sequence = optional("sequence")?
        .map(|s| {
            s.parse::<i64>().map_err(|_| {
                Error::validation("entry.sequence", format!("{s:?} is not a sequence number"))
            })
        })
        .transpose()?;
    event.created_at = optional("created_at")?
        .map(|s| {
            DateTime::parse_from_rfc3339(&s)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|e| {
                    Error::validation("entry.created_at", format!("{s:?} is not RFC 3339: {e}"))
                })
        })
        .transpose()?;
    Ok(event)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    #[test]
    fn a_missing_or_bad_field_is_named() {
        let id = uuid::Uuid::now_v7().to_string();
        let mut fields: HashMap<String, Value> = [
            ("id", s(&id)),
            ("topic", s("t")),
            ("ordering_key", s("")),
            ("headers", s("{\"a\":\"b\"}")),
            ("payload", s("{}")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let event = read_fields(&fields).unwrap();
        assert_eq!(event.ordering_key, None);
        assert_eq!(event.sequence, None);
        fields.insert("sequence".into(), s("x"));
        let e = read_fields(&fields).unwrap_err();
        assert!(e.to_string().contains("entry.sequence"), "{e}");
        fields.remove("sequence");
        fields.insert("headers".into(), s("[1]"));
        assert!(
            read_fields(&fields)
                .unwrap_err()
                .to_string()
                .contains("entry.headers")
        );
        fields.insert("headers".into(), s("{}"));
        fields.remove("payload");
        assert!(
            read_fields(&fields)
                .unwrap_err()
                .to_string()
                .contains("entry.payload")
        );
    }
}
