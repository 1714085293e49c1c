//! The relay's circuit breaker, `Retry-After`, permanent failures and the rate limit with the
//! webhook delivery against real HTTP receivers on loopback, on PostgreSQL and SQLite.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hare_outbox_core::{
    Backend, BreakerConfig, BreakerState, Destination, Outbox, OutboxMessage, OutboxRelay,
    OutboxTable, RelayConfig, RelayEvent, TopicRouter,
};
use hare_outbox_postgres::PgBackend;
use hare_outbox_sqlite::SqliteBackend;
use hare_outbox_testkit::http::{Behaviour, Receiver, unused_local_url};
use hare_outbox_testkit::logs::Logs;
use hare_outbox_testkit::pg::TestSchema;
use hare_outbox_testkit::sqlite::TestDb;
use hare_outbox_testkit::wait_for;
use hare_outbox_webhook::{WebhookDelivery, WebhookTarget};
use serde_json::json;

fn table() -> OutboxTable {
    OutboxTable::parse("outbox").unwrap()
}

/// Relay options of these tests: quick polls and retries, 3 attempts, probes from 0.5 s up to
/// 2 s.
fn config() -> RelayConfig {
    RelayConfig::default()
        .with_poll_interval(Duration::from_millis(100))
        .with_retry_base(Duration::from_millis(200))
        .with_retry_max(Duration::from_secs(30))
        .with_max_delivery_attempts(3)
        .with_delivery_timeout(Duration::from_secs(5))
        .with_breaker(
            BreakerConfig::default()
                .with_probe_interval(Duration::from_millis(500))
                .with_probe_interval_max(Duration::from_secs(2)),
        )
}

/// Enqueues `rounds` events per key on `topic`, payload `{"key": k, "n": round}`, ordering
/// key `<prefix><k>`, one transaction per round.
async fn write<B: Backend>(
    outbox: &Outbox<B>,
    topic: &str,
    prefix: &str,
    keys: usize,
    rounds: usize,
) {
    for round in 0..rounds {
        let mut tx = outbox.begin().await.unwrap();
        for key in 0..keys {
            tx.enqueue(
                OutboxMessage::new(topic, json!({"key": key, "n": round}))
                    .ordering_key(format!("{prefix}{key}")),
            )
            .await
            .unwrap();
        }
        tx.commit().await.unwrap();
    }
}

/// (pending, dead letters, most attempts) of the table, by raw SQL.
async fn counts_pg(pool: &sqlx::PgPool) -> (i64, i64, i32) {
    sqlx::query_as(
        "SELECT count(*) FILTER (WHERE published_at IS NULL AND dead_lettered_at IS NULL), \
         count(*) FILTER (WHERE dead_lettered_at IS NOT NULL), coalesce(max(attempts), 0) \
         FROM outbox",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn counts_sqlite(pool: &sqlx::SqlitePool) -> (i64, i64, i32) {
    sqlx::query_as(
        "SELECT coalesce(sum(published_at IS NULL AND dead_lettered_at IS NULL), 0), \
         coalesce(sum(dead_lettered_at IS NOT NULL), 0), coalesce(max(attempts), 0) \
         FROM outbox",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Asserts that the successful requests hold every `(key, n)` of `keys` × `rounds` once and
/// that each key's arrive in order.
fn assert_delivered_in_key_order(
    requests: &[hare_outbox_testkit::http::RecordedRequest],
    keys: usize,
    rounds: usize,
) {
    let mut by_key: HashMap<i64, Vec<i64>> = HashMap::new();
    for r in requests {
        let body = r.body_json();
        by_key
            .entry(body["key"].as_i64().unwrap())
            .or_default()
            .push(body["n"].as_i64().unwrap());
    }
    assert_eq!(by_key.len(), keys, "{by_key:?}");
    for (key, ns) in &by_key {
        let expected: Vec<i64> = (0..rounds as i64).collect();
        assert_eq!(ns, &expected, "key {key}: every round once, in order");
    }
}

/// A webhook that answers 503 for 15 s while 100 events over 10 keys wait, with 3 attempts: the
/// destination opens instead of burning attempts, only probes reach it meanwhile, and once it
/// answers again every event is delivered in key order, none dead-lettered.
#[tokio::test(flavor = "current_thread")]
async fn a_webhook_down_for_15_s_pauses_and_resumes_without_dead_letters() {
    let (logs, _guard) = Logs::capture();
    let schema = TestSchema::new(6).await;
    let outbox = Outbox::new(PgBackend::new(schema.pool.clone()), table());
    outbox.migrate().await.unwrap();
    write(&outbox, "orders.created", "k", 10, 10).await;

    let receiver = Receiver::start(Behaviour::status(503).with_body("maintenance"));
    let delivery = Destination::new(
        "orders-hook",
        WebhookDelivery::new(receiver.url("/in")).unwrap(),
    )
    .unwrap();
    let relay = OutboxRelay::new(outbox.clone(), delivery, config()).unwrap();
    let destinations = relay.destinations();
    relay.start().unwrap();

    let opened = wait_for("the destination to open", Duration::from_secs(10), || {
        let status = destinations.status("orders-hook");
        async move { status.filter(|s| s.state != BreakerState::Closed) }
    })
    .await;
    assert!(
        opened.reason.as_deref().unwrap_or("").contains("503"),
        "{opened:?}"
    );
    assert!(opened.opened_at.is_some());
    let outage = Duration::from_secs(15);
    tokio::time::sleep(outage).await;
    let during = receiver.request_count();
    receiver.set_behaviour(Behaviour::ok());
    receiver.clear();

    wait_for("every event delivered", Duration::from_secs(30), || {
        let pool = schema.pool.clone();
        async move { (counts_pg(&pool).await.0 == 0).then_some(()) }
    })
    .await;
    relay.stop().await.unwrap();

    let (_, dead, most_attempts) = counts_pg(&schema.pool).await;
    assert_eq!(dead, 0, "no event dead-lettered");
    assert!(most_attempts <= 2, "attempts were frozen: {most_attempts}");
    // The first wave (one request per key) and then one probe at a time, at least 0.45 s apart
    // (0.5 s doubling up to 2 s, ±10%): without the breaker the 10 heads would have used up
    // their 3 attempts within 2 s and held back all 100 events.
    let bound = 10 + (outage.as_secs_f64() / 0.45).ceil() as usize + 2;
    eprintln!("requests to the dead endpoint in {outage:?}: {during}");
    assert!(
        during <= bound,
        "{during} requests reached the dead endpoint in {outage:?}; at most {bound} expected"
    );
    let after = receiver.requests();
    assert_delivered_in_key_order(&after, 10, 10);
    assert_eq!(
        destinations.status("orders-hook").unwrap().state,
        BreakerState::Closed
    );
    assert_eq!(
        logs.lines("WARN", "destination opened").len(),
        1,
        "{}",
        logs.text()
    );
    assert!(!logs.lines("INFO", "destination closed").is_empty());
    assert!(logs.lines("ERROR", "dead-lettered").is_empty());
    schema.drop_schema().await;
}

/// 429 with `Retry-After: 3`: tried again no sooner than 3 s later, the attempt counted; 410
/// dead-letters at once; 400s count attempts but never open the breaker.
#[tokio::test]
async fn retry_after_is_honoured_gone_is_permanent_and_bad_request_keeps_the_breaker_closed() {
    let db = TestDb::new(4).await;
    let outbox = Outbox::new(SqliteBackend::new(db.pool.clone()), table());
    outbox.migrate().await.unwrap();

    // 429 + Retry-After: 3, then 200.
    let receiver = Receiver::start(Behaviour::statuses([429, 200]).with_header("retry-after", "3"));
    let relay = OutboxRelay::new(
        outbox.clone(),
        WebhookDelivery::new(receiver.url("/slow")).unwrap(),
        config(),
    )
    .unwrap();
    write(&outbox, "throttled", "t", 1, 1).await;
    relay.start().unwrap();
    let requests = receiver.wait_for_requests(2, Duration::from_secs(15)).await;
    let gap = requests[1].received_at - requests[0].received_at;
    assert!(gap >= Duration::from_secs(3), "retried after {gap:?}");
    assert!(gap < Duration::from_secs(6), "retried after {gap:?}");
    wait_for(
        "the throttled event delivered",
        Duration::from_secs(10),
        || {
            let pool = db.pool.clone();
            async move { (counts_sqlite(&pool).await.0 == 0).then_some(()) }
        },
    )
    .await;
    relay.stop().await.unwrap();
    let (_, dead, attempts) = counts_sqlite(&db.pool).await;
    assert_eq!((dead, attempts), (0, 1), "the 429 counted one attempt");

    // 410 Gone: dead-lettered at the first attempt though 3 are allowed.
    let gone = Receiver::start(Behaviour::status(410));
    let relay = OutboxRelay::new(
        outbox.clone(),
        WebhookDelivery::new(gone.url("/gone")).unwrap(),
        config().with_topics(["gone"]),
    )
    .unwrap();
    write(&outbox, "gone", "g", 1, 1).await;
    let dead_letters = Arc::new(Mutex::new(Vec::new()));
    let seen = dead_letters.clone();
    let relay = relay.with_observer(move |e: &RelayEvent| {
        if let RelayEvent::DeadLettered {
            attempts, error, ..
        } = e
        {
            seen.lock().unwrap().push((*attempts, error.clone()));
        }
    });
    let outcome = relay.poll_once().await.unwrap();
    assert_eq!(outcome.dead_lettered, 1, "{outcome:?}");
    let dead_letters = dead_letters.lock().unwrap().clone();
    assert_eq!(dead_letters.len(), 1);
    assert_eq!(dead_letters[0].0, 1);
    assert!(dead_letters[0].1.contains("410"), "{dead_letters:?}");
    assert_eq!(gone.request_count(), 1);

    // 400 Bad Request to 8 events: 8 attempts counted, the breaker stays closed.
    let bad = Receiver::start(Behaviour::status(400));
    let relay = OutboxRelay::new(
        outbox.clone(),
        WebhookDelivery::new(bad.url("/bad")).unwrap(),
        config()
            .with_topics(["bad"])
            .with_breaker(BreakerConfig::default().with_failure_threshold(2)),
    )
    .unwrap();
    write(&outbox, "bad", "b", 8, 1).await;
    let outcome = relay.poll_once().await.unwrap();
    assert_eq!(outcome.failed, 8, "{outcome:?}");
    assert_eq!(outcome.deferred, 0);
    let status = relay.destinations().status("delivery").unwrap();
    assert_eq!(status.state, BreakerState::Closed, "{status:?}");
    assert_eq!(status.consecutive_failures, 0);
    assert_eq!(bad.request_count(), 8);
    let attempts: Vec<i32> = sqlx::query_scalar("SELECT attempts FROM outbox WHERE topic = 'bad'")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(attempts, vec![1; 8]);
}

/// Two routes, one of them down: the healthy route's events keep flowing at once (delivered
/// within a second of their commit) while the dead route is open, its events are no longer
/// leased (the relay's lease count stays flat), and it resumes when the endpoint is back.
#[tokio::test]
async fn an_open_route_does_not_hold_back_the_other() {
    let schema = TestSchema::new(6).await;
    let outbox = Outbox::new(PgBackend::new(schema.pool.clone()), table());
    outbox.migrate().await.unwrap();
    let healthy = Receiver::start(Behaviour::ok());
    let down = Receiver::start(Behaviour::status(502));
    let router = TopicRouter::new()
        .route(
            "billing.*",
            Destination::new("billing", WebhookDelivery::new(down.url("/b")).unwrap()).unwrap(),
        )
        .unwrap()
        .route(
            "shipping.*",
            Destination::new("shipping", WebhookDelivery::new(healthy.url("/s")).unwrap()).unwrap(),
        )
        .unwrap();
    let delays: Arc<Mutex<Vec<(String, f64)>>> = Arc::default();
    let seen = delays.clone();
    let relay = OutboxRelay::new(
        outbox.clone(),
        router,
        config()
            .with_poll_interval(Duration::from_millis(20))
            .with_breaker(
                BreakerConfig::default()
                    .with_failure_threshold(3)
                    .with_probe_interval(Duration::from_secs(3))
                    .with_probe_interval_max(Duration::from_secs(3)),
            ),
    )
    .unwrap()
    .with_observer(move |e: &RelayEvent| {
        if let RelayEvent::Delivered {
            topic,
            delay_seconds,
            ..
        } = e
        {
            seen.lock().unwrap().push((topic.clone(), *delay_seconds));
        }
    });
    let destinations = relay.destinations();
    relay.start().unwrap();
    write(&outbox, "billing.invoiced", "b", 5, 4).await;
    wait_for("billing to open", Duration::from_secs(10), || {
        let s = destinations.status("billing");
        async move { s.filter(|s| s.state == BreakerState::Open) }
    })
    .await;
    // Shipping events, written one at a time while billing is open, go out at once.
    let started = Instant::now();
    for n in 0..20 {
        let mut tx = outbox.begin().await.unwrap();
        tx.enqueue(
            OutboxMessage::new("shipping.sent", json!({"key": n % 4, "n": n / 4}))
                .ordering_key(format!("s{}", n % 4)),
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    healthy.wait_for_requests(20, Duration::from_secs(10)).await;
    let shipping: Vec<f64> = delays
        .lock()
        .unwrap()
        .iter()
        .filter(|(t, _)| t == "shipping.sent")
        .map(|(_, d)| *d)
        .collect();
    assert_eq!(shipping.len(), 20);
    let slowest = shipping.iter().copied().fold(0.0, f64::max);
    assert!(slowest < 1.0, "a shipping event waited {slowest:.3} s");
    assert!(started.elapsed() < Duration::from_secs(10));

    // Billing stays open (probes every 3 s): its events are not leased meanwhile.
    let open = destinations.status("billing").unwrap();
    assert_ne!(open.state, BreakerState::Closed, "{open:?}");
    let leased_before = relay.stats().leased;
    let requests_before = down.request_count();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    if destinations.status("billing").unwrap().state == BreakerState::Open
        && down.request_count() == requests_before
    {
        assert_eq!(
            relay.stats().leased,
            leased_before,
            "events of an open route are not leased"
        );
    }
    assert!(
        down.request_count() <= 5 + 4,
        "{} requests",
        down.request_count()
    );

    // The endpoint comes back: the next probe closes billing and its events follow in order.
    down.set_behaviour(Behaviour::ok());
    down.clear();
    wait_for("every event delivered", Duration::from_secs(20), || {
        let pool = schema.pool.clone();
        async move { (counts_pg(&pool).await.0 == 0).then_some(()) }
    })
    .await;
    relay.stop().await.unwrap();
    assert_delivered_in_key_order(&down.requests(), 5, 4);
    assert_eq!(counts_pg(&schema.pool).await.1, 0);
    schema.drop_schema().await;
}

/// Per-event targets: each target host is a destination of its own, so a dead subscriber opens
/// alone while the others are served.
#[tokio::test]
async fn each_target_host_has_its_own_breaker() {
    let db = TestDb::new(4).await;
    let outbox = Outbox::new(SqliteBackend::new(db.pool.clone()), table());
    outbox.migrate().await.unwrap();
    let alive = Receiver::start(Behaviour::ok());
    let dead_url = unused_local_url("/dead");
    let delivery = WebhookDelivery::builder()
        .with_sync_target(|e: &hare_outbox_core::OutboxEvent| {
            Ok(WebhookTarget::new(
                e.payload["to"].as_str().unwrap_or_default(),
            ))
        })
        .build()
        .unwrap();
    let relay = OutboxRelay::new(
        outbox.clone(),
        delivery,
        config().with_breaker(
            BreakerConfig::default()
                .with_failure_threshold(2)
                .with_probe_interval(Duration::from_secs(30))
                .with_probe_interval_max(Duration::from_secs(30)),
        ),
    )
    .unwrap();
    let destinations = relay.destinations();
    let mut tx = outbox.begin().await.unwrap();
    for n in 0..6 {
        tx.enqueue(OutboxMessage::new(
            "notify",
            json!({"to": dead_url, "n": n}),
        ))
        .await
        .unwrap();
        tx.enqueue(OutboxMessage::new(
            "notify",
            json!({"to": alive.url("/ok"), "n": n}),
        ))
        .await
        .unwrap();
    }
    tx.commit().await.unwrap();
    relay.start().unwrap();
    alive.wait_for_requests(6, Duration::from_secs(10)).await;
    let open = wait_for("the dead host to open", Duration::from_secs(10), || {
        let open = destinations.open();
        async move { open.into_iter().next() }
    })
    .await;
    let port = dead_url
        .split(':')
        .nth(2)
        .unwrap()
        .split('/')
        .next()
        .unwrap();
    assert_eq!(open.name, format!("delivery/127.0.0.1:{port}"));
    assert!(
        open.reason.as_deref().unwrap_or("").contains("connecting"),
        "{open:?}"
    );
    // Its events wait with at most the failures made before it opened counted.
    tokio::time::sleep(Duration::from_millis(500)).await;
    relay.stop().await.unwrap();
    let (pending, dead, most) = counts_sqlite(&db.pool).await;
    assert_eq!((pending, dead), (6, 0));
    assert!(most <= 1, "{most}");
    let alive_status = destinations
        .statuses()
        .into_iter()
        .find(|s| s.name.ends_with(&format!(":{}", alive.addr().port())))
        .unwrap();
    assert_eq!(alive_status.state, BreakerState::Closed);
}

/// `max_per_second` holds the requests to a destination to its rate.
#[tokio::test]
async fn max_per_second_paces_the_requests() {
    let db = TestDb::new(4).await;
    let outbox = Outbox::new(SqliteBackend::new(db.pool.clone()), table());
    outbox.migrate().await.unwrap();
    let receiver = Receiver::start(Behaviour::ok());
    let delivery = Destination::new("paced", WebhookDelivery::new(receiver.url("/p")).unwrap())
        .unwrap()
        .with_max_per_second(20.0)
        .unwrap();
    let mut tx = outbox.begin().await.unwrap();
    for n in 0..60 {
        tx.enqueue(OutboxMessage::new("paced", json!({"n": n})))
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    let relay = OutboxRelay::new(outbox.clone(), delivery, config()).unwrap();
    relay.start().unwrap();
    let requests = receiver
        .wait_for_requests(60, Duration::from_secs(20))
        .await;
    relay.stop().await.unwrap();
    let span = requests[59].received_at - requests[0].received_at;
    // 20 at once (one second's worth), then 40 more at 20 per second.
    assert!(
        span >= Duration::from_millis(1800),
        "60 requests in {span:?}"
    );
    // No second holds more than 20 + 20 (a full bucket and a second's refill).
    for (i, first) in requests.iter().enumerate() {
        let within = requests[i..]
            .iter()
            .take_while(|r| r.received_at - first.received_at < Duration::from_secs(1))
            .count();
        assert!(within <= 41, "{within} requests within one second");
    }
}
