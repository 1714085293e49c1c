//! LISTEN/NOTIFY wake-ups against the real server (seed 001 § Будильники).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hare_outbox_core::{
    FnDelivery, Outbox, OutboxEvent, OutboxMessage, OutboxRelay, OutboxTable, RelayConfig, Wakeup,
};
use hare_outbox_postgres::{ListenNotifyWakeup, NotifyMode, PgBackend};
use hare_outbox_testkit::pg::TestSchema;
use hare_outbox_testkit::wait_for;
use serde_json::json;

async fn setup(mode: NotifyMode) -> (TestSchema, Outbox<PgBackend>, ListenNotifyWakeup) {
    let schema = TestSchema::new(6).await;
    let wakeup = ListenNotifyWakeup::new(schema.pool.clone())
        .with_channel(&schema.name)
        .unwrap()
        .with_mode(mode);
    let outbox = Outbox::new(
        PgBackend::new(schema.pool.clone()),
        OutboxTable::parse("outbox").unwrap(),
    )
    .with_wakeup(wakeup.clone())
    .unwrap();
    outbox.migrate().await.unwrap();
    (schema, outbox, wakeup)
}

async fn next(sub: &mut hare_outbox_core::WakeupSubscription) -> Vec<String> {
    tokio::time::timeout(Duration::from_secs(5), sub.recv())
        .await
        .expect("a signal")
        .unwrap()
        .unwrap()
        .to_vec()
}

async fn nothing_within(sub: &mut hare_outbox_core::WakeupSubscription, wait: Duration) -> bool {
    tokio::time::timeout(wait, sub.recv()).await.is_err()
}

#[tokio::test]
async fn after_commit_mode_signals_committed_topics_only() {
    let (schema, outbox, wakeup) = setup(NotifyMode::AfterCommit {
        coalesce: Duration::from_millis(1),
    })
    .await;
    let mut sub = wakeup.subscribe().await.unwrap();
    // The listener is connected once a LISTEN is registered on the server.
    wait_for("LISTEN", Duration::from_secs(5), || async {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE query = $1")
            .bind(format!("LISTEN \"{}\"", schema.name))
            .fetch_one(&schema.pool)
            .await
            .unwrap();
        (n == 1).then_some(())
    })
    .await;
    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue(OutboxMessage::new("rolled.back", json!(1)))
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue(OutboxMessage::new("a", json!(1))).await.unwrap();
    tx.enqueue(OutboxMessage::new("a", json!(2))).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(next(&mut sub).await, ["a"]);
    assert!(
        nothing_within(&mut sub, Duration::from_millis(300)).await,
        "one notification per topic, none for the rollback"
    );
    schema.drop_schema().await;
}

#[tokio::test]
async fn in_transaction_mode_notifies_at_commit_from_any_transaction() {
    let (schema, outbox, wakeup) = setup(NotifyMode::InTransaction).await;
    let mut sub = wakeup.subscribe().await.unwrap();
    wait_for("LISTEN", Duration::from_secs(5), || async {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE query = $1")
            .bind(format!("LISTEN \"{}\"", schema.name))
            .fetch_one(&schema.pool)
            .await
            .unwrap();
        (n == 1).then_some(())
    })
    .await;
    // A plain sqlx transaction: NOTIFY rides it.
    let mut tx = schema.pool.begin().await.unwrap();
    outbox
        .enqueue(&mut *tx, OutboxMessage::new("b", json!(1)))
        .await
        .unwrap();
    outbox
        .enqueue(&mut *tx, OutboxMessage::new("b", json!(2)))
        .await
        .unwrap();
    outbox
        .enqueue_many(&mut *tx, vec![OutboxMessage::new("c", json!(3))])
        .await
        .unwrap();
    assert!(
        nothing_within(&mut sub, Duration::from_millis(200)).await,
        "nothing before commit"
    );
    tx.commit().await.unwrap();
    let mut got = [next(&mut sub).await, next(&mut sub).await].concat();
    got.sort();
    assert_eq!(got, ["b", "c"], "coalesced per topic by PostgreSQL");
    let mut tx = schema.pool.begin().await.unwrap();
    outbox
        .enqueue(&mut *tx, OutboxMessage::new("d", json!(1)))
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert!(
        nothing_within(&mut sub, Duration::from_millis(300)).await,
        "never for a rollback"
    );
    schema.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relays_share_one_listener_and_wake_only_for_their_topics() {
    let (schema, outbox, _wakeup) = setup(NotifyMode::AfterCommit {
        coalesce: Duration::from_millis(1),
    })
    .await;
    let seen = Arc::new(Mutex::new(Vec::<(String, Instant)>::new()));
    let relay = |topics: &str| {
        let sink = seen.clone();
        OutboxRelay::new(
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
                .with_topics([topics]),
        )
        .unwrap()
    };
    let (billing, library) = (relay("billing.*"), relay("library.*"));
    billing.start().unwrap();
    library.start().unwrap();
    wait_for("both relays listening", Duration::from_secs(5), || async {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE query = $1")
            .bind(format!("LISTEN \"{}\"", schema.name))
            .fetch_one(&schema.pool)
            .await
            .unwrap();
        (n == 1 && billing.stats().polls >= 1 && library.stats().polls >= 1).then_some(())
    })
    .await;
    let polls_before = library.stats().polls;
    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue(OutboxMessage::new("billing.paid", json!(1)))
        .await
        .unwrap();
    let committed = Instant::now();
    tx.commit().await.unwrap();
    wait_for("delivery", Duration::from_secs(5), || async {
        (!seen.lock().unwrap().is_empty()).then_some(())
    })
    .await;
    let latency = seen.lock().unwrap()[0].1 - committed;
    assert!(
        latency < Duration::from_millis(500),
        "woken by NOTIFY: {latency:?}"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        library.stats().polls,
        polls_before,
        "a signal for billing.* does not wake library.*"
    );
    billing.stop().await.unwrap();
    library.stop().await.unwrap();
    schema.drop_schema().await;
}

/// Five terminations of the LISTEN backend, one after another once it is back: each reconnect
/// succeeds and resets the count, so the listener never stops (an ERROR-and-give-up after five
/// drops would end it for good on a quiet week of idle timeouts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_killed_listeners_reconnect_and_signals_still_arrive() {
    let (schema, outbox, wakeup) = setup(NotifyMode::AfterCommit {
        coalesce: Duration::from_millis(1),
    })
    .await;
    let mut sub = wakeup.subscribe().await.unwrap();
    let listening = || async {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE query = $1")
            .bind(format!("LISTEN \"{}\"", schema.name))
            .fetch_one(&schema.pool)
            .await
            .unwrap();
        (n == 1).then_some(())
    };
    for round in 1..=5 {
        wait_for("LISTEN", Duration::from_secs(10), listening).await;
        let killed: Vec<bool> = sqlx::query_scalar(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = $1",
        )
        .bind(format!("LISTEN \"{}\"", schema.name))
        .fetch_all(&schema.pool)
        .await
        .unwrap();
        assert_eq!(killed, [true], "round {round}");
        // After the reconnect the subscribers are told to poll (signals may have been lost).
        assert_eq!(next(&mut sub).await, Vec::<String>::new(), "round {round}");
        let topic = format!("after.kill.{round}");
        let mut tx = outbox.begin().await.unwrap();
        tx.enqueue(OutboxMessage::new(&topic, json!(round)))
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(next(&mut sub).await, [topic], "round {round}");
    }
    wakeup.close().await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_secs(5), sub.recv())
            .await
            .unwrap()
            .is_none(),
        "close() ends the subscription"
    );
    wait_for(
        "the LISTEN connection released",
        Duration::from_secs(5),
        || async {
            let n: i64 =
                sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE query = $1")
                    .bind(format!("LISTEN \"{}\"", schema.name))
                    .fetch_one(&schema.pool)
                    .await
                    .unwrap();
            (n == 0).then_some(())
        },
    )
    .await;
    schema.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_keeps_the_subscription_open_and_relays_poll_on() {
    let schema = TestSchema::new(4).await;
    // A pool to a port nobody listens on: every LISTEN attempt fails.
    let dead = sqlx::postgres::PgPoolOptions::new()
        .acquire_timeout(Duration::from_millis(300))
        .connect_lazy("postgres://postgres@127.0.0.1:1/test")
        .unwrap();
    let wakeup = ListenNotifyWakeup::new(schema.pool.clone())
        .with_channel(&schema.name)
        .unwrap()
        .with_listen_pool(dead);
    let outbox = Outbox::new(
        PgBackend::new(schema.pool.clone()),
        OutboxTable::parse("outbox").unwrap(),
    )
    .with_wakeup(wakeup.clone())
    .unwrap();
    outbox.migrate().await.unwrap();
    let mut sub = wakeup.subscribe().await.unwrap();
    // Five failures take about 1.5–3 s, then the listener goes on retrying.
    assert!(
        tokio::time::timeout(Duration::from_secs(4), sub.recv())
            .await
            .is_err(),
        "the subscription stays open while LISTEN is retried"
    );

    let seen = Arc::new(Mutex::new(0));
    let sink = seen.clone();
    let relay = OutboxRelay::new(
        outbox.clone(),
        FnDelivery::new(move |_e: OutboxEvent| {
            let sink = sink.clone();
            async move {
                *sink.lock().unwrap() += 1;
                Ok(())
            }
        }),
        RelayConfig::default().with_poll_interval(Duration::from_millis(100)),
    )
    .unwrap();
    relay.start().unwrap();
    let mut conn = schema.pool.acquire().await.unwrap();
    outbox
        .enqueue(&mut conn, OutboxMessage::new("t", json!(1)))
        .await
        .unwrap();
    drop(conn);
    wait_for("delivery by polling", Duration::from_secs(10), || async {
        (*seen.lock().unwrap() == 1).then_some(())
    })
    .await;
    relay.stop().await.unwrap();
    wakeup.close().await.unwrap();
    assert!(
        wakeup
            .check_supported(&hare_outbox_core::backend::Capabilities::new("sqlite"))
            .is_err(),
        "LISTEN/NOTIFY is refused on SQLite"
    );
    schema.drop_schema().await;
}
