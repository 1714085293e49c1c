//! The TOML config file, the environment overrides, and the settings resolved from both.
//!
//! Precedence, highest first: command-line flag, environment variable, config file, default.
//! Secrets are never read from the file itself: only from an environment variable
//! (`secret_env`, `url_env`, `password_env`, `properties_env`) or a file of their own
//! (`secret_file`, `url_file`, `password_file`). Deliveries, routes and wake-ups are resolved in
//! [`delivery`] and [`wakeup`]; `[backlog]` and `[cleanup]` in [`journal`], `[dashboard]` in
//! [`dashboard`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use hare_outbox::{ChangeCapture, ColumnType, ExtraColumn, OutboxTable, RelayConfig};
use serde::Deserialize;

use crate::error::{redact_url, usage};

pub mod dashboard;
pub mod delivery;
pub mod journal;
mod values;
pub mod wakeup;

pub use delivery::{DeliveryConfig, DeliverySection, DeliverySettings, RouteSection};
pub use values::DbKind;
pub(crate) use values::{non_empty, seconds};
pub use wakeup::{WakeupMode, WakeupSection, WakeupSettings};

/// The config file read when `--config` is not given and the file exists in the current directory.
pub const DEFAULT_CONFIG_FILE: &str = "hare-outbox.toml";

/// The config file as written: every key optional, unknown keys refused.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// `postgres://…`, `postgresql://…`, `mysql://…`, `mariadb://…` or `sqlite:FILE`.
    pub database_url: Option<String>,
    /// PostgreSQL: `true` when `database_url` goes through a transaction pooler (PgBouncer
    /// `pool_mode = transaction`): statements are sent unnamed, each relay statement in a
    /// transaction of its own. Default `false`.
    pub database_transaction_pooler: Option<bool>,
    /// PostgreSQL: `true` makes the relay's own statements (leases, marks) wait for their
    /// commits to reach the disk. Default `false`: they commit with `synchronous_commit = off`
    /// for their own transaction only (see `PgBackend::with_synchronous_relay_commits`).
    pub database_synchronous_relay_commits: Option<bool>,
    /// The outbox table, `name` or `schema.name`.
    pub table: Option<String>,
    /// Relay options.
    #[serde(default)]
    pub relay: RelaySection,
    /// The default delivery when `[[route]]`s are used: the name of a `[deliveries.NAME]`
    /// section (instead of a `[delivery]` section).
    pub default_delivery: Option<String>,
    /// Where events go; with `[[route]]`s, the default delivery.
    pub delivery: Option<DeliverySection>,
    /// `[deliveries.NAME]`: named deliveries the `[[route]]`s send to.
    #[serde(default)]
    pub deliveries: BTreeMap<String, DeliverySection>,
    /// `[[route]]`: topic (exact or glob) → delivery name, first match in file order.
    #[serde(default)]
    pub route: Vec<RouteSection>,
    /// How relays are woken before the poll interval ends.
    pub wakeup: Option<WakeupSection>,
    /// Options every `[[capture]]` entry starts from (each entry replaces what it sets).
    pub capture_defaults: Option<toml::Table>,
    /// `[[capture]]`: one change capture per captured table, in the form of [`ChangeCapture`].
    #[serde(default)]
    pub capture: Vec<toml::Table>,
    /// `[backlog]`: thresholds of `backlog` and `/healthz`.
    pub backlog: Option<journal::BacklogSection>,
    /// `[cleanup]`: default ages of `cleanup` and `dead-letters cleanup`.
    pub cleanup: Option<journal::CleanupSection>,
    /// `[dashboard]`: address and token source of `serve` and `relay --http`.
    pub dashboard: Option<dashboard::DashboardSection>,
}

/// `[relay]`: every option of [`RelayConfig`], durations in seconds (fractions allowed).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelaySection {
    /// Relay name written to `leased_by`.
    pub name: Option<String>,
    /// Wait for a wake-up after a poll that leased nothing.
    pub poll_interval_seconds: Option<f64>,
    /// Most events leased per poll, 1 to 10000.
    pub batch_size: Option<i64>,
    /// Most events of one ordering key per batch (an ordered run from the key's head), 1 to
    /// 10000; 1 = one event per key per batch.
    pub max_events_per_key: Option<i64>,
    /// Attempts before an event is dead-lettered.
    pub max_delivery_attempts: Option<i64>,
    /// First retry delay, doubled per attempt.
    pub retry_base_seconds: Option<f64>,
    /// Longest retry delay.
    pub retry_max_seconds: Option<f64>,
    /// How long a leased batch is held.
    pub lease_seconds: Option<f64>,
    /// How long one delivery may take; below `lease_seconds`.
    pub delivery_timeout_seconds: Option<f64>,
    /// Events delivered at once.
    pub concurrency: Option<i64>,
    /// Topics this relay handles: exact names or prefixes ending in `*`; absent = every topic.
    pub topics: Option<Vec<String>>,
    /// Topics left to other relays, same patterns as `topics`.
    pub exclude_topics: Option<Vec<String>>,
    /// Rows deleted per statement by the clean-ups, 1 to 100000.
    pub cleanup_batch_size: Option<i64>,
    /// How often the backlog gauges are refreshed; 0 turns the refresh off.
    pub backlog_interval_seconds: Option<f64>,
    /// A nullable JSON column of the outbox table that keeps each event's last delivery record
    /// (the webhook's `{status_code, body, error}`); `migrate` adds it.
    pub result_column: Option<String>,
    /// The circuit breaker of every destination on or off (default on).
    pub breaker: Option<bool>,
    /// Consecutive outage failures that open a destination, 1 to 10000 (default 5).
    pub breaker_failure_threshold: Option<i64>,
    /// The first wait before a probe of an open destination, in seconds (default 1).
    pub breaker_probe_interval_seconds: Option<f64>,
    /// The longest wait between probes, in seconds (default 60).
    pub breaker_probe_interval_max_seconds: Option<f64>,
}

/// A database URL with the backend its scheme selects.
#[derive(Debug, Clone)]
pub struct Database {
    /// The URL as given.
    pub url: String,
    /// The backend.
    pub kind: DbKind,
    /// `database_transaction_pooler`: the URL goes through a transaction pooler.
    pub transaction_pooler: bool,
    /// `database_synchronous_relay_commits`: relay statements wait for their commits.
    pub synchronous_relay_commits: bool,
}

/// Everything the commands need, resolved from flags, environment, config file and defaults.
#[derive(Debug)]
pub struct Settings {
    /// The config file read, if any.
    pub config_file: Option<PathBuf>,
    /// The database, if a URL was given anywhere.
    pub database: Option<Database>,
    /// The outbox table.
    pub table: OutboxTable,
    /// Relay options, validated.
    pub relay: RelayConfig,
    /// The delivery.
    pub delivery: DeliverySettings,
    /// The destination name of a single delivery (`delivery`, or the `default_delivery` name).
    pub delivery_name: String,
    /// The circuit breaker and rate limit of a single delivery.
    pub delivery_options: delivery::DestinationOptions,
    /// The wake-up of the relay.
    pub wakeup: WakeupSettings,
    /// The `[[capture]]` entries with `[capture_defaults]` merged in, in file order; deserialized,
    /// not yet validated.
    pub captures: Vec<ChangeCapture>,
    /// Things worth a warning once logging is up.
    pub warnings: Vec<String>,
    /// `[backlog]` thresholds.
    pub backlog: journal::BacklogThresholds,
    /// `[cleanup]` ages.
    pub cleanup: journal::CleanupAges,
    /// `[dashboard]`.
    pub dashboard: dashboard::DashboardSettings,
}

/// Values from flags and their environment variables (clap reads both).
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    /// `--database-url` / `HARE_OUTBOX_DATABASE_URL`.
    pub database_url: Option<String>,
    /// `--table` / `HARE_OUTBOX_TABLE`.
    pub table: Option<String>,
}

impl Settings {
    /// The database, or a usage error saying where to set it.
    ///
    /// # Errors
    /// A usage error when no URL was given.
    pub fn database(&self) -> anyhow::Result<&Database> {
        self.database.as_ref().ok_or_else(|| {
            usage(format!(
                "no database URL: set database_url in the config file ({}), the environment variable HARE_OUTBOX_DATABASE_URL or --database-url",
                self.config_file
                    .as_deref()
                    .map_or_else(|| format!("none read; {DEFAULT_CONFIG_FILE} is looked for in the current directory"), |p| p.display().to_string())
            ))
        })
    }
}

/// Reads the config file (`explicit`, else `hare-outbox.toml` when it exists) and resolves the
/// settings with `overrides` and the environment as `env` reports it.
///
/// # Errors
/// A usage error naming the file, the key and what is allowed.
pub fn load(
    explicit: Option<&Path>,
    overrides: Overrides,
    env: &dyn Fn(&str) -> Option<String>,
) -> anyhow::Result<Settings> {
    let path = match explicit {
        Some(path) => Some(path.to_path_buf()),
        None => Some(PathBuf::from(DEFAULT_CONFIG_FILE)).filter(|p| p.is_file()),
    };
    let file = match &path {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| usage(format!("cannot read config file {}: {e}", path.display())))?;
            parse(&text).map_err(|e| usage(format!("config file {}: {e}", path.display())))?
        }
        None => FileConfig::default(),
    };
    resolve(file, path, overrides, env)
}

/// Parses the text of a config file.
///
/// # Errors
/// The TOML error, which names the line, the key and the keys or values allowed.
pub fn parse(text: &str) -> Result<FileConfig, toml::de::Error> {
    toml::from_str(text)
}

/// Resolves a parsed config file with overrides and the environment.
///
/// # Errors
/// A usage error naming the key and what is allowed.
pub fn resolve(
    file: FileConfig,
    path: Option<PathBuf>,
    overrides: Overrides,
    env: &dyn Fn(&str) -> Option<String>,
) -> anyhow::Result<Settings> {
    let in_file = path
        .as_deref()
        .map_or_else(String::new, |p| format!(" in {}", p.display()));
    let mut warnings = Vec::new();

    if let Some(url) = file.database_url.as_deref()
        && let Some(secret) = hare_outbox::redact::secret_in_url(url)
    {
        return Err(usage(format!(
            "database_url = {:?}{in_file} carries {secret}, and secrets are not read from the config file (passfile included); give the URL in the environment variable HARE_OUTBOX_DATABASE_URL instead (or let the driver find the password file itself: ~/.pgpass or PGPASSFILE)",
            redact_url(url)
        )));
    }
    let database = match non_empty(overrides.database_url).or(non_empty(file.database_url)) {
        Some(url) => Some(Database {
            kind: DbKind::from_url(&url)?,
            url,
            transaction_pooler: file.database_transaction_pooler.unwrap_or(false),
            synchronous_relay_commits: file.database_synchronous_relay_commits.unwrap_or(false),
        }),
        None => None,
    };

    let mut table = match non_empty(overrides.table).or(non_empty(file.table)) {
        Some(name) => OutboxTable::parse(&name).with_context(|| format!("table{in_file}"))?,
        None => OutboxTable::default(),
    };
    if let Some(column) = &file.relay.result_column {
        let column = ExtraColumn::new(column, ColumnType::Json)
            .map_err(|e| usage(format!("[relay] result_column{in_file}: {e}")))?;
        table = table
            .with_column(column)
            .map_err(|e| usage(format!("[relay] result_column{in_file}: {e}")))?;
    }

    let relay = relay_config(&file.relay).with_context(|| format!("[relay]{in_file}"))?;

    let base_dir = path
        .as_deref()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let resolved = delivery::resolve(
        DeliveryConfig {
            delivery: file.delivery,
            deliveries: file.deliveries,
            routes: file.route,
            default_delivery: file.default_delivery,
        },
        &base_dir,
        env,
        &mut warnings,
    )
    .with_context(|| format!("delivery config{in_file}"))?;
    resolved
        .settings
        .check_options(&resolved.options, &relay.breaker)
        .with_context(|| format!("delivery config{in_file}"))?;
    let delivery::ResolvedDelivery {
        settings: delivery,
        name: delivery_name,
        options: delivery_options,
    } = resolved;
    let wakeup = wakeup::resolve(file.wakeup.as_ref(), &base_dir, env, &mut warnings)
        .with_context(|| format!("[wakeup]{in_file}"))?;
    let captures = captures(file.capture_defaults.as_ref(), file.capture, &in_file)?;
    let backlog = journal::backlog_thresholds(file.backlog.as_ref())
        .with_context(|| format!("[backlog]{in_file}"))?;
    let cleanup = journal::cleanup_ages(file.cleanup.as_ref())
        .with_context(|| format!("[cleanup]{in_file}"))?;
    let dashboard = dashboard::dashboard_settings(file.dashboard.as_ref(), &base_dir, env)
        .with_context(|| format!("[dashboard]{in_file}"))?;

    Ok(Settings {
        config_file: path,
        database,
        table,
        relay,
        delivery,
        delivery_name,
        delivery_options,
        wakeup,
        captures,
        warnings,
        backlog,
        cleanup,
        dashboard,
    })
}

/// Deserializes each `[[capture]]` entry into a [`ChangeCapture`], starting from
/// `[capture_defaults]` when given (the entry's options replace the defaults', `fields` replacing
/// `exclude` and the other way round).
fn captures(
    defaults: Option<&toml::Table>,
    entries: Vec<toml::Table>,
    in_file: &str,
) -> anyhow::Result<Vec<ChangeCapture>> {
    if let Some(defaults) = defaults
        && defaults.contains_key("table")
    {
        return Err(usage(format!(
            "[capture_defaults]{in_file}: table is not a default; name the table in each [[capture]] entry"
        )));
    }
    let mut out = Vec::with_capacity(entries.len());
    for (i, entry) in entries.into_iter().enumerate() {
        let what = match entry.get("table").and_then(toml::Value::as_str) {
            Some(table) => format!("[[capture]] #{} (table {table:?}){in_file}", i + 1),
            None => format!("[[capture]] #{}{in_file}", i + 1),
        };
        let Some(table) = entry.get("table").cloned() else {
            return Err(usage(format!(
                "{what}: table is missing; every entry names the table it captures"
            )));
        };
        let capture = match defaults {
            None => entry
                .try_into::<ChangeCapture>()
                .map_err(|e| usage(format!("{what}: {}", e.to_string().trim_end())))?,
            Some(defaults) => {
                let mut base = defaults.clone();
                base.insert("table".to_owned(), table);
                let base = base.try_into::<ChangeCapture>().map_err(|e| {
                    usage(format!(
                        "[capture_defaults]{in_file} (for {what}): {}",
                        e.to_string().trim_end()
                    ))
                })?;
                let options =
                    serde_json::to_value(&entry).map_err(|e| usage(format!("{what}: {e}")))?;
                base.replace(options)
                    .map_err(|e| usage(format!("{what}: {e}")))?
            }
        };
        if let Some(earlier) = out
            .iter()
            .position(|c: &ChangeCapture| c.table == capture.table && c.schema == capture.schema)
        {
            return Err(usage(format!(
                "{what}: the table is already captured by [[capture]] #{}; one entry per table",
                earlier + 1
            )));
        }
        out.push(capture);
    }
    Ok(out)
}

/// `value` seconds as a duration of at least `min`, or a usage error naming `key`, the value and
/// the range.
fn seconds_at_least(key: &str, value: f64, min: Duration) -> anyhow::Result<Duration> {
    let duration = seconds(key, value, false)?;
    if duration < min {
        return Err(usage(format!(
            "{key} = {value} is out of range; allowed {} or more (seconds)",
            min.as_secs_f64()
        )));
    }
    Ok(duration)
}

fn count<T: TryFrom<i64>>(key: &str, value: i64, allowed: &str) -> anyhow::Result<T> {
    T::try_from(value).map_err(|_| usage(format!("{key} = {value} is not allowed; use {allowed}")))
}

/// The circuit breaker of `[relay]`: the defaults with what the section sets.
///
/// # Errors
/// A usage error naming the key and the values allowed.
fn breaker_config(section: &RelaySection) -> anyhow::Result<hare_outbox::BreakerConfig> {
    let mut breaker = hare_outbox::BreakerConfig::default();
    if let Some(on) = section.breaker {
        breaker = breaker.with_enabled(on);
    }
    if let Some(v) = section.breaker_failure_threshold {
        let max = hare_outbox::relay::MAX_FAILURE_THRESHOLD;
        let n: u32 = count("breaker_failure_threshold", v, &format!("1 to {max}"))?;
        if !(1..=max).contains(&n) {
            return Err(usage(format!(
                "breaker_failure_threshold = {v} is out of range; allowed 1 to {max}"
            )));
        }
        breaker = breaker.with_failure_threshold(n);
    }
    let min = hare_outbox::relay::MIN_PROBE_INTERVAL;
    if let Some(v) = section.breaker_probe_interval_seconds {
        breaker = breaker.with_probe_interval(seconds_at_least(
            "breaker_probe_interval_seconds",
            v,
            min,
        )?);
    }
    if let Some(v) = section.breaker_probe_interval_max_seconds {
        breaker = breaker.with_probe_interval_max(seconds_at_least(
            "breaker_probe_interval_max_seconds",
            v,
            min,
        )?);
    }
    if breaker.probe_interval_max < breaker.probe_interval {
        return Err(usage(format!(
            "breaker_probe_interval_max_seconds = {} is below breaker_probe_interval_seconds = {}; allowed: at least the first interval (defaults 60 and 1)",
            breaker.probe_interval_max.as_secs_f64(),
            breaker.probe_interval.as_secs_f64()
        )));
    }
    Ok(breaker)
}

/// Builds and validates the relay options.
///
/// # Errors
/// A usage error naming the key and the values allowed.
pub fn relay_config(section: &RelaySection) -> anyhow::Result<RelayConfig> {
    let mut config = RelayConfig::default();
    if let Some(name) = &section.name {
        config = config.with_name(name.clone());
    }
    if let Some(v) = section.poll_interval_seconds {
        config = config.with_poll_interval(seconds_at_least(
            "poll_interval_seconds",
            v,
            hare_outbox::MIN_POLL_INTERVAL,
        )?);
    }
    if let Some(v) = section.batch_size {
        config = config.with_batch_size(count("batch_size", v, "1 to 10000")?);
    }
    if let Some(v) = section.max_events_per_key {
        config = config.with_max_events_per_key(count("max_events_per_key", v, "1 to 10000")?);
    }
    if let Some(v) = section.max_delivery_attempts {
        config = config.with_max_delivery_attempts(count("max_delivery_attempts", v, "1 or more")?);
    }
    if let Some(v) = section.retry_base_seconds {
        config = config.with_retry_base(seconds("retry_base_seconds", v, true)?);
    }
    if let Some(v) = section.retry_max_seconds {
        config = config.with_retry_max(seconds("retry_max_seconds", v, true)?);
    }
    if let Some(v) = section.lease_seconds {
        config = config.with_lease(seconds_at_least(
            "lease_seconds",
            v,
            hare_outbox::MIN_LEASE,
        )?);
    }
    if let Some(v) = section.delivery_timeout_seconds {
        config = config.with_delivery_timeout(seconds_at_least(
            "delivery_timeout_seconds",
            v,
            hare_outbox::MIN_DELIVERY_TIMEOUT,
        )?);
    }
    if let Some(v) = section.concurrency {
        if !(1..=10_000).contains(&v) {
            return Err(usage(format!(
                "concurrency = {v} is out of range; allowed 1 to 10000"
            )));
        }
        config = config.with_concurrency(count("concurrency", v, "1 to 10000")?);
    }
    if let Some(topics) = &section.topics {
        if topics.is_empty() {
            return Err(usage(
                "[relay] topics = [] would deliver nothing; omit the topics key to take every topic",
            ));
        }
        config = config.with_topics(topics.iter().cloned());
    }
    if let Some(topics) = &section.exclude_topics {
        config = config.with_exclude_topics(topics.iter().cloned());
    }
    if let Some(v) = section.cleanup_batch_size {
        config = config.with_cleanup_batch_size(count("cleanup_batch_size", v, "1 to 100000")?);
    }
    if let Some(v) = section.backlog_interval_seconds {
        config = config.with_backlog_interval(seconds("backlog_interval_seconds", v, true)?);
    }
    if let Some(column) = &section.result_column {
        config = config.with_result_column(column.clone());
    }
    config = config.with_breaker(breaker_config(section)?);
    if config.delivery_timeout >= config.lease {
        return Err(usage(format!(
            "delivery_timeout_seconds = {} must be below lease_seconds = {}{}: a lease that expires mid-delivery lets another relay deliver the event again",
            config.delivery_timeout.as_secs_f64(),
            config.lease.as_secs_f64(),
            if section.lease_seconds.is_none() {
                " (the default)"
            } else {
                ""
            }
        )));
    }
    config.validate()?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use delivery::{ENV_WEBHOOK_SECRET, ENV_WEBHOOK_URL};
    use hare_outbox::delivery::DeliveryConfig as _;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn resolve_text(text: &str, env: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<Settings> {
        let file = parse(text).map_err(|e| usage(e.to_string()))?;
        resolve(file, None, Overrides::default(), env)
    }

    fn error_text(text: &str) -> String {
        let e = resolve_text(text, &no_env).expect_err("should be refused");
        assert_eq!(
            crate::error::exit_code(&e),
            crate::error::EXIT_USAGE,
            "{e:#}"
        );
        format!("{e:#}")
    }

    #[test]
    fn a_database_password_in_the_file_is_refused_without_echoing_it() {
        let e = error_text("database_url = \"postgres://app:hunter2@db:5432/erp\"\n");
        assert!(e.contains("HARE_OUTBOX_DATABASE_URL"), "{e}");
        assert!(!e.contains("hunter2"), "{e}");
        // From the environment (as an override) it is fine.
        let overrides = Overrides {
            database_url: Some("postgres://app:hunter2@db:5432/erp".to_owned()),
            ..Overrides::default()
        };
        let settings = resolve(FileConfig::default(), None, overrides, &no_env).unwrap();
        assert!(settings.database.is_some());
    }

    #[test]
    fn the_example_file_parses_and_resolves() {
        let text = include_str!("../../../../hare-outbox.example.toml");
        let env = |name: &str| (name == ENV_WEBHOOK_SECRET).then(|| "s3cret".to_owned());
        let settings = resolve_text(text, &env).unwrap();
        let db = settings.database.unwrap();
        assert_eq!(db.kind, DbKind::Postgres);
        assert_eq!(settings.table.to_string(), "hare_outbox");
        assert_eq!(settings.relay.poll_interval, Duration::from_secs(1));
        assert_eq!(settings.relay.batch_size, 100);
        assert_eq!(settings.relay.exclude_topics, vec!["debug.*".to_owned()]);
        let DeliverySettings::One(delivery::BrokerConfig::Webhook(webhook)) = settings.delivery
        else {
            panic!("the example uses a webhook");
        };
        assert_eq!(
            webhook.resolved_secret().map(|s| s.bytes.as_slice()),
            Some(&b"s3cret"[..])
        );
        assert!(webhook.resolved_url().unwrap().value.starts_with("http"));
        assert_eq!(
            settings.wakeup,
            WakeupSettings::ListenNotify {
                channel: "hare_outbox".to_owned(),
                mode: WakeupMode::AfterCommit,
                listen_url: None,
            }
        );
        assert_eq!(settings.captures.len(), 2);
        for capture in &settings.captures {
            capture.validate().unwrap();
            assert_eq!(capture.payload, hare_outbox::ChangePayload::Changes);
        }
        let orders = &settings.captures[0];
        assert_eq!(orders.table, "sales_orders");
        assert_eq!(orders.exclude, ["updated_at", "created_at"]);
        assert_eq!(orders.ordering_key.as_deref(), Some("{table}:{pk}"));
        let prod = &settings.captures[1];
        assert!(
            prod.exclude.is_empty(),
            "fields replaces the default exclude"
        );
        assert_eq!(prod.fields.as_ref().map(Vec::len), Some(4));
    }

    #[test]
    fn pooler_and_listen_url_resolve_and_a_password_in_the_file_is_refused() {
        let env = |name: &str| {
            (name == "LISTEN_URL").then(|| "postgres://app:pw@db-direct:5432/erp".to_owned())
        };
        let s = resolve_text(
            "database_url = \"postgres://app@pgbouncer:6432/erp\"\ndatabase_transaction_pooler = true\n[wakeup]\nkind = \"listen_notify\"\nlisten_url_env = \"LISTEN_URL\"",
            &env,
        )
        .unwrap();
        assert!(s.database.as_ref().unwrap().transaction_pooler);
        let WakeupSettings::ListenNotify { listen_url, .. } = &s.wakeup else {
            panic!("{:?}", s.wakeup);
        };
        let url = listen_url.as_ref().unwrap();
        assert_eq!(url.value, "postgres://app:pw@db-direct:5432/erp");
        assert!(
            !s.wakeup.describe().contains("pw"),
            "{}",
            s.wakeup.describe()
        );
        let e = format!(
            "{:#}",
            resolve_text(
                "[wakeup]\nkind = \"listen_notify\"\nlisten_url = \"postgres://app:pw@db/erp\"",
                &no_env
            )
            .unwrap_err()
        );
        assert!(e.contains("listen_url") && !e.contains("pw@"), "{e}");
        let e = format!(
            "{:#}",
            resolve_text(
                "[wakeup]\nkind = \"listen_notify\"\nlisten_url = \"redis://db/0\"",
                &no_env
            )
            .unwrap_err()
        );
        assert!(e.contains("postgres://"), "{e}");
        let e = format!(
            "{:#}",
            resolve_text(
                "[wakeup]\nkind = \"redis\"\nurl = \"redis://r/0\"\nlisten_url = \"postgres://db/erp\"",
                &no_env
            )
            .unwrap_err()
        );
        assert!(e.contains("listen_url does not apply"), "{e}");
        let s = resolve_text("database_url = \"postgres://app@db/erp\"", &no_env).unwrap();
        let database = s.database.unwrap();
        assert!(!database.transaction_pooler, "off by default");
        assert!(!database.synchronous_relay_commits, "off by default");
        let s = resolve_text(
            "database_url = \"postgres://app@db/erp\"\ndatabase_synchronous_relay_commits = true",
            &no_env,
        )
        .unwrap();
        assert!(s.database.unwrap().synchronous_relay_commits);
    }

    #[test]
    fn wakeup_section_resolves_and_names_its_mistakes() {
        let s = resolve_text("", &no_env).unwrap();
        assert_eq!(s.wakeup, WakeupSettings::None);
        let s = resolve_text("[wakeup]\nkind = \"none\"", &no_env).unwrap();
        assert_eq!(s.wakeup, WakeupSettings::None);
        let s = resolve_text(
            "[wakeup]\nkind = \"listen_notify\"\nchannel = \"erp\"\nmode = \"in_transaction\"",
            &no_env,
        )
        .unwrap();
        assert_eq!(
            s.wakeup,
            WakeupSettings::ListenNotify {
                channel: "erp".to_owned(),
                mode: WakeupMode::InTransaction,
                listen_url: None,
            }
        );
        assert!(s.wakeup.check_backend(DbKind::Postgres).is_ok());
        let e = format!("{:#}", s.wakeup.check_backend(DbKind::Sqlite).unwrap_err());
        assert!(e.contains("listen_notify") && e.contains("sqlite"), "{e}");
        let e = format!("{:#}", s.wakeup.check_backend(DbKind::MySql).unwrap_err());
        assert!(e.contains("listen_notify") && e.contains("mysql"), "{e}");

        let e = parse("[wakeup]\nkind = \"pigeon\"")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("none") && e.contains("listen_notify") && e.contains("redis"),
            "{e}"
        );
        let e = parse("[wakeup]\nkind = \"listen_notify\"\nmode = \"later\"")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("after_commit") && e.contains("in_transaction"),
            "{e}"
        );
        assert!(error_text("[wakeup]\nchannel = \"x\"").contains("kind"));
        assert!(
            error_text("[wakeup]\nkind = \"none\"\nmode = \"in_transaction\"").contains("mode")
        );
        let long = "c".repeat(64);
        assert!(
            error_text(&format!(
                "[wakeup]\nkind = \"listen_notify\"\nchannel = \"{long}\""
            ))
            .contains("63 bytes")
        );
    }

    #[test]
    fn capture_entries_deserialize_and_merge_defaults() {
        let s = resolve_text(
            "[capture_defaults]\npayload = \"keys\"\nexclude = [\"updated_at\"]\n\n[[capture]]\ntable = \"a\"\n\n[[capture]]\ntable = \"b\"\nschema = \"erp\"\npayload = \"after\"\nordering_key = false\n",
            &no_env,
        )
        .unwrap();
        let [a, b] = &s.captures[..] else {
            panic!("{:?}", s.captures)
        };
        assert_eq!(
            (a.table.as_str(), a.payload),
            ("a", hare_outbox::ChangePayload::Keys)
        );
        assert_eq!(a.exclude, ["updated_at"]);
        assert_eq!(b.schema.as_deref(), Some("erp"));
        assert_eq!(b.payload, hare_outbox::ChangePayload::After);
        assert_eq!(b.ordering_key, None);
        assert_eq!(b.exclude, ["updated_at"]);

        assert!(error_text("[[capture]]\nlabel = \"x\"").contains("table is missing"));
        let e = error_text("[[capture]]\ntable = \"a\"\npayload_mode = \"after\"");
        assert!(
            e.contains("payload_mode") && e.contains("[[capture]] #1"),
            "{e}"
        );
        assert!(error_text("[capture_defaults]\ntable = \"a\"").contains("capture_defaults"));
        let e = error_text("[[capture]]\ntable = \"a\"\n[[capture]]\ntable = \"a\"");
        assert!(e.contains("#2") && e.contains("#1"), "{e}");
        let e = error_text("[capture_defaults]\npayload = \"all\"\n[[capture]]\ntable = \"a\"");
        assert!(e.contains("capture_defaults") && e.contains("all"), "{e}");
    }

    #[test]
    fn the_readme_config_example_parses() {
        let readme = include_str!("../../../../README.md");
        let section = readme
            .split("### Config")
            .nth(1)
            .expect("README has a Config section");
        let block: String = section
            .lines()
            .skip_while(|l| l.trim() != "```toml")
            .skip(1)
            .take_while(|l| l.trim() != "```")
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(block.contains("[delivery]"), "{block}");
        let env = |name: &str| (name == ENV_WEBHOOK_SECRET).then(|| "x".to_owned());
        let settings = resolve_text(&block, &env).unwrap();
        assert!(matches!(
            settings.delivery,
            DeliverySettings::One(delivery::BrokerConfig::Webhook(_))
        ));
    }

    #[test]
    fn an_empty_file_means_defaults_and_stdout() {
        let s = resolve_text("", &no_env).unwrap();
        assert!(s.database.is_none());
        assert!(matches!(
            s.delivery,
            DeliverySettings::One(delivery::BrokerConfig::Stdout)
        ));
        assert_eq!(s.table, OutboxTable::default());
        assert_eq!(s.relay.batch_size, 100);
        assert!(s.database().is_err());
    }

    #[test]
    fn overrides_beat_the_file() {
        let file = parse("database_url = \"sqlite:a.db\"\ntable = \"a\"").unwrap();
        let overrides = Overrides {
            database_url: Some("postgres://db/erp".into()),
            table: Some("erp.events".into()),
        };
        let s = resolve(file, None, overrides, &no_env).unwrap();
        let db = s.database.unwrap();
        assert_eq!(
            (db.kind, db.url.as_str()),
            (DbKind::Postgres, "postgres://db/erp")
        );
        assert_eq!(s.table.to_string(), "erp.events");
    }

    #[test]
    fn webhook_url_comes_from_the_environment() {
        let env =
            |name: &str| (name == ENV_WEBHOOK_URL).then(|| "http://127.0.0.1:9/hook".to_owned());
        let s = resolve_text(
            "[delivery]\nkind = \"webhook\"\nurl = \"http://x.invalid/\"",
            &env,
        )
        .unwrap();
        let DeliverySettings::One(delivery::BrokerConfig::Webhook(w)) = s.delivery else {
            panic!()
        };
        assert_eq!(w.resolved_url().unwrap().value, "http://127.0.0.1:9/hook");
        assert!(w.resolved_secret().is_none());
        assert_eq!(s.warnings.len(), 1, "unsigned webhooks are worth a warning");
        // With no [delivery] section at all, the variable alone picks a webhook.
        let s = resolve_text("", &env).unwrap();
        assert!(matches!(
            s.delivery,
            DeliverySettings::One(delivery::BrokerConfig::Webhook(_))
        ));
    }

    #[test]
    fn secret_env_names_the_variable() {
        let text = "[delivery]\nkind = \"webhook\"\nurl = \"http://127.0.0.1:9/\"\nsecret_env = \"MY_SECRET\"";
        let env = |name: &str| (name == "MY_SECRET").then(|| "abc".to_owned());
        let s = resolve_text(text, &env).unwrap();
        let DeliverySettings::One(delivery::BrokerConfig::Webhook(w)) = s.delivery else {
            panic!()
        };
        assert_eq!(
            w.resolved_secret().map(|s| s.bytes.as_slice()),
            Some(&b"abc"[..])
        );
        assert!(
            !format!("{w:?}").contains("abc"),
            "Debug must not show the secret"
        );
        assert!(error_text(text).contains("MY_SECRET"));
    }

    #[test]
    fn secret_file_is_read_relative_to_the_config_file() {
        let dir =
            std::env::temp_dir().join(format!("hare-outbox-cli-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("secret.txt"), "from-file\n").unwrap();
        let file = parse("[delivery]\nkind = \"webhook\"\nurl = \"http://127.0.0.1:9/\"\nsecret_file = \"secret.txt\"").unwrap();
        let s = resolve(
            file,
            Some(dir.join("hare-outbox.toml")),
            Overrides::default(),
            &no_env,
        )
        .unwrap();
        let DeliverySettings::One(delivery::BrokerConfig::Webhook(w)) = s.delivery else {
            panic!()
        };
        assert_eq!(
            w.resolved_secret().map(|s| s.bytes.as_slice()),
            Some(&b"from-file"[..])
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn mistakes_name_the_key_and_what_is_allowed() {
        let e = parse("[relay]\npoll_interval = 5").unwrap_err().to_string();
        assert!(
            e.contains("poll_interval") && e.contains("poll_interval_seconds"),
            "{e}"
        );
        let e = parse("[delivery]\nkind = \"pigeon\"")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("pigeon") && e.contains("stdout") && e.contains("kafka"),
            "{e}"
        );
        let e = parse("databse_url = \"x\"").unwrap_err().to_string();
        assert!(
            e.contains("databse_url") && e.contains("database_url"),
            "{e}"
        );

        assert!(error_text("[relay]\nbatch_size = 0").contains("batch_size"));
        assert!(error_text("[relay]\nbatch_size = -5").contains("batch_size"));
        assert!(error_text("[relay]\nmax_events_per_key = 0").contains("max_events_per_key"));
        assert!(error_text("[relay]\nlease_seconds = 0").contains("lease_seconds"));
        assert!(
            error_text("[relay]\nlease_seconds = 10\ndelivery_timeout_seconds = 10")
                .contains("delivery_timeout")
        );
        assert!(error_text("[relay]\ntopics = [\"doc.*.x\"]").contains("doc.*.x"));
        assert!(error_text("[relay]\ncleanup_batch_size = 0").contains("cleanup_batch_size"));
        assert!(error_text("database_url = \"oracle://db/x\"").contains("oracle://db/x"));
        assert!(error_text("database_url = \"oracle://db/x\"").contains("postgres://"));
        assert!(error_text("table = \"a b\"").contains("a b"));
        assert!(error_text("[delivery]\nkind = \"webhook\"").contains("url"));
        assert!(error_text("[delivery]\nurl = \"http://x/\"").contains("kind"));
        assert!(error_text("[delivery]\nkind = \"stdout\"\nurl = \"http://x/\"").contains("url"));
        let e =
            error_text("[delivery]\nkind = \"webhook\"\nurl = \"http://x/\"\nsecret = \"oops\"");
        assert!(e.contains("secret_env") && !e.contains("oops"), "{e}");
    }

    #[test]
    fn absurd_relay_values_are_refused_with_key_value_and_range() {
        let cases = [
            (
                "poll_interval_seconds = 0.000001",
                "poll_interval_seconds = 0.000001 is out of range; allowed 0.01 or more (seconds)",
            ),
            ("topics = []", "omit the topics key to take every topic"),
            (
                "concurrency = 1000000",
                "concurrency = 1000000 is out of range; allowed 1 to 10000",
            ),
            (
                "concurrency = 0",
                "concurrency = 0 is out of range; allowed 1 to 10000",
            ),
            (
                "lease_seconds = 0.001\ndelivery_timeout_seconds = 0.0005",
                "lease_seconds = 0.001 is out of range; allowed 1 or more (seconds)",
            ),
            (
                "delivery_timeout_seconds = 0.0005",
                "delivery_timeout_seconds = 0.0005 is out of range; allowed 0.01 or more (seconds)",
            ),
            (
                "lease_seconds = 5\ndelivery_timeout_seconds = 5",
                "delivery_timeout_seconds = 5 must be below lease_seconds = 5",
            ),
            (
                "delivery_timeout_seconds = 90",
                "must be below lease_seconds = 60 (the default)",
            ),
        ];
        for (text, expected) in cases {
            let error = resolve_text(&format!("[relay]\n{text}"), &no_env).unwrap_err();
            assert_eq!(
                crate::error::exit_code(&error),
                crate::error::EXIT_USAGE,
                "{text}"
            );
            let message = error_text(&format!("[relay]\n{text}"));
            assert!(message.contains(expected), "{text}: {message}");
        }
        resolve_text(
            "[relay]\npoll_interval_seconds = 0.01\nlease_seconds = 1\ndelivery_timeout_seconds = 0.01\nconcurrency = 10000",
            &no_env,
        )
        .unwrap();
    }

    #[test]
    fn secrets_in_the_database_url_are_refused_naming_the_parameter() {
        for (url, named) in [
            (
                "postgres://db/erp?password=Hunter2x",
                "the parameter password",
            ),
            (
                "postgres://db/erp?sslmode=require&sslpassword=Hunter2x",
                "the parameter sslpassword",
            ),
            (
                "postgres://db/erp?passfile=/run/Hunter2x",
                "the parameter passfile",
            ),
            (
                "postgres://app:Hunter2x@db/erp",
                "a password in the user info",
            ),
        ] {
            let text = format!("database_url = \"{url}\"");
            let error = resolve_text(&text, &no_env).unwrap_err();
            assert_eq!(
                crate::error::exit_code(&error),
                crate::error::EXIT_USAGE,
                "{url}"
            );
            let message = error_text(&text);
            assert!(message.contains(named), "{message}");
            assert!(message.contains("HARE_OUTBOX_DATABASE_URL"), "{message}");
            assert!(!message.contains("Hunter2x"), "{message}");
        }
        resolve_text(
            "database_url = \"postgres://app@db/erp?sslmode=require&sslkey=/k\"",
            &no_env,
        )
        .unwrap();
    }

    #[test]
    fn a_webhook_url_with_a_secret_in_the_file_is_refused() {
        let text = "[delivery]\nkind = \"webhook\"\nurl = \"https://h/in?token=x\"";
        let message = error_text(text);
        assert!(
            message.contains("carries a secret (the parameter token)")
                && message.contains("url_env")
                && message.contains("url_file"),
            "{message}"
        );
        let settings = resolve_text(
            "[delivery]\nkind = \"webhook\"\nurl = \"https://h.example/hook/T000?x=1\"\nurl_public = true\nheaders = { authorization = \"Bearer Tok3nValue\", x-api-key = \"K3yValue\", accept = \"text/plain\" }",
            &no_env,
        )
        .unwrap();
        let shown = format!("{:?}", settings.delivery);
        assert!(
            shown.contains("https://h.example/hook/T000?x=***"),
            "{shown}"
        );
        assert!(
            !shown.contains("Tok3nValue") && !shown.contains("K3yValue"),
            "{shown}"
        );
        assert!(shown.contains("text/plain"), "{shown}");
    }

    #[test]
    fn url_schemes_pick_the_backend() {
        assert_eq!(
            DbKind::from_url("postgres://a/b").unwrap(),
            DbKind::Postgres
        );
        assert_eq!(
            DbKind::from_url("postgresql://a/b").unwrap(),
            DbKind::Postgres
        );
        assert_eq!(DbKind::from_url("sqlite:x.db").unwrap(), DbKind::Sqlite);
        assert_eq!(DbKind::from_url("sqlite://x.db").unwrap(), DbKind::Sqlite);
        assert_eq!(
            DbKind::from_url("mysql://root@127.0.0.1/app").unwrap(),
            DbKind::MySql
        );
        assert_eq!(
            DbKind::from_url("MariaDB://root@127.0.0.1/app").unwrap(),
            DbKind::MySql
        );
        assert!(DbKind::from_url("x.db").is_err());
    }
}
