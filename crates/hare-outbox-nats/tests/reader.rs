//! Round trip against a real NATS JetStream: what `NatsDelivery` publishes, a pull consumer
//! receives and `reader::read_message` reads back byte for byte.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use async_nats::jetstream;
use common::{connect, delete_stream, event, unique, url};
use futures::StreamExt;
use hare_outbox_core::Delivery;
use hare_outbox_nats::{NatsDelivery, reader};
use serde_json::{Value, json};

#[tokio::test]
async fn what_the_delivery_publishes_the_reader_reads_back_exactly() {
    let client = connect(&url()).await;
    let stream = unique("R");
    let root = unique("r");
    let delivery = NatsDelivery::new(&url())
        .unwrap()
        .with_stream(&stream, [format!("{root}.>")])
        .unwrap();
    let topic = format!("{root}.orders.created");
    let keyed = event(
        &topic,
        Some("order:42"),
        json!({"order": 42, "customer": "Zoë Ünal", "qty": 1.5, "note": "✓ \"q\""}),
        json!({"author": "ann", "attempt": 3, "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}),
    );
    let unkeyed = event(&topic, None, json!([1, null, "x"]), Value::Null);
    delivery.deliver(&keyed).await.unwrap();
    delivery.deliver(&unkeyed).await.unwrap();

    let js = jetstream::new(client.clone());
    let consumer: jetstream::consumer::PullConsumer = js
        .get_stream(&stream)
        .await
        .unwrap()
        .create_consumer(jetstream::consumer::pull::Config {
            durable_name: Some("reader".to_owned()),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut messages = consumer
        .fetch()
        .max_messages(2)
        .expires(std::time::Duration::from_secs(5))
        .messages()
        .await
        .unwrap();
    let mut read = Vec::new();
    while let Some(message) = messages.next().await {
        let message = message.unwrap();
        read.push(reader::read_message(&message).unwrap());
        message.ack().await.unwrap();
    }
    assert_eq!(read.len(), 2);
    for (sent, got) in [&keyed, &unkeyed].into_iter().zip(&read) {
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
    delete_stream(&client, &stream).await;
}
