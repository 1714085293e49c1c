//! The relay's circuit breaker with the Redis Streams delivery: the shared Redis cut off for
//! 20 s mid-drain through the testkit's severable proxy (the server itself keeps running for the
//! other tests).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::{DelayProxy, connect, del, field, pg_outbox, port, unique, xrange};
use hare_outbox_core::{BreakerConfig, BreakerState, OutboxRelay, RelayConfig};
use hare_outbox_redis::RedisStreamsDelivery;
use hare_outbox_testkit::outage::{
    CountingDelivery, assert_all_arrived_in_key_order, spawn_keyed_writer,
};
use hare_outbox_testkit::wait_for;

/// 100 events over 10 keys with 3 attempts; Redis unreachable for 20 s while they drain: the
/// destination opens, only probes go out meanwhile, and afterwards every event arrives in key
/// order with none dead-lettered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cut_off_for_20_s_mid_drain_loses_no_event_and_burns_no_attempts() {
    const KEYS: usize = 10;
    const ROUNDS: u64 = 10;
    let proxy = DelayProxy::start(port(), Duration::ZERO).await;
    let (schema, outbox) = pg_outbox().await;
    let stream = unique("breaker");
    let delivery = RedisStreamsDelivery::new(&format!("redis://127.0.0.1:{}/0", proxy.port))
        .unwrap()
        .with_stream(&stream)
        .unwrap()
        .with_timeout(Duration::from_secs(1));
    let (delivery, sends) = CountingDelivery::new(delivery);
    let relay = OutboxRelay::new(
        outbox.clone(),
        delivery,
        RelayConfig::default()
            .with_poll_interval(Duration::from_millis(50))
            .with_retry_base(Duration::from_millis(200))
            .with_retry_max(Duration::from_secs(5))
            .with_max_delivery_attempts(3)
            .with_max_events_per_key(2)
            .with_batch_size(10)
            .with_delivery_timeout(Duration::from_secs(3))
            .with_breaker(
                BreakerConfig::default()
                    .with_probe_interval(Duration::from_millis(500))
                    .with_probe_interval_max(Duration::from_secs(2)),
            ),
    )
    .unwrap();
    let destinations = relay.destinations();
    relay.start().unwrap();
    let writer = spawn_keyed_writer(
        outbox.clone(),
        "orders".to_owned(),
        KEYS,
        ROUNDS,
        Duration::from_millis(100),
    );
    wait_for(
        "a first part delivered",
        Duration::from_secs(10),
        || async { (relay.stats().delivered >= 10).then_some(()) },
    )
    .await;
    proxy.sever();
    let cut = Instant::now();
    let outage = Duration::from_secs(20);
    let opened = wait_for("the destination to open", Duration::from_secs(10), || {
        let status = destinations.status("delivery");
        async move { status.filter(|s| s.state != BreakerState::Closed) }
    })
    .await;
    assert!(opened.reason.is_some(), "{opened:?}");
    tokio::time::sleep(outage.saturating_sub(cut.elapsed())).await;
    let (calls, events_sent) = sends.since(cut);
    proxy.restore();
    let written = writer.await.unwrap();

    wait_for("every event delivered", Duration::from_secs(30), || async {
        (relay.stats().delivered >= KEYS as u64 * ROUNDS).then_some(())
    })
    .await;
    relay.stop().await.unwrap();

    let mut conn = connect(&common::url()).await;
    let arrived: Vec<(String, String, u64)> = xrange(&mut conn, &stream)
        .await
        .iter()
        .map(|entry| {
            let payload: serde_json::Value =
                serde_json::from_str(&field(entry, "payload")).unwrap();
            (
                field(entry, "id"),
                field(entry, "ordering_key"),
                payload["n"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_all_arrived_in_key_order(&written, &arrived);
    let (dead, most): (i64, i32) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE dead_lettered_at IS NOT NULL), coalesce(max(attempts), 0) FROM outbox",
    )
    .fetch_one(&schema.pool)
    .await
    .unwrap();
    assert_eq!(dead, 0, "no event dead-lettered");
    assert!(most <= 2, "attempts were frozen during the outage: {most}");
    // One failing batch (or two, pipelined) opens the destination; then one probe at a time,
    // at least 0.45 s apart.
    let bound = 2 + (outage.as_secs_f64() / 0.45).ceil() as usize + 1;
    eprintln!(
        "Redis cut off for {outage:?}: {calls} sends ({events_sent} events) reached the proxy"
    );
    assert!(
        calls <= bound,
        "{calls} sends during the outage; at most {bound} expected"
    );
    assert_eq!(
        destinations.status("delivery").unwrap().state,
        BreakerState::Closed
    );
    del(&mut conn, &[&stream]).await;
    schema.drop_schema().await;
}
