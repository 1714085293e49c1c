//! The command line: global options and subcommands.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// The config file read when `--config` is not given and the file exists in the current directory.
pub const DEFAULT_CONFIG_FILE: &str = "hare-outbox.toml";

/// Exit codes, shown at the end of `--help`.
const EXIT_CODES: &str = "Exit codes:
  0  success (a relay stopped cleanly; every capture matches the config)
  1  failure at run time (database unreachable, DDL refused, …)
  2  bad config file, option or environment variable; nothing was changed
  3  capture status: a configured capture is missing or drifted, or an installed one is not
     in the config";

/// hare-outbox: a transactional outbox. Creates the outbox table, installs change-capture
/// triggers, relays events to a webhook or standard output, and runs a self-contained demo.
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

    /// Database URL: postgres://…, postgresql://… or sqlite:FILE; overrides `database_url`
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
    /// Create the outbox table and its indexes if they are missing (safe to repeat)
    Migrate,
    /// Print the DDL of the outbox table for the database URL's backend, without connecting
    Schema,
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
}
