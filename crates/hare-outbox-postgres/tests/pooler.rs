//! Through a real PgBouncer in transaction pooling mode (started by `scripts/test.sh` on
//! 127.0.0.1:16432, or `HARE_OUTBOX_TEST_PGBOUNCER_URL`): enqueue, the relay's statements,
//! capture and the journal work with `PgBackend::with_transaction_pooler(true)`; LISTEN through
//! the pooler is found deaf by its probe, and a direct listen pool wakes relays at once.
//!
//! PgBouncer passes no `search_path` option, so every name here is schema-qualified.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hare_outbox_core::{
    ChangeCapture, EventQuery, FnDelivery, Journal, Outbox, OutboxEvent, OutboxMessage,
    OutboxRelay, OutboxTable, RelayConfig, Wakeup,
};
use hare_outbox_postgres::{ListenNotifyWakeup, PgBackend};
use hare_outbox_testkit::logs::Logs;
use hare_outbox_testkit::pg::TestSchema;
use hare_outbox_testkit::wait_for;
use serde_json::json;
use sqlx::postgres::{PgPool, PgPoolOptions};

/// The PgBouncer the tests share; set up by `scripts/test.sh`. A PgBouncer that cannot be
/// reached fails the tests: they are never skipped.
fn pgbouncer_url() -> String {
    std::env::var("HARE_OUTBOX_TEST_PGBOUNCER_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:16432/test".to_owned())
}

async fn pooled(max_connections: u32) -> PgPool {
    pooled_at(&pgbouncer_url(), max_connections).await
}

async fn pooled_at(url: &str, max_connections: u32) -> PgPool {
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(10))
        .connect(url)
        .await
        .unwrap_or_else(|e| panic!("PgBouncer at {url} (scripts/test.sh starts one): {e}"))
}

/// The pooler's `test_listen_deaf` database: the test database in a server pool of its own.
/// A LISTEN sent through a transaction pooler stays registered on whichever server connection
/// ran it, and that connection later hands notifications to other clients, which sqlx refuses
/// mid-statement (`unexpected message: NotificationResponse`); the test that LISTENs through
/// the pooler on purpose does it in this pool, away from the other tests' clients.
fn deaf_listen_url() -> String {
    let url = pgbouncer_url();
    match url.rsplit_once('/') {
        Some((server, _)) => format!("{server}/test_listen_deaf"),
        None => url,
    }
}

/// An outbox in the test's schema, reached through the pooler.
async fn outbox_through_pooler(schema: &TestSchema, pool: PgPool) -> Outbox<PgBackend> {
    let table = OutboxTable::parse(&format!("{}.outbox", schema.name)).unwrap();
    let outbox = Outbox::new(PgBackend::new(pool).with_transaction_pooler(true), table);
    outbox.migrate().await.unwrap();
    outbox
}

/// 10,000 events over 100 keys written by four concurrent writers and drained by two relays,
/// every statement through PgBouncer: each event delivered once, per-key order kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_relays_through_pgbouncer_deliver_10k_events_over_100_keys_once_each_in_order() {
    const EVENTS: u64 = 10_000;
    let schema = TestSchema::new(2).await;
    let outbox = outbox_through_pooler(&schema, pooled(16).await).await;

    let last: Arc<Mutex<HashMap<String, i64>>> = Arc::default();
    let broken = Arc::new(AtomicU64::new(0));
    let delivered = Arc::new(AtomicU64::new(0));
    let mut relays = Vec::new();
    for r in 0..2 {
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
            RelayConfig::default()
                .with_poll_interval(Duration::from_millis(20))
                .with_batch_size(100)
                .with_name(format!("pooled-{r}")),
        )
        .unwrap();
        relay.start().unwrap();
        relays.push(relay);
    }

    // Four writers, transactions of 50 events, each writer with 25 keys of its own (keys shared
    // by concurrent writers commit out of sequence order, which is another matter).
    let mut writers = Vec::new();
    for w in 0..4u64 {
        let outbox = outbox.clone();
        writers.push(tokio::spawn(async move {
            for t in 0..(EVENTS / 4 / 50) {
                let mut tx = outbox.begin().await.unwrap();
                for i in 0..50u64 {
                    let n = (w * EVENTS / 4) + t * 50 + i;
                    tx.enqueue(
                        OutboxMessage::new("pooled.t", json!({"n": n}))
                            .ordering_key(format!("k{}", w * 25 + n % 25)),
                    )
                    .await
                    .unwrap();
                }
                tx.commit().await.unwrap();
            }
        }));
    }
    for writer in writers {
        writer.await.unwrap();
    }
    wait_for("10,000 deliveries", Duration::from_secs(300), || async {
        (delivered.load(Ordering::Relaxed) >= EVENTS).then_some(())
    })
    .await;
    for relay in &relays {
        relay.stop().await.unwrap();
    }
    assert_eq!(delivered.load(Ordering::Relaxed), EVENTS, "none twice");
    assert_eq!(broken.load(Ordering::Relaxed), 0, "per-key order kept");
    // The journal reads through the pooler too.
    let journal = Journal::new(outbox.backend().clone(), outbox.table().clone());
    let backlog = journal.backlog(&[]).await.unwrap();
    assert_eq!((backlog.pending, backlog.dead_lettered), (0, 0));
    let page = journal.list(&EventQuery::new()).await.unwrap();
    assert!(!page.events.is_empty());
    assert!(page.events.iter().all(|e| e.published_at.is_some()));
    schema.drop_schema().await;
}

/// A capture installed through the pooler writes an event for a raw SQL update sent through the
/// pooler; the relay delivers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capture_through_pgbouncer_records_raw_sql() {
    let schema = TestSchema::new(2).await;
    let pool = pooled(4).await;
    let outbox = outbox_through_pooler(&schema, pool.clone()).await;
    let items = format!("\"{}\".items", schema.name);
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE {items} (id int PRIMARY KEY, qty int NOT NULL); INSERT INTO {items} VALUES (1, 0);"
    )))
    .execute(&pool)
    .await
    .unwrap();
    ChangeCapture::new("items")
        .with_schema(&schema.name)
        .with_label("shop.Item")
        .install(&outbox)
        .await
        .unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "UPDATE {items} SET qty = 5 WHERE id = 1"
    )))
    .execute(&pool)
    .await
    .unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let relay = OutboxRelay::new(
        outbox.clone(),
        FnDelivery::new(move |e: OutboxEvent| {
            let sink = sink.clone();
            async move {
                sink.lock().unwrap().push(e);
                Ok(())
            }
        }),
        RelayConfig::default().with_poll_interval(Duration::from_millis(20)),
    )
    .unwrap();
    relay.start().unwrap();
    wait_for("the captured update", Duration::from_secs(10), || async {
        (!seen.lock().unwrap().is_empty()).then_some(())
    })
    .await;
    relay.stop().await.unwrap();
    let event = seen.lock().unwrap()[0].clone();
    assert_eq!(event.payload["operation"], "updated", "{}", event.payload);
    assert_eq!(event.payload["model"], "shop.Item", "{}", event.payload);
    schema.drop_schema().await;
}

/// LISTEN through the pooler never hears its own probe: the attempt fails with a WARN that
/// names the pooler and the fix, and the relay delivers by polling. On a current-thread runtime,
/// so the listener task logs into the captured subscriber.
#[tokio::test]
async fn listen_through_pgbouncer_is_found_deaf_and_the_relay_polls() {
    let (logs, _guard) = Logs::capture();
    let schema = TestSchema::new(2).await;
    let pool = pooled(4).await;
    let wakeup = ListenNotifyWakeup::new(pool.clone())
        .with_listen_pool(pooled_at(&deaf_listen_url(), 2).await)
        .with_channel(&schema.name)
        .unwrap();
    let outbox = outbox_through_pooler(&schema, pool)
        .await
        .with_wakeup(wakeup.clone())
        .unwrap();
    let _sub = wakeup.subscribe().await.unwrap();
    // Each attempt takes up to 7 s (connect, LISTEN, the 2 s probe) on a loaded machine.
    wait_for("the probe's WARN", Duration::from_secs(40), || async {
        (!logs
            .lines("WARN", "probably goes through a transaction pooler")
            .is_empty())
        .then_some(())
    })
    .await;
    let seen = Arc::new(AtomicU64::new(0));
    let sink = seen.clone();
    let relay = OutboxRelay::new(
        outbox.clone(),
        FnDelivery::new(move |_e: OutboxEvent| {
            let sink = sink.clone();
            async move {
                sink.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
        }),
        RelayConfig::default().with_poll_interval(Duration::from_millis(200)),
    )
    .unwrap();
    relay.start().unwrap();
    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue(OutboxMessage::new("t", json!(1))).await.unwrap();
    tx.commit().await.unwrap();
    wait_for("delivery by polling", Duration::from_secs(10), || async {
        (seen.load(Ordering::Relaxed) == 1).then_some(())
    })
    .await;
    relay.stop().await.unwrap();
    wakeup.close().await.unwrap();
    schema.drop_schema().await;
}

/// NOTIFY through the pooler, LISTEN on a direct pool: a commit wakes a relay whose poll is 30 s
/// away within milliseconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_listen_pool_wakes_a_pooled_relay_at_once() {
    let schema = TestSchema::new(2).await;
    let pool = pooled(4).await;
    let wakeup = ListenNotifyWakeup::new(pool.clone())
        .with_channel(&schema.name)
        .unwrap()
        .with_listen_pool(schema.pool.clone());
    let outbox = outbox_through_pooler(&schema, pool)
        .await
        .with_wakeup(wakeup.clone())
        .unwrap();
    let (tx, mut delivered) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let relay = OutboxRelay::new(
        outbox.clone(),
        FnDelivery::new(move |_e: OutboxEvent| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(Instant::now());
                Ok(())
            }
        }),
        RelayConfig::default().with_poll_interval(Duration::from_secs(30)),
    )
    .unwrap();
    relay.start().unwrap();
    wait_for(
        "the first poll and LISTEN",
        Duration::from_secs(10),
        || async {
            let listening: i64 =
                sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE query = $1")
                    .bind(format!("LISTEN \"{}\"", schema.name))
                    .fetch_one(&schema.pool)
                    .await
                    .unwrap();
            (relay.stats().polls >= 1 && listening == 1).then_some(())
        },
    )
    .await;
    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue(OutboxMessage::new("t", json!(1))).await.unwrap();
    tx.commit().await.unwrap();
    let committed = Instant::now();
    let at = tokio::time::timeout(Duration::from_secs(5), delivered.recv())
        .await
        .expect("delivered long before the 30 s poll")
        .unwrap();
    let latency = at.duration_since(committed);
    assert!(latency < Duration::from_secs(2), "{latency:?}");
    relay.stop().await.unwrap();
    wakeup.close().await.unwrap();
    schema.drop_schema().await;
}

/// Change capture under parallel load through the pooler: eight clients (pools of their own, so
/// their statements meet on PgBouncer's shared server connections) at once install a capture on
/// a table of their own — many catalog reads: columns, a domain, an enum, a composite, arrays —,
/// read the capture status, and fire it with raw SQL, while a ninth client enqueues. Named
/// prepared statements (`sqlx_s_1`) would collide here (`prepared statement "sqlx_s_1" already
/// exists`); every event arrives exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn capture_install_status_and_fire_through_pgbouncer_in_parallel() {
    const CLIENTS: usize = 8;
    const UPDATES: i32 = 10;
    let started = Instant::now();
    let schema = TestSchema::new(2).await;
    let s = schema.name.clone();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE DOMAIN \"{s}\".qty AS int CHECK (VALUE >= 0);
         CREATE TYPE \"{s}\".mood AS ENUM ('ok', 'meh');
         CREATE TYPE \"{s}\".point2 AS (x float8, y float8);"
    )))
    .execute(&schema.pool)
    .await
    .unwrap();
    for client in 0..CLIENTS {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "CREATE TABLE \"{s}\".t{client} (id int PRIMARY KEY, qty \"{s}\".qty NOT NULL,
                 mood \"{s}\".mood, at \"{s}\".point2, tags text[], doc jsonb, price numeric(10,2),
                 seen timestamptz DEFAULT now(), blob bytea);
             INSERT INTO \"{s}\".t{client} (id, qty) VALUES (1, 0);"
        )))
        .execute(&schema.pool)
        .await
        .unwrap();
    }
    // The outbox itself, created through the pooler.
    let writer = outbox_through_pooler(&schema, pooled(4).await).await;

    let mut clients = Vec::new();
    for client in 0..CLIENTS {
        let s = s.clone();
        clients.push(tokio::spawn(async move {
            let pool = pooled(3).await;
            let table = OutboxTable::parse(&format!("{s}.outbox")).unwrap();
            let outbox = Outbox::new(
                PgBackend::new(pool.clone()).with_transaction_pooler(true),
                table,
            );
            let capture = ChangeCapture::new(format!("t{client}"))
                .with_schema(&s)
                .with_label(format!("shop.T{client}"));
            capture.install(&outbox).await.unwrap();
            // Twice more: a repeated install replaces the trigger, reading the catalog again.
            capture.install(&outbox).await.unwrap();
            let status = capture.status(&outbox).await.unwrap().expect("installed");
            assert!(status.is_current(), "{:?}", status.drift);
            for all in outbox.capture_status().await.unwrap() {
                assert!(all.is_current(), "{}: {:?}", all.table, all.drift);
            }
            for qty in 1..=UPDATES {
                let mut tx = pool.begin().await.unwrap();
                outbox
                    .set_context(&mut *tx, json!({"client": client}))
                    .await
                    .unwrap();
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "UPDATE \"{s}\".t{client} SET qty = $1 WHERE id = 1"
                )))
                .bind(qty)
                .persistent(false)
                .execute(&mut *tx)
                .await
                .unwrap();
                tx.commit().await.unwrap();
            }
        }));
    }
    let enqueuing = {
        let writer = writer.clone();
        tokio::spawn(async move {
            for n in 0..50 {
                let mut tx = writer.begin().await.unwrap();
                tx.enqueue(OutboxMessage::new("plain", json!({"n": n})))
                    .await
                    .unwrap();
                tx.commit().await.unwrap();
            }
        })
    };
    for client in clients {
        client.await.unwrap();
    }
    enqueuing.await.unwrap();
    let installed = Duration::from_secs_f64(started.elapsed().as_secs_f64());

    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let relay = OutboxRelay::new(
        writer.clone(),
        FnDelivery::new(move |e: OutboxEvent| {
            let sink = sink.clone();
            async move {
                sink.lock().unwrap().push(e);
                Ok(())
            }
        }),
        RelayConfig::default().with_poll_interval(Duration::from_millis(20)),
    )
    .unwrap();
    relay.start().unwrap();
    let expected = CLIENTS * UPDATES as usize + 50;
    wait_for(
        "every captured and enqueued event",
        Duration::from_secs(20),
        || async { (seen.lock().unwrap().len() >= expected).then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    relay.stop().await.unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), expected, "each event exactly once");
    let mut per_model: HashMap<String, Vec<i64>> = HashMap::new();
    for event in &seen {
        if event.topic == "plain" {
            continue;
        }
        assert_eq!(event.payload["operation"], "updated", "{}", event.payload);
        per_model
            .entry(event.payload["model"].as_str().unwrap().to_owned())
            .or_default()
            .push(event.payload["after"]["qty"].as_i64().unwrap_or(-1));
    }
    assert_eq!(per_model.len(), CLIENTS, "{per_model:?}");
    for (model, quantities) in &per_model {
        assert_eq!(
            quantities,
            &(1..=i64::from(UPDATES)).collect::<Vec<_>>(),
            "{model}: every update once, in order"
        );
    }
    eprintln!(
        "{CLIENTS} clients installed, checked and fired captures through PgBouncer in {installed:?}; \
         {expected} events delivered in {:?} in all",
        started.elapsed()
    );
    schema.drop_schema().await;
}
