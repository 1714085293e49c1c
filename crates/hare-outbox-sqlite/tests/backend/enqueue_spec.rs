//! enqueue and enqueue_many to the letter of the spec on SQLite (seed 001 § enqueue(),
//! § enqueue_many()): one INSERT per run of same-shape messages, chunks past the parameter limit,
//! the given order, stored and repeated keys, all-or-nothing calls, extra columns with a real
//! foreign key, tenants and idempotency scopes, migrations adding extra columns, wake-up signals
//! after commit, and writers queueing on SQLite's one write lock.
//!
//! PostgreSQL's crossing-keys deadlock has no SQLite counterpart: SQLite has one writer at a
//! time, so a second writer waits for the first (up to the busy timeout) instead of locking rows
//! the first then needs. `a_second_writer_waits_for_the_first_and_then_sees_its_keys` and
//! `a_writer_waiting_past_the_busy_timeout_gets_a_transaction_retry` show both outcomes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, Once};
use std::time::{Duration, Instant};

use chrono::{TimeZone, Utc};
use hare_outbox_core::{
    ColumnType, Error, ExtraColumn, FnDelivery, IdempotencyScope, InProcessWakeup, Outbox,
    OutboxEvent, OutboxMessage, OutboxRelay, OutboxTable, RelayConfig, Wakeup,
};
use hare_outbox_sqlite::SqliteBackend;
use hare_outbox_testkit::sqlite::TestDb;
use hare_outbox_testkit::wait_for;
use serde_json::{Value, json};
use sqlx::SqlitePool;
use sqlx::sqlite::SqlitePoolOptions;
use tracing::Instrument;
use tracing::span::{Attributes, Id};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

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

// ---- Statement capture -------------------------------------------------------------------------
//
// sqlx's SQLite driver runs statements on a worker thread and logs each one there (target
// `sqlx::query`, field `db.statement`), inside the caller's span. A thread-local subscriber on the
// test's thread would miss them, so one global subscriber keeps the statements logged inside a
// `count_statements` span, by the span's key.

static INSTALL: Once = Once::new();
static NEXT_KEY: AtomicU64 = AtomicU64::new(1);
static LOGS: LazyLock<Mutex<HashMap<u64, Vec<String>>>> = LazyLock::new(Mutex::default);

/// The key of a `count_statements` span, kept in its extensions.
struct Key(u64);

struct Statements;

impl<S> tracing_subscriber::Layer<S> for Statements
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if attrs.metadata().name() != "count_statements" {
            return;
        }
        struct Visit(Option<u64>);
        impl tracing::field::Visit for Visit {
            fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
                if field.name() == "key" {
                    self.0 = Some(value);
                }
            }
            fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
        }
        let mut key = Visit(None);
        attrs.record(&mut key);
        if let (Some(key), Some(span)) = (key.0, ctx.span(id)) {
            span.extensions_mut().insert(Key(key));
        }
    }

    fn on_event(&self, event: &tracing::Event<'_>, ctx: Context<'_, S>) {
        if event.metadata().target() != "sqlx::query" {
            return;
        }
        let Some(key) = ctx.event_scope(event).and_then(|scope| {
            scope
                .from_root()
                .find_map(|span| span.extensions().get::<Key>().map(|k| k.0))
        }) else {
            return;
        };
        #[derive(Default)]
        struct Visit {
            statement: Option<String>,
            summary: Option<String>,
        }
        impl tracing::field::Visit for Visit {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.record_str(field, &format!("{value:?}"));
            }
            fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                match field.name() {
                    "db.statement" => self.statement = Some(value.to_owned()),
                    "summary" => self.summary = Some(value.to_owned()),
                    _ => {}
                }
            }
        }
        let mut visit = Visit::default();
        event.record(&mut visit);
        // A one-line statement is logged as its summary alone, with an empty `db.statement`.
        let sql = visit
            .statement
            .filter(|s| !s.trim().is_empty())
            .or(visit.summary);
        if let Some(sql) = sql {
            LOGS.lock().unwrap().entry(key).or_default().push(sql);
        }
    }
}

/// Runs `work` and returns its output with the SQL of every statement sqlx ran for it.
async fn with_statements<F: Future>(work: F) -> (F::Output, Vec<String>) {
    INSTALL.call_once(|| {
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(Statements))
            .expect("the only global subscriber of this test binary");
    });
    let key = NEXT_KEY.fetch_add(1, Ordering::Relaxed);
    let output = work
        .instrument(tracing::info_span!("count_statements", key))
        .await;
    let statements = LOGS.lock().unwrap().remove(&key).unwrap_or_default();
    (output, statements)
}

/// The statement without its `--` comment lines and surrounding blanks.
fn without_comments(sql: &str) -> String {
    sql.lines()
        .filter(|line| !line.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .to_owned()
}

fn kinds(statements: &[String]) -> (usize, usize) {
    let inserts = statements
        .iter()
        .filter(|s| without_comments(s).starts_with("INSERT INTO"))
        .count();
    let selects = statements
        .iter()
        .filter(|s| without_comments(s).starts_with("SELECT"))
        .count();
    (inserts, selects)
}

// ---- Batching ----------------------------------------------------------------------------------

#[tokio::test]
async fn enqueue_many_writes_one_insert_per_run_and_keeps_the_order() {
    let (db, outbox) = setup(plain()).await;
    let mut conn = db.pool.acquire().await.unwrap();
    let stored = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("old", json!("stored")).idempotency_key("k-old"),
        )
        .await
        .unwrap();

    let messages = vec![
        OutboxMessage::new("a", json!(1)).ordering_key("K"),
        OutboxMessage::new("a", json!(2)).ordering_key("K"),
        OutboxMessage::new("b", json!(3)).ordering_key("L"),
        // A run with idempotency keys: a stored key, a new key, and that key repeated.
        OutboxMessage::new("c", json!(4)).idempotency_key("k-old"),
        OutboxMessage::new("c", json!(5)).idempotency_key("k-new"),
        OutboxMessage::new("c", json!(6)).idempotency_key("k-new"),
        // Back to plain messages: a third run.
        OutboxMessage::new("a", json!(7)).ordering_key("K"),
    ];
    let (events, statements) = with_statements(outbox.enqueue_many(&mut conn, messages)).await;
    let events = events.unwrap();
    let (inserts, selects) = kinds(&statements);
    assert_eq!(
        inserts, 3,
        "one INSERT per run of same-shape messages: {statements:#?}"
    );
    assert_eq!(
        selects, 1,
        "existing and repeated keys read with one SELECT: {statements:#?}"
    );
    assert!(
        statements
            .iter()
            .any(|s| s.contains("json_each") && without_comments(s).starts_with("SELECT")),
        "{statements:#?}"
    );

    let payloads: Vec<_> = events.iter().map(|e| e.payload.clone()).collect();
    assert_eq!(
        payloads,
        [
            json!(1),
            json!(2),
            json!(3),
            json!("stored"),
            json!(5),
            json!(5),
            json!(7)
        ]
    );
    assert_eq!(events[3], stored, "a stored key returns the stored event");
    assert_eq!(
        events[4], events[5],
        "a repeated key returns the event written for it"
    );
    let sequences: Vec<i64> = events
        .iter()
        .filter(|e| e.topic == "a")
        .map(|e| e.sequence)
        .collect();
    assert!(
        sequences.windows(2).all(|w| w[0] < w[1]),
        "given order kept: {sequences:?}"
    );
    for event in &events {
        assert_eq!(outbox.get(event.id).await.unwrap().as_ref(), Some(event));
    }
    assert_eq!(count(&db.pool, "outbox").await, 6);

    // Without any stored or repeated key, no SELECT at all.
    let (events, statements) = with_statements(outbox.enqueue_many(
        &mut conn,
        vec![
            OutboxMessage::new("d", json!(1)),
            OutboxMessage::new("d", json!(2)),
        ],
    ))
    .await;
    assert_eq!(events.unwrap().len(), 2);
    assert_eq!(kinds(&statements), (1, 0), "{statements:#?}");
}

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

#[tokio::test]
async fn enqueue_many_is_all_or_nothing_and_the_callers_transaction_survives() {
    let (db, outbox) = setup(plain()).await;
    let mut tx = db.pool.begin().await.unwrap();
    let taken = outbox
        .enqueue(&mut *tx, OutboxMessage::new("x", json!(0)))
        .await
        .unwrap();
    // The second run collides on an explicit id: nothing of the call stays.
    let e = outbox
        .enqueue_many(
            &mut *tx,
            vec![
                OutboxMessage::new("x", json!(1)),
                OutboxMessage::new("x", json!(2))
                    .idempotency_key("k")
                    .id(taken.id),
            ],
        )
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Integrity { .. }), "{e}");
    // A validation error names the message and writes nothing.
    let e = outbox
        .enqueue_many(
            &mut *tx,
            vec![
                OutboxMessage::new("x", json!(1)),
                OutboxMessage::new("", json!(2)),
            ],
        )
        .await
        .unwrap_err();
    assert!(e.to_string().contains("messages[1].topic"), "{e}");
    // The key of the failed call was not kept either.
    let k = outbox
        .enqueue(
            &mut *tx,
            OutboxMessage::new("x", json!(3)).idempotency_key("k"),
        )
        .await
        .unwrap();
    assert_eq!(k.payload, json!(3));
    tx.commit().await.unwrap();
    let payloads: Vec<String> = sqlx::query_scalar("SELECT payload FROM outbox ORDER BY sequence")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(payloads, ["0", "3"]);

    // On a connection outside a transaction the call runs in a transaction of its own.
    let mut conn = db.pool.acquire().await.unwrap();
    let e = outbox
        .enqueue_many(
            &mut conn,
            vec![
                OutboxMessage::new("y", json!(1)),
                OutboxMessage::new("y", json!(2)).id(taken.id),
            ],
        )
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Integrity { .. }), "{e}");
    assert_eq!(count(&db.pool, "outbox").await, 2);
    outbox
        .enqueue_many(&mut conn, vec![OutboxMessage::new("y", json!(3))])
        .await
        .unwrap();
    assert_eq!(count(&db.pool, "outbox").await, 3);
}

#[tokio::test]
async fn keys_outlive_delivery_and_dead_letters_but_not_rollbacks() {
    let (db, outbox) = setup(plain()).await;
    let mut tx = db.pool.begin().await.unwrap();
    outbox
        .enqueue(
            &mut *tx,
            OutboxMessage::new("t", json!("rolled back")).idempotency_key("free"),
        )
        .await
        .unwrap();
    outbox
        .enqueue_many(
            &mut *tx,
            vec![OutboxMessage::new("t", json!("rolled back too")).idempotency_key("free too")],
        )
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    let mut conn = db.pool.acquire().await.unwrap();
    let reused = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("t", json!("again")).idempotency_key("free"),
        )
        .await
        .unwrap();
    assert_eq!(
        reused.payload,
        json!("again"),
        "a key freed by rollback is reusable"
    );
    let reused = outbox
        .enqueue_many(
            &mut conn,
            vec![OutboxMessage::new("t", json!("again too")).idempotency_key("free too")],
        )
        .await
        .unwrap();
    assert_eq!(reused[0].payload, json!("again too"));

    let published = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("t", json!(1)).idempotency_key("p"),
        )
        .await
        .unwrap();
    let dead = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("t", json!(2)).idempotency_key("d"),
        )
        .await
        .unwrap();
    let now = "2026-01-02T03:04:05.000000Z";
    sqlx::query("UPDATE outbox SET published_at = ?1 WHERE id = ?2")
        .bind(now)
        .bind(published.id.hyphenated().to_string())
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::query("UPDATE outbox SET dead_lettered_at = ?1 WHERE id = ?2")
        .bind(now)
        .bind(dead.id.hyphenated().to_string())
        .execute(&mut *conn)
        .await
        .unwrap();
    let again = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("t", json!(9)).idempotency_key("p"),
        )
        .await
        .unwrap();
    assert_eq!((again.id, again.payload.clone()), (published.id, json!(1)));
    assert!(again.published_at.is_some());
    let again = outbox
        .enqueue_many(
            &mut conn,
            vec![
                OutboxMessage::new("t", json!(9)).idempotency_key("d"),
                OutboxMessage::new("t", json!(9)).idempotency_key("p"),
            ],
        )
        .await
        .unwrap();
    assert_eq!((again[0].id, again[1].id), (dead.id, published.id));
    assert!(again[0].dead_lettered_at.is_some());
    assert_eq!(count(&db.pool, "outbox").await, 4);
}

// ---- Extra columns -----------------------------------------------------------------------------

fn tenant_table(scope: IdempotencyScope) -> OutboxTable {
    OutboxTable::parse("outbox")
        .unwrap()
        .with_column(ExtraColumn::new("tenant_id", ColumnType::BigInt).unwrap())
        .unwrap()
        .with_column(
            ExtraColumn::new("subscription_id", ColumnType::BigInt)
                .unwrap()
                .references("subscriptions", "id")
                .unwrap(),
        )
        .unwrap()
        .with_column(ExtraColumn::new("webhook_result", ColumnType::Json).unwrap())
        .unwrap()
        .with_column(ExtraColumn::new("correlation", ColumnType::Uuid).unwrap())
        .unwrap()
        .with_column(ExtraColumn::new("urgent", ColumnType::Boolean).unwrap())
        .unwrap()
        .with_column(ExtraColumn::new("due_at", ColumnType::Timestamp).unwrap())
        .unwrap()
        .with_column(ExtraColumn::new("note", ColumnType::Text).unwrap())
        .unwrap()
        .with_tenant_column("tenant_id")
        .unwrap()
        .with_idempotency_scope(scope)
        .unwrap()
}

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

#[tokio::test]
async fn extra_columns_are_typed_checked_and_returned() {
    let (db, outbox) = tenant_setup(IdempotencyScope::Table).await;
    let mut conn = db.pool.acquire().await.unwrap();
    let correlation = uuid::Uuid::now_v7();
    let due = Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).single().unwrap()
        + chrono::Duration::nanoseconds(123_456_789);
    let event = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("hook", json!({}))
                .extra("tenant_id", 7i64)
                .extra("subscription_id", 2i64)
                .extra("correlation", correlation)
                .extra("urgent", true)
                .extra("due_at", due)
                .extra("webhook_result", json!({"status": 200, "ok": [true]}))
                .extra("note", "Zoë"),
        )
        .await
        .unwrap();
    assert_eq!(event.extra["tenant_id"], json!(7));
    assert_eq!(event.extra["subscription_id"], json!(2));
    assert_eq!(event.extra["correlation"], json!(correlation.to_string()));
    assert_eq!(event.extra["urgent"], json!(true));
    assert_eq!(event.extra["due_at"], json!("2026-01-02T03:04:05.123456Z"));
    assert_eq!(
        event.extra["webhook_result"],
        json!({"status": 200, "ok": [true]})
    );
    assert_eq!(event.extra["note"], json!("Zoë"));
    assert_eq!(outbox.get(event.id).await.unwrap().unwrap(), event);

    // The stored forms: INTEGER, 0/1, hyphenated UUID text, the fixed timestamp format, JSON text.
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

    // Runs of different extra columns: NULLs, false, absent columns left NULL.
    let events = outbox
        .enqueue_many(
            &mut conn,
            vec![
                OutboxMessage::new("hook", json!(1))
                    .extra("tenant_id", 1i64)
                    .extra("urgent", false),
                OutboxMessage::new("hook", json!(2))
                    .extra("tenant_id", 2i64)
                    .extra("urgent", None::<bool>),
                OutboxMessage::new("hook", json!(3)).extra("webhook_result", Value::Null),
            ],
        )
        .await
        .unwrap();
    let view = |e: &OutboxEvent| {
        (
            e.extra["tenant_id"].clone(),
            e.extra["urgent"].clone(),
            e.extra["webhook_result"].clone(),
            e.extra["due_at"].clone(),
        )
    };
    assert_eq!(
        view(&events[0]),
        (json!(1), json!(false), json!(null), json!(null))
    );
    assert_eq!(
        view(&events[1]),
        (json!(2), json!(null), json!(null), json!(null))
    );
    assert_eq!(
        view(&events[2]),
        (json!(null), json!(null), json!(null), json!(null))
    );
    for e in &events {
        assert_eq!(e.extra.len(), 7);
        assert_eq!(outbox.get(e.id).await.unwrap().as_ref(), Some(e));
    }

    let bad = [
        (
            OutboxMessage::new("t", json!({})).extra("nope", 1i64),
            "extra.nope",
        ),
        (
            OutboxMessage::new("t", json!({})).extra("tenant_id", "seven"),
            "extra.tenant_id",
        ),
        (
            OutboxMessage::new("t", json!({})).extra("urgent", 1i64),
            "extra.urgent",
        ),
        (
            OutboxMessage::new("t", json!({})).extra("attempts", 3i64),
            "extra.attempts",
        ),
        (
            OutboxMessage::new("t", json!({})).extra("leased_by", "me"),
            "extra.leased_by",
        ),
    ];
    for (message, field) in bad {
        match outbox.enqueue(&mut conn, message).await.unwrap_err() {
            Error::Validation { field: f, .. } => assert_eq!(f, field),
            other => panic!("{other}"),
        }
    }
    // The foreign key holds: an unknown subscription is refused by the database.
    let e = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("t", json!({})).extra("subscription_id", 99i64),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Integrity { .. }), "{e}");
    let e = outbox
        .enqueue_many(
            &mut conn,
            vec![
                OutboxMessage::new("t", json!({})).extra("subscription_id", 1i64),
                OutboxMessage::new("t", json!({})).extra("subscription_id", 99i64),
            ],
        )
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Integrity { .. }), "{e}");
    assert_eq!(count(&db.pool, "outbox").await, 4);
    // Deleting the subscription deletes its events (ON DELETE CASCADE).
    sqlx::query("DELETE FROM subscriptions WHERE id = 2")
        .execute(&mut *conn)
        .await
        .unwrap();
    assert!(outbox.get(event.id).await.unwrap().is_none());
    assert_eq!(count(&db.pool, "outbox").await, 3);
}

#[tokio::test]
async fn migrate_adds_missing_extra_columns_to_an_existing_table() {
    let db = TestDb::new(4).await;
    subscriptions(&db.pool).await;
    let before = Outbox::new(SqliteBackend::new(db.pool.clone()), plain());
    before.migrate().await.unwrap();
    let old = crate::common::enqueue(
        &before,
        OutboxMessage::new("t", json!(1)).idempotency_key("old"),
    )
    .await;

    // Nullable columns, one with a foreign key, are added; migrating again changes nothing.
    let after = Outbox::new(
        SqliteBackend::new(db.pool.clone()),
        tenant_table(IdempotencyScope::Table),
    );
    after.migrate().await.unwrap();
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
    let read = after.get(old.id).await.unwrap().unwrap();
    assert_eq!(read.extra.len(), 7);
    assert!(read.extra.values().all(Value::is_null));
    let mut conn = db.pool.acquire().await.unwrap();
    let new = after
        .enqueue(
            &mut conn,
            OutboxMessage::new("t", json!(2))
                .extra("tenant_id", 3i64)
                .extra("subscription_id", 1i64),
        )
        .await
        .unwrap();
    assert_eq!(new.extra["tenant_id"], json!(3));
    let e = after
        .enqueue(
            &mut conn,
            OutboxMessage::new("t", json!(3)).extra("subscription_id", 99i64),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::Integrity { .. }),
        "the added foreign key holds: {e}"
    );
    // The existing table's UNIQUE (idempotency_key) still serves the keys.
    let same = after
        .enqueue(
            &mut conn,
            OutboxMessage::new("t", json!(4)).idempotency_key("old"),
        )
        .await
        .unwrap();
    assert_eq!(same.id, old.id);
    drop(conn);

    // A NOT NULL column cannot be added to a table with rows (as on PostgreSQL); nothing of that
    // migration stays.
    let required = |name: &str| {
        OutboxTable::parse(name)
            .unwrap()
            .with_column(
                ExtraColumn::new("shard", ColumnType::BigInt)
                    .unwrap()
                    .not_null(),
            )
            .unwrap()
            .with_column(ExtraColumn::new("region", ColumnType::Text).unwrap())
            .unwrap()
    };
    let e = Outbox::new(SqliteBackend::new(db.pool.clone()), required("outbox"))
        .migrate()
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Database { .. }), "{e}");
    let columns: i64 = sqlx::query_scalar("SELECT count(*) FROM pragma_table_info('outbox')")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(columns, 22, "the failed migration added nothing");

    // On an empty table it is added, and the database refuses a NULL in it.
    Outbox::new(SqliteBackend::new(db.pool.clone()), plain_named("empty"))
        .migrate()
        .await
        .unwrap();
    let empty = Outbox::new(SqliteBackend::new(db.pool.clone()), required("empty"));
    empty.migrate().await.unwrap();
    let e = sqlx::query(
        "INSERT INTO empty (id, topic, payload, created_at) VALUES ('x', 't', '1', '2026')",
    )
    .execute(&db.pool)
    .await
    .unwrap_err();
    assert!(e.to_string().contains("CHECK constraint failed"), "{e}");
    let mut conn = db.pool.acquire().await.unwrap();
    let e = empty
        .enqueue(&mut conn, OutboxMessage::new("t", json!(1)))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Validation { .. }), "{e}");
    let ok = empty
        .enqueue(
            &mut conn,
            OutboxMessage::new("t", json!(1)).extra("shard", 5i64),
        )
        .await
        .unwrap();
    assert_eq!(ok.extra["shard"], json!(5));
    assert_eq!(ok.extra["region"], json!(null));

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

fn plain_named(name: &str) -> OutboxTable {
    OutboxTable::parse(name).unwrap()
}

// ---- Tenants and scopes ------------------------------------------------------------------------

#[tokio::test]
async fn keys_are_unique_across_tenants_unless_declared_per_tenant() {
    let (db, outbox) = tenant_setup(IdempotencyScope::Table).await;
    assert!(outbox.schema_sql().contains("idempotency_key TEXT UNIQUE,"));
    let mut conn = db.pool.acquire().await.unwrap();
    outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("t", json!(1))
                .idempotency_key("k")
                .extra("tenant_id", 1i64),
        )
        .await
        .unwrap();
    let same = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("t", json!(2))
                .idempotency_key("k")
                .extra("tenant_id", 1i64),
        )
        .await
        .unwrap();
    assert_eq!(same.payload, json!(1));
    let e = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("t", json!(3))
                .idempotency_key("k")
                .extra("tenant_id", 2i64),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::Integrity { .. }) && e.to_string().contains("another tenant"),
        "{e}"
    );
    let e = outbox
        .enqueue_many(
            &mut conn,
            vec![
                OutboxMessage::new("t", json!(4))
                    .idempotency_key("fresh")
                    .extra("tenant_id", 2i64),
                OutboxMessage::new("t", json!(5))
                    .idempotency_key("k")
                    .extra("tenant_id", 2i64),
            ],
        )
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::Integrity { .. }) && e.to_string().contains("another tenant"),
        "{e}"
    );
    assert_eq!(
        count(&db.pool, "outbox").await,
        1,
        "nothing of the call stays"
    );
    drop(conn);

    let (db, outbox) = tenant_setup(IdempotencyScope::PerTenant).await;
    let sql = outbox.schema_sql();
    assert!(
        sql.contains("UNIQUE (\"tenant_id\", idempotency_key)")
            && sql.contains("idempotency_key TEXT,"),
        "{sql}"
    );
    let mut conn = db.pool.acquire().await.unwrap();
    let a = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("t", json!(1))
                .idempotency_key("k")
                .extra("tenant_id", 1i64),
        )
        .await
        .unwrap();
    let b = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("t", json!(2))
                .idempotency_key("k")
                .extra("tenant_id", 2i64),
        )
        .await
        .unwrap();
    assert_ne!(a.id, b.id, "per-tenant keys");
    let again = outbox
        .enqueue_many(
            &mut conn,
            vec![
                OutboxMessage::new("t", json!(9))
                    .idempotency_key("k")
                    .extra("tenant_id", 2i64),
                OutboxMessage::new("t", json!(10))
                    .idempotency_key("j")
                    .extra("tenant_id", 1i64),
                OutboxMessage::new("t", json!(11))
                    .idempotency_key("j")
                    .extra("tenant_id", 2i64),
                OutboxMessage::new("t", json!(12))
                    .idempotency_key("j")
                    .extra("tenant_id", 1i64),
            ],
        )
        .await
        .unwrap();
    assert_eq!(again[0].id, b.id);
    assert_ne!(again[1].id, again[2].id, "one key, two tenants, two events");
    assert_eq!(again[3].id, again[1].id, "repeated within its tenant");
    let e = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("t", json!(3)).idempotency_key("k"),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::Validation { .. }),
        "a key needs its tenant: {e}"
    );
    assert_eq!(count(&db.pool, "outbox").await, 4);
    drop(conn);

    let table = plain()
        .with_idempotency_scope(IdempotencyScope::None)
        .unwrap();
    let (db, outbox) = setup(table).await;
    let sql = outbox.schema_sql();
    assert!(
        !sql.contains("UNIQUE (") && sql.contains("idempotency_key TEXT,"),
        "{sql}"
    );
    let mut conn = db.pool.acquire().await.unwrap();
    let e = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("t", json!(1)).idempotency_key("k"),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Configuration(_)), "{e}");
    let e = outbox
        .enqueue_many(
            &mut conn,
            vec![OutboxMessage::new("t", json!(1)).idempotency_key("k")],
        )
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Configuration(_)), "{e}");
    outbox
        .enqueue(&mut conn, OutboxMessage::new("t", json!(1)))
        .await
        .unwrap();
    outbox
        .enqueue_many(
            &mut conn,
            vec![
                OutboxMessage::new("t", json!(2)),
                OutboxMessage::new("t", json!(3)),
            ],
        )
        .await
        .unwrap();
    assert_eq!(count(&db.pool, "outbox").await, 3);
}

// ---- Wake-up signals ---------------------------------------------------------------------------

#[tokio::test]
async fn signals_are_coalesced_and_sent_only_after_commit() {
    let (_db, outbox) = setup(plain()).await;
    let wakeup = InProcessWakeup::new();
    let outbox = outbox.with_wakeup(wakeup.clone()).unwrap();
    let mut signals = wakeup.subscribe().await.unwrap();

    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue(OutboxMessage::new("a", json!(1))).await.unwrap();
    tx.enqueue(OutboxMessage::new("b", json!(2))).await.unwrap();
    tx.enqueue_many(vec![
        OutboxMessage::new("a", json!(3)),
        OutboxMessage::new("c", json!(4)),
    ])
    .await
    .unwrap();
    sqlx::query("SELECT 1").execute(&mut *tx).await.unwrap();
    assert_eq!(tx.pending_topics(), ["a", "b", "c"]);
    tx.commit().await.unwrap();
    let got = signals.recv().await.unwrap().unwrap();
    assert_eq!(
        &*got,
        ["a".to_owned(), "b".to_owned(), "c".to_owned()],
        "one signal, one entry per topic"
    );

    // A rollback signals nothing; neither does a key that was already stored.
    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue(OutboxMessage::new("d", json!(1)).idempotency_key("once"))
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue(OutboxMessage::new("e", json!(1)).idempotency_key("once"))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue(OutboxMessage::new("f", json!(1)).idempotency_key("once"))
        .await
        .unwrap();
    tx.enqueue_many(vec![
        OutboxMessage::new("g", json!(1)).idempotency_key("once"),
    ])
    .await
    .unwrap();
    assert!(tx.pending_topics().is_empty());
    tx.commit().await.unwrap();
    // Dropped without commit: a rollback, no signal.
    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue(OutboxMessage::new("h", json!(1))).await.unwrap();
    drop(tx);
    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue(OutboxMessage::new("i", json!(1))).await.unwrap();
    tx.commit().await.unwrap();
    let got = signals.recv().await.unwrap().unwrap();
    assert_eq!(
        &*got,
        ["e".to_owned()],
        "no signal for d (rolled back) nor f, g (key stored)"
    );
    let got = signals.recv().await.unwrap().unwrap();
    assert_eq!(&*got, ["i".to_owned()], "none for h (dropped)");
}

#[tokio::test]
async fn a_relay_wakes_on_commit_not_on_the_poll_interval() {
    let (db, outbox) = setup(plain()).await;
    let outbox = outbox.with_wakeup(InProcessWakeup::new()).unwrap();
    let seen = Arc::new(Mutex::new(Vec::<(String, Instant)>::new()));
    let sink = seen.clone();
    let relay = OutboxRelay::new(
        outbox.clone(),
        FnDelivery::new(move |e: OutboxEvent| {
            let sink = sink.clone();
            async move {
                sink.lock().unwrap().push((e.topic, Instant::now()));
                Ok(())
            }
        }),
        RelayConfig::default()
            .with_poll_interval(Duration::from_secs(60))
            .with_topics(["mine.*"]),
    )
    .unwrap();
    relay.start().unwrap();
    // Let the relay finish its first (empty) poll and go to sleep.
    wait_for("the first poll", Duration::from_secs(5), || async {
        (relay.stats().polls >= 1).then_some(())
    })
    .await;

    // A plain sqlx transaction cannot signal: the relay sleeps on.
    let mut plain = db.pool.begin().await.unwrap();
    outbox
        .enqueue(&mut *plain, OutboxMessage::new("mine.plain", json!(1)))
        .await
        .unwrap();
    plain.commit().await.unwrap();
    // A signal for another relay's topic does not wake this one either.
    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue(OutboxMessage::new("theirs.x", json!(1)))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        seen.lock().unwrap().is_empty(),
        "nothing delivered before a signal for this relay"
    );
    assert_eq!(relay.stats().polls, 1);

    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue_many(vec![OutboxMessage::new("mine.signalled", json!(2))])
        .await
        .unwrap();
    let committed = Instant::now();
    tx.commit().await.unwrap();
    wait_for(
        "delivery after the signal",
        Duration::from_secs(5),
        || async { (seen.lock().unwrap().len() == 2).then_some(()) },
    )
    .await;
    let latency = seen.lock().unwrap()[1].1 - committed;
    assert!(
        latency < Duration::from_secs(1),
        "woken by the signal, not the 60 s poll: {latency:?}"
    );
    relay.stop().await.unwrap();
}

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
