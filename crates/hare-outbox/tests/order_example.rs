//! The example service and consumer (`examples/order_service.rs`, `examples/order_consumer.rs`)
//! against the real PostgreSQL and Redis: POST and PATCH an order, and the consumer's effect
//! appears once per event — also after its group re-reads the whole stream.
#![cfg(all(feature = "postgres", feature = "redis", feature = "dashboard"))]
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

#[path = "../examples/order_consumer.rs"]
mod order_consumer;
#[path = "../examples/order_service.rs"]
mod order_service;

use std::time::Duration;

use hare_outbox::CancellationToken;
use hare_outbox_testkit::pg::TestSchema;
use serde_json::json;

fn redis_url() -> String {
    std::env::var("HARE_OUTBOX_TEST_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379/0".to_owned())
}

/// The consumer's effect: (topic, ordering key, author) per logged event, oldest first.
async fn log(schema: &TestSchema) -> Vec<(String, Option<String>, Option<String>)> {
    sqlx::query_as(
        "SELECT topic, ordering_key, author FROM order_log \
         ORDER BY (payload->>'id') NULLS LAST, topic",
    )
    .fetch_all(&schema.pool)
    .await
    .unwrap_or_default()
}

async fn wait_for_log(
    schema: &TestSchema,
    count: usize,
) -> Vec<(String, Option<String>, Option<String>)> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let rows = log(schema).await;
        if rows.len() >= count || tokio::time::Instant::now() >= deadline {
            return rows;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_service_and_consumer_act_once_per_event() {
    let schema = TestSchema::new(10).await;
    let stream = format!("hare_t_orders_{}", uuid_suffix());
    let metrics = order_service::install_metrics().unwrap();
    let (app, relay) = order_service::setup(schema.pool.clone(), &redis_url(), &stream, metrics)
        .await
        .unwrap();
    relay.start().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let stop = CancellationToken::new();
    let consumer = tokio::spawn(order_consumer::run(
        schema.pool.clone(),
        &*Box::leak(redis_url().into_boxed_str()),
        Box::leak(stream.clone().into_boxed_str()),
        stop.clone(),
    ));

    let http = reqwest::Client::new();
    let created = http
        .post(format!("{base}/orders"))
        .json(&json!({"customer": "ann", "total": "99.90"}))
        .send()
        .await
        .unwrap();
    let status = created.status();
    let body = created.text().await.unwrap();
    assert_eq!(status, 201, "{body}");
    let id = serde_json::from_str::<serde_json::Value>(&body).unwrap()["id"]
        .as_i64()
        .unwrap();
    let updated = http
        .patch(format!("{base}/orders/{id}"))
        .header("x-user", "bob")
        .json(&json!({"status": "paid"}))
        .send()
        .await
        .unwrap();
    assert_eq!(updated.status(), 204);

    let key = Some(format!("order:{id}"));
    let expected = vec![
        ("orders.created".to_owned(), key.clone(), None),
        (
            "orders.updated".to_owned(),
            key.clone(),
            Some("bob".to_owned()),
        ),
    ];
    let mut rows = wait_for_log(&schema, 2).await;
    rows.sort();
    assert_eq!(
        rows, expected,
        "one effect per event, the captured one by its author"
    );

    // The group re-reads the whole stream: the inbox keeps the effect at one per event.
    let mut redis = redis::Client::open(redis_url().as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("XGROUP")
        .arg("SETID")
        .arg(&stream)
        .arg(order_consumer::GROUP)
        .arg("0")
        .query_async(&mut redis)
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        // Every entry read again and acknowledged: nothing pending, nothing left to read.
        let info: Vec<std::collections::HashMap<String, redis::Value>> = redis::cmd("XINFO")
            .arg("GROUPS")
            .arg(&stream)
            .query_async(&mut redis)
            .await
            .unwrap();
        let done = info.iter().any(|g| {
            g.get("lag") == Some(&redis::Value::Int(0))
                && g.get("pending") == Some(&redis::Value::Int(0))
        });
        if done {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the group did not re-read the stream: {info:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut rows = log(&schema).await;
    rows.sort();
    assert_eq!(rows, expected, "no second effect for a re-read event");

    // The dashboard is mounted in the same app.
    let journal = http.get(format!("{base}/outbox")).send().await.unwrap();
    assert_eq!(journal.status(), 200);

    // `/metrics` (and the dashboard's) answers with the relay's deliveries of this stream's events.
    for path in ["/metrics", "/outbox/metrics"] {
        let answer = http.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(answer.status(), 200, "{path}");
        let text = answer.text().await.unwrap();
        let delivered = text
            .lines()
            .find(|l| {
                l.starts_with("hare_outbox_delivered_total{")
                    && l.contains("topic=\"orders.created\"")
            })
            .unwrap_or_else(|| panic!("no hare_outbox_delivered_total at {path}:\n{text}"));
        let count: f64 = delivered.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(count >= 1.0, "{delivered}");
    }

    stop.cancel();
    consumer.await.unwrap().unwrap();
    relay.stop().await.unwrap();
    server.abort();
    let _: i64 = redis::cmd("DEL")
        .arg(&stream)
        .query_async(&mut redis)
        .await
        .unwrap();
}

fn uuid_suffix() -> String {
    format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}
