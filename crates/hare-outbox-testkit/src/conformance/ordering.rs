//! Order a backend keeps whatever its locking: strict messages written in sequence order and
//! refused without a key, sequences never reused after a clean-up, a running relay holding back
//! only the key of a dead letter until it is retried, and a wake-up given to one call signalled
//! after the commit instead of the outbox's own.

// A suite fails its test by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hare_outbox_core::{
    DeliveryError, Error, FnDelivery, InProcessWakeup, Outbox, OutboxEvent, OutboxMessage,
    OutboxRelay, Wakeup,
};
use serde_json::json;

use super::harness::{Cell, Harness, config, enqueue, message, outbox, outbox_in, plain};
use crate::{next_topics, wait_for};

/// On a table with strict key order, a strict message and an `enqueue_many` in one transaction
/// get sequences in the given order; a strict message without an ordering key is refused naming
/// `ordering_key` and `strict_order`, and writes nothing.
pub async fn strict_messages_keep_sequence_order_and_need_a_key<H: Harness>(h: &H) {
    let outbox = outbox_in(h, plain("outbox").with_strict_key_order(true)).await;
    let mut tx = outbox.begin().await.unwrap();
    let a = tx
        .enqueue(
            OutboxMessage::new("a", json!(1))
                .ordering_key("K")
                .strict_order(),
        )
        .await
        .unwrap();
    let many = tx
        .enqueue_many([
            OutboxMessage::new("b", json!(2)).ordering_key("K"),
            OutboxMessage::new("c", json!(3)),
        ])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert!(a.sequence < many[0].sequence && many[0].sequence < many[1].sequence);

    for outbox in [outbox.clone(), Outbox::new(h.backend(), plain("outbox"))] {
        let mut conn = h.acquire().await;
        let error = outbox
            .enqueue(&mut conn, OutboxMessage::new("d", json!(4)).strict_order())
            .await
            .unwrap_err();
        match error {
            Error::Validation { field, message } => {
                assert_eq!(field, "ordering_key");
                assert!(message.contains("strict_order"), "{message}");
            }
            other => panic!("expected a validation error, got {other:?}"),
        }
    }
    assert_eq!(
        h.scalar("SELECT count(*) FROM outbox").await,
        3,
        "the refused messages wrote nothing"
    );
}

/// Deleting every row does not bring a sequence back.
pub async fn a_sequence_is_never_reused_after_cleanup<H: Harness>(h: &H) {
    let outbox = outbox(h).await;
    let mut last = 0;
    for n in 0..3 {
        last = enqueue(h, &outbox, message("t", None, n)).await.sequence;
    }
    h.execute("DELETE FROM outbox").await;
    let next = enqueue(h, &outbox, message("t", None, 4)).await;
    assert!(next.sequence > last, "{} after {last}", next.sequence);
}

/// 20 events over 4 keys, one refused until it is dead: a running relay delivers the 15 events
/// of the other keys, holds back the 4 behind the dead letter, and once the dead letter is
/// retried (now deliverable) delivers its key in order.
pub async fn a_poison_event_holds_back_only_its_key<H: Harness>(h: &H) {
    let outbox = outbox(h).await;
    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue_many((0..20).map(|n| {
        let topic = if n == 1 { "poison" } else { "ok" };
        OutboxMessage::new(topic, json!({"n": n})).ordering_key(format!("k{}", n % 4))
    }))
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let seen = Arc::new(Mutex::new(Vec::<i64>::new()));
    let sink = seen.clone();
    let relay = OutboxRelay::new(
        outbox.clone(),
        FnDelivery::new(move |e: OutboxEvent| {
            let sink = sink.clone();
            async move {
                if e.topic == "poison" {
                    return Err(DeliveryError::new("cannot parse"));
                }
                let n = e.payload["n"].as_i64().unwrap_or(-1);
                sink.lock().unwrap().push(n);
                Ok(())
            }
        }),
        config("relay")
            .with_poll_interval(Duration::from_millis(50))
            .with_max_delivery_attempts(3),
    )
    .unwrap();
    relay.start().unwrap();
    wait_for(
        "the other keys drained and the poison dead",
        Duration::from_secs(20),
        || async {
            let b = relay.journal().backlog(&[]).await.unwrap();
            (b.dead_lettered == 1 && seen.lock().unwrap().len() == 15).then_some(())
        },
    )
    .await;
    let mut got = seen.lock().unwrap().clone();
    got.sort_unstable();
    let expected: Vec<i64> = (0..20).filter(|n| n % 4 != 1).collect();
    assert_eq!(
        got, expected,
        "k1 (1, 5, 9, 13, 17) waits behind its dead letter"
    );
    let topic = [("topic", Cell::Text(Some("ok".into())))];
    h.update(outbox.table(), "topic = 'poison'", &topic).await;
    let retried = relay.journal().retry_dead_lettered(&[], &[]).await.unwrap();
    assert_eq!(retried, 1);
    wait_for("k1 drained", Duration::from_secs(20), || async {
        (seen.lock().unwrap().len() == 20).then_some(())
    })
    .await;
    relay.stop().await.unwrap();
    let order: Vec<i64> = seen
        .lock()
        .unwrap()
        .iter()
        .copied()
        .filter(|n| n % 4 == 1)
        .collect();
    assert_eq!(order, [1, 5, 9, 13, 17]);
}

/// A wake-up given to `enqueue_with` / `enqueue_many_with` is signalled after the commit with
/// the topics written through it (nothing for a rolled-back transaction); the outbox's own
/// wake-up gets only the topics of plain enqueues.
pub async fn a_per_call_wakeup_is_signalled_after_commit_instead_of_the_outbox_one<H: Harness>(
    h: &H,
) {
    const WAIT: Duration = Duration::from_secs(10);
    let own = InProcessWakeup::new();
    let outbox = outbox(h).await.with_wakeup(own.clone()).unwrap();
    let per_call = InProcessWakeup::new();
    let shared: Arc<dyn Wakeup> = Arc::new(per_call.clone());
    let mut own_sub = own.subscribe().await.unwrap();
    let mut call_sub = per_call.subscribe().await.unwrap();

    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue_with(OutboxMessage::new("rolled.back", json!(0)), shared.clone())
        .await
        .unwrap();
    tx.rollback().await.unwrap();

    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue_with(OutboxMessage::new("billing.paid", json!(1)), shared.clone())
        .await
        .unwrap();
    tx.enqueue_many_with(
        [
            OutboxMessage::new("billing.refunded", json!(2)),
            OutboxMessage::new("billing.paid", json!(3)),
        ],
        shared.clone(),
    )
    .await
    .unwrap();
    tx.enqueue(OutboxMessage::new("orders.created", json!(4)))
        .await
        .unwrap();
    assert_eq!(tx.pending_topics(), ["orders.created"]);
    tx.commit().await.unwrap();

    // The first signal of each: the rolled-back write sent none.
    assert_eq!(
        next_topics(&mut call_sub, WAIT).await,
        ["billing.paid", "billing.refunded"]
    );
    assert_eq!(next_topics(&mut own_sub, WAIT).await, ["orders.created"]);
}
