//! KafkaWakeup against a real Kafka-protocol broker (tansu): each test on a signal topic of its
//! own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::{WAIT, bootstrap, create_topic, pg_outbox, read, unique};
use hare_outbox_core::{OutboxRelay, RelayConfig, Wakeup, WakeupSubscription};
use hare_outbox_kafka::rdkafka::ClientConfig;
use hare_outbox_kafka::rdkafka::Message;
use hare_outbox_kafka::rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use hare_outbox_kafka::rdkafka::client::DefaultClientContext;
use hare_outbox_kafka::{KafkaDelivery, KafkaWakeup};

fn topics(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

/// The next signal, which must come within [`WAIT`].
async fn next(sub: &mut WakeupSubscription) -> Vec<String> {
    hare_outbox_testkit::next_topics(sub, WAIT).await
}

fn admin() -> AdminClient<DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .unwrap()
}

#[tokio::test]
async fn a_signal_reaches_every_subscriber_of_both_objects() {
    let signal_topic = unique("signals");
    let here = KafkaWakeup::new(&bootstrap())
        .unwrap()
        .with_topic(&signal_topic)
        .unwrap();
    // A second object on the same topic: another process, as far as the broker can tell.
    let there = KafkaWakeup::new(&bootstrap())
        .unwrap()
        .with_topic(&signal_topic)
        .unwrap();
    let mut a = here.subscribe().await.unwrap();
    let mut b = here.clone().subscribe().await.unwrap();
    let mut c = there.subscribe().await.unwrap();

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

    // The messages on the wire: JSON arrays of the topics, in partition 0.
    let messages = read(&signal_topic, 1, 2).await;
    assert_eq!(messages[0].partition(), 0);
    assert_eq!(
        messages[0].payload().unwrap(),
        br#"["orders.created","orders.paid"]"#
    );
    assert_eq!(messages[1].payload().unwrap(), br#"["invoices"]"#);

    // The signal topic was created with one partition and one minute of retention.
    let admin = admin();
    let metadata = admin
        .inner()
        .fetch_metadata(Some(&signal_topic), Duration::from_secs(5))
        .unwrap();
    assert_eq!(metadata.topics()[0].partitions().len(), 1);
    let configs = admin
        .describe_configs(
            [&ResourceSpecifier::Topic(&signal_topic)],
            &AdminOptions::new(),
        )
        .await
        .unwrap();
    let config = configs[0].as_ref().unwrap();
    assert_eq!(
        config.get("retention.ms").and_then(|e| e.value.as_deref()),
        Some("60000")
    );

    here.close().await.unwrap();
    there.close().await.unwrap();
    assert!(
        tokio::time::timeout(WAIT, a.recv())
            .await
            .unwrap()
            .is_none(),
        "close() closes the subscriptions"
    );
}

#[tokio::test]
async fn a_subscriber_reads_from_the_end_and_the_existing_topic_is_kept() {
    let signal_topic = unique("signals");
    // Created beforehand with three partitions: the wake-up uses it as it is.
    create_topic(&signal_topic, 3).await;
    let wakeup = KafkaWakeup::new(&bootstrap())
        .unwrap()
        .with_topic(&signal_topic)
        .unwrap();
    wakeup.signal(&topics(&["before"])).await.unwrap();
    let mut sub = wakeup.subscribe().await.unwrap();
    wakeup.signal(&topics(&["after"])).await.unwrap();
    assert_eq!(
        next(&mut sub).await,
        ["after"],
        "older signals are not read"
    );

    let metadata = admin()
        .inner()
        .fetch_metadata(Some(&signal_topic), Duration::from_secs(5))
        .unwrap();
    assert_eq!(metadata.topics()[0].partitions().len(), 3);
    wakeup.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_delivers_within_two_seconds_of_a_commit() {
    let signal_topic = unique("signals");
    let event_topic = unique("woken");
    create_topic(&event_topic, 1).await;
    let (schema, outbox) = pg_outbox().await;
    let wakeup = KafkaWakeup::new(&bootstrap())
        .unwrap()
        .with_topic(&signal_topic)
        .unwrap();
    let outbox = outbox.with_wakeup(wakeup.clone()).unwrap();
    let relay = OutboxRelay::new(
        outbox.clone(),
        KafkaDelivery::new(&bootstrap()).unwrap(),
        RelayConfig::default().with_poll_interval(Duration::from_secs(60)),
    )
    .unwrap();
    relay.start().unwrap();
    hare_outbox_testkit::scenario::assert_relay_wakes_on_each_commit(
        &outbox,
        &relay,
        &event_topic,
        3,
        Duration::from_secs(2),
    )
    .await;
    relay.stop().await.unwrap();
    wakeup.close().await.unwrap();
    let messages = read(&event_topic, 1, 3).await;
    assert_eq!(messages[2].payload().unwrap(), br#"{"round":3}"#);
    schema.drop_schema().await;
}

#[tokio::test]
async fn an_unreachable_broker_fails_signals_and_subscriptions_stay_open_until_closed() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let wakeup = KafkaWakeup::new(&format!("127.0.0.1:{port}")).unwrap();
    let started = Instant::now();
    let error = wakeup.signal(&topics(&["t"])).await.unwrap_err();
    assert!(
        matches!(error, hare_outbox_core::Error::Database { .. }),
        "{error}"
    );
    assert!(started.elapsed() < Duration::from_secs(6), "bounded signal");

    let mut sub = wakeup.subscribe().await.unwrap();
    // The listener never gives up while anyone subscribes: the subscription stays open past
    // the first failed attempts.
    assert!(
        tokio::time::timeout(Duration::from_secs(7), sub.recv())
            .await
            .is_err(),
        "the subscription stays open"
    );
    wakeup.close().await.unwrap();
    let closed = tokio::time::timeout(WAIT, sub.recv())
        .await
        .expect("close() ends the subscription at once");
    assert!(closed.is_none());
}

/// A broker of the test's own, killed and started again (its in-memory storage, the signal topic
/// with it, is lost): the listener reconnects, creates the topic again and receives signals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_broker_is_subscribed_to_again() {
    let mut broker = common::Tansu::start().await;
    let wakeup = KafkaWakeup::new(&broker.bootstrap()).unwrap();
    let mut sub = wakeup.subscribe().await.unwrap();
    wakeup.signal(&topics(&["before"])).await.unwrap();
    assert_eq!(next(&mut sub).await, ["before"]);

    broker.kill();
    broker.restart().await;
    // The listener notices, reconnects and reads from the new end; signals sent before that are
    // lost (harmless), so keep signalling until one arrives.
    let started = Instant::now();
    let received = loop {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no signal received within 30 s after the restart"
        );
        let _ = wakeup.signal(&topics(&["after.restart"])).await;
        match tokio::time::timeout(Duration::from_millis(500), sub.recv()).await {
            // An empty signal (poll now, after the reconnect) is not the one sent.
            Ok(Some(Some(signal))) if !signal.is_empty() => break signal.to_vec(),
            Ok(Some(Some(_))) => {}
            Ok(Some(None)) | Err(_) => {}
            Ok(None) => panic!("the listener gave up instead of reconnecting"),
        }
    };
    assert_eq!(received, ["after.restart"]);
    wakeup.close().await.unwrap();
}
