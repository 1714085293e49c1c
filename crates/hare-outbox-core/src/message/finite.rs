//! A serializer that writes nothing and stops at the first non-finite float, reporting its path.
//!
//! serde_json turns NaN and ±infinity into `null` without an error; the outbox must refuse them
//! (seed 001 § OutboxJsonEncoding), so every payload and header value is walked once with this.

use serde::ser::{self, Serialize};
use std::fmt;

/// The path (`$.a[2].b`) of the non-finite float found, or the text of a custom error.
#[derive(Debug)]
pub(crate) struct Found(pub(crate) String);

impl fmt::Display for Found {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Found {}

impl ser::Error for Found {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Found(msg.to_string())
    }
}

/// Walks a value; `path` holds the location being serialized.
#[derive(Default)]
pub(crate) struct Finder {
    path: Vec<String>,
}

impl Finder {
    fn here(&self) -> String {
        let mut s = String::from("$");
        for p in &self.path {
            s.push_str(p);
        }
        s
    }

    fn float(&self, v: f64) -> Result<(), Found> {
        if v.is_finite() {
            Ok(())
        } else {
            Err(Found(self.here()))
        }
    }

    fn nested<T: ?Sized + Serialize>(&mut self, step: String, value: &T) -> Result<(), Found> {
        self.path.push(step);
        let r = value.serialize(&mut *self);
        self.path.pop();
        r
    }
}

type R = Result<(), Found>;

impl<'a> ser::Serializer for &'a mut Finder {
    type Ok = ();
    type Error = Found;
    type SerializeSeq = Seq<'a>;
    type SerializeTuple = Seq<'a>;
    type SerializeTupleStruct = Seq<'a>;
    type SerializeTupleVariant = Seq<'a>;
    type SerializeMap = Map<'a>;
    type SerializeStruct = Map<'a>;
    type SerializeStructVariant = Map<'a>;

    fn serialize_bool(self, _: bool) -> R {
        Ok(())
    }
    fn serialize_i8(self, _: i8) -> R {
        Ok(())
    }
    fn serialize_i16(self, _: i16) -> R {
        Ok(())
    }
    fn serialize_i32(self, _: i32) -> R {
        Ok(())
    }
    fn serialize_i64(self, _: i64) -> R {
        Ok(())
    }
    fn serialize_i128(self, _: i128) -> R {
        Ok(())
    }
    fn serialize_u8(self, _: u8) -> R {
        Ok(())
    }
    fn serialize_u16(self, _: u16) -> R {
        Ok(())
    }
    fn serialize_u32(self, _: u32) -> R {
        Ok(())
    }
    fn serialize_u64(self, _: u64) -> R {
        Ok(())
    }
    fn serialize_u128(self, _: u128) -> R {
        Ok(())
    }
    fn serialize_f32(self, v: f32) -> R {
        self.float(f64::from(v))
    }
    fn serialize_f64(self, v: f64) -> R {
        self.float(v)
    }
    fn serialize_char(self, _: char) -> R {
        Ok(())
    }
    fn serialize_str(self, _: &str) -> R {
        Ok(())
    }
    fn serialize_bytes(self, _: &[u8]) -> R {
        Ok(())
    }
    fn serialize_none(self) -> R {
        Ok(())
    }
    fn serialize_some<T: ?Sized + Serialize>(self, value: &T) -> R {
        value.serialize(self)
    }
    fn serialize_unit(self) -> R {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> R {
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> R {
        Ok(())
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(self, _: &'static str, value: &T) -> R {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> R {
        self.nested(format!(".{variant}"), value)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Seq<'a>, Found> {
        Ok(Seq {
            finder: self,
            index: 0,
        })
    }
    fn serialize_tuple(self, _: usize) -> Result<Seq<'a>, Found> {
        Ok(Seq {
            finder: self,
            index: 0,
        })
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Seq<'a>, Found> {
        Ok(Seq {
            finder: self,
            index: 0,
        })
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Seq<'a>, Found> {
        self.path.push(format!(".{variant}"));
        Ok(Seq {
            finder: self,
            index: 0,
        })
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Map<'a>, Found> {
        Ok(Map {
            finder: self,
            key: None,
            variant: false,
        })
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Map<'a>, Found> {
        Ok(Map {
            finder: self,
            key: None,
            variant: false,
        })
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Map<'a>, Found> {
        self.path.push(format!(".{variant}"));
        Ok(Map {
            finder: self,
            key: None,
            variant: true,
        })
    }
}

/// Elements of a sequence, tuple or tuple variant.
pub(crate) struct Seq<'a> {
    finder: &'a mut Finder,
    index: usize,
}

impl Seq<'_> {
    fn element<T: ?Sized + Serialize>(&mut self, value: &T) -> R {
        let step = format!("[{}]", self.index);
        self.index += 1;
        self.finder.nested(step, value)
    }
}

impl ser::SerializeSeq for Seq<'_> {
    type Ok = ();
    type Error = Found;
    fn serialize_element<T: ?Sized + Serialize>(&mut self, value: &T) -> R {
        self.element(value)
    }
    fn end(self) -> R {
        Ok(())
    }
}

impl ser::SerializeTuple for Seq<'_> {
    type Ok = ();
    type Error = Found;
    fn serialize_element<T: ?Sized + Serialize>(&mut self, value: &T) -> R {
        self.element(value)
    }
    fn end(self) -> R {
        Ok(())
    }
}

impl ser::SerializeTupleStruct for Seq<'_> {
    type Ok = ();
    type Error = Found;
    fn serialize_field<T: ?Sized + Serialize>(&mut self, value: &T) -> R {
        self.element(value)
    }
    fn end(self) -> R {
        Ok(())
    }
}

impl ser::SerializeTupleVariant for Seq<'_> {
    type Ok = ();
    type Error = Found;
    fn serialize_field<T: ?Sized + Serialize>(&mut self, value: &T) -> R {
        self.element(value)
    }
    fn end(self) -> R {
        self.finder.path.pop();
        Ok(())
    }
}

/// Entries of a map, struct or struct variant.
pub(crate) struct Map<'a> {
    finder: &'a mut Finder,
    key: Option<String>,
    variant: bool,
}

impl ser::SerializeMap for Map<'_> {
    type Ok = ();
    type Error = Found;
    fn serialize_key<T: ?Sized + Serialize>(&mut self, key: &T) -> R {
        // The key's text for the path; serde_json itself reports keys that are not strings.
        let text = serde_json::to_value(key)
            .ok()
            .map(|v| match v {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            })
            .unwrap_or_default();
        self.key = Some(text);
        key.serialize(&mut *self.finder)
    }
    fn serialize_value<T: ?Sized + Serialize>(&mut self, value: &T) -> R {
        let key = self.key.take().unwrap_or_default();
        self.finder.nested(format!(".{key}"), value)
    }
    fn end(self) -> R {
        Ok(())
    }
}

impl ser::SerializeStruct for Map<'_> {
    type Ok = ();
    type Error = Found;
    fn serialize_field<T: ?Sized + Serialize>(&mut self, key: &'static str, value: &T) -> R {
        self.finder.nested(format!(".{key}"), value)
    }
    fn end(self) -> R {
        Ok(())
    }
}

impl ser::SerializeStructVariant for Map<'_> {
    type Ok = ();
    type Error = Found;
    fn serialize_field<T: ?Sized + Serialize>(&mut self, key: &'static str, value: &T) -> R {
        self.finder.nested(format!(".{key}"), value)
    }
    fn end(self) -> R {
        if self.variant {
            self.finder.path.pop();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn find(v: &impl Serialize) -> Option<String> {
        let mut f = Finder::default();
        v.serialize(&mut f).err().map(|e| e.0)
    }

    #[test]
    fn reports_path() {
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
        assert_eq!(find(&lines).as_deref(), Some("$[1].prices[1]"));
        assert_eq!(find(&json!({"a": [1.0, 2.5]})), None);
        assert_eq!(find(&f32::NAN).as_deref(), Some("$"));
    }
}
