//! How long the dashboard takes to answer on a large journal. Ignored by default because filling
//! the table takes minutes; run it without the test runner's time limit:
//!
//! ```sh
//! cargo test -p hare-outbox-dashboard --all-features --test page_time -- --ignored --nocapture
//! ```
//!
//! `HARE_OUTBOX_DASHBOARD_ROWS` sets the number of events (default 1,000,000). Prints the median
//! of 5 requests per URL, measured from the client over loopback.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::{client, pg_outbox, serve, sqlite_outbox};
use hare_outbox_core::{JournalBackend, Outbox, OutboxMessage};
use hare_outbox_dashboard::DashboardOptions;
use serde_json::json;

const TOPICS: [&str; 4] = [
    "doc.updated",
    "doc.inserted",
    "orders.created",
    "billing.invoice.sent",
];
const AUTHORS: [&str; 5] = ["ann", "bob", "carol", "dave", "erin"];

fn rows() -> u64 {
    std::env::var("HARE_OUTBOX_DASHBOARD_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000)
}

/// Writes `n` events in transactions of 2000.
async fn fill<B: JournalBackend>(outbox: &Outbox<B>, n: u64) {
    let started = Instant::now();
    let mut i = 0u64;
    while i < n {
        let mut tx = outbox.begin().await.unwrap();
        let batch: Vec<OutboxMessage> = (i..(i + 2000).min(n))
            .map(|k| {
                OutboxMessage::new(
                    TOPICS[(k % 4) as usize],
                    json!({"model": "sales_orders", "pk": k % 50_000, "changed": ["status"],
                           "before": {"status": "confirmed"}, "after": {"status": "shipped"}}),
                )
                .header("author", AUTHORS[(k % 5) as usize])
            })
            .collect();
        i += batch.len() as u64;
        tx.enqueue_many(batch).await.unwrap();
        tx.commit().await.unwrap();
    }
    println!("filled {n} events in {:.1?}", started.elapsed());
}

async fn median(url: &str) -> (Duration, usize) {
    let http = client();
    let mut times = Vec::new();
    let mut rows = 0;
    for _ in 0..5 {
        let started = Instant::now();
        let response = http.get(url).send().await.unwrap();
        assert_eq!(response.status().as_u16(), 200, "{url}");
        let body = response.text().await.unwrap();
        times.push(started.elapsed());
        rows = match serde_json::from_str::<serde_json::Value>(&body) {
            Ok(json) => json["events"].as_array().map_or(0, Vec::len),
            Err(_) => body.matches("<tr data-sequence=").count(),
        };
    }
    times.sort();
    (times[2], rows)
}

async fn measure<B: JournalBackend>(name: &str, outbox: Outbox<B>, mark: impl AsyncFnOnce()) {
    let n = rows();
    fill(&outbox, n).await;
    mark().await;
    let served = serve(&outbox, DashboardOptions::new()).await;
    let middle = n / 2;
    for path in [
        "/api/events".to_owned(),
        format!("/api/events?before={middle}"),
        "/api/events?before=100".to_owned(),
        format!("/api/events?after={}", n - 10),
        "/api/events?topic=billing.*".to_owned(),
        format!("/api/events?topic=billing.*&before={middle}"),
        "/api/events?status=dead".to_owned(),
        "/api/events?author=carol".to_owned(),
        "/api/events?object=sales_orders%20%23777".to_owned(),
        "/api/backlog".to_owned(),
        "/api/timeline".to_owned(),
        "/".to_owned(),
    ] {
        let (time, rows) = median(&served.url(&path)).await;
        println!("{name} {n} rows: GET {path:<48} {time:>10.1?}  ({rows} events)");
    }
    served.stop().await;
}

#[tokio::test]
#[ignore = "fills a million rows; run on purpose"]
async fn page_time_sqlite() {
    let (db, outbox) = sqlite_outbox().await;
    let pool = db.pool.clone();
    measure("sqlite", outbox, async move || {
        // Nine in ten published, one in a thousand dead.
        sqlx::query("UPDATE hare_outbox SET published_at = created_at WHERE sequence % 10 <> 0")
            .execute(&pool)
            .await
            .unwrap();
        sqlx::query(
            "UPDATE hare_outbox SET dead_lettered_at = created_at, attempts = 5, \
             last_error = 'refused' WHERE sequence % 1000 = 0",
        )
        .execute(&pool)
        .await
        .unwrap();
    })
    .await;
}

#[tokio::test]
#[ignore = "fills a million rows; run on purpose"]
async fn page_time_postgres() {
    let (schema, outbox) = pg_outbox().await;
    let pool = schema.pool.clone();
    measure("postgres", outbox, async move || {
        sqlx::query("UPDATE hare_outbox SET published_at = created_at WHERE sequence % 10 <> 0")
            .execute(&pool)
            .await
            .unwrap();
        sqlx::query(
            "UPDATE hare_outbox SET dead_lettered_at = created_at, attempts = 5, \
             last_error = 'refused' WHERE sequence % 1000 = 0",
        )
        .execute(&pool)
        .await
        .unwrap();
        sqlx::query("VACUUM ANALYZE hare_outbox")
            .execute(&pool)
            .await
            .unwrap();
    })
    .await;
    schema.drop_schema().await;
}
