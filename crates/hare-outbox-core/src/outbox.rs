//! One declared outbox table and the enqueue calls.

use std::sync::Arc;

use uuid::Uuid;

use crate::backend::{Backend, EventInsertParams, Inserted};
use crate::error::{Error, Result};
use crate::event::OutboxEvent;
use crate::message::OutboxMessage;
use crate::migration::{MigrationStatus, MigrationStream};
use crate::table::{IdempotencyScope, OutboxTable};
use crate::wakeup::{PendingSignals, Wakeup};

/// One outbox table on one database: where events are written and read.
///
/// Cheap to clone (the backend holds a connection pool). Several `Outbox` values may name several
/// tables in one database; they never see each other's events.
#[derive(Clone)]
pub struct Outbox<B: Backend> {
    backend: B,
    table: OutboxTable,
    wakeup: Option<Arc<dyn Wakeup>>,
}

impl<B: Backend> std::fmt::Debug for Outbox<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbox")
            .field("backend", &self.backend.name())
            .field("table", &self.table)
            .field("wakeup", &self.wakeup.is_some())
            .finish()
    }
}

impl<B: Backend> Outbox<B> {
    /// An outbox on `backend` in `table`, without a wake-up (relays poll).
    pub fn new(backend: B, table: OutboxTable) -> Self {
        Outbox {
            backend,
            table,
            wakeup: None,
        }
    }

    /// Signals `wakeup` after every [`OutboxTransaction`] commit that wrote events; relays of this
    /// outbox subscribe to the same object.
    ///
    /// # Errors
    /// [`Error::Configuration`] when the wake-up cannot work with this backend
    /// ([`Wakeup::check_supported`]).
    pub fn with_wakeup(mut self, wakeup: impl Wakeup) -> Result<Self> {
        wakeup.check_supported(&self.backend.capabilities())?;
        self.wakeup = Some(Arc::new(wakeup));
        Ok(self)
    }

    /// Like [`Outbox::with_wakeup`] for a wake-up already shared elsewhere.
    ///
    /// # Errors
    /// As [`Outbox::with_wakeup`].
    pub fn with_shared_wakeup(mut self, wakeup: Arc<dyn Wakeup>) -> Result<Self> {
        wakeup.check_supported(&self.backend.capabilities())?;
        self.wakeup = Some(wakeup);
        Ok(self)
    }

    /// The wake-up, if any.
    pub fn wakeup(&self) -> Option<&Arc<dyn Wakeup>> {
        self.wakeup.as_ref()
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The table.
    pub fn table(&self) -> &OutboxTable {
        &self.table
    }

    /// The DDL that creates the table and its indexes in an empty database, for your own
    /// migration tool: every version of the outbox migrations, each followed by its row in the
    /// record of applied migrations, so a later [`Outbox::migrate`] finds them applied.
    /// Idempotent. For a database that has some versions, see [`Outbox::schema_sql_after`].
    pub fn schema_sql(&self) -> String {
        self.backend.schema_sql(&self.table)
    }

    /// The SQL of the outbox migrations after version `applied` (the newest applied one, from
    /// [`Outbox::migration_status`] and [`migration::applied_version`](crate::migration::applied_version)),
    /// each followed by its record; nothing but the backend's idempotent statements for declared
    /// extra columns, if any, when no version is left.
    pub fn schema_sql_after(&self, applied: i64) -> String {
        self.backend
            .migration_sql(MigrationStream::Outbox, &self.table, applied)
    }

    /// Every version of the table's schema, oldest first, with when it was applied (`None`:
    /// pending). Reads the record of applied migrations; changes nothing.
    ///
    /// # Errors
    /// [`Error::Migration`] when the record disagrees with this build (an edited migration file
    /// or record, a version applied by a newer build), naming the version;
    /// [`Error::Database`] when the record cannot be read.
    pub async fn migration_status(&self) -> Result<Vec<MigrationStatus>> {
        self.backend
            .migration_status(MigrationStream::Outbox, &self.table)
            .await
    }

    /// Brings the table to the newest version of its schema: applies each pending version in a
    /// transaction of its own together with its record, then adds declared extra columns the
    /// table lacks. A table created before versions were recorded is adopted as version 1 (its
    /// rows are kept). Safe to call at every start-up, from several processes at once.
    ///
    /// # Errors
    /// [`Error::Migration`] when the record of applied migrations disagrees with this build
    /// (nothing is applied); [`Error::Configuration`] for a table named
    /// [`MIGRATIONS_TABLE`](crate::migration::MIGRATIONS_TABLE); [`Error::Database`] when the
    /// database refuses the DDL (permissions, connection lost) — the versions before the failing
    /// one stay applied.
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
    /// topic and payload — without an error. On PostgreSQL a
    /// concurrent transaction holding the same uncommitted key makes this call wait for it; if that
    /// transaction rolls back, this call writes its own event.
    ///
    /// This call sends no wake-up signal of its own (sqlx has no commit hook): relays find the
    /// event by polling, or through an in-database signal such as LISTEN/NOTIFY. For a transaction
    /// that signals after its commit, wrap yours with [`Outbox::wrap`] (or begin one with
    /// [`Outbox::begin`]) and enqueue through [`OutboxTransaction::enqueue`].
    ///
    /// `sequence` is taken at INSERT, not at COMMIT: two transactions writing the same ordering key
    /// concurrently may commit in the other order than their sequences. The relay never skips the
    /// later-committing one (it claims by state), but such two events are delivered in sequence
    /// order, which is the order in which they were written, not committed. In **strict** mode
    /// ([`OutboxMessage::strict_order`], [`OutboxTable::with_strict_key_order`]) enqueue first
    /// locks the key until the end of the transaction, so writers of one key serialize and the
    /// delivery order of a key is its commit order.
    ///
    /// # Errors
    /// - [`Error::Validation`]: a refused argument (see [`OutboxMessage::validate`]), an extra
    ///   column the table does not declare, a value of the wrong type, a missing `NOT NULL` extra
    ///   value; nothing written.
    /// - [`Error::Configuration`]: an idempotency key on a table without a unique constraint for it.
    /// - [`Error::Integrity`]: a unique violation other than the idempotency key (an explicit id
    ///   that is taken; a key taken by another tenant's event), or a foreign-key, NOT NULL or CHECK
    ///   violation of the row; the message names the constraint (on SQLite: the column or CHECK,
    ///   not the foreign key, which SQLite does not name).
    /// - [`Error::TransactionRetry`]: a deadlock or serialization failure; retry the transaction.
    ///   This includes an idempotency key committed by another transaction after this
    ///   transaction's REPEATABLE READ or SERIALIZABLE snapshot was taken: the stored event is
    ///   invisible to it, so it can neither return it nor write its own. Retrying sees the key and
    ///   returns the stored event, which is what a caller of an idempotent enqueue wants (seed 001
    ///   calls it an integrity error; we report the retry, because it is recoverable).
    /// - [`Error::Database`]: anything else the database reports.
    pub async fn enqueue(&self, conn: &mut B::Conn, message: OutboxMessage) -> Result<OutboxEvent> {
        Ok(self.insert(conn, message).await?.event)
    }

    /// Writes several events on `conn` and returns them in the given order.
    ///
    /// Every message is checked as for [`Outbox::enqueue`] before anything is written. The events
    /// are written in one savepoint of the caller's transaction (a transaction of its own on a
    /// connection outside one), with one multi-row INSERT per run of consecutive messages of the
    /// same shape (with or without an idempotency key, the same extra columns), in the given order,
    /// so events of one ordering key are delivered in that order. For an idempotency key that is
    /// already stored or given twice, the stored event is returned (all such keys are read with one
    /// SELECT).
    ///
    /// Two concurrent calls taking the same keys in different orders can deadlock on PostgreSQL;
    /// one of them fails with [`Error::TransactionRetry`]: retry it, or pass shared keys in one
    /// order.
    ///
    /// # Errors
    /// As [`Outbox::enqueue`]; on an error nothing of this call is written.
    pub async fn enqueue_many(
        &self,
        conn: &mut B::Conn,
        messages: impl IntoIterator<Item = OutboxMessage>,
    ) -> Result<Vec<OutboxEvent>> {
        Ok(self
            .insert_many(conn, messages)
            .await?
            .into_iter()
            .map(|i| i.event)
            .collect())
    }

    /// Begins a transaction on the backend's pool that sends one wake-up signal per written topic
    /// after its COMMIT, never after a rollback. Run your own statements
    /// through it (`&mut *tx` is the connection) and enqueue with [`OutboxTransaction::enqueue`].
    ///
    /// # Errors
    /// [`Error::Database`] when no connection can be had.
    pub async fn begin(&self) -> Result<OutboxTransaction<B>> {
        Ok(self.wrap(self.backend.begin().await?))
    }

    /// Wraps a transaction you already began (`pool.begin().await?`, on the backend's pool or any
    /// other of the same database) so that it signals the outbox's wake-up after its COMMIT, as
    /// [`Outbox::begin`] does. Your statements keep running through `&mut *tx`; enqueue with
    /// [`OutboxTransaction::enqueue`] and finish with [`OutboxTransaction::commit`] (not the
    /// inner transaction's, which would commit without signalling).
    ///
    /// ```
    /// # use hare_outbox_core::{Backend, Outbox};
    /// # async fn f<B: Backend>(outbox: Outbox<B>, tx: B::Transaction) -> hare_outbox_core::Result<()> {
    /// use hare_outbox_core::OutboxMessage;
    /// use serde_json::json;
    ///
    /// let mut tx = outbox.wrap(tx); // tx: the sqlx transaction your handler began
    /// tx.enqueue(OutboxMessage::new("orders.created", json!({"id": 7}))).await?;
    /// tx.commit().await?; // commits, then wakes the relays
    /// # Ok(()) }
    /// ```
    pub fn wrap(&self, tx: B::Transaction) -> OutboxTransaction<B> {
        OutboxTransaction {
            outbox: self.clone(),
            tx,
            signals: PendingSignals::default(),
            other_signals: Vec::new(),
        }
    }

    /// Reads one event by id, or `None`.
    ///
    /// # Errors
    /// [`Error::Database`] when the query fails.
    pub async fn get(&self, id: Uuid) -> Result<Option<OutboxEvent>> {
        self.backend
            .event_get(&self.table, &crate::backend::EventGetParams::new(id))
            .await
    }

    async fn insert(&self, conn: &mut B::Conn, message: OutboxMessage) -> Result<Inserted> {
        self.insert_with(conn, message, None).await
    }

    /// Like `insert`, signalling through `wakeup` instead of the outbox's wake-up when given.
    async fn insert_with(
        &self,
        conn: &mut B::Conn,
        message: OutboxMessage,
        wakeup: Option<&Arc<dyn Wakeup>>,
    ) -> Result<Inserted> {
        let mut params = self.insert_params(message)?;
        if let Some(wakeup) = wakeup {
            params = params.with_notify_channel(wakeup.in_transaction_channel().map(str::to_owned));
        }
        self.backend.event_insert(conn, &self.table, &params).await
    }

    async fn insert_many(
        &self,
        conn: &mut B::Conn,
        messages: impl IntoIterator<Item = OutboxMessage>,
    ) -> Result<Vec<Inserted>> {
        self.insert_many_with(conn, messages, None).await
    }

    async fn insert_many_with(
        &self,
        conn: &mut B::Conn,
        messages: impl IntoIterator<Item = OutboxMessage>,
        wakeup: Option<&Arc<dyn Wakeup>>,
    ) -> Result<Vec<Inserted>> {
        let channel = wakeup.map(|w| w.in_transaction_channel().map(str::to_owned));
        let params = messages
            .into_iter()
            .enumerate()
            .map(|(i, m)| {
                let params = self.insert_params(m).map_err(|e| at_message(i, e))?;
                Ok(match &channel {
                    Some(channel) => params.with_notify_channel(channel.clone()),
                    None => params,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        if params.is_empty() {
            return Ok(Vec::new());
        }
        self.backend
            .event_insert_many(conn, &self.table, &params)
            .await
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
            extra,
            strict_order,
            ..
        } = message;
        #[cfg(feature = "otel")]
        let headers = {
            let mut headers = headers;
            crate::trace_context::inject_current(&mut headers);
            headers
        };
        let table = &self.table;
        for (name, value) in &extra {
            let Some(column) = table.column(name) else {
                let declared: Vec<&str> = table.columns().iter().map(|c| c.name()).collect();
                return Err(Error::validation(
                    format!("extra.{name}"),
                    format!(
                        "{name:?} is not an extra column of outbox table {table}; declared: [{}]",
                        declared.join(", ")
                    ),
                ));
            };
            if !value.fits(column.column_type()) {
                return Err(value.mismatch(column));
            }
        }
        for column in table.columns().iter().filter(|c| c.is_not_null()) {
            let set = extra
                .iter()
                .any(|(n, v)| n == column.name() && *v != crate::ExtraValue::Null);
            if !set {
                return Err(Error::validation(
                    format!("extra.{}", column.name()),
                    format!("column {:?} is NOT NULL; give it a value", column.name()),
                ));
            }
        }
        if idempotency_key.is_some() {
            match table.idempotency_scope() {
                IdempotencyScope::None => {
                    return Err(Error::configuration(format!(
                        "outbox table {table} has no unique constraint covering idempotency_key; declare IdempotencyScope::Table or PerTenant to enqueue with a key"
                    )));
                }
                IdempotencyScope::PerTenant => {
                    let tenant = table.tenant_column().unwrap_or_default();
                    let set = extra
                        .iter()
                        .any(|(n, v)| n == tenant && *v != crate::ExtraValue::Null);
                    if !set {
                        return Err(Error::validation(
                            format!("extra.{tenant}"),
                            "idempotency keys are unique per tenant here: a message with a key needs its tenant",
                        ));
                    }
                }
                IdempotencyScope::Table => {}
            }
        }
        let payload = payload.map_err(|m| Error::validation("payload", m))?;
        let strict = ordering_key.is_some() && (strict_order || table.strict_key_order());
        // Extra values in the table's column order, so equal shapes batch together.
        let mut extra = extra;
        extra.sort_by_key(|(name, _)| table.columns().iter().position(|c| c.name() == name));
        Ok(EventInsertParams::new(
            id.unwrap_or_else(Uuid::now_v7),
            topic,
            payload,
            headers,
            ordering_key,
            idempotency_key,
        )
        .with_extra(extra)
        .with_strict_order(strict)
        .with_notify_channel(
            self.wakeup
                .as_ref()
                .and_then(|w| w.in_transaction_channel().map(str::to_owned)),
        ))
    }
}

/// Prefixes a validation error with the message's position in an enqueue_many call.
fn at_message(index: usize, error: Error) -> Error {
    match error {
        Error::Validation { field, message } => Error::Validation {
            field: format!("messages[{index}].{field}"),
            message,
        },
        other => other,
    }
}

/// A transaction that signals the outbox's wake-up after its COMMIT: one signal naming every topic
/// it wrote (coalesced), nothing after a rollback or for an idempotency key that was already
/// stored. Derefs to the backend's connection, so your own statements run through `&mut *tx`.
///
/// Dropping it without [`commit`](Self::commit) rolls back.
pub struct OutboxTransaction<B: Backend> {
    outbox: Outbox<B>,
    tx: B::Transaction,
    signals: PendingSignals,
    /// Topics written by [`OutboxTransaction::enqueue_with`], per wake-up given there.
    other_signals: Vec<(Arc<dyn Wakeup>, PendingSignals)>,
}

impl<B: Backend> std::fmt::Debug for OutboxTransaction<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutboxTransaction")
            .field("outbox", &self.outbox)
            .field("signals", &self.signals)
            .finish()
    }
}

impl<B: Backend> std::ops::Deref for OutboxTransaction<B> {
    type Target = B::Conn;
    fn deref(&self) -> &B::Conn {
        &self.tx
    }
}

impl<B: Backend> std::ops::DerefMut for OutboxTransaction<B> {
    fn deref_mut(&mut self) -> &mut B::Conn {
        &mut self.tx
    }
}

impl<B: Backend> From<(Outbox<B>, B::Transaction)> for OutboxTransaction<B> {
    /// [`Outbox::wrap`]: the transaction signals `outbox`'s wake-up after its commit.
    fn from((outbox, tx): (Outbox<B>, B::Transaction)) -> Self {
        outbox.wrap(tx)
    }
}

impl<B: Backend> OutboxTransaction<B> {
    /// The outbox this transaction writes to.
    pub fn outbox(&self) -> &Outbox<B> {
        &self.outbox
    }

    /// [`Outbox::enqueue`] in this transaction; the topic is signalled after commit if the event
    /// was written by this call.
    ///
    /// # Errors
    /// As [`Outbox::enqueue`].
    pub async fn enqueue(&mut self, message: OutboxMessage) -> Result<OutboxEvent> {
        let inserted = self.outbox.insert(&mut self.tx, message).await?;
        if inserted.created {
            self.signals.add(&inserted.event.topic);
        }
        Ok(inserted.event)
    }

    /// [`Outbox::enqueue_many`] in this transaction; after commit one signal names the topics of
    /// the events this call wrote.
    ///
    /// # Errors
    /// As [`Outbox::enqueue_many`].
    pub async fn enqueue_many(
        &mut self,
        messages: impl IntoIterator<Item = OutboxMessage>,
    ) -> Result<Vec<OutboxEvent>> {
        let inserted = self.outbox.insert_many(&mut self.tx, messages).await?;
        for i in inserted.iter().filter(|i| i.created) {
            self.signals.add(&i.event.topic);
        }
        Ok(inserted.into_iter().map(|i| i.event).collect())
    }

    /// [`enqueue`](Self::enqueue) signalling through `wakeup` instead of the outbox's wake-up
    /// (seed 001 § enqueue(), `wakeup=`): after commit, `wakeup` gets one signal naming the
    /// topics written through it in this transaction (coalesced like the outbox's own); a wake-up
    /// that rides the transaction (`ListenNotifyWakeup` in `NotifyMode::InTransaction`) notifies
    /// its own channel at COMMIT. The outbox's wake-up, if any, is not signalled for this event.
    /// Nothing is signalled after a rollback or for an idempotency key that was already stored.
    ///
    /// # Errors
    /// [`Error::Configuration`] when `wakeup` cannot work with this backend
    /// ([`Wakeup::check_supported`]), before anything is written; otherwise as [`Outbox::enqueue`].
    pub async fn enqueue_with(
        &mut self,
        message: OutboxMessage,
        wakeup: Arc<dyn Wakeup>,
    ) -> Result<OutboxEvent> {
        wakeup.check_supported(&self.outbox.backend.capabilities())?;
        let inserted = self
            .outbox
            .insert_with(&mut self.tx, message, Some(&wakeup))
            .await?;
        if inserted.created {
            self.signals_of(wakeup).add(&inserted.event.topic);
        }
        Ok(inserted.event)
    }

    /// [`enqueue_many`](Self::enqueue_many) signalling through `wakeup`, as
    /// [`enqueue_with`](Self::enqueue_with) does.
    ///
    /// # Errors
    /// As [`enqueue_with`](Self::enqueue_with) and [`Outbox::enqueue_many`].
    pub async fn enqueue_many_with(
        &mut self,
        messages: impl IntoIterator<Item = OutboxMessage>,
        wakeup: Arc<dyn Wakeup>,
    ) -> Result<Vec<OutboxEvent>> {
        wakeup.check_supported(&self.outbox.backend.capabilities())?;
        let inserted = self
            .outbox
            .insert_many_with(&mut self.tx, messages, Some(&wakeup))
            .await?;
        let signals = self.signals_of(wakeup);
        for i in inserted.iter().filter(|i| i.created) {
            signals.add(&i.event.topic);
        }
        Ok(inserted.into_iter().map(|i| i.event).collect())
    }

    /// The pending topics of a per-call wake-up (the same object counts once).
    fn signals_of(&mut self, wakeup: Arc<dyn Wakeup>) -> &mut PendingSignals {
        let at = match self
            .other_signals
            .iter()
            .position(|(w, _)| Arc::ptr_eq(w, &wakeup))
        {
            Some(at) => at,
            None => {
                self.other_signals.push((wakeup, PendingSignals::default()));
                self.other_signals.len() - 1
            }
        };
        &mut self.other_signals[at].1
    }

    /// The topics that will be signalled after commit, sorted.
    pub fn pending_topics(&self) -> Vec<String> {
        self.signals.topics()
    }

    /// Commits, then sends one wake-up signal naming every topic written. A failed signal is
    /// logged, not returned: the events are committed and polling delivers them.
    ///
    /// # Errors
    /// The commit's error; then nothing is signalled.
    pub async fn commit(self) -> Result<()> {
        let OutboxTransaction {
            outbox,
            tx,
            signals,
            other_signals,
        } = self;
        outbox.backend.commit(tx).await?;
        let all = outbox
            .wakeup
            .iter()
            .map(|w| (w, &signals))
            .chain(other_signals.iter().map(|(w, s)| (w, s)));
        for (wakeup, signals) in all {
            // A wake-up that rides the transaction (NOTIFY) was already delivered by the commit.
            if wakeup.in_transaction_channel().is_none()
                && !signals.is_empty()
                && let Err(error) = wakeup.signal(&signals.topics()).await
            {
                tracing::warn!(
                    error = &error as &dyn std::error::Error,
                    "wake-up signal failed; relays will find the events by polling"
                );
            }
        }
        Ok(())
    }

    /// Rolls back; nothing is signalled.
    ///
    /// # Errors
    /// The rollback's error.
    pub async fn rollback(self) -> Result<()> {
        self.outbox.backend.rollback(self.tx).await
    }
}
