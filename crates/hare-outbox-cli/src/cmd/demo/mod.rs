//! `hare-outbox demo`: the main job with zero set-up.
//!
//! A fresh SQLite file with ERP-like tables, each captured by a change-capture trigger; a simulated
//! workload changes documents, each change in one transaction that names its author (the
//! transaction's context), and the triggers write a `doc.updated` event per changed row; at the
//! same time a relay, woken in-process after each commit, delivers the events to a printer that
//! plays a subscriber (refusing a share of deliveries, so retries show). It ends when every
//! written event is delivered or dead-lettered — or on Ctrl-C — with one summary line. With
//! `--http` the dashboard shows the same outbox as a journal, and stays up with the relay after
//! the workload, so dead letters can be retried from the browser, until Ctrl-C.

mod erp;

use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use hare_outbox::sqlite::SqliteBackend;
use hare_outbox::{
    CancellationToken, DeliveryError, FnDelivery, InProcessWakeup, Outbox, OutboxEvent,
    OutboxRelay, OutboxTable, RelayConfig, RelayStats,
};
use serde_json::{Value, json};

use crate::args::DemoArgs;
use crate::config::dashboard::ENV_DASHBOARD_TOKEN;
use crate::error::usage;

/// Longest wait for the relay to catch up once the workload is done.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs the demo until its events are delivered or `shutdown` is cancelled.
///
/// # Errors
/// A usage error for out-of-range options; a run-time error when SQLite fails or the relay does
/// not catch up within a minute.
pub async fn run(args: DemoArgs, shutdown: CancellationToken) -> anyhow::Result<()> {
    check(&args)?;
    let pool = open(&args.database).await?;
    let mut rng = fastrand::Rng::new();
    erp::create(&pool, &mut rng).await?;
    // The in-process wake-up: the relay below polls as soon as a change commits.
    let outbox = Outbox::new(SqliteBackend::new(pool.clone()), OutboxTable::default())
        .with_wakeup(InProcessWakeup::new())?;
    outbox
        .migrate()
        .await
        .context("creating the outbox table")?;
    // Installed after the first documents exist: the journal starts with the first change.
    for capture in erp::captures() {
        capture
            .install(&outbox)
            .await
            .with_context(|| format!("installing the change capture of {}", capture.table))?;
    }

    eprintln!(
        "demo: {} document changes at {} into {}, subscriber refusing {:.0}% of deliveries; Ctrl-C stops early",
        args.events,
        if args.rate > 0.0 {
            format!("{} per second", args.rate)
        } else {
            "full speed".to_owned()
        },
        args.database.display(),
        args.failure_rate * 100.0
    );
    let printer = Arc::new(Printer::new(args.json, args.failure_rate));
    if !args.json {
        printer.header();
    }
    let delivery = {
        let printer = printer.clone();
        FnDelivery::new(move |event: OutboxEvent| {
            let printer = printer.clone();
            async move { printer.deliver(&event) }
        })
    };
    let config = RelayConfig::default()
        .with_name(format!("demo:{}", std::process::id()))
        // Wake-ups bring new events at once; polling finds the retries that fall due.
        .with_poll_interval(Duration::from_millis(250))
        .with_batch_size(100)
        .with_retry_base(Duration::from_millis(100))
        .with_retry_max(Duration::from_secs(1))
        .with_lease(Duration::from_secs(10))
        .with_delivery_timeout(Duration::from_secs(5));
    let relay = Arc::new(OutboxRelay::new(outbox.clone(), delivery, config)?);
    let dashboard_stop = CancellationToken::new();
    let dashboard = match &args.http {
        Some(address) => Some(start_dashboard(address, &pool, dashboard_stop.clone()).await?),
        None => None,
    };
    let relay_stop = CancellationToken::new();
    let relay_task = {
        let relay = relay.clone();
        let stop = relay_stop.clone();
        tokio::spawn(async move { relay.run(stop).await })
    };

    let workload = workload(&outbox, &args, &mut rng, &shutdown).await;
    // The events the captures wrote: one per changed row, so a change that opened a document
    // wrote two.
    let written = count_events(&pool, &outbox).await?;
    let drained = if workload.is_ok() {
        drain(&relay, written, &shutdown).await
    } else {
        false
    };
    if dashboard.is_some() && workload.is_ok() && !shutdown.is_cancelled() {
        eprintln!("demo: workload done; the dashboard and the relay stay up until Ctrl-C");
        shutdown.cancelled().await;
    }
    relay_stop.cancel();
    relay_task
        .await
        .context("the relay task failed")?
        .context("the relay failed")?;
    dashboard_stop.cancel();
    if let Some(dashboard) = dashboard {
        dashboard
            .await
            .context("the dashboard task failed")?
            .context("the dashboard failed")?;
    }
    pool.close().await;

    let stats = relay.stats();
    let held = if stats.dead_lettered > 0 {
        held_behind_dead_letters(&relay).await.unwrap_or(0)
    } else {
        0
    };
    let summary = Summary::new(written, stats, held);
    printer.summary(&summary, shutdown.is_cancelled());
    if let Err(error) = workload {
        return Err(error.context("the workload failed"));
    }
    if !drained && !shutdown.is_cancelled() {
        anyhow::bail!(
            "the relay did not deliver every event within {} s; {} still pending",
            DRAIN_TIMEOUT.as_secs(),
            summary.pending
        );
    }
    Ok(())
}

/// Serves the dashboard over the demo's outbox on `address` (loopback only) until `stop`;
/// prints its URL and the token of its buttons on stderr.
async fn start_dashboard(
    address: &str,
    pool: &sqlx::SqlitePool,
    stop: CancellationToken,
) -> anyhow::Result<tokio::task::JoinHandle<anyhow::Result<()>>> {
    use hare_outbox::Journal;
    use hare_outbox_dashboard::{Dashboard, DashboardOptions};
    let addr: std::net::SocketAddr = address.parse().map_err(|_| {
        usage(format!(
            "--http {address:?} is not an address; use a loopback host:port such as 127.0.0.1:8080"
        ))
    })?;
    if !addr.ip().is_loopback() {
        return Err(usage(format!(
            "--http {address} is not a loopback address; the demo serves its dashboard on 127.0.0.1 or ::1 only"
        )));
    }
    let (token, shown) = match std::env::var(ENV_DASHBOARD_TOKEN) {
        Ok(token) if !token.trim().is_empty() => (token, format!("${ENV_DASHBOARD_TOKEN}")),
        _ => {
            let token: String = std::iter::repeat_with(fastrand::alphanumeric)
                .take(24)
                .collect();
            (token.clone(), token)
        }
    };
    let journal = Journal::new(SqliteBackend::new(pool.clone()), OutboxTable::default());
    let options = DashboardOptions::new()
        .with_token(Some(token))
        .map_err(|e| usage(format!("dashboard token from {ENV_DASHBOARD_TOKEN}: {e}")))?
        .with_title("hare-outbox demo")?;
    let dashboard = Dashboard::new(journal, options)?;
    let listener = dashboard.bind(addr).await?;
    let local = listener
        .local_addr()
        .context("reading the dashboard's address")?;
    eprintln!("demo: dashboard on http://{local}/ (token for its buttons: {shown})");
    Ok(tokio::spawn(async move {
        dashboard
            .serve(listener, async move { stop.cancelled().await })
            .await?;
        Ok(())
    }))
}

fn check(args: &DemoArgs) -> anyhow::Result<()> {
    if !args.rate.is_finite() || args.rate < 0.0 {
        return Err(usage(format!(
            "--rate {} is not allowed; use changes per second, 0 or more (0 = full speed)",
            args.rate
        )));
    }
    if !(0.0..=1.0).contains(&args.failure_rate) {
        return Err(usage(format!(
            "--failure-rate {} is not allowed; use a share from 0 to 1",
            args.failure_rate
        )));
    }
    Ok(())
}

/// Deletes the previous demo database and opens a fresh one.
async fn open(path: &Path) -> anyhow::Result<sqlx::SqlitePool> {
    if path.is_dir() {
        return Err(usage(format!(
            "--database {} is a directory; give a file name",
            path.display()
        )));
    }
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut file = path.as_os_str().to_owned();
        file.push(suffix);
        match std::fs::remove_file(&file) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(anyhow::Error::new(e).context(format!(
                    "removing the old demo database {}",
                    Path::new(&file).display()
                )));
            }
        }
    }
    hare_outbox::sqlite::connect(&sqlite_url(path))
        .await
        .with_context(|| format!("creating the demo database {}", path.display()))
}

/// `sqlite:<path>`, with the characters a SQLite URL treats specially (`%`, `?`, `#`) escaped.
fn sqlite_url(path: &Path) -> String {
    let mut url = String::from("sqlite:");
    for c in path.to_string_lossy().chars() {
        match c {
            '%' => url.push_str("%25"),
            '?' => url.push_str("%3F"),
            '#' => url.push_str("%23"),
            c => url.push(c),
        }
    }
    url
}

/// The number of events in the outbox table.
async fn count_events(
    pool: &sqlx::SqlitePool,
    outbox: &Outbox<SqliteBackend>,
) -> anyhow::Result<u64> {
    let sql = format!("SELECT COUNT(*) FROM {}", outbox.table());
    let count: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .fetch_one(pool)
        .await
        .context("counting the events written")?;
    Ok(u64::try_from(count).unwrap_or_default())
}

/// Makes `args.events` changes at `args.rate` per second (fewer on Ctrl-C), each followed by a
/// wake-up of the relay.
async fn workload(
    outbox: &Outbox<SqliteBackend>,
    args: &DemoArgs,
    rng: &mut fastrand::Rng,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    let mut ticker = (args.rate > 0.0).then(|| {
        let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / args.rate));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker
    });
    let mut changes = 0;
    while changes < args.events {
        if let Some(ticker) = ticker.as_mut() {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = ticker.tick() => {}
            }
        } else if shutdown.is_cancelled() {
            break;
        }
        let mut tries = 0;
        loop {
            tries += 1;
            match erp::change_one(outbox, rng).await {
                Ok(topics) => {
                    // The triggers wrote the events, which the transaction wrapper does not see:
                    // signal their topics by hand. A lost signal only waits for the next poll.
                    if let Some(wakeup) = outbox.wakeup() {
                        let _ = wakeup.signal(&topics).await;
                    }
                    break;
                }
                // SQLite may report a busy database under contention; the change is retried whole.
                Err(e) if tries < 5 => {
                    tracing::debug!(error = %format!("{e:#}"), "document change failed; trying again");
                    tokio::time::sleep(Duration::from_millis(20 * tries)).await;
                }
                Err(e) => return Err(e),
            }
        }
        changes += 1;
    }
    Ok(())
}

/// Waits until every written event is delivered, dead-lettered or held back behind a dead
/// letter of its ordering key (it waits for an operator's retry); false on Ctrl-C or timeout.
async fn drain(
    relay: &OutboxRelay<SqliteBackend>,
    written: u64,
    shutdown: &CancellationToken,
) -> bool {
    let deadline = tokio::time::Instant::now() + DRAIN_TIMEOUT;
    loop {
        let stats = relay.stats();
        let settled = stats.delivered + stats.dead_lettered;
        if settled >= written {
            return true;
        }
        if stats.dead_lettered > 0
            && settled + held_behind_dead_letters(relay).await.unwrap_or(0) >= written
        {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::select! {
            _ = shutdown.cancelled() => return false,
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
    }
}

/// Events held back behind a dead-lettered head of their ordering key (the heads not counted).
///
/// # Errors
/// When the journal cannot be read.
async fn held_behind_dead_letters(relay: &OutboxRelay<SqliteBackend>) -> hare_outbox::Result<u64> {
    let journal = relay.journal();
    let mut held = 0;
    let mut after = String::new();
    loop {
        let page = journal.held_keys(&after, 1000).await?;
        held += page
            .keys
            .iter()
            .filter(|k| k.head.dead_lettered_at.is_some())
            .map(|k| u64::try_from(k.waiting - 1).unwrap_or(0))
            .sum::<u64>();
        match page.next_after {
            Some(next) => after = next,
            None => return Ok(held),
        }
    }
}

/// The numbers of the summary line.
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    written: u64,
    delivered: u64,
    /// Failed attempts recorded, including those that dead-lettered their event.
    failed: u64,
    dead: u64,
    /// Events held back behind a dead letter of their key, waiting for its retry.
    held: u64,
    pending: u64,
}

impl Summary {
    fn new(written: u64, stats: RelayStats, held: u64) -> Summary {
        Summary {
            written,
            delivered: stats.delivered,
            failed: stats.failed + stats.dead_lettered,
            dead: stats.dead_lettered,
            held,
            pending: written.saturating_sub(stats.delivered + stats.dead_lettered + held),
        }
    }
}

/// Plays the subscriber: prints each delivered event, refuses a share of deliveries.
struct Printer {
    json: bool,
    failure_rate: f64,
    out: std::sync::Mutex<()>,
}

impl Printer {
    fn new(json: bool, failure_rate: f64) -> Printer {
        Printer {
            json,
            failure_rate,
            out: std::sync::Mutex::new(()),
        }
    }

    fn line(&self, text: &str) {
        let _guard = self.out.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = std::io::stdout().lock();
        // A closed stdout (piped into `head`) must not fail deliveries or stop the demo.
        let _ = writeln!(out, "{text}");
        let _ = out.flush();
    }

    fn header(&self) {
        self.line(&format!(
            "{:>5}  {:<12}  {:<25} {:<25} {}",
            "№", "event", "object", "who", "data"
        ));
    }

    fn deliver(&self, event: &OutboxEvent) -> Result<(), DeliveryError> {
        if self.failure_rate > 0.0 && fastrand::f64() < self.failure_rate {
            let attempt = event.attempts + 1;
            if !self.json {
                self.line(&format!(
                    "{:>5}  {:<12}  {:<25} ✗ attempt {attempt} refused by the subscriber (simulated); the relay retries with backoff",
                    event.sequence,
                    event.topic,
                    object(event),
                ));
            }
            return Err(DeliveryError::new(
                "subscriber unavailable (simulated by the demo)",
            ));
        }
        if self.json {
            self.line(&hare_outbox::delivery::json_line(event));
        } else {
            let author = event
                .headers
                .get("author")
                .and_then(Value::as_str)
                .unwrap_or("-");
            let retried = if event.attempts > 0 {
                format!("  (delivered after {} failed attempt(s))", event.attempts)
            } else {
                String::new()
            };
            self.line(&format!(
                "{:>5}  {:<12}  {:<25} {:<25} {}{retried}",
                event.sequence,
                event.topic,
                object(event),
                author,
                describe(&event.payload),
            ));
        }
        Ok(())
    }

    fn summary(&self, summary: &Summary, interrupted: bool) {
        let Summary {
            written,
            delivered,
            failed,
            dead,
            held,
            pending,
        } = *summary;
        if self.json {
            self.line(
                &json!({"summary": {
                    "written": written,
                    "delivered": delivered,
                    "failed": failed,
                    "dead": dead,
                    "held": held,
                    "pending": pending,
                    "interrupted": interrupted,
                }})
                .to_string(),
            );
        } else {
            let tail = if interrupted || pending > 0 {
                format!(" (stopped early: {pending} pending)")
            } else {
                String::new()
            };
            let held = if held > 0 {
                format!(", held behind a dead letter {held}")
            } else {
                String::new()
            };
            self.line(&format!(
                "demo: written {written}, delivered {delivered}, failed {failed}, dead {dead}{held}{tail}"
            ));
        }
    }
}

/// `sales_orders #22`, from the ordering key `sales_orders:22`.
fn object(event: &OutboxEvent) -> String {
    match event
        .ordering_key
        .as_deref()
        .and_then(|k| k.split_once(':'))
    {
        Some((table, id)) => format!("{table} #{id}"),
        None => "-".to_owned(),
    }
}

/// The data column, from the capture envelope: for an update
/// `status, eta_date (was status="confirmed", eta_date=null)`; for an insert
/// `new: number="SO-00011", status="draft"` (its non-null columns); for a delete `deleted`.
fn describe(payload: &Value) -> String {
    let object = |name: &str| payload.get(name).and_then(Value::as_object);
    match payload.get("operation").and_then(Value::as_str) {
        Some("inserted") => {
            let values: Vec<String> = object("after")
                .map(|after| {
                    after
                        .iter()
                        .filter(|(name, value)| *name != "id" && !value.is_null())
                        .map(|(name, value)| format!("{name}={value}"))
                        .collect()
                })
                .unwrap_or_default();
            format!("new: {}", values.join(", "))
        }
        Some("deleted") => "deleted".to_owned(),
        _ => {
            let changed: Vec<&str> = payload
                .get("changed")
                .and_then(Value::as_array)
                .map(|names| names.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let before = object("before");
            let was: Vec<String> = changed
                .iter()
                .map(|name| {
                    let old = before.and_then(|b| b.get(*name)).unwrap_or(&Value::Null);
                    format!("{name}={old}")
                })
                .collect();
            format!("{} (was {})", changed.join(", "), was.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_reads_as_changes_and_old_values() {
        let payload = json!({
            "model": "sales_order", "operation": "updated", "pk": 22,
            "changed": ["status", "eta_date"],
            "before": {"status": "confirmed", "eta_date": null},
            "after": {"status": "in_production", "eta_date": "2026-12-01"},
        });
        assert_eq!(
            describe(&payload),
            r#"status, eta_date (was status="confirmed", eta_date=null)"#
        );
        let payload = json!({
            "model": "sales_order", "operation": "inserted", "pk": 31, "changed": null,
            "before": null,
            "after": {"id": 31, "number": "SO-00031", "status": "draft", "paid_at": null},
        });
        assert_eq!(
            describe(&payload),
            r#"new: number="SO-00031", status="draft""#
        );
    }

    #[test]
    fn odd_file_names_stay_file_names() {
        assert_eq!(sqlite_url(Path::new("demo.db")), "sqlite:demo.db");
        assert_eq!(
            sqlite_url(Path::new("a b/x?y#1%.db")),
            "sqlite:a b/x%3Fy%231%25.db"
        );
    }

    #[test]
    fn summary_counts_dead_letters_as_failed_attempts() {
        let stats = RelayStats {
            delivered: 7,
            failed: 3,
            dead_lettered: 1,
            ..RelayStats::default()
        };
        let s = Summary::new(9, stats, 0);
        assert_eq!((s.delivered, s.failed, s.dead, s.pending), (7, 4, 1, 1));
        let s = Summary::new(9, stats, 1);
        assert_eq!(
            (s.held, s.pending),
            (1, 0),
            "held behind the dead letter, not pending"
        );
    }
}
