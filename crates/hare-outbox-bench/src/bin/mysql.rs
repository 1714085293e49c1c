//! The MySQL / MariaDB benchmarks, in one run, as the PostgreSQL ones:
//!
//! 1. ids: 100,000 UUID v7 ids inserted into a `BINARY(16)` and a `CHAR(36)` unique column, in
//!    batches of 1,000 — time and index size (why the outbox's id is `BINARY(16)`);
//! 2. enqueue: a business transaction (one UPDATE) alone, with `Outbox::enqueue`, and with the
//!    identical INSERT written by hand, at 1, 4 and 16 connections;
//! 3. drain: a backlog drained by the backend's own lease + mark statements in a loop (the floor)
//!    and by a relay with a no-op delivery, with 1 and 4 relays.
//!
//! Each part runs in a scratch database `hare_bench_<random>`, dropped at the end.
//!
//! ```text
//! cargo run --release -p hare-outbox-bench --bin mysql
//! ```

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Parser;
use hare_outbox::backend::{Backend, EventLeaseParams, EventMarkDeliveredParams};
use hare_outbox::mysql::MySqlBackend;
use hare_outbox::{FnDelivery, Outbox, OutboxMessage, OutboxRelay, OutboxTable, RelayConfig};
use serde_json::json;
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};

#[derive(Parser)]
struct Cli {
    /// MySQL / MariaDB server; a scratch database is created and dropped.
    #[arg(
        long,
        env = "HARE_OUTBOX_BENCH_MYSQL_URL",
        default_value = "mysql://root@127.0.0.1:3306/test"
    )]
    database_url: String,
    /// Seconds per cell of the enqueue part.
    #[arg(long, default_value_t = 4.0)]
    seconds: f64,
    /// Events of the drain part.
    #[arg(long, default_value_t = 20_000)]
    events: i64,
    /// Ordering keys of the drain part.
    #[arg(long, default_value_t = 1_000)]
    keys: i64,
}

/// A scratch database and a pool of 20 connections on it.
struct Scratch {
    pool: MySqlPool,
    name: String,
}

impl Scratch {
    async fn new(url: &str) -> Result<Scratch> {
        let name = format!("hare_bench_{:08x}", uuid::Uuid::new_v4().as_u128() as u32);
        let options = MySqlConnectOptions::from_str(url).context("the MySQL URL")?;
        let admin = MySqlPoolOptions::new()
            .max_connections(1)
            .connect_with(options.clone())
            .await
            .context("connecting")?;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE `{name}`")))
            .execute(&admin)
            .await?;
        admin.close().await;
        let pool = MySqlPoolOptions::new()
            .max_connections(20)
            .connect_with(options.database(&name))
            .await?;
        Ok(Scratch { pool, name })
    }

    async fn drop(self) {
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE `{}`",
            self.name
        )))
        .execute(&self.pool)
        .await;
        self.pool.close().await;
    }
}

async fn ids(url: &str) -> Result<()> {
    let scratch = Scratch::new(url).await?;
    println!("ids: 100,000 UUID v7 ids in batches of 1,000, unique index on the id");
    println!("{:<12} {:>10} {:>16}", "id type", "seconds", "index bytes");
    for (name, sql_type, binary) in [
        ("BINARY(16)", "BINARY(16)", true),
        ("CHAR(36)", "CHAR(36) CHARACTER SET ascii", false),
    ] {
        let table = if binary { "ids_binary" } else { "ids_text" };
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "CREATE TABLE {table} (sequence BIGINT AUTO_INCREMENT PRIMARY KEY, id {sql_type} NOT NULL, UNIQUE KEY (id)) ENGINE = InnoDB"
        )))
        .execute(&scratch.pool)
        .await?;
        let start = Instant::now();
        for _ in 0..100 {
            let rows = vec!["(?)"; 1000].join(", ");
            let mut query = sqlx::query(sqlx::AssertSqlSafe(format!(
                "INSERT INTO {table} (id) VALUES {rows}"
            )));
            for _ in 0..1000 {
                let id = uuid::Uuid::now_v7();
                query = if binary {
                    query.bind(id)
                } else {
                    query.bind(id.hyphenated().to_string())
                };
            }
            query.execute(&scratch.pool).await?;
        }
        let seconds = start.elapsed().as_secs_f64();
        sqlx::query(sqlx::AssertSqlSafe(format!("ANALYZE TABLE {table}")))
            .execute(&scratch.pool)
            .await?;
        let size: u64 = sqlx::query_scalar(
            "SELECT CAST(index_length AS UNSIGNED) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?",
        )
        .bind(table)
        .fetch_one(&scratch.pool)
        .await?;
        println!("{name:<12} {seconds:>10.2} {size:>16}");
    }
    scratch.drop().await;
    println!();
    Ok(())
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Alone,
    Enqueue,
    ByHand,
}

fn payload(writer: usize, n: u64) -> serde_json::Value {
    json!({"id": writer, "n": n, "status": "confirmed", "amount": "12.50"})
}

async fn one(
    outbox: &Outbox<MySqlBackend>,
    pool: &MySqlPool,
    mode: Mode,
    writer: usize,
    n: u64,
) -> Result<()> {
    let mut tx = pool.begin().await?;
    sqlx::query("UPDATE accounts SET balance = balance + 1 WHERE id = ?")
        .bind(writer as i64)
        .execute(&mut *tx)
        .await?;
    match mode {
        Mode::Alone => {}
        Mode::Enqueue => {
            outbox
                .enqueue(
                    &mut *tx,
                    OutboxMessage::new("accounts.updated", payload(writer, n))
                        .ordering_key(format!("account:{writer}")),
                )
                .await?;
        }
        Mode::ByHand => {
            // The same row, written by hand: what the library replaces.
            sqlx::query(
                "INSERT INTO outbox (id, topic, payload, headers, ordering_key) VALUES (?, ?, ?, '{}', ?)",
            )
            .bind(uuid::Uuid::now_v7())
            .bind("accounts.updated")
            .bind(payload(writer, n).to_string())
            .bind(format!("account:{writer}"))
            .execute(&mut *tx)
            .await?;
        }
    }
    tx.commit().await?;
    Ok(())
}

async fn enqueue(url: &str, seconds: f64) -> Result<()> {
    let scratch = Scratch::new(url).await?;
    let pool = scratch.pool.clone();
    sqlx::query("CREATE TABLE accounts (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL)")
        .execute(&pool)
        .await?;
    let rows: Vec<String> = (0..64).map(|i| format!("({i}, 0)")).collect();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO accounts VALUES {}",
        rows.join(", ")
    )))
    .execute(&pool)
    .await?;
    let outbox = Outbox::new(
        MySqlBackend::new(pool.clone()),
        OutboxTable::parse("outbox")?,
    );
    outbox.migrate().await?;
    println!("enqueue: business transaction (one UPDATE) + event, {seconds:.0} s per cell");
    println!(
        "{:<6} {:>12} {:>12} {:>12} {:>16} {:>14}",
        "conns", "alone tx/s", "enqueue", "by hand", "enqueue/by hand", "enqueue/alone"
    );
    for conns in [1usize, 4, 16] {
        let mut rates = Vec::new();
        for mode in [Mode::Alone, Mode::Enqueue, Mode::ByHand] {
            let done = Arc::new(AtomicU64::new(0));
            let deadline = Instant::now() + Duration::from_secs_f64(seconds);
            let start = Instant::now();
            let tasks: Vec<_> = (0..conns)
                .map(|writer| {
                    let (outbox, pool, done) = (outbox.clone(), pool.clone(), done.clone());
                    tokio::spawn(async move {
                        let mut n = 0;
                        while Instant::now() < deadline {
                            one(&outbox, &pool, mode, writer, n).await?;
                            n += 1;
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                        anyhow::Ok(())
                    })
                })
                .collect();
            for task in tasks {
                task.await??;
            }
            rates.push(done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64());
        }
        println!(
            "{conns:<6} {:>12.0} {:>12.0} {:>12.0} {:>16.2} {:>14.2}",
            rates[0],
            rates[1],
            rates[2],
            rates[1] / rates[2],
            rates[1] / rates[0]
        );
    }
    scratch.drop().await;
    println!();
    Ok(())
}

/// A backlog of `events` events over `keys` ordering keys in table `name`, written with
/// `enqueue_many` in batches of 1,000.
async fn backlog(
    pool: &MySqlPool,
    name: &str,
    events: i64,
    keys: i64,
) -> Result<Outbox<MySqlBackend>> {
    let outbox = Outbox::new(MySqlBackend::new(pool.clone()), OutboxTable::parse(name)?);
    outbox.migrate().await?;
    let mut written = 0;
    while written < events {
        let mut tx = pool.begin().await?;
        let batch: Vec<OutboxMessage> = (written..(written + 1000).min(events))
            .map(|i| {
                OutboxMessage::new("bench.drain", json!({"n": i}))
                    .ordering_key(format!("k{}", i % keys))
            })
            .collect();
        written += batch.len() as i64;
        outbox.enqueue_many(&mut *tx, batch).await?;
        tx.commit().await?;
    }
    Ok(outbox)
}

/// The floor: the backend's own lease and mark statements in a loop, no delivery.
async fn floor(outbox: &Outbox<MySqlBackend>, batch: usize, name: String) -> Result<u64> {
    let mut done = 0u64;
    let mut cursor = String::new();
    loop {
        let params = EventLeaseParams::new(name.clone(), batch as i64, Duration::from_secs(60))
            .with_max_events_per_key(RelayConfig::default().max_events_per_key as i64)
            .with_min_keys(RelayConfig::default().concurrency as i64)
            .with_key_cursor(cursor.clone());
        let leased = outbox
            .backend()
            .event_lease(outbox.table(), &params)
            .await?;
        if let Some(next) = leased.key_cursor {
            cursor = next;
        }
        if leased.events.is_empty() {
            if leased.contended {
                continue;
            }
            return Ok(done);
        }
        let sequences = leased.events.iter().map(|e| e.sequence).collect();
        outbox
            .backend()
            .event_mark_delivered(outbox.table(), &EventMarkDeliveredParams::new(sequences))
            .await?;
        done += leased.events.len() as u64;
    }
}

/// A relay with a no-op delivery, polled until a poll leases nothing.
async fn relay_drain(outbox: &Outbox<MySqlBackend>, batch: usize, name: String) -> Result<u64> {
    let relay = OutboxRelay::new(
        outbox.clone(),
        FnDelivery::new(|_event| async { Ok(()) }),
        RelayConfig::default()
            .with_name(name)
            .with_batch_size(u32::try_from(batch)?)
            .with_poll_interval(Duration::from_millis(50)),
    )?;
    let mut done = 0u64;
    let mut idle = 0;
    loop {
        let outcome = relay.poll_once().await?;
        if outcome.leased == 0 {
            idle += 1;
            if idle >= 3 {
                return Ok(done);
            }
            continue;
        }
        idle = 0;
        done += outcome.delivered as u64;
    }
}

async fn in_parallel<F, Fut>(count: usize, f: F) -> Result<u64>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<u64>>,
{
    let mut total = 0;
    for r in futures::future::join_all((0..count).map(f)).await {
        total += r?;
    }
    Ok(total)
}

async fn drain(url: &str, events: i64, keys: i64) -> Result<()> {
    let scratch = Scratch::new(url).await?;
    println!("drain: {events} events over {keys} ordering keys per run, batch 100");
    println!(
        "{:<6} {:>14} {:>14} {:>8}",
        "relays", "floor ev/s", "relay ev/s", "ratio"
    );
    for (n, count) in [1usize, 4].into_iter().enumerate() {
        let floor_outbox = backlog(&scratch.pool, &format!("floor_{n}"), events, keys).await?;
        let start = Instant::now();
        let done = in_parallel(count, |i| floor(&floor_outbox, 100, format!("floor-{i}"))).await?;
        let floor_rate = done as f64 / start.elapsed().as_secs_f64();
        anyhow::ensure!(done == events as u64, "floor drained {done} of {events}");
        let relay_outbox = backlog(&scratch.pool, &format!("relay_{n}"), events, keys).await?;
        let start = Instant::now();
        let done = in_parallel(count, |i| {
            relay_drain(&relay_outbox, 100, format!("relay-{i}"))
        })
        .await?;
        let relay_rate = done as f64 / start.elapsed().as_secs_f64();
        anyhow::ensure!(done == events as u64, "relays drained {done} of {events}");
        println!(
            "{count:<6} {floor_rate:>14.0} {relay_rate:>14.0} {:>8.2}",
            relay_rate / floor_rate
        );
    }
    scratch.drop().await;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    let version: String = {
        let scratch = MySqlPool::connect_with(MySqlConnectOptions::from_str(&cli.database_url)?)
            .await
            .context("connecting")?;
        sqlx::query_scalar("SELECT CAST(VERSION() AS CHAR)")
            .fetch_one(&scratch)
            .await?
    };
    println!("server {version} at {}", cli.database_url);
    println!();
    ids(&cli.database_url).await?;
    enqueue(&cli.database_url, cli.seconds).await?;
    drain(&cli.database_url, cli.events, cli.keys).await?;
    Ok(())
}
