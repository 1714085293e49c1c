//! Translation of sqlx errors into the core's errors.

use hare_outbox_core::Error;
use sqlx::error::ErrorKind;

/// `SQLITE_BUSY`: another connection holds the lock past the busy timeout.
const SQLITE_BUSY: i32 = 5;
/// `SQLITE_LOCKED`: a conflict inside one connection or a shared cache.
const SQLITE_LOCKED: i32 = 6;

/// The one place an sqlx error becomes a core error: a unique, foreign-key, NOT NULL or CHECK
/// violation is [`Error::Integrity`] with SQLite's message, which names the column
/// (`NOT NULL constraint failed: outbox.tenant`) or the CHECK constraint — SQLite does not name the
/// foreign key of a failed foreign-key check (`FOREIGN KEY constraint failed`) —, `SQLITE_BUSY` / `SQLITE_LOCKED` ("database is locked") is
/// [`Error::TransactionRetry`], anything else [`Error::Database`]. The sqlx error is kept as the
/// source.
pub(crate) fn map_err(error: sqlx::Error) -> Error {
    let (retry, unique, message) = match &error {
        sqlx::Error::Database(db) => {
            let primary = db
                .code()
                .and_then(|code| code.parse::<i32>().ok())
                .map(|code| code & 0xff);
            let message = db.message().to_owned();
            let busy = matches!(primary, Some(SQLITE_BUSY | SQLITE_LOCKED))
                || message.contains("database is locked")
                || message.contains("database table is locked");
            let integrity = matches!(
                db.kind(),
                ErrorKind::UniqueViolation
                    | ErrorKind::ForeignKeyViolation
                    | ErrorKind::NotNullViolation
                    | ErrorKind::CheckViolation
            );
            (busy, integrity, message)
        }
        _ => (false, false, String::new()),
    };
    if unique {
        Error::Integrity {
            message,
            source: Box::new(error),
        }
    } else if retry {
        Error::TransactionRetry {
            message,
            source: Box::new(error),
        }
    } else {
        Error::database(error)
    }
}
