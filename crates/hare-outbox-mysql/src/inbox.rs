//! The consumer-side inbox on MySQL.

use chrono::{DateTime, Utc};
use hare_outbox_core::{OutboxTable, Result};
use sqlx::AssertSqlSafe;
use sqlx::mysql::{MySqlConnection, MySqlPool};
use uuid::Uuid;

use crate::error::{DUP_ENTRY, number, translate};
use crate::sql::{qualified, quote_ident};

/// `sql` (a statement or a migration's template) for the inbox table `table`.
pub(crate) fn render(sql: &str, table: &OutboxTable) -> String {
    hare_outbox_core::backend::template::render(
        sql,
        &[
            ("table", qualified(table, table.name())),
            (
                "index",
                quote_ident(&format!("{}_processed_idx", table.name())),
            ),
        ],
    )
}

/// Records `(consumer, event_id)` on `conn`; `false` when the pair is already there. A failed
/// INSERT ends only its own statement in MySQL, so the caller's transaction goes on.
pub(crate) async fn record(
    conn: &mut MySqlConnection,
    table: &OutboxTable,
    consumer: &str,
    event_id: Uuid,
) -> Result<bool> {
    let done = sqlx::query(AssertSqlSafe(render(
        include_str!("../queries/inbox_record.sql"),
        table,
    )))
    .bind(consumer)
    .bind(event_id)
    .execute(&mut *conn)
    .await;
    match done {
        Ok(_) => Ok(true),
        Err(e) if number(&e) == Some(DUP_ENTRY) => Ok(false),
        Err(e) => Err(translate(e)),
    }
}

/// Deletes at most `limit` records processed before `before`, oldest first.
pub(crate) async fn delete_older(
    pool: &MySqlPool,
    table: &OutboxTable,
    before: DateTime<Utc>,
    limit: i64,
) -> Result<u64> {
    let done = sqlx::query(AssertSqlSafe(render(
        include_str!("../queries/inbox_delete_older.sql"),
        table,
    )))
    .bind(before)
    .bind(limit)
    .execute(pool)
    .await
    .map_err(translate)?;
    Ok(done.rows_affected())
}
