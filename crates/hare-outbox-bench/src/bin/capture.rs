//! `capture`: the cost of a capture trigger on PostgreSQL, in one run, as ratios.
//!
//! Three ways to run the same business transaction (`UPDATE` of one row, committed):
//! - `alone`: the UPDATE only;
//! - `by hand`: the UPDATE, then an INSERT of the same event into the outbox (the envelope built
//!   in Rust from the UPDATE's RETURNING, as application code would);
//! - `trigger`: the UPDATE with a capture trigger installed (CHANGES payload) writing the event;
//! - `trigger + notify`: the same trigger declared with `notify`, so it also runs `pg_notify`
//!   in the transaction (the cost of waking LISTEN/NOTIFY relays from captured writes).
//!
//! Each runs at 1 and 4 connections (`--connections`), in interleaved rounds, on distinct rows per
//! connection (no lock waits). The goal: the trigger within 25% of the hand-written INSERT.
//!
//! ```text
//! cargo run -p hare-outbox-bench --bin capture -- --updates 4000 --rounds 3 --connections 1,4,16
//! ```

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Parser;
use hare_outbox::capture::{ChangeCapture, ChangePayload, RowOperation};
use hare_outbox::postgres::PgBackend;
use hare_outbox::{Outbox, OutboxTable};
use serde_json::json;
use sqlx::postgres::{PgPool, PgPoolOptions};

#[derive(Parser)]
#[command(about = "capture trigger vs hand-written event INSERT vs UPDATE alone")]
struct Cli {
    /// PostgreSQL server; a scratch schema is created and dropped.
    #[arg(
        long,
        env = "HARE_OUTBOX_BENCH_PG_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/test"
    )]
    database_url: String,
    /// UPDATE transactions per scenario, per round and connection count.
    #[arg(long, default_value_t = 4000)]
    updates: usize,
    /// Interleaved rounds; the best time of each scenario is kept.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Concurrent writers, comma-separated; each count is measured on its own.
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 4])]
    connections: Vec<usize>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Scenario {
    Alone,
    ByHand,
    Trigger,
    TriggerNotify,
}

const SCENARIOS: [Scenario; 4] = [
    Scenario::Alone,
    Scenario::ByHand,
    Scenario::Trigger,
    Scenario::TriggerNotify,
];

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::Alone => "UPDATE alone",
            Scenario::ByHand => "UPDATE + INSERT by hand",
            Scenario::Trigger => "UPDATE + capture trigger",
            Scenario::TriggerNotify => "UPDATE + trigger + notify",
        }
    }
}

const ROWS: i32 = 10_000;

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    let schema = format!(
        "hare_bench_capture_{:08x}",
        uuid::Uuid::new_v4().as_u128() as u32
    );
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .connect(&cli.database_url)
        .await
        .context("connecting to PostgreSQL")?;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA \"{schema}\"")))
        .execute(&admin)
        .await?;
    let result = run(&cli, &schema).await;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA \"{schema}\" CASCADE"
    )))
    .execute(&admin)
    .await?;
    result
}

async fn run(cli: &Cli, schema: &str) -> Result<()> {
    let search_path = schema.to_owned();
    let pool = PgPoolOptions::new()
        .max_connections(cli.connections.iter().copied().max().unwrap_or(1).max(1) as u32)
        .after_connect(move |conn, _| {
            let sql = format!("SET search_path TO \"{search_path}\"");
            Box::pin(async move {
                sqlx::query(sqlx::AssertSqlSafe(sql)).execute(conn).await?;
                Ok(())
            })
        })
        .connect(&cli.database_url)
        .await?;
    let outbox = Outbox::new(PgBackend::new(pool.clone()), OutboxTable::default());
    outbox.migrate().await?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE items (
            id int PRIMARY KEY, status text NOT NULL, qty int NOT NULL,
            price numeric(10,2) NOT NULL, updated_at timestamptz NOT NULL DEFAULT now());
         INSERT INTO items SELECT g, 'new', 0, 9.99 FROM generate_series(1, {ROWS}) g;"
    )))
    .execute(&pool)
    .await?;
    let capture = ChangeCapture::new("items")
        .with_label("shop.item")
        .with_payload(ChangePayload::Changes)
        .with_operations([RowOperation::Update]);
    let notifying = capture.clone().with_notify(Some("hare_bench_capture"));

    println!(
        "capture benchmark: {} UPDATE transactions per scenario, best of {} interleaved rounds, debug build unless --release",
        cli.updates, cli.rounds
    );
    for &connections in &cli.connections {
        let mut best = [Duration::MAX; SCENARIOS.len()];
        for round in 0..cli.rounds {
            for (i, scenario) in SCENARIOS.into_iter().enumerate() {
                sqlx::query("TRUNCATE hare_outbox").execute(&pool).await?;
                let installed = match scenario {
                    Scenario::Trigger => Some(&capture),
                    Scenario::TriggerNotify => Some(&notifying),
                    _ => None,
                };
                if let Some(capture) = installed {
                    capture.install(&outbox).await?;
                }
                let elapsed =
                    scenario_run(&pool, scenario, connections, cli.updates, round).await?;
                if let Some(capture) = installed {
                    capture.uninstall(&outbox).await?;
                    let events: i64 = sqlx::query_scalar("SELECT count(*) FROM hare_outbox")
                        .fetch_one(&pool)
                        .await?;
                    anyhow::ensure!(
                        events as usize == cli.updates,
                        "trigger wrote {events} events for {} updates",
                        cli.updates
                    );
                }
                best[i] = best[i].min(elapsed);
            }
        }
        println!("\n{connections} connection(s):");
        for (i, scenario) in SCENARIOS.into_iter().enumerate() {
            println!(
                "  {:<26} {:>8.0} tx/s  {:>7.1} µs/tx",
                scenario.name(),
                cli.updates as f64 / best[i].as_secs_f64(),
                best[i].as_secs_f64() * 1e6 / cli.updates as f64
            );
        }
        let per = |i: usize| best[i].as_secs_f64();
        println!(
            "  trigger / by hand = {:.2}   (goal ≤ 1.25)\n  trigger / alone   = {:.2}\n  by hand / alone   = {:.2}\n  notify / trigger  = {:.2}   (what notify costs writers)",
            per(2) / per(1),
            per(2) / per(0),
            per(1) / per(0),
            per(3) / per(2)
        );
    }
    pool.close().await;
    Ok(())
}

/// Runs `updates` transactions split over `connections` tasks, each on its own rows.
async fn scenario_run(
    pool: &PgPool,
    scenario: Scenario,
    connections: usize,
    updates: usize,
    round: usize,
) -> Result<Duration> {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..connections {
        let pool = pool.clone();
        let count = updates / connections + usize::from(c < updates % connections);
        tasks.push(tokio::spawn(async move {
            let mut conn = pool.acquire().await?;
            for n in 0..count {
                // Each connection on rows of its own: no lock waits.
                let span = ROWS as usize / connections.max(1);
                let id = (c * span + n % span) as i32 + 1;
                let status = format!("s{round}-{n}");
                let mut tx = sqlx::Connection::begin(&mut *conn).await?;
                match scenario {
                    Scenario::Alone | Scenario::Trigger | Scenario::TriggerNotify => {
                        sqlx::query("UPDATE items SET qty = qty + 1, status = $2 WHERE id = $1")
                            .bind(id)
                            .bind(&status)
                            .execute(&mut *tx)
                            .await?;
                    }
                    Scenario::ByHand => {
                        let (old_status, qty): (String, i32) = sqlx::query_as(
                            "UPDATE items AS i SET qty = i.qty + 1, status = $2 \
                             FROM (SELECT id, status FROM items WHERE id = $1) AS o \
                             WHERE i.id = o.id RETURNING o.status, i.qty",
                        )
                        .bind(id)
                        .bind(&status)
                        .fetch_one(&mut *tx)
                        .await?;
                        let now = chrono::Utc::now();
                        let payload = json!({
                            "model": "shop.item", "operation": "updated", "pk": id,
                            "changed": ["status", "qty"],
                            "before": {"status": old_status, "qty": qty - 1},
                            "after": {"status": status, "qty": qty},
                            "occurred_at": now.to_rfc3339(),
                        });
                        sqlx::query(
                            "INSERT INTO hare_outbox (id, topic, payload, headers, ordering_key) \
                             VALUES ($1, $2, $3, $4, $5)",
                        )
                        .bind(uuid::Uuid::now_v7())
                        .bind("shop.item.updated")
                        .bind(payload)
                        .bind(json!({}))
                        .bind(format!("shop.item:{id}"))
                        .execute(&mut *tx)
                        .await?;
                    }
                }
                tx.commit().await?;
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(started.elapsed())
}
