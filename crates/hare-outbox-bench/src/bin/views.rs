//! `views`: the operator's pages on a large table, PostgreSQL and SQLite, in one run.
//!
//! Fills an outbox table with `--rows` events (1,000,000 by default, one statement:
//! `sql/views_fill_pg.sql`, `sql/views_fill_sqlite.sql`): the journal benchmark's events as
//! capture triggers write them now (the envelope names its table beside the label) with the
//! default ordering key `{label}:{pk}` (20,000 keys); per hundred events one dead letter, one
//! retrying, one pending and 97 published; 400 pending events leased by four relays. Then times,
//! through `Journal` (the statements) and through the dashboard served on loopback (the page,
//! rendered and read by an HTTP client):
//!
//! - the journal's first page (50 events), and first pages filtered by object in the table form
//!   (`plan_prod_orders`, a quarter of the events; `plan_prod_orders #22`, 50 events: a scan);
//! - the event page of a delivered event half-way down the table (`get_by_sequence` and the
//!   neighbours of its key: an index probe for undelivered ones, at most 2 × 10,000 rows of the
//!   primary key for delivered ones), and of a dead letter;
//! - the held keys' first and second page (50 keys; most keys with undelivered events are held
//!   here);
//! - topics (counts per state, published in the last hour) and relays;
//! - then, after every undelivered event but one key's head is made healthy: the held keys'
//!   first page when one key in 15,000 is held — the walk stops at 10,000 keys and says where to
//!   go on (the worst page).
//!
//! Each line runs `--rounds` times after one warm-up (fewer when slow: about `--budget-seconds`
//! per line, at least 3 rounds); median and 95th percentile in milliseconds. The scratch schema
//! (PostgreSQL) and the file (SQLite) are dropped at the end.
//!
//! ```text
//! cargo run --release -p hare-outbox-bench --bin views
//! cargo run --release -p hare-outbox-bench --bin views -- --backend sqlite --rows 100000
//! ```

#[path = "../bench_accounts.rs"]
mod bench_accounts;

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use chrono::Utc;
use clap::{Parser, ValueEnum};
use hare_outbox::backend::JournalBackend;
use hare_outbox::journal::{EventQuery, Journal};
use hare_outbox::postgres::PgBackend;
use hare_outbox::sqlite::SqliteBackend;
use hare_outbox::{Outbox, OutboxTable};
use hare_outbox_dashboard::{Dashboard, DashboardOptions};

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Which {
    Postgres,
    Sqlite,
    Both,
}

#[derive(Parser)]
#[command(about = "the dashboard's event page, held keys, topics and relays on a million events")]
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
    /// Timed rounds per line (after one warm-up).
    #[arg(long, default_value_t = 21)]
    rounds: usize,
    /// Stop a line's rounds after about this many seconds (at least 3 rounds).
    #[arg(long, default_value_t = 4.0)]
    budget_seconds: f64,
}

/// Median and 95th percentile (nearest rank) of `samples`, in milliseconds.
fn stats(samples: &mut [f64]) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    let rank = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (rank(0.5), rank(0.95))
}

/// Runs `run` once, then times it; prints the line.
async fn line<F, Fut>(cli: &Cli, label: &str, mut run: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<usize>>,
{
    let rows = run().await?;
    let started = Instant::now();
    let budget = Duration::from_secs_f64(cli.budget_seconds);
    let mut samples = Vec::with_capacity(cli.rounds);
    while samples.len() < cli.rounds && (samples.len() < 3 || started.elapsed() < budget) {
        let start = Instant::now();
        run().await?;
        samples.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    let rounds = samples.len();
    let (median, p95) = stats(&mut samples);
    println!("{label:<40} {median:>10.2} {p95:>10.2} {rows:>8} {rounds:>7}");
    Ok(())
}

/// The dashboard of `journal` served on 127.0.0.1; returns its base URL and a stop signal.
async fn serve<B: JournalBackend>(
    journal: Journal<B>,
) -> Result<(String, tokio::sync::oneshot::Sender<()>)> {
    let dashboard = Dashboard::new(journal, DashboardOptions::new())?;
    let listener = dashboard.bind("127.0.0.1:0".parse()?).await?;
    let base = format!("http://{}", listener.local_addr()?);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = dashboard
            .serve(listener, async {
                let _ = stopped.await;
            })
            .await;
    });
    Ok((base, stop))
}

/// GETs `url`; fails unless it answers 200. Returns the body's length in bytes.
async fn page(http: &reqwest::Client, url: String) -> Result<usize> {
    let response = http.get(&url).send().await?;
    let status = response.status();
    let body = response.text().await?;
    anyhow::ensure!(status.is_success(), "{url} answered {status}: {body}");
    Ok(body.len())
}

/// The sequence of an event of `query` (its first page's first event).
async fn first<B: JournalBackend>(journal: &Journal<B>, query: EventQuery) -> Result<i64> {
    journal
        .list(&query.with_limit(1)?)
        .await?
        .events
        .first()
        .map(|e| e.sequence)
        .context("no event matched")
}

/// Every line on `journal`, whose table holds `cli.rows` events; `quiet` then makes all keys
/// but one healthy and `again` times the held keys' first page once more.
async fn measure<B: JournalBackend>(
    cli: &Cli,
    name: &str,
    journal: &Journal<B>,
    quiet: impl AsyncFnOnce() -> Result<()>,
) -> Result<()> {
    let (base, stop) = serve(journal.clone()).await?;
    let http = reqwest::Client::new();
    let top = first(journal, EventQuery::new()).await?;
    let middle = first(
        journal,
        EventQuery::new().with_cursor(hare_outbox::journal::Cursor::Before(top / 2)),
    )
    .await?;
    let dead = first(
        journal,
        EventQuery::new().with_statuses(&[hare_outbox::EventStatus::Dead]),
    )
    .await?;
    println!();
    println!("{name}: {} events", cli.rows);
    println!(
        "{:<40} {:>10} {:>10} {:>8} {:>7}",
        "line", "median ms", "p95 ms", "rows", "rounds"
    );
    let list = |query: EventQuery| async move {
        Ok::<usize, anyhow::Error>(journal.list(&query.with_limit(50)?).await?.events.len())
    };
    line(cli, "journal first page", || list(EventQuery::new())).await?;
    line(cli, "  page GET /", || page(&http, format!("{base}/"))).await?;
    line(cli, "journal object plan_prod_orders", || {
        list(
            EventQuery::new()
                .with_object("plan_prod_orders")
                .unwrap_or_default(),
        )
    })
    .await?;
    line(cli, "journal object plan_prod_orders #22", || {
        list(
            EventQuery::new()
                .with_object("plan_prod_orders #22")
                .unwrap_or_default(),
        )
    })
    .await?;
    let event_page = |sequence: i64| async move {
        let event = journal
            .get_by_sequence(sequence)
            .await?
            .context("the event exists")?;
        let around = journal.neighbours(&event).await?;
        Ok::<usize, anyhow::Error>(
            1 + usize::from(around.previous.is_some()) + usize::from(around.next.is_some()),
        )
    };
    line(cli, "event page, delivered (get + neighbours)", || {
        event_page(middle)
    })
    .await?;
    line(cli, "  page GET /events/{seq}", || {
        page(&http, format!("{base}/events/{middle}"))
    })
    .await?;
    line(cli, "event page, dead letter", || event_page(dead)).await?;
    let held = |after: String| async move {
        Ok::<usize, anyhow::Error>(journal.held_keys(&after, 50).await?.keys.len())
    };
    let second = journal
        .held_keys("", 50)
        .await?
        .next_after
        .unwrap_or_default();
    line(cli, "held keys, first page", || held(String::new())).await?;
    line(cli, "  page GET /keys", || {
        page(&http, format!("{base}/keys"))
    })
    .await?;
    line(cli, "held keys, second page", || held(second.clone())).await?;
    line(cli, "topics (published in the last hour)", || async {
        Ok(journal
            .topic_stats("", 50, Duration::from_secs(3600))
            .await?
            .len())
    })
    .await?;
    line(cli, "  page GET /topics", || {
        page(&http, format!("{base}/topics"))
    })
    .await?;
    line(cli, "relays", || async {
        Ok(journal.relay_leases("", 50).await?.len())
    })
    .await?;
    line(cli, "  page GET /relays", || {
        page(&http, format!("{base}/relays"))
    })
    .await?;
    quiet().await?;
    let walked = journal.held_keys("", 50).await?.walked;
    line(
        cli,
        &format!("held keys, 1 held key, walk of {walked}"),
        || held(String::new()),
    )
    .await?;
    line(cli, "  page GET /keys", || {
        page(&http, format!("{base}/keys"))
    })
    .await?;
    let _ = stop.send(());
    Ok(())
}

async fn postgres(cli: &Cli) -> Result<()> {
    let (pool, schema) = bench_accounts::scratch(&cli.database_url).await?;
    let result = async {
        let outbox = Outbox::new(PgBackend::new(pool.clone()), OutboxTable::parse("outbox")?);
        outbox.migrate().await?;
        let start = Instant::now();
        sqlx::query(include_str!("../../sql/views_fill_pg.sql"))
            .bind(cli.rows)
            .execute(&pool)
            .await
            .context("filling the table")?;
        sqlx::query(
            "UPDATE outbox SET leased_by = 'relay-' || ((sequence / 100) % 4), \
             lease_until = now() + interval '1 hour' WHERE sequence IN (\
             SELECT sequence FROM outbox WHERE published_at IS NULL \
             AND dead_lettered_at IS NULL AND attempts = 0 ORDER BY sequence DESC LIMIT 400)",
        )
        .execute(&pool)
        .await?;
        sqlx::query("VACUUM ANALYZE outbox").execute(&pool).await?;
        println!(
            "postgres: {} events written and analyzed in {:.1} s",
            cli.rows,
            start.elapsed().as_secs_f64()
        );
        let journal = Journal::new(outbox.backend().clone(), outbox.table().clone());
        let quiet = async || {
            sqlx::query(
                "UPDATE outbox SET dead_lettered_at = NULL, attempts = 0, last_error = NULL, \
                 next_attempt_at = NULL WHERE published_at IS NULL",
            )
            .execute(&pool)
            .await?;
            sqlx::query(
                "UPDATE outbox SET dead_lettered_at = now(), attempts = 5, last_error = 'rejected' \
                 WHERE sequence = (SELECT min(sequence) FROM outbox WHERE published_at IS NULL \
                 AND ordering_key = (SELECT max(ordering_key) FROM outbox WHERE published_at IS NULL))",
            )
            .execute(&pool)
            .await?;
            sqlx::query("VACUUM ANALYZE outbox").execute(&pool).await?;
            Ok(())
        };
        measure(cli, "postgres", &journal, quiet).await
    }
    .await;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA \"{schema}\" CASCADE"
    )))
    .execute(&pool)
    .await?;
    pool.close().await;
    result
}

async fn sqlite(cli: &Cli) -> Result<()> {
    let dir = std::env::temp_dir().join(format!(
        "hare-views-bench-{:08x}",
        uuid::Uuid::new_v4().as_u128() as u32
    ));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("views.db");
    let result = async {
        let pool = hare_outbox::sqlite::connect(&format!("sqlite://{}", path.display())).await?;
        let outbox = Outbox::new(
            SqliteBackend::new(pool.clone()),
            OutboxTable::parse("outbox")?,
        );
        outbox.migrate().await?;
        let start = Instant::now();
        let now = Utc::now().timestamp_micros() as f64 / 1e6;
        sqlx::query(include_str!("../../sql/views_fill_sqlite.sql"))
            .bind(cli.rows)
            .bind(now)
            .execute(&pool)
            .await
            .context("filling the table")?;
        sqlx::query(
            "UPDATE outbox SET leased_by = 'relay-' || ((sequence / 100) % 4), \
             lease_until = strftime('%Y-%m-%dT%H:%M:%f', 'now', '+1 hour') || '000Z' \
             WHERE sequence IN (SELECT sequence FROM outbox WHERE published_at IS NULL \
             AND dead_lettered_at IS NULL AND attempts = 0 ORDER BY sequence DESC LIMIT 400)",
        )
        .execute(&pool)
        .await?;
        sqlx::query("ANALYZE").execute(&pool).await?;
        println!(
            "sqlite: {} events written and analyzed in {:.1} s",
            cli.rows,
            start.elapsed().as_secs_f64()
        );
        let journal = Journal::new(outbox.backend().clone(), outbox.table().clone());
        let quiet = async || {
            sqlx::query(
                "UPDATE outbox SET dead_lettered_at = NULL, attempts = 0, last_error = NULL, \
                 next_attempt_at = NULL WHERE published_at IS NULL",
            )
            .execute(&pool)
            .await?;
            sqlx::query(
                "UPDATE outbox SET dead_lettered_at = strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000Z', \
                 attempts = 5, last_error = 'rejected' \
                 WHERE sequence = (SELECT min(sequence) FROM outbox WHERE published_at IS NULL \
                 AND ordering_key = (SELECT max(ordering_key) FROM outbox WHERE published_at IS NULL))",
            )
            .execute(&pool)
            .await?;
            sqlx::query("ANALYZE").execute(&pool).await?;
            Ok(())
        };
        let result = measure(cli, "sqlite", &journal, quiet).await;
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
    anyhow::ensure!(
        cli.rows >= 1000,
        "--rows {} is too few; use at least 1000 so every state has events",
        cli.rows
    );
    if matches!(cli.backend, Which::Postgres | Which::Both) {
        postgres(&cli).await?;
    }
    if matches!(cli.backend, Which::Sqlite | Which::Both) {
        sqlite(&cli).await?;
    }
    Ok(())
}
