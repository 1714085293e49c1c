//! Full relay cycles with `OutboxRelay` and `FnDelivery` on the SQLite backend.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chrono::Utc;
use hare_outbox_core::backend::{EventFailure, EventLeaseParams, EventMarkFailedParams};
use hare_outbox_core::{Backend, OutboxEvent, OutboxRelay};
use hare_outbox_sqlite::SqliteBackend;
use hare_outbox_testkit::wait_for;
use uuid::Uuid;

use crate::common::{config, drain, enqueue, message, outbox_on, recording, setup, stored};

fn ids(events: &[OutboxEvent]) -> HashSet<Uuid> {
    events.iter().map(|e| e.id).collect()
}

fn assert_one_per_key(batch: &[OutboxEvent]) {
    let mut keys = HashSet::new();
    for event in batch {
        if let Some(key) = &event.ordering_key {
            assert!(
                keys.insert(key.clone()),
                "two events of key {key} in one batch: {batch:#?}"
            );
        }
    }
}

#[tokio::test]
async fn with_one_event_per_key_the_relay_delivers_in_order_retries_dead_letters_and_holds_back_the_dead_key()
 {
    let (db, outbox) = setup("hare_outbox").await;
    let a1 = enqueue(&outbox, message("orders", Some("a"), 1)).await;
    let b1 = enqueue(&outbox, message("orders", Some("b"), 1)).await;
    let p1 = enqueue(&outbox, message("poison", Some("p"), 1)).await;
    let a2 = enqueue(&outbox, message("orders", Some("a"), 2)).await;
    let b2 = enqueue(&outbox, message("orders", Some("b"), 2)).await;
    let c = enqueue(&outbox, message("orders", None, 1)).await;
    let p2 = enqueue(&outbox, message("orders", Some("p"), 2)).await;
    let q = enqueue(&outbox, message("orders", Some("q"), 1)).await;

    let (seen, delivery) = recording();
    let relay = OutboxRelay::<SqliteBackend>::new(
        outbox.clone(),
        delivery,
        // max_events_per_key = 1: the seed's one event per key per batch, today's behaviour.
        config("relay-1")
            .with_max_events_per_key(1)
            .with_max_delivery_attempts(2)
            .with_retry_base(Duration::from_secs(60)),
    )
    .expect("relay");

    // Poll 1: the first event of every key and the unordered one; p1 fails.
    let before = Utc::now();
    let outcome = relay.poll_once().await.expect("poll 1");
    assert_eq!(
        (
            outcome.leased,
            outcome.delivered,
            outcome.failed,
            outcome.dead_lettered
        ),
        (5, 4, 1, 0)
    );
    let batch = drain(&seen);
    assert_one_per_key(&batch);
    assert_eq!(
        ids(&batch),
        ids(&[a1.clone(), b1.clone(), p1.clone(), c.clone(), q.clone()])
    );
    let failed = stored(&outbox, &p1).await;
    assert_eq!(failed.attempts, 1);
    assert_eq!(failed.last_error.as_deref(), Some("refused: poison"));
    let next = failed.next_attempt_at.expect("next attempt set");
    assert!(
        next > before + chrono::Duration::seconds(50),
        "{next} after {before}"
    );
    assert_eq!(
        (
            failed.lease_until,
            failed.leased_by,
            failed.published_at,
            failed.dead_lettered_at
        ),
        (None, None, None, None)
    );
    for delivered in [&a1, &b1, &c, &q] {
        let event = stored(&outbox, delivered).await;
        assert!(event.published_at.is_some(), "{event:?}");
        assert_eq!((event.lease_until, event.leased_by), (None, None));
    }

    // Poll 2: the second events of a and b; p2 waits behind the failed p1, which is not due.
    let outcome = relay.poll_once().await.expect("poll 2");
    assert_eq!((outcome.leased, outcome.delivered), (2, 2));
    assert_eq!(ids(&drain(&seen)), ids(&[a2.clone(), b2.clone()]));
    assert_eq!(relay.poll_once().await.expect("poll 3").leased, 0);

    // p1 comes due, fails again and runs out of attempts.
    sqlx::query(
        "UPDATE hare_outbox SET next_attempt_at = '2000-01-01T00:00:00.000000Z' WHERE id = ?1",
    )
    .bind(p1.id.hyphenated().to_string())
    .execute(&db.pool)
    .await
    .expect("make p1 due");
    let outcome = relay.poll_once().await.expect("poll 4");
    assert_eq!((outcome.leased, outcome.dead_lettered), (1, 1));
    assert_eq!(ids(&drain(&seen)), ids(std::slice::from_ref(&p1)));
    let dead = stored(&outbox, &p1).await;
    assert_eq!(dead.attempts, 2);
    assert!(dead.dead_lettered_at.is_some());
    assert_eq!(
        (dead.next_attempt_at, dead.published_at, dead.leased_by),
        (None, None, None)
    );

    // Other keys flow; p2 stays held back by the dead p1.
    let r = enqueue(&outbox, message("orders", Some("r"), 1)).await;
    let a3 = enqueue(&outbox, message("orders", Some("a"), 3)).await;
    let outcome = relay.poll_once().await.expect("poll 5");
    assert_eq!((outcome.leased, outcome.delivered), (2, 2));
    assert_eq!(ids(&drain(&seen)), ids(&[r, a3]));
    let held = stored(&outbox, &p2).await;
    assert_eq!(held, p2, "the event behind a dead letter is untouched");
    assert_eq!(relay.poll_once().await.expect("poll 6").leased, 0);
}

#[tokio::test]
async fn an_expired_lease_is_leased_again_and_the_old_holder_cannot_mark_it() {
    let (_db, outbox) = setup("hare_outbox").await;
    let event = enqueue(&outbox, message("orders", Some("k"), 1)).await;
    let backend = outbox.backend();
    let table = outbox.table();

    // A relay leases the event for one second and dies before marking it.
    let now = Utc::now();
    let leased = backend
        .event_lease(
            table,
            &EventLeaseParams::new("crashed".into(), 10, Duration::from_secs(1)).with_now(now),
        )
        .await
        .expect("lease")
        .events;
    assert_eq!(ids(&leased), ids(std::slice::from_ref(&event)));

    let (seen, delivery) = recording();
    let relay = OutboxRelay::<SqliteBackend>::new(
        outbox.clone(),
        delivery,
        config("relay-2")
            .with_lease(Duration::from_secs(1))
            .with_delivery_timeout(Duration::from_millis(500)),
    )
    .expect("relay");
    assert_eq!(
        relay.poll_once().await.expect("poll").leased,
        0,
        "a live lease is respected"
    );

    let relay = &relay;
    let outcome = wait_for(
        "the expired lease to be leased again",
        Duration::from_secs(10),
        || async move {
            let outcome = relay.poll_once().await.expect("poll");
            (outcome.leased > 0).then_some(outcome)
        },
    )
    .await;
    assert_eq!((outcome.leased, outcome.delivered), (1, 1));
    assert_eq!(ids(&drain(&seen)), ids(std::slice::from_ref(&event)));
    let published = stored(&outbox, &event).await;
    assert!(published.published_at.is_some());
    assert_eq!(
        (published.lease_until, published.leased_by.clone()),
        (None, None)
    );

    // The crashed relay comes back and reports a failure: nothing changes.
    let late = EventMarkFailedParams::new(
        vec![EventFailure::retry(
            event.sequence,
            1,
            "late".into(),
            Duration::ZERO,
        )],
        "crashed".into(),
    );
    assert_eq!(
        backend
            .event_mark_failed(table, &late)
            .await
            .expect("mark failed"),
        0
    );
    assert_eq!(stored(&outbox, &event).await, published);
}

#[tokio::test]
async fn two_running_relays_share_one_table_and_keep_per_key_order() {
    let (db, outbox) = setup("hare_outbox").await;
    let keys = ["k0", "k1", "k2", "k3"];
    let mut expected = HashMap::<String, Vec<i64>>::new();
    for n in 0..15 {
        for key in keys {
            let event = enqueue(&outbox, message("orders", Some(key), n)).await;
            expected
                .entry(key.to_owned())
                .or_default()
                .push(event.sequence);
        }
        enqueue(&outbox, message("orders", None, n)).await;
    }
    let total = 15 * (keys.len() + 1);

    let (seen, delivery) = recording();
    let other_outbox = outbox_on(&db.connect(4).await, "hare_outbox").await;
    let first = OutboxRelay::<SqliteBackend>::new(
        outbox.clone(),
        delivery,
        config("relay-a").with_batch_size(7),
    )
    .expect("relay a");
    let seen_b = seen.clone();
    let delivery_b = hare_outbox_core::FnDelivery::new(move |event: OutboxEvent| {
        let seen = seen_b.clone();
        async move {
            seen.lock().expect("recorder lock").push(event);
            Ok(())
        }
    });
    let second = OutboxRelay::<SqliteBackend>::new(
        other_outbox,
        delivery_b,
        config("relay-b").with_batch_size(7),
    )
    .expect("relay b");
    first.start().expect("start a");
    second.start().expect("start b");
    let seen_ref = &seen;
    wait_for(
        "every event to be delivered",
        Duration::from_secs(60),
        || async move { (seen_ref.lock().expect("recorder lock").len() >= total).then_some(()) },
    )
    .await;
    first.stop().await.expect("stop a");
    second.stop().await.expect("stop b");

    let delivered = drain(&seen);
    assert_eq!(
        delivered.len(),
        total,
        "each event exactly once while leases are live"
    );
    assert_eq!(ids(&delivered).len(), total);
    for key in keys {
        let order: Vec<i64> = delivered
            .iter()
            .filter(|e| e.ordering_key.as_deref() == Some(key))
            .map(|e| e.sequence)
            .collect();
        assert_eq!(Some(&order), expected.get(key), "order of key {key}");
    }
    let pending: i64 =
        sqlx::query_scalar("SELECT count(*) FROM hare_outbox WHERE published_at IS NULL")
            .fetch_one(&db.pool)
            .await
            .expect("pending");
    assert_eq!(pending, 0);
    assert!(first.stats().delivered > 0 || second.stats().delivered > 0);
}

#[tokio::test]
async fn an_unreadable_row_is_dead_lettered_and_the_others_are_delivered() {
    let (db, outbox) = setup("hare_outbox").await;
    let good = enqueue(&outbox, message("orders", Some("a"), 1)).await;
    // Rows another program wrote by hand: a payload that is not JSON, a time that is not one.
    for (id, key, payload, created) in [
        (
            Uuid::now_v7(),
            "bad",
            "not json {",
            "2026-11-30T11:00:00.000000Z",
        ),
        (Uuid::now_v7(), "late", "{}", "yesterday"),
    ] {
        sqlx::query(
            "INSERT INTO hare_outbox (id, topic, payload, ordering_key, created_at) \
             VALUES (?1, 'orders', ?2, ?3, ?4)",
        )
        .bind(id.to_string())
        .bind(payload)
        .bind(key)
        .bind(created)
        .execute(&db.pool)
        .await
        .expect("insert a hand-written row");
    }
    let after = enqueue(&outbox, message("orders", Some("b"), 1)).await;
    let behind_bad = enqueue(&outbox, message("orders", Some("bad"), 2)).await;

    let (seen, delivery) = recording();
    let relay = OutboxRelay::<SqliteBackend>::new(outbox.clone(), delivery, config("relay-1"))
        .expect("relay");
    let outcome = relay
        .poll_once()
        .await
        .expect("an unreadable row does not fail the poll");
    assert_eq!(outcome.delivered, 2, "{outcome:?}");
    assert_eq!(ids(&drain(&seen)), ids(&[good.clone(), after.clone()]));
    assert!(stored(&outbox, &good).await.published_at.is_some());
    assert!(stored(&outbox, &after).await.published_at.is_some());

    let rows: Vec<(String, bool, String, bool)> = sqlx::query_as(
        "SELECT ordering_key, dead_lettered_at IS NOT NULL, coalesce(last_error, ''), \
         lease_until IS NULL FROM hare_outbox \
         WHERE ordering_key IN ('bad', 'late') AND sequence < ?1 ORDER BY sequence",
    )
    .bind(behind_bad.sequence)
    .fetch_all(&db.pool)
    .await
    .expect("read the hand-written rows");
    assert_eq!(rows.len(), 2);
    for (key, dead, error, unleased) in &rows {
        assert!(dead, "{key} is dead-lettered");
        assert!(unleased, "{key} is not left leased");
        assert!(error.contains("cannot be read"), "{key}: {error}");
    }
    // The dead row holds back its own key, as any dead letter does.
    relay.poll_once().await.expect("poll 2");
    assert!(drain(&seen).is_empty());
    assert!(stored(&outbox, &behind_bad).await.published_at.is_none());
}
