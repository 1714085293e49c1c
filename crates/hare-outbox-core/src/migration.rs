//! Versioned schema migrations: the types every backend shares and the decisions that need no
//! database — which versions are pending, and whether the database's record of what ran still
//! matches this build.
//!
//! Each backend keeps its migrations as numbered SQL template files, one stream per kind of table
//! ([`MigrationStream`]): `migrations/outbox/0001_create_outbox.sql`, `0002_….sql`, and the same
//! under `migrations/inbox/`. A template is rendered for one table the way the backend renders
//! its statements. `migrate` records every version it applies in the table
//! [`MIGRATIONS_TABLE`] of the table's own schema (PostgreSQL) or database file (SQLite): table
//! name, version, name, the [`Migration::checksum`] of the template, and when it ran. Each
//! version is applied in a transaction of its own together with its record, so a failure leaves
//! the table at the previous version. See `docs/architecture.md` for how to add a version.
//!
//! The checksum is taken over the template, not over the rendered SQL: the rendered text depends
//! on the table's declaration (extra columns, idempotency scope), which may change without the
//! migration changing. A template must never be edited once released; a change of schema is a new
//! version.

use std::fmt;

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::table::OutboxTable;

/// The table that records the applied migrations, in the schema (PostgreSQL) or attached
/// database (SQLite) of the table it records them for. No outbox or inbox table may have this
/// name.
pub const MIGRATIONS_TABLE: &str = "hare_outbox_migrations";

/// Which kind of table a migration stream versions. Each stream is numbered from 1 on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MigrationStream {
    /// The outbox table and its indexes.
    Outbox,
    /// The consumer-side inbox table ([`Inbox`](crate::Inbox)).
    Inbox,
}

impl MigrationStream {
    /// `"outbox"` or `"inbox"`: the directory of the stream's files under a backend's
    /// `migrations/`.
    pub fn name(self) -> &'static str {
        match self {
            MigrationStream::Outbox => "outbox",
            MigrationStream::Inbox => "inbox",
        }
    }
}

impl fmt::Display for MigrationStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One version of a stream as this build knows it: its number, its name and the SQL template of
/// its file (text the backend renders for a table; the core never reads it except to checksum it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    /// The version, from 1, without gaps.
    pub version: i64,
    /// A short name of lowercase letters, digits and `_`: the file's name without its number
    /// (`create_outbox` for `0001_create_outbox.sql`).
    pub name: &'static str,
    /// The SQL template of the version, as the backend's file holds it.
    pub template: &'static str,
}

impl Migration {
    /// A version of a stream.
    pub const fn new(version: i64, name: &'static str, template: &'static str) -> Self {
        Migration {
            version,
            name,
            template,
        }
    }

    /// The SHA-256 of the template, as 64 lowercase hex digits: what `migrate` records, and
    /// compares with the record later.
    pub fn checksum(&self) -> String {
        hex::encode(Sha256::digest(self.template.as_bytes()))
    }

    /// The file name the version has in its stream's directory: `0001_create_outbox.sql`.
    pub fn file_name(&self) -> String {
        format!("{:04}_{}.sql", self.version, self.name)
    }
}

/// A version the database records as applied: a row of [`MIGRATIONS_TABLE`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedMigration {
    /// The version.
    pub version: i64,
    /// The name recorded with it.
    pub name: String,
    /// The checksum of the template that ran ([`Migration::checksum`]).
    pub checksum: String,
    /// When it was applied (the database's clock).
    pub applied_at: DateTime<Utc>,
}

/// One version of a table's schema and whether the database has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationStatus {
    /// The version.
    pub version: i64,
    /// Its name.
    pub name: String,
    /// When it was applied; `None` while it is pending.
    pub applied_at: Option<DateTime<Utc>>,
}

impl MigrationStatus {
    /// Whether `migrate` still has to apply it.
    pub fn is_pending(&self) -> bool {
        self.applied_at.is_none()
    }
}

/// The newest version applied in `status`, 0 when none is.
pub fn applied_version(status: &[MigrationStatus]) -> i64 {
    status
        .iter()
        .filter(|s| !s.is_pending())
        .map(|s| s.version)
        .max()
        .unwrap_or(0)
}

/// Refuses a list of versions that is not numbered 1, 2, 3, … with valid names: a backend's
/// mistake, caught by its tests.
///
/// # Errors
/// [`Error::Configuration`] naming the first version out of place or the bad name.
pub fn check_list(stream: MigrationStream, known: &[Migration]) -> Result<()> {
    for (i, migration) in known.iter().enumerate() {
        let expected = i64::try_from(i).unwrap_or(i64::MAX).saturating_add(1);
        if migration.version != expected {
            return Err(Error::configuration(format!(
                "{stream} migration {:?} has version {}, but version {expected} comes next; versions are numbered from 1 without gaps",
                migration.name, migration.version
            )));
        }
        let valid = !migration.name.is_empty()
            && migration
                .name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !valid {
            return Err(Error::configuration(format!(
                "{stream} migration {} has the name {:?}; names are lowercase ASCII letters, digits and `_`",
                migration.version, migration.name
            )));
        }
    }
    Ok(())
}

/// Refuses a table named [`MIGRATIONS_TABLE`].
///
/// # Errors
/// [`Error::Configuration`] naming the table.
pub fn check_table(stream: MigrationStream, table: &OutboxTable) -> Result<()> {
    if table.name().eq_ignore_ascii_case(MIGRATIONS_TABLE) {
        return Err(Error::configuration(format!(
            "{stream} table {table}: the name {MIGRATIONS_TABLE:?} is reserved for the record of applied migrations; choose another table name"
        )));
    }
    Ok(())
}

/// Every version of `known` with what `recorded` (the rows of [`MIGRATIONS_TABLE`] for `table`)
/// says of it, oldest first.
///
/// # Errors
/// [`Error::Migration`] when the record disagrees with this build, naming the version: a
/// recorded version this build does not know (a newer build migrated the table), a recorded
/// name or checksum that differs from this build's file (the file was edited after it ran, or
/// the record was), or a pending version below an applied one.
pub fn status(
    stream: MigrationStream,
    table: &OutboxTable,
    known: &[Migration],
    recorded: &[AppliedMigration],
) -> Result<Vec<MigrationStatus>> {
    for row in recorded {
        let Some(migration) = known.iter().find(|m| m.version == row.version) else {
            let newest = known.last().map_or(0, |m| m.version);
            return Err(Error::Migration(format!(
                "{stream} table {table} has migration version {} ({:?}) applied, which this build does not know (its newest is version {newest}); the table was migrated by a newer hare-outbox: run that one",
                row.version, row.name
            )));
        };
        if row.name != migration.name {
            return Err(Error::Migration(format!(
                "{stream} table {table}: migration version {} is recorded as {:?} in {MIGRATIONS_TABLE}, but this build's version {} is {:?}; the record belongs to another kind of table or another build",
                row.version, row.name, migration.version, migration.name
            )));
        }
        let checksum = migration.checksum();
        if row.checksum != checksum {
            return Err(Error::Migration(format!(
                "{stream} table {table}: migration version {} ({:?}) was applied with checksum {}, but this build's file {} has checksum {checksum}; a released migration file was edited, or its row in {MIGRATIONS_TABLE} was changed — restore the file (or the row), and put schema changes in a new version",
                row.version,
                row.name,
                row.checksum,
                migration.file_name()
            )));
        }
    }
    let status: Vec<MigrationStatus> = known
        .iter()
        .map(|m| MigrationStatus {
            version: m.version,
            name: m.name.to_owned(),
            applied_at: recorded
                .iter()
                .find(|r| r.version == m.version)
                .map(|r| r.applied_at),
        })
        .collect();
    let newest_applied = applied_version(&status);
    if let Some(gap) = status
        .iter()
        .find(|s| s.is_pending() && s.version < newest_applied)
    {
        return Err(Error::Migration(format!(
            "{stream} table {table}: migration version {} ({:?}) is not applied, but version {newest_applied} is; versions apply in order, so the record in {MIGRATIONS_TABLE} was changed by hand — restore its row",
            gap.version, gap.name
        )));
    }
    Ok(status)
}

/// The versions of `known` that `recorded` lacks, oldest first; see [`status`].
///
/// # Errors
/// As [`status`].
pub fn pending<'a>(
    stream: MigrationStream,
    table: &OutboxTable,
    known: &'a [Migration],
    recorded: &[AppliedMigration],
) -> Result<Vec<&'a Migration>> {
    let status = status(stream, table, known, recorded)?;
    Ok(known
        .iter()
        .zip(status)
        .filter(|(_, s)| s.is_pending())
        .map(|(m, _)| m)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KNOWN: &[Migration] = &[
        Migration::new(1, "create_outbox", "CREATE TABLE {table} (a INT);"),
        Migration::new(2, "add_index", "CREATE INDEX ON {table} (a);"),
        Migration::new(3, "add_column", "ALTER TABLE {table} ADD b INT;"),
    ];

    fn table() -> OutboxTable {
        OutboxTable::parse("billing.outbox").expect("valid")
    }

    fn applied(m: &Migration) -> AppliedMigration {
        AppliedMigration {
            version: m.version,
            name: m.name.to_owned(),
            checksum: m.checksum(),
            applied_at: DateTime::from_timestamp(1_800_000_000, 0).expect("valid time"),
        }
    }

    fn message(e: Error) -> String {
        match e {
            Error::Migration(message) => message,
            other => panic!("not a migration error: {other}"),
        }
    }

    #[test]
    fn a_fresh_table_has_every_version_pending_and_a_migrated_one_none() {
        let stream = MigrationStream::Outbox;
        let all = pending(stream, &table(), KNOWN, &[]).expect("pending");
        assert_eq!(all.iter().map(|m| m.version).collect::<Vec<_>>(), [1, 2, 3]);
        let recorded: Vec<AppliedMigration> = KNOWN.iter().map(applied).collect();
        assert!(
            pending(stream, &table(), KNOWN, &recorded)
                .expect("ok")
                .is_empty()
        );
        let status = status(stream, &table(), KNOWN, &recorded[..1]).expect("status");
        assert_eq!(
            status.iter().map(|s| s.is_pending()).collect::<Vec<_>>(),
            [false, true, true]
        );
        assert_eq!(applied_version(&status), 1);
        assert_eq!(applied_version(&[]), 0);
        assert_eq!(status[0].applied_at, Some(recorded[0].applied_at));
        assert_eq!(status[2].name, "add_column");
    }

    #[test]
    fn an_edited_checksum_names_the_version_and_both_checksums() {
        let mut recorded: Vec<AppliedMigration> = KNOWN.iter().map(applied).collect();
        recorded[1].checksum = "0".repeat(64);
        let e = message(
            status(MigrationStream::Outbox, &table(), KNOWN, &recorded).expect_err("drift"),
        );
        assert!(e.contains("migration version 2 (\"add_index\")"), "{e}");
        assert!(
            e.contains(&"0".repeat(64)) && e.contains(&KNOWN[1].checksum()),
            "{e}"
        );
        assert!(
            e.contains("0002_add_index.sql") && e.contains("billing.outbox"),
            "{e}"
        );
    }

    #[test]
    fn an_unknown_version_a_renamed_one_and_a_gap_are_refused() {
        let mut newer: Vec<AppliedMigration> = KNOWN.iter().map(applied).collect();
        newer.push(AppliedMigration {
            version: 4,
            name: "later".to_owned(),
            ..applied(&KNOWN[0])
        });
        let e = message(status(MigrationStream::Outbox, &table(), KNOWN, &newer).expect_err("x"));
        assert!(
            e.contains("version 4 (\"later\")") && e.contains("newest is version 3"),
            "{e}"
        );

        let mut renamed = vec![applied(&KNOWN[0])];
        renamed[0].name = "create_inbox".to_owned();
        let e = message(status(MigrationStream::Inbox, &table(), KNOWN, &renamed).expect_err("x"));
        assert!(
            e.starts_with(
                "inbox table billing.outbox: migration version 1 is recorded as \"create_inbox\""
            ),
            "{e}"
        );

        let gap = vec![applied(&KNOWN[0]), applied(&KNOWN[2])];
        let e = message(status(MigrationStream::Outbox, &table(), KNOWN, &gap).expect_err("x"));
        assert!(
            e.contains("version 2 (\"add_index\") is not applied, but version 3 is"),
            "{e}"
        );
    }

    #[test]
    fn lists_must_count_from_one_with_valid_names() {
        check_list(MigrationStream::Outbox, KNOWN).expect("valid list");
        check_list(MigrationStream::Outbox, &[]).expect("an empty list is valid");
        let skipped = [KNOWN[0], KNOWN[2]];
        let e = check_list(MigrationStream::Outbox, &skipped).expect_err("gap");
        assert!(
            e.to_string()
                .contains("has version 3, but version 2 comes next"),
            "{e}"
        );
        let named = [Migration::new(1, "Create Outbox", "")];
        let e = check_list(MigrationStream::Inbox, &named).expect_err("name");
        assert!(e.to_string().contains("\"Create Outbox\""), "{e}");
    }

    #[test]
    fn checksums_and_file_names() {
        let m = Migration::new(7, "x", "");
        assert_eq!(
            m.checksum(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(m.file_name(), "0007_x.sql");
        assert_ne!(KNOWN[0].checksum(), KNOWN[1].checksum());
    }

    #[test]
    fn the_record_table_cannot_be_an_outbox() {
        let reserved = OutboxTable::parse("app.HARE_OUTBOX_MIGRATIONS").expect("valid name");
        let e = check_table(MigrationStream::Outbox, &reserved).expect_err("reserved");
        assert!(e.to_string().contains("reserved"), "{e}");
        check_table(MigrationStream::Outbox, &table()).expect("an ordinary name");
    }
}
