//! NatsWakeup against a real NATS server: each test on a subject of its own; the reconnect test
//! runs a nats-server of its own, stopped and started again on the same port.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{
    Logs, NatsServer, WAIT, closed_port, connect, delete_stream, pg_outbox, stream_len, unique, url,
};
use futures::StreamExt;
use hare_outbox_core::{
    FnDelivery, OutboxEvent, OutboxMessage, OutboxRelay, RelayConfig, Wakeup, WakeupSubscription,
};
use hare_outbox_nats::{NatsDelivery, NatsWakeup};
use hare_outbox_testkit::wait_for;
use serde_json::json;

fn topics(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

/// The next signal, which must come within [`WAIT`].
async fn next(sub: &mut WakeupSubscription) -> Vec<String> {
    hare_outbox_testkit::next_topics(sub, WAIT).await
}

#[tokio::test]
async fn a_signal_reaches_every_subscriber_of_both_objects() {
    let subject = unique("hare_t_wake");
    let here = NatsWakeup::new(&url())
        .unwrap()
        .with_subject(&subject)
        .unwrap();
    // A second object on the same subject: another process, as far as NATS can tell.
    let there = NatsWakeup::new(&url())
        .unwrap()
        .with_subject(&subject)
        .unwrap();
    let mut a = here.subscribe().await.unwrap();
    let mut b = here.clone().subscribe().await.unwrap();
    let mut c = there.subscribe().await.unwrap();
    // A plain subscriber sees what goes over the wire.
    let raw_client = connect(&url()).await;
    let mut raw = raw_client.subscribe(subject.clone()).await.unwrap();
    raw_client.flush().await.unwrap();

    here.signal(&topics(&["orders.created", "orders.paid"]))
        .await
        .unwrap();
    for sub in [&mut a, &mut b, &mut c] {
        assert_eq!(next(sub).await, ["orders.created", "orders.paid"]);
    }
    let message = tokio::time::timeout(WAIT, raw.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&message.payload[..], br#"["orders.created","orders.paid"]"#);
    assert!(message.headers.is_none());

    there.signal(&topics(&["invoices"])).await.unwrap();
    for sub in [&mut a, &mut b, &mut c] {
        assert_eq!(next(sub).await, ["invoices"]);
    }
    here.close().await.unwrap();
    assert!(
        tokio::time::timeout(WAIT, a.recv())
            .await
            .unwrap()
            .is_none(),
        "close() closes the object's subscriptions"
    );
    there.close().await.unwrap();
}

#[tokio::test]
async fn a_relay_delivers_within_a_second_of_a_commit() {
    let client = connect(&url()).await;
    let subject = unique("hare_t_wake");
    let stream = unique("T");
    let root = unique("t");
    let (schema, outbox) = pg_outbox().await;
    let wakeup = NatsWakeup::new(&url())
        .unwrap()
        .with_subject(&subject)
        .unwrap();
    let outbox = outbox.with_wakeup(wakeup.clone()).unwrap();
    let relay = OutboxRelay::new(
        outbox.clone(),
        NatsDelivery::new(&url())
            .unwrap()
            .with_subject_prefix(format!("{root}."))
            .unwrap()
            .with_stream(&stream, [format!("{root}.>")])
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
    assert_eq!(stream_len(&client, &stream).await, 3);
    relay.stop().await.unwrap();
    wakeup.close().await.unwrap();
    delete_stream(&client, &stream).await;
    schema.drop_schema().await;
}

#[tokio::test]
async fn a_restarted_server_is_subscribed_to_again() {
    let mut server = NatsServer::start(false).await;
    let wakeup = NatsWakeup::new(&server.url()).unwrap();
    let mut sub = wakeup.subscribe().await.unwrap();
    wakeup.signal(&topics(&["before"])).await.unwrap();
    assert_eq!(next(&mut sub).await, ["before"]);

    for round in 0..2 {
        // The server closes every connection, the listener's included.
        server.stop();
        server.restart().await;
        // The listener's client reconnects and resubscribes by itself; signal until one gets
        // through (the publishing client reconnects too, and a signal is dropped meanwhile).
        let expected = format!("after.restart.{round}");
        let got = tokio::time::timeout(WAIT, async {
            loop {
                let _ = wakeup.signal(&topics(&[expected.as_str()])).await;
                if let Ok(signal) =
                    tokio::time::timeout(Duration::from_millis(100), sub.recv()).await
                {
                    break signal;
                }
            }
        })
        .await
        .expect("a signal after the restart");
        assert_eq!(
            got.expect("the wake-up stays open")
                .expect("no signal missed")
                .to_vec(),
            [expected]
        );
    }
    wakeup.close().await.unwrap();
}

/// On a current-thread runtime, so the listener task logs into the captured subscriber.
#[tokio::test]
async fn a_closed_port_logs_an_error_after_five_failures_and_the_relay_polls_on() {
    let (logs, _guard) = Logs::capture();
    let wakeup = NatsWakeup::new(&format!("nats://127.0.0.1:{}", closed_port())).unwrap();

    let error = wakeup.signal(&topics(&["t"])).await.unwrap_err();
    assert!(
        matches!(error, hare_outbox_core::Error::Database { .. }),
        "{error}"
    );

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
    assert_eq!(
        logs.lines("WARN", "wake-up subscription failed; retrying")
            .len(),
        4,
        "{}",
        logs.text()
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(100), sub.recv())
            .await
            .is_err(),
        "the subscription stays open: the listener goes on retrying"
    );

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
    assert_eq!(seen.lock().unwrap()[0], json!({"by": "polling"}));
    relay.stop().await.unwrap();
    wakeup.close().await.unwrap();
    schema.drop_schema().await;
}

/// The client of a live subscription stops after five failed reconnects in a row; the listener
/// logs an ERROR and connects a new client, which subscribes once the server is back.
#[tokio::test]
async fn a_server_away_past_five_reconnects_is_subscribed_to_by_a_new_client() {
    let (logs, _guard) = Logs::capture();
    let mut server = NatsServer::start(false).await;
    let wakeup = NatsWakeup::new(&server.url()).unwrap();
    let mut sub = wakeup.subscribe().await.unwrap();
    server.stop();
    wait_for("the client to give up", Duration::from_secs(20), || async {
        (logs
            .lines(
                "ERROR",
                "5 reconnects in a row failed; relays poll meanwhile",
            )
            .len()
            == 1)
            .then_some(())
    })
    .await;
    server.restart().await;
    let poll_now = tokio::time::timeout(Duration::from_secs(30), sub.recv())
        .await
        .expect("subscribed again")
        .expect("still open")
        .expect("not lagging");
    assert!(poll_now.is_empty(), "an empty signal: poll now");
    wait_for("a signal through the new client", WAIT, || async {
        wakeup.signal(&topics(&["back"])).await.ok()
    })
    .await;
    assert_eq!(next(&mut sub).await, ["back"]);
    wakeup.close().await.unwrap();
}
