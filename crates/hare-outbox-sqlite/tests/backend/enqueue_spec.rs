//! enqueue and enqueue_many on SQLite beyond the shared suite: chunks past the parameter limit,
//! keys read through `json_each`, the stored form of extra columns, the scopes' UNIQUE
//! constraints, the order and reach of added extra columns, and writers queueing on SQLite's one write lock.
//!
//! PostgreSQL's crossing-keys deadlock has no SQLite counterpart: SQLite has one writer at a
//! time, so a second writer waits for the first (up to the busy timeout) instead of locking rows
//! the first then needs. `a_second_writer_waits_for_the_first_and_then_sees_its_keys` and
//! `a_writer_waiting_past_the_busy_timeout_gets_a_transaction_retry` show both outcomes.

use std::time::{Duration, Instant};

use hare_outbox_core::{
    ColumnType, Error, ExtraColumn, IdempotencyScope, InProcessWakeup, Outbox, OutboxMessage,
    OutboxTable, Wakeup,
};
use hare_outbox_sqlite::SqliteBackend;
use hare_outbox_testkit::conformance::enqueue::tenant_table;
use hare_outbox_testkit::conformance::statements::{kinds, with_statements, without_comments};
use hare_outbox_testkit::sqlite::TestDb;
use serde_json::json;
use sqlx::SqlitePool;
use sqlx::sqlite::SqlitePoolOptions;

use crate::common::count;

async fn setup(table: OutboxTable) -> (TestDb, Outbox<SqliteBackend>) {
    let db = TestDb::new(4).await;
    let outbox = Outbox::new(SqliteBackend::new(db.pool.clone()), table);
    outbox.migrate().await.unwrap();
    (db, outbox)
}

fn plain() -> OutboxTable {
    OutboxTable::parse("outbox").unwrap()
}

// ---- Batching ----------------------------------------------------------------------------------

#[tokio::test]
async fn a_run_past_the_parameter_limit_is_split_into_chunks() {
    let (db, outbox) = setup(plain()).await;
    let mut tx = db.pool.begin().await.unwrap();
    // 7 parameters a row: 4680 rows fit in SQLite's 32766 parameters, so 5000 take two INSERTs.
    let messages: Vec<OutboxMessage> = (0..5000)
        .map(|n| OutboxMessage::new("bulk", json!(n)).ordering_key("one key"))
        .collect();
    let (events, statements) = with_statements(outbox.enqueue_many(&mut *tx, messages)).await;
    let events = events.unwrap();
    assert_eq!(kinds(&statements), (2, 0));
    assert_eq!(events.len(), 5000);
    for (n, event) in events.iter().enumerate() {
        assert_eq!(event.payload, json!(n));
    }
    assert!(
        events.windows(2).all(|w| w[0].sequence < w[1].sequence),
        "sequences follow the given order across chunks"
    );
    tx.commit().await.unwrap();
    assert_eq!(count(&db.pool, "outbox").await, 5000);
}

/// Stored and repeated keys are read with one SELECT over `json_each` of the keys.
#[tokio::test]
async fn keys_are_read_through_json_each() {
    let (db, outbox) = setup(plain()).await;
    let mut conn = db.pool.acquire().await.unwrap();
    let messages = vec![
        OutboxMessage::new("c", json!(1)).idempotency_key("k"),
        OutboxMessage::new("c", json!(2)).idempotency_key("k"),
    ];
    let (events, statements) = with_statements(outbox.enqueue_many(&mut conn, messages)).await;
    assert_eq!(events.unwrap().len(), 2);
    assert!(
        statements
            .iter()
            .any(|s| s.contains("json_each") && without_comments(s).starts_with("SELECT")),
        "{statements:#?}"
    );
}

/// The stored forms of extra columns: INTEGER, 0/1, hyphenated UUID text, the fixed timestamp
/// format, JSON text; and each idempotency scope's UNIQUE constraint in the schema.
#[tokio::test]
async fn extra_columns_and_scopes_in_sqlite_storage() {
    let (db, outbox) = tenant_setup(IdempotencyScope::Table).await;
    assert!(outbox.schema_sql().contains("idempotency_key TEXT UNIQUE,"));
    let mut conn = db.pool.acquire().await.unwrap();
    let correlation = uuid::Uuid::now_v7();
    let due = chrono::DateTime::parse_from_rfc3339("2026-01-02T03:04:05.123456789Z")
        .unwrap()
        .to_utc();
    let event = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("hook", json!({}))
                .extra("tenant_id", 7i64)
                .extra("subscription_id", 2i64)
                .extra("correlation", correlation)
                .extra("urgent", true)
                .extra("due_at", due)
                .extra("webhook_result", json!({"status": 200, "ok": [true]})),
        )
        .await
        .unwrap();
    let row: (String, i64, String, i64, String, String, String, String) = sqlx::query_as(
        "SELECT typeof(tenant_id), urgent, typeof(urgent), subscription_id, correlation, due_at, \
         webhook_result, typeof(webhook_result) FROM outbox WHERE id = ?1",
    )
    .bind(event.id.hyphenated().to_string())
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        row,
        (
            "integer".to_owned(),
            1,
            "integer".to_owned(),
            2,
            correlation.hyphenated().to_string(),
            "2026-01-02T03:04:05.123456Z".to_owned(),
            r#"{"ok":[true],"status":200}"#.to_owned(),
            "text".to_owned()
        )
    );

    let per_tenant = Outbox::new(
        SqliteBackend::new(db.pool.clone()),
        tenant_table(IdempotencyScope::PerTenant),
    );
    let sql = per_tenant.schema_sql();
    assert!(
        sql.contains("UNIQUE (\"tenant_id\", idempotency_key)")
            && sql.contains("idempotency_key TEXT,"),
        "{sql}"
    );
    let none = Outbox::new(
        SqliteBackend::new(db.pool.clone()),
        plain()
            .with_idempotency_scope(IdempotencyScope::None)
            .unwrap(),
    );
    let sql = none.schema_sql();
    assert!(
        !sql.contains("UNIQUE (") && sql.contains("idempotency_key TEXT,"),
        "{sql}"
    );
}

// ---- Extra columns -----------------------------------------------------------------------------

async fn subscriptions(pool: &SqlitePool) {
    sqlx::raw_sql(
        "CREATE TABLE subscriptions (id INTEGER PRIMARY KEY, url TEXT);
         INSERT INTO subscriptions VALUES (1, 'http://127.0.0.1/a'), (2, 'http://127.0.0.1/b');",
    )
    .execute(pool)
    .await
    .unwrap();
}

async fn tenant_setup(scope: IdempotencyScope) -> (TestDb, Outbox<SqliteBackend>) {
    let db = TestDb::new(4).await;
    subscriptions(&db.pool).await;
    let outbox = Outbox::new(SqliteBackend::new(db.pool.clone()), tenant_table(scope));
    outbox.migrate().await.unwrap();
    outbox.migrate().await.unwrap();
    (db, outbox)
}

/// SQLite's side of adding extra columns (the rest is the shared suite's
/// `extra_columns::migrate_adds_missing_extra_columns_to_an_existing_table`): they are appended
/// in declaration order, and a foreign key into another database is refused.
#[tokio::test]
async fn added_columns_follow_the_declaration_and_foreign_keys_stay_in_one_database() {
    let db = TestDb::new(4).await;
    subscriptions(&db.pool).await;
    let before = Outbox::new(SqliteBackend::new(db.pool.clone()), plain());
    before.migrate().await.unwrap();
    let after = Outbox::new(
        SqliteBackend::new(db.pool.clone()),
        tenant_table(IdempotencyScope::Table),
    );
    after.migrate().await.unwrap();
    let columns: Vec<String> =
        sqlx::query_scalar("SELECT name FROM pragma_table_info('outbox') ORDER BY cid")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        columns[15..],
        [
            "tenant_id",
            "subscription_id",
            "webhook_result",
            "correlation",
            "urgent",
            "due_at",
            "note"
        ]
    );

    // SQLite keeps foreign keys within one database.
    let elsewhere = OutboxTable::parse("outbox")
        .unwrap()
        .with_column(
            ExtraColumn::new("sub", ColumnType::BigInt)
                .unwrap()
                .references("other.subscriptions", "id")
                .unwrap(),
        )
        .unwrap();
    let e = Outbox::new(SqliteBackend::new(db.pool.clone()), elsewhere)
        .migrate()
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Configuration(_)), "{e}");
}

// ---- Tenants and scopes ------------------------------------------------------------------------

// ---- Wake-up signals ---------------------------------------------------------------------------

// ---- One writer at a time ----------------------------------------------------------------------

/// SQLite's stand-in for PostgreSQL's crossing-keys deadlock: the second writer's statement waits
/// in the busy handler while the first holds the write lock, then runs on the first's committed
/// state. No deadlock, no error: the key the first wrote comes back stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_writer_waits_for_the_first_and_then_sees_its_keys() {
    let (db, outbox) = setup(plain()).await;
    let wakeup = InProcessWakeup::new();
    let outbox = outbox.with_wakeup(wakeup.clone()).unwrap();
    let mut signals = wakeup.subscribe().await.unwrap();

    // OutboxTransaction begins IMMEDIATE: the write lock is taken at begin.
    let mut first = outbox.begin().await.unwrap();
    let a = first
        .enqueue(OutboxMessage::new("t", json!(1)).idempotency_key("A"))
        .await
        .unwrap();
    let o2 = outbox.clone();
    let second = tokio::spawn(async move {
        let started = Instant::now();
        let mut tx = o2.begin().await?;
        let waited = started.elapsed();
        let events = tx
            .enqueue_many(vec![
                OutboxMessage::new("t", json!(2)).idempotency_key("B"),
                OutboxMessage::new("u", json!(3)).idempotency_key("A"),
            ])
            .await?;
        tx.commit().await?;
        Ok::<_, Error>((waited, events))
    });
    // A deferred transaction (plain pool.begin) waits at its first write instead.
    let pool = db.pool.clone();
    let o3 = outbox.clone();
    let third = tokio::spawn(async move {
        let mut tx = pool.begin().await.map_err(Error::database)?;
        let started = Instant::now();
        let events = o3
            .enqueue_many(
                &mut *tx,
                vec![OutboxMessage::new("t", json!(4)).idempotency_key("B")],
            )
            .await?;
        let waited = started.elapsed();
        tx.commit().await.map_err(Error::database)?;
        Ok::<_, Error>((waited, events))
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!second.is_finished() && !third.is_finished(), "both wait");
    let b = first
        .enqueue(OutboxMessage::new("t", json!(5)).idempotency_key("B"))
        .await
        .unwrap();
    first.commit().await.unwrap();

    let (waited, second) = second.await.unwrap().unwrap();
    let (waited_too, third) = third.await.unwrap().unwrap();
    for waited in [waited, waited_too] {
        assert!(
            waited >= Duration::from_millis(250) && waited < hare_outbox_sqlite::BUSY_TIMEOUT,
            "waited for the first writer, within the busy timeout: {waited:?}"
        );
    }
    assert_eq!((second[0].id, second[1].id), (b.id, a.id));
    assert_eq!(third[0].id, b.id);
    assert_eq!(count(&db.pool, "outbox").await, 2);
    let got = signals.recv().await.unwrap().unwrap();
    assert_eq!(&*got, ["t".to_owned()], "the first transaction's signal");
    assert!(
        tokio::time::timeout(Duration::from_millis(200), signals.recv())
            .await
            .is_err(),
        "the second wrote nothing: no signal"
    );
}

/// Past the busy timeout the waiting writer gets `Error::TransactionRetry`; retrying the
/// transaction after the first writer is done succeeds.
#[tokio::test]
async fn a_writer_waiting_past_the_busy_timeout_gets_a_transaction_retry() {
    let (db, outbox) = setup(plain()).await;
    let impatient = SqlitePoolOptions::new()
        .max_connections(2)
        .connect_with(
            db.connect_options()
                .busy_timeout(Duration::from_millis(200)),
        )
        .await
        .unwrap();
    let waiting = Outbox::new(SqliteBackend::new(impatient.clone()), plain());

    let holder = outbox.begin().await.unwrap();
    let started = Instant::now();
    let e = waiting.begin().await.unwrap_err();
    assert!(matches!(e, Error::TransactionRetry { .. }), "{e:?}");
    assert!(started.elapsed() >= Duration::from_millis(150), "it waited");

    let mut tx = impatient.begin().await.unwrap();
    let e = waiting
        .enqueue_many(&mut *tx, vec![OutboxMessage::new("t", json!(1))])
        .await
        .unwrap_err();
    assert!(matches!(e, Error::TransactionRetry { .. }), "{e:?}");
    tx.rollback().await.unwrap();
    holder.commit().await.unwrap();

    // The retry, now that the lock is free.
    let mut tx = waiting.begin().await.unwrap();
    tx.enqueue_many(vec![OutboxMessage::new("t", json!(1))])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(count(&db.pool, "outbox").await, 1);
}
