//! `dead-letters retry`: dead letters back to the queue, their attempts reset.

use anyhow::Context as _;
use hare_outbox::Journal;

use crate::args::{RetryArgs, topic_refs};
use crate::config::Settings;
use crate::config::journal::check_topics;
use crate::db::Db;
use crate::error::usage;
use crate::ui::step;

/// `hare-outbox dead-letters retry`: returns the dead letters chosen by `--topic`/`--id` (or
/// every one with `--all`) to the queue with their attempts reset; prints how many.
///
/// # Errors
/// A usage error, before connecting, when no filter and no `--all` is given or a topic is
/// malformed; a runtime error when the database fails.
pub async fn retry(settings: &Settings, args: &RetryArgs) -> anyhow::Result<()> {
    if !args.all && args.topics.is_empty() && args.ids.is_empty() {
        return Err(usage(
            "dead-letters retry needs a filter: --topic TOPIC or --id UUID (repeatable), or --all to retry every dead letter",
        ));
    }
    check_topics("--topic", &args.topics)?;
    let db = Db::connect(settings.database()?).await?;
    let bar = step("returning dead letters to the queue");
    let retried = with_backend!(db, backend => {
        Journal::new(backend, settings.table.clone())
            .retry_dead_lettered(&topic_refs(&args.topics), &args.ids)
            .await
    })
    .with_context(|| format!("retrying the dead letters of {} failed", settings.table))?;
    bar.finish_and_clear();
    println!(
        "{}: {retried} dead letter{} returned to the queue",
        settings.table,
        if retried == 1 { "" } else { "s" }
    );
    Ok(())
}
