//! Requests a relay sends to a dead webhook endpoint, per minute.
//!
//! A loopback HTTP server answers `503 Service Unavailable` to every request and counts them.
//! `--keys` ordering keys with `--per-key` events each wait in a SQLite outbox; a relay with the
//! default options (but `--max-attempts` attempts) delivers to the server for `--seconds`. The
//! run prints the requests the server got, the requests per minute, how many events were
//! dead-lettered and the most attempts one event used.
//!
//! ```text
//! cargo run --release -p hare-outbox-bench --bin dead_endpoint -- --max-attempts 5
//! cargo run --release -p hare-outbox-bench --bin dead_endpoint -- --max-attempts 1000
//! cargo run --release -p hare-outbox-bench --bin dead_endpoint -- --no-breaker
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Parser;
use hare_outbox::sqlite::SqliteBackend;
use hare_outbox::webhook::WebhookDelivery;
use hare_outbox::{Outbox, OutboxMessage, OutboxRelay, OutboxTable, RelayConfig};
use serde_json::json;

#[derive(Parser)]
#[command(about = "Requests a relay sends to a dead webhook endpoint, per minute")]
struct Cli {
    /// Ordering keys whose events wait.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    keys: u32,
    /// Events per key.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    per_key: u32,
    /// How long the endpoint stays dead while the relay runs, in seconds.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    seconds: u64,
    /// The relay's max_delivery_attempts (5 is the default).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(i32).range(1..))]
    max_attempts: i32,
    /// Turn the relay's circuit breaker off (every failure counts an attempt, as before it
    /// existed).
    #[arg(long)]
    no_breaker: bool,
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    let dir =
        std::env::temp_dir().join(format!("hare-outbox-dead-endpoint-{}", std::process::id()));
    std::fs::create_dir_all(&dir).context("creating the scratch directory")?;
    let result = run(&cli, &dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn run(cli: &Cli, dir: &std::path::Path) -> Result<()> {
    let requests = Arc::new(AtomicU64::new(0));
    let counted = requests.clone();
    let app = axum::Router::new().fallback(move || {
        let counted = counted.clone();
        async move {
            counted.fetch_add(1, Ordering::Relaxed);
            (axum::http::StatusCode::SERVICE_UNAVAILABLE, "down")
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });

    let url = format!("sqlite://{}", dir.join("outbox.db").display());
    let pool = hare_outbox::sqlite::connect(&url).await?;
    let outbox = Outbox::new(SqliteBackend::new(pool.clone()), OutboxTable::default());
    outbox.migrate().await?;
    let mut tx = outbox.begin().await?;
    for n in 0..cli.per_key {
        for key in 0..cli.keys {
            tx.enqueue(
                OutboxMessage::new("orders.created", json!({"key": key, "n": n}))
                    .ordering_key(format!("k{key}")),
            )
            .await?;
        }
    }
    tx.commit().await?;

    let mut config = RelayConfig::default().with_max_delivery_attempts(cli.max_attempts);
    // breaker: begin
    if cli.no_breaker {
        config = config.with_breaker(hare_outbox::BreakerConfig::disabled());
    }
    // breaker: end
    let relay = OutboxRelay::new(
        outbox.clone(),
        WebhookDelivery::new(format!("http://{addr}/hook"))?,
        config,
    )?;
    let started = Instant::now();
    relay.start()?;
    tokio::time::sleep(Duration::from_secs(cli.seconds)).await;
    let sent = requests.load(Ordering::Relaxed);
    let elapsed = started.elapsed();
    relay.stop().await?;
    let (dead, most): (i64, i64) = sqlx::query_as(
        "SELECT coalesce(sum(dead_lettered_at IS NOT NULL), 0), coalesce(max(attempts), 0) FROM hare_outbox",
    )
    .fetch_one(&pool)
    .await?;
    println!(
        "keys {} × {} events, max_attempts {}, {}: {sent} requests in {:.1} s = {:.1} per minute; {dead} dead letters; most attempts of one event {most}",
        cli.keys,
        cli.per_key,
        cli.max_attempts,
        if cli.no_breaker {
            "no breaker"
        } else {
            "breaker on (default)"
        },
        elapsed.as_secs_f64(),
        sent as f64 * 60.0 / elapsed.as_secs_f64()
    );
    pool.close().await;
    Ok(())
}
