//! Reliability on PostgreSQL: several relays on one table under row-lock contention, lost
//! database connections. Each test is bounded in time. (A poison event holding back only its
//! key is in the shared suite: `conformance::ordering`.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hare_outbox_core::{
    FnDelivery, Outbox, OutboxEvent, OutboxMessage, OutboxRelay, OutboxTable, RelayConfig,
};
use hare_outbox_postgres::PgBackend;
use hare_outbox_testkit::pg::TestSchema;
use hare_outbox_testkit::wait_for;
use serde_json::json;
use sqlx::postgres::PgPoolOptions;

fn fast() -> RelayConfig {
    RelayConfig::default()
        .with_poll_interval(Duration::from_millis(50))
        .with_retry_base(Duration::from_millis(50))
}

/// 4 relays, 100,000 events over 1,000 keys, with ordered runs: every event delivered once,
/// per-key order kept, every relay takes a share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_relays_deliver_100k_events_once_each_in_key_order() {
    four_relays_drain(100_000, 1_000).await;
}

/// 4 relays, 100,000 events of ONE key (a hot document), with ordered runs: the relays take the
/// key's runs in turn, every event delivered once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_relays_deliver_100k_events_of_one_key_once_each_in_order() {
    four_relays_drain(100_000, 1).await;
}

/// `events` events over `keys` keys drained by 4 relays; checks once-each, order, nothing left.
async fn four_relays_drain(events: i64, keys: i64) {
    let schema = TestSchema::new(12).await;
    let outbox = Outbox::new(
        PgBackend::new(schema.pool.clone()),
        OutboxTable::parse("outbox").unwrap(),
    );
    outbox.migrate().await.unwrap();
    // The backlog is written with one INSERT … SELECT (setup); the relays see ordinary rows.
    sqlx::query(
        "INSERT INTO outbox (id, topic, payload, ordering_key) \
         SELECT gen_random_uuid(), 't', jsonb_build_object('n', g), 'k' || (g % $2) FROM generate_series(1, $1) g",
    )
    .bind(events)
    .bind(keys)
    .execute(&schema.pool)
    .await
    .unwrap();

    // Per key: the last sequence seen; a lower or equal one is an order break or a duplicate.
    let last: Arc<Mutex<HashMap<String, i64>>> = Arc::default();
    let broken = Arc::new(AtomicU64::new(0));
    let delivered = Arc::new(AtomicU64::new(0));
    let mut relays = Vec::new();
    for r in 0..4 {
        let (last, broken, delivered) = (last.clone(), broken.clone(), delivered.clone());
        let relay = OutboxRelay::new(
            outbox.clone(),
            FnDelivery::new(move |e: OutboxEvent| {
                let (last, broken, delivered) = (last.clone(), broken.clone(), delivered.clone());
                async move {
                    let key = e.ordering_key.clone().unwrap_or_default();
                    let previous = last.lock().unwrap().insert(key, e.sequence).unwrap_or(0);
                    if e.sequence <= previous {
                        broken.fetch_add(1, Ordering::Relaxed);
                    }
                    delivered.fetch_add(1, Ordering::Relaxed);
                    Ok(())
                }
            }),
            fast().with_batch_size(100).with_name(format!("relay-{r}")),
        )
        .unwrap();
        relay.start().unwrap();
        relays.push(relay);
    }
    wait_for("100,000 deliveries", Duration::from_secs(600), || async {
        (delivered.load(Ordering::Relaxed) >= events as u64).then_some(())
    })
    .await;
    for relay in &relays {
        relay.stop().await.unwrap();
    }
    assert_eq!(
        delivered.load(Ordering::Relaxed),
        events as u64,
        "none delivered twice"
    );
    assert_eq!(
        broken.load(Ordering::Relaxed),
        0,
        "per-key order never broken"
    );
    let pending: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox WHERE published_at IS NULL")
        .fetch_one(&schema.pool)
        .await
        .unwrap();
    assert_eq!(pending, 0);
    let shares: Vec<u64> = relays.iter().map(|r| r.stats().delivered).collect();
    // With many keys every relay finds free heads; one key may be held by few relays at a time.
    if keys > 1 {
        assert!(
            shares.iter().all(|&n| n > 0),
            "every relay took a share: {shares:?}"
        );
    }
    schema.drop_schema().await;
}

/// The relay's database connections are killed mid-run: it reconnects and delivers everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_survives_its_connections_being_terminated() {
    let schema = TestSchema::new(4).await;
    let outbox = Outbox::new(
        PgBackend::new(schema.pool.clone()),
        OutboxTable::parse("outbox").unwrap(),
    );
    outbox.migrate().await.unwrap();
    // The relay gets its own pool, recognisable by application_name.
    let app = format!("relay_{}", schema.name);
    let relay_pool = PgPoolOptions::new()
        .max_connections(3)
        .connect_with(
            hare_outbox_testkit::pg::url()
                .parse::<sqlx::postgres::PgConnectOptions>()
                .unwrap()
                .application_name(&app)
                .options([("search_path", schema.name.as_str())]),
        )
        .await
        .unwrap();
    let relay_outbox = Outbox::new(
        PgBackend::new(relay_pool.clone()),
        OutboxTable::parse("outbox").unwrap(),
    );
    let seen = Arc::new(Mutex::new(Vec::<i64>::new()));
    let sink = seen.clone();
    let relay = OutboxRelay::new(
        relay_outbox,
        FnDelivery::new(move |e: OutboxEvent| {
            let sink = sink.clone();
            async move {
                sink.lock()
                    .unwrap()
                    .push(e.payload["n"].as_i64().unwrap_or(-1));
                Ok(())
            }
        }),
        fast().with_batch_size(5),
    )
    .unwrap();
    relay.start().unwrap();
    let enqueue = |from: i64, to: i64| {
        let (outbox, pool) = (outbox.clone(), schema.pool.clone());
        async move {
            let mut tx = pool.begin().await.unwrap();
            for n in from..to {
                outbox
                    .enqueue(
                        &mut *tx,
                        OutboxMessage::new("t", json!({"n": n})).ordering_key("one"),
                    )
                    .await
                    .unwrap();
            }
            tx.commit().await.unwrap();
        }
    };
    enqueue(0, 50).await;
    wait_for("first deliveries", Duration::from_secs(20), || async {
        (seen.lock().unwrap().len() >= 10).then_some(())
    })
    .await;
    for _ in 0..3 {
        // The relay reconnects on its next poll; kill once it has connected again (it may have
        // drained the backlog and be idle between polls).
        let killed = wait_for(
            "relay connections to kill",
            Duration::from_secs(20),
            || async {
                let killed: Vec<bool> = sqlx::query_scalar(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE application_name = $1",
                )
                .bind(&app)
                .fetch_all(&schema.pool)
                .await
                .unwrap();
                (!killed.is_empty()).then_some(killed)
            },
        )
        .await;
        assert!(
            killed.iter().any(|&k| k),
            "a relay connection was terminated"
        );
        let before = seen.lock().unwrap().len();
        wait_for(
            "deliveries after the kill",
            Duration::from_secs(20),
            || async {
                (seen.lock().unwrap().len() > before || seen.lock().unwrap().len() >= 50)
                    .then_some(())
            },
        )
        .await;
    }
    enqueue(50, 100).await;
    wait_for("every event delivered", Duration::from_secs(30), || async {
        let pending: i64 =
            sqlx::query_scalar("SELECT count(*) FROM outbox WHERE published_at IS NULL")
                .fetch_one(&schema.pool)
                .await
                .unwrap();
        (pending == 0).then_some(())
    })
    .await;
    relay.stop().await.unwrap();
    let seen = seen.lock().unwrap().clone();
    // At least once, in order: duplicates may only repeat the batch in flight when a mark was lost.
    let mut distinct = seen.clone();
    distinct.dedup();
    assert_eq!(
        distinct,
        (0..100).collect::<Vec<_>>(),
        "all 100 events, in key order"
    );
    relay_pool.close().await;
    schema.drop_schema().await;
}
