//! The consumer-side inbox: at-least-once delivery becomes an exactly-once effect.
//!
//! A consumer records each received event id in its own transaction, together with the work the
//! event causes; a redelivered event finds its id recorded and is skipped. Receivers of webhooks
//! check the signature first with `hare_outbox::webhook::verify_signature`.

use std::time::Duration;

use chrono::Utc;
use uuid::Uuid;

use crate::backend::InboxBackend;
use crate::backend::params::{InboxDeleteOlderParams, InboxRecordParams};
use crate::error::{Error, Result};
use crate::table::OutboxTable;

/// Default inbox table name.
pub const DEFAULT_INBOX_TABLE: &str = "hare_outbox_inbox";

/// Rows deleted per statement by [`Inbox::cleanup`].
pub const CLEANUP_BATCH: i64 = 1000;

/// One inbox table: `(consumer, event_id)` pairs already processed, with the time.
///
/// ```no_run
/// use hare_outbox_core::inbox::Inbox;
/// use hare_outbox_core::InboxBackend;
///
/// // `tx` is the consumer's own transaction (`&mut *tx` with sqlx).
/// async fn handle<B: InboxBackend>(inbox: &Inbox<B>, tx: &mut B::Conn, event_id: uuid::Uuid) -> hare_outbox_core::Result<()> {
///     if inbox.process_once(tx, "billing", event_id).await? {
///         // … apply the event's effect in the same transaction, then commit it …
///     }
///     Ok(())
/// }
/// ```
#[derive(Debug, Clone)]
pub struct Inbox<B: InboxBackend> {
    backend: B,
    table: OutboxTable,
}

impl<B: InboxBackend> Inbox<B> {
    /// An inbox in `table` (`name` or `schema.name`; [`DEFAULT_INBOX_TABLE`] is the usual name).
    ///
    /// # Errors
    /// [`Error::Configuration`] for a malformed table name.
    pub fn new(backend: B, table: &str) -> Result<Self> {
        let table = OutboxTable::parse(table).map_err(|e| match e {
            // The names follow the outbox table's rules; the message names what it is.
            Error::Configuration(message) => {
                Error::Configuration(message.replacen("outbox table", "inbox table", 1))
            }
            other => other,
        })?;
        Ok(Inbox { backend, table })
    }

    /// The DDL of the inbox table, for your own migration tool. Idempotent.
    pub fn schema_sql(&self) -> String {
        self.backend.inbox_schema_sql(&self.table)
    }

    /// Every version of the inbox table's schema (a migration stream of its own, numbered from 1),
    /// oldest first, with when it was applied (`None`: pending). Changes nothing.
    ///
    /// # Errors
    /// [`Error::Migration`] when the record of applied migrations disagrees with this build;
    /// [`Error::Database`] when it cannot be read.
    pub async fn migration_status(&self) -> Result<Vec<crate::MigrationStatus>> {
        self.backend
            .migration_status(crate::MigrationStream::Inbox, &self.table)
            .await
    }

    /// Creates the inbox table if it is missing: applies the pending versions of the inbox
    /// migrations, each with its record.
    ///
    /// # Errors
    /// [`Error::Database`] when the DDL fails.
    pub async fn migrate(&self) -> Result<()> {
        self.backend.inbox_migrate(&self.table).await
    }

    /// Records that `consumer` processes `event_id`, on `conn` (the consumer's own transaction), and
    /// says whether it is new: `true` the first time — do the work in the same transaction —
    /// `false` for a duplicate delivery. A concurrent transaction recording the same pair waits for
    /// this one: it gets `false` if this one commits, `true` if it rolls back. A rolled-back
    /// transaction leaves nothing recorded, so the event is processed again on redelivery.
    ///
    /// # Errors
    /// [`Error::Validation`] for an empty or over-255-character consumer name (nothing written);
    /// [`Error::Database`] when the insert fails.
    pub async fn process_once(
        &self,
        conn: &mut B::Conn,
        consumer: &str,
        event_id: Uuid,
    ) -> Result<bool> {
        if consumer.trim().is_empty() || consumer.chars().count() > 255 || consumer.contains('\0') {
            return Err(Error::validation(
                "consumer",
                format!("{consumer:?} must have 1 to 255 characters and no NUL"),
            ));
        }
        self.backend
            .inbox_record(
                conn,
                &self.table,
                &InboxRecordParams::new(consumer.to_owned(), event_id),
            )
            .await
    }

    /// Deletes records older than `older_than`, in batches of [`CLEANUP_BATCH`] rows; returns how
    /// many. Keep records longer than the longest redelivery you expect (lease plus retries).
    ///
    /// # Errors
    /// [`Error::Validation`] when `older_than` reaches before the year 1; [`Error::Database`]
    /// when a delete fails.
    pub async fn cleanup(&self, older_than: Duration) -> Result<u64> {
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
        let params = InboxDeleteOlderParams::new(before, CLEANUP_BATCH);
        let mut total = 0;
        loop {
            let n = self
                .backend
                .inbox_delete_older(&self.table, &params)
                .await?;
            total += n;
            if n < CLEANUP_BATCH as u64 {
                return Ok(total);
            }
        }
    }
}
