//! Round trip against a real Kafka-protocol broker: what `KafkaDelivery` produces,
//! `reader::read_message` reads back byte for byte, headers in order.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{bootstrap, create_topic, event, read, unique};
use hare_outbox_core::Delivery;
use hare_outbox_kafka::{KafkaDelivery, reader};
use serde_json::{Value, json};

#[tokio::test]
async fn what_the_delivery_produces_the_reader_reads_back_exactly() {
    let topic = unique("reader");
    create_topic(&topic, 1).await;
    let delivery = KafkaDelivery::new(&bootstrap()).unwrap();
    let keyed = event(
        &topic,
        Some("order:42"),
        json!({"order": 42, "customer": "Zoë Ünal", "qty": 1.5, "note": "✓ \"q\"\n"}),
        json!({"author": "Zoë ✓", "attempt": 3, "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}),
    );
    let unkeyed = event(&topic, None, json!([1, null, "x"]), Value::Null);
    delivery.deliver(&keyed).await.unwrap();
    delivery.deliver(&unkeyed).await.unwrap();

    let messages = read(&topic, 1, 2).await;
    for (sent, message) in [&keyed, &unkeyed].into_iter().zip(&messages) {
        let got = reader::read_message(message).unwrap();
        assert_eq!(got.id, sent.id);
        assert_eq!(got.topic, sent.topic);
        assert_eq!(got.ordering_key, sent.ordering_key);
        assert_eq!(got.headers, sent.message_headers(), "in the order sent");
        assert_eq!(got.payload, sent.body(), "byte for byte");
    }
}
