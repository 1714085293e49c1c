//! RabbitMqDelivery against the real RabbitMQ broker: each test on exchanges and queues of its
//! own, deleted at the end.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{Admin, close_connection, connections_named, event, text, unique, url};
use hare_outbox_core::{Delivery, OutboxEvent};
use hare_outbox_rabbitmq::lapin::ExchangeKind;
use hare_outbox_rabbitmq::lapin::types::ShortString;
use hare_outbox_rabbitmq::{ORDERING_KEY_HEADER, RabbitMqDelivery};
use serde_json::{Value, json};

#[tokio::test]
async fn fields_arrive_exactly_on_a_queue_bound_to_the_exchange() {
    let admin = Admin::connect().await;
    let exchange = unique("hare_t_x");
    let queue = unique("hare_t_q");
    let topic = unique("orders.created");
    admin.exchange(&exchange, ExchangeKind::Direct).await;
    admin.queue(&queue, Some((&exchange, &topic))).await;
    let delivery = RabbitMqDelivery::new(&url())
        .unwrap()
        .with_exchange(&exchange)
        .unwrap();

    let keyed = event(
        &topic,
        Some("order:42"),
        json!({"order": 42, "customer": "Zoë Ünal", "lines": [{"sku": "A-1", "qty": 1.5}], "note": "✓ \"q\"\n"}),
        json!({"author": "ann", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "attempt": 3, "hare-outbox-topic": "spoofed"}),
    );
    let unkeyed = event(&topic, None, json!([1, null, "x"]), Value::Null);
    delivery.deliver(&keyed).await.unwrap();
    delivery.deliver(&unkeyed).await.unwrap();

    for e in [&keyed, &unkeyed] {
        let message = admin.get(&queue).await;
        let m = &message.delivery;
        assert_eq!(m.data, e.body(), "body = payload JSON, byte for byte");
        assert_eq!(m.exchange.as_str(), exchange);
        assert_eq!(m.routing_key.as_str(), topic, "routing key = topic");
        let p = &m.properties;
        assert_eq!(*p.delivery_mode(), Some(2), "persistent");
        assert_eq!(
            p.content_type().as_ref().map(ShortString::as_str),
            Some("application/json")
        );
        assert_eq!(
            p.message_id().as_ref().map(ShortString::as_str),
            Some(e.id.to_string().as_str())
        );
        let headers = p.headers().clone().expect("headers");
        let headers = headers.inner();
        for (name, value) in e.message_headers() {
            assert_eq!(headers.get(name.as_str()).map(text), Some(value), "{name}");
        }
        assert_eq!(
            headers.get(ORDERING_KEY_HEADER).map(text).as_deref(),
            e.message_key()
        );
        let sent = e.message_headers().len() + usize::from(e.message_key().is_some());
        assert_eq!(headers.len(), sent, "no other headers: {headers:?}");
    }
    assert_eq!(admin.depth(&queue).await, 0, "exactly two messages");
    delivery.close().await.unwrap();
    admin.delete_queue(&queue).await;
    admin.delete_exchange(&exchange).await;
}

#[tokio::test]
async fn the_default_exchange_routes_to_the_queue_named_by_the_routing_key() {
    let admin = Admin::connect().await;
    let queue = unique("hare_t_q");
    admin.queue(&queue, None).await;

    // By topic: the topic is the queue name.
    let by_topic = RabbitMqDelivery::new(&url()).unwrap();
    assert_eq!(by_topic.exchange(), "");
    let e = event(&queue, None, json!({"via": "topic"}), Value::Null);
    by_topic.deliver(&e).await.unwrap();
    let message = admin.get(&queue).await;
    assert_eq!(message.delivery.exchange.as_str(), "");
    assert_eq!(message.delivery.routing_key.as_str(), queue);
    assert_eq!(message.delivery.data, e.body());

    // By a configured routing key, whatever the topic.
    let by_key = RabbitMqDelivery::new(&url())
        .unwrap()
        .with_routing_key(&queue)
        .unwrap();
    let e = event("orders.paid", None, json!({"via": "key"}), Value::Null);
    by_key.deliver(&e).await.unwrap();
    let message = admin.get(&queue).await;
    assert_eq!(message.delivery.routing_key.as_str(), queue);
    assert_eq!(message.delivery.data, e.body());

    by_topic.close().await.unwrap();
    by_key.close().await.unwrap();
    admin.delete_queue(&queue).await;
}

#[tokio::test]
async fn an_unroutable_message_fails_its_event_and_others_go_on() {
    let admin = Admin::connect().await;
    let exchange = unique("hare_t_x");
    let queue = unique("hare_t_q");
    admin.exchange(&exchange, ExchangeKind::Direct).await;
    admin.queue(&queue, Some((&exchange, "bound"))).await;
    let delivery = RabbitMqDelivery::new(&url())
        .unwrap()
        .with_exchange(&exchange)
        .unwrap();

    let lost = event("nobody.listens", None, json!(1), Value::Null);
    let error = delivery.deliver(&lost).await.unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("unroutable") && text.contains("NO_ROUTE"),
        "{text}"
    );
    assert!(text.contains(&lost.id.to_string()), "{text}");

    // The same connection goes on, and in a batch only the unroutable events fail.
    let batch = vec![
        event("bound", None, json!(1), Value::Null),
        event("unbound", None, json!(2), Value::Null),
        event("bound", None, json!(3), Value::Null),
    ];
    let results = delivery
        .deliver_batch(&batch, 10, Duration::from_secs(10))
        .await;
    assert!(results[0].is_ok(), "{:?}", results[0]);
    assert!(results[1].is_err());
    assert!(results[2].is_ok(), "{:?}", results[2]);
    assert_eq!(admin.depth(&queue).await, 2);

    delivery.close().await.unwrap();
    admin.delete_queue(&queue).await;
    admin.delete_exchange(&exchange).await;
}

#[tokio::test]
async fn a_missing_exchange_fails_and_the_next_call_opens_a_new_channel() {
    let admin = Admin::connect().await;
    let exchange = unique("hare_t_x");
    let queue = unique("hare_t_q");
    let delivery = RabbitMqDelivery::new(&url())
        .unwrap()
        .with_exchange(&exchange)
        .unwrap();
    let e = event(&queue, None, json!(1), Value::Null);
    let error = delivery.deliver(&e).await.unwrap_err();
    assert!(error.chain().contains("NOT_FOUND"), "{}", error.chain());

    // Once the exchange exists, the same delivery works (the broker closed the old channel).
    admin.exchange(&exchange, ExchangeKind::Direct).await;
    admin.queue(&queue, Some((&exchange, &queue))).await;
    delivery.deliver(&e).await.unwrap();
    assert_eq!(admin.get(&queue).await.delivery.data, e.body());

    delivery.close().await.unwrap();
    admin.delete_queue(&queue).await;
    admin.delete_exchange(&exchange).await;
}

#[tokio::test]
async fn a_batch_of_100_is_confirmed_whole_and_in_order() {
    let admin = Admin::connect().await;
    let exchange = unique("hare_t_x");
    let queue = unique("hare_t_q");
    admin.exchange(&exchange, ExchangeKind::Fanout).await;
    admin.queue(&queue, Some((&exchange, ""))).await;
    let delivery = RabbitMqDelivery::new(&url())
        .unwrap()
        .with_exchange(&exchange)
        .unwrap();
    let events: Vec<OutboxEvent> = (0..100)
        .map(|n| {
            event(
                &format!("t.{}", n % 7),
                Some(&format!("k{n}")),
                json!({ "n": n }),
                Value::Null,
            )
        })
        .collect();
    let results = delivery
        .deliver_batch(&events, 10, Duration::from_secs(10))
        .await;
    assert_eq!(results.len(), 100);
    for (n, result) in results.iter().enumerate() {
        assert!(result.is_ok(), "event {n}: {result:?}");
    }
    assert_eq!(admin.depth(&queue).await, 100);
    for e in &events {
        let message = admin.get(&queue).await;
        assert_eq!(message.delivery.data, e.body(), "published in batch order");
    }
    assert!(
        delivery
            .deliver_batch(&[], 10, Duration::from_secs(1))
            .await
            .is_empty()
    );

    delivery.close().await.unwrap();
    admin.delete_queue(&queue).await;
    admin.delete_exchange(&exchange).await;
}

#[tokio::test]
async fn a_broker_that_cannot_be_reached_fails_every_event() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let delivery = RabbitMqDelivery::new(&format!("amqp://guest:guest@127.0.0.1:{port}/%2f"))
        .unwrap()
        .with_timeout(Duration::from_secs(3));
    let events = vec![
        event("a", None, json!(1), Value::Null),
        event("b", None, json!(2), Value::Null),
    ];
    let results = delivery
        .deliver_batch(&events, 10, Duration::from_secs(10))
        .await;
    assert_eq!(results.len(), 2);
    for result in results {
        let error = result.unwrap_err();
        assert!(
            error.to_string().contains(&format!("127.0.0.1:{port}")),
            "{error}"
        );
    }
}

#[tokio::test]
async fn a_connection_closed_by_the_broker_is_opened_again_on_the_next_call() {
    let admin = Admin::connect().await;
    let queue = unique("hare_t_q");
    admin.queue(&queue, None).await;
    let name = unique("hare-outbox test delivery");
    let delivery = RabbitMqDelivery::new(&url())
        .unwrap()
        .with_routing_key(&queue)
        .unwrap()
        .with_connection_name(&name);
    let first = event("t", None, json!(1), Value::Null);
    delivery.deliver(&first).await.unwrap();
    let connections = connections_named(&name).await;
    assert_eq!(connections.len(), 1, "{connections:?}");
    close_connection(&connections[0]).await;

    // A call racing the close may fail (the relay would retry it); the next one reconnects.
    let second = event("t", None, json!(2), Value::Null);
    if delivery.deliver(&second).await.is_err() {
        delivery.deliver(&second).await.unwrap();
    }
    let again = connections_named(&name).await;
    assert_eq!(again.len(), 1, "a new connection: {again:?}");
    assert_ne!(again, connections);
    assert_eq!(admin.get(&queue).await.delivery.data, first.body());
    assert_eq!(admin.get(&queue).await.delivery.data, second.body());

    delivery.close().await.unwrap();
    admin.delete_queue(&queue).await;
}

#[tokio::test]
async fn confirms_that_do_not_come_in_time_fail_and_the_next_call_works() {
    let admin = Admin::connect().await;
    let queue = unique("hare_t_q");
    admin.queue(&queue, None).await;
    let delivery = RabbitMqDelivery::new(&url())
        .unwrap()
        .with_routing_key(&queue)
        .unwrap();
    delivery
        .deliver(&event("t", None, json!(0), Value::Null))
        .await
        .unwrap();
    // No time at all: the confirms cannot come back in time — unless one is already there when
    // the timeout is first checked, which a fast broker sometimes manages; a few tries show it.
    let events: Vec<OutboxEvent> = (1..=3)
        .map(|n| event("t", None, json!(n), Value::Null))
        .collect();
    let mut timed_out = 0;
    for _ in 0..5 {
        let results = delivery.deliver_batch(&events, 10, Duration::ZERO).await;
        assert_eq!(results.len(), 3);
        for result in results {
            if let Err(error) = result {
                assert!(error.to_string().contains("timed out"), "{error}");
                timed_out += 1;
            }
        }
        if timed_out > 0 {
            break;
        }
    }
    assert!(timed_out > 0, "no confirm timed out with no time at all");
    // The channel in doubt is replaced; the same delivery goes on.
    let last = event("t", None, json!("last"), Value::Null);
    delivery.deliver(&last).await.unwrap();
    let mut seen = Vec::new();
    loop {
        let data = admin.get(&queue).await.delivery.data;
        let done = data == last.body();
        seen.push(data);
        if done {
            break;
        }
    }
    assert!(seen.len() >= 2, "{seen:?}");

    delivery.close().await.unwrap();
    admin.delete_queue(&queue).await;
}
