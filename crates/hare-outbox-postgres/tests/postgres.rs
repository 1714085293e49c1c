//! The PostgreSQL backend against a real server: each test in a schema of its own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hare_outbox_core::backend::{
    EventFailure, EventLeaseParams, EventMarkDeliveredParams, EventMarkFailedParams,
};
use hare_outbox_core::{
    Backend, DeliveryError, Error, FnDelivery, Outbox, OutboxEvent, OutboxMessage, OutboxRelay,
    OutboxTable, RelayConfig,
};
use hare_outbox_postgres::PgBackend;
use hare_outbox_testkit::pg::TestSchema;
use hare_outbox_testkit::wait_for;
use serde_json::json;

async fn setup(table: &str) -> (TestSchema, Outbox<PgBackend>) {
    let schema = TestSchema::new(8).await;
    let outbox = Outbox::new(
        PgBackend::new(schema.pool.clone()),
        OutboxTable::parse(table).unwrap(),
    );
    outbox.migrate().await.unwrap();
    (schema, outbox)
}

async fn count(schema: &TestSchema, sql: &str) -> i64 {
    sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_one(&schema.pool)
        .await
        .unwrap()
}

fn fast() -> RelayConfig {
    RelayConfig::default()
        .with_poll_interval(Duration::from_millis(20))
        .with_retry_base(Duration::from_millis(100))
        .with_retry_max(Duration::from_secs(2))
}

#[tokio::test]
async fn migrate_is_idempotent_and_safe_concurrently() {
    let schema = TestSchema::new(4).await;
    let outbox = Outbox::new(
        PgBackend::new(schema.pool.clone()),
        OutboxTable::parse(&format!("{}_x.events", schema.name)).unwrap(),
    );
    let (a, b) = tokio::join!(outbox.migrate(), outbox.migrate());
    a.unwrap();
    b.unwrap();
    outbox.migrate().await.unwrap();
    let columns: Vec<String> = sqlx::query_scalar(
        "SELECT column_name::text FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'events' ORDER BY ordinal_position",
    )
    .bind(format!("{}_x", schema.name))
    .fetch_all(&schema.pool)
    .await
    .unwrap();
    assert_eq!(
        columns,
        [
            "sequence",
            "id",
            "topic",
            "payload",
            "headers",
            "ordering_key",
            "idempotency_key",
            "created_at",
            "attempts",
            "last_error",
            "next_attempt_at",
            "lease_until",
            "leased_by",
            "published_at",
            "dead_lettered_at"
        ]
    );
    let indexes = count(
        &schema,
        &format!(
            "SELECT count(*) FROM pg_indexes WHERE schemaname = '{}_x' AND tablename = 'events'",
            schema.name
        ),
    )
    .await;
    assert_eq!(
        indexes, 8,
        "primary key, id, idempotency_key and five relay indexes"
    );
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA \"{}_x\" CASCADE",
        schema.name
    )))
    .execute(&schema.pool)
    .await
    .unwrap();
    schema.drop_schema().await;
}

#[tokio::test]
async fn enqueue_commits_and_rolls_back_with_the_callers_transaction() {
    let (schema, outbox) = setup("outbox").await;
    sqlx::query("CREATE TABLE orders (id int PRIMARY KEY, status text)")
        .execute(&schema.pool)
        .await
        .unwrap();

    let mut tx = schema.pool.begin().await.unwrap();
    sqlx::query("INSERT INTO orders VALUES (1, 'new')")
        .execute(&mut *tx)
        .await
        .unwrap();
    let kept = outbox
        .enqueue(
            &mut *tx,
            OutboxMessage::new("orders.created", json!({"id": 1, "total": "12.50"}))
                .ordering_key("order:1")
                .header("author", "ann"),
        )
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(kept.id.get_version_num(), 7);
    assert_eq!(kept.payload, json!({"id": 1, "total": "12.50"}));
    assert_eq!(kept.headers.get("author"), Some(&json!("ann")));

    let mut tx = schema.pool.begin().await.unwrap();
    sqlx::query("INSERT INTO orders VALUES (2, 'new')")
        .execute(&mut *tx)
        .await
        .unwrap();
    let gone = outbox
        .enqueue(
            &mut *tx,
            OutboxMessage::new("orders.created", json!({"id": 2})),
        )
        .await
        .unwrap();
    tx.rollback().await.unwrap();

    assert!(outbox.get(kept.id).await.unwrap().is_some());
    assert!(outbox.get(gone.id).await.unwrap().is_none());
    assert_eq!(count(&schema, "SELECT count(*) FROM outbox").await, 1);

    // A rolled-back event is never delivered.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let relay = OutboxRelay::new(
        outbox.clone(),
        FnDelivery::new(move |e: OutboxEvent| {
            let sink = sink.clone();
            async move {
                sink.lock().unwrap().push(e.id);
                Ok(())
            }
        }),
        fast(),
    )
    .unwrap();
    assert_eq!(relay.poll_once().await.unwrap().delivered, 1);
    assert_eq!(relay.poll_once().await.unwrap().leased, 0);
    assert_eq!(*seen.lock().unwrap(), vec![kept.id]);
    schema.drop_schema().await;
}

#[tokio::test]
async fn invalid_messages_write_nothing() {
    let (schema, outbox) = setup("outbox").await;
    let mut conn = schema.pool.acquire().await.unwrap();
    let bad = [
        OutboxMessage::new("", json!({})),
        OutboxMessage::new("t".repeat(256), json!({})),
        OutboxMessage::new("t", json!({})).ordering_key(""),
        OutboxMessage::new("t", json!({})).header("", 1),
        OutboxMessage::new("t", vec![f64::NAN]),
    ];
    for message in bad {
        let e = outbox.enqueue(&mut conn, message).await.unwrap_err();
        assert!(matches!(e, Error::Validation { .. }), "{e}");
    }
    assert_eq!(count(&schema, "SELECT count(*) FROM outbox").await, 0);
    drop(conn);
    schema.drop_schema().await;
}

#[tokio::test]
async fn duplicate_idempotency_key_returns_the_stored_event() {
    let (schema, outbox) = setup("outbox").await;
    let mut conn = schema.pool.acquire().await.unwrap();
    let first = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("a", json!({"v": 1})).idempotency_key("k1"),
        )
        .await
        .unwrap();
    let again = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("b", json!({"v": 2})).idempotency_key("k1"),
        )
        .await
        .unwrap();
    assert_eq!(again, first, "the stored event comes back unchanged");
    assert_eq!(count(&schema, "SELECT count(*) FROM outbox").await, 1);

    // Any other unique violation is an integrity error.
    let e = outbox
        .enqueue(&mut conn, OutboxMessage::new("c", json!({})).id(first.id))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Integrity { .. }), "{e}");
    drop(conn);
    schema.drop_schema().await;
}

/// Enqueues `key` in a second transaction on its own task and returns once that insert waits for
/// the first transaction's uncommitted key; the task commits and yields the event it got.
async fn second_writer_blocked_on(
    schema: &TestSchema,
    outbox: &Outbox<PgBackend>,
    key: &'static str,
) -> tokio::task::JoinHandle<OutboxEvent> {
    let (outbox, pool) = (outbox.clone(), schema.pool.clone());
    let (pid_tx, pid_rx) = tokio::sync::oneshot::channel::<i32>();
    let task = tokio::spawn(async move {
        let mut tx2 = pool.begin().await.unwrap();
        let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut *tx2)
            .await
            .unwrap();
        pid_tx.send(pid).unwrap();
        let e = outbox
            .enqueue(
                &mut *tx2,
                OutboxMessage::new("b", json!(2)).idempotency_key(key),
            )
            .await
            .unwrap();
        tx2.commit().await.unwrap();
        e
    });
    hare_outbox_testkit::pg::wait_until_blocked(&schema.pool, pid_rx.await.unwrap()).await;
    task
}

#[tokio::test]
async fn concurrent_transactions_with_one_key_wait_for_the_first() {
    let (schema, outbox) = setup("outbox").await;
    // The second waits and receives the first's event.
    let mut tx1 = schema.pool.begin().await.unwrap();
    let first = outbox
        .enqueue(
            &mut *tx1,
            OutboxMessage::new("a", json!(1)).idempotency_key("k"),
        )
        .await
        .unwrap();
    let second = second_writer_blocked_on(&schema, &outbox, "k").await;
    tx1.commit().await.unwrap();
    assert_eq!(second.await.unwrap(), first);

    // If the first rolls back, the second writes its own.
    let mut tx1 = schema.pool.begin().await.unwrap();
    outbox
        .enqueue(
            &mut *tx1,
            OutboxMessage::new("a", json!(1)).idempotency_key("k2"),
        )
        .await
        .unwrap();
    let second = second_writer_blocked_on(&schema, &outbox, "k2").await;
    tx1.rollback().await.unwrap();
    let own = second.await.unwrap();
    assert_eq!(own.topic, "b");
    assert_eq!(
        count(
            &schema,
            "SELECT count(*) FROM outbox WHERE idempotency_key = 'k2'"
        )
        .await,
        1
    );
    schema.drop_schema().await;
}

#[tokio::test]
async fn two_outbox_tables_in_one_database_do_not_interfere() {
    let (schema, a) = setup("outbox_a").await;
    let b = Outbox::new(
        a.backend().clone(),
        OutboxTable::parse(&format!("{}.outbox_b", schema.name)).unwrap(),
    );
    b.migrate().await.unwrap();
    let mut conn = schema.pool.acquire().await.unwrap();
    a.enqueue(
        &mut conn,
        OutboxMessage::new("x", json!("a")).idempotency_key("same"),
    )
    .await
    .unwrap();
    let in_b = b
        .enqueue(
            &mut conn,
            OutboxMessage::new("x", json!("b")).idempotency_key("same"),
        )
        .await
        .unwrap();
    assert_eq!(in_b.payload, json!("b"), "idempotency keys are per table");
    drop(conn);
    let relay = OutboxRelay::new(
        a.clone(),
        FnDelivery::new(|_e: OutboxEvent| async { Ok(()) }),
        fast(),
    )
    .unwrap();
    assert_eq!(relay.poll_once().await.unwrap().delivered, 1);
    assert_eq!(
        count(
            &schema,
            "SELECT count(*) FROM outbox_b WHERE published_at IS NULL"
        )
        .await,
        1
    );
    schema.drop_schema().await;
}

#[tokio::test]
async fn two_relays_share_a_table_and_keep_per_key_order() {
    let (schema, outbox) = setup("outbox").await;
    const KEYS: usize = 12;
    const EVENTS: usize = 600;
    // Written in several transactions, keys interleaved.
    for chunk in 0..6 {
        let mut tx = schema.pool.begin().await.unwrap();
        for i in 0..EVENTS / 6 {
            let n = chunk * (EVENTS / 6) + i;
            outbox
                .enqueue(
                    &mut *tx,
                    OutboxMessage::new("t", json!({"n": n})).ordering_key(format!("k{}", n % KEYS)),
                )
                .await
                .unwrap();
        }
        tx.commit().await.unwrap();
    }
    type Log = Arc<Mutex<Vec<(String, i64, String)>>>;
    let log: Log = Arc::new(Mutex::new(Vec::new()));
    // Deliveries wait until both relays hold leases, so neither can drain the table alone
    // before the other's first poll, however the two are scheduled.
    let (open, gate) = tokio::sync::watch::channel(false);
    let relay = |name: &str| {
        let log = log.clone();
        let name = name.to_owned();
        let label = name.clone();
        let gate = gate.clone();
        OutboxRelay::new(
            outbox.clone(),
            FnDelivery::new(move |e: OutboxEvent| {
                let log = log.clone();
                let label = label.clone();
                let mut gate = gate.clone();
                async move {
                    let _ = gate.wait_for(|open| *open).await;
                    tokio::task::yield_now().await;
                    log.lock().unwrap().push((
                        e.ordering_key.unwrap_or_default(),
                        e.sequence,
                        label,
                    ));
                    Ok(())
                }
            }),
            fast().with_batch_size(7).with_name(name),
        )
        .unwrap()
    };
    let (r1, r2) = (relay("relay-1"), relay("relay-2"));
    r1.start().unwrap();
    r2.start().unwrap();
    let holders = format!(
        "SELECT count(DISTINCT leased_by) FROM {} WHERE lease_until > now()",
        outbox.table()
    );
    wait_for(
        "both relays hold leases",
        Duration::from_secs(60),
        || async {
            let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(holders.clone()))
                .fetch_one(&schema.pool)
                .await
                .ok()?;
            (n >= 2).then_some(())
        },
    )
    .await;
    open.send_replace(true);
    wait_for("every event delivered", Duration::from_secs(60), || async {
        (log.lock().unwrap().len() >= EVENTS).then_some(())
    })
    .await;
    r1.stop().await.unwrap();
    r2.stop().await.unwrap();

    let log = log.lock().unwrap().clone();
    assert_eq!(
        log.len(),
        EVENTS,
        "no event delivered twice while no relay died"
    );
    let mut last: HashMap<String, i64> = HashMap::new();
    for (key, sequence, _) in &log {
        let previous = last.insert(key.clone(), *sequence).unwrap_or(0);
        assert!(
            *sequence > previous,
            "key {key}: {sequence} delivered after {previous}"
        );
    }
    assert!(
        log.iter().any(|l| l.2 == "relay-1") && log.iter().any(|l| l.2 == "relay-2"),
        "both relays delivered"
    );
    assert_eq!(
        count(
            &schema,
            "SELECT count(*) FROM outbox WHERE published_at IS NULL"
        )
        .await,
        0
    );
    schema.drop_schema().await;
}

#[tokio::test]
async fn failures_back_off_then_dead_letter_and_hold_back_only_their_key() {
    let (schema, outbox) = setup("outbox").await;
    let mut conn = schema.pool.acquire().await.unwrap();
    let poison = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("poison", json!(1)).ordering_key("K"),
        )
        .await
        .unwrap();
    let after = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("ok", json!(2)).ordering_key("K"),
        )
        .await
        .unwrap();
    let other = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("ok", json!(3)).ordering_key("L"),
        )
        .await
        .unwrap();
    drop(conn);
    let tries = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let t = tries.clone();
    let relay = OutboxRelay::new(
        outbox.clone(),
        FnDelivery::new(move |e: OutboxEvent| {
            let t = t.clone();
            async move {
                if e.topic == "poison" {
                    t.lock().unwrap().push(Instant::now());
                    return Err(DeliveryError::new("subscriber answered 500"));
                }
                Ok(())
            }
        }),
        fast().with_max_delivery_attempts(4),
    )
    .unwrap();
    relay.start().unwrap();
    let dead = wait_for(
        "the poison event dead-lettered",
        Duration::from_secs(20),
        || async {
            outbox
                .get(poison.id)
                .await
                .unwrap()
                .filter(|e| e.dead_lettered_at.is_some())
        },
    )
    .await;
    assert_eq!(dead.attempts, 4);
    assert_eq!(dead.last_error.as_deref(), Some("subscriber answered 500"));
    assert!(
        outbox
            .get(other.id)
            .await
            .unwrap()
            .unwrap()
            .published_at
            .is_some(),
        "other keys flow"
    );
    // Give the relay a few more polls: the dead event still holds back its key.
    let polls = relay.stats().polls;
    wait_for("more polls", Duration::from_secs(5), || async {
        (relay.stats().polls > polls + 3).then_some(())
    })
    .await;
    assert!(
        outbox
            .get(after.id)
            .await
            .unwrap()
            .unwrap()
            .published_at
            .is_none()
    );
    relay.stop().await.unwrap();

    let times = tries.lock().unwrap().clone();
    assert_eq!(times.len(), 4);
    let gaps: Vec<f64> = times
        .windows(2)
        .map(|w| (w[1] - w[0]).as_secs_f64())
        .collect();
    // 0.1 s, 0.2 s, 0.4 s, each ±10%, plus up to one poll interval.
    assert!(
        gaps[0] >= 0.09 && gaps[1] >= 0.18 && gaps[2] >= 0.36,
        "{gaps:?}"
    );
    assert!(
        gaps[1] > gaps[0] && gaps[2] > gaps[1],
        "delays grow: {gaps:?}"
    );
    assert_eq!(relay.stats().dead_lettered, 1);
    assert_eq!(relay.stats().failed, 3);
    schema.drop_schema().await;
}

#[tokio::test]
async fn an_expired_lease_is_leased_again() {
    let (schema, outbox) = setup("outbox").await;
    let mut conn = schema.pool.acquire().await.unwrap();
    let event = outbox
        .enqueue(&mut conn, OutboxMessage::new("t", json!(1)))
        .await
        .unwrap();
    drop(conn);
    // A relay leases the event and dies before marking it.
    let leased = outbox
        .backend()
        .event_lease(
            outbox.table(),
            &EventLeaseParams::new("dead-relay".into(), 10, Duration::from_millis(800)),
        )
        .await
        .unwrap();
    assert_eq!(leased.events.len(), 1);
    let relay = OutboxRelay::new(
        outbox.clone(),
        FnDelivery::new(|_e: OutboxEvent| async { Ok(()) }),
        fast(),
    )
    .unwrap();
    assert_eq!(
        relay.poll_once().await.unwrap().leased,
        0,
        "a live lease is respected"
    );
    wait_for(
        "the lease to expire and the event to be delivered",
        Duration::from_secs(10),
        || async { (relay.poll_once().await.unwrap().delivered == 1).then_some(()) },
    )
    .await;
    assert!(
        outbox
            .get(event.id)
            .await
            .unwrap()
            .unwrap()
            .published_at
            .is_some()
    );

    // The dead relay's late failure mark changes nothing; a late delivered mark keeps the first time.
    let first = outbox.get(event.id).await.unwrap().unwrap();
    let failure = EventFailure::retry(event.sequence, 1, "late".into(), Duration::ZERO);
    let changed = outbox
        .backend()
        .event_mark_failed(
            outbox.table(),
            &EventMarkFailedParams::new(vec![failure], "dead-relay".into()),
        )
        .await
        .unwrap();
    assert_eq!(changed, 0);
    let changed = outbox
        .backend()
        .event_mark_delivered(
            outbox.table(),
            &EventMarkDeliveredParams::new(vec![event.sequence]),
        )
        .await
        .unwrap();
    assert_eq!(changed, 0);
    assert_eq!(outbox.get(event.id).await.unwrap().unwrap(), first);
    schema.drop_schema().await;
}

#[tokio::test]
async fn a_long_delivery_keeps_its_lease() {
    let (schema, outbox) = setup("outbox").await;
    let mut conn = schema.pool.acquire().await.unwrap();
    outbox
        .enqueue(&mut conn, OutboxMessage::new("slow", json!(1)))
        .await
        .unwrap();
    drop(conn);
    let config = fast()
        .with_lease(Duration::from_secs(1))
        .with_delivery_timeout(Duration::from_millis(800));
    let calls = Arc::new(Mutex::new(0));
    let c = calls.clone();
    // The delivery takes three lease periods (its own timeout is bypassed by a batch override).
    struct Slow(Arc<Mutex<i32>>);
    #[async_trait::async_trait]
    impl hare_outbox_core::Delivery for Slow {
        async fn deliver(&self, _e: &OutboxEvent) -> Result<(), DeliveryError> {
            Ok(())
        }
        async fn deliver_batch(
            &self,
            events: &[OutboxEvent],
            _c: usize,
            _t: Duration,
        ) -> Vec<Result<(), DeliveryError>> {
            *self.0.lock().unwrap() += 1;
            tokio::time::sleep(Duration::from_millis(3000)).await;
            events.iter().map(|_| Ok(())).collect()
        }
    }
    let slow = OutboxRelay::new(outbox.clone(), Slow(c), config.clone().with_name("slow")).unwrap();
    let other = OutboxRelay::new(
        outbox.clone(),
        FnDelivery::new(|_e: OutboxEvent| async { Ok(()) }),
        config.with_name("other"),
    )
    .unwrap();
    let polls = async {
        let mut stolen = 0;
        for _ in 0..28 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            stolen += other.poll_once().await.unwrap().leased;
        }
        stolen
    };
    let (outcome, stolen) = tokio::join!(slow.poll_once(), polls);
    assert_eq!(outcome.unwrap().delivered, 1);
    assert_eq!(stolen, 0, "the extended lease kept the other relay away");
    assert_eq!(*calls.lock().unwrap(), 1);
    schema.drop_schema().await;
}
