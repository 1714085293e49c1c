//! Versioned migrations on MySQL and MariaDB: the numbered files of `migrations/outbox/` and
//! `migrations/inbox/`, the record of what ran (`queries/migrations_table.sql`, in the table's
//! own database), and the runner.
//!
//! MySQL commits every DDL statement on its own, so a version's DDL cannot roll back with its
//! record: each version runs in a transaction of its own with its record (its DML rolls back when
//! a later statement of it fails; its DDL stays, which is why every version is written to be
//! idempotent), and concurrent migrates of one table are serialized by a named lock
//! (`GET_LOCK`), held on one connection from the first read of the record to the last version.

use hare_outbox_core::backend::template::render;
use hare_outbox_core::migration::{self, AppliedMigration, MIGRATIONS_TABLE, Migration};
use hare_outbox_core::{Error, MigrationStatus, MigrationStream, OutboxTable, Result};
use sqlx::mysql::{MySqlConnection, MySqlPool};
use sqlx::{AssertSqlSafe, Connection, Row};

use crate::error::translate;
use crate::sql::{self, literal, quote_ident};

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

/// The oldest MySQL this backend runs on: `SKIP LOCKED`, `JSON_TABLE`, expression defaults.
pub const MIN_MYSQL: (u32, u32) = (8, 0);
/// The oldest MariaDB this backend runs on: `SKIP LOCKED` came in 10.6.
pub const MIN_MARIADB: (u32, u32) = (10, 6);

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

/// The quoted record table in `table`'s database.
fn migrations_table(table: &OutboxTable) -> String {
    sql::qualified(table, MIGRATIONS_TABLE)
}

fn with_record_table(sql: &str, table: &OutboxTable) -> String {
    render(sql, &[("migrations", migrations_table(table))])
}

/// The database of a qualified table, then the record's table.
fn prelude(table: &OutboxTable) -> String {
    let mut sql = String::new();
    if let Some(schema) = table.schema() {
        sql.push_str(&format!(
            "CREATE DATABASE IF NOT EXISTS {};\n",
            quote_ident(schema)
        ));
    }
    sql.push_str(&with_record_table(
        include_str!("../queries/migrations_table.sql"),
        table,
    ));
    sql
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
/// columns missing from an existing table are not in it (MySQL has no `ADD COLUMN IF NOT
/// EXISTS`): `migrate` reads `information_schema` first.
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

/// The columns of `name` in `table`'s database: empty when there is no such table.
async fn columns(
    conn: &mut MySqlConnection,
    table: &OutboxTable,
    name: &str,
) -> Result<Vec<String>> {
    sqlx::query_scalar(include_str!("../queries/table_columns.sql"))
        .bind(table.schema())
        .bind(name)
        .fetch_all(&mut *conn)
        .await
        .map_err(translate)
}

/// The record of `table`'s versions; empty without a record table.
async fn recorded(
    conn: &mut MySqlConnection,
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
    .map_err(translate)?;
    rows.iter()
        .map(|row| {
            Ok(AppliedMigration {
                version: row.try_get("version").map_err(translate)?,
                name: row.try_get("name").map_err(translate)?,
                checksum: row.try_get("checksum").map_err(translate)?,
                applied_at: row.try_get("applied_at").map_err(translate)?,
            })
        })
        .collect()
}

/// Every known version of `stream` with what the record says of it; writes nothing.
pub(crate) async fn status(
    pool: &MySqlPool,
    known: &[Migration],
    stream: MigrationStream,
    table: &OutboxTable,
) -> Result<Vec<MigrationStatus>> {
    let mut conn = pool.acquire().await.map_err(translate)?;
    let rows = recorded(&mut conn, table).await?;
    migration::status(stream, table, known, &rows)
}

/// The server's version text (`8.0.36`, `10.11.6-MariaDB-0+deb12u1`).
pub(crate) async fn server_version(conn: &mut MySqlConnection) -> Result<String> {
    sqlx::query_scalar("SELECT CAST(VERSION() AS CHAR)")
        .fetch_one(&mut *conn)
        .await
        .map_err(translate)
}

/// Refuses a server older than MySQL 8.0 or MariaDB 10.6, naming its version.
///
/// # Errors
/// [`Error::Configuration`] naming the server's version and the oldest one supported.
pub(crate) fn check_version(version: &str) -> Result<()> {
    let mariadb = version.to_ascii_lowercase().contains("mariadb");
    let mut numbers = version
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<u32>().unwrap_or(0));
    let found = (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0));
    let (product, oldest) = if mariadb {
        ("MariaDB", MIN_MARIADB)
    } else {
        ("MySQL", MIN_MYSQL)
    };
    if found < oldest {
        return Err(Error::configuration(format!(
            "the database server is {product} {version}; hare-outbox needs {product} {}.{} or newer (FOR UPDATE SKIP LOCKED{})",
            oldest.0,
            oldest.1,
            if mariadb { "" } else { ", JSON_TABLE" }
        )));
    }
    Ok(())
}

/// Adds the declared extra columns `table` lacks (read from `information_schema`), all in one
/// `ALTER TABLE` (atomic: all or none). A `NOT NULL` column is refused for a table that holds
/// rows, as PostgreSQL refuses it (MySQL would fill it with the type's zero value).
///
/// # Errors
/// [`Error::Integrity`] naming the column when a `NOT NULL` column meets rows;
/// [`Error::Database`] when the server refuses the `ALTER`.
async fn add_missing_columns(conn: &mut MySqlConnection, table: &OutboxTable) -> Result<()> {
    if table.columns().is_empty() {
        return Ok(());
    }
    let existing = columns(conn, table, table.name()).await?;
    let missing: Vec<&hare_outbox_core::ExtraColumn> = table
        .columns()
        .iter()
        .filter(|c| {
            !existing
                .iter()
                .any(|name| name.eq_ignore_ascii_case(c.name()))
        })
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let quoted = sql::qualified(table, table.name());
    if let Some(required) = missing.iter().find(|c| c.is_not_null()) {
        let rows: Option<i64> =
            sqlx::query_scalar(AssertSqlSafe(format!("SELECT 1 FROM {quoted} LIMIT 1")))
                .fetch_optional(&mut *conn)
                .await
                .map_err(translate)?;
        if rows.is_some() {
            return Err(Error::Integrity {
                message: format!(
                    "cannot add the NOT NULL column {} to {table}: the table holds rows, which would be null in it",
                    required.name()
                ),
                source: "NOT NULL column added to a table with rows".into(),
            });
        }
    }
    let mut clauses = Vec::new();
    for column in missing {
        clauses.push(format!("ADD COLUMN {}", sql::column_def(table, column)));
        if let Some(fk) = sql::foreign_key(table, column) {
            clauses.push(format!("ADD {fk}"));
        }
    }
    sqlx::raw_sql(AssertSqlSafe(format!(
        "ALTER TABLE {quoted} {}",
        clauses.join(", ")
    )))
    .execute(&mut *conn)
    .await
    .map_err(translate)?;
    Ok(())
}

/// The name of the lock that serializes the migrations of `table` (at most 64 characters).
fn lock_name(table: &OutboxTable) -> String {
    let full = format!("{}.{}", table.schema().unwrap_or(""), table.name());
    let mut name = format!("hare_outbox.migrate:{full}");
    if name.len() > 64 {
        // A stable digest keeps the name unique within MySQL's 64-character limit.
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in full.bytes() {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
        name = format!("hare_outbox.migrate:{hash:016x}");
    }
    name
}

/// Applies the pending versions of `stream` to `table` (see the module's text), then (outbox
/// tables) adds the declared extra columns the table lacks.
///
/// # Errors
/// [`Error::Configuration`] for a server older than MySQL 8.0 / MariaDB 10.6 (naming it); as
/// [`migration::status`] when the record disagrees with `known` (nothing applied); a database
/// error of the failing version (the versions before it stay applied).
pub(crate) async fn run(
    pool: &MySqlPool,
    known: &[Migration],
    stream: MigrationStream,
    table: &OutboxTable,
) -> Result<()> {
    migration::check_table(stream, table)?;
    migration::check_list(stream, known)?;
    let mut conn = pool.acquire().await.map_err(translate)?;
    check_version(&server_version(&mut conn).await?)?;
    let name = lock_name(table);
    let locked: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(?, 300)")
        .bind(&name)
        .fetch_one(&mut *conn)
        .await
        .map_err(translate)?;
    if locked != Some(1) {
        return Err(Error::TransactionRetry {
            message: format!(
                "migrate of {table}: the migration lock {name:?} was not granted within 300 s"
            ),
            source: "migration lock".into(),
        });
    }
    let outcome = run_locked(&mut conn, known, stream, table).await;
    let released = sqlx::query("SELECT RELEASE_LOCK(?)")
        .bind(&name)
        .execute(&mut *conn)
        .await;
    if released.is_err() {
        // The lock ends with the connection: do not give it back to the pool holding it.
        conn.close_on_drop();
    }
    outcome
}

async fn run_locked(
    conn: &mut MySqlConnection,
    known: &[Migration],
    stream: MigrationStream,
    table: &OutboxTable,
) -> Result<()> {
    sqlx::raw_sql(AssertSqlSafe(prelude(table)))
        .execute(&mut *conn)
        .await
        .map_err(translate)?;
    loop {
        let rows = recorded(conn, table).await?;
        let pending = migration::pending(stream, table, known, &rows)?;
        let Some(next) = pending.first() else {
            if stream == MigrationStream::Outbox {
                add_missing_columns(conn, table).await?;
            }
            return Ok(());
        };
        if next.version == 1 && !columns(conn, table, table.name()).await?.is_empty() {
            tracing::info!(%table, %stream, "adopting a table created before migrations were versioned as version 1");
        }
        let mut tx = conn.begin().await.map_err(translate)?;
        sqlx::raw_sql(AssertSqlSafe(version_sql(stream, table, next)))
            .execute(&mut *tx)
            .await
            .map_err(translate)?;
        tx.commit().await.map_err(translate)?;
        tracing::info!(%table, %stream, version = next.version, name = next.name, "applied migration");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_servers_are_refused_by_name() {
        assert!(check_version("8.0.36").is_ok());
        assert!(check_version("8.4.0-commercial").is_ok());
        assert!(check_version("10.11.6-MariaDB-0+deb12u1").is_ok());
        assert!(check_version("11.4.2-MariaDB").is_ok());
        let e = check_version("5.7.44-log").unwrap_err().to_string();
        assert!(
            e.contains("MySQL 5.7.44-log") && e.contains("8.0 or newer"),
            "{e}"
        );
        let e = check_version("10.5.9-MariaDB").unwrap_err().to_string();
        assert!(
            e.contains("MariaDB 10.5.9") && e.contains("10.6 or newer"),
            "{e}"
        );
    }

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
            all.starts_with("CREATE DATABASE IF NOT EXISTS `billing`;"),
            "{all}"
        );
        assert!(
            all.contains("CREATE TABLE IF NOT EXISTS `billing`.`events` ("),
            "{all}"
        );
        assert!(all.contains("`billing`.`events_key_locks`"), "{all}");
        assert!(
            all.contains(&format!(
                "VALUES ('events', 1, 'create_outbox', '{}')",
                OUTBOX[0].checksum()
            )),
            "{all}"
        );
        assert!(!all.contains('{'), "{all}");
        assert_eq!(sql(OUTBOX, MigrationStream::Outbox, &table, 1), "");
    }
}
