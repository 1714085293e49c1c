//! One declared outbox table and the enqueue call (seed 001 § enqueue()).

use uuid::Uuid;

use crate::backend::{Backend, EventInsertParams};
use crate::error::{Error, Result};
use crate::event::OutboxEvent;
use crate::message::OutboxMessage;
use crate::table::OutboxTable;

/// One outbox table on one database: where events are written and read.
///
/// Cheap to clone (the backend holds a connection pool). Several `Outbox` values may name several
/// tables in one database; they never see each other's events.
#[derive(Debug, Clone)]
pub struct Outbox<B: Backend> {
    backend: B,
    table: OutboxTable,
}

impl<B: Backend> Outbox<B> {
    /// An outbox on `backend` in `table`.
    pub fn new(backend: B, table: OutboxTable) -> Self {
        Outbox { backend, table }
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The table.
    pub fn table(&self) -> &OutboxTable {
        &self.table
    }

    /// The DDL that creates the table and its indexes, for your own migration tool. Idempotent.
    pub fn schema_sql(&self) -> String {
        self.backend.schema_sql(&self.table)
    }

    /// Creates the table and its indexes if they are missing. Safe to call at every start-up, from
    /// several processes at once.
    ///
    /// # Errors
    /// [`Error::Database`] when the database refuses the DDL (permissions, connection lost).
    pub async fn migrate(&self) -> Result<()> {
        self.backend.migrate(&self.table).await
    }

    /// Writes one event on `conn`, the caller's connection or transaction (`&mut *tx`), and returns
    /// it as stored.
    ///
    /// The event commits with the caller's COMMIT and disappears with its ROLLBACK; on a connection
    /// outside a transaction it commits at once. Every argument is checked before anything is
    /// written. With an idempotency key that is already stored (committed, or written earlier in
    /// this transaction), nothing is written and the stored event is returned unchanged — its own
    /// topic and payload — without an error (seed 001 § idempotency_key=). On PostgreSQL a
    /// concurrent transaction holding the same uncommitted key makes this call wait for it.
    ///
    /// `sequence` is taken at INSERT, not at COMMIT: two transactions writing the same ordering key
    /// concurrently may commit in the other order than their sequences. The relay never skips the
    /// later-committing one (it claims by state), but such two events are delivered in sequence
    /// order, which is the order in which they were written, not committed.
    ///
    /// # Errors
    /// - [`Error::Validation`]: a refused argument (see [`OutboxMessage::validate`]); nothing written.
    /// - [`Error::Integrity`]: a unique violation other than the idempotency key (an explicit id
    ///   that is taken).
    /// - [`Error::TransactionRetry`]: a deadlock or serialization failure; retry the transaction.
    /// - [`Error::Database`]: anything else the database reports.
    pub async fn enqueue(&self, conn: &mut B::Conn, message: OutboxMessage) -> Result<OutboxEvent> {
        let params = self.insert_params(message)?;
        self.backend.event_insert(conn, &self.table, &params).await
    }

    /// Reads one event by id, or `None`.
    ///
    /// # Errors
    /// [`Error::Database`] when the query fails.
    pub async fn get(&self, id: Uuid) -> Result<Option<OutboxEvent>> {
        self.backend.event_get(&self.table, id).await
    }

    fn insert_params(&self, message: OutboxMessage) -> Result<EventInsertParams> {
        message.validate()?;
        let OutboxMessage {
            id,
            topic,
            payload,
            headers,
            ordering_key,
            idempotency_key,
            ..
        } = message;
        let payload = payload.map_err(|m| Error::validation("payload", m))?;
        Ok(EventInsertParams::new(
            id.unwrap_or_else(Uuid::now_v7),
            topic,
            payload,
            headers,
            ordering_key,
            idempotency_key,
        ))
    }
}
