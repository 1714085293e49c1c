//! `migrate --status` and `schema`: which schema versions the database has, and the SQL of the
//! others. Both only read; a SQLite file that does not exist is a database without any version,
//! and is not created.

use std::str::FromStr as _;

use anyhow::Context as _;
use hare_outbox::backend::Backend;
use hare_outbox::migration::applied_version;
use hare_outbox::{MigrationStatus, MigrationStream, Outbox};

use crate::commands::Db;
use crate::config::{Database, DbKind, Settings};
use crate::error::{redact_url, usage};

/// Where the versions shown come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
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
async fn open_existing(database: &Database) -> anyhow::Result<Option<Db>> {
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
async fn open(settings: &Settings, all: bool) -> anyhow::Result<(Db, Source)> {
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
async fn versions<B: Backend>(
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

/// `hare-outbox migrate --status`: one line per schema version, applied (with when) or pending.
///
/// # Errors
/// When the database cannot be reached, or its record disagrees with this build.
pub async fn status(settings: &Settings) -> anyhow::Result<()> {
    let (db, source) = open(settings, false).await?;
    let text = with_backend!(db, backend => {
        let outbox = Outbox::new(backend, settings.table.clone());
        status_text(&outbox, &versions(&outbox, source).await?, source)
    });
    print!("{text}");
    Ok(())
}

/// The report of `migrate --status`.
fn status_text<B: Backend>(
    outbox: &Outbox<B>,
    versions: &[MigrationStatus],
    source: Source,
) -> String {
    let applied = versions.iter().filter(|s| !s.is_pending()).count();
    let note = match source {
        Source::NoFile => " (the database file does not exist yet)",
        _ => "",
    };
    let mut text = format!(
        "outbox table {} ({}): {applied} of {} schema versions applied{note}\n",
        outbox.table(),
        outbox.backend().name(),
        versions.len()
    );
    let width = versions
        .iter()
        .map(|s| s.name.len())
        .chain(["name".len()])
        .max()
        .unwrap_or_default();
    text.push_str(&format!(
        "{:>7}  {:<width$}  {:<7}  applied_at\n",
        "version", "name", "state"
    ));
    for s in versions {
        let (state, at) = match s.applied_at {
            Some(at) => (
                "applied",
                at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            ),
            None => ("pending", "-".to_owned()),
        };
        text.push_str(&format!(
            "{:>7}  {:<width$}  {state:<7}  {at}\n",
            s.version, s.name
        ));
    }
    text
}

/// `hare-outbox schema`: the SQL of the versions the database lacks (every version with `all`),
/// after a comment naming them; or a comment saying that none is pending.
///
/// # Errors
/// When the database cannot be reached (the message points at `--all`), or its record
/// disagrees with this build.
pub async fn schema(settings: &Settings, all: bool) -> anyhow::Result<()> {
    let (db, source) = open(settings, all).await.context(
        "reading which schema versions the database has failed (`hare-outbox schema --all` prints every version without connecting)",
    )?;
    let text = with_backend!(db, backend => {
        let outbox = Outbox::new(backend, settings.table.clone());
        schema_text(&outbox, &versions(&outbox, source).await?, source)
    });
    println!("{}", text.trim_end());
    Ok(())
}

/// The output of `schema`.
fn schema_text<B: Backend>(
    outbox: &Outbox<B>,
    versions: &[MigrationStatus],
    source: Source,
) -> String {
    let applied = applied_version(versions);
    let pending: Vec<&MigrationStatus> = versions.iter().filter(|s| s.is_pending()).collect();
    let table = outbox.table();
    let backend = outbox.backend().name();
    let mut text = if pending.is_empty() {
        format!(
            "-- hare-outbox: outbox table {table} ({backend}) is at schema version {applied}, the newest; no migration is pending\n"
        )
    } else {
        let why = match source {
            Source::Database if applied == 0 => "the database has none of them",
            Source::Database => "the database has the versions before them",
            Source::NoFile => "the database file does not exist yet",
            Source::All => "--all: every version, as for an empty database",
        };
        let list: Vec<String> = pending
            .iter()
            .map(|s| format!("{} {}", s.version, s.name))
            .collect();
        format!(
            "-- hare-outbox: outbox table {table} ({backend}), pending schema versions: {} ({why})\n",
            list.join(", ")
        )
    };
    text.push_str(&outbox.schema_sql_after(applied));
    text
}
