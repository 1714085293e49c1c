//! Relay observer events carry the outbox table and the model label, and each outcome is logged at
//! its level: a retried failure at WARN, a dead letter at ERROR.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hare_outbox_core::{
    DeliveryError, FnDelivery, Outbox, OutboxEvent, OutboxMessage, OutboxRelay, OutboxTable,
    RelayConfig, RelayEvent,
};
use hare_outbox_sqlite::SqliteBackend;
use hare_outbox_testkit::logs::Logs;
use hare_outbox_testkit::sqlite::TestDb;
use hare_outbox_testkit::wait_for;
use serde_json::json;

#[tokio::test(flavor = "current_thread")]
async fn observer_events_name_table_and_model_and_failures_log_at_their_level() {
    let (logs, _guard) = Logs::capture();
    let db = TestDb::new(2).await;
    let outbox = Outbox::new(
        SqliteBackend::new(db.pool.clone()),
        OutboxTable::parse("observed_outbox").unwrap(),
    );
    outbox.migrate().await.unwrap();
    let mut conn = db.pool.acquire().await.unwrap();
    let ok = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("loan.updated", json!({"model": "library.Loan", "pk": 7})),
        )
        .await
        .unwrap();
    let poison = outbox
        .enqueue(&mut conn, OutboxMessage::new("poison", json!({"n": 1})))
        .await
        .unwrap();
    drop(conn);

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
    assert_eq!(
        logs.lines("WARN", "delivery failed").len(),
        1,
        "{}",
        logs.text()
    );
    assert!(
        logs.lines("WARN", &id)
            .iter()
            .any(|l| l.contains("delivery failed"))
    );
    assert_eq!(
        logs.lines("ERROR", "event dead-lettered").len(),
        1,
        "{}",
        logs.text()
    );
    assert!(
        logs.lines("ERROR", &id)
            .iter()
            .any(|l| l.contains("dead-lettered"))
    );
    assert!(logs.lines("ERROR", "delivery failed").is_empty());
}

#[tokio::test(flavor = "current_thread")]
async fn a_failure_whose_mark_changed_nothing_is_not_reported() {
    let db = TestDb::new(2).await;
    let outbox = Outbox::new(
        SqliteBackend::new(db.pool.clone()),
        OutboxTable::parse("outbox").unwrap(),
    );
    outbox.migrate().await.unwrap();
    let mut conn = db.pool.acquire().await.unwrap();
    let event = outbox
        .enqueue(&mut conn, OutboxMessage::new("t", json!(1)))
        .await
        .unwrap();
    drop(conn);

    let observed = Arc::new(Mutex::new(Vec::new()));
    let o = observed.clone();
    let pool = db.pool.clone();
    let relay = OutboxRelay::new(
        outbox.clone(),
        FnDelivery::new(move |_e: OutboxEvent| {
            let pool = pool.clone();
            async move {
                // Meanwhile the lease went to another relay.
                sqlx::query("UPDATE outbox SET leased_by = 'another-relay'")
                    .execute(&pool)
                    .await
                    .unwrap();
                Err(DeliveryError::new("refused"))
            }
        }),
        RelayConfig::default(),
    )
    .unwrap()
    .with_observer(move |e: &RelayEvent| o.lock().unwrap().push(e.clone()));
    relay.poll_once().await.unwrap();
    assert!(observed.lock().unwrap().is_empty(), "{observed:?}");
    let stored = outbox.get(event.id).await.unwrap().unwrap();
    assert_eq!(stored.attempts, 0, "the failure was not recorded either");
}
