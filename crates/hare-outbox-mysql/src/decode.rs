//! Rows into events: the one place that reads the outbox's columns.

use chrono::{DateTime, Utc};
use hare_outbox_core::{
    ColumnType, Error, ExtraValue, OutboxEvent, OutboxTable, Result, StoredRow,
};
use serde_json::{Map, Value};
use sqlx::Row;
use sqlx::mysql::MySqlRow;
use uuid::Uuid;

use crate::error::translate;

/// An error naming the column whose stored value cannot be read.
fn bad_column(column: &str, problem: impl std::fmt::Display) -> Error {
    Error::database(format!("outbox column {column}: {problem}"))
}

/// A JSON column (`JSON` is `LONGTEXT` on MariaDB and a binary type on MySQL; both arrive as
/// text), `None` when NULL.
pub(crate) fn optional_json(row: &MySqlRow, column: &str) -> Result<Option<Value>> {
    let text: Option<String> = row.try_get_unchecked(column).map_err(translate)?;
    text.map(|text| {
        serde_json::from_str(&text).map_err(|e| bad_column(column, format!("is not JSON: {e}")))
    })
    .transpose()
}

/// A UUID column stored as `BINARY(16)`, `None` when NULL. A hand-written row whose column holds
/// the UUID's text (36 bytes, in a column a user widened) is read too.
pub(crate) fn optional_uuid(row: &MySqlRow, column: &str) -> Result<Option<Uuid>> {
    let bytes: Option<Vec<u8>> = row.try_get_unchecked(column).map_err(translate)?;
    bytes
        .map(|bytes| {
            Uuid::from_slice(&bytes)
                .or_else(|_| Uuid::try_parse_ascii(&bytes))
                .map_err(|e| bad_column(column, format!("is not a UUID: {e}")))
        })
        .transpose()
}

/// The value of extra column `column` as its type stores it.
fn extra(row: &MySqlRow, column: &str, column_type: ColumnType) -> Result<ExtraValue> {
    Ok(match column_type {
        ColumnType::BigInt => row
            .try_get::<Option<i64>, _>(column)
            .map_err(translate)?
            .into(),
        ColumnType::Text => row
            .try_get::<Option<String>, _>(column)
            .map_err(translate)?
            .into(),
        ColumnType::Uuid => optional_uuid(row, column)?.into(),
        ColumnType::Boolean => row
            .try_get::<Option<bool>, _>(column)
            .map_err(translate)?
            .into(),
        ColumnType::Timestamp => row
            .try_get::<Option<DateTime<Utc>>, _>(column)
            .map_err(translate)?
            .into(),
        ColumnType::Json => optional_json(row, column)?.into(),
    })
}

/// Why a leased row cannot be delivered ([`StoredRow::problem`]), or `None`. A column that
/// cannot be read at all is left to [`event`], which says why.
pub(crate) fn stored_row_problem(row: &MySqlRow) -> Option<String> {
    let id = match optional_uuid(row, "id") {
        Ok(id) => id,
        Err(e) => return Some(e.to_string()),
    };
    let topic = row.try_get::<Option<String>, _>("topic").ok()?;
    let headers = optional_json(row, "headers").unwrap_or(None);
    let attempts = row.try_get::<i32, _>("attempts").ok()?;
    let ordering_key = row.try_get::<Option<String>, _>("ordering_key").ok()?;
    StoredRow {
        id,
        topic: topic.as_deref(),
        headers: headers.as_ref(),
        attempts: i64::from(attempts),
        ordering_key: ordering_key.as_deref(),
    }
    .problem()
}

/// One row of the columns every statement returns (the table's extra columns included).
///
/// # Errors
/// [`Error::Database`] naming the column when a value has the wrong type or form.
pub(crate) fn event(table: &OutboxTable, row: &MySqlRow) -> Result<OutboxEvent> {
    let mut extras = Map::new();
    for column in table.columns() {
        let value = extra(row, column.name(), column.column_type())?;
        extras.insert(column.name().to_owned(), value.to_json());
    }
    let id = optional_uuid(row, "id")?.ok_or_else(|| bad_column("id", "is NULL"))?;
    let headers = match optional_json(row, "headers")? {
        Some(Value::Object(map)) => map,
        None | Some(Value::Null) => Map::new(),
        Some(other) => {
            return Err(bad_column(
                "headers",
                format!("{other} is not a JSON object"),
            ));
        }
    };
    Ok(OutboxEvent {
        sequence: row.try_get("sequence").map_err(translate)?,
        id,
        topic: row.try_get("topic").map_err(translate)?,
        payload: optional_json(row, "payload")?.unwrap_or(Value::Null),
        headers,
        ordering_key: row.try_get("ordering_key").map_err(translate)?,
        idempotency_key: row.try_get("idempotency_key").map_err(translate)?,
        created_at: row.try_get("created_at").map_err(translate)?,
        attempts: row.try_get("attempts").map_err(translate)?,
        last_error: row.try_get("last_error").map_err(translate)?,
        next_attempt_at: row.try_get("next_attempt_at").map_err(translate)?,
        lease_until: row.try_get("lease_until").map_err(translate)?,
        leased_by: row.try_get("leased_by").map_err(translate)?,
        published_at: row.try_get("published_at").map_err(translate)?,
        dead_lettered_at: row.try_get("dead_lettered_at").map_err(translate)?,
        extra: extras,
    })
}
