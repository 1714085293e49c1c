//! KafkaDelivery against a real Kafka-protocol broker (tansu): each test produces to topics of its
//! own and reads them back by partition assignment, outside consumer groups.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{WAIT, bootstrap, create_topic, event, headers, key, pg_outbox, read, unique};
use hare_outbox_core::{
    Delivery, EVENT_ID_HEADER, OutboxMessage, OutboxRelay, RelayConfig, TOPIC_HEADER,
};
use hare_outbox_kafka::KafkaDelivery;
use hare_outbox_kafka::rdkafka::Message;
use hare_outbox_testkit::wait_for;
use serde_json::{Value, json};

#[tokio::test]
async fn payload_key_and_headers_arrive_exactly() {
    let topic = unique("orders");
    create_topic(&topic, 1).await;
    let delivery = KafkaDelivery::new(&bootstrap()).unwrap();
    let keyed = event(
        &topic,
        Some("order:42"),
        json!({"order": 42, "customer": "Zoë Ünal", "lines": [{"sku": "A-1", "qty": 1.5}], "note": "✓ \"q\"\n"}),
        json!({"author": "Zoë ✓", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "attempt": 3, "hare-outbox-topic": "spoofed"}),
    );
    let unkeyed = event(&topic, None, json!([1, null, "x"]), Value::Null);

    delivery.deliver(&keyed).await.unwrap();
    delivery.deliver(&unkeyed).await.unwrap();

    let messages = read(&topic, 1, 2).await;
    for (message, e) in messages.iter().zip([&keyed, &unkeyed]) {
        assert_eq!(message.topic(), topic);
        assert_eq!(
            message.payload().unwrap(),
            e.body(),
            "value is the body, byte for byte"
        );
        assert_eq!(key(message).as_deref(), e.message_key());
        assert_eq!(headers(message), e.message_headers(), "headers in order");
    }
    let first = headers(&messages[0]);
    assert!(first.contains(&(EVENT_ID_HEADER.to_owned(), keyed.id.to_string())));
    assert!(first.contains(&(TOPIC_HEADER.to_owned(), topic.clone())));
    assert!(first.contains(&("attempt".to_owned(), "3".to_owned())));
    assert!(!first.iter().any(|(_, v)| v == "spoofed"));
    assert_eq!(key(&messages[1]), None, "no ordering key → no message key");
    assert_eq!(
        serde_json::from_slice::<Value>(messages[0].payload().unwrap()).unwrap(),
        keyed.payload
    );
}

#[tokio::test]
async fn a_configured_topic_takes_every_event() {
    let topic = unique("events");
    create_topic(&topic, 1).await;
    let delivery = KafkaDelivery::new(&bootstrap())
        .unwrap()
        .with_topic(&topic)
        .unwrap();
    // The event's own topic would not even be a valid Kafka topic name.
    let e = event("orders created/v1", Some("k"), json!({"n": 1}), Value::Null);
    delivery.deliver(&e).await.unwrap();
    let messages = read(&topic, 1, 1).await;
    assert_eq!(
        headers(&messages[0]).last().unwrap(),
        &(TOPIC_HEADER.to_owned(), "orders created/v1".to_owned())
    );
}

#[tokio::test]
async fn a_batch_of_100_gives_100_results_in_order() {
    let topic = unique("batch");
    create_topic(&topic, 1).await;
    let delivery = KafkaDelivery::new(&bootstrap()).unwrap();
    let events: Vec<_> = (0..100)
        .map(|i| {
            event(
                &topic,
                Some(&format!("k{i}")),
                json!({ "n": i }),
                Value::Null,
            )
        })
        .collect();
    let results = delivery
        .deliver_batch(&events, 1, Duration::from_secs(15))
        .await;
    assert_eq!(results.len(), 100);
    assert!(results.iter().all(Result::is_ok), "{results:?}");

    let messages = read(&topic, 1, 100).await;
    let ids: Vec<String> = messages
        .iter()
        .map(|m| {
            headers(m)
                .into_iter()
                .find(|(n, _)| n == EVENT_ID_HEADER)
                .unwrap()
                .1
        })
        .collect();
    let expected: Vec<String> = events.iter().map(|e| e.id.to_string()).collect();
    assert_eq!(ids, expected, "one partition: written in batch order");
}

#[tokio::test]
async fn an_invalid_topic_fails_only_its_event() {
    let topic = unique("mixed");
    create_topic(&topic, 1).await;
    let delivery = KafkaDelivery::new(&bootstrap()).unwrap();
    let events = vec![
        event(&topic, Some("a"), json!(1), Value::Null),
        event("orders created", Some("b"), json!(2), Value::Null),
        event(&topic, Some("c"), json!(3), Value::Null),
    ];
    let results = delivery.deliver_batch(&events, 3, WAIT).await;
    assert_eq!(results.len(), 3);
    assert!(results[0].is_ok(), "{:?}", results[0]);
    assert!(results[2].is_ok(), "{:?}", results[2]);
    let error = results[1].as_ref().unwrap_err().chain();
    assert!(error.contains("\"orders created\""), "{error}");
    assert!(error.contains("not a valid Kafka topic name"), "{error}");
    assert!(error.contains(&events[1].id.to_string()), "{error}");

    let messages = read(&topic, 1, 2).await;
    let payloads: Vec<&[u8]> = messages.iter().map(|m| m.payload().unwrap()).collect();
    assert_eq!(payloads, [b"1".as_slice(), b"3".as_slice()]);
}

#[tokio::test]
async fn an_unreachable_broker_fails_within_the_timeout() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let delivery = KafkaDelivery::new(&format!("127.0.0.1:{port}"))
        .unwrap()
        .with_timeout(Duration::from_secs(5))
        .unwrap();
    let events: Vec<_> = (0..3)
        .map(|i| event("t", None, json!(i), Value::Null))
        .collect();
    let started = tokio::time::Instant::now();
    let results = delivery
        .deliver_batch(&events, 1, Duration::from_millis(1500))
        .await;
    let took = started.elapsed();
    assert_eq!(results.len(), 3);
    for result in &results {
        let error = result.as_ref().unwrap_err().chain();
        assert!(error.contains("not acknowledged within 1.500 s"), "{error}");
    }
    assert!(
        took < Duration::from_secs(4),
        "the relay's shorter timeout applies: {took:?}"
    );
}

/// A relay with a PostgreSQL outbox delivers 50 events over 5 keys; each key's events are in
/// one partition, in the order they were written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_keeps_per_key_order_in_the_partition() {
    const KEYS: usize = 5;
    const PER_KEY: usize = 10;
    const PARTITIONS: i32 = 3;
    let topic = unique("relay");
    create_topic(&topic, PARTITIONS).await;
    let (schema, outbox) = pg_outbox().await;
    let relay = OutboxRelay::new(
        outbox.clone(),
        KafkaDelivery::new(&bootstrap()).unwrap(),
        RelayConfig::default().with_poll_interval(Duration::from_millis(50)),
    )
    .unwrap();
    relay.start().unwrap();

    for round in 0..PER_KEY {
        let mut tx = outbox.begin().await.unwrap();
        for k in 0..KEYS {
            tx.enqueue(
                OutboxMessage::new(&topic, json!({"key": k, "n": round}))
                    .ordering_key(format!("key-{k}")),
            )
            .await
            .unwrap();
        }
        tx.commit().await.unwrap();
    }
    wait_for("every event delivered", WAIT, || async {
        (relay.stats().delivered >= (KEYS * PER_KEY) as u64).then_some(())
    })
    .await;
    relay.stop().await.unwrap();

    let messages = read(&topic, PARTITIONS, KEYS * PER_KEY).await;
    let mut partition_of: HashMap<String, i32> = HashMap::new();
    let mut order: HashMap<String, Vec<u64>> = HashMap::new();
    for message in &messages {
        let k = key(message).expect("keyed");
        let payload: Value = serde_json::from_slice(message.payload().unwrap()).unwrap();
        assert_eq!(format!("key-{}", payload["key"]), k);
        let partition = *partition_of.entry(k.clone()).or_insert(message.partition());
        assert_eq!(partition, message.partition(), "{k} stays in one partition");
        order
            .entry(k)
            .or_default()
            .push(payload["n"].as_u64().unwrap());
    }
    assert_eq!(order.len(), KEYS);
    for (k, ns) in &order {
        assert_eq!(
            ns,
            &(0..PER_KEY as u64).collect::<Vec<_>>(),
            "{k}: in write order, each once"
        );
    }
    assert_eq!(relay.stats().dead_lettered, 0);
    schema.drop_schema().await;
}
