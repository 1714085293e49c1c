//! enqueue and enqueue_many to the letter of the spec on PostgreSQL: batching, idempotency,
//! extra columns, tenants, wake-up signals after commit (seed 001 § enqueue(), § enqueue_many()).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hare_outbox_core::{
    ColumnType, Error, ExtraColumn, FnDelivery, IdempotencyScope, InProcessWakeup, Outbox,
    OutboxEvent, OutboxMessage, OutboxRelay, OutboxTable, RelayConfig, Wakeup,
};
use hare_outbox_postgres::PgBackend;
use hare_outbox_testkit::pg::TestSchema;
use hare_outbox_testkit::wait_for;
use serde_json::json;

async fn setup(table: OutboxTable) -> (TestSchema, Outbox<PgBackend>) {
    let schema = TestSchema::new(8).await;
    let outbox = Outbox::new(PgBackend::new(schema.pool.clone()), table);
    outbox.migrate().await.unwrap();
    (schema, outbox)
}

async fn count(schema: &TestSchema, sql: &str) -> i64 {
    sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_one(&schema.pool)
        .await
        .unwrap()
}

/// Collects the SQL of every statement sqlx runs on this thread.
#[derive(Clone, Default)]
struct Statements(Arc<Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Statements {
    fn on_event(
        &self,
        event: &tracing::Event<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if event.metadata().target() != "sqlx::query" {
            return;
        }
        struct Visit<'a>(&'a mut Option<String>);
        impl tracing::field::Visit for Visit<'_> {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "db.statement" {
                    *self.0 = Some(format!("{value:?}"));
                }
            }
            fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                if field.name() == "db.statement" {
                    *self.0 = Some(value.to_owned());
                }
            }
        }
        let mut sql = None;
        event.record(&mut Visit(&mut sql));
        if let Some(sql) = sql {
            self.0.lock().unwrap().push(sql);
        }
    }
}

#[tokio::test]
async fn enqueue_many_writes_one_insert_per_run_and_keeps_the_order() {
    use tracing_subscriber::layer::SubscriberExt;
    let (schema, outbox) = setup(OutboxTable::parse("outbox").unwrap()).await;
    let mut conn = schema.pool.acquire().await.unwrap();
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
    let log = Statements::default();
    let subscriber = tracing_subscriber::registry().with(log.clone());
    let events = {
        let _guard = tracing::subscriber::set_default(subscriber);
        outbox.enqueue_many(&mut conn, messages).await.unwrap()
    };
    let statements = log.0.lock().unwrap().clone();
    let inserts = statements
        .iter()
        .filter(|s| s.contains("INSERT INTO"))
        .count();
    let selects = statements
        .iter()
        .filter(|s| s.trim_start().starts_with("SELECT"))
        .count();
    assert_eq!(
        inserts, 3,
        "one INSERT per run of same-shape messages: {statements:#?}"
    );
    assert_eq!(
        selects, 1,
        "existing and repeated keys read with one SELECT: {statements:#?}"
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
    assert_eq!(count(&schema, "SELECT count(*) FROM outbox").await, 6);
    drop(conn);
    schema.drop_schema().await;
}

#[tokio::test]
async fn enqueue_many_is_all_or_nothing_and_the_callers_transaction_survives() {
    let (schema, outbox) = setup(OutboxTable::parse("outbox").unwrap()).await;
    let mut tx = schema.pool.begin().await.unwrap();
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
    outbox
        .enqueue(&mut *tx, OutboxMessage::new("x", json!(3)))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let payloads: Vec<serde_json::Value> =
        sqlx::query_scalar("SELECT payload FROM outbox ORDER BY sequence")
            .fetch_all(&schema.pool)
            .await
            .unwrap();
    assert_eq!(payloads, [json!(0), json!(3)]);
    schema.drop_schema().await;
}

#[tokio::test]
async fn keys_outlive_delivery_and_dead_letters_but_not_rollbacks() {
    let (schema, outbox) = setup(OutboxTable::parse("outbox").unwrap()).await;
    let mut tx = schema.pool.begin().await.unwrap();
    outbox
        .enqueue(
            &mut *tx,
            OutboxMessage::new("t", json!("rolled back")).idempotency_key("free"),
        )
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    let mut conn = schema.pool.acquire().await.unwrap();
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
    sqlx::query("UPDATE outbox SET published_at = now() WHERE id = $1")
        .bind(published.id)
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::query("UPDATE outbox SET dead_lettered_at = now() WHERE id = $1")
        .bind(dead.id)
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
        .enqueue(
            &mut conn,
            OutboxMessage::new("t", json!(9)).idempotency_key("d"),
        )
        .await
        .unwrap();
    assert_eq!(again.id, dead.id);
    drop(conn);
    schema.drop_schema().await;
}

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
        .with_tenant_column("tenant_id")
        .unwrap()
        .with_idempotency_scope(scope)
        .unwrap()
}

async fn tenant_setup(scope: IdempotencyScope) -> (TestSchema, Outbox<PgBackend>) {
    let schema = TestSchema::new(4).await;
    sqlx::query("CREATE TABLE subscriptions (id bigint PRIMARY KEY, url text)")
        .execute(&schema.pool)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO subscriptions VALUES (1, 'http://127.0.0.1/a'), (2, 'http://127.0.0.1/b')",
    )
    .execute(&schema.pool)
    .await
    .unwrap();
    let outbox = Outbox::new(PgBackend::new(schema.pool.clone()), tenant_table(scope));
    outbox.migrate().await.unwrap();
    outbox.migrate().await.unwrap();
    (schema, outbox)
}

#[tokio::test]
async fn extra_columns_are_typed_checked_and_returned() {
    let (schema, outbox) = tenant_setup(IdempotencyScope::Table).await;
    let mut conn = schema.pool.acquire().await.unwrap();
    let correlation = uuid::Uuid::now_v7();
    let event = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("hook", json!({}))
                .extra("tenant_id", 7i64)
                .extra("subscription_id", 2i64)
                .extra("correlation", correlation),
        )
        .await
        .unwrap();
    assert_eq!(event.extra["tenant_id"], json!(7));
    assert_eq!(event.extra["subscription_id"], json!(2));
    assert_eq!(event.extra["webhook_result"], json!(null));
    assert_eq!(event.extra["correlation"], json!(correlation.to_string()));
    assert_eq!(outbox.get(event.id).await.unwrap().unwrap(), event);

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
    // Deleting the subscription deletes its events (ON DELETE CASCADE).
    sqlx::query("DELETE FROM subscriptions WHERE id = 2")
        .execute(&mut *conn)
        .await
        .unwrap();
    assert!(outbox.get(event.id).await.unwrap().is_none());
    assert_eq!(count(&schema, "SELECT count(*) FROM outbox").await, 0);
    drop(conn);
    schema.drop_schema().await;
}

#[tokio::test]
async fn keys_are_unique_across_tenants_unless_declared_per_tenant() {
    let (schema, outbox) = tenant_setup(IdempotencyScope::Table).await;
    let mut conn = schema.pool.acquire().await.unwrap();
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
    drop(conn);
    schema.drop_schema().await;

    let (schema, outbox) = tenant_setup(IdempotencyScope::PerTenant).await;
    let mut conn = schema.pool.acquire().await.unwrap();
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
            ],
        )
        .await
        .unwrap();
    assert_eq!(again[0].id, b.id);
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
    drop(conn);
    schema.drop_schema().await;

    let table = OutboxTable::parse("outbox")
        .unwrap()
        .with_idempotency_scope(IdempotencyScope::None)
        .unwrap();
    let (schema, outbox) = setup(table).await;
    let mut conn = schema.pool.acquire().await.unwrap();
    let e = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("t", json!(1)).idempotency_key("k"),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Configuration(_)), "{e}");
    outbox
        .enqueue(&mut conn, OutboxMessage::new("t", json!(1)))
        .await
        .unwrap();
    drop(conn);
    schema.drop_schema().await;
}

#[tokio::test]
async fn signals_are_coalesced_and_sent_only_after_commit() {
    let (schema, outbox) = setup(OutboxTable::parse("outbox").unwrap()).await;
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
    assert!(tx.pending_topics().is_empty());
    tx.commit().await.unwrap();
    let got = signals.recv().await.unwrap().unwrap();
    assert_eq!(
        &*got,
        ["e".to_owned()],
        "no signal for d (rolled back) nor f (key stored)"
    );
    schema.drop_schema().await;
}

#[tokio::test]
async fn a_relay_wakes_on_commit_not_on_the_poll_interval() {
    let (schema, outbox) = setup(OutboxTable::parse("outbox").unwrap()).await;
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
    let mut plain = schema.pool.begin().await.unwrap();
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
    tx.enqueue(OutboxMessage::new("mine.signalled", json!(2)))
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
    schema.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crossing_enqueue_many_calls_deadlock_into_a_retryable_error() {
    let (schema, outbox) = setup(OutboxTable::parse("outbox").unwrap()).await;
    let mut tx1 = schema.pool.begin().await.unwrap();
    let mut tx2 = schema.pool.begin().await.unwrap();
    outbox
        .enqueue_many(
            &mut *tx1,
            vec![OutboxMessage::new("t", json!(1)).idempotency_key("A")],
        )
        .await
        .unwrap();
    outbox
        .enqueue_many(
            &mut *tx2,
            vec![OutboxMessage::new("t", json!(2)).idempotency_key("B")],
        )
        .await
        .unwrap();
    let o1 = outbox.clone();
    let first = tokio::spawn(async move {
        let r = o1
            .enqueue_many(
                &mut *tx1,
                vec![OutboxMessage::new("t", json!(3)).idempotency_key("B")],
            )
            .await;
        // The victim rolls back at once, as a caller would, so the other transaction goes on.
        if r.is_err() {
            tx1.rollback().await.unwrap();
        } else {
            tx1.commit().await.unwrap();
        }
        r
    });
    let o2 = outbox.clone();
    let second = tokio::spawn(async move {
        let r = o2
            .enqueue_many(
                &mut *tx2,
                vec![OutboxMessage::new("t", json!(4)).idempotency_key("A")],
            )
            .await;
        // The victim rolls back at once, as a caller would, so the other transaction goes on.
        if r.is_err() {
            tx2.rollback().await.unwrap();
        } else {
            tx2.commit().await.unwrap();
        }
        r
    });
    let r1 = first.await.unwrap();
    let r2 = second.await.unwrap();
    let errors: Vec<&Error> = [&r1, &r2]
        .into_iter()
        .filter_map(|r| r.as_ref().err())
        .collect();
    assert_eq!(
        errors.len(),
        1,
        "exactly one side is chosen as the deadlock victim: {r1:?} {r2:?}"
    );
    assert!(
        matches!(errors[0], Error::TransactionRetry { .. }),
        "{}",
        errors[0]
    );
    schema.drop_schema().await;
}
