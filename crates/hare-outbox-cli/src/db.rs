//! The database: the backend a URL selects ([`Db`], `with_backend!`), connecting to it, and
//! reading the schema versions it records without creating anything.

use std::str::FromStr as _;
use std::time::Duration;

use anyhow::Context as _;
use hare_outbox::backend::Backend;
use hare_outbox::mysql::MySqlBackend;
use hare_outbox::postgres::PgBackend;
use hare_outbox::sqlite::SqliteBackend;
use hare_outbox::{MigrationStatus, MigrationStream, Outbox};
use sqlx::Connection as _;

use crate::config::{Database, DbKind, Settings};
use crate::error::{redact_url, usage};

/// How long connecting to the database may take at start-up.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

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
            $crate::db::Db::Postgres($backend) => $body,
            $crate::db::Db::Sqlite($backend) => $body,
            $crate::db::Db::MySql($backend) => $body,
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

// ---------------------------------------------------------------------------------------------
// The schema versions a database records

/// Where the versions shown come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// The database's record.
    Database,
    /// A SQLite file that does not exist yet: every version pending.
    NoFile,
    /// `schema --all`: every version, without connecting.
    All,
}

/// The database when it exists: PostgreSQL connected, SQLite opened without creating the file or
/// changing its journal mode; `None` for a SQLite file (or in-memory database) that does not
/// exist yet.
///
/// # Errors
/// When the URL is refused or the database cannot be reached.
pub(crate) async fn open_existing(database: &Database) -> anyhow::Result<Option<Db>> {
    match database.kind {
        DbKind::Postgres | DbKind::MySql => Db::connect(database).await.map(Some),
        DbKind::Sqlite => {
            let shown = redact_url(&database.url);
            let options = sqlx::sqlite::SqliteConnectOptions::from_str(&database.url)
                .map_err(|e| usage(format!("database URL {shown} is not valid: {e}")))?
                .busy_timeout(hare_outbox::sqlite::BUSY_TIMEOUT);
            if !options.get_filename().exists() {
                return Ok(None);
            }
            let pool = sqlx::sqlite::SqlitePoolOptions::new()
                .max_connections(1)
                .connect_with(options)
                .await
                .with_context(|| format!("opening {shown} failed"))?;
            Ok(Some(Db::Sqlite(hare_outbox::sqlite::SqliteBackend::new(
                pool,
            ))))
        }
    }
}

/// The database of `settings` and where its versions come from.
pub(crate) async fn open(settings: &Settings, all: bool) -> anyhow::Result<(Db, Source)> {
    let database = settings.database()?;
    if all {
        return Ok((Db::lazy(database)?, Source::All));
    }
    match open_existing(database).await? {
        Some(db) => Ok((db, Source::Database)),
        None => Ok((Db::lazy(database)?, Source::NoFile)),
    }
}

/// Every version of the outbox table, from the database or (without one) all pending.
pub(crate) async fn versions<B: Backend>(
    outbox: &Outbox<B>,
    source: Source,
) -> anyhow::Result<Vec<MigrationStatus>> {
    if source == Source::Database {
        return outbox.migration_status().await.with_context(|| {
            format!(
                "reading the schema versions of the outbox table {} failed",
                outbox.table()
            )
        });
    }
    Ok(outbox
        .backend()
        .migrations(MigrationStream::Outbox)
        .iter()
        .map(|m| MigrationStatus {
            version: m.version,
            name: m.name.to_owned(),
            applied_at: None,
        })
        .collect())
}

/// Brings the outbox table of `settings` to the newest schema version, a spinner on stderr
/// meanwhile; logs the version reached.
///
/// # Errors
/// When the database refuses the DDL or records versions that disagree with this build.
pub(crate) async fn migrate_on<B: Backend>(backend: B, settings: &Settings) -> anyhow::Result<()> {
    let outbox = Outbox::new(backend, settings.table.clone());
    let step = crate::ui::step(&format!(
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
