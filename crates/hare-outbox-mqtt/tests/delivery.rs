//! MqttDelivery against a real Mosquitto: each test publishes under a topic prefix of its own; the
//! outage test runs a Mosquitto of its own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use common::{
    FakeBroker, Mosquitto, Subscriber, WAIT, closed_port, event, pg_outbox, port, unique, url,
};
use hare_outbox_core::{Delivery, OutboxMessage, OutboxRelay, RelayConfig};
use hare_outbox_mqtt::MqttDelivery;
use hare_outbox_testkit::wait_for;
use serde_json::{Value, json};

/// The `{"key": …, "n": …}` of a message published by the relay tests.
fn key_and_n(payload: &[u8]) -> (String, u64) {
    let value: Value = serde_json::from_slice(payload).unwrap();
    (
        value["key"].as_str().unwrap().to_owned(),
        value["n"].as_u64().unwrap(),
    )
}

#[tokio::test]
async fn the_exact_payload_arrives_on_the_mapped_topic() {
    let prefix = unique("exact");
    let subscriber = Subscriber::start(port(), &prefix).await;
    let delivery = MqttDelivery::new(&url(port()))
        .unwrap()
        .with_topic_prefix(&prefix)
        .unwrap();
    let e = event(
        "library.loan.created",
        Some("loan:42"),
        json!({"loan": 42, "reader": "Zoë Ünal", "books": [{"isbn": "978-0", "days": 1.5}], "note": "✓ \"q\"\n"}),
    );

    delivery.deliver(&e).await.unwrap();

    let messages = subscriber.wait_for(1, WAIT).await;
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert_eq!(messages[0].0, format!("{prefix}/library/loan/created"));
    assert_eq!(
        messages[0].1,
        e.body(),
        "payload is the body, byte for byte"
    );
    delivery.close().await.unwrap();
    // A closed delivery connects again on the next use.
    delivery.deliver(&e).await.unwrap();
    subscriber.wait_for(2, WAIT).await;
}

#[tokio::test]
async fn a_batch_of_50_gives_50_results_in_order_and_50_messages() {
    let prefix = unique("batch");
    let subscriber = Subscriber::start(port(), &prefix).await;
    let delivery = MqttDelivery::new(&url(port()))
        .unwrap()
        .with_topic_prefix(&prefix)
        .unwrap();
    let events: Vec<_> = (0..50)
        .map(|i| event("orders.created", Some(&format!("k{i}")), json!({ "n": i })))
        .collect();

    let results = delivery
        .deliver_batch(&events, 1, Duration::from_secs(10))
        .await;

    assert_eq!(results.len(), 50);
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let messages = subscriber.wait_for(50, WAIT).await;
    assert_eq!(messages.len(), 50);
    let received: HashSet<Vec<u8>> = messages.iter().map(|(_, p)| p.clone()).collect();
    let sent: HashSet<Vec<u8>> = events.iter().map(|e| e.body()).collect();
    assert_eq!(received, sent);
    assert!(
        messages
            .iter()
            .all(|(t, _)| *t == format!("{prefix}/orders/created"))
    );
}

/// More events than the client keeps in flight (100): packet ids wrap around and the client waits
/// for acks before it reuses one; every result still belongs to its own event.
#[tokio::test]
async fn a_batch_beyond_the_in_flight_window_is_acked_event_by_event() {
    let prefix = unique("window");
    let subscriber = Subscriber::start(port(), &prefix).await;
    let delivery = MqttDelivery::new(&url(port()))
        .unwrap()
        .with_topic_prefix(&prefix)
        .unwrap();
    for round in 0..2 {
        let events: Vec<_> = (0..250)
            .map(|i| event("bulk", None, json!({ "round": round, "n": i })))
            .collect();
        let results = delivery
            .deliver_batch(&events, 1, Duration::from_secs(10))
            .await;
        assert_eq!(results.len(), 250);
        assert!(results.iter().all(Result::is_ok), "{results:?}");
    }
    let messages = subscriber.wait_for_distinct(500, WAIT).await;
    assert_eq!(messages.len(), 500);
}

#[tokio::test]
async fn invalid_topics_fail_only_their_event() {
    let prefix = unique("invalid");
    let subscriber = Subscriber::start(port(), &prefix).await;
    let delivery = MqttDelivery::new(&url(port()))
        .unwrap()
        .with_topic_prefix(&prefix)
        .unwrap();
    let topics = [
        "good.a",
        "bad.+",
        "bad.#",
        "bad\0nul",
        "bad..level",
        "good.b",
        ".lead",
        "trail.",
    ];
    let events: Vec<_> = topics
        .iter()
        .enumerate()
        .map(|(i, t)| event(t, None, json!({ "i": i })))
        .collect();

    let results = delivery
        .deliver_batch(&events, 10, Duration::from_secs(10))
        .await;

    assert_eq!(results.len(), topics.len());
    for ((topic, result), e) in topics.iter().zip(&results).zip(&events) {
        if topic.starts_with("good") {
            assert!(result.is_ok(), "{topic:?}: {result:?}");
        } else {
            let error = result.as_ref().unwrap_err().chain();
            assert!(error.contains(&e.id.to_string()), "{error}");
            assert!(error.contains(&format!("{topic:?}")), "{error}");
        }
    }
    let messages = subscriber.wait_for(2, WAIT).await;
    let mut got: Vec<String> = messages.into_iter().map(|(t, _)| t).collect();
    got.sort();
    assert_eq!(
        got,
        [format!("{prefix}/good/a"), format!("{prefix}/good/b")]
    );
    // One event alone fails the same way.
    let error = delivery.deliver(&events[1]).await.unwrap_err().chain();
    assert!(error.contains("'+'"), "{error}");
}

#[tokio::test]
async fn an_unreachable_broker_fails_every_event_quickly() {
    let delivery = MqttDelivery::new(&url(closed_port()))
        .unwrap()
        .with_timeout(Duration::from_secs(3));
    let events: Vec<_> = (0..3).map(|i| event("t", None, json!(i))).collect();
    let started = Instant::now();
    let results = delivery
        .deliver_batch(&events, 10, Duration::from_secs(5))
        .await;
    assert_eq!(results.len(), 3);
    for result in &results {
        let error = result.as_ref().unwrap_err().chain();
        assert!(error.contains("127.0.0.1"), "{error}");
    }
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(delivery.deliver(&events[0]).await.is_err());
}

/// Success means acknowledged: a broker that never sends PUBACK fails the events at the timeout,
/// and the next call opens a new session.
#[tokio::test]
async fn no_puback_means_failure_at_the_timeout() {
    let broker = FakeBroker::start(false).await;
    let delivery = MqttDelivery::new(&url(broker.port))
        .unwrap()
        .with_timeout(Duration::from_millis(500));
    let events: Vec<_> = (0..3).map(|i| event("t", None, json!(i))).collect();
    let started = Instant::now();
    let results = delivery
        .deliver_batch(&events, 10, Duration::from_secs(5))
        .await;
    assert!(started.elapsed() >= Duration::from_millis(500));
    assert!(started.elapsed() < Duration::from_secs(3));
    for result in &results {
        let error = result.as_ref().unwrap_err().chain();
        assert!(error.contains("no PUBACK"), "{error}");
    }
    broker.wait_for_connections(1).await;
    assert_eq!(broker.connections(), 1);
    assert!(delivery.deliver(&events[0]).await.is_err());
    // A timed-out session is not reused.
    broker.wait_for_connections(2).await;
}

/// A connection lost with publishes in flight fails them at once (not at the timeout); the next
/// call reconnects.
#[tokio::test]
async fn a_lost_connection_fails_the_events_in_flight_and_reconnects() {
    let broker = FakeBroker::start(true).await;
    let delivery = MqttDelivery::new(&url(broker.port)).unwrap();
    let events: Vec<_> = (0..3).map(|i| event("t", None, json!(i))).collect();
    let started = Instant::now();
    let results = delivery
        .deliver_batch(&events, 10, Duration::from_secs(10))
        .await;
    assert!(started.elapsed() < Duration::from_secs(5), "failed fast");
    for result in &results {
        let error = result.as_ref().unwrap_err().chain();
        assert!(error.contains("connection"), "{error}");
    }
    assert!(delivery.deliver(&events[0]).await.is_err());
    // Reconnected on the next use.
    broker.wait_for_connections(2).await;
}

/// A call dropped while a publish waits for room in the client's queue leaves waiters and
/// requests out of line: the session is reset, and the next call connects anew.
#[tokio::test]
async fn a_call_dropped_midway_resets_the_session() {
    let broker = FakeBroker::start(false).await;
    let delivery = MqttDelivery::new(&url(broker.port)).unwrap();
    // 100 in flight without PUBACK fill the window, 128 more the client's queue: the rest wait.
    let events: Vec<_> = (0..300).map(|i| event("t", None, json!(i))).collect();
    let dropped = tokio::time::timeout(
        Duration::from_millis(500),
        delivery.deliver_batch(&events, 1, Duration::from_secs(30)),
    )
    .await;
    assert!(dropped.is_err(), "the call was still publishing");
    broker.wait_for_connections(1).await;
    assert_eq!(broker.connections(), 1);
    let result = tokio::time::timeout(
        Duration::from_secs(1),
        delivery.deliver_batch(&events[..1], 1, Duration::from_millis(200)),
    )
    .await
    .unwrap();
    assert!(result[0].is_err());
    // The session was reset.
    broker.wait_for_connections(2).await;
}

fn relay_config() -> RelayConfig {
    RelayConfig::default()
        .with_poll_interval(Duration::from_millis(50))
        .with_retry_base(Duration::from_millis(50))
        .with_retry_max(Duration::from_millis(500))
        .with_max_delivery_attempts(10_000)
        .with_delivery_timeout(Duration::from_secs(3))
        .with_lease(Duration::from_secs(20))
}

/// Checks that every event arrived and that, per key, first arrivals keep their order.
fn check_key_order(messages: &[(String, Vec<u8>)], keys: usize, per_key: usize) {
    let mut first_seen: HashSet<(String, u64)> = HashSet::new();
    let mut order: HashMap<String, Vec<u64>> = HashMap::new();
    for (_, payload) in messages {
        let (key, n) = key_and_n(payload);
        if first_seen.insert((key.clone(), n)) {
            order.entry(key).or_default().push(n);
        }
    }
    assert_eq!(first_seen.len(), keys * per_key, "every event arrived");
    assert_eq!(order.len(), keys);
    for (key, ns) in &order {
        let expected: Vec<u64> = (0..per_key as u64).collect();
        assert_eq!(ns, &expected, "key {key}: first arrivals in order");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_delivers_30_events_over_3_keys_in_key_order() {
    const KEYS: usize = 3;
    const PER_KEY: usize = 10;
    let prefix = unique("relay");
    let subscriber = Subscriber::start(port(), &prefix).await;
    let (schema, outbox) = pg_outbox().await;
    let mut tx = outbox.begin().await.unwrap();
    for n in 0..PER_KEY {
        for key in 0..KEYS {
            tx.enqueue(
                OutboxMessage::new(
                    "library.loan.created",
                    json!({"key": format!("k{key}"), "n": n}),
                )
                .ordering_key(format!("k{key}")),
            )
            .await
            .unwrap();
        }
    }
    tx.commit().await.unwrap();
    let delivery = MqttDelivery::new(&url(port()))
        .unwrap()
        .with_topic_prefix(&prefix)
        .unwrap();
    let relay = OutboxRelay::new(outbox, delivery, relay_config()).unwrap();
    relay.start().unwrap();

    let messages = subscriber
        .wait_for_distinct(KEYS * PER_KEY, Duration::from_secs(30))
        .await;
    wait_for("all marked delivered", WAIT, || async {
        (relay.stats().delivered >= (KEYS * PER_KEY) as u64).then_some(())
    })
    .await;
    relay.stop().await.unwrap();

    assert!(
        messages
            .iter()
            .all(|(t, _)| *t == format!("{prefix}/library/loan/created"))
    );
    check_key_order(&messages, KEYS, PER_KEY);
    assert_eq!(relay.stats().dead_lettered, 0);
    schema.drop_schema().await;
}

/// DESIGN: the broker goes away in the middle of a run → failures recorded with backoff, delivery
/// resumes by itself after recovery, every event arrives, per-key order holds.
///
/// The broker is stopped with SIGTERM, so that Mosquitto saves what it acknowledged (and the
/// subscriber's persistent session) on the way out: what happens to acknowledged messages in a
/// broker crash is the broker's durability, not the delivery's. Publishes in flight at the stop
/// are failed by the delivery and retried by the relay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_mid_run_recovers_and_keeps_every_event_in_key_order() {
    const KEYS: usize = 5;
    const PER_KEY: usize = 20;
    let mut broker = Mosquitto::start().await;
    let prefix = unique("outage");
    let subscriber = Subscriber::start(broker.port, &prefix).await;
    let (schema, outbox) = pg_outbox().await;
    let delivery = MqttDelivery::new(&url(broker.port))
        .unwrap()
        .with_topic_prefix(&prefix)
        .unwrap()
        .with_timeout(Duration::from_secs(2));
    let relay = OutboxRelay::new(outbox.clone(), delivery, relay_config()).unwrap();
    relay.start().unwrap();

    // Written over about a second, one event per key per round, so the outage lands mid-run.
    let producer = {
        let outbox = outbox.clone();
        tokio::spawn(async move {
            for n in 0..PER_KEY {
                let mut tx = outbox.begin().await.unwrap();
                for key in 0..KEYS {
                    tx.enqueue(
                        OutboxMessage::new(
                            "orders.created",
                            json!({"key": format!("k{key}"), "n": n}),
                        )
                        .ordering_key(format!("k{key}")),
                    )
                    .await
                    .unwrap();
                }
                tx.commit().await.unwrap();
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };

    subscriber.wait_for(20, WAIT).await;
    broker.stop();
    wait_for("failures recorded during the outage", WAIT, || async {
        (relay.stats().failed >= 3).then_some(())
    })
    .await;
    let failed_during_outage = relay.stats().failed;
    broker.restart().await;
    producer.await.unwrap();

    wait_for("every event delivered", Duration::from_secs(60), || async {
        (relay.stats().delivered >= (KEYS * PER_KEY) as u64).then_some(())
    })
    .await;
    relay.stop().await.unwrap();
    let messages = subscriber
        .wait_for_distinct(KEYS * PER_KEY, Duration::from_secs(30))
        .await;
    check_key_order(&messages, KEYS, PER_KEY);
    assert!(failed_during_outage >= 3);
    assert_eq!(relay.stats().dead_lettered, 0);
    let recorded: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox WHERE attempts > 0")
        .fetch_one(&schema.pool)
        .await
        .unwrap();
    assert!(recorded > 0, "failures recorded on the events");
    eprintln!(
        "outage: {} messages for {} events, {} failed attempts recorded",
        messages.len(),
        KEYS * PER_KEY,
        relay.stats().failed
    );
    schema.drop_schema().await;
}
