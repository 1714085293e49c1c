//! The command line: global options, subcommands, and the parsers of their values.

// These doc comments are clap's help text: `[backlog]`, `[relay]` and the like name sections of
// the config file, not Rust items, and a backslash to escape them would show in `--help`.
#![allow(rustdoc::broken_intra_doc_links)]

use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};
use clap::{Args, Parser, Subcommand};
use hare_outbox::EventStatus;

/// Exit codes, shown at the end of `--help`.
const EXIT_CODES: &str = "Exit codes:
  0  success (a relay stopped cleanly; every capture matches the config)
  1  failure at run time (database unreachable, DDL refused, …)
  2  bad config file, option or environment variable; nothing was changed
  3  capture status: a configured capture is missing or drifted, or an installed one is not
     in the config
  4  backlog: a threshold (--max-pending, --max-age, --max-dead) is passed";

/// hare-outbox: a transactional outbox. Creates the outbox table, installs change-capture
/// triggers, relays events to a webhook or standard output, shows the outbox as the journal of
/// the system (events, backlog, dead letters, a dashboard), and runs a self-contained demo.
#[derive(Debug, Parser)]
#[command(
    name = "hare-outbox",
    version,
    propagate_version = true,
    max_term_width = 100,
    after_help = EXIT_CODES
)]
pub struct Cli {
    /// TOML config file [default: hare-outbox.toml when it exists]
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        env = "HARE_OUTBOX_CONFIG",
        hide_env_values = true
    )]
    pub config: Option<PathBuf>,

    /// Database URL: postgres://…, postgresql://…, mysql://…, mariadb://… or sqlite:FILE; overrides `database_url`
    #[arg(
        long,
        global = true,
        value_name = "URL",
        env = "HARE_OUTBOX_DATABASE_URL",
        hide_env_values = true
    )]
    pub database_url: Option<String>,

    /// Outbox table, `name` or `schema.name`; overrides `table` [default: hare_outbox]
    #[arg(
        long,
        global = true,
        value_name = "NAME",
        env = "HARE_OUTBOX_TABLE",
        hide_env_values = true
    )]
    pub table: Option<String>,

    /// Log filter for stderr, e.g. `info` or `hare_outbox=debug`; overrides RUST_LOG
    #[arg(long, global = true, value_name = "FILTER")]
    pub log_level: Option<String>,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Bring the outbox table to the newest schema version (safe to repeat); --status to list
    /// the versions
    ///
    /// Each pending version runs in a transaction of its own with its row in the record of
    /// applied migrations (`hare_outbox_migrations`, in the table's schema); a table created
    /// before versions were recorded is adopted as version 1. A record that disagrees with this
    /// build (an edited migration, a version from a newer build) is refused (exit 1).
    Migrate(MigrateArgs),
    /// Print the SQL of the schema versions the database lacks, for your own migration tool
    ///
    /// Reads which versions the database has (a SQLite file that does not exist has none and is
    /// not created) and prints the SQL of the others, each followed by its row in the record of
    /// applied migrations; a first comment line names them, or says that none is pending. With
    /// --all, every version, without connecting.
    Schema(SchemaArgs),
    /// Install, remove or check the change-capture triggers of the config's [[capture]] tables
    #[command(subcommand, after_help = EXIT_CODES)]
    Capture(CaptureCommand),
    /// Deliver events to the configured delivery until SIGINT or SIGTERM
    Relay(RelayArgs),
    /// Run an ERP-like workload on a fresh SQLite file, captured by triggers, and relay its events
    /// to the terminal
    ///
    /// Needs no set-up: it ignores --config and --database-url and works on its own SQLite file
    /// (--database). It ends by itself, or on Ctrl-C, with one summary line: events written,
    /// delivered, failed delivery attempts and dead-lettered events.
    Demo(DemoArgs),
    /// Print the journal: events as a table, or JSON lines with --json; --follow for new ones
    ///
    /// The page holds the newest events matching the filters (or those before --before), printed
    /// oldest first. Filters combine with AND. --follow then prints events written later, as
    /// they arrive, until SIGINT or SIGTERM (exit 0).
    Events(EventsArgs),
    /// Print the ordering keys held back by a dead or failing head (--held)
    ///
    /// One line per key: the key, its blocking event (№, topic, status, attempts, last error),
    /// the events waiting behind it and since when. Keys come in key order, a page at a time
    /// (--after KEY for the next one); the last line says where the next page starts. Retry a
    /// dead head with `dead-letters retry --id`, or from the dashboard's keys view.
    Keys(KeysArgs),
    /// Print the queue's state: pending events, the oldest one's age, dead letters
    ///
    /// Usable as a health check: exit code 4 when a threshold is passed (--max-pending,
    /// --max-age, --max-dead, or the [backlog] section of the config file).
    #[command(after_help = EXIT_CODES)]
    Backlog(BacklogArgs),
    /// Retry or delete dead-lettered events
    #[command(subcommand, name = "dead-letters")]
    DeadLetters(DeadLettersCommand),
    /// Delete published events older than --older-than, in short batches
    Cleanup(CleanupArgs),
    /// Serve the dashboard (the journal in a browser, its JSON API) and /healthz until SIGINT or
    /// SIGTERM
    ///
    /// Prints `dashboard on http://ADDR/` once listening (--http 127.0.0.1:0 picks a free port).
    /// The retry and clean-up buttons need a token from HARE_OUTBOX_DASHBOARD_TOKEN or [dashboard]
    /// token_env / token_file; without one the dashboard is read-only. /metrics is served by
    /// `relay --http`, where the relay's metrics are.
    Serve(ServeArgs),
}

/// `dead-letters retry|cleanup`.
#[derive(Debug, Subcommand)]
pub enum DeadLettersCommand {
    /// Return dead letters to the queue with their attempts reset
    ///
    /// Needs a filter (--topic, --id) or --all; retrying every dead letter by accident is
    /// refused (exit 2). Prints how many were returned.
    Retry(RetryArgs),
    /// Delete dead letters that were dead-lettered more than --older-than ago
    Cleanup(CleanupArgs),
}

/// `--status`: one of the journal's status names ([`EventStatus::name`]), listed in `--help`.
fn status_parser() -> impl clap::builder::TypedValueParser<Value = EventStatus> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(EventStatus::ALL.map(EventStatus::name))
        .try_map(|name| name.parse::<EventStatus>())
}

/// Options of `events`.
#[derive(Debug, Args)]
pub struct EventsArgs {
    /// Only this topic: an exact name or a `prefix*` pattern; repeat for several
    #[arg(long = "topic", value_name = "TOPIC")]
    pub topics: Vec<String>,

    /// Only events in this status; repeat for several
    #[arg(long = "status", value_name = "STATUS", value_parser = status_parser())]
    pub statuses: Vec<EventStatus>,

    /// Only events about this captured object: `model` or `model #pk` (e.g. `sales_orders #22`)
    #[arg(long, value_name = "OBJECT")]
    pub object: Option<String>,

    /// Only events whose `author` header is exactly this
    #[arg(long, value_name = "AUTHOR", value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub author: Option<String>,

    /// Only events created at or after this time: RFC 3339 (2026-11-30T10:00:00Z) or an age
    /// (15m, 2h, 7d)
    #[arg(long, value_name = "TIME", value_parser = crate::args::parse_time)]
    pub since: Option<chrono::DateTime<chrono::Utc>>,

    /// Only events created before this time: RFC 3339 or an age (15m, 2h, 7d)
    #[arg(long, value_name = "TIME", value_parser = crate::args::parse_time)]
    pub until: Option<chrono::DateTime<chrono::Utc>>,

    /// Events on the page, 1 to 1000
    #[arg(long, value_name = "N", default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub limit: u32,

    /// Only events with a sequence (№) below SEQ: the page before it
    #[arg(long, value_name = "SEQ", conflicts_with = "follow", value_parser = clap::value_parser!(i64).range(1..))]
    pub before: Option<i64>,

    /// Keep printing new events as they are written, until SIGINT or SIGTERM
    #[arg(long, conflicts_with = "until")]
    pub follow: bool,

    /// How often --follow looks for new events: seconds (0.5) or a duration (2s, 1m)
    #[arg(long, value_name = "DURATION", default_value = "1s", requires = "follow", value_parser = crate::args::parse_interval)]
    pub interval: std::time::Duration,

    /// Print JSON lines (one event per line, with status, object and author) instead of a table
    #[arg(long)]
    pub json: bool,

    /// Print the event with this id (a UUID) in full instead of a page: every column, headers,
    /// the payload and its changes, the last error, the lease, its ordering key's neighbours
    #[arg(long, value_name = "UUID", conflicts_with_all = ["seq", "topics", "statuses", "object", "author", "since", "until", "before", "follow"])]
    pub id: Option<uuid::Uuid>,

    /// Print the event with this sequence (№) in full instead of a page (as --id)
    #[arg(long, value_name = "SEQ", value_parser = clap::value_parser!(i64).range(1..), conflicts_with_all = ["topics", "statuses", "object", "author", "since", "until", "before", "follow"])]
    pub seq: Option<i64>,
}

/// Options of `keys`.
#[derive(Debug, Args)]
pub struct KeysArgs {
    /// List the ordering keys held back by their head: a dead letter or an event that failed
    /// (required: the only listing of keys so far)
    #[arg(long, required = true)]
    pub held: bool,

    /// Only keys after this one (the page after the one that ended with it)
    #[arg(long, value_name = "KEY")]
    pub after: Option<String>,

    /// Keys on the page, 1 to 1000
    #[arg(long, value_name = "N", default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub limit: u32,

    /// Print JSON lines (one key per line, with its blocking event) instead of a table
    #[arg(long)]
    pub json: bool,
}

/// Options of `backlog`.
#[derive(Debug, Args)]
pub struct BacklogArgs {
    /// Only this topic: an exact name or a `prefix*` pattern; repeat for several
    #[arg(long = "topic", value_name = "TOPIC")]
    pub topics: Vec<String>,

    /// Exit 4 when more than N events are pending [config: [backlog] max_pending]
    #[arg(long, value_name = "N", env = "HARE_OUTBOX_BACKLOG_MAX_PENDING")]
    pub max_pending: Option<u64>,

    /// Exit 4 when the oldest pending event is older than this: seconds (300) or a duration
    /// (15m) [config: [backlog] max_age_seconds]
    #[arg(long, value_name = "DURATION", env = "HARE_OUTBOX_BACKLOG_MAX_AGE", value_parser = crate::args::parse_age)]
    pub max_age: Option<std::time::Duration>,

    /// Exit 4 when more than N events are dead-lettered [config: [backlog] max_dead]
    #[arg(long, value_name = "N", env = "HARE_OUTBOX_BACKLOG_MAX_DEAD")]
    pub max_dead: Option<u64>,

    /// Ask the relay serving this --http address (http://127.0.0.1:8080) for its open
    /// destinations (circuit breakers live in the relay process) [config: [backlog] relay_url]
    #[arg(long, value_name = "URL", env = "HARE_OUTBOX_BACKLOG_RELAY_URL")]
    pub relay: Option<String>,

    /// Exit 4 when more than N of the relay's destinations are open; needs --relay [config:
    /// [backlog] max_open_destinations]
    #[arg(
        long,
        value_name = "N",
        env = "HARE_OUTBOX_BACKLOG_MAX_OPEN_DESTINATIONS"
    )]
    pub max_open_destinations: Option<u64>,

    /// Print one JSON object instead of a line of text
    #[arg(long)]
    pub json: bool,
}

/// Options of `dead-letters retry`.
#[derive(Debug, Args)]
pub struct RetryArgs {
    /// Only dead letters of this topic: an exact name or a `prefix*` pattern; repeat for several
    #[arg(long = "topic", value_name = "TOPIC")]
    pub topics: Vec<String>,

    /// Only the dead letter with this id (a UUID); repeat for several
    #[arg(long = "id", value_name = "UUID")]
    pub ids: Vec<uuid::Uuid>,

    /// Retry every dead letter (needed when neither --topic nor --id is given)
    #[arg(long, conflicts_with_all = ["topics", "ids"])]
    pub all: bool,
}

/// Options of `cleanup` and `dead-letters cleanup`.
#[derive(Debug, Args)]
pub struct CleanupArgs {
    /// Delete events finished more than this long ago: a duration (7d, 12h, 30m) or seconds
    /// [config: [cleanup] published_older_than_days / dead_lettered_older_than_days]
    #[arg(long, value_name = "DURATION", value_parser = crate::args::parse_age)]
    pub older_than: Option<std::time::Duration>,

    /// Only events of this topic: an exact name or a `prefix*` pattern; repeat for several
    #[arg(long = "topic", value_name = "TOPIC")]
    pub topics: Vec<String>,

    /// Rows deleted per statement, 1 to 100000 [default: [relay] cleanup_batch_size, 1000]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub batch_size: Option<u32>,
}

/// Options of the HTTP server of `serve` and `relay --http`.
#[derive(Debug, Args, Clone)]
pub struct HttpArgs {
    /// Let the address be other than loopback (127.0.0.1, ::1): the dashboard is then reachable
    /// from other machines
    #[arg(long)]
    pub allow_remote: bool,
}

/// Options of `serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on [config: [dashboard] address; default 127.0.0.1:8080]
    #[arg(long, value_name = "ADDR")]
    pub http: Option<String>,

    /// HTTP options.
    #[command(flatten)]
    pub server: HttpArgs,
}

/// `capture install|uninstall|status`.
#[derive(Debug, Subcommand)]
pub enum CaptureCommand {
    /// Validate every [[capture]] entry, then install (or replace) each trigger
    ///
    /// Every entry is checked first, against the database's catalog too; when one is refused
    /// (exit 2) nothing is installed. One line per table. The outbox table must exist (see
    /// `migrate`, or --migrate).
    Install(InstallArgs),
    /// Remove the triggers of the configured tables, or of the tables named by --only
    ///
    /// Events already written stay in the outbox. One line per table, saying whether a capture
    /// was installed.
    Uninstall(UninstallArgs),
    /// Report each configured capture, its drift, and installed captures the config lacks
    ///
    /// Exit code 3 when a configured capture is not installed, has drifted (a column added,
    /// dropped or retyped since install, another declaration, a disabled trigger…), or an
    /// installed capture writing into this outbox is not in the config.
    Status,
}

/// Options of `migrate`.
#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// List every schema version, applied (with when) or pending, instead of migrating; changes
    /// nothing
    #[arg(long)]
    pub status: bool,
}

/// Options of `schema`.
#[derive(Debug, Args)]
pub struct SchemaArgs {
    /// Print every version, as for an empty database, without connecting
    #[arg(long)]
    pub all: bool,
}

/// Options of `capture install`.
#[derive(Debug, Args)]
pub struct InstallArgs {
    /// Create the outbox table first if it is missing
    #[arg(long)]
    pub migrate: bool,
}

/// Options of `capture uninstall`.
#[derive(Debug, Args)]
pub struct UninstallArgs {
    /// A captured table to uninstall, `name` or `schema.name`, instead of every configured one;
    /// repeat for several. (The global --table names the outbox table.)
    #[arg(long = "only", value_name = "TABLE")]
    pub tables: Vec<String>,
}

/// Options of `relay`.
#[derive(Debug, Args)]
pub struct RelayArgs {
    /// Create the outbox table first if it is missing
    #[arg(long)]
    pub migrate: bool,

    /// Also serve the dashboard, /metrics and /healthz on this address (e.g. 127.0.0.1:8080)
    #[arg(long, value_name = "ADDR")]
    pub http: Option<String>,

    /// HTTP options.
    #[command(flatten)]
    pub server: HttpArgs,
}

/// Options of `demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// SQLite file of the demo; deleted and created anew on every run
    #[arg(long, value_name = "FILE", default_value = "hare-outbox-demo.db")]
    pub database: PathBuf,

    /// Number of document changes the simulated users make
    #[arg(long, value_name = "N", default_value_t = 200)]
    pub events: u64,

    /// Document changes per second (0 = as fast as the database allows)
    #[arg(long, value_name = "PER_SECOND", default_value_t = 100.0)]
    pub rate: f64,

    /// Share of deliveries the simulated subscriber refuses, from 0 to 1, so retries show
    #[arg(long, value_name = "SHARE", default_value_t = 0.05)]
    pub failure_rate: f64,

    /// Print JSON lines (events, then the summary) instead of the readable journal
    #[arg(long)]
    pub json: bool,

    /// Also serve the dashboard on this loopback address (e.g. 127.0.0.1:8080) while the demo
    /// runs, and keep serving it, with the relay, after the workload until Ctrl-C. The token of
    /// its retry and clean-up buttons is HARE_OUTBOX_DASHBOARD_TOKEN, or a random one printed at
    /// start
    #[arg(long, value_name = "ADDR")]
    pub http: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// Values of the command line

/// Parses a point in time for `--since`/`--until`: RFC 3339 (`2026-11-30T10:00:00Z`,
/// `2026-11-30T12:00:00+02:00`) or an age counted back from now (`15m`, `2h`, `7d`, `90s`,
/// `1h 30m`).
///
/// # Errors
/// A message naming the value and both accepted forms.
pub fn parse_time(text: &str) -> Result<DateTime<Utc>, String> {
    let text = text.trim();
    if let Ok(time) = DateTime::parse_from_rfc3339(text) {
        return Ok(time.with_timezone(&Utc));
    }
    let age = humantime::parse_duration(text).map_err(|_| {
        format!(
            "{text:?} is neither an RFC 3339 time (2026-11-30T10:00:00Z) nor an age such as 15m, 2h or 7d"
        )
    })?;
    chrono::Duration::from_std(age)
        .ok()
        .and_then(|age| Utc::now().checked_sub_signed(age))
        .ok_or_else(|| format!("age {text:?} reaches before the year 1; use a shorter one"))
}

/// Parses an age or duration: a plain number of seconds (`300`, `0.5`) or a duration with units
/// (`15m`, `2h`, `7d`, `1h 30m`).
///
/// # Errors
/// A message naming the value and the accepted forms.
pub fn parse_age(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if let Ok(seconds) = text.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).map_err(|_| {
            format!("{text:?} is not a duration; use 0 or more seconds, or e.g. 15m, 2h, 7d")
        });
    }
    humantime::parse_duration(text).map_err(|e| {
        format!("{text:?} is not a duration ({e}); use seconds (300) or e.g. 30s, 15m, 2h, 7d")
    })
}

/// Parses the polling interval of `--follow`: as [`parse_age`], from 10 ms to 1 hour.
///
/// # Errors
/// A message naming the value and the range allowed.
pub fn parse_interval(text: &str) -> Result<Duration, String> {
    let interval = parse_age(text)?;
    if interval < Duration::from_millis(10) || interval > Duration::from_secs(3600) {
        return Err(format!(
            "interval {text:?} is not allowed; use 10ms to 1h (e.g. 0.5, 1s, 5s)"
        ));
    }
    Ok(interval)
}

/// Topic patterns as the journal queries take them.
pub fn topic_refs(topics: &[String]) -> Vec<&str> {
    topics.iter().map(String::as_str).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_and_times_parse() {
        assert_eq!(parse_age("300").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_age("15m").unwrap(), Duration::from_secs(900));
        assert_eq!(parse_age("7d").unwrap(), Duration::from_secs(7 * 86_400));
        assert_eq!(parse_age("1h 30m").unwrap(), Duration::from_secs(5400));
        let e = parse_age("x").unwrap_err();
        assert!(e.contains("\"x\"") && e.contains("7d"), "{e}");
        assert!(parse_age("-5").is_err());
        assert!(parse_interval("0").is_err());
        assert_eq!(parse_interval("1s").unwrap(), Duration::from_secs(1));

        let t = parse_time("2026-11-30T10:00:00Z").unwrap();
        assert_eq!(t.to_rfc3339(), "2026-11-30T10:00:00+00:00");
        let t = parse_time("2026-11-30T12:00:00+02:00").unwrap();
        assert_eq!(t.to_rfc3339(), "2026-11-30T10:00:00+00:00");
        let ago = Utc::now() - parse_time("2h").unwrap();
        assert!((ago.num_seconds() - 7200).abs() < 5, "{ago}");
        let e = parse_time("yesterday").unwrap_err();
        assert!(e.contains("yesterday") && e.contains("RFC 3339"), "{e}");
    }
}
