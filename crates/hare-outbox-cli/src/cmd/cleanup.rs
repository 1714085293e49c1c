//! `cleanup` and `dead-letters cleanup`: finished events older than an age deleted in batches.

use std::ops::ControlFlow;

use hare_outbox::backend::FinishedState;
use hare_outbox::journal::CleanupOutcome;
use hare_outbox::{CancellationToken, Journal};

use crate::args::CleanupArgs;
use crate::config::Settings;
use crate::config::journal::check_topics;
use crate::db::Db;
use crate::error::usage;
use crate::ui::spinner;

/// `hare-outbox cleanup` (`state` = published) and `dead-letters cleanup` (dead-lettered):
/// deletes the finished events older than `--older-than` (or `[cleanup]`), in batches of
/// `--batch-size` rows (default `[relay] cleanup_batch_size`), each its own short statement (seed
/// 001 § «Мёртвые» события, очередь и очистка). Pending events are never touched. A signal stops
/// it after the batch in flight; the summary says how many rows were deleted.
///
/// # Errors
/// A usage error, before connecting, when no age is given or a topic is malformed; a runtime
/// error when a delete fails (the batches before it stay deleted).
pub async fn cleanup(
    settings: &Settings,
    args: &CleanupArgs,
    state: FinishedState,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let (what, configured, key) = match state {
        FinishedState::Published => (
            "published events",
            settings.cleanup.published,
            "published_older_than_days",
        ),
        FinishedState::DeadLettered => (
            "dead letters",
            settings.cleanup.dead_lettered,
            "dead_lettered_older_than_days",
        ),
    };
    let older_than = args.older_than.or(configured).ok_or_else(|| {
        usage(format!(
            "no age given: pass --older-than (e.g. 7d, 12h) or set [cleanup] {key} in the config file"
        ))
    })?;
    check_topics("--topic", &args.topics)?;
    let topics: Vec<&str> = args.topics.iter().map(String::as_str).collect();
    let batch_size = match args.batch_size {
        Some(n) => n,
        None => settings.relay.cleanup_batch_size,
    };
    let db = Db::connect(settings.database()?).await?;
    let bar = spinner(&format!("deleting {what}"));
    // Checked between statements, so the batch in flight always finishes and is counted.
    let progress = |deleted: u64| {
        bar.set_position(deleted);
        if shutdown.is_cancelled() {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    };
    let outcome = with_backend!(db, backend => {
        Journal::new(backend, settings.table.clone())
            .cleanup(state, older_than, &topics, batch_size, &progress)
            .await
    });
    bar.finish_and_clear();
    let CleanupOutcome { deleted, stopped } = outcome.map_err(|e| match e {
        hare_outbox::Error::Validation { .. } | hare_outbox::Error::Configuration(_) => {
            usage(e.to_string())
        }
        e => anyhow::Error::new(e).context(format!("deleting {what} of {} failed", settings.table)),
    })?;
    println!(
        "{}: deleted {deleted} {what} finished more than {} ago{}",
        settings.table,
        humantime::format_duration(older_than),
        if stopped {
            " (stopped by a signal; run it again to finish)"
        } else {
            ""
        }
    );
    Ok(())
}
