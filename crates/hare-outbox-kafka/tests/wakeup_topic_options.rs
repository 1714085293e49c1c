//! KafkaWakeup's topic options against a real Kafka-protocol broker (tansu): a topic it may not
//! create, an explicit replication factor, and the values refused.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{WAIT, bootstrap, create_topic, unique};
use hare_outbox_core::{Error, Wakeup};
use hare_outbox_kafka::KafkaWakeup;
use hare_outbox_kafka::rdkafka::ClientConfig;
use hare_outbox_kafka::rdkafka::admin::AdminClient;
use hare_outbox_kafka::rdkafka::client::DefaultClientContext;

fn topic_exists(name: &str) -> bool {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .unwrap();
    let metadata = admin
        .inner()
        .fetch_metadata(Some(name), Duration::from_secs(5))
        .unwrap();
    metadata
        .topics()
        .iter()
        .any(|t| t.name() == name && t.error().is_none() && !t.partitions().is_empty())
}

#[tokio::test]
async fn without_create_topic_an_existing_topic_carries_signals() {
    let signal_topic = unique("nocreate");
    create_topic(&signal_topic, 1).await;
    let wakeup = KafkaWakeup::new(&bootstrap())
        .unwrap()
        .with_topic(&signal_topic)
        .unwrap()
        .with_create_topic(false);
    assert!(!wakeup.creates_topic());
    let mut sub = wakeup.subscribe().await.unwrap();
    wakeup.signal(&["orders".to_owned()]).await.unwrap();
    assert_eq!(
        hare_outbox_testkit::next_topics(&mut sub, WAIT).await,
        ["orders"]
    );
    wakeup.close().await.unwrap();
}

#[tokio::test]
async fn a_replication_factor_is_used_when_the_topic_is_created() {
    let signal_topic = unique("rf");
    let wakeup = KafkaWakeup::new(&bootstrap())
        .unwrap()
        .with_replication_factor(1)
        .unwrap()
        .with_topic(&signal_topic)
        .unwrap();
    assert_eq!(
        wakeup.replication_factor(),
        Some(1),
        "kept across with_topic"
    );
    assert!(wakeup.creates_topic(), "creating is the default");
    wakeup.signal(&["t".to_owned()]).await.unwrap();
    assert!(topic_exists(&signal_topic));
    wakeup.close().await.unwrap();
}

#[test]
fn replication_factors_outside_1_to_32767_are_refused() {
    for bad in [0, -1, 32768] {
        match KafkaWakeup::new("127.0.0.1:9092")
            .unwrap()
            .with_replication_factor(bad)
        {
            Err(Error::Configuration(message)) => {
                assert!(message.contains(&bad.to_string()), "{message}");
                assert!(message.contains("1 to 32767"), "{message}");
            }
            other => panic!("{bad}: expected a configuration error, got {other:?}"),
        }
    }
    assert!(
        KafkaWakeup::new("127.0.0.1:9092")
            .unwrap()
            .with_replication_factor(32767)
            .is_ok()
    );
}
