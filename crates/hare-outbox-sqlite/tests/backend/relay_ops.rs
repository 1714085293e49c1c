//! Topic filters, dead-letter retry, clean-up and backlog on SQLite (the PostgreSQL backend's
//! `relay_ops` tests, plus the statements called directly).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use hare_outbox_core::backend::{
    BacklogParams, EventDeleteFinishedParams, EventLeaseParams, EventRetryDeadLetteredParams,
    FinishedState,
};
use hare_outbox_core::{
    Backend, DeliveryError, FnDelivery, Outbox, OutboxEvent, OutboxMessage, OutboxRelay,
    RelayConfig, TopicFilter,
};
use hare_outbox_sqlite::{BUSY_TIMEOUT, SqliteBackend};
use hare_outbox_testkit::sqlite::TestDb;
use serde_json::json;
use sqlx::SqlitePool;
use uuid::Uuid;

use crate::common::{count, enqueue, setup, stored};

fn fast() -> RelayConfig {
    RelayConfig::default()
        .with_poll_interval(Duration::from_millis(20))
        .with_retry_base(Duration::from_millis(50))
}

type Topics = Arc<Mutex<Vec<String>>>;

/// A delivery that records the topics it delivers and refuses `fail_topic`.
fn recording(seen: &Topics, fail_topic: &'static str) -> impl hare_outbox_core::Delivery {
    let seen = seen.clone();
    FnDelivery::new(move |e: OutboxEvent| {
        let seen = seen.clone();
        async move {
            if e.topic == fail_topic {
                return Err(DeliveryError::new("refused"));
            }
            seen.lock().expect("recorder lock").push(e.topic);
            Ok(())
        }
    })
}

fn sorted(seen: &Topics) -> Vec<String> {
    let mut topics = seen.lock().expect("recorder lock").clone();
    topics.sort();
    topics
}

async fn enqueue_all(db: &TestDb, outbox: &Outbox<SqliteBackend>, topics: &[&str]) {
    let mut tx = db.pool.begin().await.expect("begin");
    for topic in topics {
        outbox
            .enqueue(&mut *tx, OutboxMessage::new(*topic, json!({})))
            .await
            .expect("enqueue");
    }
    tx.commit().await.expect("commit");
}

/// `time` as the backend stores it.
fn ts(time: DateTime<Utc>) -> String {
    time.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

fn days_ago(days: i64) -> String {
    ts(Utc::now() - chrono::Duration::days(days))
}

/// A hyphenated UUID text made from `n`, unique per `n`.
fn uuid_text(n: i64) -> String {
    format!("00000000-0000-7000-8000-{n:012}")
}

/// Inserts one finished row of `topic` with the given timestamps; returns its id.
async fn insert_row(
    pool: &SqlitePool,
    n: i64,
    topic: &str,
    published_at: Option<String>,
    dead_lettered_at: Option<String>,
) -> Uuid {
    let id = uuid_text(n);
    sqlx::query(
        "INSERT INTO outbox (id, topic, payload, created_at, attempts, published_at, dead_lettered_at) \
         VALUES (?1, ?2, '{}', ?3, 5, ?4, ?5)",
    )
    .bind(&id)
    .bind(topic)
    .bind(days_ago(60))
    .bind(published_at)
    .bind(dead_lettered_at)
    .execute(pool)
    .await
    .expect("insert row");
    Uuid::parse_str(&id).expect("uuid")
}

async fn ids_left(pool: &SqlitePool) -> BTreeSet<String> {
    sqlx::query_scalar::<_, String>("SELECT id FROM outbox")
        .fetch_all(pool)
        .await
        .expect("ids")
        .into_iter()
        .collect()
}

fn filter(include: Option<&[&str]>, exclude: &[&str]) -> TopicFilter {
    TopicFilter::new(include, exclude).expect("valid filter")
}

#[tokio::test]
async fn relays_on_disjoint_topics_share_one_table() {
    let (db, outbox) = setup("outbox").await;
    enqueue_all(
        &db,
        &outbox,
        &[
            "library.loan.created",
            "library_x",
            "taskiq",
            "billing.paid",
            "a%b.c",
            "Library.loan",
        ],
    )
    .await;
    let (lib, rest) = (Topics::default(), Topics::default());
    let r1 = OutboxRelay::new(
        outbox.clone(),
        recording(&lib, ""),
        fast().with_topics(["library.*", "taskiq"]),
    )
    .expect("relay 1");
    let r2 = OutboxRelay::new(
        outbox.clone(),
        recording(&rest, ""),
        fast().with_exclude_topics(["library.*", "taskiq"]),
    )
    .expect("relay 2");
    assert_eq!(r1.backlog().await.expect("backlog 1").pending, 2);
    assert_eq!(r2.backlog().await.expect("backlog 2").pending, 4);
    assert_eq!(r1.poll_once().await.expect("poll 1").leased, 2);
    assert_eq!(r2.poll_once().await.expect("poll 2").leased, 4);
    assert_eq!(sorted(&lib), ["library.loan.created", "taskiq"]);
    // `_` and `%` are literal: "library_x" is not under "library.*", "a%b.c" is an ordinary
    // topic; matching is case-sensitive: "Library.loan" is not under "library.*".
    assert_eq!(
        sorted(&rest),
        ["Library.loan", "a%b.c", "billing.paid", "library_x"]
    );
    assert_eq!(r1.poll_once().await.expect("poll 1 again").leased, 0);
    assert_eq!(r2.poll_once().await.expect("poll 2 again").leased, 0);
}

#[tokio::test]
async fn lease_and_backlog_take_exactly_the_topics_the_filter_matches() {
    let (_db, outbox) = setup("outbox").await;
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
        enqueue(&outbox, OutboxMessage::new(topic, json!({}))).await;
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
        let now = Utc::now();
        let leased = backend
            .event_lease(
                table,
                &EventLeaseParams::new("r".into(), 100, Duration::ZERO)
                    .with_now(now - chrono::Duration::seconds(1))
                    .with_topics(topic_filter.clone()),
            )
            .await
            .expect("lease")
            .events;
        let got: BTreeSet<&str> = leased.iter().map(|e| e.topic.as_str()).collect();
        assert_eq!(got, expected, "lease with {topic_filter:?}");
        assert_eq!(leased.len(), expected.len(), "{topic_filter:?}");

        let backlog = backend
            .backlog(table, &BacklogParams::new(topic_filter.clone(), Utc::now()))
            .await
            .expect("backlog");
        assert_eq!(
            backlog.pending,
            expected.len() as i64,
            "backlog with {topic_filter:?}"
        );
    }
}

#[tokio::test]
async fn retrying_a_dead_letter_releases_its_key() {
    let (db, outbox) = setup("outbox").await;
    let mut conn = db.pool.acquire().await.expect("acquire");
    let poison = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("poison", json!(1)).ordering_key("K"),
        )
        .await
        .expect("enqueue poison");
    let next = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("ok", json!(2)).ordering_key("K"),
        )
        .await
        .expect("enqueue next");
    drop(conn);
    let seen = Topics::default();
    let failing = OutboxRelay::new(
        outbox.clone(),
        recording(&seen, "poison"),
        fast().with_max_delivery_attempts(1),
    )
    .expect("failing relay");
    assert_eq!(failing.poll_once().await.expect("poll").dead_lettered, 1);
    assert_eq!(
        failing.poll_once().await.expect("poll").leased,
        0,
        "the dead letter holds back its key"
    );
    let backlog = failing.backlog().await.expect("backlog");
    assert_eq!((backlog.pending, backlog.dead_lettered), (1, 1));

    // Retry with a filter or an id that does not match: nothing changes.
    assert_eq!(
        failing
            .retry_dead_lettered(&["billing.*"], &[])
            .await
            .expect("retry billing"),
        0
    );
    assert_eq!(
        failing
            .retry_dead_lettered(&[], &[next.id])
            .await
            .expect("retry next"),
        0
    );
    assert!(
        failing
            .retry_dead_lettered(&["bad*pattern"], &[])
            .await
            .is_err()
    );
    // A relay limited to other topics retries nothing either.
    let elsewhere = OutboxRelay::new(
        outbox.clone(),
        recording(&seen, ""),
        fast().with_topics(["ok"]),
    )
    .expect("relay on other topics");
    assert_eq!(
        elsewhere
            .retry_dead_lettered(&[], &[poison.id])
            .await
            .expect("retry elsewhere"),
        0
    );
    assert!(stored(&outbox, &poison).await.dead_lettered_at.is_some());

    // The fixed subscriber takes the retried event, then the held-back one.
    let fixed = OutboxRelay::new(outbox.clone(), recording(&seen, ""), fast()).expect("relay");
    assert_eq!(
        fixed
            .retry_dead_lettered(&["poison"], &[poison.id])
            .await
            .expect("retry"),
        1
    );
    let retried = stored(&outbox, &poison).await;
    assert_eq!((retried.attempts, retried.dead_lettered_at), (0, None));
    assert_eq!(
        (
            retried.next_attempt_at,
            retried.lease_until,
            retried.leased_by.clone()
        ),
        (None, None, None)
    );
    assert_eq!(
        retried.last_error.as_deref(),
        Some("refused"),
        "the last error is kept for the record"
    );
    let backlog = fixed.backlog().await.expect("backlog");
    assert_eq!((backlog.pending, backlog.dead_lettered), (2, 0));
    // One poll takes the key's run in order: the retried head, then the event it held back.
    assert_eq!(fixed.poll_once().await.expect("poll").delivered, 2);
    assert_eq!(*seen.lock().expect("recorder lock"), ["poison", "ok"]);
}

#[tokio::test]
async fn retry_without_ids_takes_every_dead_letter_of_the_topics_and_nothing_published() {
    let (db, outbox) = setup("outbox").await;
    let old = Some(days_ago(3));
    let a1 = insert_row(&db.pool, 1, "a.x", None, old.clone()).await;
    let a2 = insert_row(&db.pool, 2, "a.y", None, old.clone()).await;
    let b = insert_row(&db.pool, 3, "b.x", None, old.clone()).await;
    // Published after it was dead-lettered (a late mark): not a dead letter any more.
    let published = insert_row(&db.pool, 4, "a.x", Some(days_ago(1)), old.clone()).await;
    let pending = insert_row(&db.pool, 5, "a.x", None, None).await;
    sqlx::query("UPDATE outbox SET last_error = 'boom', next_attempt_at = ?1, lease_until = ?1, leased_by = 'gone'")
        .bind(days_ago(1))
        .execute(&db.pool)
        .await
        .expect("set failure columns");
    let backend = outbox.backend();
    let table = outbox.table();

    let none = EventRetryDeadLetteredParams::new(filter(Some(&["a.*"]), &[]), Some(Vec::new()));
    assert_eq!(
        backend
            .event_retry_dead_lettered(table, &none)
            .await
            .expect("retry no id"),
        0
    );
    let params = EventRetryDeadLetteredParams::new(filter(Some(&["a.*"]), &[]), None);
    assert_eq!(
        backend
            .event_retry_dead_lettered(table, &params)
            .await
            .expect("retry"),
        2
    );
    for id in [a1, a2] {
        let event = outbox.get(id).await.expect("get").expect("exists");
        assert_eq!(
            (
                event.attempts,
                event.dead_lettered_at,
                event.next_attempt_at,
                event.lease_until,
                event.leased_by.as_deref(),
                event.last_error.as_deref()
            ),
            (0, None, None, None, None, Some("boom")),
            "{event:?}"
        );
    }
    for id in [b, published, pending] {
        let event = outbox.get(id).await.expect("get").expect("exists");
        assert_eq!(event.attempts, 5, "untouched: {event:?}");
        assert_eq!(event.leased_by.as_deref(), Some("gone"), "{event:?}");
    }
    assert_eq!(
        backend
            .event_retry_dead_lettered(table, &params)
            .await
            .expect("retry again"),
        0
    );
    // Every topic, by id.
    let by_id = EventRetryDeadLetteredParams::new(TopicFilter::all(), Some(vec![b, published]));
    assert_eq!(
        backend
            .event_retry_dead_lettered(table, &by_id)
            .await
            .expect("retry by id"),
        1
    );
}

#[tokio::test]
async fn one_delete_takes_one_batch_oldest_first_and_nothing_younger_than_the_cut_off() {
    let (db, outbox) = setup("outbox").await;
    // Sequence order differs from the finishing order on purpose.
    let p2 = insert_row(&db.pool, 1, "a.x", Some(days_ago(9)), None).await;
    let p_young = insert_row(&db.pool, 2, "a.x", Some(days_ago(2)), None).await;
    let p3 = insert_row(&db.pool, 3, "a.y", Some(days_ago(8)), None).await;
    let p1 = insert_row(&db.pool, 4, "a.x", Some(days_ago(10)), None).await;
    let p_other = insert_row(&db.pool, 5, "b.x", Some(days_ago(20)), None).await;
    let d2 = insert_row(&db.pool, 6, "a.x", None, Some(days_ago(40))).await;
    let d1 = insert_row(&db.pool, 7, "a.x", None, Some(days_ago(50))).await;
    let d_young = insert_row(&db.pool, 8, "a.x", None, Some(days_ago(10))).await;
    // Dead long ago but published since: published recently, so neither clean-up takes it.
    let d_published = insert_row(&db.pool, 9, "a.x", Some(days_ago(1)), Some(days_ago(50))).await;
    let pending = insert_row(&db.pool, 10, "a.x", None, None).await;

    let backend = outbox.backend();
    let table = outbox.table();
    let a = filter(Some(&["a.*"]), &[]);
    let published = |limit| {
        EventDeleteFinishedParams::new(
            FinishedState::Published,
            Utc::now() - chrono::Duration::days(7),
            a.clone(),
            limit,
        )
    };
    let dead = |limit| {
        EventDeleteFinishedParams::new(
            FinishedState::DeadLettered,
            Utc::now() - chrono::Duration::days(30),
            a.clone(),
            limit,
        )
    };
    let delete = |params: EventDeleteFinishedParams| async move {
        backend
            .event_delete_finished(table, &params)
            .await
            .expect("delete")
    };
    let gone = |ids: &[Uuid], left: &BTreeSet<String>| {
        ids.iter()
            .all(|id| !left.contains(&id.hyphenated().to_string()))
    };
    let kept = |ids: &[Uuid], left: &BTreeSet<String>| {
        ids.iter()
            .all(|id| left.contains(&id.hyphenated().to_string()))
    };

    assert_eq!(delete(published(2)).await, 2);
    let left = ids_left(&db.pool).await;
    assert!(gone(&[p1, p2], &left) && kept(&[p3], &left), "{left:?}");
    assert_eq!(delete(published(2)).await, 1);
    assert_eq!(delete(published(2)).await, 0);
    assert_eq!(delete(dead(1)).await, 1);
    let left = ids_left(&db.pool).await;
    assert!(gone(&[d1], &left) && kept(&[d2], &left), "{left:?}");
    assert_eq!(delete(dead(5)).await, 1);
    assert_eq!(delete(dead(5)).await, 0);
    let left = ids_left(&db.pool).await;
    assert_eq!(
        left,
        [p_young, p_other, d_young, d_published, pending]
            .iter()
            .map(|id| id.hyphenated().to_string())
            .collect::<BTreeSet<_>>()
    );
    // Every topic: the other relay's row goes too.
    let all = EventDeleteFinishedParams::new(
        FinishedState::Published,
        Utc::now() - chrono::Duration::days(7),
        TopicFilter::all(),
        10,
    );
    assert_eq!(delete(all).await, 1);
    assert_eq!(count(&db.pool, "outbox").await, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_deletes_in_batches_without_blocking_writers() {
    let (db, outbox) = setup("outbox").await;
    sqlx::query(
        "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 20000) \
         INSERT INTO outbox (id, topic, payload, created_at, published_at) \
         SELECT printf('00000000-0000-7000-8000-%012d', n), \
                CASE WHEN n % 2 = 0 THEN 'a.x' ELSE 'b.x' END, '{}', ?1, ?1 \
         FROM g",
    )
    .bind(days_ago(10))
    .execute(&db.pool)
    .await
    .expect("insert published rows");
    sqlx::query(
        "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 50) \
         INSERT INTO outbox (id, topic, payload, created_at, dead_lettered_at, attempts) \
         SELECT printf('00000000-0000-7000-9000-%012d', n), 'a.x', '{}', ?1, ?1, 5 FROM g",
    )
    .bind(days_ago(40))
    .execute(&db.pool)
    .await
    .expect("insert dead rows");
    // Finished, of the relay's topics, but younger than the cut-offs: kept.
    insert_row(&db.pool, 100_001, "a.x", Some(days_ago(6)), None).await;
    insert_row(&db.pool, 100_002, "a.x", None, Some(days_ago(29))).await;
    let relay = OutboxRelay::new(
        outbox.clone(),
        FnDelivery::new(|_e: OutboxEvent| async { Ok(()) }),
        fast().with_topics(["a.*"]).with_cleanup_batch_size(500),
    )
    .expect("relay");

    // A writer keeps enqueueing while the clean-up runs; it is never blocked past the busy
    // timeout (each batch is its own short statement).
    let stop = Arc::new(AtomicBool::new(false));
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let writer = {
        let (outbox, pool, stop) = (outbox.clone(), db.pool.clone(), stop.clone());
        tokio::spawn(async move {
            let mut worst = Duration::ZERO;
            let mut n = 0;
            let mut started = Some(started_tx);
            while !stop.load(Ordering::Relaxed) {
                let start = Instant::now();
                let mut tx = pool.begin().await.expect("writer begin");
                outbox
                    .enqueue(&mut *tx, OutboxMessage::new("a.x", json!(n)))
                    .await
                    .expect("writer enqueue");
                tx.commit().await.expect("writer commit");
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
    let deleted = relay
        .cleanup_published(Duration::from_secs(7 * 86400))
        .await
        .expect("cleanup published");
    let dead = relay
        .cleanup_dead_lettered(Duration::from_secs(30 * 86400))
        .await
        .expect("cleanup dead");
    stop.store(true, Ordering::Relaxed);
    let (worst, writes) = writer.await.expect("writer completes");
    assert_eq!(deleted, 10_000, "only the relay's topics");
    assert_eq!(dead, 50);
    assert!(writes > 0);
    assert!(worst < BUSY_TIMEOUT, "a writer waited {worst:?}");
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox WHERE topic = 'b.x'")
        .fetch_one(&db.pool)
        .await
        .expect("count b.x");
    assert_eq!(left, 10_000);
    let written: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM outbox WHERE topic = 'a.x' AND published_at IS NULL AND dead_lettered_at IS NULL",
    )
    .fetch_one(&db.pool)
    .await
    .expect("count writes");
    assert_eq!(written, writes, "every write is kept");
    // Nothing younger than the cut-off is deleted.
    assert_eq!(
        relay
            .cleanup_published(Duration::from_secs(7 * 86400))
            .await
            .expect("cleanup again"),
        0
    );
    assert_eq!(
        relay
            .cleanup_dead_lettered(Duration::from_secs(30 * 86400))
            .await
            .expect("cleanup dead again"),
        0
    );
    assert_eq!(count(&db.pool, "outbox").await, 10_000 + 2 + writes);
}

#[tokio::test]
async fn backlog_reports_pending_oldest_age_and_dead_letters() {
    let (db, outbox) = setup("outbox").await;
    let relay = OutboxRelay::new(
        outbox.clone(),
        FnDelivery::new(|_e: OutboxEvent| async { Ok(()) }),
        fast().with_topics(["t"]),
    )
    .expect("relay");
    let empty = relay.backlog().await.expect("empty backlog");
    assert_eq!(
        (
            empty.pending,
            empty.oldest_pending_age_seconds,
            empty.dead_lettered
        ),
        (0, 0.0, 0)
    );

    let now = Utc::now();
    let rows = [
        // (topic, created_at, published_at, dead_lettered_at)
        ("t", now - chrono::Duration::seconds(90), None, None),
        ("t", now, None, None),
        ("other", now - chrono::Duration::hours(1), None, None),
        ("t", now, None, Some(now)),
        // Published: neither pending nor dead, however old.
        ("t", now - chrono::Duration::hours(2), Some(now), None),
        ("t", now - chrono::Duration::hours(3), Some(now), Some(now)),
        // Dead: not pending, so not the oldest pending either.
        ("t", now - chrono::Duration::hours(4), None, Some(now)),
    ];
    for (n, (topic, created, published, dead)) in rows.into_iter().enumerate() {
        sqlx::query(
            "INSERT INTO outbox (id, topic, payload, created_at, published_at, dead_lettered_at) \
             VALUES (?1, ?2, '{}', ?3, ?4, ?5)",
        )
        .bind(uuid_text(n as i64))
        .bind(topic)
        .bind(ts(created))
        .bind(published.map(ts))
        .bind(dead.map(ts))
        .execute(&db.pool)
        .await
        .expect("insert");
    }
    let backlog = relay.backlog().await.expect("backlog");
    assert_eq!(backlog.pending, 2);
    assert_eq!(backlog.dead_lettered, 2);
    assert!(
        (89.0..120.0).contains(&backlog.oldest_pending_age_seconds),
        "{backlog:?}"
    );

    // Against a clock of the backend's caller, never negative.
    let backend = outbox.backend();
    let at = backend
        .backlog(
            outbox.table(),
            &BacklogParams::new(TopicFilter::all(), now + chrono::Duration::seconds(10)),
        )
        .await
        .expect("backlog at");
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
        .expect("backlog before");
    assert_eq!(before.oldest_pending_age_seconds, 0.0);
}
