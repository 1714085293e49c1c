//! RedisStreamsDelivery against a real Redis: each test writes to streams of its own and deletes
//! them; the outage test runs a redis-server of its own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use common::{
    DelayProxy, RedisServer, WAIT, closed_port, connect, del, event, field, pg_outbox, unique, url,
    xlen, xrange,
};
use hare_outbox_core::{
    Delivery, EVENT_ID_HEADER, OutboxMessage, OutboxRelay, RelayConfig, TOPIC_HEADER,
};
use hare_outbox_redis::RedisStreamsDelivery;
use hare_outbox_testkit::wait_for;
use serde_json::{Map, Value, json};

#[tokio::test]
async fn fields_arrive_exactly() {
    let mut conn = connect(&url()).await;
    let topic = unique("orders");
    let delivery = RedisStreamsDelivery::new(&url()).unwrap();
    let keyed = event(
        &topic,
        Some("order:42"),
        json!({"order": 42, "customer": "Zoë Ünal", "lines": [{"sku": "A-1", "qty": 1.5}], "note": "✓ \"q\"\n"}),
        json!({"author": "Zoë ✓", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "attempt": 3, "hare-outbox-topic": "spoofed"}),
    );
    let unkeyed = event(&topic, None, json!([1, null, "x"]), Value::Null);

    delivery.deliver(&keyed).await.unwrap();
    delivery.deliver(&unkeyed).await.unwrap();

    let entries = xrange(&mut conn, &topic).await;
    assert_eq!(
        entries.len(),
        2,
        "one entry per event, in the topic's stream"
    );
    for (entry, e) in entries.iter().zip([&keyed, &unkeyed]) {
        let names: Vec<&str> = entry.1.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "id",
                "topic",
                "ordering_key",
                "headers",
                "payload",
                "sequence",
                "created_at"
            ]
        );
        assert_eq!(field(entry, "id"), e.id.to_string());
        assert_eq!(field(entry, "topic"), topic);
        assert_eq!(
            field(entry, "ordering_key"),
            e.message_key().unwrap_or_default()
        );
        assert_eq!(entry.1[4].1, e.body(), "payload is the body, byte for byte");
        let headers: Map<String, Value> = serde_json::from_str(&field(entry, "headers")).unwrap();
        let expected: Map<String, Value> = e
            .message_headers()
            .into_iter()
            .map(|(n, v)| (n, Value::String(v)))
            .collect();
        assert_eq!(headers, expected);
        assert_eq!(headers[EVENT_ID_HEADER], json!(e.id.to_string()));
        assert_eq!(headers[TOPIC_HEADER], json!(topic));
    }
    assert_eq!(
        field(&entries[1], "ordering_key"),
        "",
        "no key → empty string"
    );
    assert_eq!(
        serde_json::from_str::<Value>(&field(&entries[0], "payload")).unwrap(),
        keyed.payload
    );
    del(&mut conn, &[&topic]).await;
}

#[tokio::test]
async fn a_batch_of_100_goes_in_one_pipeline_with_one_result_per_event() {
    let mut conn = connect(&url()).await;
    let stream = unique("batch");
    let delay = Duration::from_millis(200);
    // Every client→server chunk waits 200 ms: 100 round trips would take 20 s.
    let proxy = DelayProxy::start(common::port(), delay).await;
    let delivery = RedisStreamsDelivery::new(&format!("redis://127.0.0.1:{}/0", proxy.port))
        .unwrap()
        .with_stream(&stream)
        .unwrap();
    // Connect first, so the timing below is the batch alone.
    let warm_up = event("warm", None, json!(0), Value::Null);
    delivery.deliver(&warm_up).await.unwrap();

    let events: Vec<_> = (0..100)
        .map(|i| {
            event(
                "orders",
                Some(&format!("k{i}")),
                json!({ "n": i }),
                Value::Null,
            )
        })
        .collect();
    let started = Instant::now();
    let results = delivery
        .deliver_batch(&events, 1, Duration::from_secs(30))
        .await;
    let took = started.elapsed();

    assert_eq!(results.len(), 100);
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert!(
        took < delay * 10,
        "one pipeline, not one round trip per event: {took:?}"
    );
    let entries = xrange(&mut conn, &stream).await;
    assert_eq!(entries.len(), 101);
    let ids: Vec<String> = entries[1..].iter().map(|e| field(e, "id")).collect();
    let expected: Vec<String> = events.iter().map(|e| e.id.to_string()).collect();
    assert_eq!(ids, expected, "appended in batch order");
    del(&mut conn, &[&stream]).await;
}

#[tokio::test]
async fn a_refused_command_fails_only_its_event() {
    let mut conn = connect(&url()).await;
    let good_a = unique("good_a");
    let good_b = unique("good_b");
    let not_a_stream = unique("string");
    let _: () = redis::cmd("SET")
        .arg(&not_a_stream)
        .arg("plain value")
        .query_async(&mut conn)
        .await
        .unwrap();
    let delivery = RedisStreamsDelivery::new(&url()).unwrap();
    let events = [
        event(&good_a, None, json!(1), Value::Null),
        event(&not_a_stream, None, json!(2), Value::Null),
        event(&good_b, None, json!(3), Value::Null),
    ];

    let results = delivery
        .deliver_batch(&events, 10, Duration::from_secs(10))
        .await;

    assert!(results[0].is_ok(), "{:?}", results[0]);
    assert!(results[2].is_ok(), "{:?}", results[2]);
    let error = results[1].as_ref().unwrap_err().chain();
    assert!(error.contains("WRONGTYPE"), "{error}");
    assert!(error.contains(&events[1].id.to_string()), "{error}");
    assert!(error.contains(&not_a_stream), "{error}");
    assert_eq!(xlen(&mut conn, &good_a).await, 1);
    assert_eq!(xlen(&mut conn, &good_b).await, 1);
    del(&mut conn, &[&good_a, &good_b, &not_a_stream]).await;
}

#[tokio::test]
async fn a_connection_error_fails_every_event() {
    let delivery = RedisStreamsDelivery::new(&format!("redis://127.0.0.1:{}/0", closed_port()))
        .unwrap()
        .with_timeout(Duration::from_secs(2));
    let events: Vec<_> = (0..3)
        .map(|i| event("t", None, json!(i), Value::Null))
        .collect();
    let started = Instant::now();
    let results = delivery
        .deliver_batch(&events, 10, Duration::from_secs(5))
        .await;
    assert_eq!(results.len(), 3);
    for result in &results {
        let error = result.as_ref().unwrap_err().chain();
        assert!(error.contains("127.0.0.1"), "{error}");
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(delivery.deliver(&events[0]).await.is_err());
}

#[tokio::test]
async fn max_length_trims_approximately() {
    let mut conn = connect(&url()).await;
    let stream = unique("trim");
    let delivery = RedisStreamsDelivery::new(&url())
        .unwrap()
        .with_stream(&stream)
        .unwrap()
        .with_max_length(10)
        .unwrap();
    let events: Vec<_> = (0..1000)
        .map(|i| event("t", None, json!(i), Value::Null))
        .collect();
    for batch in events.chunks(100) {
        let results = delivery
            .deliver_batch(batch, 10, Duration::from_secs(10))
            .await;
        assert!(results.iter().all(Result::is_ok));
    }
    let entries = xrange(&mut conn, &stream).await;
    // `~` removes whole nodes of 100 entries (the default stream-node-max-entries).
    assert!(
        (10..=110).contains(&entries.len()),
        "trimmed to about 10 entries: {}",
        entries.len()
    );
    assert_eq!(
        field(entries.last().unwrap(), "id"),
        events[999].id.to_string(),
        "the newest entry is kept"
    );
    assert_ne!(
        field(&entries[0], "id"),
        events[0].id.to_string(),
        "the oldest entries are gone"
    );
    del(&mut conn, &[&stream]).await;
}

/// DESIGN: the broker connection dropped in the middle of a run → failures recorded with backoff,
/// delivery resumes by itself after recovery, every event arrives, per-key order holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_mid_run_recovers_and_keeps_every_event_in_key_order() {
    const KEYS: usize = 10;
    const PER_KEY: usize = 20;
    let mut server = RedisServer::start().await;
    let (schema, outbox) = pg_outbox().await;
    let stream = unique("outage");
    let delivery = RedisStreamsDelivery::new(&server.url())
        .unwrap()
        .with_stream(&stream)
        .unwrap()
        .with_timeout(Duration::from_secs(2));
    let relay = OutboxRelay::new(
        outbox.clone(),
        delivery,
        RelayConfig::default()
            .with_poll_interval(Duration::from_millis(50))
            .with_retry_base(Duration::from_millis(50))
            .with_retry_max(Duration::from_millis(500))
            .with_max_delivery_attempts(10_000)
            .with_delivery_timeout(Duration::from_secs(3))
            .with_lease(Duration::from_secs(20)),
    )
    .unwrap();
    relay.start().unwrap();

    // Written over about a second, one event per key per round, so the outage lands mid-run.
    let producer = {
        let outbox = outbox.clone();
        tokio::spawn(async move {
            let mut ids = HashMap::new();
            for round in 0..PER_KEY {
                let mut tx = outbox.begin().await.unwrap();
                for key in 0..KEYS {
                    let e = tx
                        .enqueue(
                            OutboxMessage::new("orders", json!({"key": key, "n": round}))
                                .ordering_key(format!("k{key}")),
                        )
                        .await
                        .unwrap();
                    ids.insert(e.id.to_string(), (format!("k{key}"), round));
                }
                tx.commit().await.unwrap();
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            ids
        })
    };

    let conn = connect(&server.url()).await;
    wait_for("some entries before the outage", WAIT, || {
        let mut conn = conn.clone();
        let stream = stream.clone();
        async move { (xlen(&mut conn, &stream).await >= 30).then_some(()) }
    })
    .await;
    server.kill();
    wait_for("failures recorded during the outage", WAIT, || async {
        (relay.stats().failed >= 3).then_some(())
    })
    .await;
    let failed_during_outage = relay.stats().failed;
    server.restart().await;
    let ids = producer.await.unwrap();

    wait_for("every event delivered", Duration::from_secs(60), || async {
        (relay.stats().delivered >= (KEYS * PER_KEY) as u64).then_some(())
    })
    .await;
    relay.stop().await.unwrap();

    let mut conn2 = connect(&server.url()).await;
    drop(conn);
    let entries = xrange(&mut conn2, &stream).await;
    let mut seen = HashSet::new();
    let mut last: HashMap<String, usize> = HashMap::new();
    for entry in &entries {
        let id = field(entry, "id");
        let (key, n) = ids
            .get(&id)
            .unwrap_or_else(|| panic!("unknown event {id}"))
            .clone();
        assert_eq!(field(entry, "ordering_key"), key);
        // A retry of an XADD whose reply was lost may append an event twice, right after itself;
        // an event of a key never comes before an earlier one of that key.
        let previous = last.insert(key.clone(), n);
        assert!(
            previous.is_none_or(|p| p <= n),
            "key {key}: event {n} after {previous:?}"
        );
        seen.insert(id);
    }
    assert_eq!(seen.len(), KEYS * PER_KEY, "every event arrived");
    assert!(failed_during_outage >= 3);
    let stats = relay.stats();
    assert_eq!(stats.dead_lettered, 0);
    let recorded: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox WHERE attempts > 0")
        .fetch_one(&schema.pool)
        .await
        .unwrap();
    assert!(recorded > 0, "failures recorded on the events");
    eprintln!(
        "outage: {} entries for {} events, {} failed attempts recorded",
        entries.len(),
        seen.len(),
        stats.failed
    );
    schema.drop_schema().await;
}
