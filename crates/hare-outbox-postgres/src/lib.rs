//! PostgreSQL backend of hare-outbox: the outbox table's DDL, enqueue and the relay's lease and
//! mark statements. The only crate (with the SQLite backend) that holds SQL text.
//!
//! | | |
//! |---|---|
//! | versions | PostgreSQL ≥ 13 (tested on 15) |
//! | leasing | `FOR UPDATE SKIP LOCKED`: several relays share one table |
//! | payload, headers | `jsonb` |
//! | ids | `uuid` |
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use hare_outbox_core::{Outbox, OutboxMessage, OutboxTable};
//! use hare_outbox_postgres::PgBackend;
//!
//! let pool = sqlx::PgPool::connect("postgres://postgres@127.0.0.1/app").await?;
//! let outbox = Outbox::new(PgBackend::new(pool.clone()), OutboxTable::parse("public.outbox")?);
//! outbox.migrate().await?;
//! let mut tx = pool.begin().await?;
//! outbox.enqueue(&mut *tx, OutboxMessage::new("billing.invoice.paid", serde_json::json!({"id": 7}))).await?;
//! tx.commit().await?;
//! # Ok(()) }
//! ```

mod capture;
mod error;
mod exec;
mod inbox;
mod journal;
mod migrate;
mod sql;
mod views;
mod wakeup;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use hare_outbox_core::backend::{
    Backend, BacklogParams, Capabilities, CaptureBackend, EventDeleteFinishedParams,
    EventGetParams, EventInsertParams, EventLeaseExtendParams, EventLeaseParams,
    EventMarkDeliveredParams, EventMarkFailedParams, EventReleaseParams,
    EventRetryDeadLetteredParams, FinishedState, InboxBackend, InboxDeleteOlderParams,
    InboxRecordParams, Inserted, JournalBackend, LeasedBatch, UnreadableRow,
};
use hare_outbox_core::{
    Backlog, ColumnType, Error, ExtraValue, IdempotencyScope, MigrationStatus, MigrationStream,
    OutboxEvent, OutboxTable, Result, StoredRow, TopicFilter,
};
use serde_json::{Map, Value};
use sqlx::postgres::PgArguments;
use sqlx::postgres::{PgConnection, PgPool, PgRow};
use sqlx::query::Query;
use sqlx::{AssertSqlSafe, Row};
use uuid::Uuid;

pub use error::translate;
use exec::RunIn;
use sql::{RelayCommit, Statements};
pub use wakeup::{DEFAULT_CHANNEL, ListenNotifyWakeup, MAX_LISTEN_FAILURES, NotifyMode};

/// The relay's lease statement for `table`, rendered as the backend runs it: at most `limit`
/// events, at most `max_events_per_key` of one ordering key. Its nine parameters are those of
/// `queries/event_lease.sql` (clock, lease seconds, relay name, key cursor, topic filter).
/// For benchmarks and `EXPLAIN`; not a stable interface.
#[doc(hidden)]
pub fn lease_statement(table: &OutboxTable, limit: i64, max_events_per_key: i64) -> String {
    Statements::for_table(table)
        .event_lease(limit, max_events_per_key, limit, true)
        .to_string()
}

/// The PostgreSQL backend: a pool for the relay's statements; enqueue uses the caller's
/// connection (`&mut PgConnection`, e.g. `&mut *tx`).
#[derive(Debug, Clone)]
pub struct PgBackend {
    pool: PgPool,
    pooler: bool,
    relay_commit: RelayCommit,
    migrations: migrate::Migrations,
}

impl PgBackend {
    /// A backend over `pool`. The relay takes one connection per statement, briefly; a pool of 2 to
    /// 5 connections per relay is plenty.
    pub fn new(pool: PgPool) -> Self {
        PgBackend {
            pool,
            pooler: false,
            relay_commit: RelayCommit::default(),
            migrations: migrate::Migrations::default(),
        }
    }

    /// Runs `migrations` as the versions of `stream` instead of this crate's files: for tests of
    /// the migration runner (a version 2 that does not exist yet). Not a stable interface.
    #[doc(hidden)]
    pub fn with_migrations(
        mut self,
        stream: MigrationStream,
        migrations: &'static [hare_outbox_core::migration::Migration],
    ) -> Self {
        match stream {
            MigrationStream::Outbox => self.migrations.outbox = migrations,
            MigrationStream::Inbox => self.migrations.inbox = migrations,
        }
        self
    }

    /// Whether the relay's own statements — leases, lease extensions and releases, and the
    /// delivered / failed marks — wait for their commit to reach the disk. Defaults to `false`:
    /// each of those statements sets `synchronous_commit = off` for its own transaction only
    /// (`set_config(…, true)`; never the session, never your transactions, enqueue, change
    /// capture or the journal's actions), which takes a WAL flush (milliseconds on most disks)
    /// off every lease and mark.
    ///
    /// The risk taken: if the database server crashes (not the relay; a server restart is
    /// fine), the last fraction of a second of relay progress may be lost — events marked
    /// delivered go back to pending (or leased, until the lease expires) and are delivered
    /// again. The WAL keeps commits in order, so what comes back is always a tail of each key's
    /// progress: events are redelivered in key order and none is skipped, which is the
    /// at-least-once contract consumers already handle. Pass `true` to wait for every commit
    /// (config key `database_synchronous_relay_commits = true`).
    pub fn with_synchronous_relay_commits(mut self, synchronous: bool) -> Self {
        self.relay_commit = if synchronous {
            RelayCommit::Synchronous
        } else {
            RelayCommit::Asynchronous
        };
        self
    }

    /// Whether the relay's statements wait for their commits; see
    /// [`PgBackend::with_synchronous_relay_commits`].
    pub fn synchronous_relay_commits(&self) -> bool {
        self.relay_commit == RelayCommit::Synchronous
    }

    /// The statements of `table` as this backend runs them.
    fn statements(&self, table: &OutboxTable) -> std::sync::Arc<Statements> {
        Statements::for_relay(table, self.relay_commit)
    }

    /// Says whether `pool` connects through a transaction pooler (PgBouncer in
    /// `pool_mode = transaction`, or a proxy like it). When it does, every statement of this
    /// backend is sent unnamed (never a named prepared statement, which another client of the
    /// same server connection would collide with) and the relay's statements each run in a
    /// transaction of their own, which the pooler keeps on one server connection; nothing
    /// session-scoped is used either way (advisory locks are transaction-scoped, settings are
    /// `SET LOCAL`). Costs two round trips per relay statement (`BEGIN`, `COMMIT`). Defaults to
    /// `false`. Your own statements through such a pool need `persistent(false)` too, or a
    /// pooler that tracks prepared statements (PgBouncer ≥ 1.21, `max_prepared_statements`).
    /// LISTEN cannot go through it: see
    /// [`ListenNotifyWakeup::with_listen_pool`](crate::ListenNotifyWakeup::with_listen_pool).
    pub fn with_transaction_pooler(mut self, pooler: bool) -> Self {
        self.pooler = pooler;
        self
    }

    /// Whether statements are sent for a transaction pooler; see
    /// [`PgBackend::with_transaction_pooler`].
    pub fn transaction_pooler(&self) -> bool {
        self.pooler
    }

    fn db(&self) -> exec::Db<'_> {
        exec::Db {
            pool: &self.pool,
            pooler: self.pooler,
        }
    }

    /// The pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// One event's INSERT (and, for a taken idempotency key, the stored event) on `conn`.
    async fn insert_one(
        &self,
        conn: &mut PgConnection,
        table: &OutboxTable,
        params: &EventInsertParams,
    ) -> Result<Inserted> {
        let statements = self.statements(table);
        let extra: Vec<&str> = params.extra.iter().map(|(c, _)| c.as_str()).collect();
        let sql = statements.insert_one(table, &extra);
        let mut query = sqlx::query(AssertSqlSafe(sql))
            .bind(params.id)
            .bind(&params.topic)
            .bind(&params.payload)
            .bind(Value::Object(params.headers.clone()))
            .bind(&params.ordering_key)
            .bind(&params.idempotency_key);
        for (_, value) in &params.extra {
            query = bind_extra(query, value);
        }
        let inserted = query
            .persistent(self.db().persistent())
            .fetch_optional(&mut *conn)
            .await
            .map_err(translate)?;
        if let Some(row) = inserted {
            let event = decode(table, &row)?;
            notify_in_transaction(
                self.db(),
                conn,
                params.notify_channel.as_deref(),
                std::slice::from_ref(&event.topic),
            )
            .await?;
            return Ok(Inserted {
                event,
                created: true,
            });
        }
        // ON CONFLICT DO NOTHING: the key is taken; return the stored event unchanged.
        let mut stored = stored_by_keys(
            self.db(),
            conn,
            table,
            &statements,
            std::slice::from_ref(params),
        )
        .await?;
        let event = stored
            .pop()
            .flatten()
            .ok_or_else(|| invisible_key(params))?;
        Ok(Inserted {
            event,
            created: false,
        })
    }
}

#[async_trait]
impl Backend for PgBackend {
    type Conn = PgConnection;
    type Transaction = sqlx::Transaction<'static, sqlx::Postgres>;

    fn capabilities(&self) -> Capabilities {
        Capabilities::new("postgres").with_notify_in_transaction(true)
    }

    fn schema_sql(&self, table: &OutboxTable) -> String {
        self.migration_sql(MigrationStream::Outbox, table, 0)
    }

    /// Applies the pending outbox versions (see [`Backend::migrate`]). Every step takes a
    /// transaction-scoped advisory lock (never a session lock, so it works behind a transaction
    /// pooler): the schema and the record's table are created under the lock of every migrate,
    /// each version under the lock of its table, keyed by the schema-qualified name.
    async fn migrate(&self, table: &OutboxTable) -> Result<()> {
        migrate::run(
            self.db(),
            self.migrations.outbox,
            MigrationStream::Outbox,
            table,
        )
        .await
    }

    fn migrations(&self, stream: MigrationStream) -> &[hare_outbox_core::migration::Migration] {
        self.migrations.of(stream)
    }

    fn migration_sql(&self, stream: MigrationStream, table: &OutboxTable, applied: i64) -> String {
        migrate::sql(self.migrations.of(stream), stream, table, applied)
    }

    async fn migration_status(
        &self,
        stream: MigrationStream,
        table: &OutboxTable,
    ) -> Result<Vec<MigrationStatus>> {
        migrate::status(self.db(), self.migrations.of(stream), stream, table).await
    }

    async fn begin(&self) -> Result<Self::Transaction> {
        self.pool.begin().await.map_err(translate)
    }

    async fn commit(&self, tx: Self::Transaction) -> Result<()> {
        tx.commit().await.map_err(translate)
    }

    async fn rollback(&self, tx: Self::Transaction) -> Result<()> {
        tx.rollback().await.map_err(translate)
    }

    async fn event_insert(
        &self,
        conn: &mut PgConnection,
        table: &OutboxTable,
        params: &EventInsertParams,
    ) -> Result<Inserted> {
        let strict_key = params
            .ordering_key
            .as_deref()
            .filter(|_| params.strict_order);
        let Some(key) = strict_key else {
            return self.insert_one(conn, table, params).await;
        };
        if sqlx::Connection::is_in_transaction(&*conn) {
            lock_keys(self.db(), conn, table, &[key]).await?;
            return self.insert_one(conn, table, params).await;
        }
        // Outside a transaction the lock would end with its own statement: hold it in a
        // transaction that also writes the event.
        let mut tx = sqlx::Connection::begin(&mut *conn)
            .await
            .map_err(translate)?;
        lock_keys(self.db(), &mut tx, table, &[key]).await?;
        let inserted = self.insert_one(&mut tx, table, params).await?;
        tx.commit().await.map_err(translate)?;
        Ok(inserted)
    }

    async fn event_insert_many(
        &self,
        conn: &mut PgConnection,
        table: &OutboxTable,
        params: &[EventInsertParams],
    ) -> Result<Vec<Inserted>> {
        let statements = self.statements(table);
        // A savepoint inside the caller's transaction (or a transaction of its own): an error
        // leaves nothing of this call behind.
        let mut savepoint = sqlx::Connection::begin(&mut *conn)
            .await
            .map_err(translate)?;
        let strict: Vec<&str> = params
            .iter()
            .filter(|p| p.strict_order)
            .filter_map(|p| p.ordering_key.as_deref())
            .collect();
        if !strict.is_empty() {
            lock_keys(self.db(), &mut savepoint, table, &strict).await?;
        }
        let mut results: Vec<Option<Inserted>> = vec![None; params.len()];
        let mut start = 0;
        while start < params.len() {
            let shape = params[start].shape();
            let end = (start..params.len())
                .find(|&i| params[i].shape() != shape)
                .unwrap_or(params.len());
            let run = &params[start..end];
            let extra: Vec<&str> = run[0].extra.iter().map(|(c, _)| c.as_str()).collect();
            let mut query = sqlx::query(AssertSqlSafe(statements.insert_many(table, &extra)))
                .bind(run.iter().map(|p| p.id).collect::<Vec<_>>())
                .bind(run.iter().map(|p| p.topic.clone()).collect::<Vec<_>>())
                .bind(run.iter().map(|p| p.payload.clone()).collect::<Vec<_>>())
                .bind(
                    run.iter()
                        .map(|p| Value::Object(p.headers.clone()))
                        .collect::<Vec<_>>(),
                )
                .bind(
                    run.iter()
                        .map(|p| p.ordering_key.clone())
                        .collect::<Vec<_>>(),
                )
                .bind(
                    run.iter()
                        .map(|p| p.idempotency_key.clone())
                        .collect::<Vec<_>>(),
                );
            for (i, name) in extra.iter().enumerate() {
                let column_type = table
                    .column(name)
                    .map_or(ColumnType::Text, |c| c.column_type());
                query = bind_extra_array(query, column_type, run.iter().map(|p| &p.extra[i].1));
            }
            let rows = query
                .persistent(self.db().persistent())
                .fetch_all(&mut *savepoint)
                .await
                .map_err(translate)?;
            let mut by_id = std::collections::HashMap::with_capacity(rows.len());
            for row in &rows {
                let event = decode(table, row)?;
                by_id.insert(event.id, event);
            }
            for (offset, p) in run.iter().enumerate() {
                if let Some(event) = by_id.remove(&p.id) {
                    results[start + offset] = Some(Inserted {
                        event,
                        created: true,
                    });
                }
            }
            start = end;
        }
        // Existing and repeated keys: one SELECT for all of them.
        let missing: Vec<usize> = (0..params.len())
            .filter(|&i| results[i].is_none())
            .collect();
        if !missing.is_empty() {
            let wanted: Vec<EventInsertParams> =
                missing.iter().map(|&i| params[i].clone()).collect();
            let stored =
                stored_by_keys(self.db(), &mut savepoint, table, &statements, &wanted).await?;
            for (&i, event) in missing.iter().zip(stored) {
                let event = event.ok_or_else(|| invisible_key(&params[i]))?;
                results[i] = Some(Inserted {
                    event,
                    created: false,
                });
            }
        }
        let created: std::collections::BTreeSet<String> = results
            .iter()
            .flatten()
            .filter(|i| i.created)
            .map(|i| i.event.topic.clone())
            .collect();
        let channel = params.first().and_then(|p| p.notify_channel.as_deref());
        notify_in_transaction(
            self.db(),
            &mut savepoint,
            channel,
            &created.into_iter().collect::<Vec<_>>(),
        )
        .await?;
        savepoint.commit().await.map_err(translate)?;
        results
            .into_iter()
            .map(|r| r.ok_or_else(|| Error::configuration("an enqueued message got no event back")))
            .collect()
    }

    /// The lease of `event_lease.sql`: one statement, O(batch) whatever one key's backlog, judged
    /// at the database's clock unless the params carry one.
    async fn event_lease(
        &self,
        table: &OutboxTable,
        params: &EventLeaseParams,
    ) -> Result<LeasedBatch> {
        let statements = self.statements(table);
        let filtered = !params.topics.is_all();
        let query = sqlx::query(AssertSqlSafe(statements.event_lease(
            params.limit,
            params.max_events_per_key,
            params.min_keys,
            filtered,
        )))
        .bind(params.now)
        .bind(params.lease.as_secs_f64())
        .bind(&params.leased_by)
        .bind(&params.key_cursor);
        // A relay of every topic runs the statement without the topic parameters: with them,
        // PostgreSQL kept planning it afresh on every call (about 1 ms each).
        let query = if filtered {
            bind_topics(query, &params.topics)
        } else {
            query
        };
        let mut rows = query.fetch_all_in(self.db()).await.map_err(translate)?;
        let (key_cursor, contended) = match rows.first() {
            Some(row) => (
                row.try_get("key_cursor").map_err(translate)?,
                row.try_get::<Option<bool>, _>("contended")
                    .map_err(translate)?
                    .unwrap_or(false),
            ),
            None => (None, false),
        };
        // Nothing leased: the statement's one row of NULL columns carries only the outcome.
        rows.retain(|row| {
            row.try_get::<Option<i64>, _>("sequence")
                .is_ok_and(|s| s.is_some())
        });
        // A row that cannot be read (a payload nested deeper than the JSON reader allows, say)
        // or holds what the library never writes (headers that are not an object, negative
        // attempts, a nil id, …) is handed to the core, which dead-letters it with the reason.
        let mut events = Vec::with_capacity(rows.len());
        let mut unreadable = Vec::new();
        for row in &rows {
            let refused = match stored_row_problem(row) {
                Some(reason) => reason,
                None => match decode(table, row) {
                    Ok(event) => {
                        events.push(event);
                        continue;
                    }
                    Err(error) => format!("the stored event cannot be read: {error}"),
                },
            };
            unreadable.push(UnreadableRow::new(
                row.try_get("sequence").map_err(translate)?,
                row.try_get("attempts").map_err(translate)?,
                row.try_get::<Option<String>, _>("ordering_key")
                    .ok()
                    .flatten(),
                refused,
            ));
        }
        Ok(LeasedBatch::new(events, key_cursor)
            .with_contended(contended)
            .with_unreadable(unreadable))
    }

    async fn event_lease_release(
        &self,
        table: &OutboxTable,
        params: &EventReleaseParams,
    ) -> Result<u64> {
        let done = sqlx::query(AssertSqlSafe(
            self.statements(table).event_lease_release.clone(),
        ))
        .bind(&params.sequences)
        .bind(&params.leased_by)
        .execute_in(self.db())
        .await
        .map_err(translate)?;
        Ok(done.rows_affected())
    }

    async fn event_lease_extend(
        &self,
        table: &OutboxTable,
        params: &EventLeaseExtendParams,
    ) -> Result<u64> {
        let done = sqlx::query(AssertSqlSafe(
            self.statements(table).event_lease_extend.clone(),
        ))
        .bind(&params.sequences)
        .bind(&params.leased_by)
        .bind(params.lease.as_secs_f64())
        .bind(params.now)
        .execute_in(self.db())
        .await
        .map_err(translate)?;
        Ok(done.rows_affected())
    }

    async fn event_mark_delivered(
        &self,
        table: &OutboxTable,
        params: &EventMarkDeliveredParams,
    ) -> Result<u64> {
        if let Some(column) = &params.result_column {
            let sql = sql::with_result_column(
                &self.statements(table).event_mark_delivered_result,
                column,
            );
            let records: Vec<Option<String>> = (0..params.sequences.len())
                .map(|i| {
                    params
                        .results
                        .get(i)
                        .cloned()
                        .flatten()
                        .map(|v| result_text(&v))
                })
                .collect();
            let done = sqlx::query(AssertSqlSafe(sql))
                .bind(&params.sequences)
                .bind(params.now)
                .bind(records)
                .execute_in(self.db())
                .await
                .map_err(translate)?;
            return Ok(done.rows_affected());
        }
        let done = sqlx::query(AssertSqlSafe(
            self.statements(table).event_mark_delivered.clone(),
        ))
        .bind(&params.sequences)
        .bind(params.now)
        .execute_in(self.db())
        .await
        .map_err(translate)?;
        Ok(done.rows_affected())
    }

    async fn event_mark_failed(
        &self,
        table: &OutboxTable,
        params: &EventMarkFailedParams,
    ) -> Result<u64> {
        let f = &params.failures;
        let sequences: Vec<i64> = f.iter().map(|x| x.sequence).collect();
        let attempts: Vec<i32> = f.iter().map(|x| x.attempts).collect();
        let errors: Vec<String> = f
            .iter()
            .map(|x| x.error.replace('\0', "\u{FFFD}"))
            .collect();
        let retry_in: Vec<Option<f64>> = f
            .iter()
            .map(|x| x.retry_in.map(|d| d.as_secs_f64()))
            .collect();
        let statements = self.statements(table);
        let sql: std::sync::Arc<str> = match &params.result_column {
            Some(column) => {
                sql::with_result_column(&statements.event_mark_failed_result, column).into()
            }
            None => statements.event_mark_failed.clone(),
        };
        let mut query = sqlx::query(AssertSqlSafe(sql))
            .bind(sequences)
            .bind(attempts)
            .bind(errors)
            .bind(retry_in)
            .bind(params.now)
            .bind(&params.leased_by);
        if params.result_column.is_some() {
            let records: Vec<Option<String>> = f
                .iter()
                .map(|x| x.result.as_ref().map(result_text))
                .collect();
            query = query.bind(records);
        }
        let done = query.execute_in(self.db()).await.map_err(translate)?;
        Ok(done.rows_affected())
    }

    async fn event_list_pending_on(
        &self,
        conn: &mut PgConnection,
        table: &OutboxTable,
        params: &hare_outbox_core::backend::EventListPendingParams,
    ) -> Result<Vec<OutboxEvent>> {
        let rows = sqlx::query(AssertSqlSafe(
            self.statements(table).event_list_pending.clone(),
        ))
        .bind(i64::from(params.limit))
        .persistent(self.db().persistent())
        .fetch_all(&mut *conn)
        .await
        .map_err(translate)?;
        rows.iter().map(|r| decode(table, r)).collect()
    }

    async fn event_get(
        &self,
        table: &OutboxTable,
        params: &EventGetParams,
    ) -> Result<Option<OutboxEvent>> {
        let row = sqlx::query(AssertSqlSafe(self.statements(table).event_get.clone()))
            .bind(params.id)
            .fetch_optional_in(self.db())
            .await
            .map_err(translate)?;
        row.as_ref().map(|r| decode(table, r)).transpose()
    }

    async fn backlog(&self, table: &OutboxTable, params: &BacklogParams) -> Result<Backlog> {
        let query = sqlx::query(AssertSqlSafe(self.statements(table).backlog.clone()));
        let row = bind_topics(query, &params.topics)
            .fetch_one_in(self.db())
            .await
            .map_err(translate)?;
        let oldest: Option<DateTime<Utc>> = row.try_get("oldest_pending").map_err(translate)?;
        Ok(Backlog {
            pending: row.try_get("pending").map_err(translate)?,
            oldest_pending_age_seconds: oldest
                .map(|t| (params.now - t).as_seconds_f64().max(0.0))
                .unwrap_or(0.0),
            dead_lettered: row.try_get("dead_lettered").map_err(translate)?,
        })
    }
}

#[async_trait]
impl JournalBackend for PgBackend {
    /// One page of the journal: keyset pagination on the primary key, so a page deep in the table
    /// costs what the first one does. A status is judged at the database's clock (`now()`, the
    /// statement's transaction start), exactly as [`OutboxEvent::status`] does; the object filter
    /// reads the payload's object name (its `table` when a string, else its `model`; or `model`
    /// alone with [`ObjectName::Label`](hare_outbox_core::journal::ObjectName::Label)) and `pk`
    /// (a non-string key compares as `jsonb`, whatever its key order) and the author filter the
    /// `author` header. Every filter value is bound as a parameter.
    ///
    /// The object and author filters test rows newest first until the page is full: fast while
    /// matches are common, a scan of the table when they are rare (the history of one object).
    /// `migrate` creates no index for them, as it would cost every enqueue; a table searched by
    /// object often can take this one, which the filter uses as it stands (BENCHMARKS.md
    /// § Journal pages):
    ///
    /// ```sql
    /// CREATE INDEX outbox_object_idx ON outbox ((CASE WHEN jsonb_typeof(payload -> 'table') =
    ///     'string' THEN payload -> 'table' ELSE payload -> 'model' END), (payload -> 'pk'));
    /// ```
    ///
    /// (for an object column configured to the label: `((payload -> 'model'), (payload -> 'pk'))`).
    ///
    /// # Errors
    /// [`Error::Database`] when the query fails or a row cannot be decoded.
    async fn event_list(
        &self,
        table: &OutboxTable,
        query: &hare_outbox_core::journal::EventQuery,
    ) -> Result<Vec<OutboxEvent>> {
        journal::list(self.db(), table, query).await
    }

    /// The timeline of `params`, in two statements read in one `REPEATABLE READ` transaction: the
    /// counts (one pass over the table, there being no index on `created_at`; about 0.2 s per
    /// million rows plus the events of the window) and the latency percentiles
    /// (`percentile_cont`, over the published events of the window). Bucket edges are whole microseconds, the resolution of
    /// `timestamptz`; the last bucket ends at `until`.
    ///
    /// # Errors
    /// [`Error::Validation`] when `since` is not before `until`, `buckets` is 0 or above
    /// [`MAX_TIMELINE_BUCKETS`](hare_outbox_core::journal::MAX_TIMELINE_BUCKETS), or the window
    /// holds less than a microsecond per bucket; [`Error::Database`] when a query fails.
    async fn event_timeline(
        &self,
        table: &OutboxTable,
        params: &hare_outbox_core::journal::TimelineParams,
    ) -> Result<Vec<hare_outbox_core::journal::TimelineBucket>> {
        journal::timeline(self.db(), table, params).await
    }

    async fn event_retry_dead_lettered(
        &self,
        table: &OutboxTable,
        params: &EventRetryDeadLetteredParams,
    ) -> Result<u64> {
        let query = sqlx::query(AssertSqlSafe(
            self.statements(table).event_retry_dead_lettered.clone(),
        ))
        .bind(&params.ids);
        let done = bind_topics(query, &params.topics)
            .execute_in(self.db())
            .await
            .map_err(translate)?;
        Ok(done.rows_affected())
    }

    async fn event_delete_finished(
        &self,
        table: &OutboxTable,
        params: &EventDeleteFinishedParams,
    ) -> Result<u64> {
        let statements = self.statements(table);
        let sql = match params.state {
            FinishedState::Published => statements.event_delete_published.clone(),
            FinishedState::DeadLettered => statements.event_delete_dead_lettered.clone(),
        };
        let query = sqlx::query(AssertSqlSafe(sql))
            .bind(params.before)
            .bind(params.limit);
        let done = bind_topics(query, &params.topics)
            .execute_in(self.db())
            .await
            .map_err(translate)?;
        Ok(done.rows_affected())
    }

    // The operator's views (src/views.rs).

    async fn event_neighbours(
        &self,
        table: &OutboxTable,
        params: &hare_outbox_core::backend::EventNeighboursParams,
    ) -> Result<hare_outbox_core::backend::EventNeighbours> {
        views::neighbours(self.db(), table, params).await
    }

    async fn key_held_list(
        &self,
        table: &OutboxTable,
        params: &hare_outbox_core::backend::KeyHeldListParams,
    ) -> Result<hare_outbox_core::backend::HeldKeyPage> {
        views::held_keys(self.db(), table, params).await
    }

    async fn key_head_update(
        &self,
        table: &OutboxTable,
        params: &hare_outbox_core::backend::KeyHeadParams,
    ) -> Result<u64> {
        views::key_head(self.db(), table, params).await
    }

    async fn topic_stats_list(
        &self,
        table: &OutboxTable,
        params: &hare_outbox_core::backend::TopicStatsParams,
    ) -> Result<Vec<hare_outbox_core::backend::TopicStats>> {
        views::topic_stats(self.db(), table, params).await
    }

    async fn relay_lease_list(
        &self,
        table: &OutboxTable,
        params: &hare_outbox_core::backend::RelayLeaseListParams,
    ) -> Result<Vec<hare_outbox_core::backend::RelayLeases>> {
        views::relay_leases(self.db(), table, params).await
    }
}

#[async_trait]
impl CaptureBackend for PgBackend {
    async fn capture_install(
        &self,
        table: &OutboxTable,
        params: &hare_outbox_core::backend::CaptureInstallParams,
    ) -> Result<()> {
        capture::install(self.db(), table, params).await
    }

    async fn capture_uninstall(
        &self,
        table: &OutboxTable,
        params: &hare_outbox_core::backend::CaptureUninstallParams,
    ) -> Result<bool> {
        capture::uninstall(self.db(), table, params).await
    }

    async fn capture_status(
        &self,
        table: &OutboxTable,
    ) -> Result<Vec<hare_outbox_core::capture::CaptureStatus>> {
        capture::status(self.db(), table).await
    }

    async fn context_set(
        &self,
        conn: &mut PgConnection,
        _table: &OutboxTable,
        params: &hare_outbox_core::backend::ContextSetParams,
    ) -> Result<()> {
        capture::context_set(self.db(), conn, params).await
    }

    fn in_transaction(&self, conn: &PgConnection) -> bool {
        sqlx::Connection::is_in_transaction(conn)
    }
}

#[async_trait]
impl InboxBackend for PgBackend {
    fn inbox_schema_sql(&self, table: &OutboxTable) -> String {
        self.migration_sql(MigrationStream::Inbox, table, 0)
    }

    async fn inbox_migrate(&self, table: &OutboxTable) -> Result<()> {
        migrate::run(
            self.db(),
            self.migrations.inbox,
            MigrationStream::Inbox,
            table,
        )
        .await
    }

    async fn inbox_record(
        &self,
        conn: &mut PgConnection,
        table: &OutboxTable,
        params: &InboxRecordParams,
    ) -> Result<bool> {
        inbox::record(self.db(), conn, table, &params.consumer, params.event_id).await
    }

    async fn inbox_delete_older(
        &self,
        table: &OutboxTable,
        params: &InboxDeleteOlderParams,
    ) -> Result<u64> {
        inbox::delete_older(self.db(), table, params.before, params.limit).await
    }
}

/// Binds the five parameters of a topic filter, in the order the statements number them.
fn bind_topics<'q>(
    query: Query<'q, sqlx::Postgres, PgArguments>,
    topics: &TopicFilter,
) -> Query<'q, sqlx::Postgres, PgArguments> {
    let (all, include_exact, include_prefixes, exclude_exact, exclude_prefixes) =
        topics.sql_parts();
    query
        .bind(all)
        .bind(include_exact)
        .bind(include_prefixes)
        .bind(exclude_exact)
        .bind(exclude_prefixes)
}

/// The stored events for the idempotency keys of `params`, in order (`None` where this
/// transaction cannot see the row). With a tenant column and keys unique across the table, a key
/// held by another tenant's event is an integrity error.
async fn stored_by_keys(
    db: exec::Db<'_>,
    conn: &mut PgConnection,
    table: &OutboxTable,
    statements: &Statements,
    params: &[EventInsertParams],
) -> Result<Vec<Option<OutboxEvent>>> {
    let keys: Vec<String> = params
        .iter()
        .filter_map(|p| p.idempotency_key.clone())
        .collect();
    let rows = sqlx::query(AssertSqlSafe(
        statements.event_get_by_idempotency_key.clone(),
    ))
    .bind(&keys)
    .persistent(db.persistent())
    .fetch_all(&mut *conn)
    .await
    .map_err(translate)?;
    let stored = rows
        .iter()
        .map(|r| decode(table, r))
        .collect::<Result<Vec<_>>>()?;
    let tenant = table.tenant_column();
    params
        .iter()
        .map(|p| {
            let key = p.idempotency_key.as_deref();
            let tenant_value = tenant.map(|t| {
                p.extra
                    .iter()
                    .find(|(c, _)| c == t)
                    .map_or(Value::Null, |(_, v)| v.to_json())
            });
            let same_key: Vec<&OutboxEvent> = stored.iter().filter(|e| e.idempotency_key.as_deref() == key).collect();
            let Some(tenant_column) = tenant else {
                return Ok(same_key.first().map(|e| (*e).clone()));
            };
            let tenant_value = tenant_value.unwrap_or(Value::Null);
            let own = same_key
                .iter()
                .find(|e| e.extra.get(tenant_column).unwrap_or(&Value::Null) == &tenant_value);
            match (own, same_key.first()) {
                (Some(event), _) => Ok(Some((*event).clone())),
                (None, Some(other)) if table.idempotency_scope() == IdempotencyScope::Table => Err(Error::Integrity {
                    message: format!(
                        "idempotency key {:?} is taken by an event of another tenant ({tenant_column} = {}); keys are unique across tenants in outbox table {table}",
                        key.unwrap_or_default(),
                        other.extra.get(tenant_column).unwrap_or(&Value::Null)
                    ),
                    source: "idempotency key held by another tenant".into(),
                }),
                _ => Ok(None),
            }
        })
        .collect()
}

/// NOTIFY inside the writing transaction (delivered by PostgreSQL at commit, never for a
/// rollback), one per topic; PostgreSQL folds repeats of one payload in a transaction into one.
async fn notify_in_transaction(
    db: exec::Db<'_>,
    conn: &mut PgConnection,
    channel: Option<&str>,
    topics: &[String],
) -> Result<()> {
    let Some(channel) = channel else {
        return Ok(());
    };
    if topics.is_empty() {
        return Ok(());
    }
    sqlx::query(include_str!("../queries/wakeup_notify.sql"))
        .bind(channel)
        .bind(topics)
        .persistent(db.persistent())
        .execute(&mut *conn)
        .await
        .map_err(translate)?;
    Ok(())
}

/// The error for a key whose conflicting row this transaction cannot see.
/// A delivery's record of an attempt as JSON text for a `jsonb` column: NUL, which `jsonb` cannot
/// hold, becomes U+FFFD in every string and key.
fn result_text(record: &Value) -> String {
    fn clean(value: &Value) -> Value {
        match value {
            Value::String(s) if s.contains('\0') => Value::String(s.replace('\0', "\u{FFFD}")),
            Value::Array(items) => Value::Array(items.iter().map(clean).collect()),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (k.replace('\0', "\u{FFFD}"), clean(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
    clean(record).to_string()
}

fn invisible_key(params: &EventInsertParams) -> Error {
    Error::TransactionRetry {
        message: format!(
            "idempotency key {:?} is taken by an event this transaction cannot see (committed after its snapshot)",
            params.idempotency_key.as_deref().unwrap_or_default()
        ),
        source: "idempotency key conflict".into(),
    }
}

/// Binds one extra value.
fn bind_extra<'q>(
    query: Query<'q, sqlx::Postgres, PgArguments>,
    value: &ExtraValue,
) -> Query<'q, sqlx::Postgres, PgArguments> {
    match value.clone() {
        ExtraValue::Null => query.bind(None::<String>),
        ExtraValue::BigInt(v) => query.bind(v),
        ExtraValue::Text(v) => query.bind(v),
        ExtraValue::Uuid(v) => query.bind(v),
        ExtraValue::Boolean(v) => query.bind(v),
        ExtraValue::Timestamp(v) => query.bind(v),
        ExtraValue::Json(v) => query.bind(v),
    }
}

/// Binds one array of extra values of `column_type` (NULL where a value is NULL).
fn bind_extra_array<'q, 'v>(
    query: Query<'q, sqlx::Postgres, PgArguments>,
    column_type: ColumnType,
    values: impl Iterator<Item = &'v ExtraValue>,
) -> Query<'q, sqlx::Postgres, PgArguments> {
    macro_rules! array {
        ($variant:ident) => {
            query.bind(
                values
                    .map(|v| match v {
                        ExtraValue::$variant(x) => Some(x.clone()),
                        _ => None,
                    })
                    .collect::<Vec<_>>(),
            )
        };
    }
    match column_type {
        ColumnType::BigInt => array!(BigInt),
        ColumnType::Text => array!(Text),
        ColumnType::Uuid => array!(Uuid),
        ColumnType::Boolean => array!(Boolean),
        ColumnType::Timestamp => array!(Timestamp),
        ColumnType::Json => array!(Json),
    }
}

/// Why a leased row cannot be delivered ([`StoredRow::problem`]), or `None`. A column that
/// cannot be read at all is left to [`decode`], which says why.
fn stored_row_problem(row: &PgRow) -> Option<String> {
    let id = row.try_get::<Option<Uuid>, _>("id").ok()?;
    let topic = row.try_get::<Option<String>, _>("topic").ok()?;
    let headers = row.try_get::<Option<Value>, _>("headers").ok()?;
    let attempts = row.try_get::<i32, _>("attempts").ok()?;
    let ordering_key = row.try_get::<Option<String>, _>("ordering_key").ok()?;
    StoredRow {
        id,
        topic: topic.as_deref(),
        headers: headers.as_ref(),
        attempts: i64::from(attempts),
        ordering_key: ordering_key.as_deref(),
    }
    .problem()
}

/// Decodes one row of [`sql::COLUMNS`] plus the table's extra columns into an event.
fn decode(table: &OutboxTable, row: &PgRow) -> Result<OutboxEvent> {
    let mut extra = Map::new();
    for column in table.columns() {
        let name = column.name();
        let value: ExtraValue = match column.column_type() {
            ColumnType::BigInt => row
                .try_get::<Option<i64>, _>(name)
                .map_err(translate)?
                .into(),
            ColumnType::Text => row
                .try_get::<Option<String>, _>(name)
                .map_err(translate)?
                .into(),
            ColumnType::Uuid => row
                .try_get::<Option<Uuid>, _>(name)
                .map_err(translate)?
                .into(),
            ColumnType::Boolean => row
                .try_get::<Option<bool>, _>(name)
                .map_err(translate)?
                .into(),
            ColumnType::Timestamp => row
                .try_get::<Option<DateTime<Utc>>, _>(name)
                .map_err(translate)?
                .into(),
            ColumnType::Json => row
                .try_get::<Option<Value>, _>(name)
                .map_err(translate)?
                .into(),
        };
        extra.insert(name.to_owned(), value.to_json());
    }
    let headers = match row.try_get::<Value, _>("headers").map_err(translate)? {
        Value::Object(map) => map,
        Value::Null => Map::new(),
        other => {
            let mut map = Map::new();
            map.insert("value".to_owned(), other);
            map
        }
    };
    Ok(OutboxEvent {
        sequence: row.try_get("sequence").map_err(translate)?,
        id: row.try_get("id").map_err(translate)?,
        topic: row.try_get("topic").map_err(translate)?,
        payload: row.try_get("payload").map_err(translate)?,
        headers,
        ordering_key: row.try_get("ordering_key").map_err(translate)?,
        idempotency_key: row.try_get("idempotency_key").map_err(translate)?,
        created_at: row.try_get("created_at").map_err(translate)?,
        attempts: row.try_get("attempts").map_err(translate)?,
        last_error: row.try_get("last_error").map_err(translate)?,
        next_attempt_at: row.try_get("next_attempt_at").map_err(translate)?,
        lease_until: row.try_get("lease_until").map_err(translate)?,
        leased_by: row.try_get("leased_by").map_err(translate)?,
        published_at: row.try_get("published_at").map_err(translate)?,
        dead_lettered_at: row.try_get("dead_lettered_at").map_err(translate)?,
        extra,
    })
}

/// Locks each ordering key of `keys` until the end of the current transaction
/// (`pg_advisory_xact_lock(hashtext(<table lock space>), hashtext(key))`), in hash order so that
/// two writers of several keys cannot deadlock on each other.
async fn lock_keys(
    db: exec::Db<'_>,
    conn: &mut PgConnection,
    table: &OutboxTable,
    keys: &[&str],
) -> Result<()> {
    let space = format!("hare_outbox.strict_key_order:{table}");
    sqlx::query(
        "SELECT pg_advisory_xact_lock(hashtext($1), h) \
         FROM (SELECT DISTINCT hashtext(k) AS h FROM unnest($2::text[]) AS k ORDER BY h) AS keys",
    )
    .bind(space)
    .bind(keys)
    .persistent(db.persistent())
    .execute(&mut *conn)
    .await
    .map_err(translate)?;
    Ok(())
}
