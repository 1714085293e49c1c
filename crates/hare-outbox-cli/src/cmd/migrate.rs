//! `migrate` and `migrate --status`: applies the pending schema versions of the outbox table,
//! or shows which the database has.

use hare_outbox::backend::Backend;
use hare_outbox::{MigrationStatus, Outbox};

use crate::config::Settings;
use crate::db::{Db, Source, migrate_on, open, versions};

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
