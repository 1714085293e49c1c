//! The seam between the core and a database backend.
//!
//! **Internal seam, not for users**: the traits and their [`params`] may change in any release;
//! implement them only inside this workspace. Users reach a backend through
//! [`Outbox`](crate::Outbox), [`OutboxRelay`](crate::OutboxRelay), [`Journal`](crate::Journal),
//! [`ChangeCapture`](crate::ChangeCapture) and [`Inbox`](crate::Inbox).
//!
//! Backends only run SQL; every policy decision (lease cadence, ordering, backoff, dead letters,
//! what to do with a row that cannot be read) is taken in the core and passed in as parameters.
//! The abilities are small traits, each a supertrait of [`Backend`]:
//!
//! | trait | what it runs | needed by |
//! |---|---|---|
//! | [`Backend`] | transactions, enqueue, the relay's lease and marks, one event, the backlog, the DDL | [`Outbox`](crate::Outbox), [`OutboxRelay`](crate::OutboxRelay) |
//! | [`JournalBackend`] | listing, timeline, retry of dead letters, clean-up, the operator's views (neighbours, held keys, topics, relays) | [`Journal`](crate::Journal) |
//! | [`CaptureBackend`] | capture triggers, their status, the transaction's context | [`ChangeCapture`](crate::ChangeCapture), [`Outbox::set_context`](crate::Outbox::set_context) |
//! | [`InboxBackend`] | the inbox table | [`Inbox`](crate::Inbox) |
//!
//! A backend implements what it supports and nothing else: a missing ability is a compile error
//! at the call site, never an `Unsupported` error at run time. What varies within one ability is
//! told by [`Backend::capabilities`] (a value, not a name to compare).
//! `docs/architecture.md` tells how to add a backend; the shared conformance suite
//! (`hare-outbox-testkit::conformance`) is what it must pass.

pub mod params;
pub mod template;
pub mod timeline;

use async_trait::async_trait;

use crate::error::Result;
use crate::event::OutboxEvent;
use crate::migration::{Migration, MigrationStatus, MigrationStream};
use crate::table::OutboxTable;
pub use params::*;

/// What a backend can do beyond its traits, probed by the core and the wake-ups (instead of
/// comparing backend names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// A short name for messages and logs: `"postgres"`, `"sqlite"`.
    pub name: &'static str,
    /// The backend sends a notification inside the writing transaction when
    /// [`EventInsertParams::notify_channel`] is set (PostgreSQL `NOTIFY`), so a LISTEN/NOTIFY
    /// wake-up works with it.
    pub notify_in_transaction: bool,
}

impl Capabilities {
    /// A backend named `name` with no optional capability.
    pub fn new(name: &'static str) -> Self {
        Capabilities {
            name,
            notify_in_transaction: false,
        }
    }

    /// Sets [`Capabilities::notify_in_transaction`].
    pub fn with_notify_in_transaction(mut self, yes: bool) -> Self {
        self.notify_in_transaction = yes;
        self
    }
}

/// A database backend: transactions, enqueue, and the statements of the relay. One method per
/// SQL statement.
///
/// `Conn` is the caller's connection type (`sqlx::PgConnection`, `sqlx::SqliteConnection`);
/// enqueue runs on it so the event commits and rolls back with the caller's transaction. The other
/// statements run on the backend's own pool, each in its own short transaction.
#[async_trait]
pub trait Backend: Clone + Send + Sync + 'static {
    /// The connection type enqueue writes through.
    type Conn: Send;

    /// A transaction on the backend's pool; derefs to the connection enqueue writes through.
    type Transaction: Send + std::ops::DerefMut<Target = Self::Conn>;

    /// What this backend can do; its name is [`Capabilities::name`].
    fn capabilities(&self) -> Capabilities;

    /// A short name for logs: `"postgres"`, `"sqlite"` (the name of
    /// [`capabilities`](Self::capabilities)).
    fn name(&self) -> &'static str {
        self.capabilities().name
    }

    /// The DDL of `table` for an empty database: every version of the outbox migrations, each
    /// with its row in the record of applied migrations; idempotent (`IF NOT EXISTS`).
    fn schema_sql(&self, table: &OutboxTable) -> String;

    /// Applies the pending outbox migrations of `table`, each in a transaction of its own with its
    /// record; adopts a table created before migrations were versioned as version 1. Safe to run
    /// concurrently and repeatedly.
    async fn migrate(&self, table: &OutboxTable) -> Result<()>;

    /// The versions of `stream` this backend runs, oldest first (its numbered files).
    fn migrations(&self, stream: MigrationStream) -> &[Migration];

    /// The SQL of the versions of `stream` after version `applied` (0: none applied), each with
    /// its record, as `migrate` would run them for `table`; when none is left, only what every
    /// `migrate` runs (PostgreSQL: the idempotent `ADD COLUMN IF NOT EXISTS` of declared extra
    /// columns), often nothing. Pure: connects to nothing.
    fn migration_sql(&self, stream: MigrationStream, table: &OutboxTable, applied: i64) -> String;

    /// Every version of `stream` this backend knows, oldest first, with when the database
    /// applied it to `table` (pending: `None`). Only reads; a database without the record has
    /// every version pending.
    ///
    /// # Errors
    /// [`Error::Migration`](crate::Error::Migration) when the record disagrees with this build
    /// ([`migration::status`](crate::migration::status)); [`Error::Database`](crate::Error::Database)
    /// when it cannot be read.
    async fn migration_status(
        &self,
        stream: MigrationStream,
        table: &OutboxTable,
    ) -> Result<Vec<MigrationStatus>>;

    /// Begins a transaction on the backend's pool.
    async fn begin(&self) -> Result<Self::Transaction>;

    /// Commits `tx`.
    async fn commit(&self, tx: Self::Transaction) -> Result<()>;

    /// Rolls `tx` back.
    async fn rollback(&self, tx: Self::Transaction) -> Result<()>;

    /// Inserts one event on `conn`; on an idempotency key that is already stored, inserts nothing
    /// and returns the stored event with `created = false`. A key taken by another tenant's event
    /// (tenant column, [`IdempotencyScope::Table`](crate::IdempotencyScope::Table)) is an
    /// [`Error::Integrity`](crate::Error::Integrity).
    async fn event_insert(
        &self,
        conn: &mut Self::Conn,
        table: &OutboxTable,
        params: &EventInsertParams,
    ) -> Result<Inserted>;

    /// Inserts events in the given order inside one savepoint of `conn`'s transaction (or one
    /// transaction of its own), one multi-row INSERT per run of consecutive same-shape messages,
    /// and returns one [`Inserted`] per message in the given order; existing and repeated
    /// idempotency keys are resolved with one SELECT.
    async fn event_insert_many(
        &self,
        conn: &mut Self::Conn,
        table: &OutboxTable,
        params: &[EventInsertParams],
    ) -> Result<Vec<Inserted>>;

    /// Leases the next batch, in `sequence` order. Rows the backend cannot decode are leased too
    /// and returned in [`LeasedBatch::unreadable`], not as events: the core dead-letters them.
    async fn event_lease(
        &self,
        table: &OutboxTable,
        params: &EventLeaseParams,
    ) -> Result<LeasedBatch>;

    /// Releases leased events without counting an attempt; returns the number of rows released.
    async fn event_lease_release(
        &self,
        table: &OutboxTable,
        params: &EventReleaseParams,
    ) -> Result<u64>;

    /// Extends the lease of a batch in flight; returns the number of rows still held.
    async fn event_lease_extend(
        &self,
        table: &OutboxTable,
        params: &EventLeaseExtendParams,
    ) -> Result<u64>;

    /// Marks events published in one statement; returns the number of rows changed.
    async fn event_mark_delivered(
        &self,
        table: &OutboxTable,
        params: &EventMarkDeliveredParams,
    ) -> Result<u64>;

    /// Records failures; returns the number of rows changed.
    async fn event_mark_failed(
        &self,
        table: &OutboxTable,
        params: &EventMarkFailedParams,
    ) -> Result<u64>;

    /// The events `conn` sees that are neither published nor dead-lettered — those its open
    /// transaction wrote and the committed ones — oldest first, at most `params.limit`. Runs on
    /// the caller's connection (the test helpers of the `testing` feature).
    async fn event_list_pending_on(
        &self,
        conn: &mut Self::Conn,
        table: &OutboxTable,
        params: &EventListPendingParams,
    ) -> Result<Vec<OutboxEvent>>;

    /// Reads one event by id.
    async fn event_get(
        &self,
        table: &OutboxTable,
        params: &EventGetParams,
    ) -> Result<Option<OutboxEvent>>;

    /// Counts the backlog (the relay keeps its gauges from it; the journal reports it).
    async fn backlog(&self, table: &OutboxTable, params: &BacklogParams) -> Result<Backlog>;
}

/// The journal's statements: listing, timeline, and the operator's actions on dead letters and
/// finished events.
#[async_trait]
pub trait JournalBackend: Backend {
    /// One page of the journal: events matching `query`'s filters, from its cursor,
    /// at most `query.limit` of them; newest first unless the cursor is
    /// [`Cursor::After`](crate::journal::Cursor::After) (oldest first). Keyset pagination on
    /// `sequence`: no OFFSET, every page costs about the same.
    async fn event_list(
        &self,
        table: &OutboxTable,
        query: &crate::journal::EventQuery,
    ) -> Result<Vec<OutboxEvent>>;

    /// Counts per bucket of `params` the events created, published and dead-lettered, the
    /// backlog at each bucket's end and the delivery latency percentiles; one entry per bucket,
    /// oldest first, empty buckets included.
    async fn event_timeline(
        &self,
        table: &OutboxTable,
        params: &crate::journal::TimelineParams,
    ) -> Result<Vec<crate::journal::TimelineBucket>>;

    /// Clears `dead_lettered_at`, `next_attempt_at` and the lease of matching dead-lettered events
    /// and sets their attempts to 0; returns how many. `last_error` is kept.
    async fn event_retry_dead_lettered(
        &self,
        table: &OutboxTable,
        params: &EventRetryDeadLetteredParams,
    ) -> Result<u64>;

    /// Deletes ONE batch of finished events (at most `limit` rows, in one short statement);
    /// returns how many. Callers loop until it returns fewer than `limit`.
    async fn event_delete_finished(
        &self,
        table: &OutboxTable,
        params: &EventDeleteFinishedParams,
    ) -> Result<u64>;

    // -- The operator's views: an event's neighbours, held keys, topics, relays --------------
    // (Their parameter and result types are in `params`.)

    /// The sequences of the events of `params.ordering_key` just before and just after
    /// `params.sequence`: among the undelivered events of the key (however far), and among the
    /// `params.window` events on either side (delivered ones too); the nearer one wins.
    async fn event_neighbours(
        &self,
        table: &OutboxTable,
        params: &EventNeighboursParams,
    ) -> Result<EventNeighbours>;

    /// One page of held ordering keys: keys whose head (first undelivered event) is
    /// dead-lettered or has failed at least once, in key order after `params.after`, walking at
    /// most `params.max_walk` keys with undelivered events.
    async fn key_held_list(
        &self,
        table: &OutboxTable,
        params: &KeyHeldListParams,
    ) -> Result<HeldKeyPage>;

    /// Retries or releases the head of a held key (see [`KeyHeadAction`]), only while the event
    /// at `params.sequence` is still the key's held head and no relay holds a live lease on it;
    /// returns the number of rows changed (0 or 1).
    async fn key_head_update(&self, table: &OutboxTable, params: &KeyHeadParams) -> Result<u64>;

    /// Counts per topic and state: one page of topics with undelivered or dead-lettered events,
    /// or events published since `params.published_since`, in topic order after
    /// `params.after`.
    async fn topic_stats_list(
        &self,
        table: &OutboxTable,
        params: &TopicStatsParams,
    ) -> Result<Vec<TopicStats>>;

    /// The relays holding leases (live or expired, not yet taken back), one page in name order
    /// after `params.after`.
    async fn relay_lease_list(
        &self,
        table: &OutboxTable,
        params: &RelayLeaseListParams,
    ) -> Result<Vec<RelayLeases>>;
}

/// Change capture by triggers, and the capture context of a transaction.
#[async_trait]
pub trait CaptureBackend: Backend {
    /// Installs (or replaces) a change capture writing into `table`; nothing is created when a
    /// check fails.
    async fn capture_install(
        &self,
        table: &OutboxTable,
        params: &CaptureInstallParams,
    ) -> Result<()>;

    /// Removes the change capture of one table into `table`; returns whether one was installed.
    async fn capture_uninstall(
        &self,
        table: &OutboxTable,
        params: &CaptureUninstallParams,
    ) -> Result<bool>;

    /// Every change capture installed into `table`, with its drift.
    async fn capture_status(
        &self,
        table: &OutboxTable,
    ) -> Result<Vec<crate::capture::CaptureStatus>>;

    /// Sets or clears the context headers of the transaction on `conn`, for the capture
    /// triggers writing into `table`.
    async fn context_set(
        &self,
        conn: &mut Self::Conn,
        table: &OutboxTable,
        params: &ContextSetParams,
    ) -> Result<()>;

    /// Whether `conn` is inside a transaction its driver began (sqlx's `begin`), so a context
    /// set on it lasts until that transaction ends.
    fn in_transaction(&self, conn: &Self::Conn) -> bool;
}

/// The consumer-side inbox table: which events a consumer has processed.
#[async_trait]
pub trait InboxBackend: Backend {
    /// The DDL of an inbox table (consumer, event_id, processed_at), idempotent.
    fn inbox_schema_sql(&self, table: &OutboxTable) -> String;

    /// Creates the inbox table if missing.
    async fn inbox_migrate(&self, table: &OutboxTable) -> Result<()>;

    /// Records `(consumer, event_id)` on `conn`; `true` when new.
    async fn inbox_record(
        &self,
        conn: &mut Self::Conn,
        table: &OutboxTable,
        params: &InboxRecordParams,
    ) -> Result<bool>;

    /// Deletes at most `limit` inbox records processed before `before`; returns how many.
    async fn inbox_delete_older(
        &self,
        table: &OutboxTable,
        params: &InboxDeleteOlderParams,
    ) -> Result<u64>;
}
