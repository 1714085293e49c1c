//! RabbitMqWakeup against the real RabbitMQ broker: each test on a fanout exchange (and queues)
//! of its own, deleted at the end. The broker is shared with other tests, so it is never
//! restarted here; a lost connection is made by closing the listener's connection alone.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{Admin, WAIT, close_connection, connections_named, pg_outbox, unique, url};
use hare_outbox_core::{OutboxRelay, RelayConfig, Wakeup, WakeupSubscription};
use hare_outbox_rabbitmq::{RabbitMqDelivery, RabbitMqWakeup};
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
    let admin = Admin::connect().await;
    let exchange = unique("hare_t_wake");
    let here = RabbitMqWakeup::new(&url())
        .unwrap()
        .with_exchange(&exchange)
        .unwrap();
    // A second object on the same exchange: another process, as far as the broker can tell.
    let there = RabbitMqWakeup::new(&url())
        .unwrap()
        .with_exchange(&exchange)
        .unwrap();
    let mut a = here.subscribe().await.unwrap();
    let mut b = here.clone().subscribe().await.unwrap();
    let mut c = there.subscribe().await.unwrap();
    assert!(
        admin.exchange_exists(&exchange).await,
        "declared by subscribing"
    );
    // A plain queue bound to the exchange sees what goes over the wire.
    let raw = unique("hare_t_q");
    admin.queue(&raw, Some((&exchange, ""))).await;

    here.signal(&topics(&["orders.created", "orders.paid"]))
        .await
        .unwrap();
    for sub in [&mut a, &mut b, &mut c] {
        assert_eq!(next(sub).await, ["orders.created", "orders.paid"]);
    }
    let message = admin.get(&raw).await;
    assert_eq!(
        message.delivery.data,
        br#"["orders.created","orders.paid"]"#
    );
    assert_eq!(*message.delivery.properties.delivery_mode(), Some(1));

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
    admin.delete_queue(&raw).await;
    admin.delete_exchange(&exchange).await;
}

#[tokio::test]
async fn a_relay_delivers_within_a_second_of_a_commit() {
    let admin = Admin::connect().await;
    let exchange = unique("hare_t_wake");
    let queue = unique("hare_t_q");
    admin.queue(&queue, None).await;
    let (schema, outbox) = pg_outbox().await;
    let wakeup = RabbitMqWakeup::new(&url())
        .unwrap()
        .with_exchange(&exchange)
        .unwrap();
    let outbox = outbox.with_wakeup(wakeup.clone()).unwrap();
    let relay = OutboxRelay::new(
        outbox.clone(),
        RabbitMqDelivery::new(&url())
            .unwrap()
            .with_routing_key(&queue)
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
    for round in 1..=3u64 {
        let message = admin.get(&queue).await;
        let payload: serde_json::Value = serde_json::from_slice(&message.delivery.data).unwrap();
        assert_eq!(payload, json!({ "round": round }));
    }
    relay.stop().await.unwrap();
    wakeup.close().await.unwrap();
    admin.delete_queue(&queue).await;
    admin.delete_exchange(&exchange).await;
    schema.drop_schema().await;
}

#[tokio::test]
async fn a_connection_closed_by_the_broker_is_subscribed_again() {
    let admin = Admin::connect().await;
    let exchange = unique("hare_t_wake");
    let name = unique("hare-outbox test wake-up");
    let wakeup = RabbitMqWakeup::new(&url())
        .unwrap()
        .with_exchange(&exchange)
        .unwrap()
        .with_connection_name(&name);
    let mut sub = wakeup.subscribe().await.unwrap();
    wakeup.signal(&topics(&["before"])).await.unwrap();
    assert_eq!(next(&mut sub).await, ["before"]);

    let listener = format!("{name} listener");
    let connections = connections_named(&listener).await;
    assert_eq!(
        connections.len(),
        1,
        "one listener connection: {connections:?}"
    );
    close_connection(&connections[0]).await;

    // The listener notices, connects again with a new queue; signal until one gets through
    // (signals sent before the new queue is bound are lost, which is harmless).
    let got = tokio::time::timeout(WAIT, async {
        loop {
            wakeup.signal(&topics(&["after"])).await.unwrap();
            if let Ok(signal) = tokio::time::timeout(Duration::from_millis(100), sub.recv()).await {
                // An empty signal (poll now, after the reconnect) is not the one sent.
                if signal
                    .as_ref()
                    .is_some_and(|s| s.as_ref().is_some_and(|t| t.is_empty()))
                {
                    continue;
                }
                break signal;
            }
        }
    })
    .await
    .expect("a signal after the connection was closed");
    assert_eq!(
        got.expect("the wake-up stays open")
            .expect("no signal missed")
            .to_vec(),
        ["after"]
    );
    let again = connections_named(&listener).await;
    assert_eq!(again.len(), 1, "a new listener connection: {again:?}");
    assert_ne!(again, connections);

    // close() closes the listener's connection, and with it its exclusive queue.
    wakeup.close().await.unwrap();
    wait_for("the listener's connection to close", WAIT, || async {
        connections_named(&listener).await.is_empty().then_some(())
    })
    .await;
    admin.delete_exchange(&exchange).await;
}

#[tokio::test]
async fn a_broker_that_cannot_be_reached_keeps_the_subscription_open_until_closed() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let wakeup = RabbitMqWakeup::new(&format!("amqp://guest:guest@127.0.0.1:{port}/%2f")).unwrap();
    let error = wakeup.signal(&topics(&["t"])).await.unwrap_err();
    assert!(
        matches!(error, hare_outbox_core::Error::Database { .. }),
        "{error}"
    );
    let mut sub = wakeup.subscribe().await.unwrap();
    // Five refused connections take about 1.5–3 s; the listener goes on past them.
    assert!(
        tokio::time::timeout(Duration::from_secs(4), sub.recv())
            .await
            .is_err(),
        "the subscription stays open while the listener retries"
    );
    wakeup.close().await.unwrap();
    let closed = tokio::time::timeout(WAIT, sub.recv())
        .await
        .expect("close() ends the subscription at once");
    assert!(closed.is_none());
}
