//! The outbox read as the journal of what happened in the system: listing
//! events with filters and keyset pagination, a timeline for charts, and the operator's actions on
//! dead letters and finished events.
//!
//! [`Journal`] is what the dashboard, the `hare-outbox events`, `backlog`, `dead-letters` and
//! `cleanup` commands, and programs of your own read the outbox through. It needs no delivery and
//! never leases: reading the journal does not disturb running relays.
//!
//! ```
//! use hare_outbox_core::journal::{EventQuery, Journal};
//! use hare_outbox_core::{EventStatus, JournalBackend, OutboxTable};
//!
//! /// Prints the dead letters of the `doc.` topics, two pages of 50.
//! async fn dead_letters(backend: impl JournalBackend) -> hare_outbox_core::Result<()> {
//! let journal = Journal::new(backend, OutboxTable::parse("hare_outbox")?);
//! let query = EventQuery::new()
//!     .with_topics(&["doc.*"])?
//!     .with_statuses(&[EventStatus::Dead])
//!     .with_limit(50)?;
//! let page = journal.list(&query).await?;
//! if let Some(next) = page.next_query(&query) {
//!     let _older = journal.list(&next).await?;
//! }
//! for event in &page.events {
//!     println!("{} {} {:?}", event.sequence, event.topic, event.last_error);
//! }
//! Ok(())
//! }
//! ```

mod query;
mod views;

use std::ops::ControlFlow;
use std::time::Duration;

use chrono::Utc;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::backend::JournalBackend;
use crate::backend::params::{
    Backlog, BacklogParams, EventDeleteFinishedParams, EventGetParams,
    EventRetryDeadLetteredParams, FinishedState,
};
use crate::error::{Error, Result};
use crate::event::OutboxEvent;
use crate::table::OutboxTable;
use crate::topic::TopicFilter;

pub use query::{
    AUTHOR_HEADER, Cursor, DEFAULT_PAGE_SIZE, EventPage, EventQuery, MAX_FILTER_LENGTH,
    MAX_PAGE_SIZE, MAX_TIMELINE_BUCKETS, ObjectName, ObjectRef, TimelineBucket, TimelineParams,
    author_of,
};
pub use views::{
    ColumnChange, HELD_KEY_WALK, MAX_PUBLISHED_WINDOW, NEIGHBOUR_WINDOW, WAITING_COUNT_CAP, changes,
};

/// Called by a clean-up after every batch with the rows deleted so far; returning
/// [`ControlFlow::Break`] stops it there (the batches done stay done), e.g. on a shutdown signal.
pub type Progress<'a> = &'a (dyn Fn(u64) -> ControlFlow<()> + Send + Sync);

/// What a clean-up did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CleanupOutcome {
    /// Rows deleted.
    pub deleted: u64,
    /// Whether [`Progress`] stopped it before a short batch showed nothing was left.
    pub stopped: bool,
}

/// Deletes batch after batch (`params.limit` rows each, one short statement each) until one
/// comes back short or `progress` breaks.
async fn delete_in_batches<B: JournalBackend>(
    backend: &B,
    table: &OutboxTable,
    params: &EventDeleteFinishedParams,
    progress: Progress<'_>,
) -> Result<CleanupOutcome> {
    let mut outcome = CleanupOutcome::default();
    loop {
        let n = backend.event_delete_finished(table, params).await?;
        outcome.deleted += n;
        if n < params.limit.max(0) as u64 {
            break;
        }
        if progress(outcome.deleted).is_break() {
            outcome.stopped = true;
            break;
        }
    }
    tracing::info!(%table, state = ?params.state, deleted = outcome.deleted, stopped = outcome.stopped, "clean-up finished");
    Ok(outcome)
}

/// The journal of one outbox table: read it, and act on its dead letters and finished events.
///
/// The one operator API: the dashboard, the command and [`OutboxRelay::journal`](crate::OutboxRelay::journal)
/// all go through it. A journal may be scoped to some topics ([`Journal::with_scope`]); a relay's
/// journal is scoped to the relay's topics. The scope narrows [`list`](Self::list),
/// [`backlog`](Self::backlog), [`retry_dead_lettered`](Self::retry_dead_lettered) and
/// [`cleanup`](Self::cleanup); [`get`](Self::get) and [`timeline`](Self::timeline) read the whole
/// table.
#[derive(Debug, Clone)]
pub struct Journal<B: JournalBackend> {
    backend: B,
    table: OutboxTable,
    scope: TopicFilter,
}

impl<B: JournalBackend> Journal<B> {
    /// The journal of `table` in `backend`, every topic in scope.
    pub fn new(backend: B, table: OutboxTable) -> Self {
        Journal {
            backend,
            table,
            scope: TopicFilter::all(),
        }
    }

    /// Narrows every listing and action of this journal to `scope` (combined with AND with the
    /// topics each call names).
    pub fn with_scope(mut self, scope: TopicFilter) -> Self {
        self.scope = scope;
        self
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The outbox table.
    pub fn table(&self) -> &OutboxTable {
        &self.table
    }

    /// The topics in scope ([`TopicFilter::all`] unless [`with_scope`](Self::with_scope) narrowed
    /// them).
    pub fn scope(&self) -> &TopicFilter {
        &self.scope
    }

    /// One page of events matching `query`, within the scope.
    ///
    /// # Errors
    /// [`Error::Database`] when the query fails.
    pub async fn list(&self, query: &EventQuery) -> Result<EventPage> {
        let events = if self.scope.is_all() {
            self.backend.event_list(&self.table, query).await?
        } else {
            let mut scoped = query.clone();
            scoped.topics = self.scope.and(&query.topics);
            self.backend.event_list(&self.table, &scoped).await?
        };
        let full = events.len() >= query.limit as usize;
        Ok(EventPage { events, full })
    }

    /// One event by id.
    ///
    /// # Errors
    /// [`Error::Database`] when the query fails.
    pub async fn get(&self, id: Uuid) -> Result<Option<OutboxEvent>> {
        self.backend
            .event_get(&self.table, &EventGetParams::new(id))
            .await
    }

    /// Counts created, published and dead-lettered events, the backlog and delivery latency per
    /// bucket of `params`, over the whole table.
    ///
    /// # Errors
    /// [`Error::Database`] when the query fails.
    pub async fn timeline(&self, params: &TimelineParams) -> Result<Vec<TimelineBucket>> {
        self.backend.event_timeline(&self.table, params).await
    }

    /// The backlog of `topics` (exact names and `prefix*`; empty = every topic in scope):
    /// pending events, the age of the oldest in seconds, dead letters. With `topics` empty it
    /// also sets the table's `hare_outbox_backlog_*` gauges (`metrics` crate), as a running relay
    /// does every [`RelayConfig::backlog_interval`](crate::RelayConfig::backlog_interval).
    ///
    /// # Errors
    /// [`Error::Configuration`] for a malformed pattern; [`Error::Database`] when the query fails.
    pub async fn backlog(&self, topics: &[&str]) -> Result<Backlog> {
        let params = BacklogParams::new(self.narrowed(topics)?, Utc::now());
        let backlog = self.backend.backlog(&self.table, &params).await?;
        if topics.is_empty() {
            set_backlog_gauges(&self.table, &backlog);
        }
        Ok(backlog)
    }

    /// Returns dead letters to the queue with their attempts reset to 0: those of `topics`
    /// (empty = every topic in scope) and, when `ids` is not empty, only those ids. Returns how
    /// many. A retried event releases the later events of its ordering key once it is delivered.
    ///
    /// # Errors
    /// [`Error::Configuration`] for a malformed pattern; [`Error::Database`] when the update fails.
    pub async fn retry_dead_lettered(&self, topics: &[&str], ids: &[Uuid]) -> Result<u64> {
        let ids = (!ids.is_empty()).then(|| ids.to_vec());
        let params = EventRetryDeadLetteredParams::new(self.narrowed(topics)?, ids);
        let retried = self
            .backend
            .event_retry_dead_lettered(&self.table, &params)
            .await?;
        tracing::info!(table = %self.table, retried, "dead letters returned to the queue");
        Ok(retried)
    }

    /// Deletes finished events (`state`) of `topics` (empty = every topic in scope) finished
    /// more than `older_than` ago, in batches of `batch_size` rows, each its own short statement,
    /// so no lock is held for long; after every full batch calls `progress` with the rows deleted
    /// so far, which may stop it. Returns how many rows went and whether it was stopped.
    /// Deleting a dead letter releases the later events of its ordering key.
    ///
    /// # Errors
    /// [`Error::Validation`] when `batch_size` is 0 or `older_than` reaches before the year 1;
    /// [`Error::Configuration`] for a malformed pattern; [`Error::Database`] when a delete fails
    /// (the batches before it stay deleted).
    pub async fn cleanup(
        &self,
        state: FinishedState,
        older_than: Duration,
        topics: &[&str],
        batch_size: u32,
        progress: Progress<'_>,
    ) -> Result<CleanupOutcome> {
        if batch_size == 0 {
            return Err(Error::validation(
                "batch_size",
                "clean-up batch size 0 is not allowed; use 1 or more rows",
            ));
        }
        let before = chrono::Duration::from_std(older_than)
            .ok()
            .and_then(|age| Utc::now().checked_sub_signed(age))
            .ok_or_else(|| {
                Error::validation(
                    "older_than",
                    format!(
                        "an age of {} s reaches before the year 1; use a shorter age",
                        older_than.as_secs()
                    ),
                )
            })?;
        let params = EventDeleteFinishedParams::new(
            state,
            before,
            self.narrowed(topics)?,
            i64::from(batch_size),
        );
        delete_in_batches(&self.backend, &self.table, &params, progress).await
    }

    fn narrowed(&self, topics: &[&str]) -> Result<TopicFilter> {
        Ok(self.scope.and(&topic_filter(topics)?))
    }
}

/// Sets the `hare_outbox_backlog_*` gauges of `table` to `backlog`.
pub(crate) fn set_backlog_gauges(table: &OutboxTable, backlog: &Backlog) {
    let table = table.to_string();
    metrics::gauge!("hare_outbox_backlog_pending", "table" => table.clone())
        .set(backlog.pending as f64);
    metrics::gauge!("hare_outbox_backlog_oldest_pending_age_seconds", "table" => table.clone())
        .set(backlog.oldest_pending_age_seconds);
    metrics::gauge!("hare_outbox_backlog_dead_lettered", "table" => table)
        .set(backlog.dead_lettered as f64);
}

fn topic_filter(topics: &[&str]) -> Result<TopicFilter> {
    if topics.is_empty() {
        Ok(TopicFilter::all())
    } else {
        TopicFilter::new(Some(topics), Vec::<&str>::new())
    }
}
