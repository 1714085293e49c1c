//! The consumer-side inbox on PostgreSQL.

use chrono::{DateTime, Utc};
use hare_outbox_core::{OutboxTable, Result};
use sqlx::AssertSqlSafe;
use sqlx::postgres::PgConnection;
use uuid::Uuid;

use crate::error::translate;
use crate::exec::{Db, RunIn};
use crate::sql::quoted_table;

/// `sql` (a statement or a migration's template) for the inbox table `table`.
pub(crate) fn render(sql: &str, table: &OutboxTable) -> String {
    hare_outbox_core::backend::template::render(
        sql,
        &[
            ("table", quoted_table(table)),
            ("prefix", table.name().to_owned()),
        ],
    )
}

pub(crate) async fn record(
    db: Db<'_>,
    conn: &mut PgConnection,
    table: &OutboxTable,
    consumer: &str,
    event_id: Uuid,
) -> Result<bool> {
    let row: Option<(bool,)> = sqlx::query_as(AssertSqlSafe(render(
        include_str!("../queries/inbox_record.sql"),
        table,
    )))
    .bind(consumer)
    .bind(event_id)
    .persistent(db.persistent())
    .fetch_optional(&mut *conn)
    .await
    .map_err(translate)?;
    Ok(row.is_some())
}

pub(crate) async fn delete_older(
    db: Db<'_>,
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
    .execute_in(db)
    .await
    .map_err(translate)?;
    Ok(done.rows_affected())
}
