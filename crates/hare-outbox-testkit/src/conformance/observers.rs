//! What a relay's observer is told and what it logs: each event names the outbox table and the
//! model label, a retried failure is logged at WARN and a dead letter at ERROR, and a failure
//! whose mark changed nothing (the lease had gone to another relay) is neither reported nor
//! recorded.

// A suite fails its test by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hare_outbox_core::{
    Backend, DeliveryError, FnDelivery, OutboxEvent, OutboxMessage, OutboxRelay, RelayConfig,
    RelayEvent,
};
use serde_json::json;

use super::harness::{Harness, enqueue, outbox, outbox_in, plain, stored};
use crate::logs::Logs;
use crate::wait_for;

/// A delivered event and a refused one dead-lettered on its second attempt: the observer gets
/// `Delivered`, `DeliveryFailed` and `DeadLettered` with the table, the model label (from the
/// payload's `model`), attempts and the error; one WARN line for the failure and one ERROR line
/// for the dead letter, each naming the event.
pub async fn observer_events_name_table_and_model_and_failures_log_at_their_level<H: Harness>(
    h: &H,
) {
    let (logs, _guard) = Logs::capture();
    let outbox = outbox_in(h, plain("observed_outbox")).await;
    let ok = enqueue(
        h,
        &outbox,
        OutboxMessage::new("loan.updated", json!({"model": "library.Loan", "pk": 7})),
    )
    .await;
    let poison = enqueue(h, &outbox, OutboxMessage::new("poison", json!({"n": 1}))).await;

    let observed = Arc::new(Mutex::new(Vec::new()));
    let o = observed.clone();
    let relay = OutboxRelay::new(
        outbox.clone(),
        FnDelivery::new(|e: OutboxEvent| async move {
            if e.topic == "poison" {
                Err(DeliveryError::new("receiver refused poison"))
            } else {
                Ok(())
            }
        }),
        RelayConfig::default()
            .with_max_delivery_attempts(2)
            .with_retry_base(Duration::from_millis(10))
            .with_retry_max(Duration::from_millis(20)),
    )
    .unwrap()
    .with_observer(move |e: &RelayEvent| o.lock().unwrap().push(e.clone()));
    relay.poll_once().await.unwrap();
    wait_for("the dead letter", Duration::from_secs(30), || async {
        (relay.poll_once().await.unwrap().dead_lettered == 1).then_some(())
    })
    .await;

    let observed = observed.lock().unwrap().clone();
    assert_eq!(observed.len(), 3, "{observed:?}");
    match &observed[0] {
        RelayEvent::Delivered {
            event_id,
            topic,
            table,
            model,
            attempts,
            delay_seconds,
        } => {
            assert_eq!(*event_id, ok.id);
            assert_eq!(topic, "loan.updated");
            assert_eq!(table, "observed_outbox");
            assert_eq!(model.as_deref(), Some("library.Loan"));
            assert_eq!(*attempts, 0);
            assert!(*delay_seconds >= 0.0);
        }
        other => panic!("expected Delivered, got {other:?}"),
    }
    match &observed[1] {
        RelayEvent::DeliveryFailed {
            event_id,
            topic,
            table,
            model,
            attempts,
            error,
            next_attempt_at,
        } => {
            assert_eq!(*event_id, poison.id);
            assert_eq!(topic, "poison");
            assert_eq!(table, "observed_outbox");
            assert_eq!(*model, None, "an event without a model label");
            assert_eq!(*attempts, 1);
            assert!(error.contains("receiver refused poison"), "{error}");
            assert!(*next_attempt_at > poison.created_at);
        }
        other => panic!("expected DeliveryFailed, got {other:?}"),
    }
    match &observed[2] {
        RelayEvent::DeadLettered {
            event_id,
            table,
            attempts,
            error,
            ..
        } => {
            assert_eq!(*event_id, poison.id);
            assert_eq!(table, "observed_outbox");
            assert_eq!(*attempts, 2);
            assert!(error.contains("receiver refused poison"), "{error}");
        }
        other => panic!("expected DeadLettered, got {other:?}"),
    }

    let id = poison.id.to_string();
    let at = |level: &str, needle: &str| logs.lines(level, needle);
    assert_eq!(at("WARN", "delivery failed").len(), 1, "{}", logs.text());
    assert!(
        at("WARN", &id)
            .iter()
            .any(|l| l.contains("delivery failed"))
    );
    assert_eq!(
        at("ERROR", "event dead-lettered").len(),
        1,
        "{}",
        logs.text()
    );
    assert!(at("ERROR", &id).iter().any(|l| l.contains("dead-lettered")));
    assert!(at("ERROR", "delivery failed").is_empty());
}

/// A delivery fails after its lease went to another relay: the failure mark changes nothing, so
/// the observer hears nothing and the event's attempts stay 0.
pub async fn a_failure_whose_mark_changed_nothing_is_not_reported<H: Harness>(h: &H) {
    let outbox = outbox(h).await;
    let event = enqueue(h, &outbox, OutboxMessage::new("t", json!(1))).await;
    let observed = Arc::new(Mutex::new(Vec::new()));
    let o = observed.clone();
    let backend = h.backend();
    let relay = OutboxRelay::new(
        outbox.clone(),
        FnDelivery::new(move |_e: OutboxEvent| {
            let backend = backend.clone();
            async move {
                // Meanwhile the lease went to another relay.
                let mut tx = backend.begin().await.unwrap();
                H::execute_on(&mut tx, "UPDATE outbox SET leased_by = 'another-relay'").await;
                backend.commit(tx).await.unwrap();
                Err(DeliveryError::new("refused"))
            }
        }),
        RelayConfig::default(),
    )
    .unwrap()
    .with_observer(move |e: &RelayEvent| o.lock().unwrap().push(e.clone()));
    relay.poll_once().await.unwrap();
    assert!(observed.lock().unwrap().is_empty(), "{observed:?}");
    assert_eq!(
        stored(&outbox, &event).await.attempts,
        0,
        "the failure was not recorded either"
    );
}
