//! Topic filters, dead-letter retry, clean-up, backlog and metrics on PostgreSQL.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hare_outbox_core::{
    DeliveryError, FnDelivery, Outbox, OutboxEvent, OutboxMessage, OutboxRelay, OutboxTable,
    RelayConfig,
};
use hare_outbox_postgres::PgBackend;
use hare_outbox_testkit::pg::TestSchema;
use hare_outbox_testkit::wait_for;
use serde_json::json;

async fn setup() -> (TestSchema, Outbox<PgBackend>) {
    let schema = TestSchema::new(8).await;
    let outbox = Outbox::new(
        PgBackend::new(schema.pool.clone()),
        OutboxTable::parse("outbox").unwrap(),
    );
    outbox.migrate().await.unwrap();
    (schema, outbox)
}

fn fast() -> RelayConfig {
    RelayConfig::default()
        .with_poll_interval(Duration::from_millis(20))
        .with_retry_base(Duration::from_millis(50))
}

type Seen = Arc<Mutex<Vec<String>>>;

fn recording(seen: &Seen, fail_topic: &'static str) -> impl hare_outbox_core::Delivery {
    let seen = seen.clone();
    FnDelivery::new(move |e: OutboxEvent| {
        let seen = seen.clone();
        async move {
            if e.topic == fail_topic {
                return Err(DeliveryError::new("refused"));
            }
            seen.lock().unwrap().push(e.topic);
            Ok(())
        }
    })
}

async fn enqueue_all(schema: &TestSchema, outbox: &Outbox<PgBackend>, topics: &[&str]) {
    let mut tx = schema.pool.begin().await.unwrap();
    for topic in topics {
        outbox
            .enqueue(&mut *tx, OutboxMessage::new(*topic, json!({})))
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
}

#[tokio::test]
async fn relays_on_disjoint_topics_share_one_table() {
    let (schema, outbox) = setup().await;
    enqueue_all(
        &schema,
        &outbox,
        &[
            "library.loan.created",
            "library_x",
            "taskiq",
            "billing.paid",
            "a%b.c",
        ],
    )
    .await;
    let (lib, rest) = (Seen::default(), Seen::default());
    let r1 = OutboxRelay::new(
        outbox.clone(),
        recording(&lib, ""),
        fast().with_topics(["library.*", "taskiq"]),
    )
    .unwrap();
    let r2 = OutboxRelay::new(
        outbox.clone(),
        recording(&rest, ""),
        fast().with_exclude_topics(["library.*", "taskiq"]),
    )
    .unwrap();
    assert_eq!(r1.backlog().await.unwrap().pending, 2);
    assert_eq!(r2.backlog().await.unwrap().pending, 3);
    r1.poll_once().await.unwrap();
    r2.poll_once().await.unwrap();
    let mut lib = lib.lock().unwrap().clone();
    lib.sort();
    let mut rest = rest.lock().unwrap().clone();
    rest.sort();
    assert_eq!(lib, ["library.loan.created", "taskiq"]);
    // `_` and `%` are literal: "library_x" is not under "library.*", "a%b.c" is an ordinary topic.
    assert_eq!(rest, ["a%b.c", "billing.paid", "library_x"]);
    schema.drop_schema().await;
}

#[tokio::test]
async fn retrying_a_dead_letter_releases_its_key() {
    let (schema, outbox) = setup().await;
    let mut conn = schema.pool.acquire().await.unwrap();
    let poison = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("poison", json!(1)).ordering_key("K"),
        )
        .await
        .unwrap();
    let next = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("ok", json!(2)).ordering_key("K"),
        )
        .await
        .unwrap();
    drop(conn);
    let seen = Seen::default();
    let failing = OutboxRelay::new(
        outbox.clone(),
        recording(&seen, "poison"),
        fast().with_max_delivery_attempts(1),
    )
    .unwrap();
    assert_eq!(failing.poll_once().await.unwrap().dead_lettered, 1);
    assert_eq!(
        failing.poll_once().await.unwrap().leased,
        0,
        "the dead letter holds back its key"
    );
    let backlog = failing.backlog().await.unwrap();
    assert_eq!((backlog.pending, backlog.dead_lettered), (1, 1));

    // Retry with a filter that does not match: nothing changes.
    assert_eq!(
        failing
            .retry_dead_lettered(&["billing.*"], &[])
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        failing.retry_dead_lettered(&[], &[next.id]).await.unwrap(),
        0
    );
    assert!(
        failing
            .retry_dead_lettered(&["bad*pattern"], &[])
            .await
            .is_err()
    );
    // The fixed subscriber takes the retried event, then the held-back one.
    let fixed = OutboxRelay::new(outbox.clone(), recording(&seen, ""), fast()).unwrap();
    assert_eq!(
        fixed
            .retry_dead_lettered(&["poison"], &[poison.id])
            .await
            .unwrap(),
        1
    );
    let retried = outbox.get(poison.id).await.unwrap().unwrap();
    assert_eq!((retried.attempts, retried.dead_lettered_at), (0, None));
    assert_eq!(
        retried.last_error.as_deref(),
        Some("refused"),
        "the last error is kept for the record"
    );
    // One poll takes the key's run in order: the retried head, then the event it held back.
    assert_eq!(fixed.poll_once().await.unwrap().delivered, 2);
    assert_eq!(*seen.lock().unwrap(), ["poison", "ok"]);
    schema.drop_schema().await;
}

#[tokio::test]
async fn cleanup_deletes_in_batches_without_blocking_writers() {
    let (schema, outbox) = setup().await;
    sqlx::query(
        "INSERT INTO outbox (id, topic, payload, published_at) \
         SELECT gen_random_uuid(), CASE WHEN g % 2 = 0 THEN 'a.x' ELSE 'b.x' END, '{}', now() - interval '10 days' \
         FROM generate_series(1, 20000) g",
    )
    .execute(&schema.pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO outbox (id, topic, payload, dead_lettered_at, attempts) \
         SELECT gen_random_uuid(), 'a.x', '{}', now() - interval '40 days', 5 FROM generate_series(1, 50) g",
    )
    .execute(&schema.pool)
    .await
    .unwrap();
    let relay = OutboxRelay::new(
        outbox.clone(),
        FnDelivery::new(|_e: OutboxEvent| async { Ok(()) }),
        fast().with_topics(["a.*"]).with_cleanup_batch_size(500),
    )
    .unwrap();
    // Writers keep enqueueing while the clean-up runs; none waits long.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (outbox, pool, stop) = (outbox.clone(), schema.pool.clone(), stop.clone());
        tokio::spawn(async move {
            let mut worst = Duration::ZERO;
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let start = Instant::now();
                let mut tx = pool.begin().await.unwrap();
                outbox
                    .enqueue(&mut *tx, OutboxMessage::new("a.x", json!(n)))
                    .await
                    .unwrap();
                tx.commit().await.unwrap();
                worst = worst.max(start.elapsed());
                n += 1;
            }
            (worst, n)
        })
    };
    let deleted = relay
        .cleanup_published(Duration::from_secs(7 * 86400))
        .await
        .unwrap();
    let dead = relay
        .cleanup_dead_lettered(Duration::from_secs(30 * 86400))
        .await
        .unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (worst, writes) = writer.await.unwrap();
    assert_eq!(deleted, 10_000, "only the relay's topics");
    assert_eq!(dead, 50);
    assert!(writes > 0);
    assert!(
        worst < Duration::from_millis(500),
        "a writer waited {worst:?}"
    );
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox WHERE topic = 'b.x'")
        .fetch_one(&schema.pool)
        .await
        .unwrap();
    assert_eq!(left, 10_000);
    // Nothing younger than the cut-off is deleted.
    assert_eq!(
        relay
            .cleanup_published(Duration::from_secs(7 * 86400))
            .await
            .unwrap(),
        0
    );
    schema.drop_schema().await;
}

#[tokio::test]
async fn backlog_reports_pending_oldest_age_and_dead_letters() {
    let (schema, outbox) = setup().await;
    sqlx::query(
        "INSERT INTO outbox (id, topic, payload, created_at) VALUES \
         (gen_random_uuid(), 't', '{}', now() - interval '90 seconds'), \
         (gen_random_uuid(), 't', '{}', now()), \
         (gen_random_uuid(), 'other', '{}', now() - interval '1 hour')",
    )
    .execute(&schema.pool)
    .await
    .unwrap();
    sqlx::query("INSERT INTO outbox (id, topic, payload, dead_lettered_at) VALUES (gen_random_uuid(), 't', '{}', now())")
        .execute(&schema.pool)
        .await
        .unwrap();
    let relay = OutboxRelay::new(
        outbox.clone(),
        FnDelivery::new(|_e: OutboxEvent| async { Ok(()) }),
        fast().with_topics(["t"]),
    )
    .unwrap();
    let backlog = relay.backlog().await.unwrap();
    assert_eq!(backlog.pending, 2);
    assert_eq!(backlog.dead_lettered, 1);
    assert!(
        (89.0..120.0).contains(&backlog.oldest_pending_age_seconds),
        "{backlog:?}"
    );
    schema.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_events_reach_observers_and_metrics() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    let (schema, outbox) = setup().await;
    enqueue_all(&schema, &outbox, &["ok", "ok", "poison"]).await;
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let observed = Arc::new(Mutex::new(Vec::new()));
    let o = observed.clone();
    let relay = OutboxRelay::new(
        outbox.clone(),
        recording(&Seen::default(), "poison"),
        fast().with_max_delivery_attempts(2),
    )
    .unwrap()
    .with_observer(move |e: &hare_outbox_core::RelayEvent| o.lock().unwrap().push(e.clone()));
    metrics::with_local_recorder(&recorder, || {
        tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(async {
                relay.poll_once().await.unwrap();
                wait_for("the retry", Duration::from_secs(5), || async {
                    (relay.poll_once().await.unwrap().dead_lettered == 1).then_some(())
                })
                .await;
                relay.backlog().await.unwrap();
            })
        })
    });
    let observed = observed.lock().unwrap().clone();
    let kinds: Vec<&str> = observed
        .iter()
        .map(|e| match e {
            hare_outbox_core::RelayEvent::Delivered { .. } => "delivered",
            hare_outbox_core::RelayEvent::DeliveryFailed { .. } => "failed",
            hare_outbox_core::RelayEvent::DeadLettered { .. } => "dead",
            _ => "other",
        })
        .collect();
    assert_eq!(kinds, ["delivered", "delivered", "failed", "dead"]);
    let snapshot = snapshotter.snapshot().into_vec();
    let value = |name: &str, topic: Option<&str>| {
        snapshot
            .iter()
            .find(|(key, _, _, _)| {
                key.key().name() == name
                    && topic.is_none_or(|t| {
                        key.key()
                            .labels()
                            .any(|l| l.key() == "topic" && l.value() == t)
                    })
            })
            .map(|(_, _, _, v)| v)
    };
    assert_eq!(
        value("hare_outbox_delivered_total", Some("ok")),
        Some(&DebugValue::Counter(2))
    );
    assert_eq!(
        value("hare_outbox_delivery_failed_total", Some("poison")),
        Some(&DebugValue::Counter(1))
    );
    assert_eq!(
        value("hare_outbox_dead_lettered_total", Some("poison")),
        Some(&DebugValue::Counter(1))
    );
    assert!(
        matches!(value("hare_outbox_delivery_delay_seconds", Some("ok")), Some(DebugValue::Histogram(h)) if h.len() == 2)
    );
    assert!(
        matches!(value("hare_outbox_backlog_dead_lettered", None), Some(DebugValue::Gauge(g)) if g.into_inner() == 1.0)
    );
    schema.drop_schema().await;
}

#[tokio::test]
async fn an_unrouted_event_is_retried_then_dead_lettered_never_published() {
    let (schema, outbox) = setup().await;
    enqueue_all(&schema, &outbox, &["library.loan.created", "billing.paid"]).await;
    let seen = Seen::default();
    let router = hare_outbox_core::TopicRouter::new()
        .route("library.*", recording(&seen, ""))
        .unwrap();
    let relay =
        OutboxRelay::new(outbox.clone(), router, fast().with_max_delivery_attempts(2)).unwrap();
    relay.poll_once().await.unwrap();
    wait_for(
        "the unrouted event dead-lettered",
        Duration::from_secs(10),
        || async {
            relay.poll_once().await.unwrap();
            (relay.backlog().await.unwrap().dead_lettered == 1).then_some(())
        },
    )
    .await;
    let (error, published): (Option<String>, Option<chrono::DateTime<chrono::Utc>>) =
        sqlx::query_as("SELECT last_error, published_at FROM outbox WHERE topic = 'billing.paid'")
            .fetch_one(&schema.pool)
            .await
            .unwrap();
    assert!(published.is_none());
    assert!(
        error
            .unwrap_or_default()
            .contains("no route takes topic \"billing.paid\"")
    );
    assert_eq!(*seen.lock().unwrap(), ["library.loan.created"]);
    schema.drop_schema().await;
}

#[tokio::test]
async fn an_unreadable_row_is_dead_lettered_and_the_others_are_delivered() {
    let (schema, outbox) = setup().await;
    enqueue_all(&schema, &outbox, &["before"]).await;
    // Valid JSON that PostgreSQL stores but the reader refuses: nested past its depth limit.
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    sqlx::query(
        "INSERT INTO outbox (id, topic, payload, ordering_key, created_at) \
         VALUES (gen_random_uuid(), 'deep', $1::jsonb, 'd', now())",
    )
    .bind(&deep)
    .execute(&schema.pool)
    .await
    .unwrap();
    enqueue_all(&schema, &outbox, &["after"]).await;
    let mut tx = schema.pool.begin().await.unwrap();
    outbox
        .enqueue(
            &mut *tx,
            OutboxMessage::new("behind", json!({})).ordering_key("d"),
        )
        .await
        .unwrap();
    tx.commit().await.unwrap();

    let seen = Seen::default();
    let relay = OutboxRelay::new(outbox.clone(), recording(&seen, ""), fast()).unwrap();
    let outcome = relay
        .poll_once()
        .await
        .expect("an unreadable row does not fail the poll");
    assert_eq!(outcome.delivered, 2, "{outcome:?}");
    let mut topics = seen.lock().unwrap().clone();
    topics.sort();
    assert_eq!(topics, ["after", "before"]);

    let (dead, unleased, error): (bool, bool, String) = sqlx::query_as(
        "SELECT dead_lettered_at IS NOT NULL, lease_until IS NULL, coalesce(last_error, '') \
         FROM outbox WHERE topic = 'deep'",
    )
    .fetch_one(&schema.pool)
    .await
    .unwrap();
    assert!(dead && unleased, "dead {dead}, unleased {unleased}");
    assert!(error.contains("cannot be read"), "{error}");
    // The dead row holds back its own key, as any dead letter does.
    relay.poll_once().await.unwrap();
    assert_eq!(seen.lock().unwrap().len(), 2);
}
