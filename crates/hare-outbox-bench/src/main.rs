//! `hare-outbox-bench`: measures the relay's drain rate on PostgreSQL against the floor of the
//! same lease-and-mark statements run by hand, in one run, and prints ratios.
//!
//! ```text
//! cargo run --release -p hare-outbox-bench -- drain --events 20000
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use hare_outbox::backend::{EventLeaseParams, EventMarkDeliveredParams};
use hare_outbox::postgres::PgBackend;
use hare_outbox::webhook::WebhookDelivery;
use hare_outbox::{
    Backend, Delivery, FnDelivery, JsonLinesDelivery, Outbox, OutboxEvent, OutboxRelay,
    OutboxTable, RelayConfig,
};
use sqlx::postgres::{PgPool, PgPoolOptions};

#[derive(Parser)]
#[command(about = "hare-outbox benchmarks")]
struct Cli {
    /// PostgreSQL server; a scratch schema is created and dropped.
    #[arg(
        long,
        env = "HARE_OUTBOX_BENCH_PG_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/test"
    )]
    database_url: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Drain a backlog: hand-written lease+mark floor, relay with a no-op delivery, relay to a
    /// loopback webhook receiver, relay to JSON lines written to /dev/null.
    Drain {
        /// Events in the backlog of each run.
        #[arg(long, default_value_t = 20_000)]
        events: i64,
        /// Distinct ordering keys (0 = no keys).
        #[arg(long, default_value_t = 1_000)]
        keys: i64,
        /// Relay batch size.
        #[arg(long, default_value_t = 100)]
        batch: usize,
    },
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Drain {
            events,
            keys,
            batch,
        } => drain(&cli.database_url, events, keys, batch).await,
    }
}

struct Scratch {
    pool: PgPool,
    schema: String,
}

impl Scratch {
    async fn new(url: &str) -> Result<Scratch> {
        let schema = format!("hare_bench_{:08x}", uuid::Uuid::new_v4().as_u128() as u32);
        let admin = PgPoolOptions::new()
            .max_connections(1)
            .connect(url)
            .await
            .context("connecting to PostgreSQL")?;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA \"{schema}\"")))
            .execute(&admin)
            .await?;
        admin.close().await;
        let path = schema.clone();
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .after_connect(move |conn, _| {
                let sql = format!("SET search_path TO \"{path}\"");
                Box::pin(async move {
                    sqlx::query(sqlx::AssertSqlSafe(sql)).execute(conn).await?;
                    Ok(())
                })
            })
            .connect(url)
            .await?;
        Ok(Scratch { pool, schema })
    }

    /// A fresh outbox table `name` with `events` pending events over `keys` ordering keys, written
    /// with one INSERT … SELECT (setup, not measured).
    async fn backlog(&self, name: &str, events: i64, keys: i64) -> Result<Outbox<PgBackend>> {
        let outbox = Outbox::new(PgBackend::new(self.pool.clone()), OutboxTable::parse(name)?);
        outbox.migrate().await?;
        let key = if keys > 0 {
            format!("'k' || (g % {keys})")
        } else {
            "NULL".to_owned()
        };
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO \"{name}\" (id, topic, payload, headers, ordering_key) \
             SELECT gen_random_uuid(), 'bench.event', jsonb_build_object('n', g, 'text', 'lorem ipsum dolor sit amet'), \
                    '{{\"author\": \"bench\"}}'::jsonb, {key} FROM generate_series(1, {events}) g"
        )))
        .execute(&self.pool)
        .await?;
        sqlx::query(sqlx::AssertSqlSafe(format!("VACUUM ANALYZE \"{name}\"")))
            .execute(&self.pool)
            .await?;
        Ok(outbox)
    }

    async fn drop(self) {
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA \"{}\" CASCADE",
            self.schema
        )))
        .execute(&self.pool)
        .await;
        self.pool.close().await;
    }
}

/// The floor: the backend's own lease and mark statements in a loop, no delivery.
async fn floor(outbox: &Outbox<PgBackend>, batch: usize) -> Result<u64> {
    let mut done = 0u64;
    loop {
        let now = chrono_now();
        let params = EventLeaseParams::new(
            now,
            now + chrono::Duration::seconds(60),
            "floor".into(),
            batch as i64,
        );
        let events = outbox
            .backend()
            .event_lease(outbox.table(), &params)
            .await?;
        if events.is_empty() {
            return Ok(done);
        }
        let sequences = events.iter().map(|e| e.sequence).collect();
        outbox
            .backend()
            .event_mark_delivered(
                outbox.table(),
                &EventMarkDeliveredParams::new(sequences, chrono_now()),
            )
            .await?;
        done += events.len() as u64;
    }
}

fn chrono_now() -> chrono::DateTime<chrono::Utc> {
    chrono::Utc::now()
}

/// Runs a relay until the backlog is empty.
async fn relay_drain(
    outbox: &Outbox<PgBackend>,
    delivery: impl Delivery,
    batch: usize,
) -> Result<u64> {
    let relay = OutboxRelay::new(
        outbox.clone(),
        delivery,
        RelayConfig::default()
            .with_batch_size(batch)
            .with_poll_interval(Duration::from_millis(50)),
    )?;
    let mut done = 0u64;
    loop {
        let outcome = relay.poll_once().await?;
        if outcome.leased == 0 {
            return Ok(done);
        }
        done += outcome.delivered as u64;
    }
}

async fn receiver() -> Result<(String, Arc<AtomicU64>)> {
    let hits = Arc::new(AtomicU64::new(0));
    let counter = hits.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |_body: axum::body::Bytes| {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::Relaxed);
                axum::http::StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hook", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((url, hits))
}

async fn drain(url: &str, events: i64, keys: i64, batch: usize) -> Result<()> {
    let scratch = Scratch::new(url).await?;
    println!(
        "drain: {events} events over {keys} ordering keys, batch {batch}, PostgreSQL at {url}"
    );
    let mut rows: Vec<(&str, f64)> = Vec::new();

    let outbox = scratch.backlog("floor", events, keys).await?;
    let start = Instant::now();
    let n = floor(&outbox, batch).await?;
    rows.push((
        "hand-written lease + mark (floor)",
        n as f64 / start.elapsed().as_secs_f64(),
    ));

    let outbox = scratch.backlog("noop", events, keys).await?;
    let start = Instant::now();
    let n = relay_drain(
        &outbox,
        FnDelivery::new(|_e: OutboxEvent| async { Ok(()) }),
        batch,
    )
    .await?;
    rows.push((
        "relay, no-op delivery",
        n as f64 / start.elapsed().as_secs_f64(),
    ));

    let (hook, hits) = receiver().await?;
    let outbox = scratch.backlog("webhook", events, keys).await?;
    let start = Instant::now();
    let n = relay_drain(&outbox, WebhookDelivery::new(hook)?, batch).await?;
    rows.push((
        "relay → webhook (loopback, concurrency 10)",
        n as f64 / start.elapsed().as_secs_f64(),
    ));
    anyhow::ensure!(
        hits.load(Ordering::Relaxed) == n,
        "receiver saw {} of {n}",
        hits.load(Ordering::Relaxed)
    );

    let outbox = scratch.backlog("jsonl", events, keys).await?;
    let sink = tokio::fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .await?;
    let start = Instant::now();
    let n = relay_drain(&outbox, JsonLinesDelivery::new(sink), batch).await?;
    rows.push((
        "relay → JSON lines (stdout to /dev/null)",
        n as f64 / start.elapsed().as_secs_f64(),
    ));

    let floor_rate = rows[0].1;
    println!("{:<46} {:>12} {:>9}", "run", "events/s", "× floor");
    for (name, rate) in rows {
        println!("{name:<46} {rate:>12.0} {:>9.2}", rate / floor_rate);
    }
    scratch.drop().await;
    Ok(())
}
