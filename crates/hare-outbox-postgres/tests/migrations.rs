//! Versioned migrations beyond the shared suite, on PostgreSQL: the record lives in the schema of
//! its table, the advisory lock is keyed by the table (a migrate of one table does not wait for
//! another's), and four concurrent migrates through a real PgBouncer in transaction mode (no
//! session lock is needed).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use hare_outbox_core::{Backend, MigrationStream, Outbox, OutboxTable};
use hare_outbox_postgres::PgBackend;
use hare_outbox_testkit::conformance::harness::scalar;
use hare_outbox_testkit::pg::TestSchema;
use hare_outbox_testkit::wait_for;
use sqlx::AssertSqlSafe;
use sqlx::postgres::PgPoolOptions;

const BOUND: Duration = Duration::from_secs(10);

#[tokio::test]
async fn the_record_lives_in_the_schema_of_its_table() {
    let schema = TestSchema::new(4).await;
    let other = format!("{}_b", schema.name);
    let backend = PgBackend::new(schema.pool.clone());
    let here = Outbox::new(backend.clone(), OutboxTable::parse("outbox").unwrap());
    let there = Outbox::new(
        backend.clone(),
        OutboxTable::parse(&format!("{other}.outbox")).unwrap(),
    );
    here.migrate().await.unwrap();
    assert!(there.migration_status().await.unwrap()[0].is_pending());
    there.migrate().await.unwrap();
    let versions = i64::try_from(backend.migrations(MigrationStream::Outbox).len()).unwrap();
    assert_eq!(
        scalar(
            &schema.pool,
            "SELECT count(*) FROM hare_outbox_migrations WHERE table_name = 'outbox'"
        )
        .await,
        versions
    );
    assert_eq!(
        scalar(&schema.pool,
            &format!(
                "SELECT count(*) FROM \"{other}\".hare_outbox_migrations WHERE table_name = 'outbox'"
            )
        )
        .await,
        versions
    );
    let _ = sqlx::query(AssertSqlSafe(format!("DROP SCHEMA \"{other}\" CASCADE")))
        .execute(&schema.pool)
        .await;
    schema.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_is_keyed_by_the_table() {
    let schema = TestSchema::new(6).await;
    let backend = PgBackend::new(schema.pool.clone());
    let a = Outbox::new(backend.clone(), OutboxTable::parse("a").unwrap());
    let b = Outbox::new(backend.clone(), OutboxTable::parse("b").unwrap());
    let key = format!("{}.b", schema.name);
    // Another migrate of `b` in progress: its table's lock, held by an open transaction.
    let mut holder = schema.pool.begin().await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('hare_outbox.migrate'), hashtext($1))")
        .bind(&key)
        .execute(&mut *holder)
        .await
        .unwrap();

    tokio::time::timeout(BOUND, a.migrate())
        .await
        .expect("a migrate of another table does not wait")
        .unwrap();
    let waiting = tokio::spawn(async move { b.migrate().await });
    wait_for(
        "the migrate of b waiting on its table's lock",
        BOUND,
        || async {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted \
             AND objsubid = 2 AND classid = hashtext('hare_outbox.migrate')::oid \
             AND objid = hashtext($1)::oid",
            )
            .bind(&key)
            .fetch_one(&schema.pool)
            .await
            .ok()?;
            (waiting == 1).then_some(())
        },
    )
    .await;
    assert!(!waiting.is_finished());
    assert_eq!(
        scalar(
            &schema.pool,
            "SELECT count(*) FROM hare_outbox_migrations WHERE table_name = 'b'"
        )
        .await,
        0
    );
    holder.commit().await.unwrap();
    tokio::time::timeout(BOUND, waiting)
        .await
        .expect("the migrate of b goes on once the lock is free")
        .unwrap()
        .unwrap();
    assert_eq!(
        scalar(
            &schema.pool,
            "SELECT count(*) FROM hare_outbox_migrations WHERE table_name = 'b'"
        )
        .await,
        i64::try_from(backend.migrations(MigrationStream::Outbox).len()).unwrap()
    );
    schema.drop_schema().await;
}

/// The PgBouncer `scripts/test.sh` starts (see `tests/pooler.rs`); unreachable fails the test.
fn pgbouncer_url() -> String {
    std::env::var("HARE_OUTBOX_TEST_PGBOUNCER_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:16432/test".to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_migrates_at_once_through_a_transaction_pooler() {
    let schema = TestSchema::new(2).await;
    let url = pgbouncer_url();
    let pooled = PgPoolOptions::new()
        .max_connections(8)
        .acquire_timeout(BOUND)
        .connect(&url)
        .await
        .unwrap_or_else(|e| panic!("PgBouncer at {url} (scripts/test.sh starts one): {e}"));
    // PgBouncer passes no search_path: the table is schema-qualified.
    let table = OutboxTable::parse(&format!("{}.outbox", schema.name)).unwrap();
    let backend = PgBackend::new(pooled.clone()).with_transaction_pooler(true);
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let outbox = Outbox::new(backend.clone(), table.clone());
            tokio::spawn(async move { outbox.migrate().await })
        })
        .collect();
    for task in tasks {
        tokio::time::timeout(BOUND, task)
            .await
            .expect("bounded")
            .unwrap()
            .unwrap();
    }
    let status = Outbox::new(backend.clone(), table)
        .migration_status()
        .await
        .unwrap();
    assert!(status.iter().all(|s| !s.is_pending()), "{status:?}");
    assert_eq!(
        scalar(
            &schema.pool,
            "SELECT count(*) FROM hare_outbox_migrations WHERE table_name = 'outbox'"
        )
        .await,
        i64::try_from(status.len()).unwrap()
    );
    pooled.close().await;
    schema.drop_schema().await;
}
