//! The consumer-side inbox on SQLite.

use chrono::{DateTime, Utc};
use hare_outbox_core::{OutboxTable, Result};
use sqlx::AssertSqlSafe;
use sqlx::sqlite::{SqliteConnection, SqlitePool};
use uuid::Uuid;

use crate::decode::timestamp;
use crate::error::map_err;
use crate::sql::quote_ident;

/// `sql` (a statement or a migration's template) for the inbox table `table`.
pub(crate) fn render(sql: &str, table: &OutboxTable) -> String {
    let quoted = match table.schema() {
        Some(schema) => format!("{}.{}", quote_ident(schema), quote_ident(table.name())),
        None => quote_ident(table.name()),
    };
    // An index lives in its table's database: the schema qualifies the index name, not the table.
    let index = match table.schema() {
        Some(schema) => format!(
            "{}.{}",
            quote_ident(schema),
            quote_ident(&format!("{}_processed_idx", table.name()))
        ),
        None => quote_ident(&format!("{}_processed_idx", table.name())),
    };
    hare_outbox_core::backend::template::render(
        sql,
        &[
            ("table", quoted),
            ("index", index),
            ("name", table.name().to_owned()),
        ],
    )
}

pub(crate) async fn record(
    conn: &mut SqliteConnection,
    table: &OutboxTable,
    consumer: &str,
    event_id: Uuid,
) -> Result<bool> {
    let row: Option<(i64,)> = sqlx::query_as(AssertSqlSafe(render(
        include_str!("../queries/inbox_record.sql"),
        table,
    )))
    .bind(consumer)
    .bind(event_id.hyphenated().to_string())
    .bind(timestamp(Utc::now()))
    .fetch_optional(&mut *conn)
    .await
    .map_err(map_err)?;
    Ok(row.is_some())
}

pub(crate) async fn delete_older(
    pool: &SqlitePool,
    table: &OutboxTable,
    before: DateTime<Utc>,
    limit: i64,
) -> Result<u64> {
    let done = sqlx::query(AssertSqlSafe(render(
        include_str!("../queries/inbox_delete_older.sql"),
        table,
    )))
    .bind(timestamp(before))
    .bind(limit)
    .execute(pool)
    .await
    .map_err(map_err)?;
    Ok(done.rows_affected())
}
