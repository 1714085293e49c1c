//! SQLite backend of hare-outbox: the outbox table's DDL and every statement enqueue and the relay
//! run, on [`sqlx`]'s SQLite driver (SQLite ≥ 3.35, bundled).
//!
//! SQLite has one writer at a time, so leasing needs no `SKIP LOCKED`: the lease runs in a
//! `BEGIN IMMEDIATE` transaction, which takes the write lock up front, and several relays (tasks or
//! processes) may share one database file. Timestamps are stored as UTC text in one fixed format
//! (`2026-01-31T23:59:59.123456Z`), payload and headers as JSON text, ids as hyphenated UUID text.
//! A schema-qualified [`OutboxTable`] (`billing.outbox`) names an attached database.
//!
//! Extra columns ([`ExtraColumn`](hare_outbox_core::ExtraColumn)) are stored as `INTEGER` (big
//! ints; booleans as 0/1) or `TEXT` (text; hyphenated UUIDs; timestamps in the format above; JSON
//! text); a foreign key must name a table of the outbox table's own database. Idempotency keys are
//! `UNIQUE` in the whole table (the column constraint every table had before scopes), per tenant
//! (`UNIQUE (tenant, idempotency_key)`), or not at all. `enqueue_many` writes one multi-row
//! `INSERT` per run of same-shape messages, split only past SQLite's 32766 bound parameters.
//! [`Outbox::begin`](hare_outbox_core::Outbox::begin) begins `BEGIN IMMEDIATE`: a second writer
//! waits for the first up to the busy timeout, then fails with
//! [`Error::TransactionRetry`].
//!
//! ```no_run
//! use hare_outbox_core::{Outbox, OutboxMessage, OutboxTable};
//! use hare_outbox_sqlite::{SqliteBackend, connect};
//!
//! # async fn example() -> hare_outbox_core::Result<()> {
//! let pool = connect("sqlite://app.db").await?;
//! let outbox = Outbox::new(SqliteBackend::new(pool.clone()), OutboxTable::default());
//! outbox.migrate().await?;
//!
//! let mut tx = pool.begin().await.map_err(hare_outbox_core::Error::database)?;
//! // … the business writes of the transaction …
//! outbox
//!     .enqueue(&mut tx, OutboxMessage::new("orders.created", serde_json::json!({"id": 22})))
//!     .await?;
//! tx.commit().await.map_err(hare_outbox_core::Error::database)?;
//! # Ok(()) }
//! ```

mod capture;
mod decode;
mod error;
mod inbox;
mod journal;
mod migrate;
mod sql;
mod views;

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use hare_outbox_core::backend::{
    Backend, BacklogParams, Capabilities, CaptureBackend, EventDeleteFinishedParams,
    EventGetParams, EventInsertParams, EventLeaseExtendParams, EventLeaseParams,
    EventMarkDeliveredParams, EventMarkFailedParams, EventReleaseParams,
    EventRetryDeadLetteredParams, FinishedState, InboxBackend, InboxDeleteOlderParams,
    InboxRecordParams, Inserted, JournalBackend, LeasedBatch, UnreadableRow,
};
use hare_outbox_core::{
    Backlog, Error, IdempotencyScope, MigrationStatus, MigrationStream, OutboxEvent, OutboxTable,
    Result, TopicFilter,
};
use serde_json::Value;
use sqlx::sqlite::{SqliteArguments, SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use sqlx::{AssertSqlSafe, Row, Sqlite, SqliteConnection, SqlitePool};

use crate::decode::{Bound, bound, parse_timestamp, timestamp};
use crate::error::map_err;
use crate::sql::Query;

/// How long a connection waits for another one's write lock before failing with
/// [`Error::TransactionRetry`]: 5 s.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The SQLite [`Backend`]: runs the outbox statements on a [`SqlitePool`].
///
/// Cheap to clone (the pool is shared). Enqueue writes through the caller's connection or
/// transaction (`&mut *tx`, a [`SqliteConnection`]); the relay's statements run on the pool, each
/// in its own short transaction. Build the pool with [`connect`] (WAL, busy timeout, foreign keys)
/// or bring your own; attach the databases of schema-qualified tables on every connection of it
/// (`SqlitePoolOptions::after_connect`).
#[derive(Clone, Debug)]
pub struct SqliteBackend {
    pool: SqlitePool,
    migrations: migrate::Migrations,
}

impl SqliteBackend {
    /// A backend on `pool`.
    pub fn new(pool: SqlitePool) -> Self {
        SqliteBackend {
            pool,
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

    /// The pool the relay's statements run on.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    async fn begin_immediate(&self) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>> {
        self.pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(map_err)
    }
}

/// Opens a pool on the SQLite database at `url` (`sqlite://path/to/file.db`, `sqlite:file.db`,
/// `sqlite::memory:`; URL parameters such as `?mode=ro` are honoured), creating the file if it is
/// missing, with the WAL journal, a busy timeout of [`BUSY_TIMEOUT`] (5 s) and foreign keys on.
/// The pool has sqlx's default size (10 connections).
///
/// # Errors
/// - [`Error::Configuration`] naming `url` when it cannot be parsed.
/// - [`Error::Database`] when the file cannot be opened or created (missing directory,
///   permissions).
pub async fn connect(url: &str) -> Result<SqlitePool> {
    let options = SqliteConnectOptions::from_str(url)
        .map_err(|e| Error::configuration(format!("SQLite URL {url:?} is not valid: {e}")))?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(BUSY_TIMEOUT)
        .foreign_keys(true);
    SqlitePoolOptions::new()
        .connect_with(options)
        .await
        .map_err(map_err)
}

/// A list of sequences as the JSON array `json_each` reads.
fn json_array(sequences: &[i64]) -> String {
    Value::from(sequences.to_vec()).to_string()
}

/// A list of strings as the JSON array `json_each` reads.
fn json_strings(values: Vec<String>) -> String {
    Value::from(values).to_string()
}

/// Binds one message's row of an insert: id, topic, payload, headers, ordering key, idempotency
/// key, `created_at`, then its extra values (in the table's order, as the core sorts them).
fn bind_message<'q>(
    query: sqlx::query::Query<'q, Sqlite, SqliteArguments>,
    params: &'q EventInsertParams,
    created_at: &'q str,
) -> sqlx::query::Query<'q, Sqlite, SqliteArguments> {
    let query = query
        .bind(params.id.hyphenated().to_string())
        .bind(params.topic.as_str())
        .bind(params.payload.to_string())
        .bind(Value::Object(params.headers.clone()).to_string())
        .bind(params.ordering_key.as_deref())
        .bind(params.idempotency_key.as_deref())
        .bind(created_at);
    params
        .extra
        .iter()
        .fold(query, |query, (_, value)| match bound(value) {
            Bound::Null => query.bind(None::<String>),
            Bound::Integer(n) => query.bind(n),
            Bound::Text(text) => query.bind(text),
        })
}

/// The extra columns a message sets, in the order they are bound.
fn extra_names(params: &EventInsertParams) -> Vec<&str> {
    params.extra.iter().map(|(name, _)| name.as_str()).collect()
}

/// The stored events for the idempotency keys of `params`, in order, read with one SELECT
/// (`None` for a message without a key, or whose key no event holds). With a tenant column and
/// keys unique across the table, a key held by another tenant's event is an
/// [`Error::Integrity`]; with keys unique per tenant, only the
/// message's own tenant's event counts.
async fn stored_by_keys(
    conn: &mut SqliteConnection,
    table: &OutboxTable,
    params: &[&EventInsertParams],
) -> Result<Vec<Option<OutboxEvent>>> {
    let keys: Vec<String> = params
        .iter()
        .filter_map(|p| p.idempotency_key.clone())
        .collect();
    if keys.is_empty() {
        return Ok(vec![None; params.len()]);
    }
    let rows = sqlx::query(AssertSqlSafe(
        Query::EventGetByIdempotencyKeys.render(table),
    ))
    .bind(json_strings(keys))
    .fetch_all(&mut *conn)
    .await
    .map_err(map_err)?;
    let stored = rows
        .iter()
        .map(|row| decode::event(table, row))
        .collect::<Result<Vec<_>>>()?;
    let tenant = table.tenant_column();
    params
        .iter()
        .map(|p| {
            let Some(key) = p.idempotency_key.as_deref() else {
                return Ok(None);
            };
            let mut same_key = stored
                .iter()
                .filter(|e| e.idempotency_key.as_deref() == Some(key));
            let Some(tenant_column) = tenant else {
                return Ok(same_key.next().cloned());
            };
            let tenant_value = p
                .extra
                .iter()
                .find(|(c, _)| c == tenant_column)
                .map_or(Value::Null, |(_, v)| v.to_json());
            let same_key: Vec<&OutboxEvent> = same_key.collect();
            let own = same_key
                .iter()
                .find(|e| e.extra.get(tenant_column).unwrap_or(&Value::Null) == &tenant_value);
            match (own, same_key.first()) {
                (Some(event), _) => Ok(Some((*event).clone())),
                (None, Some(other)) if table.idempotency_scope() == IdempotencyScope::Table => {
                    Err(Error::Integrity {
                        message: format!(
                            "idempotency key {key:?} is taken by an event of another tenant ({tenant_column} = {}); keys are unique across tenants in outbox table {table}",
                            other.extra.get(tenant_column).unwrap_or(&Value::Null)
                        ),
                        source: "idempotency key held by another tenant".into(),
                    })
                }
                _ => Ok(None),
            }
        })
        .collect()
}

/// The error for an insert that wrote nothing although no stored event holds its key. A writer
/// sees every committed row (SQLite refuses a write on a stale snapshot with `SQLITE_BUSY`), so
/// this means the table's constraints are not the ones this backend creates.
fn no_stored_event(table: &OutboxTable, params: &EventInsertParams) -> Error {
    Error::database(format!(
        "inserting event {} into {table} wrote no row, and no stored event holds its idempotency key {:?}",
        params.id,
        params.idempotency_key.as_deref().unwrap_or_default()
    ))
}

/// Binds the five parameters of a topic filter, in the order the statements number them: every
/// topic? (0/1), then the included names, included prefixes, excluded names and excluded
/// prefixes, each as a JSON array of strings.
fn bind_topics<'q>(
    query: sqlx::query::Query<'q, Sqlite, SqliteArguments>,
    topics: &TopicFilter,
) -> sqlx::query::Query<'q, Sqlite, SqliteArguments> {
    let (all, include_exact, include_prefixes, exclude_exact, exclude_prefixes) =
        topics.sql_parts();
    query
        .bind(all)
        .bind(json_strings(include_exact))
        .bind(json_strings(include_prefixes))
        .bind(json_strings(exclude_exact))
        .bind(json_strings(exclude_prefixes))
}

#[async_trait]
impl Backend for SqliteBackend {
    type Conn = SqliteConnection;
    type Transaction = sqlx::Transaction<'static, Sqlite>;

    fn capabilities(&self) -> Capabilities {
        Capabilities::new("sqlite")
    }

    /// Every version of the outbox migrations for an empty database, each with its record: the
    /// `CREATE TABLE IF NOT EXISTS` and `CREATE INDEX IF NOT EXISTS` statements of `table`,
    /// separated by `;`. With a schema, the table, its indexes and the record go to that attached
    /// database.
    ///
    /// Extra columns are in the `CREATE TABLE`; SQLite has no `ADD COLUMN IF NOT EXISTS`, so the
    /// ones missing from an existing table are added by [`Backend::migrate`], not by this text.
    /// A foreign key names its table without schema (SQLite keeps foreign keys within one
    /// database).
    fn schema_sql(&self, table: &OutboxTable) -> String {
        self.migration_sql(MigrationStream::Outbox, table, 0)
    }

    /// Applies each pending outbox version in a `BEGIN IMMEDIATE` transaction of its own with its
    /// record (concurrent migrates queue on the write lock), then adds the declared extra
    /// columns the table lacks (checked with `pragma_table_info`); idempotent.
    ///
    /// A `NOT NULL` extra column added to an existing table gets `CHECK (column IS NOT NULL)`
    /// instead (SQLite refuses `NOT NULL` without a default in `ADD COLUMN`); the check is tested
    /// against the stored rows (SQLite ≥ 3.37, as bundled), so adding it to a table with rows
    /// fails, as on PostgreSQL. The idempotency key's unique constraint of an existing table is
    /// kept as it is.
    ///
    /// # Errors
    /// [`Error::Configuration`] for a foreign key to a table of another database;
    /// [`Error::Migration`] when the record of applied migrations disagrees with this build;
    /// [`Error::Database`] when SQLite refuses the DDL (read-only file, unknown attached schema,
    /// a `NOT NULL` column added to a table with rows);
    /// [`Error::TransactionRetry`] when the write lock stays taken past the busy timeout.
    async fn migrate(&self, table: &OutboxTable) -> Result<()> {
        sql::check_references(table)?;
        migrate::run(
            &self.pool,
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
        migrate::status(&self.pool, self.migrations.of(stream), stream, table).await
    }

    /// Begins a `BEGIN IMMEDIATE` transaction on the pool: it takes the write lock at once,
    /// waiting up to the busy timeout ([`BUSY_TIMEOUT`] with [`connect`]) for another writer.
    ///
    /// An outbox transaction exists to write. A deferred one would take the write lock only at
    /// its first write; if it read first, that upgrade fails at once with `SQLITE_BUSY` (no busy
    /// wait) whenever another connection wrote in between, and two such transactions can each
    /// wait for the other. Taking the lock up front makes writers queue instead. Plain
    /// `pool.begin()` transactions passed to `enqueue` stay deferred, as the caller chose.
    ///
    /// # Errors
    /// [`Error::TransactionRetry`] when the write lock stays taken past the busy timeout;
    /// [`Error::Database`] when no connection can be had.
    async fn begin(&self) -> Result<Self::Transaction> {
        self.begin_immediate().await
    }

    async fn commit(&self, tx: Self::Transaction) -> Result<()> {
        tx.commit().await.map_err(map_err)
    }

    async fn rollback(&self, tx: Self::Transaction) -> Result<()> {
        tx.rollback().await.map_err(map_err)
    }

    async fn event_insert(
        &self,
        conn: &mut SqliteConnection,
        table: &OutboxTable,
        params: &EventInsertParams,
    ) -> Result<Inserted> {
        let created_at = timestamp(chrono::Utc::now());
        let sql = sql::event_insert(table, &extra_names(params));
        let inserted = bind_message(sqlx::query(AssertSqlSafe(sql)), params, &created_at)
            .fetch_optional(&mut *conn)
            .await
            .map_err(map_err)?;
        if let Some(row) = inserted {
            return Ok(Inserted {
                event: decode::event(table, &row)?,
                created: true,
            });
        }
        // ON CONFLICT DO NOTHING: only the idempotency key's conflict is swallowed; return the
        // event stored under it, unchanged.
        let event = stored_by_keys(conn, table, &[params])
            .await?
            .pop()
            .flatten()
            .ok_or_else(|| no_stored_event(table, params))?;
        Ok(Inserted {
            event,
            created: false,
        })
    }

    /// Inserts the events in one savepoint of `conn`'s transaction (a transaction of its own on
    /// a connection outside one): one multi-row `INSERT … VALUES (…), (…)` per run of
    /// consecutive same-shape messages, split into chunks only when a run's parameters exceed
    /// SQLite's limit of 32766; then one SELECT for every key that was stored or repeated.
    ///
    /// # Errors
    /// As [`Backend::event_insert`]; on an error the savepoint is rolled back, nothing of this
    /// call stays, and the caller's transaction goes on.
    async fn event_insert_many(
        &self,
        conn: &mut SqliteConnection,
        table: &OutboxTable,
        params: &[EventInsertParams],
    ) -> Result<Vec<Inserted>> {
        let created_at = timestamp(chrono::Utc::now());
        // A savepoint inside the caller's transaction (or a transaction of its own): an error
        // returns before the commit below, and dropping it rolls back everything of this call.
        let mut savepoint = sqlx::Connection::begin(&mut *conn).await.map_err(map_err)?;
        let mut results: Vec<Option<Inserted>> = vec![None; params.len()];
        let mut start = 0;
        while start < params.len() {
            let shape = params[start].shape();
            let end = (start..params.len())
                .find(|&i| params[i].shape() != shape)
                .unwrap_or(params.len());
            let extra = extra_names(&params[start]);
            let per_insert = sql::rows_per_insert(extra.len());
            for (n, chunk) in params[start..end].chunks(per_insert).enumerate() {
                let first = start + n * per_insert;
                // Not cached: the text differs with the number of rows.
                let query = sqlx::query(AssertSqlSafe(sql::event_insert_many(
                    table,
                    &extra,
                    chunk.len(),
                )))
                .persistent(false);
                let rows = chunk
                    .iter()
                    .fold(query, |query, p| bind_message(query, p, &created_at))
                    .fetch_all(&mut *savepoint)
                    .await
                    .map_err(map_err)?;
                // RETURNING order is not guaranteed: match the rows to the messages by id.
                let mut by_id = std::collections::HashMap::with_capacity(rows.len());
                for row in &rows {
                    let event = decode::event(table, row)?;
                    by_id.insert(event.id, event);
                }
                for (offset, p) in chunk.iter().enumerate() {
                    if let Some(event) = by_id.remove(&p.id) {
                        results[first + offset] = Some(Inserted {
                            event,
                            created: true,
                        });
                    }
                }
            }
            start = end;
        }
        // Stored and repeated keys: one SELECT for all of them.
        let missing: Vec<usize> = (0..params.len())
            .filter(|&i| results[i].is_none())
            .collect();
        if !missing.is_empty() {
            let wanted: Vec<&EventInsertParams> = missing.iter().map(|&i| &params[i]).collect();
            let stored = stored_by_keys(&mut savepoint, table, &wanted).await?;
            for (&i, event) in missing.iter().zip(stored) {
                let event = event.ok_or_else(|| no_stored_event(table, &params[i]))?;
                results[i] = Some(Inserted {
                    event,
                    created: false,
                });
            }
        }
        savepoint.commit().await.map_err(map_err)?;
        results
            .into_iter()
            .zip(params)
            .map(|(r, p)| r.ok_or_else(|| no_stored_event(table, p)))
            .collect()
    }

    /// The lease of `event_lease.sql` in a `BEGIN IMMEDIATE` transaction; SQLite has one
    /// clock, the local one, used when the params carry none.
    async fn event_lease(
        &self,
        table: &OutboxTable,
        params: &EventLeaseParams,
    ) -> Result<LeasedBatch> {
        let now = params.now.unwrap_or_else(chrono::Utc::now);
        let lease_until =
            now + chrono::Duration::from_std(params.lease).unwrap_or(chrono::Duration::MAX);
        let sql = sql::event_lease(
            table,
            params.limit,
            params.max_events_per_key,
            params.min_keys,
        );
        let mut tx = self.begin_immediate().await?;
        let query = sqlx::query(AssertSqlSafe(sql))
            .bind(timestamp(now))
            .bind(timestamp(lease_until))
            .bind(&params.leased_by)
            .bind(&params.key_cursor);
        let rows = bind_topics(query, &params.topics)
            .fetch_all(&mut *tx)
            .await
            .map_err(map_err)?;
        // Decoded before COMMIT. A row that cannot be read (SQLite stores any text, and any
        // program may write the table), or that holds what the library never writes (headers
        // that are not an object, negative attempts, a nil id, …), is handed to the core, which
        // dead-letters it with the reason.
        let mut events = Vec::with_capacity(rows.len());
        let mut unreadable = Vec::new();
        let mut keys: Vec<String> = Vec::new();
        for row in &rows {
            let key = row
                .try_get::<Option<String>, _>("ordering_key")
                .ok()
                .flatten();
            if let Some(key) = &key {
                keys.push(key.clone());
            }
            let refused = match decode::stored_row_problem(row) {
                Some(reason) => Err(reason),
                None => decode::event(table, row)
                    .map_err(|error| format!("the stored event cannot be read: {error}")),
            };
            match refused {
                Ok(event) => events.push(event),
                Err(reason) => unreadable.push(UnreadableRow::new(
                    row.try_get("sequence").map_err(map_err)?,
                    row.try_get("attempts").map_err(map_err)?,
                    key,
                    reason,
                )),
            }
        }
        tx.commit().await.map_err(map_err)?;
        // The walk visits keys in BINARY (byte) order from the cursor, wrapping around once:
        // the last key it leased is the greatest past the cursor, else the greatest before it.
        let cursor = params.key_cursor.as_str();
        let key_cursor = keys
            .iter()
            .filter(|k| k.as_str() > cursor)
            .max()
            .or_else(|| keys.iter().max())
            .cloned();
        Ok(LeasedBatch::new(events, key_cursor).with_unreadable(unreadable))
    }

    async fn event_lease_release(
        &self,
        table: &OutboxTable,
        params: &EventReleaseParams,
    ) -> Result<u64> {
        if params.sequences.is_empty() {
            return Ok(0);
        }
        let done = sqlx::query(AssertSqlSafe(Query::EventLeaseRelease.render(table)))
            .bind(json_array(&params.sequences))
            .bind(&params.leased_by)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(done.rows_affected())
    }

    async fn event_lease_extend(
        &self,
        table: &OutboxTable,
        params: &EventLeaseExtendParams,
    ) -> Result<u64> {
        if params.sequences.is_empty() {
            return Ok(0);
        }
        let until = params.now.unwrap_or_else(chrono::Utc::now)
            + chrono::Duration::from_std(params.lease).unwrap_or(chrono::Duration::MAX);
        let done = sqlx::query(AssertSqlSafe(Query::EventLeaseExtend.render(table)))
            .bind(timestamp(until))
            .bind(json_array(&params.sequences))
            .bind(&params.leased_by)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(done.rows_affected())
    }

    async fn event_mark_delivered(
        &self,
        table: &OutboxTable,
        params: &EventMarkDeliveredParams,
    ) -> Result<u64> {
        if params.sequences.is_empty() {
            return Ok(0);
        }
        let now = params.now.unwrap_or_else(chrono::Utc::now);
        if let Some(column) = &params.result_column {
            // One row at a time, in one transaction: each row gets its own record.
            let sql = sql::with_result_column(Query::EventMarkDeliveredResult, table, column);
            let mut tx = self.begin_immediate().await?;
            let mut changed = 0;
            for (i, sequence) in params.sequences.iter().enumerate() {
                let record = params.results.get(i).cloned().flatten();
                let done = sqlx::query(AssertSqlSafe(&*sql))
                    .bind(timestamp(now))
                    .bind(sequence)
                    .bind(record.map(|v| v.to_string()))
                    .execute(&mut *tx)
                    .await
                    .map_err(map_err)?;
                changed += done.rows_affected();
            }
            tx.commit().await.map_err(map_err)?;
            return Ok(changed);
        }
        let done = sqlx::query(AssertSqlSafe(Query::EventMarkDelivered.render(table)))
            .bind(timestamp(now))
            .bind(json_array(&params.sequences))
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(done.rows_affected())
    }

    async fn event_mark_failed(
        &self,
        table: &OutboxTable,
        params: &EventMarkFailedParams,
    ) -> Result<u64> {
        if params.failures.is_empty() {
            return Ok(0);
        }
        let sql = match &params.result_column {
            Some(column) => sql::with_result_column(Query::EventMarkFailedResult, table, column),
            None => Query::EventMarkFailed.render(table),
        };
        let now = params.now.unwrap_or_else(chrono::Utc::now);
        let mut tx = self.begin_immediate().await?;
        let mut changed = 0;
        for failure in &params.failures {
            let next = failure.retry_in.map(|d| {
                timestamp(now + chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX))
            });
            let dead = failure.retry_in.is_none().then(|| timestamp(now));
            let mut query = sqlx::query(AssertSqlSafe(&*sql))
                .bind(failure.attempts)
                .bind(&failure.error)
                .bind(next)
                .bind(dead)
                .bind(failure.sequence)
                .bind(&params.leased_by);
            if params.result_column.is_some() {
                query = query.bind(failure.result.as_ref().map(|v| v.to_string()));
            }
            let done = query.execute(&mut *tx).await.map_err(map_err)?;
            changed += done.rows_affected();
        }
        tx.commit().await.map_err(map_err)?;
        Ok(changed)
    }

    async fn event_list_pending_on(
        &self,
        conn: &mut SqliteConnection,
        table: &OutboxTable,
        params: &hare_outbox_core::backend::EventListPendingParams,
    ) -> Result<Vec<OutboxEvent>> {
        let rows = sqlx::query(AssertSqlSafe(Query::EventListPending.render(table)))
            .bind(i64::from(params.limit))
            .fetch_all(&mut *conn)
            .await
            .map_err(map_err)?;
        rows.iter().map(|row| decode::event(table, row)).collect()
    }

    async fn event_get(
        &self,
        table: &OutboxTable,
        params: &EventGetParams,
    ) -> Result<Option<OutboxEvent>> {
        let row = sqlx::query(AssertSqlSafe(Query::EventGet.render(table)))
            .bind(params.id.hyphenated().to_string())
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        row.as_ref()
            .map(|row| decode::event(table, row))
            .transpose()
    }

    /// Counts pending events (neither published nor dead-lettered), the age of the oldest against
    /// `params.now` (0 when none, never negative) and dead letters.
    ///
    /// # Errors
    /// [`Error::Database`] when the query fails or `created_at` is not a timestamp.
    async fn backlog(&self, table: &OutboxTable, params: &BacklogParams) -> Result<Backlog> {
        let query = sqlx::query(AssertSqlSafe(Query::Backlog.render(table)));
        let row = bind_topics(query, &params.topics)
            .fetch_one(&self.pool)
            .await
            .map_err(map_err)?;
        let oldest = row
            .try_get::<Option<String>, _>("oldest_pending")
            .map_err(map_err)?
            .map(|text| {
                parse_timestamp(&text).ok_or_else(|| {
                    Error::database(format!(
                        "outbox column created_at: {text:?} is not a timestamp"
                    ))
                })
            })
            .transpose()?;
        Ok(Backlog {
            pending: row.try_get("pending").map_err(map_err)?,
            oldest_pending_age_seconds: oldest
                .map(|t| (params.now - t).as_seconds_f64().max(0.0))
                .unwrap_or(0.0),
            dead_lettered: row.try_get("dead_lettered").map_err(map_err)?,
        })
    }
}

#[async_trait]
impl JournalBackend for SqliteBackend {
    /// One page of the journal: keyset pagination on `sequence` (the rowid), so a page deep in
    /// the table costs what the first one does. A status is judged at the database's clock
    /// (`strftime('now')`), exactly as [`OutboxEvent::status`] does; the object filter reads the
    /// payload's `model` and `pk` and the author filter the `author` header, with SQLite's JSON
    /// functions. Every filter value is bound as a parameter.
    ///
    /// The object and author filters test rows newest first until the page is full: fast while
    /// matches are common, a scan of the table when they are rare (the history of one object;
    /// BENCHMARKS.md § Journal pages). SQLite plans a statement once for every binding, so an
    /// expression index could not serve these optional filters; none is created.
    ///
    /// # Errors
    /// [`Error::Database`] when the query fails or a row cannot be decoded.
    async fn event_list(
        &self,
        table: &OutboxTable,
        query: &hare_outbox_core::journal::EventQuery,
    ) -> Result<Vec<OutboxEvent>> {
        journal::list(&self.pool, table, query).await
    }

    /// The timeline of `params`, in two statements read in one transaction: the counts (one
    /// pass over the table, there being no index on `created_at`) and, per bucket, only the
    /// latency ranks the percentiles need (interpolated as PostgreSQL's `percentile_cont`).
    /// Bucket edges are whole microseconds, the resolution timestamps are stored with; the last
    /// bucket ends at `until`.
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
        journal::timeline(&self.pool, table, params).await
    }

    /// Returns matching dead letters to the queue in one statement; `ids: None` matches any id.
    ///
    /// # Errors
    /// [`Error::TransactionRetry`] when the write lock stays taken past the busy timeout;
    /// [`Error::Database`] otherwise.
    async fn event_retry_dead_lettered(
        &self,
        table: &OutboxTable,
        params: &EventRetryDeadLetteredParams,
    ) -> Result<u64> {
        let ids = params
            .ids
            .as_ref()
            .map(|ids| json_strings(ids.iter().map(|id| id.hyphenated().to_string()).collect()));
        let query =
            sqlx::query(AssertSqlSafe(Query::EventRetryDeadLettered.render(table))).bind(ids);
        let done = bind_topics(query, &params.topics)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(done.rows_affected())
    }

    /// Deletes one batch of at most `limit` finished events, oldest first, in one short
    /// statement (the write lock is held only while it runs).
    ///
    /// # Errors
    /// [`Error::TransactionRetry`] when the write lock stays taken past the busy timeout;
    /// [`Error::Database`] otherwise.
    async fn event_delete_finished(
        &self,
        table: &OutboxTable,
        params: &EventDeleteFinishedParams,
    ) -> Result<u64> {
        let sql = match params.state {
            FinishedState::Published => Query::EventDeletePublished,
            FinishedState::DeadLettered => Query::EventDeleteDeadLettered,
        }
        .render(table);
        let query = sqlx::query(AssertSqlSafe(sql))
            .bind(timestamp(params.before))
            .bind(params.limit);
        let done = bind_topics(query, &params.topics)
            .execute(&self.pool)
            .await
            .map_err(map_err)?;
        Ok(done.rows_affected())
    }

    // The operator's views (src/views.rs).

    async fn event_neighbours(
        &self,
        table: &OutboxTable,
        params: &hare_outbox_core::backend::EventNeighboursParams,
    ) -> Result<hare_outbox_core::backend::EventNeighbours> {
        views::neighbours(&self.pool, table, params).await
    }

    async fn key_held_list(
        &self,
        table: &OutboxTable,
        params: &hare_outbox_core::backend::KeyHeldListParams,
    ) -> Result<hare_outbox_core::backend::HeldKeyPage> {
        views::held_keys(&self.pool, table, params).await
    }

    async fn key_head_update(
        &self,
        table: &OutboxTable,
        params: &hare_outbox_core::backend::KeyHeadParams,
    ) -> Result<u64> {
        views::key_head(&self.pool, table, params).await
    }

    async fn topic_stats_list(
        &self,
        table: &OutboxTable,
        params: &hare_outbox_core::backend::TopicStatsParams,
    ) -> Result<Vec<hare_outbox_core::backend::TopicStats>> {
        views::topic_stats(&self.pool, table, params).await
    }

    async fn relay_lease_list(
        &self,
        table: &OutboxTable,
        params: &hare_outbox_core::backend::RelayLeaseListParams,
    ) -> Result<Vec<hare_outbox_core::backend::RelayLeases>> {
        views::relay_leases(&self.pool, table, params).await
    }
}

#[async_trait]
impl CaptureBackend for SqliteBackend {
    async fn capture_install(
        &self,
        table: &OutboxTable,
        params: &hare_outbox_core::backend::CaptureInstallParams,
    ) -> Result<()> {
        capture::install(&self.pool, table, params).await
    }

    async fn capture_uninstall(
        &self,
        table: &OutboxTable,
        params: &hare_outbox_core::backend::CaptureUninstallParams,
    ) -> Result<bool> {
        capture::uninstall(&self.pool, table, params).await
    }

    async fn capture_status(
        &self,
        table: &OutboxTable,
    ) -> Result<Vec<hare_outbox_core::capture::CaptureStatus>> {
        capture::status(&self.pool, table).await
    }

    async fn context_set(
        &self,
        conn: &mut SqliteConnection,
        table: &OutboxTable,
        params: &hare_outbox_core::backend::ContextSetParams,
    ) -> Result<()> {
        capture::context_set(conn, table, params).await
    }

    fn in_transaction(&self, conn: &SqliteConnection) -> bool {
        sqlx::Connection::is_in_transaction(conn)
    }
}

#[async_trait]
impl InboxBackend for SqliteBackend {
    fn inbox_schema_sql(&self, table: &OutboxTable) -> String {
        self.migration_sql(MigrationStream::Inbox, table, 0)
    }

    async fn inbox_migrate(&self, table: &OutboxTable) -> Result<()> {
        migrate::run(
            &self.pool,
            self.migrations.inbox,
            MigrationStream::Inbox,
            table,
        )
        .await
    }

    async fn inbox_record(
        &self,
        conn: &mut SqliteConnection,
        table: &OutboxTable,
        params: &InboxRecordParams,
    ) -> Result<bool> {
        inbox::record(conn, table, &params.consumer, params.event_id).await
    }

    async fn inbox_delete_older(
        &self,
        table: &OutboxTable,
        params: &InboxDeleteOlderParams,
    ) -> Result<u64> {
        inbox::delete_older(&self.pool, table, params.before, params.limit).await
    }
}
