//! `migrate`, `schema` and `relay`: written once, generic over the backend (the wake-up aside,
//! which only PostgreSQL has): PostgreSQL, SQLite, MySQL / MariaDB.

use std::str::FromStr as _;
use std::time::Duration;

use anyhow::Context as _;
use hare_outbox::backend::Backend;
use hare_outbox::mysql::MySqlBackend;
use hare_outbox::postgres::{ListenNotifyWakeup, NotifyMode, PgBackend};
use hare_outbox::sqlite::SqliteBackend;
use hare_outbox::{CancellationToken, Outbox, OutboxRelay};
use sqlx::Connection as _;

use crate::config::{Database, DbKind, Settings, WakeupMode, WakeupSettings};
use crate::error::{redact_url, usage};

/// How long connecting to the database may take at start-up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// A connected (or, for `schema`, lazily connecting) backend of either kind.
pub enum Db {
    /// PostgreSQL.
    Postgres(PgBackend),
    /// SQLite.
    Sqlite(SqliteBackend),
    /// MySQL or MariaDB.
    MySql(MySqlBackend),
}

/// Runs `$body` with `$backend` bound to the backend inside `$db`, whatever its type.
macro_rules! with_backend {
    ($db:expr, $backend:ident => $body:expr) => {
        match $db {
            $crate::commands::Db::Postgres($backend) => $body,
            $crate::commands::Db::Sqlite($backend) => $body,
            $crate::commands::Db::MySql($backend) => $body,
        }
    };
}

/// The log target of the PostgreSQL driver's URL parser, whose only message
/// ("ignoring unrecognized connect parameter") prints the parameter's value — a secret for
/// `sslpassword=…`. Its events are dropped at every level; [`warn_unknown_parameters`] says
/// the same without values.
const DRIVER_URL_PARSER: &str = "sqlx_postgres::options::parse";

/// Whether log events of `target` are dropped (see [`DRIVER_URL_PARSER`]).
pub fn is_silenced_driver_log(target: &str) -> bool {
    target == DRIVER_URL_PARSER
}

/// The query parameters the PostgreSQL driver reads from a URL; any other is ignored by it.
const DRIVER_PARAMETERS: &[&str] = &[
    "sslmode",
    "ssl-mode",
    "sslrootcert",
    "ssl-root-cert",
    "ssl-ca",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "statement-cache-capacity",
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "application_name",
    "options",
];

/// The parameters of a PostgreSQL `url` the driver ignores, by name only.
pub fn unknown_parameters(url: &str) -> Vec<String> {
    let Ok(parsed) = url::Url::parse(url) else {
        return Vec::new();
    };
    parsed
        .query_pairs()
        .map(|(name, _)| name.into_owned())
        .filter(|name| !DRIVER_PARAMETERS.contains(&name.as_str()) && !name.starts_with("options["))
        .collect()
}

/// Logs a warning naming (never with values) the parameters of `url` the driver ignores.
fn warn_unknown_parameters(url: &str) {
    let unknown = unknown_parameters(url);
    if !unknown.is_empty() {
        tracing::warn!(
            parameters = %unknown.join(", "),
            "the database URL has parameters the PostgreSQL driver ignores (values not shown)"
        );
    }
}

/// `text` with URLs and secret assignments in it redacted.
fn in_text(text: &str) -> String {
    hare_outbox::redact::in_text(text, hare_outbox::redact::UrlKind::Connection)
}

impl Db {
    /// Connects to `database`.
    ///
    /// # Errors
    /// When the database cannot be reached or the URL is refused by the driver.
    pub async fn connect(database: &Database) -> anyhow::Result<Db> {
        let shown = redact_url(&database.url);
        match database.kind {
            DbKind::Postgres => {
                warn_unknown_parameters(&database.url);
                let options =
                    sqlx::postgres::PgConnectOptions::from_str(&database.url).map_err(|e| {
                        usage(format!(
                            "database URL {shown} is not valid: {}",
                            in_text(&e.to_string())
                        ))
                    })?;
                // One plain connection first: a pool reports only "timed out", this says why.
                let first = tokio::time::timeout(
                    CONNECT_TIMEOUT,
                    sqlx::PgConnection::connect_with(&options),
                )
                .await
                .map_err(|_| {
                    anyhow::anyhow!(
                        "connecting to {shown} failed: no answer within {} s",
                        CONNECT_TIMEOUT.as_secs()
                    )
                })?
                .with_context(|| format!("connecting to {shown} failed"))?;
                first.close().await.ok();
                let pool = sqlx::postgres::PgPoolOptions::new()
                    .max_connections(5)
                    .acquire_timeout(CONNECT_TIMEOUT)
                    .connect_with(options)
                    .await
                    .with_context(|| format!("connecting to {shown} failed"))?;
                Ok(Db::Postgres(
                    PgBackend::new(pool)
                        .with_transaction_pooler(database.transaction_pooler)
                        .with_synchronous_relay_commits(database.synchronous_relay_commits),
                ))
            }
            DbKind::Sqlite => {
                let pool = hare_outbox::sqlite::connect(&database.url)
                    .await
                    .with_context(|| format!("opening {shown} failed"))?;
                Ok(Db::Sqlite(SqliteBackend::new(pool)))
            }
            DbKind::MySql => {
                let options = hare_outbox::mysql::connect_options(&database.url).map_err(|e| {
                    usage(format!(
                        "database URL {shown} is not valid: {}",
                        in_text(&e.to_string())
                    ))
                })?;
                // One plain connection first: a pool reports only "timed out", this says why.
                let first = tokio::time::timeout(
                    CONNECT_TIMEOUT,
                    sqlx::MySqlConnection::connect_with(&options),
                )
                .await
                .map_err(|_| {
                    anyhow::anyhow!(
                        "connecting to {shown} failed: no answer within {} s",
                        CONNECT_TIMEOUT.as_secs()
                    )
                })?
                .with_context(|| format!("connecting to {shown} failed"))?;
                first.close().await.ok();
                let pool = sqlx::mysql::MySqlPoolOptions::new()
                    .max_connections(5)
                    .acquire_timeout(CONNECT_TIMEOUT)
                    .connect_with(options)
                    .await
                    .with_context(|| format!("connecting to {shown} failed"))?;
                Ok(Db::MySql(MySqlBackend::new(pool)))
            }
        }
    }

    /// A backend that connects only when first used: enough to print its DDL.
    ///
    /// # Errors
    /// When the driver refuses the URL.
    pub fn lazy(database: &Database) -> anyhow::Result<Db> {
        let shown = redact_url(&database.url);
        Ok(match database.kind {
            DbKind::Postgres => Db::Postgres(
                PgBackend::new(sqlx::PgPool::connect_lazy(&database.url).map_err(|e| {
                    usage(format!("database URL {shown}: {}", in_text(&e.to_string())))
                })?)
                .with_transaction_pooler(database.transaction_pooler)
                .with_synchronous_relay_commits(database.synchronous_relay_commits),
            ),
            DbKind::Sqlite => Db::Sqlite(SqliteBackend::new(
                sqlx::SqlitePool::connect_lazy(&database.url).map_err(|e| {
                    usage(format!("database URL {shown}: {}", in_text(&e.to_string())))
                })?,
            )),
            DbKind::MySql => {
                let options = hare_outbox::mysql::connect_options(&database.url).map_err(|e| {
                    usage(format!("database URL {shown}: {}", in_text(&e.to_string())))
                })?;
                Db::MySql(MySqlBackend::new(
                    sqlx::mysql::MySqlPoolOptions::new().connect_lazy_with(options),
                ))
            }
        })
    }
}

/// `hare-outbox migrate`: applies the pending schema versions of the outbox table.
///
/// # Errors
/// When the database is unreachable, refuses the DDL, or records versions that disagree with
/// this build.
pub async fn migrate(settings: &Settings) -> anyhow::Result<()> {
    let database = settings.database()?;
    let db = Db::connect(database).await?;
    with_backend!(db, backend => migrate_on(backend, settings).await)
}

async fn migrate_on<B: Backend>(backend: B, settings: &Settings) -> anyhow::Result<()> {
    let outbox = Outbox::new(backend, settings.table.clone());
    let step = crate::journal::step(&format!(
        "bringing the outbox table {} to the newest schema version",
        settings.table
    ));
    // The backend logs each version it applies.
    let migrated = outbox
        .migrate()
        .await
        .with_context(|| format!("migrating the outbox table {} failed", settings.table));
    step.finish_and_clear();
    migrated?;
    tracing::info!(
        backend = outbox.backend().name(),
        table = %settings.table,
        version = outbox
            .backend()
            .migrations(hare_outbox::MigrationStream::Outbox)
            .last()
            .map_or(0, |m| m.version),
        "outbox table is in place"
    );
    Ok(())
}

/// `hare-outbox relay`: delivers until `shutdown` is cancelled, then finishes the batch in
/// flight, marks it and returns.
///
/// # Errors
/// When the delivery or relay options are refused, or the database is unreachable at start.
pub async fn relay(
    settings: &Settings,
    create_table: bool,
    destinations: hare_outbox::Destinations,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let database = settings.database()?;
    let delivery = settings.delivery.build_for_relay(
        &settings.delivery_name,
        &settings.delivery_options,
        &settings.relay.breaker,
    )?;
    // Validate before connecting, so a config mistake is reported as one.
    settings.relay.validate()?;
    settings.wakeup.check_backend(database.kind)?;
    settings.wakeup.check_for_relay()?;
    let broker_wakeup = settings.wakeup.build_broker()?;
    let db = Db::connect(database).await?;
    match db {
        Db::Postgres(backend) => {
            let mut outbox = Outbox::new(backend.clone(), settings.table.clone());
            if let Some(wakeup) = broker_wakeup {
                outbox = outbox.with_shared_wakeup(wakeup)?;
            }
            if let WakeupSettings::ListenNotify {
                channel,
                mode,
                listen_url,
            } = &settings.wakeup
            {
                let mode = match mode {
                    WakeupMode::AfterCommit => NotifyMode::AfterCommit {
                        coalesce: Duration::from_millis(1),
                    },
                    WakeupMode::InTransaction => NotifyMode::InTransaction,
                };
                let mut wakeup = ListenNotifyWakeup::new(backend.pool().clone())
                    .with_channel(channel)
                    .map_err(|e| usage(format!("[wakeup] {e}")))?
                    .with_mode(mode);
                if let Some(url) = listen_url {
                    // One connection held for LISTEN; connected when the relay subscribes.
                    let pool = sqlx::postgres::PgPoolOptions::new()
                        .max_connections(2)
                        .acquire_timeout(CONNECT_TIMEOUT)
                        .connect_lazy(&url.value)
                        .map_err(|e| usage(format!("[wakeup] listen_url {}: {e}", url.shown())))?;
                    wakeup = wakeup.with_listen_pool(pool);
                } else if backend.transaction_pooler() {
                    // A LISTEN sent through the pooler would hear nothing and stay registered on
                    // a server connection, which then hands notifications to the application's
                    // own clients: the relay polls instead.
                    tracing::warn!(
                        "database_transaction_pooler = true and [wakeup] kind = \"listen_notify\" without listen_url: LISTEN cannot go through a transaction pooler, so this relay does not LISTEN and polls every poll_interval_seconds; set [wakeup] listen_url to a direct connection"
                    );
                    return relay_on(
                        outbox,
                        settings,
                        delivery,
                        create_table,
                        destinations,
                        shutdown,
                    )
                    .await;
                }
                outbox = outbox.with_wakeup(wakeup)?;
            }
            relay_on(
                outbox,
                settings,
                delivery,
                create_table,
                destinations,
                shutdown,
            )
            .await
        }
        Db::Sqlite(backend) => {
            let mut outbox = Outbox::new(backend, settings.table.clone());
            if let Some(wakeup) = broker_wakeup {
                outbox = outbox.with_shared_wakeup(wakeup)?;
            }
            relay_on(
                outbox,
                settings,
                delivery,
                create_table,
                destinations,
                shutdown,
            )
            .await
        }
        Db::MySql(backend) => {
            let mut outbox = Outbox::new(backend, settings.table.clone());
            if let Some(wakeup) = broker_wakeup {
                outbox = outbox.with_shared_wakeup(wakeup)?;
            }
            relay_on(
                outbox,
                settings,
                delivery,
                create_table,
                destinations,
                shutdown,
            )
            .await
        }
    }
}

async fn relay_on<B: Backend>(
    outbox: Outbox<B>,
    settings: &Settings,
    delivery: std::sync::Arc<dyn hare_outbox::Delivery>,
    create_table: bool,
    destinations: hare_outbox::Destinations,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    if create_table {
        migrate_on(outbox.backend().clone(), settings).await?;
    }
    let config = settings.relay.clone();
    tracing::info!(
        backend = outbox.backend().name(),
        table = %settings.table,
        delivery = %settings.delivery.describe(),
        wakeup = %settings.wakeup.describe(),
        name = %config.name,
        poll_interval_seconds = config.poll_interval.as_secs_f64(),
        batch_size = config.batch_size,
        lease_seconds = config.lease.as_secs_f64(),
        "relay starting"
    );
    let relay = OutboxRelay::new(outbox, delivery, config)?.with_destinations(destinations);
    relay.run(shutdown).await?;
    let stats = relay.stats();
    tracing::info!(
        delivered = stats.delivered,
        failed = stats.failed,
        dead_lettered = stats.dead_lettered,
        polls = stats.polls,
        "relay stopped cleanly"
    );
    Ok(())
}
