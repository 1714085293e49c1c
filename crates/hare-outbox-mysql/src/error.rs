//! Driver errors translated into core errors, in one place.

use hare_outbox_core::Error;
use sqlx::mysql::MySqlDatabaseError;

/// `ER_DUP_ENTRY`: a unique index refused a row.
pub(crate) const DUP_ENTRY: u16 = 1062;

/// The server's error number of `error`, when it is a database error.
pub(crate) fn number(error: &sqlx::Error) -> Option<u16> {
    match error {
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<MySqlDatabaseError>()
            .map(MySqlDatabaseError::number),
        _ => None,
    }
}

/// Translates a sqlx error: an integrity violation — duplicate key (1062), foreign key (1451,
/// 1452), NULL in a NOT NULL column (1048, 1364), CHECK (MySQL 3819, MariaDB 4025) — →
/// [`Error::Integrity`] with the server's message, which names the index, column or constraint;
/// a deadlock (1213) or a lock wait timeout (1205) → [`Error::TransactionRetry`]; anything else →
/// [`Error::Database`]. The driver error is kept as the source.
pub fn translate(error: sqlx::Error) -> Error {
    let Some(code) = number(&error) else {
        return Error::database(error);
    };
    let message = match &error {
        sqlx::Error::Database(db) => db.message().to_owned(),
        _ => String::new(),
    };
    // "Field 'note' doesn't have a default value": a NOT NULL column the row left out.
    let message = if code == 1364 {
        format!("{message} (the NOT NULL column was given no value: null)")
    } else {
        message
    };
    match code {
        1062 | 1451 | 1452 | 1048 | 1364 | 3819 | 4025 => Error::Integrity {
            message,
            source: Box::new(error),
        },
        1213 | 1205 => Error::TransactionRetry {
            message,
            source: Box::new(error),
        },
        _ => Error::database(error),
    }
}
