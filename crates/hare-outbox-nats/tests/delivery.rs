//! NatsDelivery against a real NATS server with JetStream: each test on a stream and subjects of
//! its own, deleted at the end; the outage test runs a nats-server of its own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use common::{
    DelayProxy, NatsServer, WAIT, closed_port, connect, create_stream, delete_stream, event,
    header, pg_outbox, read_stream, stream_len, unique, url,
};
use hare_outbox_core::{Delivery, OutboxMessage, OutboxRelay, RelayConfig};
use hare_outbox_nats::{NatsDelivery, ORDERING_KEY_HEADER};
use hare_outbox_testkit::wait_for;
use serde_json::{Value, json};

#[tokio::test]
async fn fields_arrive_exactly() {
    let client = connect(&url()).await;
    let stream = unique("T");
    let root = unique("t");
    let delivery = NatsDelivery::new(&url())
        .unwrap()
        .with_stream(&stream, [format!("{root}.>")])
        .unwrap();
    let topic = format!("{root}.orders.created");
    let keyed = event(
        &topic,
        Some("order:42"),
        json!({"order": 42, "customer": "Zoë Ünal", "lines": [{"sku": "A-1", "qty": 1.5}], "note": "✓ \"q\"\n"}),
        json!({"author": "ann", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "attempt": 3, "hare-outbox-topic": "spoofed"}),
    );
    let unkeyed = event(&topic, None, json!([1, null, "x"]), Value::Null);

    delivery.deliver(&keyed).await.unwrap();
    delivery.deliver(&unkeyed).await.unwrap();

    let messages = read_stream(&client, &stream).await;
    assert_eq!(messages.len(), 2);
    for (message, e) in messages.iter().zip([&keyed, &unkeyed]) {
        assert_eq!(message.subject.as_str(), topic, "subject = topic");
        assert_eq!(
            message.payload.to_vec(),
            e.body(),
            "payload = body, byte for byte"
        );
        for (name, value) in e.message_headers() {
            assert_eq!(header(message, &name), Some(value), "header {name}");
        }
        assert_eq!(header(message, "Nats-Msg-Id"), Some(e.id.to_string()));
        assert_eq!(
            header(message, ORDERING_KEY_HEADER).as_deref(),
            e.message_key()
        );
        let sent = e.message_headers().len() + 1 + usize::from(e.message_key().is_some());
        assert_eq!(message.headers.len(), sent, "no other headers");
    }
    assert_eq!(
        header(&messages[0], "hare-outbox-topic"),
        Some(topic.clone())
    );
    delete_stream(&client, &stream).await;
}

#[tokio::test]
async fn a_prefix_goes_in_front_of_the_topic() {
    let client = connect(&url()).await;
    let stream = unique("T");
    let root = unique("t");
    let delivery = NatsDelivery::new(&url())
        .unwrap()
        .with_subject_prefix(format!("{root}."))
        .unwrap()
        .with_stream(&stream, [format!("{root}.>")])
        .unwrap();
    delivery
        .deliver(&event("orders.paid", None, json!(1), Value::Null))
        .await
        .unwrap();
    let messages = read_stream(&client, &stream).await;
    assert_eq!(messages[0].subject.as_str(), format!("{root}.orders.paid"));
    delete_stream(&client, &stream).await;
}

#[tokio::test]
async fn the_stream_drops_a_duplicate_msg_id() {
    let client = connect(&url()).await;
    let stream = unique("T");
    let root = unique("t");
    create_stream(&client, &stream, &root).await;
    // The stream exists already: no `with_stream`.
    let delivery = NatsDelivery::new(&url()).unwrap();
    let e = event(
        &format!("{root}.orders"),
        Some("k"),
        json!({"n": 1}),
        Value::Null,
    );

    delivery.deliver(&e).await.unwrap();
    delivery.deliver(&e).await.unwrap();
    let results = delivery
        .deliver_batch(std::slice::from_ref(&e), 10, Duration::from_secs(10))
        .await;
    assert!(results[0].is_ok(), "a duplicate counts as delivered");

    assert_eq!(stream_len(&client, &stream).await, 1, "stored once");
    let messages = read_stream(&client, &stream).await;
    assert_eq!(header(&messages[0], "Nats-Msg-Id"), Some(e.id.to_string()));
    delete_stream(&client, &stream).await;
}

#[tokio::test]
async fn a_batch_of_100_is_published_whole_then_acknowledged() {
    let client = connect(&url()).await;
    let stream = unique("T");
    let root = unique("t");
    create_stream(&client, &stream, &root).await;
    let delay = Duration::from_millis(200);
    // Every client→server chunk waits 200 ms: publishing one by one, each waiting for its
    // acknowledgement, would take 20 s.
    let proxy = DelayProxy::start(common::port(), delay).await;
    let delivery = NatsDelivery::new(&format!("nats://127.0.0.1:{}", proxy.port)).unwrap();
    delivery
        .deliver(&event(&format!("{root}.warm"), None, json!(0), Value::Null))
        .await
        .unwrap();

    let events: Vec<_> = (0..100)
        .map(|i| {
            event(
                &format!("{root}.orders"),
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
    assert!(took < delay * 10, "published together: {took:?}");
    let messages = read_stream(&client, &stream).await;
    let ids: Vec<String> = messages[1..]
        .iter()
        .map(|m| header(m, "hare-outbox-event-id").unwrap())
        .collect();
    let expected: Vec<String> = events.iter().map(|e| e.id.to_string()).collect();
    assert_eq!(ids, expected, "stored in batch order");
    delete_stream(&client, &stream).await;
}

#[tokio::test]
async fn events_fail_without_a_stream_or_a_server() {
    let root = unique("t");
    let delivery = NatsDelivery::new(&url())
        .unwrap()
        .with_timeout(Duration::from_secs(3));
    let events = [
        event(&format!("{root}.nowhere"), None, json!(1), Value::Null),
        event(&format!("{root}.*"), None, json!(2), Value::Null),
    ];
    let results = delivery
        .deliver_batch(&events, 10, Duration::from_secs(5))
        .await;
    let no_stream = results[0].as_ref().unwrap_err().chain();
    assert!(no_stream.contains("did not store"), "{no_stream}");
    let wildcard = results[1].as_ref().unwrap_err().chain();
    assert!(wildcard.contains("wildcard"), "{wildcard}");

    let down = NatsDelivery::new(&format!("nats://127.0.0.1:{}", closed_port()))
        .unwrap()
        .with_timeout(Duration::from_secs(2));
    let started = Instant::now();
    let results = down
        .deliver_batch(&events, 10, Duration::from_secs(5))
        .await;
    assert_eq!(results.len(), 2);
    for result in results {
        let error = result.unwrap_err().chain();
        assert!(error.contains("127.0.0.1"), "{error}");
    }
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn with_stream_reports_a_server_without_jetstream() {
    let server = NatsServer::start(false).await;
    let delivery = NatsDelivery::new(&server.url())
        .unwrap()
        .with_stream("EVENTS", ["events.>"])
        .unwrap()
        .with_timeout(Duration::from_secs(2));
    let error = delivery
        .deliver(&event("events.x", None, json!(1), Value::Null))
        .await
        .unwrap_err()
        .chain();
    assert!(error.contains("\"EVENTS\""), "{error}");
    assert!(error.contains("JetStream"), "{error}");
}

/// DESIGN: the broker connection dropped in the middle of a run → failures recorded with backoff,
/// delivery resumes by itself after recovery, every event arrives, per-key order holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_mid_run_recovers_and_keeps_every_event_in_key_order() {
    const KEYS: usize = 10;
    const PER_KEY: usize = 20;
    let mut server = NatsServer::start(true).await;
    let (schema, outbox) = pg_outbox().await;
    let stream = unique("T");
    let delivery = NatsDelivery::new(&server.url())
        .unwrap()
        .with_subject_prefix("outage.")
        .unwrap()
        .with_stream(&stream, ["outage.>"])
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

    let client = connect(&server.url()).await;
    wait_for("some messages before the outage", WAIT, || {
        let client = client.clone();
        let stream = stream.clone();
        async move {
            let js = async_nats::jetstream::new(client);
            let mut s = js.get_stream(&stream).await.ok()?;
            (s.info().await.ok()?.state.messages >= 30).then_some(())
        }
    })
    .await;
    drop(client);
    server.stop();
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

    let client = connect(&server.url()).await;
    let messages = read_stream(&client, &stream).await;
    let mut seen = HashSet::new();
    let mut last: HashMap<String, usize> = HashMap::new();
    for message in &messages {
        let id = header(message, "hare-outbox-event-id").unwrap();
        let (key, n) = ids
            .get(&id)
            .unwrap_or_else(|| panic!("unknown event {id}"))
            .clone();
        assert_eq!(header(message, ORDERING_KEY_HEADER), Some(key.clone()));
        let previous = last.insert(key.clone(), n);
        assert!(
            previous.is_none_or(|p| p < n),
            "key {key}: event {n} after {previous:?}"
        );
        assert!(seen.insert(id), "stored once: the stream drops duplicates");
    }
    assert_eq!(seen.len(), KEYS * PER_KEY, "every event arrived");
    assert_eq!(messages.len(), KEYS * PER_KEY);
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
        seen.len(),
        relay.stats().failed
    );
    schema.drop_schema().await;
}
