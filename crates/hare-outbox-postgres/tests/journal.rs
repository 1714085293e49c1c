//! The journal's reads on PostgreSQL: the testkit's journal conformance suite, each scenario in a
//! fresh schema (see `hare_outbox_testkit::conformance::journal`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use chrono::{DateTime, Utc};
use hare_outbox_core::{Outbox, OutboxTable};
use hare_outbox_postgres::PgBackend;
use hare_outbox_testkit::conformance::{RowEditor, TimeColumn, journal as suite};
use hare_outbox_testkit::pg::TestSchema;
use sqlx::{AssertSqlSafe, PgPool};

/// A fresh schema and a migrated outbox table `outbox` in it.
async fn setup() -> (TestSchema, Outbox<PgBackend>) {
    let schema = TestSchema::new(4).await;
    let outbox = Outbox::new(
        PgBackend::new(schema.pool.clone()),
        OutboxTable::parse("outbox").unwrap(),
    );
    outbox.migrate().await.unwrap();
    (schema, outbox)
}

/// Writes rows of the test schema directly.
struct Rows<'a>(&'a PgPool);

impl RowEditor for Rows<'_> {
    async fn set_time(
        &self,
        table: &OutboxTable,
        sequence: i64,
        column: TimeColumn,
        time: Option<DateTime<Utc>>,
    ) {
        sqlx::query(AssertSqlSafe(format!(
            "UPDATE {table} SET {} = $1 WHERE sequence = $2",
            column.name()
        )))
        .bind(time)
        .bind(sequence)
        .execute(self.0)
        .await
        .expect("set time");
    }

    async fn set_payload(&self, table: &OutboxTable, sequence: i64, json: &str) {
        sqlx::query(AssertSqlSafe(format!(
            "UPDATE {table} SET payload = $1::jsonb WHERE sequence = $2"
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
    let (schema, outbox) = setup().await;
    suite::every_filter_alone_and_combined(&outbox, &Rows(&schema.pool)).await;
    schema.drop_schema().await;
}

#[tokio::test]
async fn every_status_through_the_backend_calls() {
    let (schema, outbox) = setup().await;
    suite::every_status_through_the_backend_calls(&outbox, &Rows(&schema.pool)).await;
    schema.drop_schema().await;
}

#[tokio::test]
async fn pages_walk_every_event_once_in_both_directions() {
    let (schema, outbox) = setup().await;
    suite::pages_walk_every_event_once_in_both_directions(&outbox).await;
    schema.drop_schema().await;
}

#[tokio::test]
async fn extra_columns_are_decoded_as_event_get_does() {
    let schema = TestSchema::new(2).await;
    suite::extra_columns_are_decoded_as_event_get_does(PgBackend::new(schema.pool.clone())).await;
    schema.drop_schema().await;
}

#[tokio::test]
async fn hostile_filter_values_match_nothing_and_break_nothing() {
    let (schema, outbox) = setup().await;
    suite::hostile_filter_values_match_nothing_and_break_nothing(&outbox).await;
    schema.drop_schema().await;
}

#[tokio::test]
async fn timeline_counts_backlog_and_latency_on_known_times() {
    let (schema, outbox) = setup().await;
    suite::timeline_counts_backlog_and_latency_on_known_times(&outbox, &Rows(&schema.pool)).await;
    schema.drop_schema().await;
}

#[tokio::test]
async fn timeline_refuses_an_impossible_grid() {
    let (schema, outbox) = setup().await;
    suite::timeline_refuses_an_impossible_grid(&outbox).await;
    schema.drop_schema().await;
}
