//! How payloads and header values become JSON.
//!
//! [`encode`] turns any `serde::Serialize` value into a [`serde_json::Value`] in a single pass.
//! It is what [`OutboxMessage::new`](crate::OutboxMessage::new) and
//! [`OutboxMessage::header`](crate::OutboxMessage::header) use, so a payload and a header value
//! follow the same rules. JSON values (`serde_json::Value`, maps, vectors, strings, numbers, bools)
//! pass unchanged; the forms of other Rust values are fixed by this table:
//!
//! | Rust value | JSON | example |
//! | --- | --- | --- |
//! | `rust_decimal::Decimal` | its exact text, scale kept | `"12.50"` |
//! | `uuid::Uuid` | its hyphenated text | `"0190a1b2-…"` |
//! | `chrono::DateTime<Tz>` | RFC 3339 / ISO 8601 text with offset | `"2024-05-01T12:30:00.250Z"` |
//! | `chrono::NaiveDate` | ISO 8601 date | `"2024-05-01"` |
//! | `chrono::NaiveTime` | ISO 8601 time | `"12:30:00"` |
//! | `chrono::NaiveDateTime` | ISO 8601 date and time, no offset | `"2024-05-01T12:30:00"` |
//! | `std::time::SystemTime` | RFC 3339 text in UTC, as a `DateTime<Utc>` | `"2024-05-01T12:30:00Z"` |
//! | `std::time::Duration` | its seconds, a float number | `1.5`, `90.0` |
//! | [`json::Seconds`](crate::json::Seconds) of a `std::time::Duration` or `chrono::TimeDelta` | its seconds, a float number, negative for a negative delta | `1.5`, `-0.25` |
//! | [`json::Base64`](crate::json::Base64) of `Vec<u8>`, `[u8; N]`, `&[u8]` | standard base64 with padding | `"aGVsbG8="` |
//! | `std::net::IpAddr`, `Ipv4Addr`, `Ipv6Addr`, `SocketAddr` | their text | `"2001:db8::1"`, `"192.0.2.1:8080"` |
//! | `ipnet::IpNet`, `Ipv4Net`, `Ipv6Net` (and other network types that write text) | their text | `"10.0.0.0/8"` |
//! | bytes (`serde_bytes`, `bytes::Bytes`: anything calling `serialize_bytes`) | standard base64 with padding | `"aGVsbG8="` |
//! | unit enum variant | its name (or its `#[serde(rename)]`) | `"Paid"` |
//! | newtype, tuple, struct enum variant | an object keyed by the variant name | `{"Card": {"last4": "4242"}}` |
//! | `f32`, `f64` (finite) | a number; an `f32` by its shortest text | `0.1` |
//! | integers, `i128`/`u128` included | a number | `-7`, `18446744073709551615` |
//! | `Option::None`, `()`, unit structs | `null` | `null` |
//! | `char` | a one-character string | `"x"` |
//! | map with integer, bool, char, float or unit-variant keys | an object whose keys are the keys' text | `{"1": "a"}` |
//!
//! What has no JSON form is refused with an [`EncodeError`] naming the place, and the caller reports
//! it as [`Error::Validation`](crate::Error::Validation): nothing is written. Refused are
//!
//! - a float NaN, +infinity or -infinity, at any depth, in a value or a map key (serde_json writes
//!   `null` for them without a word; the outbox must not);
//! - an integer outside `-2^63 ..= 2^64 - 1` (an `i128`/`u128`): JSON readers hold at most 64-bit
//!   integers exactly, and writing such numbers as text only when they are large would change a
//!   field's JSON type with its value. Send them as a string, or as a `Decimal`, on purpose;
//! - a map key that is not text-like: a sequence, a struct, an `Option`, bytes, unit;
//! - one key twice in one object (from a custom `Serialize` or `#[serde(flatten)]`): the second
//!   value would silently replace the first;
//! - arrays and objects nested more than [`MAX_NESTING`] (127) levels deep: serde_json, which the
//!   relay reads events with, refuses deeper documents, so the event could never be delivered;
//! - any error that the value's own `Serialize` reports (a `SystemTime` before 1970, a
//!   `serde::ser::Error::custom`): its message, at the place it happened.
//!
//! Paths start at `$` for the value itself, add `[i]` for an element and `.key` for an object member;
//! a key that is not a plain identifier (letters, digits, `_`, not starting with a digit) is quoted
//! as a JSON string: `$.lines[2].price`, `$.prices."eu.west"[0]`, `$.""`.
//!
//! Notes on the types:
//!
//! - Dates and times are chrono's, which the workspace already uses and sqlx serves (feature
//!   `chrono`, as it serves `time`). chrono's `serde` feature writes ISO 8601 text whatever the
//!   serializer; the `time` crate writes a tuple of integers unless its `serde-human-readable`
//!   feature is on. A `time` value with that feature comes out as text here too.
//! - `chrono::TimeDelta` (`chrono::Duration`) serializes itself as the anonymous pair
//!   `[secs, nanos]`, which cannot be told apart from any other `(i64, i32)` tuple, so it stays
//!   `[1, 500000000]`. Wrap it in [`json::Seconds`](crate::json::Seconds) (or annotate the field
//!   `#[serde(serialize_with = "hare_outbox::json::seconds::serialize")]`) for seconds.
//! - `std::time::Duration` is recognised by its serde form, a struct named `Duration` with the
//!   fields `secs` and `nanos`; a user struct of that name and those two integer fields is taken
//!   as a duration too. Seconds are the nearest `f64` to `secs.nanos`, which reads back to the same
//!   nanosecond up to about 50 days and to the microsecond up to about 140 years.
//! - `rust_decimal` writes its exact text with its default features. Its `serde-float` feature
//!   (switched on by any crate in the build) turns every `Decimal` into an inexact float; to keep
//!   text regardless, annotate the field `#[serde(with = "rust_decimal::serde::str")]` (feature
//!   `serde-with-str`). With `serde-arbitrary-precision` a `Decimal` is an exact JSON number.
//! - `Vec<u8>` and `[u8; N]` are sequences to serde, so they become arrays of numbers; wrap them in
//!   [`json::Base64`](crate::json::Base64) (or annotate the field
//!   `#[serde(serialize_with = "hare_outbox::json::base64::serialize")]`, or use `serde_bytes`)
//!   for base64.
//! - `serde_json::value::RawValue` is parsed and embedded; serde_json's arbitrary-precision
//!   numbers keep their text.
//! - A `serde_json::Value` built by `json!` or `serde_json::to_value` was converted by serde_json's
//!   rules before the outbox sees it: a NaN is already `null`, a `Duration` already
//!   `{"secs": …, "nanos": …}`, an `f32` widened. Hand the outbox the Rust values themselves (a
//!   struct, a map) for these rules to apply.
//! - Object members are ordered as serde_json orders them (sorted keys, or insertion order with
//!   serde_json's `preserve_order` feature).
//!
//! The rules are those of hare's JSON encoding.

use std::borrow::Cow;
use std::fmt::{self, Display, Write as _};

use base64::Engine as _;
use serde::Serialize;
use serde::ser::{self, Impossible};
use serde_json::{Map, Number, Value};

/// Encodes `value` as JSON by the rules of the [module documentation](self), in one pass.
///
/// ```
/// use hare_outbox_core::message::encoding::encode;
/// use serde_json::json;
///
/// #[derive(serde::Serialize)]
/// struct Line {
///     price: f64,
/// }
/// let ok = encode(&vec![Line { price: 9.5 }]).unwrap();
/// assert_eq!(ok, json!([{"price": 9.5}]));
///
/// let err = encode(&vec![Line { price: 1.0 }, Line { price: f64::NAN }]).unwrap_err();
/// assert_eq!(err.path(), "$[1].price");
/// ```
///
/// # Errors
/// [`EncodeError`] for a value with no JSON form: a non-finite float, an integer beyond 64 bits, a
/// map key that is not text-like, a key repeated in one object, an error from the value's own
/// `Serialize`. The error names the path of the refused value.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Value, EncodeError> {
    let value = value.serialize(Encoder).map_err(Failure::finish)?;
    let depth = nesting(&value);
    if depth > MAX_NESTING {
        return Err(EncodeError {
            path: "$".to_owned(),
            kind: EncodeErrorKind::TooDeep,
            message: format!(
                "arrays and objects nest {depth} levels deep; at most {MAX_NESTING} are allowed, the most JSON readers such as serde_json take back"
            ),
        });
    }
    Ok(value)
}

/// The deepest nesting of arrays and objects [`encode`] accepts: serde_json (which the relay and
/// most Rust consumers read events with) refuses deeper documents, so such an event could never
/// be read back.
pub const MAX_NESTING: usize = 127;

/// How many arrays and objects nest in `value` at its deepest (0 for a scalar); iterative, so a
/// deep value cannot overflow the stack.
fn nesting(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 0usize)];
    while let Some((value, depth)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match value {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(map) => Box::new(map.values()),
            _ => continue,
        };
        deepest = deepest.max(depth + 1);
        stack.extend(children.map(|child| (child, depth + 1)));
    }
    deepest
}

/// A value that [`encode`] refused: where it is and what is wrong with it.
///
/// Displayed as `path: message`, e.g. `$.lines[2].price: NaN has no JSON number; only finite
/// floats are allowed`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodeError {
    path: String,
    kind: EncodeErrorKind,
    message: String,
}

impl EncodeError {
    /// The JSON path of the refused value: `$` for the value itself, then `[i]` per element and
    /// `.key` per member, with keys that are not plain identifiers quoted (`$.a."b.c"[1]`). For a
    /// map key that has no JSON form, the path of the map.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// What kind of value was refused.
    pub fn kind(&self) -> EncodeErrorKind {
        self.kind
    }

    /// What is wrong and what is allowed, without the path.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

impl std::error::Error for EncodeError {}

/// Why [`encode`] refused a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EncodeErrorKind {
    /// A float NaN, +infinity or -infinity (as a value or a map key).
    NonFiniteFloat,
    /// An `i128` or `u128` outside `-2^63 ..= 2^64 - 1`.
    IntegerOutOfRange,
    /// A map key that is not a string, char, integer, bool, finite float or unit enum variant.
    KeyNotText,
    /// The same key twice in one object.
    DuplicateKey,
    /// The value's own `Serialize` implementation reported an error.
    Serialize,
    /// A string (value or key) holding the NUL character U+0000, which PostgreSQL's `jsonb` and
    /// `text` cannot store; refused on every backend so an event is portable.
    NulCharacter,
    /// Arrays and objects nested deeper than [`MAX_NESTING`] levels.
    TooDeep,
}

/// The JSON path step `.name`, or `."name"` (JSON-quoted) when `name` is not a plain identifier.
pub(crate) fn key_step(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 3);
    push_key_step(&mut out, name);
    out
}

fn push_key_step(out: &mut String, name: &str) {
    let mut chars = name.chars();
    let plain = chars.next().is_some_and(|c| c == '_' || c.is_alphabetic())
        && chars.all(|c| c == '_' || c.is_alphanumeric());
    out.push('.');
    if plain {
        out.push_str(name);
    } else {
        // Serializing a str to JSON text cannot fail.
        out.push_str(&serde_json::to_string(name).unwrap_or_default());
    }
}

/// One step from a value to a part of it, recorded only when an error passes back through it.
#[derive(Debug)]
enum Step {
    Index(usize),
    Key(Cow<'static, str>),
}

/// The serializer's error: the steps are pushed innermost first while it propagates outwards.
#[derive(Debug)]
struct Failure {
    steps: Vec<Step>,
    kind: EncodeErrorKind,
    message: String,
}

impl Failure {
    fn new(kind: EncodeErrorKind, message: String) -> Self {
        Failure {
            steps: Vec::new(),
            kind,
            message,
        }
    }

    fn non_finite(v: impl Display) -> Self {
        Failure::new(
            EncodeErrorKind::NonFiniteFloat,
            format!("{v} has no JSON number; only finite floats are allowed"),
        )
    }

    fn nul() -> Self {
        Failure::new(
            EncodeErrorKind::NulCharacter,
            "text holds a NUL character (U+0000), which PostgreSQL cannot store; remove it or use base64 bytes".to_owned(),
        )
    }

    fn at(mut self, step: Step) -> Self {
        self.steps.push(step);
        self
    }

    fn at_index(self, index: usize) -> Self {
        self.at(Step::Index(index))
    }

    fn at_key(self, key: impl Into<Cow<'static, str>>) -> Self {
        self.at(Step::Key(key.into()))
    }

    fn finish(self) -> EncodeError {
        let mut path = String::from("$");
        for step in self.steps.iter().rev() {
            match step {
                Step::Index(i) => {
                    let _ = write!(path, "[{i}]");
                }
                Step::Key(k) => push_key_step(&mut path, k),
            }
        }
        EncodeError {
            path,
            kind: self.kind,
            message: self.message,
        }
    }
}

impl Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

impl ser::Error for Failure {
    fn custom<T: Display>(msg: T) -> Self {
        Failure::new(EncodeErrorKind::Serialize, msg.to_string())
    }
}

type Out = Result<Value, Failure>;

fn int_out_of_range(v: impl Display) -> Failure {
    Failure::new(
        EncodeErrorKind::IntegerOutOfRange,
        format!(
            "{v} is outside the 64-bit range that JSON readers keep exactly; integers from \
             -2^63 to 2^64-1 are allowed (send larger ones as text)"
        ),
    )
}

fn finite(v: f64) -> Out {
    Number::from_f64(v)
        .map(Value::Number)
        .ok_or_else(|| Failure::non_finite(v))
}

/// A capacity from a length hint, bounded so that a wrong hint cannot reserve much memory.
fn capacity(len: Option<usize>) -> usize {
    len.unwrap_or(0).min(1024)
}

/// Adds `key: value` to an object, refusing a key that is already there.
fn insert(map: &mut Map<String, Value>, key: String, value: Value) -> Result<(), Failure> {
    match map.entry(key) {
        serde_json::map::Entry::Vacant(slot) => {
            slot.insert(value);
            Ok(())
        }
        serde_json::map::Entry::Occupied(slot) => {
            let key = slot.key().clone();
            Err(Failure::new(
                EncodeErrorKind::DuplicateKey,
                format!(
                    "the key {key:?} appears twice in one object; each key is allowed once (the \
                     second value would replace the first)"
                ),
            )
            .at_key(key))
        }
    }
}

/// `{variant: inner}`, serde_json's externally tagged form.
fn tagged(variant: &'static str, inner: Value) -> Value {
    let mut map = Map::with_capacity(1);
    map.insert(variant.to_owned(), inner);
    Value::Object(map)
}

/// The serializer behind [`encode`]: builds a [`Value`]; human-readable (serde's default).
struct Encoder;

impl ser::Serializer for Encoder {
    type Ok = Value;
    type Error = Failure;
    type SerializeSeq = SeqEncoder;
    type SerializeTuple = SeqEncoder;
    type SerializeTupleStruct = SeqEncoder;
    type SerializeTupleVariant = SeqEncoder;
    type SerializeMap = MapEncoder;
    type SerializeStruct = StructEncoder;
    type SerializeStructVariant = StructEncoder;

    fn serialize_bool(self, v: bool) -> Out {
        Ok(Value::Bool(v))
    }
    fn serialize_i8(self, v: i8) -> Out {
        Ok(Value::from(v))
    }
    fn serialize_i16(self, v: i16) -> Out {
        Ok(Value::from(v))
    }
    fn serialize_i32(self, v: i32) -> Out {
        Ok(Value::from(v))
    }
    fn serialize_i64(self, v: i64) -> Out {
        Ok(Value::from(v))
    }
    fn serialize_i128(self, v: i128) -> Out {
        if let Ok(v) = u64::try_from(v) {
            Ok(Value::from(v))
        } else if let Ok(v) = i64::try_from(v) {
            Ok(Value::from(v))
        } else {
            Err(int_out_of_range(v))
        }
    }
    fn serialize_u8(self, v: u8) -> Out {
        Ok(Value::from(v))
    }
    fn serialize_u16(self, v: u16) -> Out {
        Ok(Value::from(v))
    }
    fn serialize_u32(self, v: u32) -> Out {
        Ok(Value::from(v))
    }
    fn serialize_u64(self, v: u64) -> Out {
        Ok(Value::from(v))
    }
    fn serialize_u128(self, v: u128) -> Out {
        u64::try_from(v)
            .map(Value::from)
            .map_err(|_| int_out_of_range(v))
    }
    fn serialize_f32(self, v: f32) -> Out {
        if !v.is_finite() {
            return Err(Failure::non_finite(v));
        }
        // The shortest text that reads back as this f32 ("0.1"), as an f64: not the f64 nearest to
        // the f32's binary value (0.10000000149011612).
        let shortest: f64 = v.to_string().parse().unwrap_or(f64::from(v));
        finite(shortest)
    }
    fn serialize_f64(self, v: f64) -> Out {
        finite(v)
    }
    fn serialize_char(self, v: char) -> Out {
        if v == '\0' {
            return Err(Failure::nul());
        }
        Ok(Value::String(v.to_string()))
    }
    fn serialize_str(self, v: &str) -> Out {
        if v.contains('\0') {
            return Err(Failure::nul());
        }
        Ok(Value::String(v.to_owned()))
    }
    fn serialize_bytes(self, v: &[u8]) -> Out {
        Ok(Value::String(
            base64::engine::general_purpose::STANDARD.encode(v),
        ))
    }
    fn serialize_none(self) -> Out {
        Ok(Value::Null)
    }
    fn serialize_some<T: ?Sized + Serialize>(self, value: &T) -> Out {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Out {
        Ok(Value::Null)
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Out {
        Ok(Value::Null)
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Out {
        Ok(Value::String(variant.to_owned()))
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Out {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Out {
        let inner = value.serialize(Encoder).map_err(|e| e.at_key(variant))?;
        Ok(tagged(variant, inner))
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<SeqEncoder, Failure> {
        Ok(SeqEncoder::new(None, len))
    }
    fn serialize_tuple(self, len: usize) -> Result<SeqEncoder, Failure> {
        Ok(SeqEncoder::new(None, Some(len)))
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        len: usize,
    ) -> Result<SeqEncoder, Failure> {
        Ok(SeqEncoder::new(None, Some(len)))
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<SeqEncoder, Failure> {
        Ok(SeqEncoder::new(Some(variant), Some(len)))
    }
    fn serialize_map(self, len: Option<usize>) -> Result<MapEncoder, Failure> {
        Ok(MapEncoder {
            map: Map::with_capacity(capacity(len)),
            key: None,
        })
    }
    fn serialize_struct(self, name: &'static str, len: usize) -> Result<StructEncoder, Failure> {
        let form = match (name, len) {
            ("Duration", 2) => Form::Duration,
            ("SystemTime", 2) => Form::SystemTime,
            (JSON_NUMBER_TOKEN, 1) => Form::JsonNumber,
            (JSON_RAW_TOKEN, 1) => Form::RawJson,
            _ => Form::Object,
        };
        Ok(StructEncoder::new(form, None, len))
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<StructEncoder, Failure> {
        Ok(StructEncoder::new(Form::Object, Some(variant), len))
    }
}

/// Elements of a sequence, tuple, tuple struct or (with `variant`) tuple variant.
struct SeqEncoder {
    variant: Option<&'static str>,
    items: Vec<Value>,
}

impl SeqEncoder {
    fn new(variant: Option<&'static str>, len: Option<usize>) -> Self {
        SeqEncoder {
            variant,
            items: Vec::with_capacity(capacity(len)),
        }
    }

    fn push<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Failure> {
        let index = self.items.len();
        match value.serialize(Encoder) {
            Ok(value) => {
                self.items.push(value);
                Ok(())
            }
            Err(e) => {
                let e = e.at_index(index);
                Err(match self.variant {
                    Some(variant) => e.at_key(variant),
                    None => e,
                })
            }
        }
    }

    fn finish(self) -> Out {
        let array = Value::Array(self.items);
        Ok(match self.variant {
            Some(variant) => tagged(variant, array),
            None => array,
        })
    }
}

impl ser::SerializeSeq for SeqEncoder {
    type Ok = Value;
    type Error = Failure;
    fn serialize_element<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Failure> {
        self.push(value)
    }
    fn end(self) -> Out {
        self.finish()
    }
}

impl ser::SerializeTuple for SeqEncoder {
    type Ok = Value;
    type Error = Failure;
    fn serialize_element<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Failure> {
        self.push(value)
    }
    fn end(self) -> Out {
        self.finish()
    }
}

impl ser::SerializeTupleStruct for SeqEncoder {
    type Ok = Value;
    type Error = Failure;
    fn serialize_field<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Failure> {
        self.push(value)
    }
    fn end(self) -> Out {
        self.finish()
    }
}

impl ser::SerializeTupleVariant for SeqEncoder {
    type Ok = Value;
    type Error = Failure;
    fn serialize_field<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Failure> {
        self.push(value)
    }
    fn end(self) -> Out {
        self.finish()
    }
}

/// Entries of a map; keys become text by [`KeyEncoder`].
struct MapEncoder {
    map: Map<String, Value>,
    key: Option<String>,
}

impl ser::SerializeMap for MapEncoder {
    type Ok = Value;
    type Error = Failure;
    fn serialize_key<T: ?Sized + Serialize>(&mut self, key: &T) -> Result<(), Failure> {
        self.key = Some(key.serialize(KeyEncoder)?);
        Ok(())
    }
    fn serialize_value<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Failure> {
        let Some(key) = self.key.take() else {
            return Err(ser::Error::custom(
                "a map value was serialized before its key",
            ));
        };
        match value.serialize(Encoder) {
            Ok(value) => insert(&mut self.map, key, value),
            Err(e) => Err(e.at_key(key)),
        }
    }
    fn end(self) -> Out {
        Ok(Value::Object(self.map))
    }
}

/// serde_json's private struct name for an arbitrary-precision number (feature
/// `arbitrary_precision`): one field of that name holding the number's text.
const JSON_NUMBER_TOKEN: &str = "$serde_json::private::Number";
/// serde_json's private struct name for a `RawValue` (feature `raw_value`): one field of that name
/// holding the JSON text.
const JSON_RAW_TOKEN: &str = "$serde_json::private::RawValue";

/// What a struct's fields become when it ends.
#[derive(Clone, Copy)]
enum Form {
    /// An object (also for a struct variant, then wrapped in `{variant: …}`).
    Object,
    /// `std::time::Duration`: seconds as a float number.
    Duration,
    /// `std::time::SystemTime`: RFC 3339 text in UTC.
    SystemTime,
    /// serde_json's arbitrary-precision number: the number.
    JsonNumber,
    /// serde_json's `RawValue`: its JSON, parsed.
    RawJson,
}

/// Fields of a struct or struct variant.
struct StructEncoder {
    form: Form,
    variant: Option<&'static str>,
    map: Map<String, Value>,
}

impl StructEncoder {
    fn new(form: Form, variant: Option<&'static str>, len: usize) -> Self {
        StructEncoder {
            form,
            variant,
            map: Map::with_capacity(capacity(Some(len))),
        }
    }

    fn field<T: ?Sized + Serialize>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Failure> {
        let variant = self.variant;
        let within = |e: Failure| match variant {
            Some(variant) => e.at_key(variant),
            None => e,
        };
        let value = value
            .serialize(Encoder)
            .map_err(|e| within(e.at_key(key)))?;
        insert(&mut self.map, key.to_owned(), value).map_err(within)
    }

    fn finish(self) -> Out {
        let value = match self.form {
            Form::Object => Value::Object(self.map),
            Form::Duration => match two_u64(&self.map, "secs", "nanos") {
                Some((secs, nanos)) if nanos < 1_000_000_000 => duration_seconds(secs, nanos)?,
                _ => Value::Object(self.map),
            },
            Form::SystemTime => match two_u64(&self.map, "secs_since_epoch", "nanos_since_epoch") {
                Some((secs, nanos)) if nanos < 1_000_000_000 => system_time(secs, nanos)?,
                _ => Value::Object(self.map),
            },
            Form::JsonNumber => match self.map.get(JSON_NUMBER_TOKEN) {
                Some(Value::String(text)) => {
                    text.parse::<Number>().map(Value::Number).map_err(|e| {
                        ser::Error::custom(format!("the number {text:?} is not JSON: {e}"))
                    })?
                }
                _ => Value::Object(self.map),
            },
            Form::RawJson => match self.map.get(JSON_RAW_TOKEN) {
                Some(Value::String(text)) => serde_json::from_str(text).map_err(|e| {
                    <Failure as ser::Error>::custom(format!("the raw JSON is not JSON: {e}"))
                })?,
                _ => Value::Object(self.map),
            },
        };
        Ok(match self.variant {
            Some(variant) => tagged(variant, value),
            None => value,
        })
    }
}

/// The two fields of a map that has exactly these two, both unsigned integers.
fn two_u64(map: &Map<String, Value>, a: &str, b: &str) -> Option<(u64, u64)> {
    if map.len() != 2 {
        return None;
    }
    Some((map.get(a)?.as_u64()?, map.get(b)?.as_u64()?))
}

/// `secs.nanos` seconds as the nearest f64 (parsed from the exact decimal text).
fn duration_seconds(secs: u64, nanos: u64) -> Out {
    let seconds: f64 = format!("{secs}.{nanos:09}")
        .parse()
        .map_err(|e| ser::Error::custom(format!("duration {secs}.{nanos:09}s: {e}")))?;
    finite(seconds)
}

/// A time since the Unix epoch as chrono writes a `DateTime<Utc>`.
fn system_time(secs: u64, nanos: u64) -> Out {
    let at = i64::try_from(secs)
        .ok()
        .zip(u32::try_from(nanos).ok())
        .and_then(|(secs, nanos)| chrono::DateTime::from_timestamp(secs, nanos));
    match at {
        Some(at) => at.serialize(Encoder),
        None => Err(ser::Error::custom(format!(
            "the time {secs}.{nanos:09}s after 1970-01-01 is beyond the years ISO 8601 text covers"
        ))),
    }
}

impl ser::SerializeStruct for StructEncoder {
    type Ok = Value;
    type Error = Failure;
    fn serialize_field<T: ?Sized + Serialize>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Failure> {
        self.field(key, value)
    }
    fn end(self) -> Out {
        self.finish()
    }
}

impl ser::SerializeStructVariant for StructEncoder {
    type Ok = Value;
    type Error = Failure;
    fn serialize_field<T: ?Sized + Serialize>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Failure> {
        self.field(key, value)
    }
    fn end(self) -> Out {
        self.finish()
    }
}

/// Turns a map key into object-key text, as serde_json does: strings and chars as they are,
/// integers, bools and finite floats as their JSON text, unit variants as their name.
struct KeyEncoder;

fn key_not_text(what: &str) -> Failure {
    Failure::new(
        EncodeErrorKind::KeyNotText,
        format!(
            "a map key is {what}; JSON object keys are text, so only strings, chars, integers, \
             bools, finite floats and unit enum variants are allowed as keys"
        ),
    )
}

type Key = Result<String, Failure>;

impl ser::Serializer for KeyEncoder {
    type Ok = String;
    type Error = Failure;
    type SerializeSeq = Impossible<String, Failure>;
    type SerializeTuple = Impossible<String, Failure>;
    type SerializeTupleStruct = Impossible<String, Failure>;
    type SerializeTupleVariant = Impossible<String, Failure>;
    type SerializeMap = Impossible<String, Failure>;
    type SerializeStruct = Impossible<String, Failure>;
    type SerializeStructVariant = Impossible<String, Failure>;

    fn serialize_bool(self, v: bool) -> Key {
        Ok(v.to_string())
    }
    fn serialize_i8(self, v: i8) -> Key {
        Ok(v.to_string())
    }
    fn serialize_i16(self, v: i16) -> Key {
        Ok(v.to_string())
    }
    fn serialize_i32(self, v: i32) -> Key {
        Ok(v.to_string())
    }
    fn serialize_i64(self, v: i64) -> Key {
        Ok(v.to_string())
    }
    fn serialize_i128(self, v: i128) -> Key {
        Ok(v.to_string())
    }
    fn serialize_u8(self, v: u8) -> Key {
        Ok(v.to_string())
    }
    fn serialize_u16(self, v: u16) -> Key {
        Ok(v.to_string())
    }
    fn serialize_u32(self, v: u32) -> Key {
        Ok(v.to_string())
    }
    fn serialize_u64(self, v: u64) -> Key {
        Ok(v.to_string())
    }
    fn serialize_u128(self, v: u128) -> Key {
        Ok(v.to_string())
    }
    fn serialize_f32(self, v: f32) -> Key {
        if v.is_finite() {
            // serde_json's own text for the float, so keys match serde_json::to_value's.
            serde_json::to_string(&v).map_err(ser::Error::custom)
        } else {
            Err(Failure::non_finite(v))
        }
    }
    fn serialize_f64(self, v: f64) -> Key {
        if v.is_finite() {
            serde_json::to_string(&v).map_err(ser::Error::custom)
        } else {
            Err(Failure::non_finite(v))
        }
    }
    fn serialize_char(self, v: char) -> Key {
        if v == '\0' {
            return Err(Failure::nul());
        }
        Ok(v.to_string())
    }
    fn serialize_str(self, v: &str) -> Key {
        if v.contains('\0') {
            return Err(Failure::nul());
        }
        Ok(v.to_owned())
    }
    fn serialize_bytes(self, _v: &[u8]) -> Key {
        Err(key_not_text("bytes"))
    }
    fn serialize_none(self) -> Key {
        Err(key_not_text("None"))
    }
    fn serialize_some<T: ?Sized + Serialize>(self, _value: &T) -> Key {
        Err(key_not_text("an Option"))
    }
    fn serialize_unit(self) -> Key {
        Err(key_not_text("unit"))
    }
    fn serialize_unit_struct(self, name: &'static str) -> Key {
        Err(key_not_text(&format!("the unit struct {name}")))
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Key {
        Ok(variant.to_owned())
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Key {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        name: &'static str,
        _index: u32,
        variant: &'static str,
        _value: &T,
    ) -> Key {
        Err(key_not_text(&format!("the enum variant {name}::{variant}")))
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Self::SerializeSeq, Failure> {
        Err(key_not_text("a sequence"))
    }
    fn serialize_tuple(self, _len: usize) -> Result<Self::SerializeTuple, Failure> {
        Err(key_not_text("a tuple"))
    }
    fn serialize_tuple_struct(
        self,
        name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleStruct, Failure> {
        Err(key_not_text(&format!("the tuple struct {name}")))
    }
    fn serialize_tuple_variant(
        self,
        name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleVariant, Failure> {
        Err(key_not_text(&format!("the enum variant {name}::{variant}")))
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Self::SerializeMap, Failure> {
        Err(key_not_text("a map"))
    }
    fn serialize_struct(
        self,
        name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStruct, Failure> {
        Err(key_not_text(&format!("the struct {name}")))
    }
    fn serialize_struct_variant(
        self,
        name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStructVariant, Failure> {
        Err(key_not_text(&format!("the enum variant {name}::{variant}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;
    use std::collections::BTreeMap;
    use std::str::FromStr;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    #[test]
    fn nesting_is_limited_to_what_serde_json_reads_back() {
        let nested = |levels: usize| {
            let mut value = json!(1);
            for i in 0..levels {
                value = if i % 2 == 0 {
                    json!([value])
                } else {
                    json!({ "a": value })
                };
            }
            value
        };
        let deepest = ok(&nested(MAX_NESTING));
        let text = serde_json::to_string(&deepest).unwrap();
        assert!(serde_json::from_str::<Value>(&text).is_ok());
        // One level more is what serde_json refuses to read; encode refuses to write it.
        let text = serde_json::to_string(&nested(MAX_NESTING + 1)).unwrap();
        assert!(serde_json::from_str::<Value>(&text).is_err());
        let e = refused(&nested(MAX_NESTING + 1));
        assert_eq!(e.kind(), EncodeErrorKind::TooDeep);
        assert_eq!(e.path(), "$");
        assert!(e.to_string().contains("128 levels"), "{e}");
        assert_eq!(nesting(&json!(1)), 0);
        assert_eq!(nesting(&json!({"a": [1, {"b": []}], "c": 2})), 4);
    }

    fn refused(value: &impl Serialize) -> EncodeError {
        match encode(value) {
            Ok(v) => panic!("expected a refusal, got {v}"),
            Err(e) => e,
        }
    }

    fn ok(value: &impl Serialize) -> Value {
        match encode(value) {
            Ok(v) => v,
            Err(e) => panic!("expected JSON, got {e}"),
        }
    }

    // One test per row of hare's table.

    #[test]
    fn decimal_is_its_exact_text() {
        use rust_decimal::Decimal;
        let d = |s: &str| Decimal::from_str(s).unwrap();
        assert_eq!(ok(&d("12.50")), json!("12.50"));
        assert_eq!(ok(&Decimal::new(1250, 2)), json!("12.50"));
        assert_eq!(ok(&d("-0.0010")), json!("-0.0010"));
        assert_eq!(ok(&d("100")), json!("100"));
        assert_eq!(
            ok(&d("79228162514264337593543950335")),
            json!("79228162514264337593543950335")
        );
        assert_eq!(
            ok(&BTreeMap::from([("total", d("12.50"))])),
            json!({"total": "12.50"})
        );
    }

    #[test]
    fn uuid_is_its_text() {
        let id = uuid::Uuid::from_u128(0x0190_a1b2_c3d4_7e5f_8a6b_7c8d_9e0f_1a2b);
        assert_eq!(ok(&id), json!("0190a1b2-c3d4-7e5f-8a6b-7c8d9e0f1a2b"));
    }

    #[test]
    fn dates_times_and_datetimes_are_iso_8601() {
        use chrono::{FixedOffset, NaiveDate, NaiveTime, TimeZone, Utc};
        let utc = Utc.with_ymd_and_hms(2024, 5, 1, 12, 30, 0).unwrap();
        assert_eq!(ok(&utc), json!("2024-05-01T12:30:00Z"));
        let millis = utc + chrono::TimeDelta::milliseconds(250);
        assert_eq!(ok(&millis), json!("2024-05-01T12:30:00.250Z"));
        let moscow = utc.with_timezone(&FixedOffset::east_opt(3 * 3600).unwrap());
        assert_eq!(ok(&moscow), json!("2024-05-01T15:30:00+03:00"));
        let date = NaiveDate::from_ymd_opt(2024, 5, 1).unwrap();
        assert_eq!(ok(&date), json!("2024-05-01"));
        let time = NaiveTime::from_hms_milli_opt(12, 30, 0, 250).unwrap();
        assert_eq!(ok(&time), json!("12:30:00.250"));
        assert_eq!(
            ok(&NaiveTime::from_hms_opt(7, 5, 9).unwrap()),
            json!("07:05:09")
        );
        assert_eq!(ok(&utc.naive_utc()), json!("2024-05-01T12:30:00"));
        let system = UNIX_EPOCH + Duration::from_millis(1_714_566_600_250);
        assert_eq!(ok(&system), json!("2024-05-01T12:30:00.250Z"));
        assert_eq!(ok(&UNIX_EPOCH), json!("1970-01-01T00:00:00Z"));
        assert_eq!(ok(&Some(date)), json!("2024-05-01"));
    }

    #[test]
    fn durations_are_seconds() {
        assert_eq!(ok(&Duration::from_millis(1500)), json!(1.5));
        assert_eq!(ok(&Duration::from_secs(90)), json!(90.0));
        assert_eq!(ok(&Duration::ZERO), json!(0.0));
        assert_eq!(ok(&Duration::from_nanos(1)), json!(1e-9));
        assert_eq!(
            ok(&Duration::new(86_400, 123_456_789)),
            json!(86_400.123_456_789)
        );
        assert_eq!(
            ok(&Duration::MAX),
            json!(18_446_744_073_709_551_615.999_999_999)
        );
        assert_eq!(
            ok(&BTreeMap::from([("timeout", Duration::from_millis(250))])),
            json!({"timeout": 0.25})
        );
        // json! converts with serde_json first, so its durations stay serde's struct.
        assert_eq!(
            ok(&json!({"timeout": Duration::from_millis(250)})),
            json!({"timeout": {"secs": 0, "nanos": 250_000_000}})
        );
        // chrono's TimeDelta writes the anonymous pair (secs, nanos); convert it for seconds.
        let delta = chrono::TimeDelta::milliseconds(1500);
        assert_eq!(ok(&delta), json!([1, 500_000_000]));
        assert_eq!(ok(&delta.to_std().unwrap()), json!(1.5));
        assert_eq!(ok(&delta.as_seconds_f64()), json!(1.5));
    }

    #[test]
    fn a_struct_named_duration_with_other_fields_stays_an_object() {
        #[derive(Serialize)]
        #[allow(dead_code)]
        struct Duration {
            secs: u64,
            unit: &'static str,
        }
        assert_eq!(
            ok(&Duration { secs: 3, unit: "s" }),
            json!({"secs": 3, "unit": "s"})
        );
    }

    #[test]
    fn ip_addresses_and_networks_are_text() {
        use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
        let v4 = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        assert_eq!(ok(&v4), json!("192.0.2.1"));
        assert_eq!(ok(&v6), json!("2001:db8::1"));
        assert_eq!(ok(&Ipv6Addr::LOCALHOST), json!("::1"));
        assert_eq!(ok(&SocketAddr::new(v4, 8080)), json!("192.0.2.1:8080"));
        assert_eq!(ok(&SocketAddr::new(v6, 443)), json!("[2001:db8::1]:443"));
        let net: ipnet::IpNet = "10.0.0.0/8".parse().unwrap();
        assert_eq!(ok(&net), json!("10.0.0.0/8"));
        let net6: ipnet::Ipv6Net = "2001:db8::/32".parse().unwrap();
        assert_eq!(ok(&net6), json!("2001:db8::/32"));
        let net4: ipnet::Ipv4Net = "192.0.2.0/24".parse().unwrap();
        assert_eq!(ok(&net4), json!("192.0.2.0/24"));
    }

    #[test]
    fn bytes_are_base64() {
        use serde_bytes::{ByteBuf, Bytes};
        assert_eq!(ok(&ByteBuf::from(b"hello".to_vec())), json!("aGVsbG8="));
        assert_eq!(ok(&Bytes::new(&[0xff, 0xfe])), json!("//4="));
        assert_eq!(ok(&Bytes::new(b"")), json!(""));
        #[derive(Serialize)]
        struct Blob {
            #[serde(with = "serde_bytes")]
            data: Vec<u8>,
            plain: Vec<u8>,
        }
        let blob = Blob {
            data: vec![1, 2, 3],
            plain: vec![1, 2, 3],
        };
        // Without serde_bytes a Vec<u8> is a sequence to serde, so it stays an array of numbers.
        assert_eq!(ok(&blob), json!({"data": "AQID", "plain": [1, 2, 3]}));
    }

    #[derive(Serialize)]
    enum Payment {
        Paid,
        #[serde(rename = "on-hold")]
        OnHold,
        Card(Card),
        Pair(u8, f64),
        Transfer {
            iban: String,
            amount: f64,
        },
    }

    #[derive(Serialize)]
    struct Card {
        last4: &'static str,
        amount: f64,
    }

    #[test]
    fn enum_variants_are_their_value() {
        assert_eq!(ok(&Payment::Paid), json!("Paid"));
        assert_eq!(ok(&Payment::OnHold), json!("on-hold"));
        #[derive(Serialize)]
        #[serde(rename_all = "snake_case")]
        enum Status {
            InTransit,
        }
        assert_eq!(ok(&Status::InTransit), json!("in_transit"));
        assert_eq!(
            ok(&Payment::Card(Card {
                last4: "4242",
                amount: 9.5
            })),
            json!({"Card": {"last4": "4242", "amount": 9.5}})
        );
        assert_eq!(ok(&Payment::Pair(1, 2.5)), json!({"Pair": [1, 2.5]}));
        assert_eq!(
            ok(&Payment::Transfer {
                iban: "DE00".into(),
                amount: 3.0
            }),
            json!({"Transfer": {"iban": "DE00", "amount": 3.0}})
        );
        #[derive(Serialize)]
        #[serde(tag = "type")]
        enum Tagged {
            Shipped { carrier: &'static str },
        }
        assert_eq!(
            ok(&Tagged::Shipped { carrier: "DHL" }),
            json!({"type": "Shipped", "carrier": "DHL"})
        );
    }

    #[test]
    fn json_passes_as_is() {
        let value = json!({
            "id": 22,
            "neg": -7,
            "big": u64::MAX,
            "price": 12.5,
            "tags": ["a", null, true, {"x": []}],
            "empty": {},
        });
        assert_eq!(ok(&value), value);
        assert_eq!(ok(&Value::Null), Value::Null);
    }

    #[test]
    fn serde_json_private_number_and_raw_value_forms_are_understood() {
        // What serde_json's Number (feature arbitrary_precision) and RawValue (feature raw_value)
        // send to a serializer; either feature may be switched on by another crate in the build.
        struct Token(&'static str, &'static str);
        impl Serialize for Token {
            fn serialize<S: ser::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                use ser::SerializeStruct as _;
                let mut st = s.serialize_struct(self.0, 1)?;
                st.serialize_field(self.0, self.1)?;
                st.end()
            }
        }
        assert_eq!(ok(&Token(JSON_NUMBER_TOKEN, "12.5")), json!(12.5));
        assert_eq!(ok(&Token(JSON_NUMBER_TOKEN, "7")), json!(7));
        assert_eq!(
            ok(&Token(JSON_RAW_TOKEN, r#"{"a": [1, "b"]}"#)),
            json!({"a": [1, "b"]})
        );
        let e = refused(&vec![Token(JSON_RAW_TOKEN, "{oops")]);
        assert_eq!(e.path(), "$[0]");
        assert_eq!(e.kind(), EncodeErrorKind::Serialize);
    }

    #[test]
    fn floats_are_numbers_and_f32_keeps_its_shortest_text() {
        assert_eq!(ok(&1.5f64), json!(1.5));
        assert_eq!(ok(&-0.0f64), json!(-0.0));
        assert_eq!(ok(&0.1f32), json!(0.1));
        assert_eq!(ok(&0.1f32).to_string(), "0.1");
        assert_eq!(ok(&3.0f32), json!(3.0));
        assert_eq!(ok(&f32::MAX), json!(3.4028235e38));
        assert_eq!(ok(&f32::MIN_POSITIVE), json!(1.1754944e-38));
        assert_eq!(ok(&1e-45f32), json!(1e-45));
        // serde_json widens the binary value instead.
        assert_eq!(
            serde_json::to_value(0.1f32).unwrap(),
            json!(0.10000000149011612)
        );
    }

    #[test]
    fn integers_beyond_64_bits_are_refused() {
        assert_eq!(ok(&i128::from(i64::MIN)), json!(i64::MIN));
        assert_eq!(ok(&u128::from(u64::MAX)), json!(u64::MAX));
        assert_eq!(ok(&-1i128), json!(-1));
        let e = refused(&i128::MIN);
        assert_eq!(e.path(), "$");
        assert_eq!(e.kind(), EncodeErrorKind::IntegerOutOfRange);
        assert!(e.message().contains(&i128::MIN.to_string()), "{e}");
        #[derive(Serialize)]
        struct Big {
            big: u128,
        }
        let e = refused(&Big {
            big: u128::from(u64::MAX) + 1,
        });
        assert_eq!(e.path(), "$.big");
        assert_eq!(
            e.to_string(),
            "$.big: 18446744073709551616 is outside the 64-bit range that JSON readers keep \
             exactly; integers from -2^63 to 2^64-1 are allowed (send larger ones as text)"
        );
    }

    #[test]
    fn none_unit_and_char() {
        #[derive(Serialize)]
        struct Marker;
        assert_eq!(ok(&None::<u8>), Value::Null);
        assert_eq!(ok(&()), Value::Null);
        assert_eq!(ok(&Marker), Value::Null);
        assert_eq!(ok(&'x'), json!("x"));
        assert_eq!(ok(&(1, "a", None::<u8>)), json!([1, "a", null]));
    }

    #[test]
    fn text_like_map_keys_become_text() {
        let ints: BTreeMap<i64, &str> = [(1, "a"), (-2, "b")].into();
        assert_eq!(ok(&ints), json!({"1": "a", "-2": "b"}));
        let bools: BTreeMap<bool, u8> = [(true, 1)].into();
        assert_eq!(ok(&bools), json!({"true": 1}));
        let chars: BTreeMap<char, u8> = [('é', 1)].into();
        assert_eq!(ok(&chars), json!({"é": 1}));
        let wide: BTreeMap<u128, u8> = [(u128::MAX, 1)].into();
        assert_eq!(
            ok(&wide),
            json!({"340282366920938463463374607431768211455": 1})
        );
        let ids: BTreeMap<uuid::Uuid, u8> = [(uuid::Uuid::nil(), 1)].into();
        assert_eq!(ok(&ids), json!({"00000000-0000-0000-0000-000000000000": 1}));
        #[derive(Serialize, PartialEq, Eq, PartialOrd, Ord)]
        enum Color {
            Red,
        }
        let colors: BTreeMap<Color, u8> = [(Color::Red, 1)].into();
        assert_eq!(ok(&colors), json!({"Red": 1}));
        let floats = vec![(1.5f64, 1)];
        struct AsMap<K, V>(Vec<(K, V)>);
        impl<K: Serialize, V: Serialize> Serialize for AsMap<K, V> {
            fn serialize<S: ser::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_map(self.0.iter().map(|(k, v)| (k, v)))
            }
        }
        let as_map = AsMap(floats);
        assert_eq!(ok(&as_map), json!({"1.5": 1}));
        assert_eq!(ok(&as_map), serde_json::to_value(&as_map).unwrap());
        let e = refused(&BTreeMap::from([("m", AsMap(vec![(f64::NAN, 1)]))]));
        assert_eq!(
            (e.path(), e.kind()),
            ("$.m", EncodeErrorKind::NonFiniteFloat)
        );
    }

    #[test]
    fn other_map_keys_are_refused_with_the_map_path() {
        let mut by_vec = BTreeMap::new();
        by_vec.insert(vec![1u8], 1);
        #[derive(Serialize)]
        struct Holder<T> {
            a: (u8, T),
        }
        let e = refused(&Holder { a: (0, by_vec) });
        assert_eq!(e.path(), "$.a[1]");
        assert_eq!(e.kind(), EncodeErrorKind::KeyNotText);
        assert!(e.message().starts_with("a map key is a sequence;"), "{e}");
        let mut by_pair = BTreeMap::new();
        by_pair.insert((1, 2), "x");
        assert_eq!(refused(&by_pair).kind(), EncodeErrorKind::KeyNotText);
        let mut by_option = BTreeMap::new();
        by_option.insert(Some(1), "x");
        assert_eq!(refused(&by_option).kind(), EncodeErrorKind::KeyNotText);
    }

    #[test]
    fn non_finite_floats_are_refused_with_their_path() {
        let bad = [
            Tree::Float(f64::NAN),
            Tree::Float(f64::INFINITY),
            Tree::Float(f64::NEG_INFINITY),
            Tree::Single(f32::NAN),
            Tree::Single(f32::INFINITY),
            Tree::Single(f32::NEG_INFINITY),
        ];
        for bad in bad {
            let inner = Tree::Map(BTreeMap::from([("b".to_owned(), bad)]));
            let tree = BTreeMap::from([("a", vec![Tree::Int(1), inner])]);
            let e = refused(&tree);
            assert_eq!(e.path(), "$.a[1].b", "{e}");
            assert_eq!(e.kind(), EncodeErrorKind::NonFiniteFloat);
        }
        // json! converts with serde_json, which has already written null for the NaN: the outbox
        // can only refuse what it is given as a float.
        assert_eq!(ok(&json!({"b": f64::NAN})), json!({"b": null}));
    }

    #[test]
    fn error_paths_name_the_refused_value() {
        #[derive(Serialize)]
        struct B {
            b: f64,
        }
        #[derive(Serialize)]
        struct A {
            a: Vec<B>,
        }
        let e = refused(&A {
            a: vec![B { b: 1.0 }, B { b: f64::NAN }],
        });
        assert_eq!(e.path(), "$.a[1].b");
        assert_eq!(e.kind(), EncodeErrorKind::NonFiniteFloat);
        assert_eq!(
            e.to_string(),
            "$.a[1].b: NaN has no JSON number; only finite floats are allowed"
        );

        let mut prices = BTreeMap::new();
        prices.insert("eu.west", vec![f64::INFINITY]);
        let e = refused(&BTreeMap::from([("prices", prices)]));
        assert_eq!(e.path(), r#"$.prices."eu.west"[0]"#);
        assert_eq!(
            e.message(),
            "inf has no JSON number; only finite floats are allowed"
        );

        let odd = BTreeMap::from([("", f32::NEG_INFINITY), ("a\"b", 1.0)]);
        assert_eq!(refused(&odd).path(), r#"$."""#);
        let odd = BTreeMap::from([("a\"b", f32::NAN)]);
        assert_eq!(refused(&odd).path(), r#"$."a\"b""#);
        let odd = BTreeMap::from([("1st", f32::NAN)]);
        assert_eq!(refused(&odd).path(), r#"$."1st""#);
        let odd = BTreeMap::from([("цена_1", f32::NAN)]);
        assert_eq!(refused(&odd).path(), "$.цена_1");

        assert_eq!(refused(&f32::NAN).path(), "$");
        let e = refused(&Payment::Card(Card {
            last4: "4242",
            amount: f64::NAN,
        }));
        assert_eq!(e.path(), "$.Card.amount");
        assert_eq!(refused(&Payment::Pair(1, f64::NAN)).path(), "$.Pair[1]");
        let e = refused(&vec![Payment::Transfer {
            iban: "x".into(),
            amount: f64::NEG_INFINITY,
        }]);
        assert_eq!(e.path(), "$[0].Transfer.amount");
        assert_eq!(refused(&Some((1, [0.0, f64::NAN]))).path(), "$[1][1]");
    }

    #[test]
    fn errors_of_the_values_own_serialize_keep_their_place() {
        #[derive(Serialize)]
        struct Event {
            at: Vec<SystemTime>,
        }
        let e = refused(&Event {
            at: vec![UNIX_EPOCH, UNIX_EPOCH - Duration::from_secs(1)],
        });
        assert_eq!(e.path(), "$.at[1]");
        assert_eq!(e.kind(), EncodeErrorKind::Serialize);
        assert_eq!(e.message(), "SystemTime must be later than UNIX_EPOCH");
    }

    #[test]
    fn a_key_twice_in_one_object_is_refused() {
        #[derive(Serialize)]
        struct Outer {
            a: u8,
            #[serde(flatten)]
            rest: BTreeMap<&'static str, u8>,
        }
        let e = refused(&vec![Outer {
            a: 1,
            rest: BTreeMap::from([("a", 2)]),
        }]);
        assert_eq!(e.path(), "$[0].a");
        assert_eq!(e.kind(), EncodeErrorKind::DuplicateKey);
        let fine = Outer {
            a: 1,
            rest: BTreeMap::from([("b", 2)]),
        };
        assert_eq!(ok(&fine), json!({"a": 1, "b": 2}));
        // Two keys that become the same text.
        let e = refused(&AsPairs(vec![(json!(1), 1), (json!("1"), 2)]));
        assert_eq!(
            (e.path(), e.kind()),
            (r#"$."1""#, EncodeErrorKind::DuplicateKey)
        );
    }

    struct AsPairs(Vec<(Value, u8)>);
    impl Serialize for AsPairs {
        fn serialize<S: ser::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.collect_map(self.0.iter().map(|(k, v)| (KeyOf(k), v)))
        }
    }
    /// A JSON number or string used as a map key.
    struct KeyOf<'a>(&'a Value);
    impl Serialize for KeyOf<'_> {
        fn serialize<S: ser::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            match self.0 {
                Value::Number(n) => s.serialize_u64(n.as_u64().unwrap_or(0)),
                other => s.serialize_str(other.as_str().unwrap_or("")),
            }
        }
    }

    #[test]
    fn key_steps() {
        assert_eq!(key_step("price"), ".price");
        assert_eq!(key_step("_x9"), "._x9");
        assert_eq!(key_step("x-request-id"), r#"."x-request-id""#);
        assert_eq!(key_step("a.b"), r#"."a.b""#);
        assert_eq!(key_step(""), r#"."""#);
        assert_eq!(key_step("line\n"), r#"."line\n""#);
    }

    /// A JSON-like tree; `untagged` makes each variant serialize as its content.
    #[derive(Debug, Clone, Serialize)]
    #[serde(untagged)]
    enum Tree {
        Null,
        Bool(bool),
        Int(i64),
        UInt(u64),
        Float(f64),
        Single(f32),
        Str(String),
        Opt(Option<Box<Tree>>),
        Seq(Vec<Tree>),
        Map(BTreeMap<String, Tree>),
    }

    /// Trees of finite f64 floats and everything else JSON has (f32 excluded: serde_json widens
    /// it, see `floats_are_numbers_and_f32_keeps_its_shortest_text`).
    fn tree() -> impl Strategy<Value = Tree> {
        let leaf = prop_oneof![
            Just(Tree::Null),
            any::<bool>().prop_map(Tree::Bool),
            any::<i64>().prop_map(Tree::Int),
            any::<u64>().prop_map(Tree::UInt),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Tree::Float),
            any::<String>().prop_map(Tree::Str),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Tree::Seq),
                prop::collection::btree_map(any::<String>(), inner.clone(), 0..6)
                    .prop_map(Tree::Map),
                prop::option::of(inner).prop_map(|t| Tree::Opt(t.map(Box::new))),
            ]
        })
    }

    /// Replaces a part of `tree` chosen by `route` with `poison` and returns its path after `$`.
    fn plant(tree: &mut Tree, route: &[usize], poison: &Tree) -> String {
        if let Some((&step, rest)) = route.split_first()
            && step % 4 != 0
        {
            match tree {
                Tree::Seq(items) if !items.is_empty() => {
                    let i = step % items.len();
                    return format!("[{i}]{}", plant(&mut items[i], rest, poison));
                }
                Tree::Map(map) if !map.is_empty() => {
                    let key = map
                        .keys()
                        .nth(step % map.len())
                        .cloned()
                        .unwrap_or_default();
                    let below = map.get_mut(&key).map(|t| plant(t, rest, poison));
                    return format!("{}{}", key_step(&key), below.unwrap_or_default());
                }
                Tree::Opt(Some(inner)) => return plant(inner, route, poison),
                _ => {}
            }
        }
        *tree = poison.clone();
        String::new()
    }

    fn poison() -> impl Strategy<Value = Tree> {
        prop_oneof![
            Just(Tree::Float(f64::NAN)),
            Just(Tree::Float(f64::INFINITY)),
            Just(Tree::Float(f64::NEG_INFINITY)),
            Just(Tree::Single(f32::NAN)),
            Just(Tree::Single(f32::INFINITY)),
            Just(Tree::Single(f32::NEG_INFINITY)),
        ]
    }

    proptest! {
        #[test]
        fn json_like_trees_encode_as_serde_json_does(t in tree()) {
            let expected = serde_json::to_value(&t).unwrap();
            prop_assert_eq!(&encode(&t).unwrap(), &expected);
            // A serde_json::Value passes through unchanged.
            prop_assert_eq!(encode(&expected).unwrap(), expected);
        }

        #[test]
        fn a_non_finite_float_anywhere_is_refused_at_its_path(
            mut t in tree(),
            route in prop::collection::vec(any::<usize>(), 0..6),
            bad in poison(),
        ) {
            let path = format!("${}", plant(&mut t, &route, &bad));
            let e = encode(&t).unwrap_err();
            prop_assert_eq!(e.kind(), EncodeErrorKind::NonFiniteFloat);
            prop_assert_eq!(e.path(), path);
        }

        #[test]
        fn finite_f32_is_its_shortest_text(v in any::<f32>().prop_filter("finite", |v| v.is_finite())) {
            let json = encode(&v).unwrap();
            let back = json.as_f64().unwrap();
            prop_assert_eq!(back, v.to_string().parse::<f64>().unwrap());
            #[allow(clippy::cast_possible_truncation)]
            let narrowed = back as f32;
            prop_assert_eq!(narrowed.to_bits(), v.to_bits());
        }

        #[test]
        fn finite_f64_is_itself(v in any::<f64>().prop_filter("finite", |v| v.is_finite())) {
            prop_assert_eq!(encode(&v).unwrap().as_f64().unwrap().to_bits(), v.to_bits());
        }

        #[test]
        fn wide_integers_are_numbers_exactly_when_they_fit_64_bits(v in any::<i128>()) {
            match encode(&v) {
                Ok(json) => prop_assert_eq!(json.to_string(), v.to_string()),
                Err(e) => {
                    prop_assert!(i64::try_from(v).is_err() && u64::try_from(v).is_err());
                    prop_assert_eq!(e.kind(), EncodeErrorKind::IntegerOutOfRange);
                }
            }
        }

        #[test]
        fn durations_read_back_to_the_microsecond(secs in 0u64..1_000_000_000, nanos in 0u32..1_000_000_000) {
            let d = Duration::new(secs, nanos);
            let back = Duration::from_secs_f64(encode(&d).unwrap().as_f64().unwrap());
            prop_assert!(back.abs_diff(d) < Duration::from_micros(1), "{d:?} came back as {back:?}");
        }
    }
}

#[cfg(test)]
mod nul_tests {
    use super::*;

    #[test]
    fn nul_in_text_or_keys_is_refused_with_its_path() {
        let e = encode(&serde_json::json!({"a": ["ok", "bad\u{0}"]})).unwrap_err();
        assert_eq!(
            (e.path(), e.kind()),
            ("$.a[1]", EncodeErrorKind::NulCharacter)
        );
        let mut m = std::collections::BTreeMap::new();
        m.insert("k\u{0}", 1);
        assert_eq!(
            encode(&m).unwrap_err().kind(),
            EncodeErrorKind::NulCharacter
        );
        assert_eq!(
            encode(&'\u{0}').unwrap_err().kind(),
            EncodeErrorKind::NulCharacter
        );
    }
}
