//! Conformance suites every database backend runs: public async functions generic over
//! [`Backend`](hare_outbox_core::Backend), called from a backend's own `#[tokio::test]` functions
//! with an outbox on that backend's test database (DESIGN §2). What the public API cannot do — set
//! timestamps directly, store a payload in a chosen form — the backend's test supplies through
//! [`RowEditor`] with its own SQL, so no backend's SQL lives here.

use std::future::Future;

use chrono::{DateTime, Utc};
use hare_outbox_core::OutboxTable;

pub mod journal;
pub mod runs;

/// A timestamp column of the outbox table (DESIGN §4) a suite sets directly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeColumn {
    /// `created_at`.
    CreatedAt,
    /// `published_at`.
    PublishedAt,
    /// `dead_lettered_at`.
    DeadLetteredAt,
    /// `lease_until`.
    LeaseUntil,
}

impl TimeColumn {
    /// The column's name in the outbox table.
    pub fn name(self) -> &'static str {
        match self {
            TimeColumn::CreatedAt => "created_at",
            TimeColumn::PublishedAt => "published_at",
            TimeColumn::DeadLetteredAt => "dead_lettered_at",
            TimeColumn::LeaseUntil => "lease_until",
        }
    }
}

/// Direct writes to stored events that the public API does not offer, implemented by a backend's
/// test with its own SQL on its own test database.
///
/// Each call panics when the write fails.
pub trait RowEditor {
    /// Sets `column` of the event at `sequence` in `table` to `time` (`None` = NULL), in the
    /// backend's timestamp format.
    fn set_time(
        &self,
        table: &OutboxTable,
        sequence: i64,
        column: TimeColumn,
        time: Option<DateTime<Utc>>,
    ) -> impl Future<Output = ()>;

    /// Stores `json`, the exact JSON text given, as the payload of the event at `sequence` in
    /// `table` — as a capture trigger would write it (object keys in the order given, not
    /// sorted), in the backend's JSON storage.
    fn set_payload(
        &self,
        table: &OutboxTable,
        sequence: i64,
        json: &str,
    ) -> impl Future<Output = ()>;
}
