//! The line between a relay and PostgreSQL cut for 20 s, twice, through a severable TCP proxy:
//! the LISTEN wake-up comes back, the events written during each cut are delivered within one
//! poll interval of the line coming back, and nothing is lost or delivered twice.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hare_outbox_core::{
    Delivery, FnDelivery, Outbox, OutboxEvent, OutboxMessage, OutboxRelay, OutboxTable,
    RelayConfig, Wakeup,
};
use hare_outbox_postgres::{ListenNotifyWakeup, PgBackend};
use hare_outbox_testkit::net::DelayProxy;
use hare_outbox_testkit::pg::TestSchema;
use hare_outbox_testkit::wait_for;
use serde_json::json;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

const POLL: Duration = Duration::from_secs(2);
const CUT: Duration = Duration::from_secs(20);

fn server_options() -> PgConnectOptions {
    PgConnectOptions::from_str(&hare_outbox_testkit::pg::url()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_cuts_of_20_s_lose_nothing_and_delivery_resumes_within_a_poll_interval() {
    let schema = TestSchema::new(2).await;
    let proxy = DelayProxy::start(server_options().get_port(), Duration::ZERO).await;
    let through_proxy = server_options().host("127.0.0.1").port(proxy.port);
    let table = OutboxTable::parse(&format!("{}.outbox", schema.name)).unwrap();
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(1))
        .connect_with(through_proxy)
        .await
        .unwrap();
    let wakeup = ListenNotifyWakeup::new(pool.clone())
        .with_channel(&schema.name)
        .unwrap();
    let outbox = Outbox::new(PgBackend::new(pool), table.clone())
        .with_wakeup(wakeup.clone())
        .unwrap();
    outbox.migrate().await.unwrap();
    // Writers keep a line of their own, straight to the server.
    let writer = Outbox::new(PgBackend::new(schema.pool.clone()), table);

    let seen: Arc<Mutex<HashMap<i64, Instant>>> = Arc::default();
    let twice = Arc::new(Mutex::new(0u32));
    let (sink, dups) = (seen.clone(), twice.clone());
    let relay = OutboxRelay::new(
        outbox.clone(),
        FnDelivery::new(move |e: OutboxEvent| {
            let (sink, dups) = (sink.clone(), dups.clone());
            async move {
                let n = e.payload["n"].as_i64().unwrap_or(-1);
                if sink.lock().unwrap().insert(n, Instant::now()).is_some() {
                    *dups.lock().unwrap() += 1;
                }
                Ok(())
            }
        }),
        RelayConfig::default().with_poll_interval(POLL),
    )
    .unwrap();
    relay.start().unwrap();

    let mut n = 0i64;
    for cut in 1..=2 {
        proxy.sever();
        // Events written while the relay cannot reach the database.
        for _ in 0..10 {
            n += 1;
            let mut conn = schema.pool.acquire().await.unwrap();
            writer
                .enqueue(&mut conn, OutboxMessage::new("cut.t", json!({ "n": n })))
                .await
                .unwrap();
        }
        tokio::time::sleep(CUT).await;
        proxy.restore();
        let back = Instant::now();
        let written = n;
        wait_for("the events of the cut", POLL * 3, || async {
            (seen.lock().unwrap().len() as i64 == written).then_some(())
        })
        .await;
        let last = seen
            .lock()
            .unwrap()
            .values()
            .copied()
            .max()
            .expect("deliveries");
        let resumed = last.duration_since(back);
        // One poll interval, plus the reconnect of the pool.
        assert!(
            resumed <= POLL + Duration::from_millis(1500),
            "cut {cut}: delivery resumed {resumed:?} after the line came back"
        );
        // The wake-up is back as well: an event now is delivered long before the next poll.
        wait_for("LISTEN again", Duration::from_secs(70), || async {
            let listening: i64 =
                sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE query = $1")
                    .bind(format!("LISTEN \"{}\"", schema.name))
                    .fetch_one(&schema.pool)
                    .await
                    .unwrap();
            (listening == 1).then_some(())
        })
        .await;
        n += 1;
        let mut tx = outbox.begin().await.unwrap();
        tx.enqueue(OutboxMessage::new("cut.t", json!({ "n": n })))
            .await
            .unwrap();
        tx.commit().await.unwrap();
        let committed = Instant::now();
        let target = n;
        wait_for("the signalled event", POLL * 2, || async {
            seen.lock().unwrap().get(&target).copied()
        })
        .await;
        let at = seen.lock().unwrap()[&target];
        assert!(
            at.duration_since(committed) < POLL,
            "cut {cut}: woken by the signal, not the poll: {:?}",
            at.duration_since(committed)
        );
    }
    relay.stop().await.unwrap();
    wakeup.close().await.unwrap();
    assert_eq!(seen.lock().unwrap().len() as i64, n, "nothing lost");
    assert_eq!(*twice.lock().unwrap(), 0, "nothing twice");
    schema.drop_schema().await;
}

/// One delivery as a test delivery saw it: which relay, which event, when it started, and when
/// it ended — completed, or dropped because the relay cut the batch short.
#[derive(Debug, Clone)]
struct Sent {
    relay: &'static str,
    n: i64,
    started: Instant,
    ended: Option<Instant>,
    /// Ran to its end, rather than dropped.
    completed: bool,
}

/// Records the end of a delivery when its future completes or is dropped.
struct EndGuard {
    log: Arc<Mutex<Vec<Sent>>>,
    index: usize,
}

impl Drop for EndGuard {
    fn drop(&mut self) {
        self.log.lock().unwrap()[self.index].ended = Some(Instant::now());
    }
}

/// A delivery of 300 ms that records itself into `log` as `relay`.
fn slow_recorder(log: &Arc<Mutex<Vec<Sent>>>, relay: &'static str) -> impl Delivery + 'static {
    let log = log.clone();
    FnDelivery::new(move |e: OutboxEvent| {
        let log = log.clone();
        async move {
            let index = {
                let mut log = log.lock().unwrap();
                log.push(Sent {
                    relay,
                    n: e.payload["n"].as_i64().unwrap_or(-1),
                    started: Instant::now(),
                    ended: None,
                    completed: false,
                });
                log.len() - 1
            };
            let end = EndGuard { log, index };
            tokio::time::sleep(Duration::from_millis(300)).await;
            end.log.lock().unwrap()[index].completed = true;
            Ok(())
        }
    })
}

/// How relay A loses its lease in [`lease_loss`].
#[derive(Debug, Clone, Copy, PartialEq)]
enum Loss {
    /// A's line to the database is cut: each renewal fails at once.
    CutLine,
    /// The batch's rows are locked by another transaction: each renewal waits and never answers.
    NoAnswer,
}

/// Issue 13 item 5: relay A leases 20 events of one key (lease 3 s, 300 ms per delivery, so
/// 6 s of work); 0.3 s into the batch its renewals start failing (`loss`). Once less than a third
/// of the lease is left it logs an ERROR, drops the delivery in flight and starts no more —
/// before the lease can expire: nothing is delivered in the last third of the lease, and no two
/// deliveries of the key ever overlap. Relay B, on a line of its own, polls all along; every
/// event is delivered in the end (by B when A's line is cut, by whichever relay leases first
/// when A's rows are merely blocked).
async fn lease_loss(loss: Loss) {
    const EVENTS: i64 = 20;
    const LEASE: Duration = Duration::from_secs(3);
    let (logs, _guard) = hare_outbox_testkit::logs::Logs::capture();
    let schema = TestSchema::new(4).await;
    let proxy = DelayProxy::start(server_options().get_port(), Duration::ZERO).await;
    let through_proxy = server_options().host("127.0.0.1").port(proxy.port);
    let table = OutboxTable::parse(&format!("{}.outbox", schema.name)).unwrap();
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(1))
        .connect_with(through_proxy)
        .await
        .unwrap();
    let outbox_a = Outbox::new(PgBackend::new(pool), table.clone());
    outbox_a.migrate().await.unwrap();
    let outbox_b = Outbox::new(PgBackend::new(schema.pool.clone()), table);
    for n in 1..=EVENTS {
        let mut tx = outbox_b.begin().await.unwrap();
        tx.enqueue(OutboxMessage::new("lease.t", json!({ "n": n })).ordering_key("k"))
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }
    let log: Arc<Mutex<Vec<Sent>>> = Arc::default();
    let config = |name: &str| {
        RelayConfig::default()
            .with_name(name)
            .with_lease(LEASE)
            .with_delivery_timeout(Duration::from_secs(2))
            .with_concurrency(1)
            .with_poll_interval(Duration::from_millis(100))
    };
    let relay_a = OutboxRelay::new(outbox_a, slow_recorder(&log, "a"), config("relay-a")).unwrap();
    relay_a.start().unwrap();
    let started = Instant::now();
    wait_for("A's first delivery", Duration::from_secs(5), || async {
        (!log.lock().unwrap().is_empty()).then_some(())
    })
    .await;
    // A leased the batch before its first delivery: the lease ends at most LEASE after this.
    let leased_by_then = log.lock().unwrap()[0].started;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut locker = match loss {
        Loss::CutLine => {
            proxy.sever();
            None
        }
        Loss::NoAnswer => {
            let mut tx = schema.pool.begin().await.unwrap();
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT sequence FROM \"{}\".outbox FOR UPDATE",
                schema.name
            )))
            .fetch_all(&mut *tx)
            .await
            .unwrap();
            Some(tx)
        }
    };
    let relay_b = OutboxRelay::new(outbox_b, slow_recorder(&log, "b"), config("relay-b")).unwrap();
    relay_b.start().unwrap();
    if let Some(tx) = locker.take() {
        wait_for("A giving up its lease", Duration::from_secs(5), || async {
            (!logs.lines("ERROR", "the lease cannot be kept").is_empty()).then_some(())
        })
        .await;
        // Past the lease: nothing of A's may still be running when the rows are free again.
        tokio::time::sleep_until((leased_by_then + LEASE).into()).await;
        tx.commit().await.unwrap();
    }
    wait_for("every event delivered", Duration::from_secs(25), || async {
        let log = log.lock().unwrap();
        let done: std::collections::HashSet<i64> =
            log.iter().filter(|s| s.completed).map(|s| s.n).collect();
        (done.len() as i64 >= EVENTS).then_some(())
    })
    .await;
    let took = started.elapsed();
    relay_b.stop().await.unwrap();
    proxy.restore();
    relay_a.stop().await.unwrap();

    let mut log = log.lock().unwrap().clone();
    log.sort_by_key(|s| s.started);
    assert_eq!(
        logs.lines("ERROR", "the lease cannot be kept").len(),
        1,
        "{}",
        logs.text()
    );
    // A gives up once less than a third of the lease is left: nothing starts in that last
    // third, and what A started before has ended (or was dropped) before the lease expires.
    let last_third = leased_by_then + LEASE - LEASE / 3 + Duration::from_millis(50);
    let expiry = leased_by_then + LEASE;
    let in_last_third: Vec<&Sent> = log
        .iter()
        .filter(|s| s.started >= last_third && s.started < expiry)
        .collect();
    assert!(
        in_last_third.is_empty(),
        "{loss:?}: delivered while the lease was being lost: {in_last_third:?}"
    );
    let first_lease: Vec<&Sent> = log.iter().filter(|s| s.started < expiry).collect();
    assert!(
        first_lease.iter().all(|s| s.relay == "a"),
        "{first_lease:?}"
    );
    let a_stopped = first_lease
        .iter()
        .map(|s| s.ended.expect("ended or dropped"))
        .max()
        .unwrap();
    assert!(
        a_stopped < expiry,
        "{loss:?}: A stopped {:?} after its first delivery; the lease is {LEASE:?}",
        a_stopped - leased_by_then
    );
    // One key: its deliveries never overlap, whichever relay makes them.
    for pair in log.windows(2) {
        assert!(
            pair[1].started >= pair[0].ended.expect("ended"),
            "{loss:?}: two deliveries of the key at once: {pair:?}"
        );
    }
    let after: Vec<&Sent> = log.iter().filter(|s| s.started >= expiry).collect();
    if loss == Loss::CutLine {
        assert!(
            after.iter().all(|s| s.relay == "b"),
            "A cannot reach the database"
        );
    }
    assert_eq!(
        after.iter().map(|s| s.n).collect::<Vec<_>>(),
        (1..=EVENTS).collect::<Vec<_>>(),
        "{loss:?}: after the lease, the batch is delivered again, once each, in order"
    );
    eprintln!(
        "{loss:?}: A started {} deliveries and stopped {:?} after its first; the next delivery \
         ({}) started {:?} after it; all {EVENTS} delivered in {took:?}",
        first_lease.len(),
        a_stopped - leased_by_then,
        after[0].relay,
        after[0].started - leased_by_then
    );
    schema.drop_schema().await;
}

/// The line cut mid-batch: each renewal fails at once.
#[tokio::test(flavor = "current_thread")]
async fn a_relay_whose_lease_renewal_fails_stops_the_batch_before_the_lease_can_expire() {
    lease_loss(Loss::CutLine).await;
}

/// The batch's rows locked by someone else: each renewal hangs, which counts as failed once less
/// than a third of the lease is left.
#[tokio::test(flavor = "current_thread")]
async fn a_relay_whose_lease_renewal_never_answers_stops_the_batch_before_the_lease_can_expire() {
    lease_loss(Loss::NoAnswer).await;
}
