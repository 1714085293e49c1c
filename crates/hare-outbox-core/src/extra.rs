//! Extra columns of an outbox table: a tenant, a foreign key, a JSON result column.

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use crate::error::{Error, Result};

/// Columns enqueue and the relay own; an extra column may not take one of these names, and a
/// message may not set them (arguments are checked before writing).
pub const OWNED_COLUMNS: &[&str] = &[
    "sequence",
    "id",
    "topic",
    "payload",
    "headers",
    "ordering_key",
    "idempotency_key",
    "created_at",
    "attempts",
    "last_error",
    "next_attempt_at",
    "lease_until",
    "leased_by",
    "published_at",
    "dead_lettered_at",
];

/// The portable type of an extra column; each backend maps it to its own SQL type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ColumnType {
    /// A 64-bit integer (PostgreSQL `BIGINT`, SQLite `INTEGER`).
    BigInt,
    /// Text (PostgreSQL `TEXT`, SQLite `TEXT`).
    Text,
    /// A UUID (PostgreSQL `UUID`, SQLite hyphenated `TEXT`).
    Uuid,
    /// A boolean (PostgreSQL `BOOLEAN`, SQLite `INTEGER` 0/1).
    Boolean,
    /// A UTC timestamp (PostgreSQL `TIMESTAMPTZ`, SQLite `TEXT` in the table's timestamp format).
    Timestamp,
    /// A JSON value (PostgreSQL `JSONB`, SQLite `TEXT`).
    Json,
}

/// One extra column of an outbox table: name, type, nullability and an optional foreign key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ExtraColumn {
    name: String,
    column_type: ColumnType,
    not_null: bool,
    references: Option<(String, String)>,
}

impl ExtraColumn {
    /// A nullable column `name` of `column_type`.
    ///
    /// # Errors
    /// [`Error::Configuration`] when `name` is not 1 to 63 ASCII letters, digits or `_` (not
    /// starting with a digit) or is one of [`OWNED_COLUMNS`].
    pub fn new(name: &str, column_type: ColumnType) -> Result<Self> {
        check_identifier("extra column", name)?;
        if OWNED_COLUMNS.contains(&name) {
            return Err(Error::configuration(format!(
                "extra column {name:?} is owned by the outbox; choose a name other than {}",
                OWNED_COLUMNS.join(", ")
            )));
        }
        Ok(ExtraColumn {
            name: name.to_owned(),
            column_type,
            not_null: false,
            references: None,
        })
    }

    /// Makes the column `NOT NULL`: every message must set it. Defaults to nullable.
    pub fn not_null(mut self) -> Self {
        self.not_null = true;
        self
    }

    /// Adds a foreign key to `table(column)` (`ON DELETE CASCADE`), e.g. a webhook subscription.
    ///
    /// # Errors
    /// [`Error::Configuration`] when a name is not a plain identifier (`table` may be
    /// `schema.table`).
    pub fn references(mut self, table: &str, column: &str) -> Result<Self> {
        for part in table.split('.') {
            check_identifier("referenced table", part)?;
        }
        check_identifier("referenced column", column)?;
        self.references = Some((table.to_owned(), column.to_owned()));
        Ok(self)
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The type.
    pub fn column_type(&self) -> ColumnType {
        self.column_type
    }

    /// Whether the column is `NOT NULL`.
    pub fn is_not_null(&self) -> bool {
        self.not_null
    }

    /// The referenced `(table, column)`, if any.
    pub fn referenced(&self) -> Option<(&str, &str)> {
        self.references
            .as_ref()
            .map(|(t, c)| (t.as_str(), c.as_str()))
    }
}

/// A typed value for an extra column, set per message with `OutboxMessage::extra`.
#[derive(Debug, Clone, PartialEq)]
pub enum ExtraValue {
    /// SQL NULL.
    Null,
    /// For [`ColumnType::BigInt`].
    BigInt(i64),
    /// For [`ColumnType::Text`].
    Text(String),
    /// For [`ColumnType::Uuid`].
    Uuid(Uuid),
    /// For [`ColumnType::Boolean`].
    Boolean(bool),
    /// For [`ColumnType::Timestamp`].
    Timestamp(DateTime<Utc>),
    /// For [`ColumnType::Json`].
    Json(Value),
}

impl ExtraValue {
    /// Whether the value fits a column of `column_type` (NULL fits every type).
    pub fn fits(&self, column_type: ColumnType) -> bool {
        matches!(
            (self, column_type),
            (ExtraValue::Null, _)
                | (ExtraValue::BigInt(_), ColumnType::BigInt)
                | (ExtraValue::Text(_), ColumnType::Text)
                | (ExtraValue::Uuid(_), ColumnType::Uuid)
                | (ExtraValue::Boolean(_), ColumnType::Boolean)
                | (ExtraValue::Timestamp(_), ColumnType::Timestamp)
                | (ExtraValue::Json(_), ColumnType::Json)
        )
    }

    /// The value as it appears in [`OutboxEvent::extra`](crate::OutboxEvent::extra).
    pub fn to_json(&self) -> Value {
        match self {
            ExtraValue::Null => Value::Null,
            ExtraValue::BigInt(n) => Value::from(*n),
            ExtraValue::Text(s) => Value::from(s.clone()),
            ExtraValue::Uuid(u) => Value::from(u.to_string()),
            ExtraValue::Boolean(b) => Value::from(*b),
            ExtraValue::Timestamp(t) => {
                Value::from(t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true))
            }
            ExtraValue::Json(v) => v.clone(),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            ExtraValue::Null => "null",
            ExtraValue::BigInt(_) => "big_int",
            ExtraValue::Text(_) => "text",
            ExtraValue::Uuid(_) => "uuid",
            ExtraValue::Boolean(_) => "boolean",
            ExtraValue::Timestamp(_) => "timestamp",
            ExtraValue::Json(_) => "json",
        }
    }

    /// The validation error for a value that does not fit `column`.
    pub(crate) fn mismatch(&self, column: &ExtraColumn) -> Error {
        Error::validation(
            format!("extra.{}", column.name()),
            format!(
                "a {} value does not fit the column's type {:?}",
                self.kind(),
                column.column_type()
            ),
        )
    }
}

macro_rules! from_value {
    ($($t:ty => $v:ident $(, $conv:expr)?);* $(;)?) => {
        $(impl From<$t> for ExtraValue {
            fn from(value: $t) -> Self {
                ExtraValue::$v(from_value!(@conv value $(, $conv)?))
            }
        })*
    };
    (@conv $value:ident) => { $value };
    (@conv $value:ident, $conv:expr) => { $conv($value) };
}

from_value! {
    i64 => BigInt;
    i32 => BigInt, i64::from;
    String => Text;
    &str => Text, str::to_owned;
    Uuid => Uuid;
    bool => Boolean;
    DateTime<Utc> => Timestamp;
    Value => Json;
}

impl<T: Into<ExtraValue>> From<Option<T>> for ExtraValue {
    fn from(value: Option<T>) -> Self {
        value.map_or(ExtraValue::Null, Into::into)
    }
}

pub(crate) fn check_identifier(what: &str, name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(Error::configuration(format!(
            "{what} name {name:?} is not allowed; use 1 to 63 ASCII letters, digits or `_`, not starting with a digit"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_and_malformed_names_are_refused() {
        assert!(ExtraColumn::new("tenant_id", ColumnType::BigInt).is_ok());
        for bad in ["attempts", "sequence", "", "a-b", "1x", "x\"y"] {
            assert!(
                matches!(
                    ExtraColumn::new(bad, ColumnType::Text),
                    Err(Error::Configuration(_))
                ),
                "{bad}"
            );
        }
        assert!(
            ExtraColumn::new("sub", ColumnType::BigInt)
                .unwrap()
                .references("app.subs; drop", "id")
                .is_err()
        );
    }

    #[test]
    fn values_fit_their_types() {
        assert!(ExtraValue::from(7i64).fits(ColumnType::BigInt));
        assert!(!ExtraValue::from("x").fits(ColumnType::BigInt));
        assert!(ExtraValue::from(None::<i64>).fits(ColumnType::Uuid));
        assert_eq!(ExtraValue::from(Some(3i32)), ExtraValue::BigInt(3));
    }
}
