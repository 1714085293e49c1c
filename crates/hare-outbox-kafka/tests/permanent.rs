//! How Kafka's answers count for the relay: a record larger than the producer may send is a
//! permanent failure (the relay dead-letters it at once), while an unreachable cluster is an
//! outage for the circuit breaker.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{bootstrap, create_topic, event, free_port, unique};
use hare_outbox_core::{Delivery, DeliveryErrorKind};
use hare_outbox_kafka::KafkaDelivery;
use hare_outbox_kafka::rdkafka::ClientConfig;
use hare_outbox_kafka::rdkafka::producer::FutureProducer;
use serde_json::{Value, json};

#[tokio::test]
async fn a_record_too_large_is_permanent_and_a_small_one_goes_out() {
    let topic = unique("too_large");
    create_topic(&topic, 1).await;
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("message.max.bytes", "2000")
        .set("message.timeout.ms", "10000")
        .create()
        .unwrap();
    let delivery = KafkaDelivery::from_producer(producer)
        .with_timeout(Duration::from_secs(10))
        .unwrap();
    let large = event(
        &topic,
        Some("k"),
        json!({"blob": "x".repeat(10_000)}),
        Value::Null,
    );
    let small = event(&topic, Some("k"), json!({"n": 1}), Value::Null);
    let results = delivery
        .deliver_batch(&[large, small], 2, Duration::from_secs(10))
        .await;
    let error = results[0].as_ref().unwrap_err();
    assert_eq!(
        error.kind(),
        DeliveryErrorKind::Permanent,
        "{}",
        error.chain()
    );
    assert!(results[1].is_ok(), "{:?}", results[1]);
}

#[tokio::test]
async fn an_unreachable_cluster_is_an_outage() {
    let delivery = KafkaDelivery::new(&format!("127.0.0.1:{}", free_port()))
        .unwrap()
        .with_timeout(Duration::from_secs(1))
        .unwrap();
    let e = event("t", None, json!({}), Value::Null);
    let error = delivery.deliver(&e).await.unwrap_err();
    assert!(
        error.kind().is_outage(),
        "{:?}: {}",
        error.kind(),
        error.chain()
    );
}
