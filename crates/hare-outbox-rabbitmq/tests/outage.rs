//! RabbitMqDelivery through a broker outage: the delivery reaches the shared broker only through a
//! TCP proxy, which the test cuts in the middle of a relay run and then restores (the broker
//! itself keeps running for the other tests).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{Admin, broker_port, pg_outbox, text, unique, url_via};
use hare_outbox_core::{BreakerConfig, OutboxRelay, RelayConfig};
use hare_outbox_rabbitmq::lapin::options::BasicGetOptions;
use hare_outbox_rabbitmq::lapin::types::ShortString;
use hare_outbox_rabbitmq::{ORDERING_KEY_HEADER, RabbitMqDelivery};
use hare_outbox_testkit::net::DelayProxy;
use hare_outbox_testkit::outage::{
    FailureLog, assert_all_arrived_in_key_order, spawn_keyed_writer,
};
use hare_outbox_testkit::wait_for;
use serde_json::Value;

/// The whole test, outage included, finishes within this.
const BOUND: Duration = Duration::from_secs(60);

/// DESIGN §9: the broker connection cut in the middle of a run → failures recorded with backoff
/// (attempts grow, `last_error` says why), delivery resumes by itself once the line is back
/// (the delivery opens a new connection), every event arrives, per-key order holds. The
/// circuit breaker is off here, so that the back-off itself is what runs; `breaker.rs` has the
/// same cut with the breaker on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_mid_run_recovers_and_keeps_every_event_in_key_order() {
    tokio::time::timeout(BOUND, outage())
        .await
        .expect("the outage test finishes within its bound");
}

async fn outage() {
    const KEYS: usize = 10;
    const ROUNDS: u64 = 20;
    let retry_base = Duration::from_millis(200);
    let retry_max = Duration::from_secs(1);

    let admin = Admin::connect().await;
    // The default exchange routes each event to the queue named like its topic.
    let queue = unique("hare_t_outage");
    admin.queue(&queue, None).await;
    let proxy = DelayProxy::start(broker_port(), Duration::ZERO).await;
    let delivery = RabbitMqDelivery::new(&url_via(proxy.port))
        .unwrap()
        .with_timeout(Duration::from_secs(2));

    let (schema, outbox) = pg_outbox().await;
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
            .with_breaker(BreakerConfig::disabled()),
    )
    .unwrap()
    .with_observer(failures.observer());
    relay.start().unwrap();

    let writer = spawn_keyed_writer(
        outbox.clone(),
        queue.clone(),
        KEYS,
        ROUNDS,
        Duration::from_millis(50),
    );
    wait_for("some events delivered before the outage", BOUND, || async {
        (relay.stats().delivered >= 30).then_some(())
    })
    .await;

    proxy.sever();
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
        last_error.contains(&format!("127.0.0.1:{}", proxy.port)),
        "last_error says why, naming the broker: {last_error}"
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

    // Every confirmed message is on the queue by now: read it to the end, in queue order.
    let mut arrived = Vec::new();
    while let Some(message) = admin
        .channel
        .basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
    {
        let properties = &message.delivery.properties;
        let id = properties
            .message_id()
            .as_ref()
            .map(ShortString::to_string)
            .expect("message id");
        let headers = properties.headers().clone().expect("headers");
        let key = headers
            .inner()
            .get(ORDERING_KEY_HEADER)
            .map(text)
            .expect("ordering key header");
        let payload: Value = serde_json::from_slice(&message.delivery.data).unwrap();
        arrived.push((id, key, payload["n"].as_u64().unwrap()));
    }
    let read = assert_all_arrived_in_key_order(&written, &arrived);
    eprintln!(
        "rabbitmq outage: {read} messages for {} events, {} failed attempts, most attempts of \
         one event {}; last error: {last_error}",
        written.len(),
        relay.stats().failed,
        failures.max_attempts()
    );
    admin.delete_queue(&queue).await;
    schema.drop_schema().await;
}
