//! Rows to [`OutboxEvent`]s, and the one timestamp format the backend writes.

use chrono::{DateTime, NaiveDateTime, Utc};
use hare_outbox_core::{
    ColumnType, Error, ExtraValue, OutboxEvent, OutboxTable, Result, StoredRow,
};
use serde_json::{Map, Value};
use sqlx::Row;
use sqlx::sqlite::SqliteRow;
use uuid::Uuid;

use crate::error::map_err;

/// The format of every timestamp written: UTC, always six fractional digits, so comparing the
/// text compares the times.
const TIMESTAMP_FORMAT: &str = "%Y-%m-%dT%H:%M:%S%.6fZ";

/// `time` as stored: `2026-01-31T23:59:59.123456Z` (microseconds; finer digits are dropped).
/// Extra columns of [`ColumnType::Timestamp`] use it too.
pub(crate) fn timestamp(time: DateTime<Utc>) -> String {
    time.format(TIMESTAMP_FORMAT).to_string()
}

/// Parses a stored timestamp: the backend's own format, any RFC 3339 text, or SQLite's
/// `YYYY-MM-DD HH:MM:SS[.fff]` (read as UTC, as `CURRENT_TIMESTAMP` writes it).
pub(crate) fn parse_timestamp(text: &str) -> Option<DateTime<Utc>> {
    if let Ok(time) = DateTime::parse_from_rfc3339(text) {
        return Some(time.with_timezone(&Utc));
    }
    ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S%.f"]
        .iter()
        .find_map(|format| NaiveDateTime::parse_from_str(text, format).ok())
        .map(|naive| naive.and_utc())
}

fn bad_column(column: &str, message: String) -> Error {
    Error::database(format!("outbox column {column}: {message}"))
}

fn text(row: &SqliteRow, column: &str) -> Result<String> {
    row.try_get::<String, _>(column).map_err(map_err)
}

fn optional_text(row: &SqliteRow, column: &str) -> Result<Option<String>> {
    row.try_get::<Option<String>, _>(column).map_err(map_err)
}

fn time(row: &SqliteRow, column: &str) -> Result<DateTime<Utc>> {
    let value = text(row, column)?;
    parse_timestamp(&value)
        .ok_or_else(|| bad_column(column, format!("{value:?} is not a timestamp")))
}

fn optional_time(row: &SqliteRow, column: &str) -> Result<Option<DateTime<Utc>>> {
    optional_text(row, column)?
        .map(|value| {
            parse_timestamp(&value)
                .ok_or_else(|| bad_column(column, format!("{value:?} is not a timestamp")))
        })
        .transpose()
}

fn json(row: &SqliteRow, column: &str) -> Result<Value> {
    let value = text(row, column)?;
    serde_json::from_str(&value).map_err(|e| bad_column(column, format!("is not JSON: {e}")))
}

/// The value of extra column `column` as its type stores it: INTEGER for big ints and booleans
/// (0/1), TEXT for the rest (hyphenated UUIDs, timestamps in [`timestamp`]'s format, JSON text).
///
/// # Errors
/// [`Error::Database`] naming the column when a value has the wrong type or form.
fn extra(row: &SqliteRow, column: &str, column_type: ColumnType) -> Result<ExtraValue> {
    let value = match column_type {
        ColumnType::BigInt => row
            .try_get::<Option<i64>, _>(column)
            .map_err(map_err)?
            .into(),
        ColumnType::Boolean => match row.try_get::<Option<i64>, _>(column).map_err(map_err)? {
            None => ExtraValue::Null,
            Some(0) => ExtraValue::Boolean(false),
            Some(1) => ExtraValue::Boolean(true),
            Some(other) => {
                return Err(bad_column(
                    column,
                    format!("{other} is not a boolean (0/1)"),
                ));
            }
        },
        ColumnType::Text => optional_text(row, column)?.into(),
        ColumnType::Uuid => optional_text(row, column)?
            .map(|text| {
                Uuid::parse_str(&text)
                    .map_err(|e| bad_column(column, format!("{text:?} is not a UUID: {e}")))
            })
            .transpose()?
            .into(),
        ColumnType::Timestamp => optional_time(row, column)?.into(),
        ColumnType::Json => match optional_text(row, column)? {
            None => ExtraValue::Null,
            Some(text) => ExtraValue::Json(
                serde_json::from_str(&text)
                    .map_err(|e| bad_column(column, format!("is not JSON: {e}")))?,
            ),
        },
    };
    Ok(value)
}

/// The value bound for an extra column, in the form [`extra`] reads back.
pub(crate) enum Bound {
    /// SQL NULL.
    Null,
    /// INTEGER.
    Integer(i64),
    /// TEXT.
    Text(String),
}

/// `value` in its stored form.
pub(crate) fn bound(value: &ExtraValue) -> Bound {
    match value {
        ExtraValue::Null => Bound::Null,
        ExtraValue::BigInt(n) => Bound::Integer(*n),
        ExtraValue::Boolean(b) => Bound::Integer(i64::from(*b)),
        ExtraValue::Text(text) => Bound::Text(text.clone()),
        ExtraValue::Uuid(id) => Bound::Text(id.hyphenated().to_string()),
        ExtraValue::Timestamp(time) => Bound::Text(timestamp(*time)),
        ExtraValue::Json(json) => Bound::Text(json.to_string()),
    }
}

/// One row of the columns every statement returns (the table's extra columns included), decoded
/// by hand.
///
/// # Errors
/// [`Error::Database`] naming the column when a value has the wrong type or form.
/// Why a leased row cannot be delivered ([`StoredRow::problem`]), or `None`. An id that is not
/// a UUID is a problem too; a column that cannot be read at all (headers that are not JSON, a
/// time that is not a timestamp) is left to [`event`], which says why.
pub(crate) fn stored_row_problem(row: &SqliteRow) -> Option<String> {
    let id = match optional_text(row, "id").ok()? {
        None => None,
        Some(text) => match Uuid::parse_str(&text) {
            Ok(id) => Some(id),
            Err(e) => return Some(format!("id {text:?} is not a UUID: {e}")),
        },
    };
    let topic = optional_text(row, "topic").ok()?;
    // Headers that are not JSON are reported by `event`; here they count as none.
    let headers: Option<Value> = optional_text(row, "headers")
        .ok()?
        .map(|text| serde_json::from_str(&text).unwrap_or(Value::Null));
    let attempts = row.try_get::<i64, _>("attempts").ok()?;
    let ordering_key = optional_text(row, "ordering_key").ok()?;
    StoredRow {
        id,
        topic: topic.as_deref(),
        headers: headers.as_ref(),
        attempts,
        ordering_key: ordering_key.as_deref(),
    }
    .problem()
}

pub(crate) fn event(table: &OutboxTable, row: &SqliteRow) -> Result<OutboxEvent> {
    let mut extras = Map::new();
    for column in table.columns() {
        let value = extra(row, column.name(), column.column_type())?;
        extras.insert(column.name().to_owned(), value.to_json());
    }
    let id = text(row, "id")?;
    let id =
        Uuid::parse_str(&id).map_err(|e| bad_column("id", format!("{id:?} is not a UUID: {e}")))?;
    let headers: Map<String, Value> = match json(row, "headers")? {
        Value::Object(map) => map,
        Value::Null => Map::new(),
        other => {
            return Err(bad_column(
                "headers",
                format!("{other} is not a JSON object"),
            ));
        }
    };
    let attempts: i64 = row.try_get("attempts").map_err(map_err)?;
    let attempts = i32::try_from(attempts)
        .map_err(|_| bad_column("attempts", format!("{attempts} is out of range")))?;
    Ok(OutboxEvent {
        sequence: row.try_get("sequence").map_err(map_err)?,
        id,
        topic: text(row, "topic")?,
        payload: json(row, "payload")?,
        headers,
        ordering_key: optional_text(row, "ordering_key")?,
        idempotency_key: optional_text(row, "idempotency_key")?,
        created_at: time(row, "created_at")?,
        attempts,
        last_error: optional_text(row, "last_error")?,
        next_attempt_at: optional_time(row, "next_attempt_at")?,
        lease_until: optional_time(row, "lease_until")?,
        leased_by: optional_text(row, "leased_by")?,
        published_at: optional_time(row, "published_at")?,
        dead_lettered_at: optional_time(row, "dead_lettered_at")?,
        extra: extras,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn timestamps_have_one_fixed_width_and_round_trip_to_the_microsecond() {
        let whole = Utc
            .with_ymd_and_hms(2026, 1, 2, 3, 4, 5)
            .single()
            .expect("valid time");
        assert_eq!(timestamp(whole), "2026-01-02T03:04:05.000000Z");
        let fine = whole + chrono::Duration::nanoseconds(123_456_789);
        assert_eq!(timestamp(fine), "2026-01-02T03:04:05.123456Z");
        assert_eq!(
            parse_timestamp(&timestamp(fine)),
            Some(whole + chrono::Duration::microseconds(123_456))
        );
        assert!(timestamp(whole) < timestamp(whole + chrono::Duration::microseconds(1)));
    }

    #[test]
    fn sqlite_and_rfc3339_forms_are_read() {
        let expected = Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).single();
        assert_eq!(parse_timestamp("2026-01-02 03:04:05"), expected);
        assert_eq!(parse_timestamp("2026-01-02T05:04:05+02:00"), expected);
        assert_eq!(parse_timestamp("yesterday"), None);
    }
}
