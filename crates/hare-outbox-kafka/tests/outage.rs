//! KafkaDelivery through a broker outage: a tansu broker of the test's own, reached only through a
//! TCP proxy that the test cuts in the middle of a relay run and then restores.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use common::{Tansu, create_topic_at, free_port, key, pg_outbox, reader_at, unique};
use hare_outbox_core::{BreakerConfig, OutboxRelay, RelayConfig};
use hare_outbox_kafka::KafkaDelivery;
use hare_outbox_kafka::rdkafka::Message;
use hare_outbox_kafka::rdkafka::consumer::Consumer;
use hare_outbox_testkit::net::DelayProxy;
use hare_outbox_testkit::outage::{
    FailureLog, assert_all_arrived_in_key_order, spawn_keyed_writer,
};
use hare_outbox_testkit::wait_for;
use serde_json::Value;

/// The whole test, outage included, finishes within this.
const BOUND: Duration = Duration::from_secs(60);

/// DESIGN §9: the broker connection cut in the middle of a run → failures recorded with backoff
/// (attempts grow, `last_error` says why), delivery resumes by itself once the line is back, every
/// event arrives, per-key order holds. The producer's `message.timeout.ms` (the delivery's timeout,
/// 2 s here) is what makes librdkafka give a message up while the broker is unreachable; without
/// it librdkafka would keep retrying internally and the relay would only see its own timeout.
/// After the outage tansu refuses the idempotent producer (`ProducerFenced`): the delivery has to
/// replace it for the run to finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_mid_run_recovers_and_keeps_every_event_in_key_order() {
    tokio::time::timeout(BOUND, outage())
        .await
        .expect("the outage test finishes within its bound");
}

async fn outage() {
    const KEYS: usize = 10;
    const ROUNDS: u64 = 20;
    const PARTITIONS: i32 = 3;
    let retry_base = Duration::from_millis(200);
    let retry_max = Duration::from_secs(1);

    // The broker advertises the proxy's port, so every connection librdkafka makes — bootstrap and
    // partition leader alike — goes through the proxy.
    let upstream = free_port();
    let proxy = DelayProxy::start(upstream, Duration::ZERO).await;
    let broker = Tansu::start_on(upstream, proxy.port).await;
    let bootstrap = broker.bootstrap();
    let topic = unique("outage");
    create_topic_at(&bootstrap, &topic, PARTITIONS).await;

    let (schema, outbox) = pg_outbox().await;
    let delivery = KafkaDelivery::new(&bootstrap)
        .unwrap()
        .with_timeout(Duration::from_secs(2))
        .unwrap();
    let failures = FailureLog::new();
    let relay = OutboxRelay::new(
        outbox.clone(),
        delivery,
        RelayConfig::default()
            .with_poll_interval(Duration::from_millis(50))
            .with_retry_base(retry_base)
            .with_retry_max(retry_max)
            .with_max_delivery_attempts(10_000)
            .with_delivery_timeout(Duration::from_secs(5))
            .with_lease(Duration::from_secs(20))
            // The back-off itself is what this test watches, not the circuit breaker.
            .with_breaker(BreakerConfig::disabled()),
    )
    .unwrap()
    .with_observer(failures.observer());
    relay.start().unwrap();

    let writer = spawn_keyed_writer(
        outbox.clone(),
        topic.clone(),
        KEYS,
        ROUNDS,
        Duration::from_millis(50),
    );
    wait_for("some events delivered before the outage", BOUND, || async {
        (relay.stats().delivered >= 30).then_some(())
    })
    .await;

    proxy.sever();
    // Each attempt fails after the 2 s message timeout; three attempts of one event show the
    // backoff at work.
    wait_for("an event failing three times", BOUND, || async {
        (failures.max_attempts() >= 3).then_some(())
    })
    .await;
    let (attempts, last_error): (i32, String) = sqlx::query_as(
        "SELECT attempts, last_error FROM outbox \
         WHERE published_at IS NULL AND attempts > 0 ORDER BY attempts DESC LIMIT 1",
    )
    .fetch_one(&schema.pool)
    .await
    .unwrap();
    assert!(attempts >= 3, "attempts recorded on the event: {attempts}");
    assert!(
        last_error.contains("Kafka") && last_error.contains(&topic),
        "last_error says why: {last_error}"
    );
    let delivered_during_outage = relay.stats().delivered;
    proxy.restore();

    let written = writer.await.unwrap();
    wait_for("every event delivered after the outage", BOUND, || async {
        (relay.stats().delivered >= written.len() as u64).then_some(())
    })
    .await;
    relay.stop().await.unwrap();
    assert!(relay.stats().delivered > delivered_during_outage);
    assert_eq!(relay.stats().dead_lettered, 0);
    failures.assert_backoff(retry_base, retry_max, 3);

    // Read every partition to its end; keys stay in one partition, so partition by partition is
    // the order each key was written in.
    // Read until every event was seen, then on to the end of each partition (duplicates written
    // by retries come after their original).
    let consumer = reader_at(&bootstrap, &topic, PARTITIONS);
    let mut by_partition: HashMap<i32, Vec<(String, String, u64)>> = HashMap::new();
    let mut partition_of: HashMap<String, i32> = HashMap::new();
    let mut seen = HashSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let mut ends: Option<HashMap<i32, i64>> = None;
    loop {
        if seen.len() == written.len() && ends.is_none() {
            let mut high_marks = HashMap::new();
            for partition in 0..PARTITIONS {
                let (_, high) = consumer
                    .fetch_watermarks(&topic, partition, Duration::from_secs(10))
                    .unwrap();
                high_marks.insert(partition, high);
            }
            ends = Some(high_marks);
        }
        if let Some(ends) = &ends
            && (0..PARTITIONS).all(|p| {
                let read = by_partition.get(&p).map_or(0, Vec::len) as i64;
                read >= ends[&p]
            })
        {
            break;
        }
        let Ok(message) = tokio::time::timeout_at(deadline, consumer.recv()).await else {
            break;
        };
        let message = message.unwrap().detach();
        let k = key(&message).expect("keyed");
        let payload: Value = serde_json::from_slice(message.payload().unwrap()).unwrap();
        let id = common::headers(&message)
            .into_iter()
            .find(|(name, _)| name == hare_outbox_core::EVENT_ID_HEADER)
            .map(|(_, value)| value)
            .expect("event id header");
        let partition = *partition_of.entry(k.clone()).or_insert(message.partition());
        assert_eq!(partition, message.partition(), "{k} stays in one partition");
        seen.insert(id.clone());
        by_partition
            .entry(partition)
            .or_default()
            .push((id, k, payload["n"].as_u64().unwrap()));
    }
    let arrived: Vec<_> = by_partition.into_values().flatten().collect();
    let read = assert_all_arrived_in_key_order(&written, &arrived);
    eprintln!(
        "kafka outage: {read} messages for {} events, {} failed attempts, most attempts of one \
         event {}; last error: {last_error}",
        written.len(),
        relay.stats().failed,
        failures.max_attempts()
    );
    schema.drop_schema().await;
}
