//! Typed JSON forms for values whose serde form cannot be told apart from other data: durations
//! as seconds and bytes as base64 (seed 001 § OutboxJsonEncoding; the table in
//! [`message::encoding`](crate::message::encoding)).
//!
//! `chrono::TimeDelta` serializes itself as the pair `[secs, nanos]` and `Vec<u8>` as an array of
//! numbers; to serde both are just sequences. Wrap such a value — or annotate its field — to send
//! the outbox's form, with any serializer (the outbox's encoder and `serde_json` alike):
//!
//! ```
//! use hare_outbox_core::json::{Base64, Seconds};
//! use hare_outbox_core::message::encoding::encode;
//! use serde_json::json;
//!
//! #[derive(serde::Serialize)]
//! struct Upload {
//!     took: Seconds<chrono::TimeDelta>,
//!     #[serde(serialize_with = "hare_outbox_core::json::base64::serialize")]
//!     digest: Vec<u8>,
//!     thumbnail: Base64<Vec<u8>>,
//! }
//! let upload = Upload {
//!     took: Seconds(chrono::TimeDelta::milliseconds(1500)),
//!     digest: vec![0xde, 0xad],
//!     thumbnail: Base64(b"hello".to_vec()),
//! };
//! assert_eq!(
//!     encode(&upload).unwrap(),
//!     json!({"took": 1.5, "digest": "3q0=", "thumbnail": "aGVsbG8="})
//! );
//! ```

use serde::{Serialize, Serializer};

/// A duration sent as its seconds, a JSON float number (`1.5`, `-0.25`, `90.0`): the nearest
/// `f64` to the exact seconds, as [`encode`](crate::message::encoding::encode) writes a
/// `std::time::Duration`. Holds a `std::time::Duration` or a `chrono::TimeDelta` (negative deltas
/// give negative seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Seconds<D>(pub D);

/// Bytes sent as standard base64 with padding (`"aGVsbG8="`), as
/// [`encode`](crate::message::encoding::encode) writes `serde_bytes`. Holds anything that is
/// `AsRef<[u8]>`: `Vec<u8>`, `[u8; N]`, `&[u8]`, `bytes::Bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Base64<B>(pub B);

/// A duration [`Seconds`] can send: its sign, whole seconds and nanoseconds.
pub trait AsSeconds {
    /// `(negative, whole seconds, nanoseconds 0..1e9)` of the duration's absolute value.
    fn seconds_parts(&self) -> (bool, u64, u32);
}

impl AsSeconds for std::time::Duration {
    fn seconds_parts(&self) -> (bool, u64, u32) {
        (false, self.as_secs(), self.subsec_nanos())
    }
}

impl AsSeconds for chrono::TimeDelta {
    fn seconds_parts(&self) -> (bool, u64, u32) {
        let negative = *self < chrono::TimeDelta::zero();
        let magnitude = self.abs();
        (
            negative,
            magnitude.num_seconds().unsigned_abs(),
            magnitude.subsec_nanos().unsigned_abs(),
        )
    }
}

impl<D: AsSeconds> Serialize for Seconds<D> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        seconds::serialize(&self.0, serializer)
    }
}

impl<B: AsRef<[u8]>> Serialize for Base64<B> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        base64::serialize(&self.0, serializer)
    }
}

/// `#[serde(serialize_with = "hare_outbox::json::seconds::serialize")]` for a duration field.
pub mod seconds {
    use super::{AsSeconds, Serializer};

    /// Writes `value` as [`Seconds`](super::Seconds) does.
    ///
    /// # Errors
    /// The serializer's error, if it refuses an `f64`.
    pub fn serialize<D: AsSeconds, S: Serializer>(
        value: &D,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let (negative, secs, nanos) = value.seconds_parts();
        // Parsed from the exact decimal text: the nearest f64, not a sum of two rounded parts.
        let text = format!("{}{secs}.{nanos:09}", if negative { "-" } else { "" });
        let seconds: f64 = text
            .parse()
            .map_err(|_| serde::ser::Error::custom(format!("duration {text}s")))?;
        serializer.serialize_f64(seconds)
    }
}

/// `#[serde(serialize_with = "hare_outbox::json::base64::serialize")]` for a bytes field.
pub mod base64 {
    use super::Serializer;
    use ::base64::Engine as _;

    /// Writes `value` as [`Base64`](super::Base64) does.
    ///
    /// # Errors
    /// The serializer's error, if it refuses a string.
    pub fn serialize<B: AsRef<[u8]>, S: Serializer>(
        value: &B,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&::base64::engine::general_purpose::STANDARD.encode(value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::encoding::encode;
    use serde_json::json;

    #[test]
    fn seconds_of_std_and_chrono_durations() {
        assert_eq!(
            encode(&Seconds(std::time::Duration::from_millis(1500))).unwrap(),
            json!(1.5)
        );
        assert_eq!(
            encode(&Seconds(chrono::TimeDelta::milliseconds(1500))).unwrap(),
            json!(1.5)
        );
        assert_eq!(
            encode(&Seconds(chrono::TimeDelta::milliseconds(-250))).unwrap(),
            json!(-0.25)
        );
        assert_eq!(
            encode(&Seconds(chrono::TimeDelta::seconds(90))).unwrap(),
            json!(90.0)
        );
        assert_eq!(
            encode(&Seconds(chrono::TimeDelta::nanoseconds(1))).unwrap(),
            json!(1e-9)
        );
        // Without the wrapper a TimeDelta stays serde's pair: the reason for the wrapper.
        assert_eq!(
            encode(&chrono::TimeDelta::milliseconds(1500)).unwrap(),
            json!([1, 500_000_000])
        );
        // Any serializer gets the same form.
        assert_eq!(
            serde_json::to_value(Seconds(chrono::TimeDelta::milliseconds(1500))).unwrap(),
            json!(1.5)
        );
    }

    #[test]
    fn base64_of_vectors_arrays_and_slices() {
        assert_eq!(
            encode(&Base64(b"hello".to_vec())).unwrap(),
            json!("aGVsbG8=")
        );
        assert_eq!(encode(&Base64([0xdeu8, 0xad])).unwrap(), json!("3q0="));
        assert_eq!(encode(&Base64(&b""[..])).unwrap(), json!(""));
        assert_eq!(encode(&b"hi".to_vec()).unwrap(), json!([104, 105]));
        assert_eq!(
            serde_json::to_value(Base64(vec![0u8, 255])).unwrap(),
            json!("AP8=")
        );
    }

    #[test]
    fn field_annotations_give_the_same_forms() {
        #[derive(serde::Serialize)]
        struct Row {
            #[serde(serialize_with = "crate::json::seconds::serialize")]
            took: chrono::TimeDelta,
            #[serde(serialize_with = "crate::json::base64::serialize")]
            digest: Vec<u8>,
        }
        let row = Row {
            took: chrono::TimeDelta::milliseconds(2250),
            digest: vec![1, 2, 3],
        };
        assert_eq!(
            encode(&row).unwrap(),
            json!({"took": 2.25, "digest": "AQID"})
        );
    }
}
