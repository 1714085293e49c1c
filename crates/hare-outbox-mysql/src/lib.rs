//! MySQL and MariaDB backend of hare-outbox: the outbox table's DDL, enqueue and the relay's
//! lease and mark statements, on [`sqlx`]'s MySQL driver.
//!
//! | | |
//! |---|---|
//! | versions | MySQL ≥ 8.0, MariaDB ≥ 10.6 (`migrate` refuses older servers, naming them); tested on MariaDB 10.11 |
//! | leasing | `FOR UPDATE SKIP LOCKED` in a `READ COMMITTED` transaction: several relays share one table |
//! | payload, headers | `JSON` (`LONGTEXT` with a validity check on MariaDB) |
//! | ids | `BINARY(16)` |
//! | times | `DATETIME(6)` in UTC |
//!
//! MySQL has no partial indexes: the stored generated columns `pending` and `undelivered` lead the
//! relay's indexes, so a lease reads only rows still to deliver, one index probe per ordering key
//! (see [`Backend::event_lease`]). Idempotency uses a plain `INSERT`: a taken key fails on its own
//! unique index and the stored event is read back (with a locking read, which waits for a writer
//! of the same key that has not committed yet); any other unique violation stays an
//! [`Error::Integrity`]. Deadlocks (1213) and lock wait timeouts (1205) are
//! [`Error::TransactionRetry`]. There is no LISTEN/NOTIFY: wake a relay in-process or through a
//! broker.
//!
//! Change capture installs `AFTER INSERT|UPDATE|DELETE` triggers generated from
//! `information_schema`. MySQL and MariaDB do not fire triggers for rows changed by cascading
//! foreign-key actions (`ON DELETE CASCADE`, `SET NULL`, `ON UPDATE CASCADE`): such changes are
//! not captured, only the statement's own rows are. The transaction's context
//! (`Outbox::set_context`) is a row of `hare_outbox_context` keyed by `CONNECTION_ID()`, written
//! in the transaction and taken by the triggers only within that same transaction (the
//! session's count of `BEGIN`, `COMMIT` and `ROLLBACK` statements is stored with it); the table
//! is created by the first capture install. JSON forms and details: the `capture` module's
//! source documentation.
//!
//! Text that is compared or sorted (topics, keys, relay names) uses `utf8mb4_bin`, whose order is
//! the byte order Rust strings sort in; it is a `PAD SPACE` collation, so two keys that differ
//! only by trailing spaces count as one key.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use hare_outbox_core::{Outbox, OutboxMessage, OutboxTable};
//! use hare_outbox_mysql::MySqlBackend;
//!
//! let pool = hare_outbox_mysql::connect("mysql://root@127.0.0.1/app").await?;
//! let outbox = Outbox::new(MySqlBackend::new(pool.clone()), OutboxTable::parse("outbox")?);
//! outbox.migrate().await?;
//! let mut tx = pool.begin().await?;
//! outbox.enqueue(&mut *tx, OutboxMessage::new("billing.invoice.paid", serde_json::json!({"id": 7}))).await?;
//! tx.commit().await?;
//! # Ok(()) }
//! ```

mod capture;
mod decode;
mod error;
mod inbox;
mod journal;
mod lease;
mod migrate;
mod sql;
mod views;

use std::collections::HashMap;
use std::str::FromStr;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use hare_outbox_core::backend::{
    Backend, BacklogParams, Capabilities, CaptureBackend, EventDeleteFinishedParams,
    EventGetParams, EventInsertParams, EventLeaseExtendParams, EventLeaseParams,
    EventMarkDeliveredParams, EventMarkFailedParams, EventReleaseParams,
    EventRetryDeadLetteredParams, FinishedState, InboxBackend, InboxDeleteOlderParams,
    InboxRecordParams, Inserted, JournalBackend, LeasedBatch,
};
use hare_outbox_core::{
    Backlog, Error, ExtraValue, IdempotencyScope, MigrationStatus, MigrationStream, OutboxEvent,
    OutboxTable, Result, TopicFilter,
};
use serde_json::Value;
use sqlx::mysql::{MySql, MySqlArguments, MySqlConnectOptions, MySqlConnection, MySqlPool};
use sqlx::query::Query;
use sqlx::{AssertSqlSafe, Connection};

pub use error::translate;
pub use migrate::{MIN_MARIADB, MIN_MYSQL};

use crate::error::{DUP_ENTRY, number};
use crate::sql::{placeholders, render_table, statement};

/// The MySQL / MariaDB backend: a pool for the relay's statements; enqueue uses the caller's
/// connection (`&mut MySqlConnection`, e.g. `&mut *tx`).
///
/// Cheap to clone (the pool is shared). The relay takes one connection per statement, briefly;
/// a pool of 2 to 5 connections per relay is plenty.
#[derive(Debug, Clone)]
pub struct MySqlBackend {
    pool: MySqlPool,
    migrations: migrate::Migrations,
    /// Whether the server takes `INSERT … RETURNING` (MariaDB ≥ 10.5), probed once on first
    /// enqueue.
    returning: std::sync::Arc<std::sync::OnceLock<bool>>,
}

/// Opens a pool on the MySQL or MariaDB server at `url` (`mysql://user:password@host:3306/db`;
/// a `mariadb://` URL is read as `mysql://`), with sqlx's default pool size (10 connections).
///
/// # Errors
/// - [`Error::Configuration`] naming `url` when it cannot be parsed.
/// - [`Error::Database`] when the server cannot be reached or refuses the login.
pub async fn connect(url: &str) -> Result<MySqlPool> {
    let options = connect_options(url)?;
    MySqlPool::connect_with(options).await.map_err(translate)
}

/// The connect options of `url` (`mysql://…` or `mariadb://…`).
///
/// # Errors
/// [`Error::Configuration`] naming `url` when it cannot be parsed.
pub fn connect_options(url: &str) -> Result<MySqlConnectOptions> {
    let url_text = match url.strip_prefix("mariadb://") {
        Some(rest) => format!("mysql://{rest}"),
        None => url.to_owned(),
    };
    MySqlConnectOptions::from_str(&url_text)
        .map_err(|e| Error::configuration(format!("MySQL URL {url:?} is not valid: {e}")))
}

impl MySqlBackend {
    /// A backend over `pool`.
    pub fn new(pool: MySqlPool) -> Self {
        MySqlBackend {
            pool,
            migrations: migrate::Migrations::default(),
            returning: std::sync::Arc::default(),
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

    /// Inserts without `RETURNING`, reading the rows back by id as on MySQL, whatever the
    /// server: for tests of the MySQL path on MariaDB. Not a stable interface.
    #[doc(hidden)]
    pub fn without_insert_returning(self) -> Self {
        let returning = std::sync::OnceLock::new();
        let _ = returning.set(false);
        MySqlBackend {
            returning: std::sync::Arc::new(returning),
            ..self
        }
    }

    /// The pool the relay's statements run on.
    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }
}

/// Binds the five parameters of a topic filter, in the order the statements write them: every
/// topic? (0/1), then the included names, included prefixes, excluded names and excluded
/// prefixes, each as a JSON array of strings.
pub(crate) fn bind_topics<'q>(
    query: Query<'q, MySql, MySqlArguments>,
    topics: &TopicFilter,
) -> Query<'q, MySql, MySqlArguments> {
    let (all, include_exact, include_prefixes, exclude_exact, exclude_prefixes) =
        topics.sql_parts();
    query
        .bind(all)
        .bind(Value::from(include_exact).to_string())
        .bind(Value::from(include_prefixes).to_string())
        .bind(Value::from(exclude_exact).to_string())
        .bind(Value::from(exclude_prefixes).to_string())
}

/// Binds one extra value in its stored form.
fn bind_extra<'q>(
    query: Query<'q, MySql, MySqlArguments>,
    value: &ExtraValue,
) -> Query<'q, MySql, MySqlArguments> {
    match value.clone() {
        ExtraValue::Null => query.bind(None::<String>),
        ExtraValue::BigInt(v) => query.bind(v),
        ExtraValue::Text(v) => query.bind(v),
        ExtraValue::Uuid(v) => query.bind(v),
        ExtraValue::Boolean(v) => query.bind(v),
        ExtraValue::Timestamp(v) => query.bind(v),
        ExtraValue::Json(v) => query.bind(v.to_string()),
    }
}

/// Binds one message's row of an insert: id, topic, payload, headers, ordering key,
/// idempotency key, then its extra values.
fn bind_message<'q>(
    query: Query<'q, MySql, MySqlArguments>,
    params: &EventInsertParams,
) -> Query<'q, MySql, MySqlArguments> {
    let query = query
        .bind(params.id)
        .bind(params.topic.clone())
        .bind(params.payload.to_string())
        .bind(Value::Object(params.headers.clone()).to_string())
        .bind(params.ordering_key.clone())
        .bind(params.idempotency_key.clone());
    params
        .extra
        .iter()
        .fold(query, |query, (_, value)| bind_extra(query, value))
}

/// Whether `error` is a duplicate of the table's idempotency key (not of its id, nor of a user's
/// own unique index): MySQL names the index in the message (`… for key 'outbox_idempotency_key_key'`,
/// `'outbox.outbox_idempotency_key_key'` on MySQL ≥ 8.0.19).
fn taken_key(error: &sqlx::Error, table: &OutboxTable) -> bool {
    let Some(index) = sql::idempotency_index(table) else {
        return false;
    };
    if number(error) != Some(DUP_ENTRY) {
        return false;
    }
    match error {
        sqlx::Error::Database(db) => {
            let message = db.message();
            message.ends_with(&format!("'{index}'")) || message.ends_with(&format!(".{index}'"))
        }
        _ => false,
    }
}

/// The stored events for the idempotency keys of `params`, in order, read with one locking
/// SELECT (`None` for a message without a key, or whose key no event holds). With a tenant
/// column and keys unique across the table, a key held by another tenant's event is an
/// [`Error::Integrity`]; with keys unique per tenant, only the message's own tenant's event
/// counts.
async fn stored_by_keys(
    conn: &mut MySqlConnection,
    table: &OutboxTable,
    params: &[&EventInsertParams],
) -> Result<Vec<Option<OutboxEvent>>> {
    let keys: Vec<&str> = params
        .iter()
        .filter_map(|p| p.idempotency_key.as_deref())
        .collect();
    if keys.is_empty() {
        return Ok(vec![None; params.len()]);
    }
    let mut query = sqlx::query(AssertSqlSafe(render_table(
        include_str!("../queries/event_get_by_idempotency_key.sql"),
        table,
        &[("keys", placeholders(keys.len()))],
    )));
    for key in &keys {
        query = query.bind(*key);
    }
    let rows = query.fetch_all(&mut *conn).await.map_err(translate)?;
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
            let same_key: Vec<&OutboxEvent> = stored
                .iter()
                .filter(|e| e.idempotency_key.as_deref() == Some(key))
                .collect();
            let Some(tenant_column) = tenant else {
                return Ok(same_key.first().map(|e| (*e).clone()));
            };
            let tenant_value = p
                .extra
                .iter()
                .find(|(c, _)| c == tenant_column)
                .map_or(Value::Null, |(_, v)| v.to_json());
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

/// The error for a key whose conflicting row cannot be read back (deleted between the insert and
/// the read).
fn vanished_key(params: &EventInsertParams) -> Error {
    Error::TransactionRetry {
        message: format!(
            "idempotency key {:?} is taken by an event that could not be read back",
            params.idempotency_key.as_deref().unwrap_or_default()
        ),
        source: "idempotency key conflict".into(),
    }
}

/// Locks each ordering key of `keys` until the end of the current transaction (a row of the key
/// lock table, by SHA-256 of the key, in hash order so two writers of several keys cannot
/// deadlock on each other).
async fn lock_keys(conn: &mut MySqlConnection, table: &OutboxTable, keys: &[&str]) -> Result<()> {
    let mut keys: Vec<&str> = keys.to_vec();
    keys.sort_unstable();
    keys.dedup();
    let rows = vec!["(UNHEX(SHA2(?, 256)))"; keys.len()].join(", ");
    let mut query = sqlx::query(AssertSqlSafe(render_table(
        include_str!("../queries/key_lock.sql"),
        table,
        &[("rows", rows)],
    )));
    for key in keys {
        query = query.bind(key);
    }
    query.execute(&mut *conn).await.map_err(translate)?;
    Ok(())
}

/// The events of `ids` as stored, by id.
async fn events_by_ids(
    conn: &mut MySqlConnection,
    table: &OutboxTable,
    ids: &[uuid::Uuid],
) -> Result<HashMap<uuid::Uuid, OutboxEvent>> {
    let mut out = HashMap::with_capacity(ids.len());
    for chunk in ids.chunks(1_000) {
        let mut query = sqlx::query(AssertSqlSafe(render_table(
            include_str!("../queries/event_get_by_ids.sql"),
            table,
            &[("ids", placeholders(chunk.len()))],
        )));
        for id in chunk {
            query = query.bind(*id);
        }
        for row in query.fetch_all(&mut *conn).await.map_err(translate)? {
            let event = decode::event(table, &row)?;
            out.insert(event.id, event);
        }
    }
    Ok(out)
}

impl MySqlBackend {
    /// Whether inserts can return their rows (`INSERT … RETURNING`, MariaDB ≥ 10.5): read from
    /// the server's version on `conn` the first time.
    async fn returning(&self, conn: &mut MySqlConnection) -> Result<bool> {
        if let Some(known) = self.returning.get() {
            return Ok(*known);
        }
        let version = migrate::server_version(conn).await?;
        let mariadb = version.to_ascii_lowercase().contains("mariadb");
        let _ = self.returning.set(mariadb);
        Ok(mariadb)
    }

    /// One event's INSERT, and for a taken idempotency key the stored event, on `conn`.
    async fn insert_one(
        &self,
        conn: &mut MySqlConnection,
        table: &OutboxTable,
        params: &EventInsertParams,
    ) -> Result<Inserted> {
        let extra: Vec<&str> = params.extra.iter().map(|(c, _)| c.as_str()).collect();
        let returning = self.returning(conn).await?;
        let sql = sql::event_insert(table, &extra, 1, returning);
        let done = bind_message(sqlx::query(AssertSqlSafe(sql)), params)
            .fetch_optional(&mut *conn)
            .await;
        match done {
            Ok(Some(row)) if returning => Ok(Inserted {
                event: decode::event(table, &row)?,
                created: true,
            }),
            Ok(_) => {
                let mut events = events_by_ids(conn, table, &[params.id]).await?;
                let event = events.remove(&params.id).ok_or_else(|| {
                    Error::database(format!(
                        "event {} was inserted but cannot be read back",
                        params.id
                    ))
                })?;
                Ok(Inserted {
                    event,
                    created: true,
                })
            }
            Err(e) if taken_key(&e, table) => {
                let event = stored_by_keys(conn, table, &[params])
                    .await?
                    .pop()
                    .flatten()
                    .ok_or_else(|| vanished_key(params))?;
                Ok(Inserted {
                    event,
                    created: false,
                })
            }
            Err(e) => Err(translate(e)),
        }
    }

    /// One attempt of `event_insert_many` inside `tx`: the stored keys first, then one
    /// multi-row INSERT per run of same-shape new messages.
    async fn insert_many_once(
        &self,
        tx: &mut MySqlConnection,
        table: &OutboxTable,
        params: &[EventInsertParams],
    ) -> std::result::Result<Vec<Inserted>, InsertManyError> {
        let all: Vec<&EventInsertParams> = params.iter().collect();
        let stored = stored_by_keys(tx, table, &all)
            .await
            .map_err(InsertManyError::Core)?;
        // What each message becomes: stored already, a repeat of an earlier message, or new.
        enum Plan {
            Stored(Box<OutboxEvent>),
            Repeat(usize),
            New,
        }
        let mut first_of_key: HashMap<(String, String), usize> = HashMap::new();
        let tenant = table.tenant_column();
        let plans: Vec<Plan> = params
            .iter()
            .zip(stored)
            .enumerate()
            .map(|(i, (p, stored))| {
                if let Some(event) = stored {
                    return Plan::Stored(Box::new(event));
                }
                let Some(key) = p.idempotency_key.clone() else {
                    return Plan::New;
                };
                let scope = match (table.idempotency_scope(), tenant) {
                    (IdempotencyScope::PerTenant, Some(t)) => p
                        .extra
                        .iter()
                        .find(|(c, _)| c == t)
                        .map_or(Value::Null, |(_, v)| v.to_json())
                        .to_string(),
                    _ => String::new(),
                };
                match first_of_key.get(&(scope.clone(), key.clone())) {
                    Some(&j) => Plan::Repeat(j),
                    None => {
                        first_of_key.insert((scope, key), i);
                        Plan::New
                    }
                }
            })
            .collect();
        let new: Vec<&EventInsertParams> = params
            .iter()
            .zip(&plans)
            .filter(|(_, plan)| matches!(plan, Plan::New))
            .map(|(p, _)| p)
            .collect();
        let returning = self.returning(tx).await.map_err(InsertManyError::Core)?;
        let mut by_id: HashMap<uuid::Uuid, OutboxEvent> = HashMap::with_capacity(new.len());
        let mut start = 0;
        while start < new.len() {
            let shape = new[start].shape();
            let end = (start..new.len())
                .find(|&i| new[i].shape() != shape)
                .unwrap_or(new.len());
            let extra: Vec<&str> = new[start].extra.iter().map(|(c, _)| c.as_str()).collect();
            for chunk in sql::insert_chunks(&new[start..end], extra.len()) {
                let sql = sql::event_insert(table, &extra, chunk.len(), returning);
                let mut query = sqlx::query(AssertSqlSafe(sql));
                for p in chunk {
                    query = bind_message(query, p);
                }
                match query.fetch_all(&mut *tx).await {
                    Ok(rows) => {
                        for row in &rows {
                            let event = decode::event(table, row).map_err(InsertManyError::Core)?;
                            by_id.insert(event.id, event);
                        }
                    }
                    Err(e) if taken_key(&e, table) => return Err(InsertManyError::KeyTaken),
                    Err(e) => return Err(InsertManyError::Core(translate(e))),
                }
            }
            start = end;
        }
        if !returning {
            let ids: Vec<uuid::Uuid> = new.iter().map(|p| p.id).collect();
            by_id = events_by_ids(tx, table, &ids)
                .await
                .map_err(InsertManyError::Core)?;
        }
        let mut results: Vec<Inserted> = Vec::with_capacity(params.len());
        for (p, plan) in params.iter().zip(plans) {
            let inserted = match plan {
                Plan::Stored(event) => Inserted {
                    event: *event,
                    created: false,
                },
                Plan::Repeat(j) => Inserted {
                    event: results[j].event.clone(),
                    created: false,
                },
                Plan::New => Inserted {
                    event: by_id.remove(&p.id).ok_or_else(|| {
                        InsertManyError::Core(Error::database(format!(
                            "event {} was inserted but cannot be read back",
                            p.id
                        )))
                    })?,
                    created: true,
                },
            };
            results.push(inserted);
        }
        Ok(results)
    }
}

/// Why one attempt of `event_insert_many` failed.
enum InsertManyError {
    /// A key was taken by a writer that committed after the keys were read: try again.
    KeyTaken,
    /// Anything else.
    Core(Error),
}

#[async_trait]
impl Backend for MySqlBackend {
    type Conn = MySqlConnection;
    type Transaction = sqlx::Transaction<'static, MySql>;

    fn capabilities(&self) -> Capabilities {
        Capabilities::new("mysql")
    }

    /// Every version of the outbox migrations for an empty database, each with its record: the
    /// `CREATE DATABASE IF NOT EXISTS` of a qualified table's database, the record's table, and
    /// each version's `CREATE TABLE IF NOT EXISTS` (indexes included), separated by `;`.
    /// Declared extra columns missing from an existing table are added by [`Backend::migrate`],
    /// not by this text (MySQL has no `ADD COLUMN IF NOT EXISTS`).
    fn schema_sql(&self, table: &OutboxTable) -> String {
        self.migration_sql(MigrationStream::Outbox, table, 0)
    }

    /// Applies the pending outbox versions under a named lock (`GET_LOCK`) of the table, each in
    /// a transaction of its own with its record (MySQL commits DDL on its own, so only a
    /// version's DML rolls back when it fails), then adds the declared extra columns the table
    /// lacks.
    ///
    /// # Errors
    /// [`Error::Configuration`] naming the server's version when it is older than MySQL 8.0 or
    /// MariaDB 10.6; [`Error::Migration`] when the record disagrees with this build;
    /// [`Error::Database`] when the server refuses the DDL.
    async fn migrate(&self, table: &OutboxTable) -> Result<()> {
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

    async fn begin(&self) -> Result<Self::Transaction> {
        self.pool.begin().await.map_err(translate)
    }

    async fn commit(&self, tx: Self::Transaction) -> Result<()> {
        tx.commit().await.map_err(translate)
    }

    async fn rollback(&self, tx: Self::Transaction) -> Result<()> {
        tx.rollback().await.map_err(translate)
    }

    /// A plain `INSERT`; a taken idempotency key (its unique index named in the error) returns
    /// the stored event, read with a locking read that waits for an uncommitted writer of the
    /// same key. With strict order, the key's lock row is locked first, until the transaction
    /// ends (a transaction of its own outside one).
    async fn event_insert(
        &self,
        conn: &mut MySqlConnection,
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
        let mut tx = conn.begin().await.map_err(translate)?;
        lock_keys(&mut tx, table, &[key]).await?;
        let inserted = self.insert_one(&mut tx, table, params).await?;
        tx.commit().await.map_err(translate)?;
        Ok(inserted)
    }

    /// Inside one savepoint (or a transaction of its own): the stored events of the messages'
    /// idempotency keys with one locking SELECT, then one multi-row `INSERT` per run of
    /// same-shape new messages (split past `sql::rows_per_insert` rows), then one SELECT of
    /// what was written. A key another writer commits meanwhile makes the attempt start over
    /// (up to three times).
    async fn event_insert_many(
        &self,
        conn: &mut MySqlConnection,
        table: &OutboxTable,
        params: &[EventInsertParams],
    ) -> Result<Vec<Inserted>> {
        let strict: Vec<&str> = params
            .iter()
            .filter(|p| p.strict_order)
            .filter_map(|p| p.ordering_key.as_deref())
            .collect();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut savepoint = conn.begin().await.map_err(translate)?;
            if !strict.is_empty() {
                lock_keys(&mut savepoint, table, &strict).await?;
            }
            match self.insert_many_once(&mut savepoint, table, params).await {
                Ok(results) => {
                    savepoint.commit().await.map_err(translate)?;
                    return Ok(results);
                }
                Err(InsertManyError::KeyTaken) if attempt < 3 => {
                    savepoint.rollback().await.map_err(translate)?;
                }
                Err(InsertManyError::KeyTaken) => {
                    return Err(Error::TransactionRetry {
                        message:
                            "idempotency keys of the batch kept being taken by concurrent writers"
                                .to_owned(),
                        source: "idempotency key conflict".into(),
                    });
                }
                Err(InsertManyError::Core(e)) => return Err(e),
            }
        }
    }

    /// The lease of `src/lease.rs`: a walk over ordering keys, `FOR UPDATE SKIP LOCKED` on heads
    /// and unkeyed events, ordered runs behind the locked heads, in one `READ COMMITTED`
    /// transaction; O(batch) whatever one key's backlog.
    async fn event_lease(
        &self,
        table: &OutboxTable,
        params: &EventLeaseParams,
    ) -> Result<LeasedBatch> {
        lease::lease(&self.pool, table, params).await
    }

    async fn event_lease_release(
        &self,
        table: &OutboxTable,
        params: &EventReleaseParams,
    ) -> Result<u64> {
        if params.sequences.is_empty() {
            return Ok(0);
        }
        let mut query = sqlx::query(AssertSqlSafe(render_table(
            include_str!("../queries/event_lease_release.sql"),
            table,
            &[("sequences", placeholders(params.sequences.len()))],
        )));
        for s in &params.sequences {
            query = query.bind(s);
        }
        let done = query
            .bind(&params.leased_by)
            .execute(&self.pool)
            .await
            .map_err(translate)?;
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
        let micros = i64::try_from(params.lease.as_micros()).unwrap_or(i64::MAX);
        let mut query = sqlx::query(AssertSqlSafe(render_table(
            include_str!("../queries/event_lease_extend.sql"),
            table,
            &[("sequences", placeholders(params.sequences.len()))],
        )))
        .bind(params.now)
        .bind(micros);
        for s in &params.sequences {
            query = query.bind(s);
        }
        let done = query
            .bind(&params.leased_by)
            .execute(&self.pool)
            .await
            .map_err(translate)?;
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
        if let Some(column) = &params.result_column {
            // One row at a time, in one transaction: each row gets its own record.
            let sql = sql::with_result_column(
                &render_table(
                    include_str!("../queries/event_mark_delivered_result.sql"),
                    table,
                    &[],
                ),
                column,
            );
            let mut tx = self.pool.begin().await.map_err(translate)?;
            let mut changed = 0;
            for (i, sequence) in params.sequences.iter().enumerate() {
                let record = params.results.get(i).cloned().flatten();
                let done = sqlx::query(AssertSqlSafe(sql.clone()))
                    .bind(params.now)
                    .bind(record.map(|v| v.to_string()))
                    .bind(sequence)
                    .execute(&mut *tx)
                    .await
                    .map_err(translate)?;
                changed += done.rows_affected();
            }
            tx.commit().await.map_err(translate)?;
            return Ok(changed);
        }
        let mut query = sqlx::query(AssertSqlSafe(render_table(
            include_str!("../queries/event_mark_delivered.sql"),
            table,
            &[("sequences", placeholders(params.sequences.len()))],
        )))
        .bind(params.now);
        for s in &params.sequences {
            query = query.bind(s);
        }
        let done = query.execute(&self.pool).await.map_err(translate)?;
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
        let result_set = match &params.result_column {
            Some(column) => {
                let column = sql::quote_ident(column);
                format!(", {column} = COALESCE(?, {column})")
            }
            None => String::new(),
        };
        let sql = render_table(
            include_str!("../queries/event_mark_failed.sql"),
            table,
            &[("result_set", result_set)],
        );
        let mut tx = self.pool.begin().await.map_err(translate)?;
        let now: DateTime<Utc> = match params.now {
            Some(now) => now,
            None => sqlx::query_scalar("SELECT UTC_TIMESTAMP(6)")
                .fetch_one(&mut *tx)
                .await
                .map_err(translate)?,
        };
        let mut changed = 0;
        for failure in &params.failures {
            let next = failure
                .retry_in
                .map(|d| now + chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX));
            let dead = failure.retry_in.is_none().then_some(now);
            let mut query = sqlx::query(AssertSqlSafe(sql.as_str()))
                .bind(failure.attempts)
                .bind(&failure.error)
                .bind(next)
                .bind(dead);
            if params.result_column.is_some() {
                query = query.bind(failure.result.as_ref().map(|v| v.to_string()));
            }
            let done = query
                .bind(failure.sequence)
                .bind(&params.leased_by)
                .execute(&mut *tx)
                .await
                .map_err(translate)?;
            changed += done.rows_affected();
        }
        tx.commit().await.map_err(translate)?;
        Ok(changed)
    }

    async fn event_list_pending_on(
        &self,
        conn: &mut MySqlConnection,
        table: &OutboxTable,
        params: &hare_outbox_core::backend::EventListPendingParams,
    ) -> Result<Vec<OutboxEvent>> {
        let rows = sqlx::query(AssertSqlSafe(statement!(table, "event_list_pending")))
            .bind(params.limit)
            .fetch_all(&mut *conn)
            .await
            .map_err(translate)?;
        rows.iter().map(|r| decode::event(table, r)).collect()
    }

    async fn event_get(
        &self,
        table: &OutboxTable,
        params: &EventGetParams,
    ) -> Result<Option<OutboxEvent>> {
        let row = sqlx::query(AssertSqlSafe(statement!(table, "event_get")))
            .bind(params.id)
            .fetch_optional(&self.pool)
            .await
            .map_err(translate)?;
        row.as_ref().map(|r| decode::event(table, r)).transpose()
    }

    async fn backlog(&self, table: &OutboxTable, params: &BacklogParams) -> Result<Backlog> {
        let sql = sql::cached(table, "backlog".to_owned(), || {
            sql::with_topic_filter(include_str!("../queries/backlog.sql"), table, "o")
        });
        let row = bind_topics(sqlx::query(AssertSqlSafe(sql)), &params.topics)
            .fetch_one(&self.pool)
            .await
            .map_err(translate)?;
        use sqlx::Row;
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
impl JournalBackend for MySqlBackend {
    async fn event_list(
        &self,
        table: &OutboxTable,
        query: &hare_outbox_core::journal::EventQuery,
    ) -> Result<Vec<OutboxEvent>> {
        journal::list(&self.pool, table, query).await
    }

    async fn event_timeline(
        &self,
        table: &OutboxTable,
        params: &hare_outbox_core::journal::TimelineParams,
    ) -> Result<Vec<hare_outbox_core::journal::TimelineBucket>> {
        journal::timeline(&self.pool, table, params).await
    }

    async fn event_retry_dead_lettered(
        &self,
        table: &OutboxTable,
        params: &EventRetryDeadLetteredParams,
    ) -> Result<u64> {
        let ids = match &params.ids {
            None => String::new(),
            Some(ids) if ids.is_empty() => "\n  AND FALSE".to_owned(),
            Some(ids) => format!("\n  AND o.id IN ({})", placeholders(ids.len())),
        };
        let sql = sql::render_table(
            &sql::with_topic_filter(
                include_str!("../queries/event_retry_dead_lettered.sql"),
                table,
                "o",
            ),
            table,
            &[("ids", ids)],
        );
        let mut query = sqlx::query(AssertSqlSafe(sql));
        for id in params.ids.iter().flatten() {
            query = query.bind(*id);
        }
        let done = bind_topics(query, &params.topics)
            .execute(&self.pool)
            .await
            .map_err(translate)?;
        Ok(done.rows_affected())
    }

    /// Deletes one batch of at most `limit` finished events, oldest first, in one short
    /// statement run in a `READ COMMITTED` transaction (no gap locks, so writers never wait on
    /// it).
    async fn event_delete_finished(
        &self,
        table: &OutboxTable,
        params: &EventDeleteFinishedParams,
    ) -> Result<u64> {
        let (name, template) = match params.state {
            FinishedState::Published => (
                "delete published",
                include_str!("../queries/event_delete_published.sql"),
            ),
            FinishedState::DeadLettered => (
                "delete dead",
                include_str!("../queries/event_delete_dead_lettered.sql"),
            ),
        };
        let sql = sql::cached(table, name.to_owned(), || {
            sql::with_topic_filter(template, table, &sql::qualified(table, table.name()))
        });
        let mut conn = self.pool.acquire().await.map_err(translate)?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
            .execute(&mut *conn)
            .await
            .map_err(translate)?;
        let mut tx = conn.begin().await.map_err(translate)?;
        let query = sqlx::query(AssertSqlSafe(sql)).bind(params.before);
        let done = bind_topics(query, &params.topics)
            .bind(params.limit)
            .execute(&mut *tx)
            .await
            .map_err(translate)?;
        tx.commit().await.map_err(translate)?;
        Ok(done.rows_affected())
    }

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
impl CaptureBackend for MySqlBackend {
    fn in_transaction(&self, conn: &MySqlConnection) -> bool {
        sqlx::Connection::is_in_transaction(conn)
    }

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
        conn: &mut MySqlConnection,
        table: &OutboxTable,
        params: &hare_outbox_core::backend::ContextSetParams,
    ) -> Result<()> {
        capture::context_set(conn, table, params).await
    }
}

#[async_trait]
impl InboxBackend for MySqlBackend {
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
        conn: &mut MySqlConnection,
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
