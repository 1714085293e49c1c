//! The journal's reads on any backend: every filter alone and combined, every status, keyset
//! pages, extra columns, hostile filter values and the timeline on known timestamps.
//!
//! Each public function is one scenario; a backend's test calls it on a migrated outbox of its own
//! test database (a PostgreSQL schema, a SQLite file), passing a [`RowEditor`] where the scenario
//! sets timestamps or stored payloads directly.

// A suite fails its test by panicking.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;

use chrono::{Duration, TimeZone, Utc};
use hare_outbox_core::backend::{
    EventFailure, EventLeaseParams, EventMarkDeliveredParams, EventMarkFailedParams,
};
use hare_outbox_core::journal::{
    Cursor, EventQuery, Journal, ObjectRef, TimelineBucket, TimelineParams,
};
use hare_outbox_core::{
    ColumnType, Error, EventStatus, ExtraColumn, ExtraValue, JournalBackend, Outbox, OutboxEvent,
    OutboxMessage, OutboxTable, TopicFilter,
};
use serde_json::{Value, json};

use super::{RowEditor, TimeColumn};

/// Every filter of [`EventQuery`] alone and combined, on six events about captured objects
/// (seed 000's journal) by several authors: topics (exact, prefix, excluded), object (model,
/// model and key, a composite key in any spacing and key order, also when stored in the primary
/// key's column order as a capture trigger writes it), author (exact, string headers only),
/// creation time (with times set through `rows`), and all of them together.
///
/// `outbox` is a migrated, empty outbox table.
///
/// # Panics
/// When a read or a write fails or a page lists other events than expected.
pub async fn every_filter_alone_and_combined<B: JournalBackend>(
    outbox: &Outbox<B>,
    rows: &impl RowEditor,
) {
    let table = outbox.table();
    let journal = journal(outbox);
    let events = seed_journal(outbox).await;
    let [so22, plan18, so_a7, so220, lines, plain] = events.each_ref().map(|e| e.sequence);

    let all = sequences(&journal, &EventQuery::new()).await;
    assert_eq!(all, vec![plain, lines, so220, so_a7, plan18, so22]);

    let q = EventQuery::new().with_topics(&["doc.updated"]).unwrap();
    assert_eq!(sequences(&journal, &q).await, vec![plain, plan18, so22]);
    let q = EventQuery::new().with_topics(&["billing.*"]).unwrap();
    assert_eq!(sequences(&journal, &q).await, vec![lines, so220]);
    let q = EventQuery::new()
        .with_topics(&["doc.created", "billing.r*"])
        .unwrap();
    assert_eq!(sequences(&journal, &q).await, vec![lines, so_a7]);

    let q = EventQuery::new().with_object("sales_orders").unwrap();
    assert_eq!(sequences(&journal, &q).await, vec![so220, so_a7, so22]);
    let q = EventQuery::new().with_object("sales_orders #22").unwrap();
    assert_eq!(sequences(&journal, &q).await, vec![so22]);
    let q = EventQuery::new().with_object("sales_orders#A-7").unwrap();
    assert_eq!(sequences(&journal, &q).await, vec![so_a7]);
    // A composite key as its compact JSON text, as ObjectRef::of shows it.
    let composite = journal.get(events[4].id).await.unwrap();
    let shown = ObjectRef::of(&composite.unwrap()).unwrap();
    assert_eq!(shown, r#"line_items #{"line":1,"order":22}"#);
    let q = EventQuery::new().with_object(&shown).unwrap();
    assert_eq!(sequences(&journal, &q).await, vec![lines]);
    // Compared as JSON: key order and spacing do not matter.
    let spaced = r#"line_items # {"order": 22, "line": 1}"#;
    let q = EventQuery::new().with_object(spaced).unwrap();
    assert_eq!(sequences(&journal, &q).await, vec![lines]);
    // Stored in the primary key's column order, as a capture trigger writes it; found by the
    // sorted form and by any spacing or key order of the filter.
    rows.set_payload(
        table,
        lines,
        r#"{"model":"line_items","pk":{"order":22,"line":1}}"#,
    )
    .await;
    for text in [shown.as_str(), spaced] {
        let q = EventQuery::new().with_object(text).unwrap();
        assert_eq!(sequences(&journal, &q).await, vec![lines], "{text}");
    }
    // A quoted key is a string key, which this one is not.
    let q = EventQuery::new()
        .with_object(r#"sales_orders #"22""#)
        .unwrap();
    assert!(sequences(&journal, &q).await.is_empty());
    let q = EventQuery::new().with_object("sales_orders #2").unwrap();
    assert!(sequences(&journal, &q).await.is_empty());

    let q = EventQuery::new().with_author("Администратор").unwrap();
    assert_eq!(sequences(&journal, &q).await, vec![plain, plan18, so22]);
    // A header that is not a string is nobody's name.
    let q = EventQuery::new().with_author("5").unwrap();
    assert!(sequences(&journal, &q).await.is_empty());
    let q = EventQuery::new().with_author("администратор").unwrap();
    assert!(
        sequences(&journal, &q).await.is_empty(),
        "the author matches exactly"
    );

    // Known creation times: one event per minute from 12:00.
    let base = Utc.with_ymd_and_hms(2026, 11, 13, 12, 0, 0).unwrap();
    for (i, sequence) in [so22, plan18, so_a7, so220, lines, plain]
        .iter()
        .enumerate()
    {
        rows.set_time(
            table,
            *sequence,
            TimeColumn::CreatedAt,
            Some(base + Duration::minutes(i as i64)),
        )
        .await;
    }
    let q = EventQuery::new()
        .with_created(Some(base + Duration::minutes(1)), None)
        .unwrap();
    assert_eq!(
        sequences(&journal, &q).await,
        vec![plain, lines, so220, so_a7, plan18]
    );
    let q = EventQuery::new()
        .with_created(None, Some(base + Duration::minutes(2)))
        .unwrap();
    assert_eq!(sequences(&journal, &q).await, vec![plan18, so22]);
    let q = EventQuery::new()
        .with_created(
            Some(base + Duration::minutes(1)),
            Some(base + Duration::minutes(3)),
        )
        .unwrap();
    assert_eq!(sequences(&journal, &q).await, vec![so_a7, plan18]);

    // Combined: every filter narrows.
    let q = EventQuery::new()
        .with_topics(&["doc.*"])
        .unwrap()
        .with_object("sales_orders")
        .unwrap()
        .with_author("Администратор")
        .unwrap()
        .with_statuses(&[EventStatus::Pending])
        .with_created(Some(base), Some(base + Duration::minutes(10)))
        .unwrap();
    assert_eq!(sequences(&journal, &q).await, vec![so22]);
    let q = q.with_statuses(&[EventStatus::Published]);
    assert!(sequences(&journal, &q).await.is_empty());
    // Excluded topics of a TopicFilter are honoured too.
    let mut q = EventQuery::new();
    q.topics = TopicFilter::new(Some(&["doc.*"]), ["doc.updated"]).unwrap();
    assert_eq!(sequences(&journal, &q).await, vec![so_a7]);
}

/// Every [`EventStatus`], reached through the backend's own lease and mark calls, is listed by its
/// status filter alone and in combinations, and the SQL agrees with [`OutboxEvent::status`]; a
/// lease that ran out (its `lease_until` set into the past through `rows`) is no lease.
///
/// `outbox` is a migrated, empty outbox table.
///
/// # Panics
/// When a call fails or a page lists other events than expected.
pub async fn every_status_through_the_backend_calls<B: JournalBackend>(
    outbox: &Outbox<B>,
    rows: &impl RowEditor,
) {
    let backend = outbox.backend().clone();
    let table = outbox.table().clone();
    let journal = journal(outbox);
    let mut by_status = Vec::new();
    for topic in [
        "s.pending",
        "s.leased",
        "s.retrying",
        "s.dead",
        "s.published",
    ] {
        by_status.push(put(outbox, topic, json!({}), None).await);
    }
    let [pending, leased, retrying, dead, published] = by_status[..] else {
        unreachable!()
    };
    let now = Utc::now();
    let lease = |topics: &[&str], by: &str| {
        EventLeaseParams::new(by.to_owned(), 10, std::time::Duration::from_secs(3600))
            .with_now(now)
            .with_topics(TopicFilter::new(Some(topics), Vec::<&str>::new()).unwrap())
    };
    let held = backend
        .event_lease(
            &table,
            &lease(&["s.retrying", "s.dead", "s.published"], "relay-a"),
        )
        .await
        .unwrap();
    assert_eq!(held.events.len(), 3);
    backend
        .event_mark_delivered(
            &table,
            &EventMarkDeliveredParams::new(vec![published]).with_now(now),
        )
        .await
        .unwrap();
    let failed = backend
        .event_mark_failed(
            &table,
            &EventMarkFailedParams::new(
                vec![
                    EventFailure::retry(
                        retrying,
                        1,
                        "broker down".to_owned(),
                        std::time::Duration::from_secs(3600),
                    ),
                    EventFailure::dead(dead, 5, "rejected".to_owned()),
                ],
                "relay-a".to_owned(),
            )
            .with_now(now),
        )
        .await
        .unwrap();
    assert_eq!(failed, 2);
    let held = backend
        .event_lease(&table, &lease(&["s.leased"], "relay-b"))
        .await
        .unwrap();
    assert_eq!(held.events.len(), 1);

    for (status, sequence) in [
        (EventStatus::Pending, pending),
        (EventStatus::Leased, leased),
        (EventStatus::Retrying, retrying),
        (EventStatus::Dead, dead),
        (EventStatus::Published, published),
    ] {
        let page = journal
            .list(&EventQuery::new().with_statuses(&[status]))
            .await
            .unwrap();
        assert_eq!(
            page.events.iter().map(|e| e.sequence).collect::<Vec<_>>(),
            vec![sequence],
            "{status:?}"
        );
        // The SQL agrees with OutboxEvent::status.
        assert_eq!(page.events[0].status(Utc::now()), status);
    }
    let q = EventQuery::new().with_statuses(&[EventStatus::Dead, EventStatus::Pending]);
    assert_eq!(sequences(&journal, &q).await, vec![dead, pending]);
    let q = EventQuery::new().with_statuses(&[
        EventStatus::Leased,
        EventStatus::Retrying,
        EventStatus::Published,
    ]);
    assert_eq!(
        sequences(&journal, &q).await,
        vec![published, retrying, leased]
    );

    // A lease that ran out is no lease: the event is pending again (retrying once it failed).
    rows.set_time(
        &table,
        leased,
        TimeColumn::LeaseUntil,
        Some(Utc::now() - Duration::seconds(1)),
    )
    .await;
    let q = EventQuery::new().with_statuses(&[EventStatus::Pending]);
    assert_eq!(sequences(&journal, &q).await, vec![leased, pending]);
    let q = EventQuery::new().with_statuses(&[EventStatus::Leased]);
    assert!(sequences(&journal, &q).await.is_empty());
}

/// Keyset pages over 23 events: walking `EventPage::next_query` lists every event once, newest
/// first and (from `Cursor::After`) oldest first, with and without a filter, for page sizes that
/// do and do not divide the count; `Cursor::Before` and `Cursor::After` are strict.
///
/// `outbox` is a migrated, empty outbox table.
///
/// # Panics
/// When a read or a write fails, a page is longer than its limit, a walk does not end, or the
/// events seen differ from those expected.
pub async fn pages_walk_every_event_once_in_both_directions<B: JournalBackend>(outbox: &Outbox<B>) {
    let journal = journal(outbox);
    let mut all = Vec::new();
    for n in 0..23 {
        let topic = if n % 3 == 0 { "a.three" } else { "b.other" };
        all.push(put(outbox, topic, json!({"n": n}), None).await);
    }
    let newest_first: Vec<i64> = all.iter().rev().copied().collect();

    let query = EventQuery::new().with_limit(5).unwrap();
    let first = journal.list(&query).await.unwrap();
    assert!(first.full);
    assert_eq!(
        first.events.iter().map(|e| e.sequence).collect::<Vec<_>>(),
        newest_first[..5]
    );
    let (seen, pages) = walk(&journal, query).await;
    assert_eq!(seen, newest_first, "no gap, no repeat, newest first");
    assert_eq!(pages, 5);

    // A page size dividing the count: the last full page is followed by an empty one.
    let (seen, pages) = walk(&journal, EventQuery::new().with_limit(23).unwrap()).await;
    assert_eq!((seen.len(), pages), (23, 2));

    // A filter across pages.
    let (seen, _) = walk(
        &journal,
        EventQuery::new()
            .with_topics(&["a.*"])
            .unwrap()
            .with_limit(3)
            .unwrap(),
    )
    .await;
    let expected: Vec<i64> = newest_first
        .iter()
        .copied()
        .filter(|s| (s - all[0]) % 3 == 0)
        .collect();
    assert_eq!(seen, expected);

    // Before(s) starts strictly below s.
    let q = EventQuery::new()
        .with_cursor(Cursor::Before(all[10]))
        .with_limit(2)
        .unwrap();
    assert_eq!(sequences(&journal, &q).await, vec![all[9], all[8]]);

    // After(s): oldest first, strictly above s; a live tail walks forward to the end.
    let q = EventQuery::new()
        .with_cursor(Cursor::After(all[20]))
        .with_limit(5)
        .unwrap();
    let page = journal.list(&q).await.unwrap();
    assert_eq!(
        page.events.iter().map(|e| e.sequence).collect::<Vec<_>>(),
        all[21..]
    );
    assert!(!page.full && page.next_query(&q).is_none());
    let (seen, pages) = walk(
        &journal,
        EventQuery::new()
            .with_cursor(Cursor::After(0))
            .with_limit(4)
            .unwrap(),
    )
    .await;
    assert_eq!(seen, all);
    assert_eq!(pages, 6);
    let unique: BTreeSet<i64> = seen.iter().copied().collect();
    assert_eq!(unique.len(), all.len());
    // Nothing newer yet.
    let q = EventQuery::new().with_cursor(Cursor::After(*all.last().unwrap()));
    assert!(sequences(&journal, &q).await.is_empty());
}

/// Creates and migrates the outbox table `journal_extra` with extra columns `tenant_id` (BIGINT)
/// and `note` (JSON) on `backend`, enqueues one event with both, and checks that the journal
/// decodes them as [`Outbox::get`] does.
///
/// # Panics
/// When a call fails or the listed event differs from the stored one.
pub async fn extra_columns_are_decoded_as_event_get_does<B: JournalBackend>(backend: B) {
    let table = OutboxTable::parse("journal_extra")
        .unwrap()
        .with_column(ExtraColumn::new("tenant_id", ColumnType::BigInt).unwrap())
        .unwrap()
        .with_column(ExtraColumn::new("note", ColumnType::Json).unwrap())
        .unwrap();
    let outbox = Outbox::new(backend, table);
    outbox.migrate().await.unwrap();
    let event = enqueue(
        &outbox,
        OutboxMessage::new("t.extra", json!({}))
            .extra("tenant_id", 42_i64)
            .extra("note", ExtraValue::Json(json!({"a": [1]}))),
    )
    .await;
    let page = journal(&outbox).list(&EventQuery::new()).await.unwrap();
    assert_eq!(page.events.len(), 1);
    assert_eq!(page.events[0].extra["tenant_id"], json!(42));
    assert_eq!(page.events[0].extra["note"], json!({"a": [1]}));
    assert_eq!(
        Some(&page.events[0]),
        outbox.get(event.id).await.unwrap().as_ref()
    );
}

/// Filter values that would be SQL or wildcards if spliced (quotes, comments, `%`, `*`, a
/// `DROP TABLE` of the outbox table) match nothing as author, object or key, `%` and `_` are no
/// wildcards in topic prefixes, and the table is intact afterwards.
///
/// `outbox` is a migrated, empty outbox table.
///
/// # Panics
/// When a read or a write fails or a hostile value matches an event.
pub async fn hostile_filter_values_match_nothing_and_break_nothing<B: JournalBackend>(
    outbox: &Outbox<B>,
) {
    let journal = journal(outbox);
    seed_hostile(outbox).await;
    let drop_table = format!("x'); DROP TABLE {}; --", outbox.table());
    for value in [
        "' OR 1=1 --",
        "%",
        "*",
        "\" OR \"\"=\"",
        drop_table.as_str(),
    ] {
        let q = EventQuery::new().with_author(value).unwrap();
        assert!(sequences(&journal, &q).await.is_empty(), "author {value:?}");
        let q = EventQuery::new().with_object(value).unwrap();
        assert!(sequences(&journal, &q).await.is_empty(), "object {value:?}");
        let q = EventQuery::new()
            .with_object(&format!("sales_orders #{value}"))
            .unwrap();
        assert!(sequences(&journal, &q).await.is_empty(), "pk {value:?}");
    }
    // `%` and `_` are no wildcards in topic prefixes either.
    let q = EventQuery::new().with_topics(&["%*"]).unwrap();
    assert!(sequences(&journal, &q).await.is_empty());
    let q = EventQuery::new().with_topics(&["doc_*"]).unwrap();
    assert!(sequences(&journal, &q).await.is_empty());
    // The table is intact.
    assert_eq!(sequences(&journal, &EventQuery::new()).await.len(), 2);
}

/// The timeline on nine events whose creation, publication and dead-letter times are set through
/// `rows`: per bucket the created, published and dead-lettered counts, the backlog at the bucket's
/// end and the delivery latency (p50, p95, max), with events on the window's edges and outside
/// it; an empty window carries the backlog through.
///
/// `outbox` is a migrated, empty outbox table.
///
/// # Panics
/// When a call fails or a bucket differs from the one expected.
pub async fn timeline_counts_backlog_and_latency_on_known_times<B: JournalBackend>(
    outbox: &Outbox<B>,
    rows: &impl RowEditor,
) {
    let table = outbox.table();
    let journal = journal(outbox);
    let t0 = Utc.with_ymd_and_hms(2026, 11, 13, 12, 0, 0).unwrap();
    let at = |seconds: i64| t0 + Duration::seconds(seconds);
    // (created, published, dead-lettered), seconds after t0; the window is [0 s, 60 s) in
    // 3 buckets of 20 s.
    let events: [(i64, Option<i64>, Option<i64>); 9] = [
        (-30, None, None),      // pending since before the window
        (-30, Some(-10), None), // finished before the window: nowhere
        (-30, Some(5), None),   // in the backlog until 5 s
        (0, Some(1), None),     // on the first edge: bucket 0, latency 1 s
        (2, Some(5), None),     // latency 3 s
        (10, None, Some(20)),   // dead on the second edge: bucket 1
        (21, Some(39), None),   // latency 18 s in bucket 1
        (45, None, None),       // pending in bucket 2
        (60, Some(61), None),   // on the end: outside
    ];
    for (i, (created, published, dead)) in events.iter().enumerate() {
        let sequence = put(outbox, "t.timeline", json!({"i": i}), None).await;
        rows.set_time(table, sequence, TimeColumn::CreatedAt, Some(at(*created)))
            .await;
        rows.set_time(table, sequence, TimeColumn::PublishedAt, published.map(at))
            .await;
        rows.set_time(table, sequence, TimeColumn::DeadLetteredAt, dead.map(at))
            .await;
    }
    let params = TimelineParams::last(std::time::Duration::from_secs(60), 3, at(60)).unwrap();
    // Latencies to the microsecond (interpolation works in floating point).
    let buckets: Vec<TimelineBucket> = journal
        .timeline(&params)
        .await
        .unwrap()
        .into_iter()
        .map(|mut b| {
            let round = |ms: Option<f64>| ms.map(|ms| (ms * 1000.0).round() / 1000.0);
            b.latency_p50_ms = round(b.latency_p50_ms);
            b.latency_p95_ms = round(b.latency_p95_ms);
            b.latency_max_ms = round(b.latency_max_ms);
            b
        })
        .collect();
    let bucket = |start: i64,
                  created,
                  published,
                  dead_lettered,
                  backlog,
                  latency: Option<(f64, f64, f64)>| TimelineBucket {
        start: at(start),
        end: at(start + 20),
        created,
        published,
        dead_lettered,
        backlog,
        latency_p50_ms: latency.map(|l| l.0),
        latency_p95_ms: latency.map(|l| l.1),
        latency_max_ms: latency.map(|l| l.2),
    };
    assert_eq!(
        buckets,
        vec![
            // Created at 0, 2, 10; published at 1, 5 (twice); backlog at 20 s: the one pending
            // since before and the one dead at 20 s exactly (it is dead from 20 s on, so still
            // counted at the end of bucket 0, which is 20 s exclusive).
            bucket(
                0,
                3,
                3,
                0,
                2,
                // Latencies 1 s, 3 s and 35 s (created at -30 s); p95 at rank 1.9.
                Some((3000.0, 31_800.0, 35_000.0))
            ),
            bucket(20, 1, 1, 1, 1, Some((18_000.0, 18_000.0, 18_000.0))),
            bucket(40, 1, 0, 0, 2, None),
        ]
    );

    // An empty window: empty buckets, the backlog carried through.
    let later = TimelineParams::last(std::time::Duration::from_secs(40), 4, at(200)).unwrap();
    let buckets = journal.timeline(&later).await.unwrap();
    assert_eq!(buckets.len(), 4);
    assert!(buckets.iter().all(|b| b.created == 0
        && b.published == 0
        && b.backlog == 2
        && b.latency_max_ms.is_none()));
    assert_eq!(buckets[0].start, at(160));
    assert_eq!(buckets[3].end, at(200));
}

/// The timeline refuses, as [`Error::Validation`], a grid of no buckets, a window that does not
/// start before its end, and buckets shorter than a microsecond (naming the 5 µs window).
///
/// `outbox` is a migrated outbox table.
///
/// # Panics
/// When an impossible grid is accepted or refused otherwise.
pub async fn timeline_refuses_an_impossible_grid<B: JournalBackend>(outbox: &Outbox<B>) {
    let journal = journal(outbox);
    let now = Utc::now();
    let mut params = TimelineParams::last(std::time::Duration::from_secs(1), 1, now).unwrap();
    params.buckets = 0;
    let err = journal.timeline(&params).await.unwrap_err();
    assert!(matches!(err, Error::Validation { .. }), "{err}");
    params.buckets = 10;
    params.since = now;
    let err = journal.timeline(&params).await.unwrap_err();
    assert!(
        matches!(err, Error::Validation { .. }) && err.to_string().contains("not before"),
        "{err}"
    );
    params.since = now - Duration::microseconds(5);
    let err = journal.timeline(&params).await.unwrap_err();
    assert!(err.to_string().contains("5 µs"), "{err}");
}

fn journal<B: JournalBackend>(outbox: &Outbox<B>) -> Journal<B> {
    Journal::new(outbox.backend().clone(), outbox.table().clone())
}

/// Enqueues `message` in a transaction of the backend's own and commits it.
async fn enqueue<B: JournalBackend>(outbox: &Outbox<B>, message: OutboxMessage) -> OutboxEvent {
    let backend = outbox.backend();
    let mut tx = backend.begin().await.expect("begin");
    let event = outbox.enqueue(&mut *tx, message).await.expect("enqueue");
    backend.commit(tx).await.expect("commit");
    event
}

/// The sequences of the page `query` lists.
async fn sequences<B: JournalBackend>(journal: &Journal<B>, query: &EventQuery) -> Vec<i64> {
    journal
        .list(query)
        .await
        .expect("list")
        .events
        .iter()
        .map(|e| e.sequence)
        .collect()
}

/// Enqueues an event of `topic` with `payload` and, when given, an `author` header.
async fn put_event<B: JournalBackend>(
    outbox: &Outbox<B>,
    topic: &str,
    payload: Value,
    author: Option<Value>,
) -> OutboxEvent {
    let mut message = OutboxMessage::new(topic, payload);
    if let Some(author) = author {
        message = message.header("author", author);
    }
    enqueue(outbox, message).await
}

/// Like [`put_event`]; returns the event's sequence.
async fn put<B: JournalBackend>(
    outbox: &Outbox<B>,
    topic: &str,
    payload: Value,
    author: Option<Value>,
) -> i64 {
    put_event(outbox, topic, payload, author).await.sequence
}

/// Six events about captured objects (seed 000's journal), by several authors.
async fn seed_journal<B: JournalBackend>(outbox: &Outbox<B>) -> [OutboxEvent; 6] {
    let admin = || Some(json!("Администратор"));
    [
        put_event(
            outbox,
            "doc.updated",
            json!({"model": "sales_orders", "pk": 22, "changed": ["status"]}),
            admin(),
        )
        .await,
        put_event(
            outbox,
            "doc.updated",
            json!({"model": "plan_prod_orders", "pk": 18}),
            admin(),
        )
        .await,
        put_event(
            outbox,
            "doc.created",
            json!({"model": "sales_orders", "pk": "A-7"}),
            Some(json!("bob")),
        )
        .await,
        put_event(
            outbox,
            "billing.paid",
            json!({"model": "sales_orders", "pk": 220}),
            Some(json!(5)),
        )
        .await,
        put_event(
            outbox,
            "billing.refunded",
            json!({"model": "line_items", "pk": {"order": 22, "line": 1}}),
            None,
        )
        .await,
        put_event(outbox, "doc.updated", json!({"id": 22}), admin()).await,
    ]
}

async fn seed_hostile<B: JournalBackend>(outbox: &Outbox<B>) {
    put(
        outbox,
        "doc.updated",
        json!({"model": "sales_orders", "pk": 1}),
        Some(json!("alice")),
    )
    .await;
    put(
        outbox,
        "doc.created",
        json!({"model": "sales_orders", "pk": "2"}),
        Some(json!("bob")),
    )
    .await;
}

/// Walks every page of `query` with `EventPage::next_query`; returns the sequences in order and
/// the number of pages.
async fn walk<B: JournalBackend>(journal: &Journal<B>, query: EventQuery) -> (Vec<i64>, usize) {
    let mut seen = Vec::new();
    let mut pages = 0;
    let mut next = Some(query);
    while let Some(query) = next {
        let page = journal.list(&query).await.expect("list");
        pages += 1;
        assert!(page.events.len() <= query.limit as usize);
        seen.extend(page.events.iter().map(|e| e.sequence));
        next = page.next_query(&query);
        assert!(pages < 100, "the walk does not end");
    }
    (seen, pages)
}
