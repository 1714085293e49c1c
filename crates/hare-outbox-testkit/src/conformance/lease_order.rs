//! The lease on any backend: one event per key in sequence order up to the limit, a lease taken
//! again only after it ends and a retry only when due, topic filters taken exactly (wildcards
//! literal, case-sensitive, non-ASCII), relays on disjoint topics, and two running relays that
//! share a table and keep per-key order.

// A suite fails its test by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use hare_outbox_core::backend::{BacklogParams, EventLeaseParams};
use hare_outbox_core::{
    Backend, DeliveryError, FnDelivery, OutboxEvent, OutboxMessage, OutboxRelay, TopicFilter,
};
use serde_json::json;

use super::harness::{Cell, Harness, config, enqueue, message, now, outbox};
use super::marks::lease;
use crate::wait_for;

fn sequences(events: &[OutboxEvent]) -> Vec<i64> {
    events.iter().map(|e| e.sequence).collect()
}

/// A lease takes the first event of each key and every unordered event, in sequence order, up
/// to the limit, and stamps holder and end; a key waits behind its leased first event.
pub async fn a_lease_takes_one_event_per_key_in_sequence_order_up_to_the_limit<H: Harness>(h: &H) {
    let outbox = outbox(h).await;
    let mut keyed = Vec::new();
    for n in 0..5 {
        keyed.push(enqueue(h, &outbox, message("t", Some("k"), n)).await);
    }
    let free1 = enqueue(h, &outbox, message("t", None, 1)).await;
    let free2 = enqueue(h, &outbox, message("t", None, 2)).await;
    let other = enqueue(h, &outbox, message("t", Some("other"), 1)).await;

    let at = now();
    let first = lease(&outbox, at, "r1", 2).await;
    assert_eq!(
        sequences(&first),
        [keyed[0].sequence, free1.sequence],
        "limit 2 in sequence order"
    );
    assert!(first.iter().all(|e| e.leased_by.as_deref() == Some("r1")
        && e.lease_until == Some(at + chrono::Duration::seconds(60))));
    let rest = lease(&outbox, at, "r2", 100).await;
    assert_eq!(
        sequences(&rest),
        [free2.sequence, other.sequence],
        "k waits behind its leased first event"
    );
    assert!(lease(&outbox, at, "r3", 100).await.is_empty());
}

/// A lease ending exactly now is still live; a microsecond later another relay takes the event.
/// A retry is due exactly at `next_attempt_at`, not before.
pub async fn a_lease_is_taken_again_only_after_it_ends_and_a_retry_only_when_due<H: Harness>(
    h: &H,
) {
    let outbox = outbox(h).await;
    let event = enqueue(h, &outbox, message("t", None, 1)).await;
    let at = now();
    assert_eq!(lease(&outbox, at, "r1", 10).await.len(), 1);
    let until = at + chrono::Duration::seconds(60);
    assert!(
        lease(&outbox, until, "r2", 10).await.is_empty(),
        "a lease ending exactly now is still live"
    );
    let taken = lease(&outbox, until + chrono::Duration::microseconds(1), "r2", 10).await;
    assert_eq!(sequences(&taken), [event.sequence]);
    assert_eq!(taken[0].leased_by.as_deref(), Some("r2"));

    let due = at + chrono::Duration::seconds(600);
    h.update(
        outbox.table(),
        "1 = 1",
        &[
            ("lease_until", Cell::Time(None)),
            ("leased_by", Cell::Text(None)),
            ("next_attempt_at", Cell::Time(Some(due))),
        ],
    )
    .await;
    assert!(
        lease(&outbox, due - chrono::Duration::microseconds(1), "r3", 10)
            .await
            .is_empty()
    );
    assert_eq!(
        lease(&outbox, due, "r3", 10).await.len(),
        1,
        "due at next_attempt_at"
    );
}

fn filter(include: Option<&[&str]>, exclude: &[&str]) -> TopicFilter {
    TopicFilter::new(include, exclude).expect("valid filter")
}

/// For fourteen filters over eighteen topics (`_` and `%` literal, case-sensitive, non-ASCII),
/// the lease and the backlog take exactly the topics `TopicFilter::matches` accepts.
pub async fn lease_and_backlog_take_exactly_the_topics_the_filter_matches<H: Harness>(h: &H) {
    let outbox = outbox(h).await;
    let topics = [
        "library.loan.created",
        "library.",
        "library",
        "library_x",
        "Library.loan",
        "LIBRARY.loan",
        "taskiq",
        "taskiq.x",
        "billing.paid",
        "a%b.c",
        "a_b",
        "axb",
        "ab",
        "abc",
        "é.x",
        "éa",
        "e.x",
        "日本.語",
    ];
    for topic in topics {
        enqueue(h, &outbox, OutboxMessage::new(topic, json!({}))).await;
    }
    let filters = [
        filter(None, &[]),
        filter(Some(&["library.*", "taskiq"]), &[]),
        filter(None, &["library.*", "taskiq"]),
        filter(Some(&["library.*"]), &["library.loan*"]),
        filter(Some(&["a%*"]), &[]),
        filter(Some(&["a_*"]), &[]),
        filter(Some(&["a_b"]), &[]),
        filter(Some(&["*"]), &[]),
        filter(None, &["*"]),
        filter(Some(&[]), &[]),
        filter(Some(&["é*", "日本*"]), &[]),
        filter(Some(&["LIBRARY.*"]), &[]),
        filter(Some(&["library*"]), &["library", "library_*"]),
        filter(Some(&["a*"]), &["a%*", "a_*", "ab"]),
    ];
    let backend = outbox.backend();
    let table = outbox.table();
    for topic_filter in filters {
        let expected: BTreeSet<&str> = topics
            .iter()
            .copied()
            .filter(|t| topic_filter.matches(t))
            .collect();
        // A lease that has already expired when it is written: the next lease may take it again.
        let leased = backend
            .event_lease(
                table,
                &EventLeaseParams::new("r".into(), 100, Duration::ZERO)
                    .with_now(Utc::now() - chrono::Duration::seconds(1))
                    .with_topics(topic_filter.clone()),
            )
            .await
            .unwrap()
            .events;
        let got: BTreeSet<&str> = leased.iter().map(|e| e.topic.as_str()).collect();
        assert_eq!(got, expected, "lease with {topic_filter:?}");
        assert_eq!(leased.len(), expected.len(), "{topic_filter:?}");
        let backlog = backend
            .backlog(table, &BacklogParams::new(topic_filter.clone(), Utc::now()))
            .await
            .unwrap();
        assert_eq!(
            backlog.pending,
            expected.len() as i64,
            "backlog with {topic_filter:?}"
        );
    }
}

type Topics = Arc<Mutex<Vec<String>>>;

/// A delivery that records the topics it delivers.
fn topics_of(seen: &Topics) -> impl hare_outbox_core::Delivery {
    let seen = seen.clone();
    FnDelivery::new(move |e: OutboxEvent| {
        let seen = seen.clone();
        async move {
            seen.lock()
                .map_err(|_| DeliveryError::new("recorder poisoned"))?
                .push(e.topic);
            Ok(())
        }
    })
}

fn sorted(seen: &Topics) -> Vec<String> {
    let mut topics = seen.lock().unwrap().clone();
    topics.sort();
    topics
}

/// A relay on `library.*` and `taskiq` and one excluding them share a table: each takes and
/// counts exactly its own topics.
pub async fn relays_on_disjoint_topics_share_one_table<H: Harness>(h: &H) {
    let outbox = outbox(h).await;
    for topic in [
        "library.loan.created",
        "library_x",
        "taskiq",
        "billing.paid",
        "a%b.c",
        "Library.loan",
    ] {
        enqueue(h, &outbox, OutboxMessage::new(topic, json!({}))).await;
    }
    let (lib, rest) = (Topics::default(), Topics::default());
    let r1 = OutboxRelay::new(
        outbox.clone(),
        topics_of(&lib),
        config("r1").with_topics(["library.*", "taskiq"]),
    )
    .unwrap();
    let r2 = OutboxRelay::new(
        outbox.clone(),
        topics_of(&rest),
        config("r2").with_exclude_topics(["library.*", "taskiq"]),
    )
    .unwrap();
    assert_eq!(r1.journal().backlog(&[]).await.unwrap().pending, 2);
    assert_eq!(r2.journal().backlog(&[]).await.unwrap().pending, 4);
    assert_eq!(r1.poll_once().await.unwrap().leased, 2);
    assert_eq!(r2.poll_once().await.unwrap().leased, 4);
    assert_eq!(sorted(&lib), ["library.loan.created", "taskiq"]);
    assert_eq!(
        sorted(&rest),
        ["Library.loan", "a%b.c", "billing.paid", "library_x"]
    );
    assert_eq!(r1.poll_once().await.unwrap().leased, 0);
    assert_eq!(r2.poll_once().await.unwrap().leased, 0);
}

/// Two running relays with batches of 7 drain 300 events of 12 keys written in several
/// transactions: every event once, each key in sequence order, both relays delivering.
pub async fn two_running_relays_share_one_table_and_keep_per_key_order<H: Harness>(h: &H) {
    const KEYS: usize = 12;
    const EVENTS: usize = 300;
    let outbox = outbox(h).await;
    let backend = outbox.backend();
    for chunk in 0..6 {
        let mut tx = backend.begin().await.unwrap();
        for i in 0..EVENTS / 6 {
            let n = chunk * (EVENTS / 6) + i;
            outbox
                .enqueue(
                    &mut tx,
                    OutboxMessage::new("t", json!({"n": n})).ordering_key(format!("k{}", n % KEYS)),
                )
                .await
                .unwrap();
        }
        backend.commit(tx).await.unwrap();
    }
    type Log = Arc<Mutex<Vec<(String, i64, String)>>>;
    let log: Log = Arc::default();
    // Deliveries wait until both relays hold leases, so neither drains the table alone before
    // the other's first poll, however the two are scheduled.
    let (open, gate) = tokio::sync::watch::channel(false);
    let relay = |name: &str| {
        let (log, label, gate) = (log.clone(), name.to_owned(), gate.clone());
        OutboxRelay::new(
            outbox.clone(),
            FnDelivery::new(move |e: OutboxEvent| {
                let (log, label, mut gate) = (log.clone(), label.clone(), gate.clone());
                async move {
                    let _ = gate.wait_for(|open| *open).await;
                    tokio::task::yield_now().await;
                    log.lock().unwrap().push((
                        e.ordering_key.unwrap_or_default(),
                        e.sequence,
                        label,
                    ));
                    Ok(())
                }
            }),
            config(name).with_batch_size(7),
        )
        .unwrap()
    };
    let (r1, r2) = (relay("relay-1"), relay("relay-2"));
    r1.start().unwrap();
    r2.start().unwrap();
    let holders = "SELECT count(DISTINCT leased_by) FROM outbox WHERE leased_by IS NOT NULL";
    wait_for(
        "both relays hold leases",
        Duration::from_secs(60),
        || async { (h.scalar(holders).await >= 2).then_some(()) },
    )
    .await;
    open.send_replace(true);
    wait_for(
        "every event delivered",
        Duration::from_secs(120),
        || async { (log.lock().unwrap().len() >= EVENTS).then_some(()) },
    )
    .await;
    r1.stop().await.unwrap();
    r2.stop().await.unwrap();

    let log = log.lock().unwrap().clone();
    assert_eq!(
        log.len(),
        EVENTS,
        "no event delivered twice while no relay died"
    );
    let mut last: HashMap<String, i64> = HashMap::new();
    for (key, sequence, _) in &log {
        let previous = last.insert(key.clone(), *sequence).unwrap_or(0);
        assert!(
            *sequence > previous,
            "key {key}: {sequence} delivered after {previous}"
        );
    }
    assert!(
        log.iter().any(|l| l.2 == "relay-1") && log.iter().any(|l| l.2 == "relay-2"),
        "both relays delivered"
    );
    assert_eq!(
        h.scalar("SELECT count(*) FROM outbox WHERE published_at IS NULL")
            .await,
        0
    );
}
