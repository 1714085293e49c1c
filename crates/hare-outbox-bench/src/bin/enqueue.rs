//! Enqueue benchmarks on PostgreSQL, in one run:
//!
//! 1. a business transaction (one UPDATE) alone, with `Outbox::enqueue`, and with the identical
//!    INSERT written by hand, at 1, 4 and 16 connections;
//! 2. 1,000 events written by `enqueue_many`, by 1,000 `enqueue` calls, and by COPY, each in one
//!    transaction.
//!
//! ```text
//! cargo run --release -p hare-outbox-bench --bin enqueue
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
    /// Seconds per cell of part 1.
    #[arg(long, default_value_t = 4.0)]
    seconds: f64,
    /// Rounds of part 2 (the median is reported).
    #[arg(long, default_value_t = 7)]
    rounds: usize,
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
    outbox: &Outbox<PgBackend>,
    pool: &PgPool,
    mode: Mode,
    writer: usize,
    n: u64,
) -> Result<()> {
    let mut tx = pool.begin().await?;
    sqlx::query("UPDATE accounts SET balance = balance + 1 WHERE id = $1")
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
                "INSERT INTO outbox (id, topic, payload, headers, ordering_key) VALUES ($1, $2, $3, $4, $5) RETURNING sequence",
            )
            .bind(uuid::Uuid::now_v7())
            .bind("accounts.updated")
            .bind(payload(writer, n))
            .bind(json!({}))
            .bind(format!("account:{writer}"))
            .fetch_one(&mut *tx)
            .await?;
        }
    }
    tx.commit().await?;
    Ok(())
}

async fn part1(cli: &Cli) -> Result<()> {
    println!(
        "business transaction (one UPDATE) + event, {:.0} s per cell",
        cli.seconds
    );
    println!(
        "{:<6} {:>12} {:>12} {:>12} {:>16} {:>14}",
        "conns", "alone tx/s", "enqueue", "by hand", "enqueue/by hand", "enqueue/alone"
    );
    let (pool, schema) = bench_accounts::scratch(&cli.database_url).await?;
    let outbox = Outbox::new(PgBackend::new(pool.clone()), OutboxTable::parse("outbox")?);
    outbox.migrate().await?;
    for conns in [1usize, 4, 16] {
        let mut rates = Vec::new();
        for mode in [Mode::Alone, Mode::Enqueue, Mode::ByHand] {
            let done = Arc::new(AtomicU64::new(0));
            let deadline = Instant::now() + Duration::from_secs_f64(cli.seconds);
            let mut tasks = Vec::new();
            for writer in 0..conns {
                let (outbox, pool, done) = (outbox.clone(), pool.clone(), done.clone());
                tasks.push(tokio::spawn(async move {
                    let mut n = 0;
                    while Instant::now() < deadline {
                        one(&outbox, &pool, mode, writer, n).await?;
                        n += 1;
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    anyhow::Ok(())
                }));
            }
            for t in tasks {
                t.await??;
            }
            rates.push(done.load(Ordering::Relaxed) as f64 / cli.seconds);
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
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA \"{schema}\" CASCADE"
    )))
    .execute(&pool)
    .await?;
    Ok(())
}

async fn part2(cli: &Cli) -> Result<()> {
    println!();
    println!(
        "1,000 events in one transaction, median of {} rounds",
        cli.rounds
    );
    let (pool, schema) = bench_accounts::scratch(&cli.database_url).await?;
    let outbox = Outbox::new(PgBackend::new(pool.clone()), OutboxTable::parse("outbox")?);
    outbox.migrate().await?;
    let messages = || {
        (0..1000u64).map(|n| {
            OutboxMessage::new("bulk.event", payload(0, n)).ordering_key(format!("k{}", n % 50))
        })
    };
    let mut many = Vec::new();
    let mut single = Vec::new();
    let mut copy = Vec::new();
    for _ in 0..cli.rounds {
        let start = Instant::now();
        let mut tx = pool.begin().await?;
        outbox.enqueue_many(&mut *tx, messages()).await?;
        tx.commit().await?;
        many.push(start.elapsed().as_secs_f64() * 1000.0);

        let start = Instant::now();
        let mut tx = pool.begin().await?;
        for m in messages() {
            outbox.enqueue(&mut *tx, m).await?;
        }
        tx.commit().await?;
        single.push(start.elapsed().as_secs_f64() * 1000.0);

        let start = Instant::now();
        let mut tx = pool.begin().await?;
        let mut data = String::with_capacity(200_000);
        for n in 0..1000u64 {
            let body = payload(0, n).to_string().replace('"', "\"\"");
            data.push_str(&format!(
                "{},bulk.event,\"{body}\",{{}},k{}\n",
                uuid::Uuid::now_v7(),
                n % 50
            ));
        }
        let mut copy_in = tx
            .copy_in_raw(
                "COPY outbox (id, topic, payload, headers, ordering_key) FROM STDIN (FORMAT csv)",
            )
            .await?;
        copy_in.send(data.into_bytes()).await?;
        copy_in.finish().await?;
        tx.commit().await?;
        copy.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (many, single, copy) = (median(&mut many), median(&mut single), median(&mut copy));
    println!("{:<28} {:>10} {:>10}", "way", "ms", "× COPY");
    for (name, ms) in [
        ("COPY (floor)", copy),
        ("enqueue_many(1000)", many),
        ("1000 × enqueue", single),
    ] {
        println!("{name:<28} {ms:>10.1} {:>10.2}", ms / copy);
    }
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA \"{schema}\" CASCADE"
    )))
    .execute(&pool)
    .await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    part1(&cli).await?;
    part2(&cli).await?;
    Ok(())
}
