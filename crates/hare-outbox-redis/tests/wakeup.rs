//! RedisWakeup against a real Redis: each test on a channel of its own; the reconnect test runs a
//! redis-server of its own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Logs, RedisServer, WAIT, closed_port, connect, del, pg_outbox, unique, url, xlen};
use hare_outbox_core::{
    FnDelivery, OutboxEvent, OutboxMessage, OutboxRelay, RelayConfig, Wakeup, WakeupSubscription,
};
use hare_outbox_redis::{RedisStreamsDelivery, RedisWakeup};
use hare_outbox_testkit::wait_for;
use serde_json::json;

fn topics(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

/// The next signal, which must come within [`WAIT`].
async fn next(sub: &mut WakeupSubscription) -> Vec<String> {
    hare_outbox_testkit::next_topics(sub, WAIT).await
}

async fn numsub(conn: &mut redis::aio::MultiplexedConnection, channel: &str) -> i64 {
    let reply: (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query_async(conn)
        .await
        .unwrap();
    reply.1
}

#[tokio::test]
async fn a_signal_reaches_every_subscriber_of_both_objects() {
    let mut conn = connect(&url()).await;
    let channel = unique("chan");
    let here = RedisWakeup::new(&url())
        .unwrap()
        .with_channel(&channel)
        .unwrap();
    // A second object on the same channel: another process, as far as Redis can tell.
    let there = RedisWakeup::new(&url())
        .unwrap()
        .with_channel(&channel)
        .unwrap();
    let mut a = here.subscribe().await.unwrap();
    let mut b = here.clone().subscribe().await.unwrap();
    let mut c = there.subscribe().await.unwrap();
    assert_eq!(
        numsub(&mut conn, &channel).await,
        2,
        "one Redis subscription per object, shared by its subscribers"
    );

    here.signal(&topics(&["orders.created", "orders.paid"]))
        .await
        .unwrap();
    for sub in [&mut a, &mut b, &mut c] {
        assert_eq!(next(sub).await, ["orders.created", "orders.paid"]);
    }
    there.signal(&topics(&["invoices"])).await.unwrap();
    for sub in [&mut a, &mut b, &mut c] {
        assert_eq!(next(sub).await, ["invoices"]);
    }

    // The message on the wire is a JSON array of the topics.
    let client = redis::Client::open(url().as_str()).unwrap();
    let mut raw = client.get_async_pubsub().await.unwrap();
    raw.subscribe(&channel).await.unwrap();
    here.signal(&topics(&["x.y"])).await.unwrap();
    let message = {
        use futures::StreamExt;
        tokio::time::timeout(WAIT, raw.on_message().next())
            .await
            .unwrap()
            .unwrap()
    };
    assert_eq!(message.get_payload_bytes(), br#"["x.y"]"#);

    // The last subscriber leaving ends the object's Redis subscription.
    drop((a, b));
    here.close().await.unwrap();
    there.close().await.unwrap();
    drop(c);
    wait_for("the subscriptions to end", WAIT, || {
        let mut conn = conn.clone();
        let channel = channel.clone();
        async move { (numsub(&mut conn, &channel).await == 1).then_some(()) }
    })
    .await;
}

#[tokio::test]
async fn a_relay_delivers_within_a_second_of_a_commit() {
    let mut conn = connect(&url()).await;
    let channel = unique("chan");
    let stream = unique("woken");
    let (schema, outbox) = pg_outbox().await;
    let wakeup = RedisWakeup::new(&url())
        .unwrap()
        .with_channel(&channel)
        .unwrap();
    let outbox = outbox.with_wakeup(wakeup.clone()).unwrap();
    let relay = OutboxRelay::new(
        outbox.clone(),
        RedisStreamsDelivery::new(&url())
            .unwrap()
            .with_stream(&stream)
            .unwrap(),
        RelayConfig::default().with_poll_interval(Duration::from_secs(60)),
    )
    .unwrap();
    relay.start().unwrap();
    hare_outbox_testkit::scenario::assert_relay_wakes_on_each_commit(
        &outbox,
        &relay,
        "orders.created",
        3,
        Duration::from_secs(1),
    )
    .await;
    assert_eq!(
        xlen(&mut conn.clone(), &stream).await,
        3,
        "every event reached the stream"
    );
    relay.stop().await.unwrap();
    wakeup.close().await.unwrap();
    del(&mut conn, &[&stream]).await;
    schema.drop_schema().await;
}

#[tokio::test]
async fn a_subscription_killed_by_the_server_is_made_again() {
    let server = RedisServer::start().await;
    let mut admin = connect(&server.url()).await;
    let wakeup = RedisWakeup::new(&server.url()).unwrap();
    let mut sub = wakeup.subscribe().await.unwrap();
    assert_eq!(numsub(&mut admin, "hare_outbox").await, 1);

    for _ in 0..2 {
        let killed: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("pubsub")
            .query_async(&mut admin)
            .await
            .unwrap();
        assert_eq!(killed, 1);
        assert_eq!(numsub(&mut admin, "hare_outbox").await, 0);
        wait_for("the wake-up to subscribe again", WAIT, || {
            let mut admin = admin.clone();
            async move { (numsub(&mut admin, "hare_outbox").await == 1).then_some(()) }
        })
        .await;
        wakeup.signal(&topics(&["after.kill"])).await.unwrap();
        assert_eq!(next(&mut sub).await, ["after.kill"]);
    }
    wakeup.close().await.unwrap();
}

#[tokio::test]
async fn a_restarted_server_is_subscribed_to_again() {
    let mut server = RedisServer::start().await;
    let wakeup = RedisWakeup::new(&server.url()).unwrap();
    let mut sub = wakeup.subscribe().await.unwrap();
    server.kill();
    server.restart().await;
    let mut admin = connect(&server.url()).await;
    wait_for("the wake-up to subscribe again", WAIT, || {
        let mut admin = admin.clone();
        async move { (numsub(&mut admin, "hare_outbox").await == 1).then_some(()) }
    })
    .await;
    assert_eq!(numsub(&mut admin, "hare_outbox").await, 1);
    // The publishing connection died with the server: the first signal may fail, a later one
    // goes out.
    wait_for("a signal after the restart", WAIT, || async {
        wakeup.signal(&topics(&["after.restart"])).await.ok()
    })
    .await;
    assert_eq!(next(&mut sub).await, ["after.restart"]);
    wakeup.close().await.unwrap();
}

/// On a current-thread runtime, so the listener task logs into the captured subscriber.
#[tokio::test]
async fn a_closed_port_fails_signals_and_subscribing_stays_open() {
    let (logs, _guard) = Logs::capture();
    let wakeup = RedisWakeup::new(&format!("redis://127.0.0.1:{}/0", closed_port()))
        .unwrap()
        .with_channel(unique("chan"))
        .unwrap();
    let error = wakeup.signal(&topics(&["t"])).await.unwrap_err();
    assert!(
        matches!(error, hare_outbox_core::Error::Database { .. }),
        "{error}"
    );
    let mut sub = wakeup.subscribe().await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(300), sub.recv())
            .await
            .is_err(),
        "the subscription stays open while the listener retries"
    );
    wait_for("a retry", WAIT, || async {
        (!logs
            .lines("WARN", "wake-up subscription failed; retrying")
            .is_empty())
        .then_some(())
    })
    .await;
    wakeup.close().await.unwrap();
}

/// A wake-up started while the line is cut: five failures log an ERROR, the relay polls, and
/// the first subscription after the cut is a restored one (INFO, one "poll now"). Then a second
/// cut under the live subscription: lost (WARN), restored again (INFO, "poll now").
#[tokio::test]
async fn a_cut_line_logs_an_error_after_five_failures_and_the_subscription_comes_back() {
    let (logs, _guard) = Logs::capture();
    let redis_port: u16 = url()
        .rsplit(':')
        .next()
        .and_then(|tail| tail.split('/').next())
        .and_then(|port| port.parse().ok())
        .expect("a port in the Redis URL");
    let proxy = hare_outbox_testkit::net::DelayProxy::start(redis_port, Duration::ZERO).await;
    proxy.sever();
    let wakeup = RedisWakeup::new(&format!("redis://127.0.0.1:{}/0", proxy.port))
        .unwrap()
        .with_channel(unique("chan"))
        .unwrap();
    let mut sub = wakeup.subscribe().await.unwrap();
    wait_for(
        "the ERROR after five failures",
        Duration::from_secs(20),
        || async {
            (logs
                .lines("ERROR", "failed 5 times in a row; relays poll meanwhile")
                .len()
                == 1)
                .then_some(())
        },
    )
    .await;

    // A relay whose wake-up is down keeps delivering at its poll interval.
    let (schema, outbox) = pg_outbox().await;
    let outbox = outbox.with_wakeup(wakeup.clone()).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let relay = OutboxRelay::new(
        outbox.clone(),
        FnDelivery::new(move |e: OutboxEvent| {
            let sink = sink.clone();
            async move {
                sink.lock().unwrap().push(e.payload);
                Ok(())
            }
        }),
        RelayConfig::default().with_poll_interval(Duration::from_millis(200)),
    )
    .unwrap();
    relay.start().unwrap();
    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue(OutboxMessage::new("t", json!({"by": "polling"})))
        .await
        .unwrap();
    // The signal fails (logged); the commit does not.
    tx.commit().await.unwrap();
    wait_for("delivery by polling", WAIT, || async {
        (seen.lock().unwrap().len() == 1).then_some(())
    })
    .await;

    proxy.restore();
    // The next attempt (at most 60 s away, 3.2 s at the sixth) subscribes again.
    let poll_now = tokio::time::timeout(Duration::from_secs(20), sub.recv())
        .await
        .unwrap_or_else(|_| panic!("the subscription is restored:\n{}", logs.text()))
        .expect("still open")
        .expect("not lagging");
    assert!(poll_now.is_empty(), "an empty signal: poll now");
    assert_eq!(logs.lines("INFO", "wake-up subscription restored").len(), 1);
    wait_for("a signal after the line is back", WAIT, || async {
        wakeup.signal(&topics(&["after.cut"])).await.ok()
    })
    .await;
    assert_eq!(next(&mut sub).await, ["after.cut"]);

    // The second cut, under a subscription that is up: the stream ends, the listener reconnects
    // through the cut line and fails until it is back.
    proxy.sever();
    wait_for("the lost subscription", WAIT, || async {
        (logs
            .lines("WARN", "wake-up subscription lost; reconnecting")
            .len()
            == 1)
            .then_some(())
    })
    .await;
    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue(OutboxMessage::new("t", json!({"by": "polling again"})))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    wait_for(
        "delivery by polling during the second cut",
        WAIT,
        || async { (seen.lock().unwrap().len() == 2).then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    proxy.restore();
    let poll_now = tokio::time::timeout(Duration::from_secs(20), sub.recv())
        .await
        .unwrap_or_else(|_| panic!("the subscription is restored again:\n{}", logs.text()))
        .expect("still open")
        .expect("not lagging");
    assert!(poll_now.is_empty(), "an empty signal: poll now");
    assert_eq!(logs.lines("INFO", "wake-up subscription restored").len(), 2);
    wait_for("a signal after the second cut", WAIT, || async {
        wakeup.signal(&topics(&["after.second.cut"])).await.ok()
    })
    .await;
    assert_eq!(next(&mut sub).await, ["after.second.cut"]);
    relay.stop().await.unwrap();
    wakeup.close().await.unwrap();
    schema.drop_schema().await;
}
