//! Scenarios every wake-up runs the same way, whatever its transport.

use std::time::{Duration, Instant};

use hare_outbox_core::{Backend, Outbox, OutboxMessage, OutboxRelay};
use serde_json::json;

use crate::wait_for;

/// Waits for `relay`'s first poll, then commits `rounds` events on `topic` one at a time through
/// [`Outbox::begin`] (payload `{"round": n}`) and asserts each is delivered within `within` of
/// its commit. Give the relay a poll interval far longer than `within`, so only the outbox's
/// wake-up can explain the delivery.
///
/// # Panics
/// When a write fails or a delivery takes longer than `within` (bounded at 10 s per round).
pub async fn assert_relay_wakes_on_each_commit<B: Backend>(
    outbox: &Outbox<B>,
    relay: &OutboxRelay<B>,
    topic: &str,
    rounds: u64,
    within: Duration,
) {
    wait_for("the first poll", Duration::from_secs(10), || async {
        (relay.stats().polls >= 1).then_some(())
    })
    .await;
    let delivered_before = relay.stats().delivered;
    for round in 1..=rounds {
        let mut tx = outbox.begin().await.expect("begin");
        tx.enqueue(OutboxMessage::new(topic, json!({ "round": round })))
            .await
            .expect("enqueue");
        let committed = Instant::now();
        tx.commit().await.expect("commit");
        wait_for(
            "the woken relay's delivery",
            Duration::from_secs(10),
            || async { (relay.stats().delivered >= delivered_before + round).then_some(()) },
        )
        .await;
        let latency = committed.elapsed();
        assert!(
            latency < within,
            "round {round}: delivered {latency:?} after the commit; woken by the signal it takes less than {within:?}"
        );
    }
}
