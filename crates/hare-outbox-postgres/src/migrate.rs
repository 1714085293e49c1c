//! Versioned migrations on PostgreSQL: the numbered files of `migrations/outbox/` and
//! `migrations/inbox/`, the record of what ran (`queries/migrations_table.sql`, in the table's
//! schema), and the runner.
//!
//! The runner serializes on transaction-scoped advisory locks only (it works behind a
//! transaction pooler): one transaction under the lock of every migrate creates the schema and
//! the record's table, then each version runs in a transaction of its own under the lock of its
//! table, after reading the record again, together with its row in the record.

use hare_outbox_core::backend::template::render;
use hare_outbox_core::migration::{self, AppliedMigration, MIGRATIONS_TABLE};
use hare_outbox_core::{MigrationStatus, MigrationStream, OutboxTable, Result};
use sqlx::postgres::PgConnection;
use sqlx::{AssertSqlSafe, Row};

use crate::error::translate;
use crate::exec::Db;
use crate::sql::{Statements, quote_ident};

/// The outbox table's versions, oldest first. A new version is a new file and a new line here;
/// a released file is never edited.
pub(crate) const OUTBOX: &[migration::Migration] = &[migration::Migration::new(
    1,
    "create_outbox",
    include_str!("../migrations/outbox/0001_create_outbox.sql"),
)];

/// The inbox table's versions, oldest first.
pub(crate) const INBOX: &[migration::Migration] = &[migration::Migration::new(
    1,
    "create_inbox",
    include_str!("../migrations/inbox/0001_create_inbox.sql"),
)];

/// The versions of both streams a backend runs: this crate's, or a test's.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Migrations {
    pub(crate) outbox: &'static [migration::Migration],
    pub(crate) inbox: &'static [migration::Migration],
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
    pub(crate) fn of(self, stream: MigrationStream) -> &'static [migration::Migration] {
        match stream {
            MigrationStream::Outbox => self.outbox,
            MigrationStream::Inbox => self.inbox,
        }
    }
}

/// The quoted record table in `table`'s schema (unqualified: the current schema).
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

/// `sql` with the record table filled in.
fn with_record_table(sql: &str, table: &OutboxTable) -> String {
    render(sql, &[("migrations", migrations_table(table))])
}

/// `CREATE SCHEMA` (for a schema-qualified table) and the record's table.
fn prelude(table: &OutboxTable) -> String {
    let mut sql = String::new();
    if let Some(schema) = table.schema() {
        sql.push_str(&format!(
            "CREATE SCHEMA IF NOT EXISTS {};\n",
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
fn version_sql(stream: MigrationStream, table: &OutboxTable, m: &migration::Migration) -> String {
    let body = match stream {
        MigrationStream::Outbox => Statements::for_table(table).render(m.template),
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

/// The statements every migrate of an outbox table runs after the versions: the declared extra
/// columns, added where missing.
fn after_versions(stream: MigrationStream, table: &OutboxTable) -> String {
    match stream {
        MigrationStream::Outbox => Statements::for_table(table).extra_column_alters.clone(),
        MigrationStream::Inbox => String::new(),
    }
}

/// What `migrate` would run for `table` with versions up to `applied` in place; see
/// [`Backend::migration_sql`](hare_outbox_core::Backend::migration_sql).
pub(crate) fn sql(
    known: &[migration::Migration],
    stream: MigrationStream,
    table: &OutboxTable,
    applied: i64,
) -> String {
    let pending: Vec<&migration::Migration> =
        known.iter().filter(|m| m.version > applied).collect();
    let mut sql = String::new();
    if !pending.is_empty() {
        sql.push_str(&prelude(table));
        for m in pending {
            sql.push('\n');
            sql.push_str(&version_sql(stream, table, m));
        }
    }
    let after = after_versions(stream, table);
    if !after.is_empty() {
        sql.push_str("\n-- declared extra columns, added where missing\n");
        sql.push_str(&after);
    }
    sql
}

/// Whether `schema.name` (no schema: the current one) is a table, on `conn`.
async fn exists(
    db: Db<'_>,
    conn: &mut PgConnection,
    schema: Option<&str>,
    name: &str,
) -> Result<bool> {
    sqlx::query_scalar(include_str!("../queries/table_exists.sql"))
        .bind(schema)
        .bind(name)
        .persistent(db.persistent())
        .fetch_one(&mut *conn)
        .await
        .map_err(translate)
}

/// The record of `table`'s versions, on `conn`; empty without a record table.
async fn recorded(
    db: Db<'_>,
    conn: &mut PgConnection,
    table: &OutboxTable,
) -> Result<Vec<AppliedMigration>> {
    if !exists(db, conn, table.schema(), MIGRATIONS_TABLE).await? {
        return Ok(Vec::new());
    }
    let rows = sqlx::query(AssertSqlSafe(with_record_table(
        include_str!("../queries/migration_list.sql"),
        table,
    )))
    .bind(table.name())
    .persistent(db.persistent())
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

/// Every known version of `stream` with what the record says of it; reads in one transaction
/// (a pooler keeps it on one server connection), writes nothing.
pub(crate) async fn status(
    db: Db<'_>,
    known: &[migration::Migration],
    stream: MigrationStream,
    table: &OutboxTable,
) -> Result<Vec<MigrationStatus>> {
    let mut tx = db.pool.begin().await.map_err(translate)?;
    let rows = recorded(db, &mut tx, table).await?;
    tx.commit().await.map_err(translate)?;
    migration::status(stream, table, known, &rows)
}

/// Applies the pending versions of `stream` to `table`, one transaction per version, then the
/// statements of every migrate (declared extra columns).
///
/// # Errors
/// As [`migration::status`] when the record disagrees with `known` (nothing applied);
/// [`Error::Configuration`](hare_outbox_core::Error::Configuration) for a table named like the
/// record; a database error of the failing version (the versions before it stay applied).
pub(crate) async fn run(
    db: Db<'_>,
    known: &[migration::Migration],
    stream: MigrationStream,
    table: &OutboxTable,
) -> Result<()> {
    migration::check_table(stream, table)?;
    migration::check_list(stream, known)?;
    let mut tx = db.pool.begin().await.map_err(translate)?;
    sqlx::query(include_str!("../queries/migration_lock_schema.sql"))
        .persistent(db.persistent())
        .execute(&mut *tx)
        .await
        .map_err(translate)?;
    sqlx::raw_sql(AssertSqlSafe(prelude(table)))
        .execute(&mut *tx)
        .await
        .map_err(translate)?;
    tx.commit().await.map_err(translate)?;
    loop {
        let mut tx = db.pool.begin().await.map_err(translate)?;
        sqlx::query(include_str!("../queries/migration_lock_table.sql"))
            .bind(table.schema())
            .bind(table.name())
            .persistent(db.persistent())
            .execute(&mut *tx)
            .await
            .map_err(translate)?;
        // Read under the lock: a migrate that held it before may have applied the next version.
        let rows = recorded(db, &mut tx, table).await?;
        let pending = migration::pending(stream, table, known, &rows)?;
        let Some(next) = pending.first() else {
            let after = after_versions(stream, table);
            if !after.is_empty() {
                sqlx::raw_sql(AssertSqlSafe(after))
                    .execute(&mut *tx)
                    .await
                    .map_err(translate)?;
            }
            return tx.commit().await.map_err(translate);
        };
        if next.version == 1 && exists(db, &mut tx, table.schema(), table.name()).await? {
            // Made by a migrate from before versions were recorded: version 1 is idempotent, so
            // running it creates only what such a table lacks, and records it.
            tracing::info!(%table, %stream, "adopting a table created before migrations were versioned as version 1");
        }
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
            all.starts_with("CREATE SCHEMA IF NOT EXISTS \"billing\";\n"),
            "{all}"
        );
        assert!(
            all.contains("CREATE TABLE IF NOT EXISTS \"billing\".\"hare_outbox_migrations\""),
            "{all}"
        );
        assert!(all.contains("-- outbox version 1: create_outbox (0001_create_outbox.sql)\n"));
        assert!(
            all.contains("CREATE TABLE IF NOT EXISTS \"billing\".\"events\" ("),
            "{all}"
        );
        assert!(
            all.contains("\"events_pending_idx\" ON \"billing\".\"events\""),
            "{all}"
        );
        assert!(
            all.contains(&format!(
                "VALUES ('events', 1, 'create_outbox', '{}')",
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

    #[test]
    fn declared_extra_columns_follow_every_version_and_stand_alone_when_none_is_pending() {
        let table = OutboxTable::parse("outbox")
            .expect("valid")
            .with_column(
                hare_outbox_core::ExtraColumn::new("tenant", hare_outbox_core::ColumnType::Text)
                    .expect("valid"),
            )
            .expect("column");
        let alter = "ALTER TABLE \"outbox\" ADD COLUMN IF NOT EXISTS \"tenant\" TEXT;\n";
        let all = sql(OUTBOX, MigrationStream::Outbox, &table, 0);
        assert!(
            all.contains(",\n    \"tenant\" TEXT,\n") && all.ends_with(alter),
            "{all}"
        );
        let none = sql(OUTBOX, MigrationStream::Outbox, &table, 1);
        assert!(none.ends_with(alter) && !none.contains("CREATE"), "{none}");
    }
}
