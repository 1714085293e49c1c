//! Versioned migrations on SQLite: the numbered files of `migrations/outbox/` and
//! `migrations/inbox/`, the record of what ran (`queries/migrations_table.sql`, in the table's
//! own database file), and the runner.
//!
//! Each version runs in a `BEGIN IMMEDIATE` transaction of its own together with its record: the
//! write lock is taken before the record is read, so concurrent migrates (tasks or processes)
//! queue behind each other within the busy timeout and the later ones find the version applied.

use hare_outbox_core::backend::template::render;
use hare_outbox_core::migration::{self, AppliedMigration, MIGRATIONS_TABLE, Migration};
use hare_outbox_core::{Error, MigrationStatus, MigrationStream, OutboxTable, Result};
use sqlx::{AssertSqlSafe, Row, SqliteConnection, SqlitePool};

use crate::decode::parse_timestamp;
use crate::error::map_err;
use crate::sql::{self, Query, quote_ident};

/// The outbox table's versions, oldest first. A new version is a new file and a new line here;
/// a released file is never edited.
pub(crate) const OUTBOX: &[Migration] = &[Migration::new(
    1,
    "create_outbox",
    include_str!("../migrations/outbox/0001_create_outbox.sql"),
)];

/// The inbox table's versions, oldest first.
pub(crate) const INBOX: &[Migration] = &[Migration::new(
    1,
    "create_inbox",
    include_str!("../migrations/inbox/0001_create_inbox.sql"),
)];

/// The versions of both streams a backend runs: this crate's, or a test's.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Migrations {
    pub(crate) outbox: &'static [Migration],
    pub(crate) inbox: &'static [Migration],
}

impl Default for Migrations {
    fn default() -> Self {
        Migrations {
            outbox: OUTBOX,
            inbox: INBOX,
        }
    }
}

impl Migrations {
    pub(crate) fn of(self, stream: MigrationStream) -> &'static [Migration] {
        match stream {
            MigrationStream::Outbox => self.outbox,
            MigrationStream::Inbox => self.inbox,
        }
    }
}

/// The quoted record table in `table`'s database (`main` without a schema).
fn migrations_table(table: &OutboxTable) -> String {
    match table.schema() {
        Some(schema) => format!("{}.{}", quote_ident(schema), quote_ident(MIGRATIONS_TABLE)),
        None => quote_ident(MIGRATIONS_TABLE),
    }
}

/// A SQL string literal.
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

fn with_record_table(sql: &str, table: &OutboxTable) -> String {
    render(sql, &[("migrations", migrations_table(table))])
}

/// The record's table.
fn prelude(table: &OutboxTable) -> String {
    with_record_table(include_str!("../queries/migrations_table.sql"), table)
}

/// A version's template rendered for `table`, followed by its record.
fn version_sql(stream: MigrationStream, table: &OutboxTable, m: &Migration) -> String {
    let body = match stream {
        MigrationStream::Outbox => sql::render_table(m.template, table, &[]),
        MigrationStream::Inbox => crate::inbox::render(m.template, table),
    };
    let record = render(
        include_str!("../queries/migration_record.sql"),
        &[
            ("migrations", migrations_table(table)),
            ("table_name", literal(table.name())),
            ("version", m.version.to_string()),
            ("name", literal(m.name)),
            ("checksum", literal(&m.checksum())),
        ],
    );
    format!(
        "-- {stream} version {}: {} ({})\n{}\n{record}",
        m.version,
        m.name,
        m.file_name(),
        body.trim_end()
    )
}

/// What `migrate` would run for `table` with versions up to `applied` in place. Declared extra
/// columns missing from an existing table are not in it: SQLite has no `ADD COLUMN IF NOT
/// EXISTS`, so `migrate` checks the table first.
pub(crate) fn sql(
    known: &[Migration],
    stream: MigrationStream,
    table: &OutboxTable,
    applied: i64,
) -> String {
    let pending: Vec<&Migration> = known.iter().filter(|m| m.version > applied).collect();
    let mut sql = String::new();
    if !pending.is_empty() {
        sql.push_str(&prelude(table));
        for m in pending {
            sql.push('\n');
            sql.push_str(&version_sql(stream, table, m));
        }
    }
    sql
}

/// The columns of `name` in `table`'s database, on `conn`: empty when there is no such table.
async fn columns(
    conn: &mut SqliteConnection,
    table: &OutboxTable,
    name: &str,
) -> Result<Vec<String>> {
    sqlx::query_scalar(AssertSqlSafe(Query::TableColumns.render(table)))
        .bind(name)
        .bind(table.schema().unwrap_or("main"))
        .fetch_all(&mut *conn)
        .await
        .map_err(map_err)
}

/// The record of `table`'s versions, on `conn`; empty without a record table.
async fn recorded(
    conn: &mut SqliteConnection,
    table: &OutboxTable,
) -> Result<Vec<AppliedMigration>> {
    if columns(conn, table, MIGRATIONS_TABLE).await?.is_empty() {
        return Ok(Vec::new());
    }
    let rows = sqlx::query(AssertSqlSafe(with_record_table(
        include_str!("../queries/migration_list.sql"),
        table,
    )))
    .bind(table.name())
    .fetch_all(&mut *conn)
    .await
    .map_err(map_err)?;
    rows.iter()
        .map(|row| {
            let applied_at: String = row.try_get("applied_at").map_err(map_err)?;
            let version: i64 = row.try_get("version").map_err(map_err)?;
            Ok(AppliedMigration {
                version,
                name: row.try_get("name").map_err(map_err)?,
                checksum: row.try_get("checksum").map_err(map_err)?,
                applied_at: parse_timestamp(&applied_at).ok_or_else(|| {
                    Error::Migration(format!(
                        "table {table}: migration version {version} has applied_at {applied_at:?} in {MIGRATIONS_TABLE}, which is not a timestamp"
                    ))
                })?,
            })
        })
        .collect()
}

/// Every known version of `stream` with what the record says of it; writes nothing.
pub(crate) async fn status(
    pool: &SqlitePool,
    known: &[Migration],
    stream: MigrationStream,
    table: &OutboxTable,
) -> Result<Vec<MigrationStatus>> {
    let mut conn = pool.acquire().await.map_err(map_err)?;
    let rows = recorded(&mut conn, table).await?;
    migration::status(stream, table, known, &rows)
}

/// Adds the declared extra columns `table` lacks (checked with `pragma_table_info`).
async fn add_missing_columns(conn: &mut SqliteConnection, table: &OutboxTable) -> Result<()> {
    if table.columns().is_empty() {
        return Ok(());
    }
    let existing = columns(conn, table, table.name()).await?;
    // SQLite compares column names case-insensitively.
    for column in table.columns().iter().filter(|c| {
        !existing
            .iter()
            .any(|name| name.eq_ignore_ascii_case(c.name()))
    }) {
        sqlx::raw_sql(AssertSqlSafe(sql::add_column(table, column)))
            .execute(&mut *conn)
            .await
            .map_err(map_err)?;
    }
    Ok(())
}

/// Applies the pending versions of `stream` to `table`, one `BEGIN IMMEDIATE` transaction per
/// version, then (outbox tables) adds the declared extra columns the table lacks.
///
/// # Errors
/// As [`migration::status`] when the record disagrees with `known` (nothing applied);
/// [`Error::Configuration`] for a table named like the record; a database error of the failing
/// version (the versions before it stay applied).
pub(crate) async fn run(
    pool: &SqlitePool,
    known: &[Migration],
    stream: MigrationStream,
    table: &OutboxTable,
) -> Result<()> {
    migration::check_table(stream, table)?;
    migration::check_list(stream, known)?;
    loop {
        let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.map_err(map_err)?;
        sqlx::raw_sql(AssertSqlSafe(prelude(table)))
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        let rows = recorded(&mut tx, table).await?;
        let pending = migration::pending(stream, table, known, &rows)?;
        let Some(next) = pending.first() else {
            if stream == MigrationStream::Outbox {
                add_missing_columns(&mut tx, table).await?;
            }
            return tx.commit().await.map_err(map_err);
        };
        if next.version == 1 && !columns(&mut tx, table, table.name()).await?.is_empty() {
            // Made by a migrate from before versions were recorded: version 1 is idempotent, so
            // running it creates only what such a table lacks, and records it.
            tracing::info!(%table, %stream, "adopting a table created before migrations were versioned as version 1");
        }
        sqlx::raw_sql(AssertSqlSafe(version_sql(stream, table, next)))
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        tx.commit().await.map_err(map_err)?;
        tracing::info!(%table, %stream, version = next.version, name = next.name, "applied migration");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lists_count_from_one_and_every_file_is_listed() {
        for (stream, known) in [
            (MigrationStream::Outbox, OUTBOX),
            (MigrationStream::Inbox, INBOX),
        ] {
            migration::check_list(stream, known).expect("numbered from 1");
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("migrations")
                .join(stream.name());
            let mut files: Vec<String> = std::fs::read_dir(&dir)
                .expect("the stream's directory")
                .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                .collect();
            files.sort();
            let listed: Vec<String> = known.iter().map(|m| m.file_name()).collect();
            assert_eq!(files, listed, "{}", dir.display());
        }
    }

    #[test]
    fn the_sql_of_pending_versions_creates_the_record_and_records_each_version() {
        let table = OutboxTable::parse("billing.events").expect("valid");
        let all = sql(OUTBOX, MigrationStream::Outbox, &table, 0);
        assert!(
            all.starts_with("CREATE TABLE IF NOT EXISTS \"billing\".\"hare_outbox_migrations\""),
            "{all}"
        );
        assert!(all.contains("-- outbox version 1: create_outbox (0001_create_outbox.sql)\n"));
        assert!(
            all.contains("CREATE TABLE IF NOT EXISTS \"billing\".\"events\" ("),
            "{all}"
        );
        assert!(
            all.contains(&format!(
                "VALUES ('events', 1, 'create_outbox', '{}', strftime(",
                OUTBOX[0].checksum()
            )),
            "{all}"
        );
        assert!(!all.replace("'{}'", "").contains('{'), "{all}");
        assert_eq!(sql(OUTBOX, MigrationStream::Outbox, &table, 1), "");

        let inbox = sql(INBOX, MigrationStream::Inbox, &table, 0);
        assert!(
            inbox.contains("PRIMARY KEY (consumer, event_id)"),
            "{inbox}"
        );
        assert!(
            inbox.contains("VALUES ('events', 1, 'create_inbox', "),
            "{inbox}"
        );
    }
}
