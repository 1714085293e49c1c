//! Wake-up benchmarks on PostgreSQL, in one run:
//!
//! 1. writer throughput: 16 concurrent writers, each transaction one business UPDATE plus one
//!    enqueue, with no wake-up, with NOTIFY inside each transaction, and with the coalesced
//!    after-commit notifier;
//! 2. latency commit → delivered (Rust-function delivery, poll interval 5 s) at 100 and 1,000
//!    events/s for the in-process and the LISTEN/NOTIFY wake-ups; p50 and p99 of the steady
//!    state (the first second of events, while the relay opens its connections and prepares its
//!    statements, is not counted). The relay has a pool of its own, as in a deployment;
//! 3. a burst on one ordering key: how long
//!    after the last commit the burst's last event is delivered, LISTEN/NOTIFY after commit, poll
//!    interval 5 s, the relay idle beforehand; 40 transactions of one event each committed back
//!    to back, and one transaction of 40 events.
//!
//! ```text
//! cargo run --release -p hare-outbox-bench --bin wakeup
//! cargo run --release -p hare-outbox-bench --bin wakeup -- --parts burst
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Parser;
use hare_outbox::postgres::{ListenNotifyWakeup, NotifyMode, PgBackend};
use hare_outbox::{
    FnDelivery, InProcessWakeup, Outbox, OutboxEvent, OutboxMessage, OutboxRelay, OutboxTable,
    RelayConfig,
};
use serde_json::json;
use sqlx::postgres::{PgPool, PgPoolOptions};

#[derive(Parser)]
struct Cli {
    /// PostgreSQL server; a scratch schema is created and dropped.
    #[arg(
        long,
        env = "HARE_OUTBOX_BENCH_PG_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/test"
    )]
    database_url: String,
    /// Concurrent writers for the throughput part.
    #[arg(long, default_value_t = 16)]
    writers: usize,
    /// Seconds each throughput mode runs.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Seconds each latency cell runs.
    #[arg(long, default_value_t = 5.0)]
    latency_seconds: f64,
    /// Redis server of the Redis pub/sub wake-up.
    #[arg(
        long,
        env = "HARE_OUTBOX_TEST_REDIS_URL",
        default_value = "redis://127.0.0.1:6379/0"
    )]
    redis_url: String,
    /// NATS server of the NATS wake-up.
    #[arg(
        long,
        env = "HARE_OUTBOX_TEST_NATS_URL",
        default_value = "nats://127.0.0.1:4222"
    )]
    nats_url: String,
    /// RabbitMQ server of the fanout-exchange wake-up.
    #[arg(
        long,
        env = "HARE_OUTBOX_TEST_RABBITMQ_URL",
        default_value = "amqp://guest:guest@127.0.0.1:5672/%2f"
    )]
    rabbitmq_url: String,
    /// Parts to run, comma-separated: `throughput`, `latency`, `burst`.
    #[arg(long, value_delimiter = ',', default_values_t = ["throughput".to_owned(), "latency".to_owned(), "burst".to_owned()])]
    parts: Vec<String>,
    /// Events per burst (the `burst` part).
    #[arg(long, default_value_t = 40)]
    burst_events: usize,
    /// Bursts per shape (the `burst` part).
    #[arg(long, default_value_t = 5)]
    bursts: usize,
    /// Kafka bootstrap servers of the signal-topic wake-up.
    #[arg(
        long,
        env = "HARE_OUTBOX_TEST_KAFKA_BOOTSTRAP",
        default_value = "127.0.0.1:19092"
    )]
    kafka_bootstrap: String,
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    None,
    InProcess,
    NotifyInTransaction,
    NotifyAfterCommit,
    Redis,
    Nats,
    RabbitMq,
    Kafka,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::None => "no wake-up",
            Kind::InProcess => "in-process",
            Kind::NotifyInTransaction => "NOTIFY in the transaction",
            Kind::NotifyAfterCommit => "NOTIFY after commit, coalesced",
            Kind::Redis => "Redis pub/sub",
            Kind::Nats => "NATS core subject",
            Kind::RabbitMq => "RabbitMQ fanout exchange",
            Kind::Kafka => "Kafka signal topic",
        }
    }
}

async fn scratch(url: &str, connections: u32) -> Result<(PgPool, String)> {
    let schema = format!("hare_bench_{:08x}", uuid::Uuid::new_v4().as_u128() as u32);
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .context("connecting")?;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA \"{schema}\"")))
        .execute(&admin)
        .await?;
    admin.close().await;
    let pool = pool_in(url, &schema, connections).await?;
    Ok((pool, schema))
}

/// A pool whose connections work in `schema`.
async fn pool_in(url: &str, schema: &str, connections: u32) -> Result<PgPool> {
    let path = schema.to_owned();
    let pool = PgPoolOptions::new()
        .max_connections(connections)
        .after_connect(move |conn, _| {
            let sql = format!("SET search_path TO \"{path}\"");
            Box::pin(async move {
                sqlx::query(sqlx::AssertSqlSafe(sql)).execute(conn).await?;
                Ok(())
            })
        })
        .connect(url)
        .await?;
    Ok(pool)
}

fn outbox(
    cli: &Cli,
    pool: &PgPool,
    name: &str,
    kind: Kind,
    channel: &str,
) -> Result<Outbox<PgBackend>> {
    let outbox = Outbox::new(PgBackend::new(pool.clone()), OutboxTable::parse(name)?);
    Ok(match kind {
        Kind::None => outbox,
        Kind::InProcess => outbox.with_wakeup(InProcessWakeup::new())?,
        Kind::NotifyInTransaction => outbox.with_wakeup(
            ListenNotifyWakeup::new(pool.clone())
                .with_channel(channel)?
                .with_mode(NotifyMode::InTransaction),
        )?,
        Kind::NotifyAfterCommit => {
            outbox.with_wakeup(ListenNotifyWakeup::new(pool.clone()).with_channel(channel)?)?
        }
        Kind::Redis => outbox.with_wakeup(
            hare_outbox::redis::RedisWakeup::new(&cli.redis_url)?.with_channel(channel)?,
        )?,
        Kind::Nats => outbox.with_wakeup(
            hare_outbox::nats::NatsWakeup::new(&cli.nats_url)?.with_subject(channel)?,
        )?,
        Kind::RabbitMq => outbox.with_wakeup(
            hare_outbox::rabbitmq::RabbitMqWakeup::new(&cli.rabbitmq_url)?
                .with_exchange(channel)?,
        )?,
        Kind::Kafka => outbox.with_wakeup(
            hare_outbox::kafka::KafkaWakeup::new(&cli.kafka_bootstrap)?.with_topic(channel)?,
        )?,
    })
}

/// One writer transaction: a business UPDATE and one event, through the wrapper that signals
/// after commit (it sends nothing for wake-ups that ride the transaction or when there is none).
async fn write_one(outbox: &Outbox<PgBackend>, writer: usize, n: u64) -> Result<()> {
    let mut tx = outbox.begin().await?;
    sqlx::query("UPDATE accounts SET balance = balance + 1 WHERE id = $1")
        .bind(writer as i64)
        .execute(&mut *tx)
        .await?;
    tx.enqueue(
        OutboxMessage::new("accounts.updated", json!({"id": writer, "n": n}))
            .ordering_key(format!("account:{writer}")),
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

async fn throughput(cli: &Cli) -> Result<()> {
    println!(
        "writer throughput: {} writers, {:.0} s per mode, one UPDATE + one enqueue per transaction",
        cli.writers, cli.seconds
    );
    println!("{:<34} {:>12} {:>12}", "mode", "tx/s", "× none");
    let mut base = None;
    for kind in [
        Kind::None,
        Kind::NotifyInTransaction,
        Kind::NotifyAfterCommit,
    ] {
        let (pool, schema) = scratch(&cli.database_url, cli.writers as u32 + 4).await?;
        sqlx::query("CREATE TABLE accounts (id bigint PRIMARY KEY, balance bigint NOT NULL)")
            .execute(&pool)
            .await?;
        sqlx::query("INSERT INTO accounts SELECT g, 0 FROM generate_series(0, 63) g")
            .execute(&pool)
            .await?;
        let outbox = outbox(cli, &pool, "outbox", kind, &schema)?;
        outbox.migrate().await?;
        // A listener is connected, as in production.
        let _subscription = match outbox.wakeup() {
            Some(w) => Some(w.subscribe().await?),
            None => None,
        };
        let done = Arc::new(AtomicU64::new(0));
        let deadline = Instant::now() + Duration::from_secs_f64(cli.seconds);
        let mut tasks = Vec::new();
        for writer in 0..cli.writers {
            let (outbox, done) = (outbox.clone(), done.clone());
            tasks.push(tokio::spawn(async move {
                let mut n = 0;
                while Instant::now() < deadline {
                    write_one(&outbox, writer, n).await?;
                    n += 1;
                    done.fetch_add(1, Ordering::Relaxed);
                }
                anyhow::Ok(())
            }));
        }
        for t in tasks {
            t.await??;
        }
        let rate = done.load(Ordering::Relaxed) as f64 / cli.seconds;
        let base = *base.get_or_insert(rate);
        println!("{:<34} {:>12.0} {:>12.2}", kind.label(), rate, rate / base);
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA \"{schema}\" CASCADE"
        )))
        .execute(&pool)
        .await?;
        pool.close().await;
    }
    Ok(())
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn latency(cli: &Cli) -> Result<()> {
    println!();
    println!(
        "latency commit → delivered, poll interval 5 s, {:.0} s per cell after 1 s of warm-up",
        cli.latency_seconds
    );
    println!(
        "{:<34} {:>8} {:>8} {:>10} {:>10}",
        "wake-up", "ev/s", "events", "p50 ms", "p99 ms"
    );
    for kind in [
        Kind::InProcess,
        Kind::NotifyAfterCommit,
        Kind::NotifyInTransaction,
        Kind::Redis,
        Kind::Nats,
        Kind::RabbitMq,
        Kind::Kafka,
    ] {
        for rate in [100u64, 1000] {
            let (pool, schema) = scratch(&cli.database_url, 12).await?;
            sqlx::query("CREATE TABLE accounts (id bigint PRIMARY KEY, balance bigint NOT NULL)")
                .execute(&pool)
                .await?;
            sqlx::query("INSERT INTO accounts SELECT g, 0 FROM generate_series(0, 63) g")
                .execute(&pool)
                .await?;
            let outbox = outbox(cli, &pool, "outbox", kind, &schema)?;
            outbox.migrate().await?;
            let committed: Arc<Mutex<HashMap<i64, Instant>>> = Arc::default();
            // Delivery times by event number; latencies are computed once both times are known,
            // since a delivery can beat the writer's record of its commit.
            let delivered: Arc<Mutex<HashMap<i64, Instant>>> = Arc::default();
            // The first second of events warms the relay up (its pool's connections, prepared
            // statements) and is not counted: the cells measure the steady state.
            let warmup = rate as i64;
            let d = delivered.clone();
            // The relay has a pool of its own, as in a deployment: behind the writers' pool
            // queue its lease would wait for a connection as long as a writer does.
            let relay_pool = pool_in(&cli.database_url, &schema, 2).await?;
            let mut relay_outbox =
                Outbox::new(PgBackend::new(relay_pool.clone()), outbox.table().clone());
            if let Some(wakeup) = outbox.wakeup() {
                relay_outbox = relay_outbox.with_shared_wakeup(wakeup.clone())?;
            }
            let relay = OutboxRelay::new(
                relay_outbox,
                FnDelivery::new(move |e: OutboxEvent| {
                    let d = d.clone();
                    async move {
                        let now = Instant::now();
                        let n = e.payload["n"].as_i64().unwrap_or(-1);
                        if n >= warmup
                            && let Ok(mut d) = d.lock()
                        {
                            // A redelivery keeps the first time.
                            d.entry(n).or_insert(now);
                        }
                        Ok(())
                    }
                }),
                RelayConfig::default()
                    .with_poll_interval(Duration::from_secs(5))
                    .with_backlog_interval(Duration::ZERO),
            )?;
            relay.start()?;
            tokio::time::sleep(Duration::from_millis(300)).await;
            let measured = (rate as f64 * cli.latency_seconds) as i64;
            let total = warmup + measured;
            let period = Duration::from_secs_f64(1.0 / rate as f64);
            let mut ticker = tokio::time::interval(period);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            let mut tasks = tokio::task::JoinSet::new();
            for n in 0..total {
                ticker.tick().await;
                let (outbox, committed) = (outbox.clone(), committed.clone());
                tasks.spawn(async move {
                    let mut tx = outbox.begin().await?;
                    sqlx::query("UPDATE accounts SET balance = balance + 1 WHERE id = $1")
                        .bind(n % 64)
                        .execute(&mut *tx)
                        .await?;
                    tx.enqueue(OutboxMessage::new("t", json!({"n": n}))).await?;
                    tx.commit().await?;
                    committed
                        .lock()
                        .map_err(|_| anyhow::anyhow!("poisoned"))?
                        .insert(n, Instant::now());
                    anyhow::Ok(())
                });
                while let Some(r) = tasks.try_join_next() {
                    r??;
                }
            }
            while let Some(r) = tasks.join_next().await {
                r??;
            }
            let wait_until = Instant::now() + Duration::from_secs(15);
            while delivered.lock().map(|d| d.len()).unwrap_or(0) < measured as usize
                && Instant::now() < wait_until
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            relay.stop().await?;
            relay_pool.close().await;
            // The commit time is recorded right after COMMIT returns (and the after-commit
            // signal is sent); a delivery that beats that record counts as 0.
            let mut l: Vec<f64> = {
                let committed = committed.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
                let delivered = delivered.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
                delivered
                    .iter()
                    .filter_map(|(n, at)| {
                        let from = committed.get(n)?;
                        Some(at.saturating_duration_since(*from).as_secs_f64() * 1000.0)
                    })
                    .collect()
            };
            l.sort_by(f64::total_cmp);
            println!(
                "{:<34} {:>8} {:>8} {:>10.1} {:>10.1}",
                kind.label(),
                rate,
                l.len(),
                percentile(&l, 0.5),
                percentile(&l, 0.99)
            );
            if let Some(wakeup) = outbox.wakeup() {
                wakeup.close().await?;
            }
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "DROP SCHEMA \"{schema}\" CASCADE"
            )))
            .execute(&pool)
            .await?;
            pool.close().await;
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    for part in &cli.parts {
        match part.as_str() {
            "throughput" => throughput(&cli).await?,
            "latency" => latency(&cli).await?,
            "burst" => burst(&cli).await?,
            other => anyhow::bail!("unknown part {other:?}: expected throughput, latency or burst"),
        }
    }
    Ok(())
}

/// Part 3: bursts of `cli.burst_events` events on one key; prints the median and the worst time
/// from the burst's last commit to its last delivery, in milliseconds.
async fn burst(cli: &Cli) -> Result<()> {
    let (pool, schema) = scratch(&cli.database_url, 4).await?;
    let writer = outbox(cli, &pool, "outbox", Kind::NotifyAfterCommit, &schema)?;
    writer.migrate().await?;
    let relay_pool = pool_in(&cli.database_url, &schema, 4).await?;
    let mut relay_outbox = Outbox::new(PgBackend::new(relay_pool.clone()), writer.table().clone());
    if let Some(wakeup) = writer.wakeup() {
        relay_outbox = relay_outbox.with_shared_wakeup(wakeup.clone())?;
    }
    let delivered: Arc<Mutex<Vec<(i64, Instant)>>> = Arc::default();
    let sink = delivered.clone();
    let relay = OutboxRelay::new(
        relay_outbox,
        FnDelivery::new(move |e: OutboxEvent| {
            let sink = sink.clone();
            async move {
                let n = e.payload["n"].as_i64().unwrap_or(-1);
                sink.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((n, Instant::now()));
                Ok(())
            }
        }),
        RelayConfig::default()
            .with_poll_interval(Duration::from_secs(5))
            .with_backlog_interval(Duration::ZERO),
    )?;
    relay.start()?;
    // Idle: the relay has subscribed and its first poll found nothing.
    until(Duration::from_secs(10), || relay.stats().polls >= 1).await?;

    println!();
    println!(
        "burst on one key: {} events, LISTEN/NOTIFY after commit, poll interval 5 s, {} bursts per shape",
        cli.burst_events, cli.bursts
    );
    println!("{:<40} {:>12} {:>12}", "shape", "median ms", "worst ms");
    let mut n: i64 = 0;
    for one_transaction in [false, true] {
        let mut lags = Vec::new();
        for _ in 0..cli.bursts {
            let mut tx = writer.begin().await?;
            for i in 0..cli.burst_events {
                if i > 0 && !one_transaction {
                    tx.commit().await?;
                    tx = writer.begin().await?;
                }
                tx.enqueue(
                    OutboxMessage::new("doc.updated", json!({"n": n}))
                        .ordering_key("sales_orders:22"),
                )
                .await?;
                n += 1;
            }
            tx.commit().await?;
            let committed = Instant::now();
            let last = n - 1;
            let last_delivery = || {
                delivered
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .iter()
                    .find(|(m, _)| *m == last)
                    .map(|(_, at)| *at)
            };
            until(Duration::from_secs(30), || last_delivery().is_some()).await?;
            let done_at = last_delivery().unwrap_or(committed);
            lags.push(done_at.saturating_duration_since(committed).as_secs_f64() * 1000.0);
            // Idle again before the next burst: no poll for 200 ms (after the burst's polls, one
            // found nothing and the relay waits for a signal or its 5 s interval).
            let mut polls = relay.stats().polls;
            loop {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let now = relay.stats().polls;
                if now == polls {
                    break;
                }
                polls = now;
            }
        }
        lags.sort_by(f64::total_cmp);
        let label = if one_transaction {
            "one transaction of the whole burst"
        } else {
            "one transaction per event, back to back"
        };
        println!(
            "{label:<40} {:>12.1} {:>12.1}",
            percentile(&lags, 0.5),
            percentile(&lags, 1.0)
        );
    }
    relay.stop().await?;
    let order: Vec<i64> = delivered
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|(m, _)| *m)
        .collect();
    anyhow::ensure!(
        order.windows(2).all(|w| w[0] < w[1]),
        "the bursts were not delivered in order"
    );
    relay_pool.close().await;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA \"{schema}\" CASCADE"
    )))
    .execute(&pool)
    .await?;
    pool.close().await;
    Ok(())
}

/// Polls `done` every millisecond until it holds; an error after `timeout`.
async fn until(timeout: Duration, done: impl Fn() -> bool) -> Result<()> {
    let deadline = Instant::now() + timeout;
    while !done() {
        anyhow::ensure!(Instant::now() < deadline, "not done within {timeout:?}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(())
}
