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
use hare_outbox::backend::{Backend, EventLeaseParams, EventMarkDeliveredParams};
use hare_outbox::postgres::PgBackend;
use hare_outbox::webhook::WebhookDelivery;
use hare_outbox::{
    Delivery, FnDelivery, JsonLinesDelivery, Outbox, OutboxEvent, OutboxRelay, OutboxTable,
    RelayConfig,
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
        /// Relay batch sizes, comma-separated.
        #[arg(long, value_delimiter = ',', default_values_t = [100, 1000])]
        batches: Vec<usize>,
        /// Relay counts (concurrent relays on one table), comma-separated.
        #[arg(long, value_delimiter = ',', default_values_t = [1, 2])]
        relays: Vec<usize>,
        /// Table fillfactors to compare for the floor, comma-separated (100 = PostgreSQL's default).
        #[arg(long, value_delimiter = ',', default_values_t = [100, 80])]
        fillfactors: Vec<u32>,
    },
    /// Time one lease statement (EXPLAIN ANALYZE inside a rolled-back transaction) for several
    /// per-key-order formulations on a large backlog, with and without a table full of published
    /// rows and with half the keys' heads leased by another relay.
    Lease {
        /// Pending events.
        #[arg(long, default_value_t = 1_000_000)]
        pending: i64,
        /// Distinct ordering keys, assigned round-robin.
        #[arg(long, default_value_t = 10_000)]
        keys: i64,
        /// Published rows in the second table.
        #[arg(long, default_value_t = 10_000_000)]
        published: i64,
        /// Timed runs per cell; the median is reported.
        #[arg(long, default_value_t = 9)]
        runs: usize,
    },
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Drain {
            events,
            keys,
            batches,
            relays,
            fillfactors,
        } => {
            drain(
                &cli.database_url,
                events,
                keys,
                &batches,
                &relays,
                &fillfactors,
            )
            .await
        }
        Command::Lease {
            pending,
            keys,
            published,
            runs,
        } => lease(&cli.database_url, pending, keys, published, runs).await,
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
        self.backlog_with(name, events, keys, 100, 0).await
    }

    /// Like [`Scratch::backlog`], with a table fillfactor and `published` delivered rows written
    /// before the pending ones.
    async fn backlog_with(
        &self,
        name: &str,
        events: i64,
        keys: i64,
        fillfactor: u32,
        published: i64,
    ) -> Result<Outbox<PgBackend>> {
        let outbox = Outbox::new(PgBackend::new(self.pool.clone()), OutboxTable::parse(name)?);
        outbox.migrate().await?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "ALTER TABLE \"{name}\" SET (fillfactor = {fillfactor})"
        )))
        .execute(&self.pool)
        .await?;
        if published > 0 {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "INSERT INTO \"{name}\" (id, topic, payload, headers, ordering_key, published_at) \
                 SELECT gen_random_uuid(), 'bench.event', jsonb_build_object('n', g, 'text', 'lorem ipsum dolor sit amet'), \
                        '{{\"author\": \"bench\"}}'::jsonb, 'k' || (g % 10000), now() FROM generate_series(1, {published}) g"
            )))
            .execute(&self.pool)
            .await?;
        }
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
    let mut cursor = String::new();
    loop {
        let params = EventLeaseParams::new("floor".into(), batch as i64, Duration::from_secs(60))
            .with_max_events_per_key(RelayConfig::default().max_events_per_key as i64)
            .with_key_cursor(cursor.clone());
        let leased = outbox
            .backend()
            .event_lease(outbox.table(), &params)
            .await?;
        if let Some(next) = leased.key_cursor {
            cursor = next;
        }
        let events = leased.events;
        if events.is_empty() {
            return Ok(done);
        }
        let sequences = events.iter().map(|e| e.sequence).collect();
        outbox
            .backend()
            .event_mark_delivered(outbox.table(), &EventMarkDeliveredParams::new(sequences))
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
            .with_batch_size(u32::try_from(batch)?)
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

async fn drain(
    url: &str,
    events: i64,
    keys: i64,
    batches: &[usize],
    relays: &[usize],
    fillfactors: &[u32],
) -> Result<()> {
    let scratch = Scratch::new(url).await?;
    println!("drain: {events} events over {keys} ordering keys per run, PostgreSQL at {url}");
    println!();
    println!(
        "{:<8} {:>6} {:>14} {:>14} {:>8}",
        "batch", "relays", "floor ev/s", "relay ev/s", "ratio"
    );
    let mut n = 0;
    for &batch in batches {
        for &count in relays {
            n += 1;
            let floor_outbox = scratch.backlog(&format!("floor_{n}"), events, keys).await?;
            let start = Instant::now();
            let done = in_parallel(count, |_| floor(&floor_outbox, batch)).await?;
            let floor_rate = done as f64 / start.elapsed().as_secs_f64();
            anyhow::ensure!(done == events as u64, "floor drained {done} of {events}");

            let relay_outbox = scratch.backlog(&format!("relay_{n}"), events, keys).await?;
            let start = Instant::now();
            let done = in_parallel(count, |_| {
                relay_drain(
                    &relay_outbox,
                    FnDelivery::new(|_e: OutboxEvent| async { Ok(()) }),
                    batch,
                )
            })
            .await?;
            let relay_rate = done as f64 / start.elapsed().as_secs_f64();
            anyhow::ensure!(done == events as u64, "relays drained {done} of {events}");
            println!(
                "{batch:<8} {count:>6} {floor_rate:>14.0} {relay_rate:>14.0} {:>8.2}",
                relay_rate / floor_rate
            );
        }
    }

    println!();
    println!(
        "floor by table fillfactor (batch {}, 1 relay): HOT share = heap-only updates / all updates",
        batches[0]
    );
    println!(
        "{:<12} {:>14} {:>10}",
        "fillfactor", "floor ev/s", "HOT share"
    );
    for &fillfactor in fillfactors {
        let name = format!("ff_{fillfactor}");
        let outbox = scratch
            .backlog_with(&name, events, keys, fillfactor, 0)
            .await?;
        let start = Instant::now();
        let done = floor(&outbox, batches[0]).await?;
        let rate = done as f64 / start.elapsed().as_secs_f64();
        // The statistics collector lags a little; wait for it to count every update.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let (hot, all): (i64, i64) = sqlx::query_as(
            "SELECT n_tup_hot_upd, n_tup_upd FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = $2",
        )
        .bind(&scratch.schema)
        .bind(&name)
        .fetch_one(&scratch.pool)
        .await?;
        println!(
            "{fillfactor:<12} {rate:>14.0} {:>10.2}",
            hot as f64 / all.max(1) as f64
        );
    }

    println!();
    println!(
        "deliveries (batch {}, 1 relay, concurrency 10):",
        batches[0]
    );
    let batch = batches[0];
    let mut rows: Vec<(&str, f64)> = Vec::new();
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
        "relay → webhook (loopback receiver)",
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

    let base = rows[0].1;
    println!("{:<46} {:>12} {:>9}", "run", "events/s", "× no-op");
    for (name, rate) in rows {
        println!("{name:<46} {rate:>12.0} {:>9.2}", rate / base);
    }
    scratch.drop().await;
    Ok(())
}

/// Runs `count` copies of a drain concurrently on this task and adds up what they drained.
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

/// The lease of issue 4 (one event per key, `NOT EXISTS` over earlier pending rows), kept to
/// show what the shipped key walk replaced. Parameters: $1 now, $2 lease end, $3 relay, $4 batch.
const BEFORE: &str = include_str!("../sql/lease_not_exists.sql");

/// The lease formulations timed by `lease`: a label and, for the shipped statement, its
/// `max_events_per_key` (`None` = [`BEFORE`]).
const FORMULATIONS: &[(&str, Option<i64>)] = &[
    ("key walk, runs of 100 (shipped)", Some(100)),
    ("key walk, 1 per key (shipped)", Some(1)),
    ("NOT EXISTS (before)", None),
];

async fn lease(url: &str, pending: i64, keys: i64, published: i64, runs: usize) -> Result<()> {
    let scratch = Scratch::new(url).await?;
    println!(
        "lease: {pending} pending events on one key; {pending} pending over {keys} keys after \
         {published} published rows"
    );
    let started = Instant::now();
    scratch.backlog("onekey", pending, 1).await?;
    scratch
        .backlog_with("full", pending, keys, 100, published)
        .await?;
    println!("(setup took {:.0} s)", started.elapsed().as_secs_f64());
    println!();
    println!(
        "{:<38} {:<32} {:>6} {:>7} {:>10}",
        "table", "formulation", "batch", "leased", "median ms"
    );
    let mut shapes = Vec::new();
    for (table, label, hold) in [
        ("onekey", "1M pending, one key", Hold::Nothing),
        (
            "onekey",
            "… its head leased by another relay",
            Hold::EveryHead,
        ),
        ("full", "1M pending over keys + published", Hold::Nothing),
        ("full", "… half the heads leased", Hold::HalfTheHeads),
    ] {
        hold.apply(&scratch.pool, table).await?;
        let quoted = format!("\"{table}\"");
        for (name, per_key) in FORMULATIONS {
            for batch in [100i64, 1000] {
                let sql = match per_key {
                    Some(per_key) => hare_outbox::postgres::lease_statement(
                        &OutboxTable::parse(table)?,
                        batch,
                        *per_key,
                    ),
                    None => BEFORE.replace("{table}", &quoted),
                };
                let statement = format!("EXPLAIN (ANALYZE, FORMAT JSON) {sql}");
                let mut times = Vec::new();
                let mut plan = serde_json::Value::Null;
                for _ in 0..runs {
                    let mut tx = scratch.pool.begin().await?;
                    let query = sqlx::query_as(sqlx::AssertSqlSafe(statement.clone()));
                    let (json,): (serde_json::Value,) = match per_key {
                        Some(_) => {
                            let none: &[String] = &[];
                            query
                                .bind(None::<chrono::DateTime<chrono::Utc>>)
                                .bind(60.0f64)
                                .bind("bench")
                                .bind("")
                                .bind(true)
                                .bind(none)
                                .bind(none)
                                .bind(none)
                                .bind(none)
                                .fetch_one(&mut *tx)
                                .await?
                        }
                        None => {
                            let now = chrono_now();
                            query
                                .bind(now)
                                .bind(now + chrono::Duration::seconds(60))
                                .bind("bench")
                                .bind(batch)
                                .fetch_one(&mut *tx)
                                .await?
                        }
                    };
                    tx.rollback().await?;
                    times.push(json[0]["Execution Time"].as_f64().unwrap_or(f64::NAN));
                    plan = json[0]["Plan"].clone();
                }
                times.sort_by(f64::total_cmp);
                let median = times[times.len() / 2];
                // The rows the UPDATE wrote: the shipped statement always returns a row (its
                // outcome), so the top node's count is not the lease's.
                let leased = modify_table_rows(&plan)
                    .unwrap_or_else(|| plan["Actual Rows"].as_f64().unwrap_or(f64::NAN));
                println!("{label:<38} {name:<32} {batch:>6} {leased:>7.0} {median:>10.2}");
                if batch == 100 && per_key == &Some(100) {
                    shapes.push(format!("{label} / {name}:\n{}", shape(&plan, 1)));
                }
            }
        }
    }
    println!();
    println!("EXPLAIN shapes of the shipped statement (batch 100):");
    for s in shapes {
        println!("{s}");
    }
    scratch.drop().await;
    Ok(())
}

/// What another relay holds while a lease is timed.
#[derive(Clone, Copy)]
enum Hold {
    Nothing,
    /// The head of every key: a lease must find nothing, without walking the backlog.
    EveryHead,
    /// The heads of every other key (`k0`, `k2`, …).
    HalfTheHeads,
}

impl Hold {
    async fn apply(self, pool: &PgPool, table: &str) -> Result<()> {
        let which = match self {
            Hold::Nothing => return Ok(()),
            Hold::EveryHead => "",
            Hold::HalfTheHeads => "HAVING substr(ordering_key, 2)::int % 2 = 0",
        };
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE \"{table}\" SET lease_until = now() + interval '1 hour', leased_by = 'other' \
             WHERE sequence IN (SELECT min(sequence) FROM \"{table}\" \
             WHERE published_at IS NULL GROUP BY ordering_key {which})"
        )))
        .execute(pool)
        .await?;
        Ok(())
    }
}

/// The plan tree as indented node names with the index used, one line per node.
fn shape(plan: &serde_json::Value, depth: usize) -> String {
    let mut line = format!(
        "{}{}",
        "  ".repeat(depth),
        plan["Node Type"].as_str().unwrap_or("?")
    );
    if let Some(index) = plan["Index Name"].as_str() {
        line.push_str(&format!(" using {index}"));
    }
    if let Some(rows) = plan["Actual Rows"].as_f64() {
        let loops = plan["Actual Loops"].as_f64().unwrap_or(1.0);
        line.push_str(&format!(" (rows {rows:.0} × loops {loops:.0})"));
    }
    let mut out = vec![line];
    if let Some(children) = plan["Plans"].as_array() {
        for child in children {
            out.push(shape(child, depth + 1));
        }
    }
    out.join("\n")
}

/// The actual rows of the first `ModifyTable` node (the lease's UPDATE) in an `EXPLAIN (FORMAT
/// JSON)` plan; `None` when the plan has none.
fn modify_table_rows(plan: &serde_json::Value) -> Option<f64> {
    if plan["Node Type"] == "ModifyTable" {
        return plan["Actual Rows"].as_f64();
    }
    plan["Plans"].as_array()?.iter().find_map(modify_table_rows)
}
