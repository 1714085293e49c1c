//! Driver errors translated into core errors, in one place.

use hare_outbox_core::Error;
use sqlx::postgres::PgDatabaseError;

/// Translates a sqlx error: an integrity violation — unique (SQLSTATE 23505), foreign key
/// (23503), NOT NULL (23502), CHECK (23514), exclusion (23P01) — → [`Error::Integrity`], its
/// message naming the constraint (and for NOT NULL the column); serialization failure (40001) or
/// deadlock (40P01) → [`Error::TransactionRetry`]; anything else → [`Error::Database`]. The
/// driver error is kept as the source.
pub fn translate(error: sqlx::Error) -> Error {
    if let sqlx::Error::Database(db) = &error {
        let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
        let message = db.message().to_owned();
        match code.as_str() {
            "23505" | "23503" | "23502" | "23514" | "23P01" => {
                return Error::Integrity {
                    message: integrity_message(db.as_ref(), message),
                    source: Box::new(error),
                };
            }
            "40001" | "40P01" => {
                return Error::TransactionRetry {
                    message,
                    source: Box::new(error),
                };
            }
            _ => {}
        }
    }
    Error::database(error)
}

/// The server's message, followed by the constraint, table and column PostgreSQL names in the
/// error's fields when the message does not already quote them.
fn integrity_message(db: &dyn sqlx::error::DatabaseError, message: String) -> String {
    let Some(pg) = db.try_downcast_ref::<PgDatabaseError>() else {
        return message;
    };
    let mut named = Vec::new();
    if let Some(constraint) = pg.constraint() {
        named.push(format!("constraint {constraint:?}"));
    }
    if let Some(table) = pg.table() {
        named.push(format!("table {table:?}"));
    }
    if let Some(column) = pg.column() {
        named.push(format!("column {column:?}"));
    }
    if named.is_empty() {
        message
    } else {
        format!("{message} ({})", named.join(", "))
    }
}
