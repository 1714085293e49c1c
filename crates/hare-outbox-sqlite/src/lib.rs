//! SQLite backend of hare-outbox: the outbox table's DDL and every statement enqueue and the relay
//! run, on [`sqlx`]'s SQLite driver (SQLite ≥ 3.35, bundled).
//!
//! SQLite has one writer at a time, so leasing needs no `SKIP LOCKED`: the lease runs in a
//! `BEGIN IMMEDIATE` transaction, which takes the write lock up front, and several relays (tasks or
//! processes) may share one database file. Timestamps are stored as UTC text in one fixed format
//! (`2026-01-31T23:59:59.123456Z`), payload and headers as JSON text, ids as hyphenated UUID text.
//! A schema-qualified [`OutboxTable`] (`billing.outbox`) names an attached database.
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

mod decode;
mod error;
mod sql;

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use hare_outbox_core::backend::{
    BacklogParams, EventDeleteFinishedParams, EventInsertParams, EventLeaseExtendParams,
    EventLeaseParams, EventMarkDeliveredParams, EventMarkFailedParams,
    EventRetryDeadLetteredParams, FinishedState,
};
use hare_outbox_core::{Backend, Backlog, Error, OutboxEvent, OutboxTable, Result, TopicFilter};
use serde_json::Value;
use sqlx::sqlite::{SqliteArguments, SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use sqlx::{AssertSqlSafe, Row, Sqlite, SqliteConnection, SqlitePool};
use uuid::Uuid;

use crate::decode::{parse_timestamp, timestamp};
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
}

impl SqliteBackend {
    /// A backend on `pool`.
    pub fn new(pool: SqlitePool) -> Self {
        SqliteBackend { pool }
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

    fn name(&self) -> &'static str {
        "sqlite"
    }

    /// The `CREATE TABLE IF NOT EXISTS` and `CREATE INDEX IF NOT EXISTS` statements of `table`,
    /// separated by `;`. With a schema, the table and its indexes go to that attached database.
    fn schema_sql(&self, table: &OutboxTable) -> String {
        Query::Schema.render(table)
    }

    /// Runs [`Backend::schema_sql`] in one `BEGIN IMMEDIATE` transaction; idempotent.
    ///
    /// # Errors
    /// [`Error::Database`] when SQLite refuses the DDL (read-only file, unknown attached schema);
    /// [`Error::TransactionRetry`] when the write lock stays taken past the busy timeout.
    async fn migrate(&self, table: &OutboxTable) -> Result<()> {
        let mut tx = self.begin_immediate().await?;
        sqlx::raw_sql(AssertSqlSafe(self.schema_sql(table)))
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        tx.commit().await.map_err(map_err)
    }

    async fn event_insert(
        &self,
        conn: &mut SqliteConnection,
        table: &OutboxTable,
        params: &EventInsertParams,
    ) -> Result<OutboxEvent> {
        let payload = params.payload.to_string();
        let headers = Value::Object(params.headers.clone()).to_string();
        let inserted = sqlx::query(AssertSqlSafe(Query::EventInsert.render(table)))
            .bind(params.id.hyphenated().to_string())
            .bind(&params.topic)
            .bind(payload)
            .bind(headers)
            .bind(params.ordering_key.as_deref())
            .bind(params.idempotency_key.as_deref())
            .bind(timestamp(chrono::Utc::now()))
            .fetch_optional(&mut *conn)
            .await
            .map_err(map_err)?;
        if let Some(row) = inserted {
            return decode::event(&row);
        }
        // Nothing inserted: only the idempotency key's conflict is swallowed; return its event.
        let Some(key) = params.idempotency_key.as_deref() else {
            return Err(Error::database(format!(
                "inserting event {} into {table} returned no row",
                params.id
            )));
        };
        let stored = sqlx::query(AssertSqlSafe(Query::EventGetByIdempotencyKey.render(table)))
            .bind(key)
            .fetch_optional(&mut *conn)
            .await
            .map_err(map_err)?;
        match stored {
            Some(row) => decode::event(&row),
            None => Err(Error::database(format!(
                "idempotency key {key:?} conflicted in {table} but no event holds it"
            ))),
        }
    }

    async fn event_lease(
        &self,
        table: &OutboxTable,
        params: &EventLeaseParams,
    ) -> Result<Vec<OutboxEvent>> {
        let mut tx = self.begin_immediate().await?;
        let query = sqlx::query(AssertSqlSafe(Query::EventLease.render(table)))
            .bind(timestamp(params.now))
            .bind(timestamp(params.lease_until))
            .bind(&params.leased_by)
            .bind(params.limit);
        let rows = bind_topics(query, &params.topics)
            .fetch_all(&mut *tx)
            .await
            .map_err(map_err)?;
        // Decoded before COMMIT: a row that cannot be read leaves nothing leased.
        let mut events = rows.iter().map(decode::event).collect::<Result<Vec<_>>>()?;
        tx.commit().await.map_err(map_err)?;
        events.sort_by_key(|event| event.sequence);
        Ok(events)
    }

    async fn event_lease_extend(
        &self,
        table: &OutboxTable,
        params: &EventLeaseExtendParams,
    ) -> Result<u64> {
        if params.sequences.is_empty() {
            return Ok(0);
        }
        let done = sqlx::query(AssertSqlSafe(Query::EventLeaseExtend.render(table)))
            .bind(timestamp(params.lease_until))
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
        let done = sqlx::query(AssertSqlSafe(Query::EventMarkDelivered.render(table)))
            .bind(timestamp(params.now))
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
        let sql = Query::EventMarkFailed.render(table);
        let mut tx = self.begin_immediate().await?;
        let mut changed = 0;
        for failure in &params.failures {
            let done = sqlx::query(AssertSqlSafe(sql.as_str()))
                .bind(failure.attempts)
                .bind(&failure.error)
                .bind(failure.next_attempt_at.map(timestamp))
                .bind(failure.dead_lettered_at.map(timestamp))
                .bind(failure.sequence)
                .bind(&params.leased_by)
                .execute(&mut *tx)
                .await
                .map_err(map_err)?;
            changed += done.rows_affected();
        }
        tx.commit().await.map_err(map_err)?;
        Ok(changed)
    }

    async fn event_get(&self, table: &OutboxTable, id: Uuid) -> Result<Option<OutboxEvent>> {
        let row = sqlx::query(AssertSqlSafe(Query::EventGet.render(table)))
            .bind(id.hyphenated().to_string())
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        row.as_ref().map(decode::event).transpose()
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
