//! The cost of strict per-key commit order on PostgreSQL: a business transaction (one UPDATE and
//! one `enqueue`) at 1, 4 and 16 writers, each writer on its own ordering key ("distinct") or all
//! on one key ("shared"), with and without `OutboxMessage::strict_order`.
//!
//! ```text
//! cargo run --release -p hare-outbox-bench --bin strict_order
//! ```

#[path = "../bench_accounts.rs"]
mod bench_accounts;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use clap::Parser;
use hare_outbox::postgres::PgBackend;
use hare_outbox::{Outbox, OutboxMessage, OutboxTable};
use serde_json::json;
use sqlx::postgres::PgPool;

#[derive(Parser)]
struct Cli {
    /// PostgreSQL server; a scratch schema is created and dropped.
    #[arg(
        long,
        env = "HARE_OUTBOX_BENCH_PG_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/test"
    )]
    database_url: String,
    /// Seconds per cell.
    #[arg(long, default_value_t = 4.0)]
    seconds: f64,
}

/// One business transaction: the writer's own account row, then its event.
async fn one(
    outbox: &Outbox<PgBackend>,
    pool: &PgPool,
    writer: usize,
    shared: bool,
    strict: bool,
) -> Result<()> {
    let mut tx = pool.begin().await?;
    sqlx::query("UPDATE accounts SET balance = balance + 1 WHERE id = $1")
        .bind(writer as i64)
        .execute(&mut *tx)
        .await?;
    let key = if shared {
        "account:shared".to_owned()
    } else {
        format!("account:{writer}")
    };
    let mut message =
        OutboxMessage::new("accounts.updated", json!({"id": writer})).ordering_key(key);
    if strict {
        message = message.strict_order();
    }
    outbox.enqueue(&mut *tx, message).await?;
    tx.commit().await?;
    Ok(())
}

/// Transactions per second and the median commit latency in ms of one cell.
async fn cell(
    outbox: &Outbox<PgBackend>,
    pool: &PgPool,
    writers: usize,
    shared: bool,
    strict: bool,
    seconds: f64,
) -> Result<(f64, f64)> {
    let done = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let mut tasks = Vec::new();
    for writer in 0..writers {
        let (outbox, pool, done) = (outbox.clone(), pool.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while Instant::now() < deadline {
                let start = Instant::now();
                one(&outbox, &pool, writer, shared, strict).await?;
                latencies.push(start.elapsed().as_secs_f64() * 1000.0);
                done.fetch_add(1, Ordering::Relaxed);
            }
            anyhow::Ok(latencies)
        }));
    }
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.extend(t.await??);
    }
    latencies.sort_by(f64::total_cmp);
    let median = latencies.get(latencies.len() / 2).copied().unwrap_or(0.0);
    Ok((done.load(Ordering::Relaxed) as f64 / seconds, median))
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    let (pool, schema) = bench_accounts::scratch(&cli.database_url).await?;
    let outbox = Outbox::new(PgBackend::new(pool.clone()), OutboxTable::parse("outbox")?);
    outbox.migrate().await?;
    println!(
        "UPDATE + enqueue per transaction, {:.0} s per cell; tx/s (median ms)",
        cli.seconds
    );
    println!(
        "{:<8} {:<9} {:>16} {:>16} {:>14}",
        "writers", "keys", "plain", "strict", "strict/plain"
    );
    for writers in [1usize, 4, 16] {
        for shared in [false, true] {
            let plain = cell(&outbox, &pool, writers, shared, false, cli.seconds).await?;
            let strict = cell(&outbox, &pool, writers, shared, true, cli.seconds).await?;
            println!(
                "{writers:<8} {:<9} {:>9.0} ({:>4.1}) {:>9.0} ({:>4.1}) {:>14.2}",
                if shared { "shared" } else { "distinct" },
                plain.0,
                plain.1,
                strict.0,
                strict.1,
                strict.0 / plain.0
            );
        }
    }
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA \"{schema}\" CASCADE"
    )))
    .execute(&pool)
    .await?;
    Ok(())
}
