//! The line between a relay and PostgreSQL cut for 20 s, twice, through a severable TCP proxy:
//! the LISTEN wake-up comes back, the events written during each cut are delivered within one
//! poll interval of the line coming back, and nothing is lost or delivered twice.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hare_outbox_core::{
    FnDelivery, Outbox, OutboxEvent, OutboxMessage, OutboxRelay, OutboxTable, RelayConfig, Wakeup,
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
