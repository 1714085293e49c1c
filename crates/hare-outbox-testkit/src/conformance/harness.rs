//! What a backend's tests give the shared scenarios: a fresh isolated database per scenario
//! ([`Harness`]), raw row edits in the backend's own SQL dialect ([`Harness::update`]), and
//! factories that put an event into any state of the state machine ([`put`], [`EventState`]).
//!
//! A scenario is `pub async fn name<H: Harness>(h: &H)`; the [`suite!`](crate::suite) macro turns
//! every scenario into one `#[tokio::test]` of the backend's test binary.

use std::future::Future;
use std::ops::DerefMut;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};
use hare_outbox_core::migration::Migration;
use hare_outbox_core::{
    Backend, CaptureBackend, DeliveryError, FnDelivery, InboxBackend, JournalBackend,
    MigrationStream, Outbox, OutboxEvent, OutboxMessage, OutboxTable, RelayConfig,
};
use serde_json::json;

use super::{RowEditor, TimeColumn};

/// A value written into a column by [`Harness::update`], bound in the backend's own form.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    /// A timestamp (`None` = NULL), stored as the backend stores its timestamps.
    Time(Option<DateTime<Utc>>),
    /// Text (`None` = NULL).
    Text(Option<String>),
    /// An integer.
    Int(i64),
    /// JSON given as its exact text, stored in the backend's JSON storage (`jsonb` on
    /// PostgreSQL, the text itself on SQLite).
    Json(String),
}

/// A change [`Harness::reshape_outbox`] makes to the table `outbox`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reshape {
    /// `id` may be NULL and `topic` takes text of any length (a table made by hand).
    Loosen,
    /// The extra column `note` is NOT NULL and shorter than 5 characters, by a CHECK named
    /// `note_short` (a table a user's migration tightened).
    TightenNote,
}

/// One backend's test database for one scenario: opened fresh (its own PostgreSQL schema, its
/// own SQLite file), dropped by [`Harness::close`].
///
/// Every method panics when the database refuses the call: a scenario fails by panicking.
pub trait Harness: Sized + 'static {
    /// The backend under test.
    type Backend: JournalBackend + CaptureBackend + InboxBackend;
    /// A pooled connection of the test database, dereferencing to the backend's connection type.
    type Pooled: DerefMut<Target = <Self::Backend as Backend>::Conn> + Send;

    /// A short name for messages: `"postgres"`, `"sqlite"`.
    const NAME: &'static str;

    /// The longest a writer may wait for the write lock while a clean-up deletes in batches
    /// (PostgreSQL: writers never wait on deletes; SQLite: one writer at a time, within the
    /// busy timeout).
    const WRITER_WAIT_LIMIT: Duration;

    /// Opens a fresh, empty, isolated database.
    fn open() -> impl Future<Output = Self>;

    /// A backend on the test database (a clone shares its pool).
    fn backend(&self) -> Self::Backend;

    /// A connection of the test database's pool, outside any transaction.
    fn acquire(&self) -> impl Future<Output = Self::Pooled>;

    /// Runs `sql`, one or more statements (separated by `;`) without parameters in SQL both
    /// backends accept (`CREATE TABLE` with portable types, `INSERT … VALUES` with literals,
    /// `UPDATE … SET col = NULL`), on a connection of the pool.
    fn execute(&self, sql: &str) -> impl Future<Output = ()> {
        async move {
            let mut conn = self.acquire().await;
            Self::execute_on(&mut conn, sql).await;
        }
    }

    /// Runs `sql` (as [`Harness::execute`]) on `conn`, inside whatever transaction it is in.
    fn execute_on(
        conn: &mut <Self::Backend as Backend>::Conn,
        sql: &str,
    ) -> impl Future<Output = ()> + Send {
        async move {
            if let Err(e) = Self::try_execute_on(conn, sql).await {
                panic!("{sql}: {e}");
            }
        }
    }

    /// Runs `sql` (as [`Harness::execute_on`]) on `conn`; the database's refusal is returned as
    /// its message, for a statement the scenario expects to fail ([`try_execute`] with sqlx).
    fn try_execute_on(
        conn: &mut <Self::Backend as Backend>::Conn,
        sql: &str,
    ) -> impl Future<Output = Result<(), String>> + Send;

    /// The first column of the first row of `sql` as an integer (`SELECT count(*) …`;
    /// [`scalar`] with sqlx).
    fn scalar(&self, sql: &str) -> impl Future<Output = i64>;

    /// `UPDATE table SET column = value, … WHERE filter`, binding each value in the backend's
    /// form; returns the number of rows changed. `filter` is portable SQL without parameters
    /// (`sequence = 5`, `topic = 'a.x'`, `1 = 1`).
    fn update(
        &self,
        table: &OutboxTable,
        filter: &str,
        set: &[(&str, Cell)],
    ) -> impl Future<Output = u64>;

    /// Inserts into `table` rows on topic `unreadable` with ordering key `key` that the backend
    /// stores but cannot read back as events (another program wrote them by hand: a payload
    /// that is not JSON, a time that is not one, JSON nested past the reader's depth limit);
    /// returns how many.
    fn insert_unreadable(&self, table: &OutboxTable, key: &str) -> impl Future<Output = i64>;

    /// Changes the migrated, still empty table `outbox` as another program or a user's own
    /// migration may have (see [`Reshape`]); indexes stay.
    fn reshape_outbox(&self, reshape: Reshape) -> impl Future<Output = ()>;

    /// Creates on the table `loans` (of [`LOANS`](super::capture::LOANS)) a row trigger
    /// `zz_refuse` that runs after capture's own and fails the statement for a row inserted with
    /// status `bad`.
    fn refuse_bad_loans(&self) -> impl Future<Output = ()>;

    /// How many triggers the database holds (capture installs its own).
    fn triggers(&self) -> impl Future<Output = i64>;

    /// The DDL the backend's `migrate` ran before migrations were versioned, for an outbox table
    /// named `outbox` without extra columns (a frozen copy); `None` for a backend that had
    /// versioned migrations from its start.
    fn unversioned_outbox_ddl() -> Option<&'static str>;

    /// `backend` running `migrations` as the versions of `stream` instead of its own (the
    /// backend's hidden `with_migrations`).
    fn with_migrations(
        backend: Self::Backend,
        stream: MigrationStream,
        migrations: &'static [Migration],
    ) -> Self::Backend;

    /// Drops the database.
    fn close(self) -> impl Future<Output = ()>;
}

/// Runs `sql` (statements without parameters) on `executor` of any sqlx database; the
/// database's refusal is returned as its message. The body of [`Harness::try_execute_on`].
///
/// # Errors
/// The database's error message when a statement fails.
pub fn try_execute<'e, E>(
    executor: E,
    sql: &str,
) -> std::pin::Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'e>>
where
    E: sqlx::Executor<'e> + 'e,
{
    let statements = sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()));
    // Boxed: a future generic over the executor's lifetime is not provably `Send` otherwise.
    Box::pin(async move {
        statements
            .execute(executor)
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    })
}

/// The first column of the first row of `sql` as an integer, read through `executor` of any
/// sqlx database. The body of [`Harness::scalar`].
///
/// # Panics
/// When the query fails or returns no row.
pub async fn scalar<'e, DB, E>(executor: E, sql: &str) -> i64
where
    DB: sqlx::Database,
    E: sqlx::Executor<'e, Database = DB>,
    i64: sqlx::Type<DB> + for<'r> sqlx::Decode<'r, DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_one(executor)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// The text of [`Harness::update`]: `UPDATE table SET column = <placeholder>, … WHERE filter`,
/// each placeholder written by `placeholder` from the value's 1-based position and the value
/// (`$1::jsonb`, `?1`).
pub fn update_sql(
    table: &OutboxTable,
    filter: &str,
    set: &[(&str, Cell)],
    placeholder: impl Fn(usize, &Cell) -> String,
) -> String {
    let assignments: Vec<String> = set
        .iter()
        .enumerate()
        .map(|(i, (column, cell))| format!("{column} = {}", placeholder(i + 1, cell)))
        .collect();
    format!(
        "UPDATE {table} SET {} WHERE {filter}",
        assignments.join(", ")
    )
}

/// Runs [`Harness::update`] through `executor` of any sqlx database: the text of [`update_sql`]
/// with `placeholder`, each cell bound as it is (a backend that stores times as text maps
/// [`Cell::Time`] to [`Cell::Text`] first). Returns the database's result (rows changed).
///
/// # Panics
/// When the statement fails.
pub async fn run_update<'e, DB, E>(
    executor: E,
    table: &OutboxTable,
    filter: &str,
    set: &[(&str, Cell)],
    placeholder: impl Fn(usize, &Cell) -> String,
) -> DB::QueryResult
where
    DB: sqlx::Database,
    E: sqlx::Executor<'e, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'q> Option<DateTime<Utc>>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> Option<String>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    let sql = update_sql(table, filter, set, placeholder);
    let mut query = sqlx::query(sqlx::AssertSqlSafe(sql.clone()));
    for (_, cell) in set {
        query = match cell {
            Cell::Time(time) => query.bind(*time),
            Cell::Text(text) => query.bind(text.clone()),
            Cell::Int(n) => query.bind(*n),
            Cell::Json(json) => query.bind(json.clone()),
        };
    }
    query
        .execute(executor)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

impl<H: Harness> RowEditor for H {
    async fn set_time(
        &self,
        table: &OutboxTable,
        sequence: i64,
        column: TimeColumn,
        time: Option<DateTime<Utc>>,
    ) {
        self.update(
            table,
            &format!("sequence = {sequence}"),
            &[(column.name(), Cell::Time(time))],
        )
        .await;
    }

    async fn set_payload(&self, table: &OutboxTable, sequence: i64, json: &str) {
        self.update(
            table,
            &format!("sequence = {sequence}"),
            &[("payload", Cell::Json(json.to_owned()))],
        )
        .await;
    }
}

/// An outbox on `h`'s database in `table`, migrated.
///
/// # Panics
/// When the migration fails.
pub async fn outbox_in<H: Harness>(h: &H, table: OutboxTable) -> Outbox<H::Backend> {
    let outbox = Outbox::new(h.backend(), table);
    outbox.migrate().await.expect("migrate");
    outbox
}

/// An outbox on `h`'s database in the table `outbox`, migrated.
///
/// # Panics
/// When the migration fails.
pub async fn outbox<H: Harness>(h: &H) -> Outbox<H::Backend> {
    outbox_in(h, plain("outbox")).await
}

/// The table `name` without extra columns.
///
/// # Panics
/// When `name` is not a valid table name.
pub fn plain(name: &str) -> OutboxTable {
    OutboxTable::parse(name).expect("a valid table name")
}

/// Enqueues `message` on a connection of `h`'s pool, outside a transaction.
///
/// # Panics
/// When the enqueue fails.
pub async fn enqueue<H: Harness>(
    h: &H,
    outbox: &Outbox<H::Backend>,
    message: OutboxMessage,
) -> OutboxEvent {
    let mut conn = h.acquire().await;
    outbox.enqueue(&mut conn, message).await.expect("enqueue")
}

/// A message on `topic` with payload `{"n": n}` and `key` as its ordering key (none for `None`).
pub fn message(topic: &str, key: Option<&str>, n: i64) -> OutboxMessage {
    let message = OutboxMessage::new(topic, json!({ "n": n }));
    match key {
        Some(key) => message.ordering_key(key),
        None => message,
    }
}

/// The event as stored now; it must exist.
///
/// # Panics
/// When the read fails or the event is gone.
pub async fn stored<B: Backend>(outbox: &Outbox<B>, event: &OutboxEvent) -> OutboxEvent {
    outbox
        .get(event.id)
        .await
        .expect("get")
        .expect("the event exists")
}

/// Now, truncated to the microseconds every backend stores.
pub fn now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(6)
}

/// `n` days before now.
pub fn days_ago(n: i64) -> DateTime<Utc> {
    now() - chrono::Duration::days(n)
}

/// A state of the outbox state machine (see `docs/state_machine.md`) that [`put`] writes into
/// a stored event's columns directly.
#[derive(Debug, Clone, PartialEq)]
pub enum EventState {
    /// Pending, created at the given time.
    Created(DateTime<Utc>),
    /// Leased by `by` until `until`.
    Leased {
        /// The relay holding the lease.
        by: String,
        /// When the lease ends.
        until: DateTime<Utc>,
    },
    /// Failed `attempts` times with `error`, due again at `next`.
    Retrying {
        /// Failed attempts so far.
        attempts: i64,
        /// The last error.
        error: String,
        /// When the event is due again.
        next: DateTime<Utc>,
    },
    /// Dead-lettered at the given time after 5 attempts.
    Dead(DateTime<Utc>),
    /// Published at the given time.
    Published(DateTime<Utc>),
}

/// Writes `state` into the event at `sequence` of `table` (columns of other states are left as
/// they are, so states combine: dead, then published by a late mark).
///
/// # Panics
/// When the event does not exist.
pub async fn put<H: Harness>(h: &H, table: &OutboxTable, sequence: i64, state: EventState) {
    let set: Vec<(&str, Cell)> = match state {
        EventState::Created(at) => vec![("created_at", Cell::Time(Some(at)))],
        EventState::Leased { by, until } => vec![
            ("leased_by", Cell::Text(Some(by))),
            ("lease_until", Cell::Time(Some(until))),
        ],
        EventState::Retrying {
            attempts,
            error,
            next,
        } => vec![
            ("attempts", Cell::Int(attempts)),
            ("last_error", Cell::Text(Some(error))),
            ("next_attempt_at", Cell::Time(Some(next))),
        ],
        EventState::Dead(at) => vec![
            ("attempts", Cell::Int(5)),
            ("dead_lettered_at", Cell::Time(Some(at))),
        ],
        EventState::Published(at) => vec![("published_at", Cell::Time(Some(at)))],
    };
    let changed = h
        .update(table, &format!("sequence = {sequence}"), &set)
        .await;
    assert_eq!(changed, 1, "event {sequence} of {table} exists");
}

/// Enqueues an event on `topic` (payload `{}`) and puts it into every state of `states` in turn.
///
/// # Panics
/// When a write fails.
pub async fn event_in<H: Harness>(
    h: &H,
    outbox: &Outbox<H::Backend>,
    topic: &str,
    states: &[EventState],
) -> OutboxEvent {
    let event = enqueue(h, outbox, OutboxMessage::new(topic, json!({}))).await;
    for state in states {
        put(h, outbox.table(), event.sequence, state.clone()).await;
    }
    stored(outbox, &event).await
}

/// What a [`recording`] delivery has been given, in the order the calls started.
pub type Seen = Arc<Mutex<Vec<OutboxEvent>>>;

/// A delivery that records every event and refuses those on topic `poison` with the error
/// `refused: poison`.
pub fn recording() -> (Seen, impl hare_outbox_core::Delivery) {
    let seen: Seen = Arc::default();
    let record = seen.clone();
    let delivery = FnDelivery::new(move |event: OutboxEvent| {
        let record = record.clone();
        async move {
            let poison = event.topic == "poison";
            record.lock().expect("recorder lock").push(event);
            if poison {
                return Err(DeliveryError::new("refused: poison"));
            }
            Ok(())
        }
    });
    (seen, delivery)
}

/// Takes what the recorder holds.
pub fn drain(seen: &Seen) -> Vec<OutboxEvent> {
    std::mem::take(&mut *seen.lock().expect("recorder lock"))
}

/// A relay configuration for tests: named `name`, polling every 20 ms, first retry after 50 ms.
pub fn config(name: &str) -> RelayConfig {
    RelayConfig::default()
        .with_name(name)
        .with_poll_interval(Duration::from_millis(20))
        .with_retry_base(Duration::from_millis(50))
}
