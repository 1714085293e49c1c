//! Clean-up and backlog on any backend: one delete takes one batch, oldest first, of the
//! filter's topics and nothing younger than the cut-off; a clean-up of 10,000 rows in batches
//! does not block writers; the backlog counts pending and dead events and the oldest pending age.

// A suite fails its test by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use chrono::Utc;
use hare_outbox_core::backend::{BacklogParams, EventDeleteFinishedParams, FinishedState};
use hare_outbox_core::{
    Backend, FnDelivery, JournalBackend, OutboxEvent, OutboxMessage, OutboxRelay, TopicFilter,
};
use serde_json::json;

use super::harness::{Cell, EventState, Harness, config, days_ago, event_in, now, outbox};

fn filter(include: Option<&[&str]>, exclude: &[&str]) -> TopicFilter {
    TopicFilter::new(include, exclude).expect("valid filter")
}

/// Deletes of published (older than 7 days) and dead-lettered (older than 30 days) events of
/// `a.*`: each takes at most its limit, oldest finished first whatever the sequence order;
/// young, pending, other-topic and dead-then-published events stay until the filter is all.
pub async fn one_delete_takes_one_batch_oldest_first_and_nothing_younger_than_the_cut_off<
    H: Harness,
>(
    h: &H,
) {
    let outbox = outbox(h).await;
    let published = |days| EventState::Published(days_ago(days));
    let dead = |days| EventState::Dead(days_ago(days));
    // Sequence order differs from the finishing order on purpose.
    let p2 = event_in(h, &outbox, "a.x", &[published(9)]).await;
    let p_young = event_in(h, &outbox, "a.x", &[published(2)]).await;
    let p3 = event_in(h, &outbox, "a.y", &[published(8)]).await;
    let p1 = event_in(h, &outbox, "a.x", &[published(10)]).await;
    let p_other = event_in(h, &outbox, "b.x", &[published(20)]).await;
    let d2 = event_in(h, &outbox, "a.x", &[dead(40)]).await;
    let d1 = event_in(h, &outbox, "a.x", &[dead(50)]).await;
    let d_young = event_in(h, &outbox, "a.x", &[dead(10)]).await;
    // Dead long ago but published since: published recently, so neither clean-up takes it.
    let d_published = event_in(h, &outbox, "a.x", &[dead(50), published(1)]).await;
    let pending = event_in(h, &outbox, "a.x", &[]).await;

    let backend = outbox.backend();
    let table = outbox.table();
    let a = filter(Some(&["a.*"]), &[]);
    let params = |state, days, limit| {
        EventDeleteFinishedParams::new(
            state,
            Utc::now() - chrono::Duration::days(days),
            a.clone(),
            limit,
        )
    };
    let delete = |params: EventDeleteFinishedParams| async move {
        backend.event_delete_finished(table, &params).await.unwrap()
    };
    let exists = |event: &OutboxEvent| {
        let id = event.id;
        let outbox = outbox.clone();
        async move { outbox.get(id).await.unwrap().is_some() }
    };

    assert_eq!(delete(params(FinishedState::Published, 7, 2)).await, 2);
    assert!(!exists(&p1).await && !exists(&p2).await && exists(&p3).await);
    assert_eq!(delete(params(FinishedState::Published, 7, 2)).await, 1);
    assert_eq!(delete(params(FinishedState::Published, 7, 2)).await, 0);
    assert_eq!(delete(params(FinishedState::DeadLettered, 30, 1)).await, 1);
    assert!(!exists(&d1).await && exists(&d2).await);
    assert_eq!(delete(params(FinishedState::DeadLettered, 30, 5)).await, 1);
    assert_eq!(delete(params(FinishedState::DeadLettered, 30, 5)).await, 0);
    for kept in [&p_young, &p_other, &d_young, &d_published, &pending] {
        assert!(exists(kept).await, "{kept:?}");
    }
    assert_eq!(h.scalar("SELECT count(*) FROM outbox").await, 5);
    // Every topic: the other relay's row goes too.
    let all = EventDeleteFinishedParams::new(
        FinishedState::Published,
        Utc::now() - chrono::Duration::days(7),
        TopicFilter::all(),
        10,
    );
    assert_eq!(delete(all).await, 1);
    assert!(!exists(&p_other).await);
    assert_eq!(h.scalar("SELECT count(*) FROM outbox").await, 4);
}

/// 20,000 published events of two topics and 50 dead letters: a relay on `a.*` deletes its
/// 10,000 and 50 in batches of 500 while a writer keeps enqueueing, which never waits long;
/// young finished events, the other topic and every write are kept.
pub async fn cleanup_deletes_in_batches_without_blocking_writers<H: Harness>(h: &H) {
    let outbox = outbox(h).await;
    let backend = outbox.backend();
    let mut tx = backend.begin().await.unwrap();
    for chunk in 0..4 {
        let messages: Vec<OutboxMessage> = (0..5000)
            .map(|n| {
                OutboxMessage::new(
                    if n % 2 == 0 { "a.x" } else { "b.x" },
                    json!(chunk * 5000 + n),
                )
            })
            .collect();
        outbox.enqueue_many(&mut tx, messages).await.unwrap();
    }
    let dead: Vec<OutboxMessage> = (0..50)
        .map(|n| OutboxMessage::new("dead.a.x", json!(n)))
        .collect();
    outbox.enqueue_many(&mut tx, dead).await.unwrap();
    backend.commit(tx).await.unwrap();
    let table = outbox.table();
    h.update(
        table,
        "topic <> 'dead.a.x'",
        &[("published_at", Cell::Time(Some(days_ago(10))))],
    )
    .await;
    h.update(
        table,
        "topic = 'dead.a.x'",
        &[
            ("topic", Cell::Text(Some("a.x".into()))),
            ("attempts", Cell::Int(5)),
            ("dead_lettered_at", Cell::Time(Some(days_ago(40)))),
        ],
    )
    .await;
    // Finished, of the relay's topics, but younger than the cut-offs: kept.
    event_in(h, &outbox, "a.x", &[EventState::Published(days_ago(6))]).await;
    event_in(h, &outbox, "a.x", &[EventState::Dead(days_ago(29))]).await;
    let relay = OutboxRelay::new(
        outbox.clone(),
        FnDelivery::new(|_e: OutboxEvent| async { Ok(()) }),
        config("cleaner")
            .with_topics(["a.*"])
            .with_cleanup_batch_size(500),
    )
    .unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let writer = {
        let (outbox, stop) = (outbox.clone(), stop.clone());
        tokio::spawn(async move {
            let backend = outbox.backend().clone();
            let mut worst = Duration::ZERO;
            let mut n = 0;
            let mut started = Some(started_tx);
            while !stop.load(Ordering::Relaxed) {
                let start = Instant::now();
                let mut tx = backend.begin().await.expect("writer begin");
                outbox
                    .enqueue(&mut tx, OutboxMessage::new("a.x", json!(n)))
                    .await
                    .expect("writer enqueue");
                backend.commit(tx).await.expect("writer commit");
                worst = worst.max(start.elapsed());
                n += 1;
                if let Some(started) = started.take() {
                    let _ = started.send(());
                }
            }
            (worst, n)
        })
    };
    started_rx.await.expect("the writer wrote once");
    let deleted = cleanup(&relay, FinishedState::Published, 7).await;
    let dead = cleanup(&relay, FinishedState::DeadLettered, 30).await;
    stop.store(true, Ordering::Relaxed);
    let (worst, writes) = writer.await.expect("writer completes");
    assert_eq!(deleted, 10_000, "only the relay's topics");
    assert_eq!(dead, 50);
    assert!(writes > 0);
    assert!(worst < H::WRITER_WAIT_LIMIT, "a writer waited {worst:?}");
    assert_eq!(
        h.scalar("SELECT count(*) FROM outbox WHERE topic = 'b.x'")
            .await,
        10_000
    );
    let written = h
        .scalar(
            "SELECT count(*) FROM outbox WHERE topic = 'a.x' AND published_at IS NULL \
             AND dead_lettered_at IS NULL",
        )
        .await;
    assert_eq!(written, writes, "every write is kept");
    assert_eq!(cleanup(&relay, FinishedState::Published, 7).await, 0);
    assert_eq!(cleanup(&relay, FinishedState::DeadLettered, 30).await, 0);
    assert_eq!(
        h.scalar("SELECT count(*) FROM outbox").await,
        10_000 + 2 + writes
    );
}

/// The backlog of a relay on `t`: zero when empty; then pending and dead counts of its topic
/// only, the oldest pending age in seconds; against a caller's clock, never negative.
pub async fn backlog_reports_pending_oldest_age_and_dead_letters<H: Harness>(h: &H) {
    let outbox = outbox(h).await;
    let relay = OutboxRelay::new(
        outbox.clone(),
        FnDelivery::new(|_e: OutboxEvent| async { Ok(()) }),
        config("relay").with_topics(["t"]),
    )
    .unwrap();
    let empty = relay.journal().backlog(&[]).await.unwrap();
    assert_eq!(
        (
            empty.pending,
            empty.oldest_pending_age_seconds,
            empty.dead_lettered
        ),
        (0, 0.0, 0)
    );

    let now = now();
    let ago = |seconds| EventState::Created(now - chrono::Duration::seconds(seconds));
    let (published, dead) = (EventState::Published(now), EventState::Dead(now));
    for (topic, states) in [
        ("t", vec![ago(90)]),
        ("t", vec![ago(0)]),
        ("other", vec![ago(3600)]),
        ("t", vec![ago(0), dead.clone()]),
        // Published: neither pending nor dead, however old.
        ("t", vec![ago(7200), published.clone()]),
        ("t", vec![ago(10800), published, dead.clone()]),
        // Dead: not pending, so not the oldest pending either.
        ("t", vec![ago(14400), dead]),
    ] {
        event_in(h, &outbox, topic, &states).await;
    }
    let backlog = relay.journal().backlog(&[]).await.unwrap();
    assert_eq!(backlog.pending, 2);
    assert_eq!(backlog.dead_lettered, 2);
    assert!(
        (89.0..120.0).contains(&backlog.oldest_pending_age_seconds),
        "{backlog:?}"
    );

    let backend = outbox.backend();
    let at = backend
        .backlog(
            outbox.table(),
            &BacklogParams::new(TopicFilter::all(), now + chrono::Duration::seconds(10)),
        )
        .await
        .unwrap();
    assert_eq!((at.pending, at.dead_lettered), (3, 2));
    assert!(
        (3609.0..3611.0).contains(&at.oldest_pending_age_seconds),
        "{at:?}"
    );
    let before = backend
        .backlog(
            outbox.table(),
            &BacklogParams::new(filter(Some(&["t"]), &[]), now - chrono::Duration::hours(1)),
        )
        .await
        .unwrap();
    assert_eq!(before.oldest_pending_age_seconds, 0.0);
}

/// Deletes what `relay`'s journal holds of `state` finished more than `days` ago, in the relay's
/// clean-up batches; returns how many rows went.
async fn cleanup<B: JournalBackend>(
    relay: &OutboxRelay<B>,
    state: FinishedState,
    days: u64,
) -> u64 {
    relay
        .journal()
        .cleanup(
            state,
            Duration::from_secs(days * 86400),
            &[],
            relay.config().cleanup_batch_size,
            &|_| std::ops::ControlFlow::Continue(()),
        )
        .await
        .unwrap()
        .deleted
}
