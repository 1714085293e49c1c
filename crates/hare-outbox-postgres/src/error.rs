//! Driver errors translated into core errors, in one place.

use hare_outbox_core::Error;

/// Translates a sqlx error: unique violation (SQLSTATE 23505) → [`Error::Integrity`];
/// serialization failure (40001) or deadlock (40P01) → [`Error::TransactionRetry`]; anything else
/// → [`Error::Database`]. The driver error is kept as the source.
pub fn translate(error: sqlx::Error) -> Error {
    if let sqlx::Error::Database(db) = &error {
        let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
        let message = db.message().to_owned();
        match code.as_str() {
            "23505" => {
                return Error::Integrity {
                    message,
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
