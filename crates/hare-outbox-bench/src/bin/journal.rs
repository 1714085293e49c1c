//! `journal`: the journal's pages on a large table, PostgreSQL and SQLite, in one run.
//!
//! Fills an outbox table with `--rows` events (1,000,000 by default; `INSERT … SELECT` from
//! `generate_series` on PostgreSQL, a recursive CTE on SQLite): five topics, seven authors,
//! capture envelopes about four models with 5,000 keys each, 1 % dead letters, 1 % retrying,
//! 1 % pending, the rest published. Then times, through `Journal::list` and `Journal::timeline`:
//!
//! - the first page (50 events, newest first);
//! - a page 900,000 events deep by cursor (`Cursor::Before`), and the same page by `OFFSET`
//!   (hand-written SQL: the baseline keyset pagination replaces);
//! - first pages filtered by status `dead` (1 %), topic prefix `billing.*` (40 %), author `alice`
//!   (1/7), model `sales_orders` (1/4), and object `sales_orders #22` (50 events in the table);
//! - timelines of the last hour in 60 buckets and of the last 24 hours in 96 buckets.
//!
//! With `--object-index`, on PostgreSQL it then builds the optional object index
//! (`sql/journal_object_index_pg.sql`), times the object filters again, and compares enqueue (the
//! `enqueue` benchmark's business transaction, with a capture envelope as payload) into a table
//! with and without that index.
//!
//! Each is run `--rounds` times after one warm-up (fewer when a round is slow: at most about
//! `--budget-seconds` per line, at least 3 rounds); median and 95th percentile are printed with
//! the ratios to the first page.
//!
//! ```text
//! cargo run --release -p hare-outbox-bench --bin journal
//! cargo run --release -p hare-outbox-bench --bin journal -- --backend postgres --object-index
//! cargo run --release -p hare-outbox-bench --bin journal -- --rows 100000 --backend sqlite
//! ```

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use chrono::Utc;
use clap::{Parser, ValueEnum};
use hare_outbox::backend::JournalBackend;
use hare_outbox::journal::{Cursor, EventQuery, Journal, TimelineParams};
use hare_outbox::postgres::PgBackend;
use hare_outbox::sqlite::SqliteBackend;
use hare_outbox::{EventStatus, Outbox, OutboxMessage, OutboxTable};
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::SqlitePool;

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Which {
    Postgres,
    Sqlite,
    Both,
}

#[derive(Parser)]
#[command(about = "journal pages by cursor, by OFFSET and filtered, on a million events")]
struct Cli {
    /// PostgreSQL server; a scratch schema is created and dropped.
    #[arg(
        long,
        env = "HARE_OUTBOX_BENCH_PG_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/test"
    )]
    database_url: String,
    /// Which backends to measure.
    #[arg(long, value_enum, default_value_t = Which::Both)]
    backend: Which,
    /// Events in the table.
    #[arg(long, default_value_t = 1_000_000)]
    rows: i64,
    /// How deep the deep page is, in events from the newest.
    #[arg(long, default_value_t = 900_000)]
    depth: i64,
    /// Timed rounds per line (after one warm-up).
    #[arg(long, default_value_t = 21)]
    rounds: usize,
    /// Stop a line's rounds after about this many seconds (at least 3 rounds).
    #[arg(long, default_value_t = 4.0)]
    budget_seconds: f64,
    /// Interleaved one-second rounds per cell of the enqueue comparison (PostgreSQL).
    #[arg(long, default_value_t = 5)]
    enqueue_rounds: usize,
    /// Also build the optional object index on PostgreSQL, time the object filters with it and
    /// compare enqueue with and without it (about 40 s more).
    #[arg(long)]
    object_index: bool,
}

/// Median and 95th percentile (nearest rank) of `samples`, in milliseconds.
fn stats(samples: &mut [f64]) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    let rank = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (rank(0.5), rank(0.95))
}

/// Times `run` after one warm-up; returns (median, p95) in milliseconds and the rounds run.
async fn time<F, Fut>(cli: &Cli, mut run: F) -> Result<(f64, f64, usize)>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<usize>>,
{
    run().await?;
    let started = Instant::now();
    let budget = Duration::from_secs_f64(cli.budget_seconds);
    let mut samples = Vec::with_capacity(cli.rounds);
    while samples.len() < cli.rounds && (samples.len() < 3 || started.elapsed() < budget) {
        let start = Instant::now();
        run().await?;
        samples.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    let (median, p95) = stats(&mut samples);
    Ok((median, p95, samples.len()))
}

/// What one backend needs beyond the journal: the OFFSET baseline.
trait Baseline: JournalBackend {
    fn offset_page(&self, limit: i64, offset: i64) -> impl Future<Output = Result<usize>> + Send;
}

impl Baseline for PgBackend {
    async fn offset_page(&self, limit: i64, offset: i64) -> Result<usize> {
        let rows = sqlx::query(include_str!("../../sql/journal_offset_pg.sql"))
            .bind(limit)
            .bind(offset)
            .fetch_all(self.pool())
            .await?;
        Ok(rows.len())
    }
}

impl Baseline for SqliteBackend {
    async fn offset_page(&self, limit: i64, offset: i64) -> Result<usize> {
        let rows = sqlx::query(include_str!("../../sql/journal_offset_sqlite.sql"))
            .bind(limit)
            .bind(offset)
            .fetch_all(self.pool())
            .await?;
        Ok(rows.len())
    }
}

/// Runs every line on `journal`, whose table holds `cli.rows` events.
async fn measure<B: Baseline>(cli: &Cli, name: &str, journal: &Journal<B>) -> Result<()> {
    let newest = journal.list(&EventQuery::new().with_limit(1)?).await?;
    let top = newest
        .events
        .first()
        .map(|e| e.sequence)
        .context("the table is empty")?;
    let page = 50;
    let list = |query: EventQuery| {
        let query = query.with_limit(page).map_err(anyhow::Error::from);
        async move {
            let query = query?;
            let events = journal.list(&query).await?.events;
            Ok::<usize, anyhow::Error>(events.len())
        }
    };
    let lines: Vec<(&str, EventQuery)> = vec![
        ("first page", EventQuery::new()),
        (
            "page 900k deep, cursor",
            EventQuery::new().with_cursor(Cursor::Before(top + 1 - cli.depth)),
        ),
        (
            "status dead",
            EventQuery::new().with_statuses(&[EventStatus::Dead]),
        ),
        (
            "topic billing.*",
            EventQuery::new().with_topics(&["billing.*"])?,
        ),
        ("author alice", EventQuery::new().with_author("alice")?),
        (
            "model sales_orders",
            EventQuery::new().with_object("sales_orders")?,
        ),
        (
            "object sales_orders #22",
            EventQuery::new().with_object("sales_orders #22")?,
        ),
    ];
    println!();
    println!("{name}: {} events, pages of {page}", cli.rows);
    println!(
        "{:<28} {:>10} {:>10} {:>8} {:>7} {:>14}",
        "line", "median ms", "p95 ms", "rows", "rounds", "median/first"
    );
    let mut first = None;
    let mut cursor_median = 0.0;
    for (label, query) in lines {
        let rows = list(query.clone()).await?;
        let (median, p95, rounds) = time(cli, || list(query.clone())).await?;
        let base = *first.get_or_insert(median);
        if label.ends_with("cursor") {
            cursor_median = median;
        }
        let label = label.replace("900k", &format!("{}k", cli.depth / 1000));
        println!(
            "{label:<28} {median:>10.2} {p95:>10.2} {rows:>8} {rounds:>7} {:>14.1}",
            median / base
        );
    }
    let backend = journal.backend().clone();
    let offset = cli.depth;
    let rows = backend.offset_page(i64::from(page), offset).await?;
    let (median, p95, rounds) = time(cli, || backend.offset_page(i64::from(page), offset)).await?;
    println!(
        "{:<28} {median:>10.2} {p95:>10.2} {rows:>8} {rounds:>7} {:>14.1}",
        format!("page {}k deep, OFFSET", cli.depth / 1000),
        median / first.unwrap_or(median)
    );
    println!(
        "OFFSET / cursor at that depth: {:.0}x",
        median / cursor_median.max(f64::EPSILON)
    );
    for (label, window, buckets) in [
        ("timeline 1 h / 60 buckets", 3_600, 60),
        ("timeline 24 h / 96 buckets", 86_400, 96),
    ] {
        let params = TimelineParams::last(Duration::from_secs(window), buckets, Utc::now())?;
        let (median, p95, rounds) =
            time(cli, || async { Ok(journal.timeline(&params).await?.len()) }).await?;
        println!(
            "{label:<28} {median:>10.2} {p95:>10.2} {buckets:>8} {rounds:>7} {:>14.1}",
            median / first.unwrap_or(median)
        );
    }
    Ok(())
}

/// The optional object index of `table` (sql/journal_object_index_pg.sql).
fn object_index_sql(table: &str) -> String {
    include_str!("../../sql/journal_object_index_pg.sql").replace("{table}", table)
}

/// On PostgreSQL: the object filter with the optional index, and what the index costs enqueue.
async fn object_index(cli: &Cli, pool: &PgPool, journal: &Journal<PgBackend>) -> Result<()> {
    let start = Instant::now();
    sqlx::raw_sql(sqlx::AssertSqlSafe(object_index_sql("outbox")))
        .execute(pool)
        .await?;
    sqlx::query("ANALYZE outbox").execute(pool).await?;
    println!();
    println!(
        "postgres with the object index (built in {:.1} s):",
        start.elapsed().as_secs_f64()
    );
    for object in ["sales_orders #22", "sales_orders"] {
        let query = EventQuery::new().with_object(object)?.with_limit(50)?;
        let rows = journal.list(&query).await?.events.len();
        let (median, p95, rounds) = time(cli, || async {
            Ok(journal.list(&query).await?.events.len())
        })
        .await?;
        println!(
            "{:<28} {median:>10.2} {p95:>10.2} {rows:>8} {rounds:>7}",
            format!("object {object}")
        );
    }

    // Enqueue with and without the index: the enqueue benchmark's business transaction (one
    // UPDATE and one event), with a capture envelope as payload so the index holds real keys.
    sqlx::query("CREATE TABLE accounts (id bigint PRIMARY KEY, balance bigint NOT NULL)")
        .execute(pool)
        .await?;
    sqlx::query("INSERT INTO accounts SELECT g, 0 FROM generate_series(0, 63) g")
        .execute(pool)
        .await?;
    let plain = Outbox::new(
        PgBackend::new(pool.clone()),
        OutboxTable::parse("enqueue_plain")?,
    );
    let indexed = Outbox::new(
        PgBackend::new(pool.clone()),
        OutboxTable::parse("enqueue_indexed")?,
    );
    plain.migrate().await?;
    indexed.migrate().await?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(object_index_sql("enqueue_indexed")))
        .execute(pool)
        .await?;
    println!();
    println!(
        "enqueue (UPDATE + one envelope event per transaction), {} interleaved rounds of 1 s",
        cli.enqueue_rounds
    );
    println!(
        "{:<6} {:>14} {:>14} {:>14}",
        "conns", "no index tx/s", "index tx/s", "index/none"
    );
    for conns in [1usize, 4] {
        let (mut without, mut with) = (Vec::new(), Vec::new());
        for _ in 0..cli.enqueue_rounds {
            without.push(enqueue_rate(pool, &plain, conns).await?);
            with.push(enqueue_rate(pool, &indexed, conns).await?);
        }
        let (without, _) = stats(&mut without);
        let (with, _) = stats(&mut with);
        println!(
            "{conns:<6} {without:>14.0} {with:>14.0} {:>14.3}",
            with / without
        );
    }
    Ok(())
}

/// Business transactions per second into `outbox` over one second at `conns` connections.
async fn enqueue_rate(pool: &PgPool, outbox: &Outbox<PgBackend>, conns: usize) -> Result<f64> {
    let deadline = Instant::now() + Duration::from_secs(1);
    let mut tasks = Vec::new();
    for writer in 0..conns {
        let (pool, outbox) = (pool.clone(), outbox.clone());
        tasks.push(tokio::spawn(async move {
            let mut done = 0u64;
            while Instant::now() < deadline {
                let mut tx = pool.begin().await?;
                sqlx::query("UPDATE accounts SET balance = balance + 1 WHERE id = $1")
                    .bind(writer as i64)
                    .execute(&mut *tx)
                    .await?;
                let pk = done as i64 * conns as i64 + writer as i64;
                let payload = serde_json::json!({
                    "model": "sales_orders", "operation": "updated", "pk": pk,
                    "changed": ["status"], "before": {"status": "confirmed"},
                    "after": {"status": "shipped"},
                });
                outbox
                    .enqueue(&mut *tx, OutboxMessage::new("doc.updated", payload))
                    .await?;
                tx.commit().await?;
                done += 1;
            }
            anyhow::Ok(done)
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await??;
    }
    Ok(total as f64)
}

/// A scratch schema on the server; returns a pool bound to it and its name.
async fn pg_scratch(url: &str) -> Result<(PgPool, String)> {
    let schema = format!("hare_bench_{:08x}", uuid::Uuid::new_v4().as_u128() as u32);
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .with_context(|| format!("connecting to {url}"))?;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA \"{schema}\"")))
        .execute(&admin)
        .await?;
    admin.close().await;
    let path = schema.clone();
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .after_connect(move |conn, _| {
            let sql = format!("SET search_path TO \"{path}\"");
            Box::pin(async move {
                sqlx::query(sqlx::AssertSqlSafe(sql)).execute(conn).await?;
                Ok(())
            })
        })
        .connect(url)
        .await?;
    Ok((pool, schema))
}

async fn postgres(cli: &Cli) -> Result<()> {
    let (pool, schema) = pg_scratch(&cli.database_url).await?;
    let outbox = Outbox::new(PgBackend::new(pool.clone()), OutboxTable::parse("outbox")?);
    outbox.migrate().await?;
    let start = Instant::now();
    sqlx::query(include_str!("../../sql/journal_fill_pg.sql"))
        .bind(cli.rows)
        .execute(&pool)
        .await
        .context("filling the table")?;
    sqlx::query("VACUUM ANALYZE outbox").execute(&pool).await?;
    println!(
        "postgres: {} events written and analyzed in {:.1} s",
        cli.rows,
        start.elapsed().as_secs_f64()
    );
    let journal = Journal::new(outbox.backend().clone(), outbox.table().clone());
    let mut result = measure(cli, "postgres", &journal).await;
    if result.is_ok() && cli.object_index {
        result = object_index(cli, &pool, &journal).await;
    }
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA \"{schema}\" CASCADE"
    )))
    .execute(&pool)
    .await?;
    result
}

async fn sqlite(cli: &Cli) -> Result<()> {
    let dir = std::env::temp_dir().join(format!(
        "hare-journal-bench-{:08x}",
        uuid::Uuid::new_v4().as_u128() as u32
    ));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("journal.db");
    let result = async {
        let pool: SqlitePool =
            hare_outbox::sqlite::connect(&format!("sqlite://{}", path.display())).await?;
        let outbox = Outbox::new(
            SqliteBackend::new(pool.clone()),
            OutboxTable::parse("outbox")?,
        );
        outbox.migrate().await?;
        let start = Instant::now();
        sqlx::query(include_str!("../../sql/journal_fill_sqlite.sql"))
            .bind(cli.rows)
            .bind(Utc::now().timestamp_micros() as f64 / 1e6)
            .execute(&pool)
            .await
            .context("filling the table")?;
        sqlx::query("ANALYZE").execute(&pool).await?;
        println!(
            "sqlite: {} events written and analyzed in {:.1} s",
            cli.rows,
            start.elapsed().as_secs_f64()
        );
        let journal = Journal::new(outbox.backend().clone(), outbox.table().clone());
        let result = measure(cli, "sqlite", &journal).await;
        pool.close().await;
        result
    }
    .await;
    std::fs::remove_dir_all(&dir)?;
    result
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    if cli.depth >= cli.rows {
        anyhow::bail!(
            "--depth {} must be below --rows {}: the deep page must exist",
            cli.depth,
            cli.rows
        );
    }
    if matches!(cli.backend, Which::Postgres | Which::Both) {
        postgres(&cli).await?;
    }
    if matches!(cli.backend, Which::Sqlite | Which::Both) {
        sqlite(&cli).await?;
    }
    Ok(())
}
