//! Versioned migrations beyond the shared suite, on SQLite: the record lives in the database file
//! of its table (an attached database has its own), migrates from two pools (as two processes)
//! queue on the write lock, and a record whose time is not a time is refused by name.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hare_outbox_core::migration::Migration;
use hare_outbox_core::{Backend, Error, MigrationStream, Outbox, OutboxTable};
use hare_outbox_sqlite::SqliteBackend;
use hare_outbox_testkit::conformance::harness::scalar;
use hare_outbox_testkit::sqlite::TestDb;
use sqlx::sqlite::{SqlitePool, SqlitePoolOptions};
use sqlx::{AssertSqlSafe, Row};

#[tokio::test]
async fn an_attached_database_holds_its_own_record() {
    let db = TestDb::new(1).await;
    let attach = format!(
        "ATTACH DATABASE '{}' AS billing",
        db.dir().join("billing.sqlite").display()
    );
    let pool = SqlitePoolOptions::new()
        .max_connections(2)
        .after_connect(move |conn, _| {
            let attach = attach.clone();
            Box::pin(async move {
                sqlx::query(AssertSqlSafe(attach)).execute(conn).await?;
                Ok(())
            })
        })
        .connect_with(db.connect_options())
        .await
        .expect("pool with attached database");
    let backend = SqliteBackend::new(pool.clone());
    let billing = Outbox::new(
        backend.clone(),
        OutboxTable::parse("billing.events").unwrap(),
    );
    billing.migrate().await.unwrap();
    let versions = i64::try_from(backend.migrations(MigrationStream::Outbox).len()).unwrap();
    assert_eq!(
        scalar(
            &pool,
            "SELECT count(*) FROM billing.hare_outbox_migrations WHERE table_name = 'events'"
        )
        .await,
        versions
    );
    assert_eq!(
        scalar(
            &pool,
            "SELECT count(*) FROM main.sqlite_master WHERE name = 'hare_outbox_migrations'"
        )
        .await,
        0,
        "the main database has no record"
    );
    let main = Outbox::new(backend, OutboxTable::parse("events").unwrap());
    assert!(main.migration_status().await.unwrap()[0].is_pending());
    main.migrate().await.unwrap();
    let row = sqlx::query("SELECT applied_at FROM main.hare_outbox_migrations WHERE version = 1")
        .fetch_one(&pool)
        .await
        .unwrap();
    let applied_at: String = row.get(0);
    // The backend's fixed timestamp format: microseconds, UTC.
    assert_eq!(
        applied_at.len(),
        "2026-01-31T23:59:59.123456Z".len(),
        "{applied_at}"
    );
    assert!(applied_at.ends_with('Z'), "{applied_at}");
    pool.close().await;
}

/// A test version 2 whose `ADD COLUMN` fails when run twice.
const ADD_NOTE: &str = "ALTER TABLE {table} ADD COLUMN note TEXT;";

#[tokio::test]
async fn two_pools_migrate_at_once_and_each_version_runs_once() {
    let db = TestDb::new(2).await;
    let other = db.connect(2).await;
    let list = |pool: SqlitePool| {
        let backend = SqliteBackend::new(pool);
        let mut list = backend.migrations(MigrationStream::Outbox).to_vec();
        list.push(Migration::new(
            i64::try_from(list.len()).unwrap() + 1,
            "add_note",
            ADD_NOTE,
        ));
        backend.with_migrations(MigrationStream::Outbox, Box::leak(list.into_boxed_slice()))
    };
    let table = OutboxTable::default();
    let a = Outbox::new(list(db.pool.clone()), table.clone());
    let b = Outbox::new(list(other.clone()), table);
    let (ra, rb) = tokio::join!(a.migrate(), b.migrate());
    ra.expect("the first pool migrates");
    rb.expect("the second pool migrates");
    assert_eq!(
        scalar(
            &db.pool,
            "SELECT count(*) FROM hare_outbox_migrations WHERE table_name = 'hare_outbox'"
        )
        .await,
        i64::try_from(a.backend().migrations(MigrationStream::Outbox).len()).unwrap()
    );
    assert_eq!(
        scalar(&db.pool, "SELECT count(note) FROM hare_outbox").await,
        0
    );
    other.close().await;
}

#[tokio::test]
async fn a_record_whose_time_is_not_a_time_is_refused_by_name() {
    let db = TestDb::new(1).await;
    let outbox = Outbox::new(SqliteBackend::new(db.pool.clone()), OutboxTable::default());
    outbox.migrate().await.unwrap();
    sqlx::query("UPDATE hare_outbox_migrations SET applied_at = 'yesterday' WHERE version = 1")
        .execute(&db.pool)
        .await
        .unwrap();
    match outbox.migration_status().await {
        Err(Error::Migration(message)) => assert!(
            message.contains("version 1") && message.contains("\"yesterday\""),
            "{message}"
        ),
        other => panic!("expected a migration error, got {other:?}"),
    }
    assert!(matches!(outbox.migrate().await, Err(Error::Migration(_))));
}
