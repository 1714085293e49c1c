//! The parameters of every backend statement and what the statements return: one module, so
//! the seam's data types depend on nothing above them.
//!
//! **Internal seam**, like the rest of [`crate::backend`]: these types may change in any release.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::event::OutboxEvent;
use crate::extra::ExtraValue;
use crate::topic::TopicFilter;

macro_rules! params_new {
    ($t:ident { $($f:ident : $ty:ty),* $(,)? }) => {
        impl $t {
            /// Builds the parameters from every field.
            #[allow(clippy::too_many_arguments)]
            pub fn new($($f: $ty),*) -> Self {
                $t { $($f),* }
            }
        }
    };
}

/// One event about to be inserted, validated and encoded by the core.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EventInsertParams {
    /// The event id (UUID v7).
    pub id: Uuid,
    /// The topic.
    pub topic: String,
    /// The encoded payload.
    pub payload: Value,
    /// The encoded headers.
    pub headers: Map<String, Value>,
    /// The ordering key.
    pub ordering_key: Option<String>,
    /// The idempotency key.
    pub idempotency_key: Option<String>,
    /// Values of extra columns, checked against the table by the core; columns not named here are
    /// left to their default (NULL).
    pub extra: Vec<(String, ExtraValue)>,
    /// A channel to notify with the topic inside the writing transaction, when the wake-up rides
    /// the transaction ([`Wakeup::in_transaction_channel`](crate::Wakeup::in_transaction_channel)).
    /// Backends without in-transaction signals ignore it.
    pub notify_channel: Option<String>,
    /// Strict per-key commit order: before the INSERT, lock the ordering key until the end of the
    /// transaction, so that writers of one key commit in sequence order. Set by the core only with
    /// an ordering key. Backends with one writer at a time may ignore it.
    pub strict_order: bool,
}

impl EventInsertParams {
    /// Sets strict per-key commit order ([`EventInsertParams::strict_order`]).
    pub fn with_strict_order(mut self, strict: bool) -> Self {
        self.strict_order = strict;
        self
    }

    /// Sets the extra column values.
    pub fn with_extra(mut self, extra: Vec<(String, ExtraValue)>) -> Self {
        self.extra = extra;
        self
    }

    /// Sets the in-transaction notification channel.
    pub fn with_notify_channel(mut self, channel: Option<String>) -> Self {
        self.notify_channel = channel;
        self
    }

    /// The messages' shape for batching: same key presence and same extra columns.
    pub fn shape(&self) -> (bool, Vec<&str>) {
        (
            self.idempotency_key.is_some(),
            self.extra.iter().map(|(c, _)| c.as_str()).collect(),
        )
    }
}

/// What an insert did.
#[derive(Debug, Clone, PartialEq)]
pub struct Inserted {
    /// The event as stored: the new one, or the one already stored under the idempotency key.
    pub event: OutboxEvent,
    /// `true` when this call wrote the event; `false` when the key was already taken.
    pub created: bool,
}

/// Lease the next batch.
///
/// The batch holds, per ordering key, an ordered run: the key's head (its first undelivered
/// event) and up to `max_events_per_key - 1` of its next events, in sequence order, stopping
/// before the first that may not be leased. Events without a key are taken in sequence order.
/// Finding heads walks the distinct keys from `key_cursor` (wrapping around), so one statement
/// costs O(batch) whatever the backlog of one key.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EventLeaseParams {
    /// The clock events are judged by (due, lease expired) and the lease runs from; `None` = the
    /// database's clock, so relays with skewed clocks agree (tests pass a time).
    pub now: Option<DateTime<Utc>>,
    /// How long the lease lasts from `now`.
    pub lease: std::time::Duration,
    /// The relay name written to `leased_by`.
    pub leased_by: String,
    /// At most this many events (the relay's batch size).
    pub limit: i64,
    /// At most this many events of one ordering key (its head and the run after it). At least 1;
    /// 1 leases heads only. Defaults to 1.
    pub max_events_per_key: i64,
    /// Where the walk over ordering keys starts: after this key (the last one the previous lease
    /// returned, [`LeasedBatch::key_cursor`]). Defaults to `""`, the first key.
    pub key_cursor: String,
    /// Only events of these topics. Defaults to every topic.
    pub topics: TopicFilter,
    /// The walk over ordering keys may stop once it holds this many keys whose runs fill the
    /// batch (each key counting with up to `limit / min_keys` of its events), instead of
    /// gathering one head per event of the batch. The relay passes its `concurrency`: a batch of
    /// 100 then holds e.g. 10 keys × 10 events, and the lease taken while it is delivered finds
    /// other keys free. Clamped to `1..=limit`; defaults to `limit` (one head per event first).
    pub min_keys: i64,
}

impl EventLeaseParams {
    /// Limits the lease to `topics`.
    pub fn with_topics(mut self, topics: TopicFilter) -> Self {
        self.topics = topics;
        self
    }

    /// Judges and leases by `now` instead of the database's clock.
    pub fn with_now(mut self, now: DateTime<Utc>) -> Self {
        self.now = Some(now);
        self
    }

    /// Sets [`EventLeaseParams::max_events_per_key`] (values below 1 count as 1).
    pub fn with_max_events_per_key(mut self, max: i64) -> Self {
        self.max_events_per_key = max.max(1);
        self
    }

    /// Sets [`EventLeaseParams::key_cursor`].
    pub fn with_key_cursor(mut self, cursor: impl Into<String>) -> Self {
        self.key_cursor = cursor.into();
        self
    }

    /// Sets [`EventLeaseParams::min_keys`] (clamped to `1..=limit`).
    pub fn with_min_keys(mut self, min_keys: i64) -> Self {
        self.min_keys = min_keys.clamp(1, self.limit.max(1));
        self
    }
}

/// What one lease returned.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct LeasedBatch {
    /// The leased events in sequence order.
    pub events: Vec<OutboxEvent>,
    /// Leased rows the backend could not decode into events (or that hold what the library never
    /// writes), in sequence order. The core dead-letters them with their reason and releases the
    /// events of their ordering keys behind them.
    pub unreadable: Vec<UnreadableRow>,
    /// The ordering key the next lease's walk should start after (the last key the walk
    /// visited); `None` when it visited none (keep the previous cursor).
    pub key_cursor: Option<String>,
    /// `true` when the walk found heads that could be leased but another relay's lease held them
    /// locked at that moment: polling again at once, from [`LeasedBatch::key_cursor`], finds the
    /// keys after them instead of waiting a poll interval. Backends without row locks leave it
    /// `false`.
    pub contended: bool,
}

impl LeasedBatch {
    /// A batch of `events` (sorted here by sequence) and the next cursor.
    pub fn new(mut events: Vec<OutboxEvent>, key_cursor: Option<String>) -> Self {
        events.sort_by_key(|e| e.sequence);
        LeasedBatch {
            events,
            unreadable: Vec::new(),
            key_cursor,
            contended: false,
        }
    }

    /// Sets [`LeasedBatch::contended`].
    pub fn with_contended(mut self, contended: bool) -> Self {
        self.contended = contended;
        self
    }

    /// Sets [`LeasedBatch::unreadable`] (sorted here by sequence).
    pub fn with_unreadable(mut self, mut rows: Vec<UnreadableRow>) -> Self {
        rows.sort_by_key(|r| r.sequence);
        self.unreadable = rows;
        self
    }
}

/// A leased row that could not be read as an event: what the core needs to dead-letter it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct UnreadableRow {
    /// The row's sequence.
    pub sequence: i64,
    /// Its `attempts` as stored (kept as they are when it is dead-lettered).
    pub attempts: i32,
    /// Its ordering key, when that column could be read.
    pub ordering_key: Option<String>,
    /// Why it cannot be delivered, e.g. `the stored event cannot be read: …`; becomes its
    /// `last_error`.
    pub reason: String,
}

params_new!(UnreadableRow { sequence: i64, attempts: i32, ordering_key: Option<String>, reason: String });

/// Read one event by id.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EventGetParams {
    /// The event id.
    pub id: Uuid,
}

params_new!(EventGetParams { id: Uuid });

/// List the pending events a connection sees (tests: what a handler enqueued).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EventListPendingParams {
    /// The most events returned.
    pub limit: u32,
}

params_new!(EventListPendingParams { limit: u32 });

/// Record that a consumer processed an event.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct InboxRecordParams {
    /// The consumer's name.
    pub consumer: String,
    /// The processed event's id.
    pub event_id: Uuid,
}

params_new!(InboxRecordParams {
    consumer: String,
    event_id: Uuid
});

/// Delete one batch of old inbox records.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct InboxDeleteOlderParams {
    /// Records processed before this time.
    pub before: DateTime<Utc>,
    /// At most this many rows in this statement.
    pub limit: i64,
}

params_new!(InboxDeleteOlderParams { before: DateTime<Utc>, limit: i64 });

/// Release leased events without counting an attempt: the rest of a run after a failure, so the
/// key keeps its order (the events are leased again from the key's head).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EventReleaseParams {
    /// Sequences to release.
    pub sequences: Vec<i64>,
    /// The relay holding them; rows another relay holds are left alone.
    pub leased_by: String,
}

/// Return dead-lettered events to the queue with their attempts reset to 0.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EventRetryDeadLetteredParams {
    /// Only events of these topics.
    pub topics: TopicFilter,
    /// Only these event ids; `None` = every dead-lettered event of `topics`.
    pub ids: Option<Vec<Uuid>>,
}

/// Which finished events a clean-up deletes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishedState {
    /// Delivered events, by `published_at`.
    Published,
    /// Dead-lettered events, by `dead_lettered_at`.
    DeadLettered,
}

/// Delete one batch of finished events older than a cut-off.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EventDeleteFinishedParams {
    /// Published or dead-lettered.
    pub state: FinishedState,
    /// Events finished before this time.
    pub before: DateTime<Utc>,
    /// Only events of these topics.
    pub topics: TopicFilter,
    /// At most this many rows in this statement.
    pub limit: i64,
}

/// Count the backlog.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct BacklogParams {
    /// Only events of these topics.
    pub topics: TopicFilter,
    /// The clock the oldest pending age is measured against.
    pub now: DateTime<Utc>,
}

/// The queue's state, for health checks.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Backlog {
    /// Events still to deliver (neither published nor dead-lettered).
    pub pending: i64,
    /// Age in seconds of the oldest pending event; 0 when none is pending.
    pub oldest_pending_age_seconds: f64,
    /// Dead-lettered events.
    pub dead_lettered: i64,
}

/// Extend the lease of events still held by `leased_by`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EventLeaseExtendParams {
    /// Sequences of the batch in flight.
    pub sequences: Vec<i64>,
    /// The relay holding them.
    pub leased_by: String,
    /// The new lease lasts this long from `now`.
    pub lease: std::time::Duration,
    /// The clock; `None` = the database's.
    pub now: Option<DateTime<Utc>>,
}

/// Mark events delivered.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EventMarkDeliveredParams {
    /// Sequences of the delivered events.
    pub sequences: Vec<i64>,
    /// The time written to `published_at`; `None` = the database's clock.
    pub now: Option<DateTime<Utc>>,
    /// The extra JSON column that receives each attempt's record
    /// ([`RelayConfig::result_column`](crate::RelayConfig)); `None` writes no record.
    pub result_column: Option<String>,
    /// One record per sequence, in the order of `sequences`, when `result_column` is set; a
    /// `None` leaves that event's column as it was.
    pub results: Vec<Option<Value>>,
}

/// One failed delivery to record.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EventFailure {
    /// The event's sequence.
    pub sequence: i64,
    /// The new `attempts` value.
    pub attempts: i32,
    /// The error text.
    pub error: String,
    /// Try again this long after the mark's clock; `None` dead-letters the event at that time.
    pub retry_in: Option<std::time::Duration>,
    /// The attempt's record for [`EventMarkFailedParams::result_column`]; `None` leaves the
    /// column as it was.
    pub result: Option<Value>,
}

/// Record failures, only for events `leased_by` still holds and nobody published.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EventMarkFailedParams {
    /// The failures.
    pub failures: Vec<EventFailure>,
    /// The relay that leased the events.
    pub leased_by: String,
    /// The extra JSON column that receives each failure's [`EventFailure::result`]
    /// ([`RelayConfig::result_column`](crate::RelayConfig)); `None` writes no record.
    pub result_column: Option<String>,
    /// The clock `next_attempt_at` and `dead_lettered_at` count from; `None` = the database's.
    pub now: Option<DateTime<Utc>>,
}

impl EventInsertParams {
    /// Builds the parameters without extra values; add them with [`EventInsertParams::with_extra`].
    pub fn new(
        id: Uuid,
        topic: String,
        payload: Value,
        headers: Map<String, Value>,
        ordering_key: Option<String>,
        idempotency_key: Option<String>,
    ) -> Self {
        EventInsertParams {
            id,
            topic,
            payload,
            headers,
            ordering_key,
            idempotency_key,
            extra: Vec::new(),
            notify_channel: None,
            strict_order: false,
        }
    }
}
impl EventLeaseParams {
    /// Builds the parameters for every topic at the database's clock, one event per key; narrow
    /// them with the `with_*` methods.
    pub fn new(leased_by: String, limit: i64, lease: std::time::Duration) -> Self {
        EventLeaseParams {
            now: None,
            lease,
            leased_by,
            limit,
            max_events_per_key: 1,
            key_cursor: String::new(),
            topics: TopicFilter::all(),
            min_keys: limit.max(1),
        }
    }
}
params_new!(EventRetryDeadLetteredParams { topics: TopicFilter, ids: Option<Vec<Uuid>> });
params_new!(EventDeleteFinishedParams { state: FinishedState, before: DateTime<Utc>, topics: TopicFilter, limit: i64 });
params_new!(BacklogParams { topics: TopicFilter, now: DateTime<Utc> });
params_new!(EventReleaseParams { sequences: Vec<i64>, leased_by: String });
impl EventLeaseExtendParams {
    /// Builds the parameters at the database's clock.
    pub fn new(sequences: Vec<i64>, leased_by: String, lease: std::time::Duration) -> Self {
        EventLeaseExtendParams {
            sequences,
            leased_by,
            lease,
            now: None,
        }
    }

    /// Extends from `now` instead of the database's clock.
    pub fn with_now(mut self, now: DateTime<Utc>) -> Self {
        self.now = Some(now);
        self
    }
}
impl EventMarkDeliveredParams {
    /// Builds the parameters without result records; add them with
    /// [`EventMarkDeliveredParams::with_results`]. Marks at the database's clock.
    pub fn new(sequences: Vec<i64>) -> Self {
        EventMarkDeliveredParams {
            sequences,
            now: None,
            result_column: None,
            results: Vec::new(),
        }
    }

    /// Marks at `now` instead of the database's clock.
    pub fn with_now(mut self, now: DateTime<Utc>) -> Self {
        self.now = Some(now);
        self
    }

    /// Writes `results` (one per sequence, in order) to the extra JSON column `column`.
    pub fn with_results(mut self, column: impl Into<String>, results: Vec<Option<Value>>) -> Self {
        self.result_column = Some(column.into());
        self.results = results;
        self
    }
}
impl EventFailure {
    /// A failure to retry `retry_in` after the mark's clock, without a result record; add one
    /// with [`EventFailure::with_result`].
    pub fn retry(
        sequence: i64,
        attempts: i32,
        error: String,
        retry_in: std::time::Duration,
    ) -> Self {
        EventFailure {
            sequence,
            attempts,
            error,
            retry_in: Some(retry_in),
            result: None,
        }
    }

    /// A failure that dead-letters the event at the mark's clock.
    pub fn dead(sequence: i64, attempts: i32, error: String) -> Self {
        EventFailure {
            sequence,
            attempts,
            error,
            retry_in: None,
            result: None,
        }
    }

    /// Sets [`EventFailure::result`].
    pub fn with_result(mut self, result: Option<Value>) -> Self {
        self.result = result;
        self
    }
}
impl EventMarkFailedParams {
    /// Builds the parameters without a result column; set one with
    /// [`EventMarkFailedParams::with_result_column`].
    pub fn new(failures: Vec<EventFailure>, leased_by: String) -> Self {
        EventMarkFailedParams {
            failures,
            leased_by,
            result_column: None,
            now: None,
        }
    }

    /// Counts from `now` instead of the database's clock.
    pub fn with_now(mut self, now: DateTime<Utc>) -> Self {
        self.now = Some(now);
        self
    }

    /// Writes each failure's [`EventFailure::result`] to the extra JSON column `column`.
    pub fn with_result_column(mut self, column: impl Into<String>) -> Self {
        self.result_column = Some(column.into());
        self
    }
}

/// Install (or replace) one change capture: the validated plan of a
/// [`ChangeCapture`](crate::capture::ChangeCapture). The backend checks it against the catalog
/// (unknown columns, the outbox table itself, a missing primary key) before creating anything.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CaptureInstallParams {
    /// The validated declaration.
    pub plan: crate::capture::CapturePlan,
}

/// Remove the capture of one table.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CaptureUninstallParams {
    /// The table's schema; `None` = as the database resolves the bare name.
    pub schema: Option<String>,
    /// The table.
    pub table: String,
}

/// Set or clear the transaction's context headers, which capture triggers merge into the
/// headers of every event they write in that transaction.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ContextSetParams {
    /// The headers; `None` clears the context (headers and payload keys).
    pub headers: Option<Map<String, Value>>,
    /// The keys merged into every captured envelope of the transaction, validated by the core
    /// (none of [`ENVELOPE_KEYS`](crate::capture::ENVELOPE_KEYS)); empty for none.
    pub payload: Map<String, Value>,
}

params_new!(CaptureInstallParams {
    plan: crate::capture::CapturePlan
});
params_new!(CaptureUninstallParams { schema: Option<String>, table: String });
params_new!(ContextSetParams {
    headers: Option<Map<String, Value>>,
    payload: Map<String, Value>
});

// ---------------------------------------------------------------------------------------------
// The operator's views: parameters and results of the view statements of `JournalBackend`.

/// Find the events of one ordering key around an event.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EventNeighboursParams {
    /// The event's sequence.
    pub sequence: i64,
    /// Its ordering key.
    pub ordering_key: String,
    /// How many sequences on either side are searched among delivered events (undelivered ones
    /// are found however far away). At least 1.
    pub window: i64,
}

/// The events of the same ordering key just before and after an event.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EventNeighbours {
    /// The sequence of the key's previous event; `None` when none was found.
    pub previous: Option<i64>,
    /// The sequence of the key's next event; `None` when none was found.
    pub next: Option<i64>,
}

impl EventNeighbours {
    /// The neighbours `previous` and `next`.
    pub fn new(previous: Option<i64>, next: Option<i64>) -> Self {
        EventNeighbours { previous, next }
    }
}

/// One page of held ordering keys.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct KeyHeldListParams {
    /// Keys after this one (`""` = from the first key).
    pub after: String,
    /// At most this many held keys.
    pub limit: i64,
    /// At most this many keys with undelivered events are walked (one index probe each), so a
    /// page costs the same however many keys are healthy; the page's
    /// [`HeldKeyPage::next_after`] says where to go on.
    pub max_walk: i64,
    /// The undelivered events of a held key are counted up to this many.
    pub count_cap: i64,
}

/// A held ordering key: its head is dead-lettered or has failed, so the key's later events wait.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct HeldKey {
    /// The key.
    pub ordering_key: String,
    /// The blocking event (the key's first undelivered event).
    pub head: OutboxEvent,
    /// Undelivered events of the key, the head included, counted up to
    /// [`KeyHeldListParams::count_cap`].
    pub waiting: i64,
}

impl HeldKey {
    /// A held key from its parts.
    pub fn new(ordering_key: String, head: OutboxEvent, waiting: i64) -> Self {
        HeldKey {
            ordering_key,
            head,
            waiting,
        }
    }
}

/// One page of held keys.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct HeldKeyPage {
    /// Held keys in key order.
    pub keys: Vec<HeldKey>,
    /// Where the next page starts (pass it as [`KeyHeldListParams::after`]); `None` when the
    /// walk reached the last key.
    pub next_after: Option<String>,
    /// Keys with undelivered events this page walked.
    pub walked: i64,
}

impl HeldKeyPage {
    /// A page from its parts.
    pub fn new(keys: Vec<HeldKey>, next_after: Option<String>, walked: i64) -> Self {
        HeldKeyPage {
            keys,
            next_after,
            walked,
        }
    }
}

/// What to do with the head of a held key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyHeadAction {
    /// Deliver it again now: a dead letter returns to the queue with its attempts reset to 0; a
    /// failing head is made due at once (its attempts kept).
    Retry,
    /// Skip it and release the key: the event leaves its key (its `ordering_key` becomes NULL and
    /// the key is kept in its [`RELEASED_KEY_HEADER`] header), keeping its state, so the key's
    /// next events flow; a released dead letter can still be retried, then unordered.
    Release,
}

/// The header in which a released head keeps the ordering key it left.
pub const RELEASED_KEY_HEADER: &str = "released_ordering_key";

/// Retry or release the head of a held key.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct KeyHeadParams {
    /// The head's sequence.
    pub sequence: i64,
    /// Its ordering key.
    pub ordering_key: String,
    /// What to do.
    pub action: KeyHeadAction,
    /// The clock a live lease is judged by.
    pub now: DateTime<Utc>,
}

/// One page of per-topic counts.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TopicStatsParams {
    /// Topics after this one (`""` = from the first).
    pub after: String,
    /// At most this many topics.
    pub limit: i64,
    /// Published events count from this time on.
    pub published_since: DateTime<Utc>,
    /// The clock a live lease is judged by.
    pub now: DateTime<Utc>,
}

/// The counts of one topic.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TopicStats {
    /// The topic.
    pub topic: String,
    /// Waiting for their first delivery.
    pub pending: i64,
    /// Under a live lease.
    pub leased: i64,
    /// Failed at least once, waiting for their next attempt.
    pub retrying: i64,
    /// Dead-lettered.
    pub dead: i64,
    /// Published since [`TopicStatsParams::published_since`].
    pub published: i64,
    /// When the oldest event still to deliver (pending, leased or retrying) was created.
    pub oldest_pending_at: Option<DateTime<Utc>>,
}

impl TopicStats {
    /// The counts of `topic`, all zero.
    pub fn new(topic: String) -> Self {
        TopicStats {
            topic,
            pending: 0,
            leased: 0,
            retrying: 0,
            dead: 0,
            published: 0,
            oldest_pending_at: None,
        }
    }
}

/// One page of the relays holding leases.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RelayLeaseListParams {
    /// Relay names after this one (`""` = from the first).
    pub after: String,
    /// At most this many relays.
    pub limit: i64,
    /// The clock a live lease is judged by.
    pub now: DateTime<Utc>,
}

/// The leases one relay holds.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RelayLeases {
    /// The relay's name (`leased_by`).
    pub leased_by: String,
    /// Events under its live leases: the batch it is delivering.
    pub live: i64,
    /// Events whose lease ran out while still held by it (a relay that stopped or stalls);
    /// another relay takes them once due.
    pub expired: i64,
    /// The latest lease end: a live relay extends its leases, so this moves with it.
    pub lease_until_max: Option<DateTime<Utc>>,
    /// The earliest lease end.
    pub lease_until_min: Option<DateTime<Utc>>,
}

impl RelayLeases {
    /// The leases of `leased_by`, none counted.
    pub fn new(leased_by: String) -> Self {
        RelayLeases {
            leased_by,
            live: 0,
            expired: 0,
            lease_until_max: None,
            lease_until_min: None,
        }
    }
}

params_new!(EventNeighboursParams {
    sequence: i64,
    ordering_key: String,
    window: i64
});
params_new!(KeyHeldListParams {
    after: String,
    limit: i64,
    max_walk: i64,
    count_cap: i64
});
params_new!(KeyHeadParams { sequence: i64, ordering_key: String, action: KeyHeadAction, now: DateTime<Utc> });
params_new!(TopicStatsParams { after: String, limit: i64, published_since: DateTime<Utc>, now: DateTime<Utc> });
params_new!(RelayLeaseListParams { after: String, limit: i64, now: DateTime<Utc> });
