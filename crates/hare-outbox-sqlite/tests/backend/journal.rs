//! The journal's reads on SQLite: every filter alone and combined, every status, keyset pages,
//! extra columns, hostile filter values and the timeline on known timestamps.

use std::collections::BTreeSet;

use chrono::{DateTime, Duration, TimeZone, Utc};
use hare_outbox_core::backend::{
    EventFailure, EventLeaseParams, EventMarkDeliveredParams, EventMarkFailedParams,
};
use hare_outbox_core::journal::{Cursor, EventQuery, Journal, TimelineBucket, TimelineParams};
use hare_outbox_core::{
    Backend, ColumnType, Error, EventStatus, ExtraColumn, Outbox, OutboxMessage, OutboxTable,
    TopicFilter,
};
use hare_outbox_sqlite::SqliteBackend;
use hare_outbox_testkit::sqlite::TestDb;
use serde_json::{Value, json};
use sqlx::{AssertSqlSafe, SqlitePool};

use crate::common::{enqueue, setup};

fn journal(outbox: &Outbox<SqliteBackend>) -> Journal<SqliteBackend> {
    Journal::new(outbox.backend().clone(), outbox.table().clone())
}

/// The sequences of the page `query` lists.
async fn sequences(journal: &Journal<SqliteBackend>, query: &EventQuery) -> Vec<i64> {
    journal
        .list(query)
        .await
        .expect("list")
        .events
        .iter()
        .map(|e| e.sequence)
        .collect()
}

/// Enqueues an event of `topic` with `payload` and, when given, an `author` header; returns its
/// sequence.
async fn put(
    outbox: &Outbox<SqliteBackend>,
    topic: &str,
    payload: Value,
    author: Option<Value>,
) -> i64 {
    let mut message = OutboxMessage::new(topic, payload);
    if let Some(author) = author {
        message = message.header("author", author);
    }
    enqueue(outbox, message).await.sequence
}

/// Six events about captured objects (seed 000's journal), by several authors.
async fn seed_journal(outbox: &Outbox<SqliteBackend>) -> [i64; 6] {
    let admin = || Some(json!("Администратор"));
    [
        put(
            outbox,
            "doc.updated",
            json!({"model": "sales_orders", "pk": 22, "changed": ["status"]}),
            admin(),
        )
        .await,
        put(
            outbox,
            "doc.updated",
            json!({"model": "plan_prod_orders", "pk": 18}),
            admin(),
        )
        .await,
        put(
            outbox,
            "doc.created",
            json!({"model": "sales_orders", "pk": "A-7"}),
            Some(json!("bob")),
        )
        .await,
        put(
            outbox,
            "billing.paid",
            json!({"model": "sales_orders", "pk": 220}),
            Some(json!(5)),
        )
        .await,
        put(
            outbox,
            "billing.refunded",
            json!({"model": "line_items", "pk": {"order": 22, "line": 1}}),
            None,
        )
        .await,
        put(outbox, "doc.updated", json!({"id": 22}), admin()).await,
    ]
}

#[tokio::test]
async fn every_filter_alone_and_combined() {
    let (db, outbox) = setup("journal_filters").await;
    let journal = journal(&outbox);
    let [so22, plan18, so_a7, so220, lines, plain] = seed_journal(&outbox).await;

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
    let composite = journal.get(stored_id(&db.pool, lines).await).await.unwrap();
    let shown = hare_outbox_core::journal::ObjectRef::of(&composite.unwrap()).unwrap();
    assert_eq!(shown, r#"line_items #{"line":1,"order":22}"#);
    let q = EventQuery::new().with_object(&shown).unwrap();
    assert_eq!(sequences(&journal, &q).await, vec![lines]);
    // Stored in the primary key's column order, as a capture trigger writes it; found by the
    // sorted form and by any spacing or key order of the filter.
    sqlx::query("UPDATE journal_filters SET payload = ?1 WHERE sequence = ?2")
        .bind(r#"{"model":"line_items","pk":{"order":22,"line":1}}"#)
        .bind(lines)
        .execute(&db.pool)
        .await
        .unwrap();
    for text in [shown.as_str(), r#"line_items # {"order": 22, "line": 1}"#] {
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
        set_time(
            &db.pool,
            *sequence,
            "created_at",
            base + Duration::minutes(i as i64),
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
    db.close().await;
}

/// The id of the event at `sequence`.
async fn stored_id(pool: &SqlitePool, sequence: i64) -> uuid::Uuid {
    let id: String = sqlx::query_scalar("SELECT id FROM journal_filters WHERE sequence = ?1")
        .bind(sequence)
        .fetch_one(pool)
        .await
        .expect("id");
    id.parse().expect("uuid")
}

/// Writes `column` of the event at `sequence` in the backend's timestamp format.
async fn set_time(pool: &SqlitePool, sequence: i64, column: &str, time: DateTime<Utc>) {
    set_time_in(pool, "journal_filters", sequence, column, Some(time)).await;
}

async fn set_time_in(
    pool: &SqlitePool,
    table: &str,
    sequence: i64,
    column: &str,
    time: Option<DateTime<Utc>>,
) {
    sqlx::query(AssertSqlSafe(format!(
        "UPDATE {table} SET {column} = ?1 WHERE sequence = ?2"
    )))
    .bind(time.map(|t| t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()))
    .bind(sequence)
    .execute(pool)
    .await
    .expect("set time");
}

#[tokio::test]
async fn every_status_through_the_backend_calls() {
    let (db, outbox) = setup("journal_statuses").await;
    let backend = outbox.backend().clone();
    let table = outbox.table().clone();
    let journal = journal(&outbox);
    let mut by_status = Vec::new();
    for topic in [
        "s.pending",
        "s.leased",
        "s.retrying",
        "s.dead",
        "s.published",
    ] {
        by_status.push(put(&outbox, topic, json!({}), None).await);
    }
    let [pending, leased, retrying, dead, published] = by_status[..] else {
        unreachable!()
    };
    let now = Utc::now();
    let lease = |topics: &[&str], by: &str| {
        EventLeaseParams::new(now, now + Duration::hours(1), by.to_owned(), 10)
            .with_topics(TopicFilter::new(Some(topics), Vec::<&str>::new()).unwrap())
    };
    let held = backend
        .event_lease(
            &table,
            &lease(&["s.retrying", "s.dead", "s.published"], "relay-a"),
        )
        .await
        .unwrap();
    assert_eq!(held.len(), 3);
    backend
        .event_mark_delivered(&table, &EventMarkDeliveredParams::new(vec![published], now))
        .await
        .unwrap();
    let failed = backend
        .event_mark_failed(
            &table,
            &EventMarkFailedParams::new(
                vec![
                    EventFailure::new(
                        retrying,
                        1,
                        "broker down".to_owned(),
                        Some(now + Duration::hours(1)),
                        None,
                    ),
                    EventFailure::new(dead, 5, "rejected".to_owned(), None, Some(now)),
                ],
                "relay-a".to_owned(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(failed, 2);
    let held = backend
        .event_lease(&table, &lease(&["s.leased"], "relay-b"))
        .await
        .unwrap();
    assert_eq!(held.len(), 1);

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
    set_time_in(
        &db.pool,
        "journal_statuses",
        leased,
        "lease_until",
        Some(Utc::now() - Duration::seconds(1)),
    )
    .await;
    let q = EventQuery::new().with_statuses(&[EventStatus::Pending]);
    assert_eq!(sequences(&journal, &q).await, vec![leased, pending]);
    let q = EventQuery::new().with_statuses(&[EventStatus::Leased]);
    assert!(sequences(&journal, &q).await.is_empty());
    db.close().await;
}

/// Walks every page of `query` with `EventPage::next_query`; returns the sequences in order and
/// the number of pages.
async fn walk(journal: &Journal<SqliteBackend>, query: EventQuery) -> (Vec<i64>, usize) {
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

#[tokio::test]
async fn pages_walk_every_event_once_in_both_directions() {
    let (db, outbox) = setup("journal_pages").await;
    let journal = journal(&outbox);
    let mut all = Vec::new();
    for n in 0..23 {
        let topic = if n % 3 == 0 { "a.three" } else { "b.other" };
        all.push(put(&outbox, topic, json!({"n": n}), None).await);
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
    db.close().await;
}

#[tokio::test]
async fn extra_columns_are_decoded_as_event_get_does() {
    let db = TestDb::new(2).await;
    let table = OutboxTable::parse("journal_extra")
        .unwrap()
        .with_column(ExtraColumn::new("tenant_id", ColumnType::BigInt).unwrap())
        .unwrap()
        .with_column(ExtraColumn::new("note", ColumnType::Json).unwrap())
        .unwrap();
    let outbox = Outbox::new(SqliteBackend::new(db.pool.clone()), table);
    outbox.migrate().await.unwrap();
    let event = enqueue(
        &outbox,
        OutboxMessage::new("t.extra", json!({}))
            .extra("tenant_id", 42_i64)
            .extra(
                "note",
                hare_outbox_core::ExtraValue::Json(json!({"a": [1]})),
            ),
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
    db.close().await;
}

#[tokio::test]
async fn hostile_filter_values_match_nothing_and_break_nothing() {
    let (db, outbox) = setup("journal_hostile").await;
    let journal = journal(&outbox);
    seed_hostile(&outbox).await;
    for value in [
        "' OR 1=1 --",
        "%",
        "*",
        "\" OR \"\"=\"",
        "x'); DROP TABLE journal_hostile; --",
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
    db.close().await;
}

async fn seed_hostile(outbox: &Outbox<SqliteBackend>) {
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

#[tokio::test]
async fn timeline_counts_backlog_and_latency_on_known_times() {
    let (db, outbox) = setup("journal_timeline").await;
    let journal = journal(&outbox);
    let t0 = Utc.with_ymd_and_hms(2026, 11, 13, 12, 0, 0).unwrap();
    let at = |seconds: i64| t0 + Duration::seconds(seconds);
    // (created, published, dead-lettered), seconds after t0; the window is [0 s, 60 s) in
    // 3 buckets of 20 s.
    let rows: [(i64, Option<i64>, Option<i64>); 9] = [
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
    for (i, (created, published, dead)) in rows.iter().enumerate() {
        let sequence = put(&outbox, "t.timeline", json!({"i": i}), None).await;
        set_time_in(
            &db.pool,
            "journal_timeline",
            sequence,
            "created_at",
            Some(at(*created)),
        )
        .await;
        set_time_in(
            &db.pool,
            "journal_timeline",
            sequence,
            "published_at",
            published.map(at),
        )
        .await;
        set_time_in(
            &db.pool,
            "journal_timeline",
            sequence,
            "dead_lettered_at",
            dead.map(at),
        )
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
    db.close().await;
}

#[tokio::test]
async fn timeline_refuses_an_impossible_grid() {
    let (db, outbox) = setup("journal_grid").await;
    let journal = journal(&outbox);
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
    db.close().await;
}
