//! The operator's views on any backend: an event's neighbours of its ordering key, held keys
//! and the retry or release of their head, counts per topic and state, the relays holding
//! leases, one event by sequence, and the object filter by captured table or by label.

// A suite fails its test by panicking.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use chrono::Utc;
use hare_outbox_core::backend::{
    EventNeighbours, EventNeighboursParams, KeyHeadAction, KeyHeldListParams, RELEASED_KEY_HEADER,
};
use hare_outbox_core::journal::{EventQuery, Journal, ObjectName};
use hare_outbox_core::{Error, EventStatus, JournalBackend, Outbox, OutboxMessage};
use serde_json::json;

use super::Harness;
use super::harness::{EventState, days_ago, enqueue, message, now, outbox, put, stored};

fn journal<B: JournalBackend>(outbox: &Outbox<B>) -> Journal<B> {
    Journal::new(outbox.backend().clone(), outbox.table().clone())
}

/// The previous and next event of a key: undelivered ones however far away, delivered ones
/// within the window only; none for the key's first and last event or an event without a key;
/// one event by sequence (and none for a sequence that does not exist or is below 1).
pub async fn neighbours_of_a_key_and_one_event_by_sequence<H: Harness>(h: &H) {
    let outbox = outbox(h).await;
    let journal = journal(&outbox);
    let a1 = enqueue(h, &outbox, message("t", Some("a"), 1)).await;
    for n in 0..5 {
        enqueue(h, &outbox, message("t", Some("other"), n)).await;
    }
    let a2 = enqueue(h, &outbox, message("t", Some("a"), 2)).await;
    for n in 0..5 {
        enqueue(h, &outbox, message("t", None, n)).await;
    }
    let a3 = enqueue(h, &outbox, message("t", Some("a"), 3)).await;
    let unkeyed = enqueue(h, &outbox, message("t", None, 9)).await;

    let a2_now = stored(&outbox, &a2).await;
    assert_eq!(
        journal.neighbours(&a2_now).await.unwrap(),
        EventNeighbours::new(Some(a1.sequence), Some(a3.sequence))
    );
    let first = journal
        .neighbours(&stored(&outbox, &a1).await)
        .await
        .unwrap();
    assert_eq!(first, EventNeighbours::new(None, Some(a2.sequence)));
    let last = journal
        .neighbours(&stored(&outbox, &a3).await)
        .await
        .unwrap();
    assert_eq!(last, EventNeighbours::new(Some(a2.sequence), None));
    let none = journal.neighbours(&unkeyed).await.unwrap();
    assert_eq!(none, EventNeighbours::default());

    // Delivered neighbours are looked for within the window only; undelivered ones anywhere.
    let backend = outbox.backend();
    let window = |w: i64| EventNeighboursParams::new(a2.sequence, "a".into(), w);
    put(h, outbox.table(), a1.sequence, EventState::Published(now())).await;
    put(h, outbox.table(), a3.sequence, EventState::Published(now())).await;
    let near = backend
        .event_neighbours(outbox.table(), &window(100))
        .await
        .unwrap();
    assert_eq!(
        near,
        EventNeighbours::new(Some(a1.sequence), Some(a3.sequence))
    );
    let short = backend
        .event_neighbours(outbox.table(), &window(3))
        .await
        .unwrap();
    assert_eq!(
        short,
        EventNeighbours::default(),
        "both delivered and out of the window"
    );
    put(h, outbox.table(), a1.sequence, EventState::Dead(now())).await;
    h.update(
        outbox.table(),
        &format!("sequence = {}", a1.sequence),
        &[("published_at", super::Cell::Time(None))],
    )
    .await;
    let short = backend
        .event_neighbours(outbox.table(), &window(3))
        .await
        .unwrap();
    assert_eq!(short, EventNeighbours::new(Some(a1.sequence), None));

    let by_sequence = journal.get_by_sequence(a2.sequence).await.unwrap().unwrap();
    assert_eq!(by_sequence.id, a2.id);
    assert!(
        journal
            .get_by_sequence(unkeyed.sequence + 100)
            .await
            .unwrap()
            .is_none()
    );
    assert!(matches!(
        journal.get_by_sequence(0).await,
        Err(Error::Validation { .. })
    ));
}

/// Held keys are those whose head is dead-lettered or has failed; healthy keys (pending, leased
/// without a failure, delivered) are not listed. Keys come in key order with the blocking event,
/// its error and the number of events waiting; a page stops after `limit` held keys or after
/// walking `max_walk` keys and says where the next one starts.
pub async fn held_keys_are_the_dead_and_failing_heads_in_key_order<H: Harness>(h: &H) {
    let outbox = outbox(h).await;
    let table = outbox.table().clone();
    let journal = journal(&outbox);
    let mut heads = Vec::new();
    // Keys k0..k5 with three events each; the first event is the head.
    for key in ["k0", "k1", "k2", "k3", "k4", "k5"] {
        let mut events = Vec::new();
        for n in 0..3 {
            events.push(enqueue(h, &outbox, message("orders", Some(key), n)).await);
        }
        heads.push(events);
    }
    // k0 delivered entirely; k1 dead head; k2 pending; k3 failing head; k4 leased fresh head;
    // k5 head delivered, second event dead.
    for e in &heads[0] {
        put(h, &table, e.sequence, EventState::Published(now())).await;
    }
    put(
        h,
        &table,
        heads[1][0].sequence,
        EventState::Dead(days_ago(1)),
    )
    .await;
    h.update(
        &table,
        &format!("sequence = {}", heads[1][0].sequence),
        &[(
            "last_error",
            super::Cell::Text(Some("receiver said 500".into())),
        )],
    )
    .await;
    let retrying = EventState::Retrying {
        attempts: 2,
        error: "timeout".into(),
        next: now() + chrono::Duration::hours(1),
    };
    put(h, &table, heads[3][0].sequence, retrying).await;
    let lease = EventState::Leased {
        by: "relay-a".into(),
        until: now() + chrono::Duration::minutes(5),
    };
    put(h, &table, heads[4][0].sequence, lease).await;
    put(
        h,
        &table,
        heads[5][0].sequence,
        EventState::Published(now()),
    )
    .await;
    put(h, &table, heads[5][1].sequence, EventState::Dead(now())).await;

    let page = journal.held_keys("", 50).await.unwrap();
    let keys: Vec<&str> = page.keys.iter().map(|k| k.ordering_key.as_str()).collect();
    assert_eq!(keys, ["k1", "k3", "k5"]);
    assert_eq!(page.next_after, None, "the walk reached the last key");
    assert_eq!(page.walked, 5, "k1..k5 have undelivered events");
    let k1 = &page.keys[0];
    assert_eq!(k1.head.sequence, heads[1][0].sequence);
    assert_eq!(k1.head.status(Utc::now()), EventStatus::Dead);
    assert_eq!(k1.head.last_error.as_deref(), Some("receiver said 500"));
    assert_eq!(k1.waiting, 3);
    assert_eq!(page.keys[1].head.status(Utc::now()), EventStatus::Retrying);
    assert_eq!(page.keys[1].head.last_error.as_deref(), Some("timeout"));
    assert_eq!(page.keys[2].head.sequence, heads[5][1].sequence);
    assert_eq!(page.keys[2].waiting, 2);

    // One held key per page: the cursor walks on from the last key seen.
    let first = journal.held_keys("", 1).await.unwrap();
    assert_eq!(first.keys.len(), 1);
    assert_eq!(first.next_after.as_deref(), Some("k1"));
    let second = journal.held_keys("k1", 1).await.unwrap();
    assert_eq!(second.keys[0].ordering_key, "k3");
    let third = journal.held_keys("k3", 1).await.unwrap();
    assert_eq!(third.keys[0].ordering_key, "k5");
    let fourth = journal.held_keys("k5", 1).await.unwrap();
    assert!(fourth.keys.is_empty());
    assert_eq!(fourth.next_after, None);

    // A walk limit: two keys walked (k1, k2) find one held key and say where to go on.
    let params = KeyHeldListParams::new(String::new(), 50, 2, 10);
    let bounded = outbox
        .backend()
        .key_held_list(&table, &params)
        .await
        .unwrap();
    assert_eq!(bounded.keys.len(), 1);
    assert_eq!(bounded.walked, 2);
    assert_eq!(bounded.next_after.as_deref(), Some("k2"));
    // The waiting count stops at its cap.
    let params = KeyHeldListParams::new(String::new(), 1, 10, 2);
    let capped = outbox
        .backend()
        .key_held_list(&table, &params)
        .await
        .unwrap();
    assert_eq!(capped.keys[0].waiting, 2);

    assert!(matches!(
        journal.held_keys("", 0).await,
        Err(Error::Validation { .. })
    ));
    assert!(matches!(
        journal.held_keys(&"k".repeat(256), 10).await,
        Err(Error::Validation { .. })
    ));
}

/// Retry returns a dead head to the queue (attempts 0) and makes a failing head due at once
/// (attempts kept); release takes the head out of its key (kept in a header) so the key's next
/// event becomes its head. Neither touches an event that is not the key's held head, is under
/// a live lease, or names another key.
pub async fn retry_and_release_act_only_on_the_held_head<H: Harness>(h: &H) {
    let outbox = outbox(h).await;
    let table = outbox.table().clone();
    let journal = journal(&outbox);
    let dead = enqueue(h, &outbox, message("orders", Some("a"), 1)).await;
    let behind = enqueue(h, &outbox, message("orders", Some("a"), 2)).await;
    let failing = enqueue(h, &outbox, message("orders", Some("b"), 1)).await;
    let leased = enqueue(h, &outbox, message("orders", Some("c"), 1)).await;
    put(h, &table, dead.sequence, EventState::Dead(now())).await;
    put(h, &table, behind.sequence, EventState::Dead(now())).await;
    let retrying = |attempts| EventState::Retrying {
        attempts,
        error: "timeout".into(),
        next: now() + chrono::Duration::hours(1),
    };
    put(h, &table, failing.sequence, retrying(3)).await;
    put(h, &table, leased.sequence, retrying(1)).await;
    let live = EventState::Leased {
        by: "relay-a".into(),
        until: now() + chrono::Duration::minutes(5),
    };
    put(h, &table, leased.sequence, live).await;

    // Not the head, the wrong key, a live lease: nothing changes.
    assert!(
        !journal
            .key_head(behind.sequence, "a", KeyHeadAction::Retry)
            .await
            .unwrap()
    );
    assert!(
        !journal
            .key_head(dead.sequence, "b", KeyHeadAction::Retry)
            .await
            .unwrap()
    );
    assert!(
        !journal
            .key_head(leased.sequence, "c", KeyHeadAction::Release)
            .await
            .unwrap()
    );
    assert_eq!(
        stored(&outbox, &behind).await.status(Utc::now()),
        EventStatus::Dead
    );
    assert_eq!(
        stored(&outbox, &leased).await.ordering_key.as_deref(),
        Some("c")
    );

    // Retry of a failing head: due now, attempts kept.
    assert!(
        journal
            .key_head(failing.sequence, "b", KeyHeadAction::Retry)
            .await
            .unwrap()
    );
    let now_due = stored(&outbox, &failing).await;
    assert_eq!(now_due.attempts, 3);
    assert_eq!(now_due.next_attempt_at, None);
    // Delivered meanwhile, it is no longer held: the action finds nothing.
    put(h, &table, failing.sequence, EventState::Published(now())).await;
    assert!(
        !journal
            .key_head(failing.sequence, "b", KeyHeadAction::Retry)
            .await
            .unwrap()
    );

    // Release of a dead head: it leaves key a, keeps its state, and `behind` becomes the head.
    assert!(
        journal
            .key_head(dead.sequence, "a", KeyHeadAction::Release)
            .await
            .unwrap()
    );
    let released = stored(&outbox, &dead).await;
    assert_eq!(released.ordering_key, None);
    assert_eq!(released.headers[RELEASED_KEY_HEADER], json!("a"));
    assert_eq!(released.status(Utc::now()), EventStatus::Dead);
    let page = journal.held_keys("", 10).await.unwrap();
    let a = page.keys.iter().find(|k| k.ordering_key == "a").unwrap();
    assert_eq!(a.head.sequence, behind.sequence);
    // Retry of a dead head: back in the queue with its attempts reset.
    assert!(
        journal
            .key_head(behind.sequence, "a", KeyHeadAction::Retry)
            .await
            .unwrap()
    );
    let back = stored(&outbox, &behind).await;
    assert_eq!(back.status(Utc::now()), EventStatus::Pending);
    assert_eq!(back.attempts, 0);

    assert!(matches!(
        journal
            .key_head(dead.sequence, "", KeyHeadAction::Retry)
            .await,
        Err(Error::Validation { .. })
    ));
}

/// Counts per topic: pending, leased, retrying, dead, published within the window (not before
/// it), the oldest event still to deliver; topics in name order, paged by name.
pub async fn topic_counts_per_state_and_oldest_pending<H: Harness>(h: &H) {
    let outbox = outbox(h).await;
    let table = outbox.table().clone();
    let journal = journal(&outbox);
    let mut next = 0;
    let mut event = |topic: &'static str| {
        next += 1;
        (topic, next)
    };
    let mut written = Vec::new();
    for (topic, n) in [
        event("billing.paid"),
        event("billing.paid"),
        event("billing.paid"),
        event("billing.paid"),
        event("billing.paid"),
        event("doc.updated"),
        event("doc.updated"),
        event("shipping.sent"),
    ] {
        written.push(enqueue(h, &outbox, OutboxMessage::new(topic, json!({"n": n}))).await);
    }
    let old = days_ago(3);
    put(h, &table, written[0].sequence, EventState::Created(old)).await;
    let lease = EventState::Leased {
        by: "relay-a".into(),
        until: now() + chrono::Duration::minutes(5),
    };
    put(h, &table, written[1].sequence, lease).await;
    let retrying = EventState::Retrying {
        attempts: 1,
        error: "timeout".into(),
        next: now(),
    };
    put(h, &table, written[2].sequence, retrying).await;
    put(h, &table, written[3].sequence, EventState::Dead(now())).await;
    put(h, &table, written[4].sequence, EventState::Published(now())).await;
    put(h, &table, written[5].sequence, EventState::Published(now())).await;
    // Published two days ago: outside a one-day window.
    put(
        h,
        &table,
        written[6].sequence,
        EventState::Published(days_ago(2)),
    )
    .await;
    put(
        h,
        &table,
        written[7].sequence,
        EventState::Published(days_ago(2)),
    )
    .await;

    let day = Duration::from_secs(86_400);
    let stats = journal.topic_stats("", 50, day).await.unwrap();
    let topics: Vec<&str> = stats.iter().map(|s| s.topic.as_str()).collect();
    assert_eq!(
        topics,
        ["billing.paid", "doc.updated"],
        "shipping.sent has nothing to show"
    );
    let billing = &stats[0];
    assert_eq!(
        (
            billing.pending,
            billing.leased,
            billing.retrying,
            billing.dead,
            billing.published
        ),
        (1, 1, 1, 1, 1)
    );
    assert_eq!(billing.oldest_pending_at, Some(old));
    let doc = &stats[1];
    assert_eq!((doc.pending, doc.published), (0, 1));
    assert_eq!(doc.oldest_pending_at, None);

    let week = Duration::from_secs(7 * 86_400);
    let first = journal.topic_stats("", 1, week).await.unwrap();
    assert_eq!(first.len(), 1);
    let rest = journal.topic_stats(&first[0].topic, 5, week).await.unwrap();
    let topics: Vec<&str> = rest.iter().map(|s| s.topic.as_str()).collect();
    assert_eq!(topics, ["doc.updated", "shipping.sent"]);
    assert_eq!(rest[0].published, 2);

    assert!(matches!(
        journal.topic_stats("", 10, Duration::ZERO).await,
        Err(Error::Validation { .. })
    ));
}

/// The relays holding leases: per relay the live leases (its batch in flight), the expired
/// ones it still names, and the span of their ends; delivered events and other tables' leases
/// are not counted.
pub async fn relays_holding_leases_live_and_expired<H: Harness>(h: &H) {
    let outbox = outbox(h).await;
    let table = outbox.table().clone();
    let journal = journal(&outbox);
    let until = now() + chrono::Duration::minutes(5);
    let expired = now() - chrono::Duration::minutes(5);
    let states = [
        ("relay-a", until),
        ("relay-a", until - chrono::Duration::minutes(1)),
        ("relay-a", expired),
        ("relay-b", until),
        ("relay-c", expired),
    ];
    for (by, until) in states {
        let event = enqueue(h, &outbox, message("t", None, 0)).await;
        let lease = EventState::Leased {
            by: by.into(),
            until,
        };
        put(h, &table, event.sequence, lease).await;
    }
    let delivered = enqueue(h, &outbox, message("t", None, 0)).await;
    let lease = EventState::Leased {
        by: "relay-d".into(),
        until,
    };
    put(h, &table, delivered.sequence, lease).await;
    put(h, &table, delivered.sequence, EventState::Published(now())).await;

    let relays = journal.relay_leases("", 50).await.unwrap();
    let names: Vec<&str> = relays.iter().map(|r| r.leased_by.as_str()).collect();
    assert_eq!(names, ["relay-a", "relay-b", "relay-c"]);
    let a = &relays[0];
    assert_eq!((a.live, a.expired), (2, 1));
    assert_eq!(a.lease_until_max, Some(until));
    assert_eq!(a.lease_until_min, Some(expired));
    assert_eq!((relays[2].live, relays[2].expired), (0, 1));
    let after = journal.relay_leases("relay-a", 1).await.unwrap();
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].leased_by, "relay-b");
}

/// The object filter compares the captured table (the envelope's `table`, else its `model`) by
/// default, and the capture's label with [`ObjectName::Label`]; an event without a `table`
/// (written before captures named it) matches its `model` under both.
pub async fn object_filter_by_table_or_label<H: Harness>(h: &H) {
    let outbox = outbox(h).await;
    let journal = journal(&outbox);
    let captured = enqueue(
        h,
        &outbox,
        OutboxMessage::new(
            "doc.updated",
            json!({"model": "prod_order", "table": "plan_prod_orders", "pk": 18}),
        ),
    )
    .await;
    let legacy = enqueue(
        h,
        &outbox,
        OutboxMessage::new("doc.updated", json!({"model": "sales_orders", "pk": 22})),
    )
    .await;
    // A payload of your own whose `table` is no name.
    let own = enqueue(
        h,
        &outbox,
        OutboxMessage::new("bills", json!({"model": "bill", "table": 4, "pk": 1})),
    )
    .await;
    let found = |object: &'static str, name: ObjectName| {
        let journal = journal.clone();
        async move {
            let query = EventQuery::new()
                .with_object(object)
                .unwrap()
                .with_object_name(name);
            let page = journal.list(&query).await.unwrap();
            page.events.iter().map(|e| e.sequence).collect::<Vec<_>>()
        }
    };
    use ObjectName::{Label, Table};
    assert_eq!(
        found("plan_prod_orders #18", Table).await,
        [captured.sequence]
    );
    assert_eq!(found("plan_prod_orders", Table).await, [captured.sequence]);
    assert!(found("prod_order #18", Table).await.is_empty());
    assert_eq!(found("prod_order #18", Label).await, [captured.sequence]);
    assert!(found("plan_prod_orders #18", Label).await.is_empty());
    assert_eq!(found("sales_orders #22", Table).await, [legacy.sequence]);
    assert_eq!(found("sales_orders #22", Label).await, [legacy.sequence]);
    assert_eq!(found("bill #1", Table).await, [own.sequence]);
}
