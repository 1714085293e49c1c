//! Round trip against a real RabbitMQ: what `RabbitMqDelivery` publishes, `reader::read_delivery`
//! reads back byte for byte.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Admin, event, unique, url};
use hare_outbox_core::Delivery;
use hare_outbox_rabbitmq::{RabbitMqDelivery, reader};
use serde_json::{Value, json};

#[tokio::test]
async fn what_the_delivery_publishes_the_reader_reads_back_exactly() {
    let admin = Admin::connect().await;
    // The default exchange routes to the queue named like the routing key, the topic.
    let topic = unique("reader");
    admin.queue(&topic, None).await;
    let delivery = RabbitMqDelivery::new(&url()).unwrap();
    let keyed = event(
        &topic,
        Some("order:42"),
        json!({"order": 42, "customer": "Zoë Ünal", "qty": 1.5, "note": "✓ \"q\"\n"}),
        json!({"author": "ann", "attempt": 3, "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}),
    );
    let unkeyed = event(&topic, None, json!([1, null, "x"]), Value::Null);
    delivery.deliver(&keyed).await.unwrap();
    delivery.deliver(&unkeyed).await.unwrap();

    for sent in [&keyed, &unkeyed] {
        let message = admin.get(&topic).await;
        let got = reader::read_delivery(&message.delivery).unwrap();
        assert_eq!(got.id, sent.id);
        assert_eq!(got.topic, sent.topic);
        assert_eq!(got.ordering_key, sent.ordering_key);
        let mut headers = sent.message_headers();
        headers.sort();
        assert_eq!(
            got.headers, headers,
            "the event's headers, no transport ones"
        );
        assert_eq!(got.payload, sent.body(), "byte for byte");
    }
    admin.delete_queue(&topic).await;
}
