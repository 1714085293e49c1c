//! The journal's reads on SQLite: the testkit's journal conformance suite, each scenario on a
//! fresh database file (see `hare_outbox_testkit::conformance::journal`).

use chrono::{DateTime, Utc};
use hare_outbox_core::OutboxTable;
use hare_outbox_sqlite::SqliteBackend;
use hare_outbox_testkit::conformance::{RowEditor, TimeColumn, journal as suite};
use hare_outbox_testkit::sqlite::TestDb;
use sqlx::{AssertSqlSafe, SqlitePool};

use crate::common::setup;

/// Writes rows of the test database directly.
struct Rows<'a>(&'a SqlitePool);

impl RowEditor for Rows<'_> {
    /// Stored as the backend writes timestamps: RFC 3339 text in UTC with microseconds.
    async fn set_time(
        &self,
        table: &OutboxTable,
        sequence: i64,
        column: TimeColumn,
        time: Option<DateTime<Utc>>,
    ) {
        sqlx::query(AssertSqlSafe(format!(
            "UPDATE {table} SET {} = ?1 WHERE sequence = ?2",
            column.name()
        )))
        .bind(time.map(|t| t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()))
        .bind(sequence)
        .execute(self.0)
        .await
        .expect("set time");
    }

    /// Stored as text, byte for byte.
    async fn set_payload(&self, table: &OutboxTable, sequence: i64, json: &str) {
        sqlx::query(AssertSqlSafe(format!(
            "UPDATE {table} SET payload = ?1 WHERE sequence = ?2"
        )))
        .bind(json)
        .bind(sequence)
        .execute(self.0)
        .await
        .expect("set payload");
    }
}

#[tokio::test]
async fn every_filter_alone_and_combined() {
    let (db, outbox) = setup("journal_filters").await;
    suite::every_filter_alone_and_combined(&outbox, &Rows(&db.pool)).await;
    db.close().await;
}

#[tokio::test]
async fn every_status_through_the_backend_calls() {
    let (db, outbox) = setup("journal_statuses").await;
    suite::every_status_through_the_backend_calls(&outbox, &Rows(&db.pool)).await;
    db.close().await;
}

#[tokio::test]
async fn pages_walk_every_event_once_in_both_directions() {
    let (db, outbox) = setup("journal_pages").await;
    suite::pages_walk_every_event_once_in_both_directions(&outbox).await;
    db.close().await;
}

#[tokio::test]
async fn extra_columns_are_decoded_as_event_get_does() {
    let db = TestDb::new(2).await;
    suite::extra_columns_are_decoded_as_event_get_does(SqliteBackend::new(db.pool.clone())).await;
    db.close().await;
}

#[tokio::test]
async fn hostile_filter_values_match_nothing_and_break_nothing() {
    let (db, outbox) = setup("journal_hostile").await;
    suite::hostile_filter_values_match_nothing_and_break_nothing(&outbox).await;
    db.close().await;
}

#[tokio::test]
async fn timeline_counts_backlog_and_latency_on_known_times() {
    let (db, outbox) = setup("journal_timeline").await;
    suite::timeline_counts_backlog_and_latency_on_known_times(&outbox, &Rows(&db.pool)).await;
    db.close().await;
}

#[tokio::test]
async fn timeline_refuses_an_impossible_grid() {
    let (db, outbox) = setup("journal_grid").await;
    suite::timeline_refuses_an_impossible_grid(&outbox).await;
    db.close().await;
}
