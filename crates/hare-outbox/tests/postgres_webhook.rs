//! End to end: events written into PostgreSQL in the caller's transaction, relayed to a real HTTP
//! receiver on loopback.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use hare_outbox::postgres::PgBackend;
use hare_outbox::webhook::WebhookDelivery;
use hare_outbox::{Outbox, OutboxMessage, OutboxRelay, OutboxTable, RelayConfig};
use hare_outbox_testkit::http::{Behaviour, Receiver};
use hare_outbox_testkit::pg::TestSchema;
use hare_outbox_testkit::wait_for;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::json;

async fn setup() -> (TestSchema, Outbox<PgBackend>) {
    let schema = TestSchema::new(4).await;
    let outbox = Outbox::new(
        PgBackend::new(schema.pool.clone()),
        OutboxTable::parse("outbox").unwrap(),
    );
    outbox.migrate().await.unwrap();
    (schema, outbox)
}

fn config() -> RelayConfig {
    RelayConfig::default()
        .with_poll_interval(Duration::from_millis(20))
        .with_retry_base(Duration::from_millis(150))
        .with_retry_max(Duration::from_secs(5))
}

#[tokio::test]
async fn payload_and_headers_arrive_byte_exact_and_signed() {
    let (schema, outbox) = setup().await;
    let receiver = Receiver::start(Behaviour::ok());
    let payload = json!({
        "id": 22,
        "entity": "sales_order",
        "from": {"status": "confirmed", "eta_date": null, "prepaid": "0.00"},
        "changed": ["status", "eta_date"],
        "note": "ünïcødé \u{1F600} \"quoted\" <tag>",
        "ratio": 0.1,
    });
    let mut tx = schema.pool.begin().await.unwrap();
    let event = outbox
        .enqueue(
            &mut *tx,
            OutboxMessage::new("doc.updated", &payload)
                .ordering_key("sales_orders:22")
                .header("author", "Администратор")
                .header(
                    "traceparent",
                    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                )
                .header("attempt-budget", 3),
        )
        .await
        .unwrap();
    // A second event in a transaction that rolls back is never delivered.
    outbox
        .enqueue(
            &mut *tx,
            OutboxMessage::new("doc.updated", json!({"id": 23})),
        )
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let mut tx = schema.pool.begin().await.unwrap();
    let rolled_back = outbox
        .enqueue(
            &mut *tx,
            OutboxMessage::new("doc.rolled_back", json!({"id": 24})),
        )
        .await
        .unwrap();
    tx.rollback().await.unwrap();

    let secret = b"s3cr3t-key".to_vec();
    let delivery = WebhookDelivery::new(receiver.url("/hooks/docs"))
        .unwrap()
        .with_secret(secret.clone())
        .unwrap();
    let relay = OutboxRelay::new(outbox.clone(), delivery, config()).unwrap();
    relay.start().unwrap();
    let requests = receiver.wait_for_requests(2, Duration::from_secs(10)).await;
    relay.stop().await.unwrap();

    let request = requests
        .iter()
        .find(|r| r.header_str("hare-outbox-event-id") == Some(&event.id.to_string()))
        .expect("the event arrived");
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/hooks/docs");
    assert_eq!(
        request.body,
        serde_json::to_vec(&payload).unwrap(),
        "body is the payload JSON, byte for byte"
    );
    assert_eq!(request.header_str("hare-outbox-topic"), Some("doc.updated"));
    assert_eq!(
        request.header("author"),
        Some("Администратор".as_bytes()),
        "UTF-8 header bytes"
    );
    assert_eq!(
        request.header_str("traceparent"),
        Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    );
    assert_eq!(request.header_str("attempt-budget"), Some("3"));
    assert_eq!(request.header_str("content-type"), Some("application/json"));

    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&secret).unwrap();
    mac.update(&request.body);
    let expected = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
    assert_eq!(
        request.header_str("hare-outbox-signature"),
        Some(expected.as_str())
    );

    assert!(
        requests
            .iter()
            .all(|r| r.header_str("hare-outbox-event-id") != Some(&rolled_back.id.to_string())),
        "a rolled-back event is never delivered"
    );
    assert_eq!(receiver.request_count(), 2);
    assert!(
        outbox
            .get(event.id)
            .await
            .unwrap()
            .unwrap()
            .published_at
            .is_some()
    );
    schema.drop_schema().await;
}

#[tokio::test]
async fn a_receiver_answering_500_gets_retries_with_growing_delays_then_a_dead_letter() {
    let (schema, outbox) = setup().await;
    let receiver = Receiver::start(Behaviour::status(500).with_body("boom"));
    let mut conn = schema.pool.acquire().await.unwrap();
    let event = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("billing.invoice.paid", json!({"id": 1})).ordering_key("invoice:1"),
        )
        .await
        .unwrap();
    let held_back = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("billing.invoice.paid", json!({"id": 1, "v": 2}))
                .ordering_key("invoice:1"),
        )
        .await
        .unwrap();
    drop(conn);
    let relay = OutboxRelay::new(
        outbox.clone(),
        WebhookDelivery::new(receiver.url("/hook")).unwrap(),
        config().with_max_delivery_attempts(4),
    )
    .unwrap();
    relay.start().unwrap();
    let dead = wait_for("a dead letter", Duration::from_secs(20), || async {
        outbox
            .get(event.id)
            .await
            .unwrap()
            .filter(|e| e.dead_lettered_at.is_some())
    })
    .await;
    relay.stop().await.unwrap();

    assert_eq!(dead.attempts, 4);
    let error = dead.last_error.unwrap_or_default();
    assert!(error.contains("500") && error.contains("boom"), "{error}");
    assert!(dead.published_at.is_none());
    let requests = receiver.requests();
    assert_eq!(
        requests.len(),
        4,
        "the held-back event of the same key was never sent"
    );
    assert!(
        requests
            .iter()
            .all(|r| r.header_str("hare-outbox-event-id") == Some(&event.id.to_string()))
    );
    let gaps: Vec<f64> = requests
        .windows(2)
        .map(|w| (w[1].received_at - w[0].received_at).as_secs_f64())
        .collect();
    // 0.15 s, 0.3 s, 0.6 s, each ±10%, plus up to a poll interval and a loaded machine's delay:
    // the lower bounds show the doubling (a late retry may exceed the next one's backoff, so the
    // gaps themselves are not compared).
    assert!(
        gaps[0] >= 0.135 && gaps[1] >= 0.27 && gaps[2] >= 0.54,
        "{gaps:?}"
    );
    assert!(gaps.iter().all(|g| *g < 10.0), "{gaps:?}");
    assert!(
        outbox
            .get(held_back.id)
            .await
            .unwrap()
            .unwrap()
            .published_at
            .is_none()
    );
    schema.drop_schema().await;
}
