//! `schema`: the SQL of the schema versions the database lacks (or of every one with `--all`).
//! Only reads; a SQLite file that does not exist is not created.

use anyhow::Context as _;
use hare_outbox::backend::Backend;
use hare_outbox::migration::applied_version;
use hare_outbox::{MigrationStatus, Outbox};

use crate::config::Settings;
use crate::db::{Source, open, versions};

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
