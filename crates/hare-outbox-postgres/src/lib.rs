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

mod error;
mod sql;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use hare_outbox_core::backend::{
    BacklogParams, EventDeleteFinishedParams, EventInsertParams, EventLeaseExtendParams,
    EventLeaseParams, EventMarkDeliveredParams, EventMarkFailedParams,
    EventRetryDeadLetteredParams, FinishedState,
};
use hare_outbox_core::{Backend, Backlog, Error, OutboxEvent, OutboxTable, Result, TopicFilter};
use serde_json::{Map, Value};
use sqlx::postgres::PgArguments;
use sqlx::postgres::{PgConnection, PgPool, PgRow};
use sqlx::query::Query;
use sqlx::{AssertSqlSafe, Row};
use uuid::Uuid;

pub use error::translate;
use sql::Statements;

/// The PostgreSQL backend: a pool for the relay's statements; enqueue uses the caller's
/// connection (`&mut PgConnection`, e.g. `&mut *tx`).
#[derive(Debug, Clone)]
pub struct PgBackend {
    pool: PgPool,
}

impl PgBackend {
    /// A backend over `pool`. The relay takes one connection per statement, briefly; a pool of 2 to
    /// 5 connections per relay is plenty.
    pub fn new(pool: PgPool) -> Self {
        PgBackend { pool }
    }

    /// The pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

#[async_trait]
impl Backend for PgBackend {
    type Conn = PgConnection;

    fn name(&self) -> &'static str {
        "postgres"
    }

    fn schema_sql(&self, table: &OutboxTable) -> String {
        Statements::new(table).schema
    }

    async fn migrate(&self, table: &OutboxTable) -> Result<()> {
        let statements = Statements::new(table);
        let mut tx = self.pool.begin().await.map_err(translate)?;
        // Serializes concurrent migrations: CREATE … IF NOT EXISTS alone races on the catalog.
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext('hare_outbox.migrate'))")
            .execute(&mut *tx)
            .await
            .map_err(translate)?;
        sqlx::raw_sql(AssertSqlSafe(statements.schema))
            .execute(&mut *tx)
            .await
            .map_err(translate)?;
        tx.commit().await.map_err(translate)
    }

    async fn event_insert(
        &self,
        conn: &mut PgConnection,
        table: &OutboxTable,
        params: &EventInsertParams,
    ) -> Result<OutboxEvent> {
        let statements = Statements::new(table);
        let inserted = sqlx::query(AssertSqlSafe(statements.event_insert))
            .bind(params.id)
            .bind(&params.topic)
            .bind(&params.payload)
            .bind(Value::Object(params.headers.clone()))
            .bind(&params.ordering_key)
            .bind(&params.idempotency_key)
            .fetch_optional(&mut *conn)
            .await
            .map_err(translate)?;
        if let Some(row) = inserted {
            return decode(&row);
        }
        // ON CONFLICT DO NOTHING: the key is taken; return the stored event unchanged.
        let key = params.idempotency_key.as_deref().unwrap_or_default();
        let stored = sqlx::query(AssertSqlSafe(statements.event_get_by_idempotency_key))
            .bind(key)
            .fetch_optional(&mut *conn)
            .await
            .map_err(translate)?;
        match stored {
            Some(row) => decode(&row),
            None => Err(Error::TransactionRetry {
                message: format!(
                    "idempotency key {key:?} is taken by an event this transaction cannot see (committed after its snapshot)"
                ),
                source: "idempotency key conflict".into(),
            }),
        }
    }

    async fn event_lease(
        &self,
        table: &OutboxTable,
        params: &EventLeaseParams,
    ) -> Result<Vec<OutboxEvent>> {
        let statements = Statements::new(table);
        let query = sqlx::query(AssertSqlSafe(statements.event_lease))
            .bind(params.now)
            .bind(params.lease_until)
            .bind(&params.leased_by)
            .bind(params.limit);
        let rows = bind_topics(query, &params.topics)
            .fetch_all(&self.pool)
            .await
            .map_err(translate)?;
        let mut events = rows.iter().map(decode).collect::<Result<Vec<_>>>()?;
        events.sort_by_key(|e| e.sequence);
        Ok(events)
    }

    async fn event_lease_extend(
        &self,
        table: &OutboxTable,
        params: &EventLeaseExtendParams,
    ) -> Result<u64> {
        let done = sqlx::query(AssertSqlSafe(Statements::new(table).event_lease_extend))
            .bind(&params.sequences)
            .bind(&params.leased_by)
            .bind(params.lease_until)
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
        let done = sqlx::query(AssertSqlSafe(Statements::new(table).event_mark_delivered))
            .bind(&params.sequences)
            .bind(params.now)
            .execute(&self.pool)
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
        let next: Vec<Option<DateTime<Utc>>> = f.iter().map(|x| x.next_attempt_at).collect();
        let dead: Vec<Option<DateTime<Utc>>> = f.iter().map(|x| x.dead_lettered_at).collect();
        let done = sqlx::query(AssertSqlSafe(Statements::new(table).event_mark_failed))
            .bind(sequences)
            .bind(attempts)
            .bind(errors)
            .bind(next)
            .bind(dead)
            .bind(&params.leased_by)
            .execute(&self.pool)
            .await
            .map_err(translate)?;
        Ok(done.rows_affected())
    }

    async fn event_get(&self, table: &OutboxTable, id: Uuid) -> Result<Option<OutboxEvent>> {
        let row = sqlx::query(AssertSqlSafe(Statements::new(table).event_get))
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(translate)?;
        row.as_ref().map(decode).transpose()
    }

    async fn event_retry_dead_lettered(
        &self,
        table: &OutboxTable,
        params: &EventRetryDeadLetteredParams,
    ) -> Result<u64> {
        let query = sqlx::query(AssertSqlSafe(
            Statements::new(table).event_retry_dead_lettered,
        ))
        .bind(&params.ids);
        let done = bind_topics(query, &params.topics)
            .execute(&self.pool)
            .await
            .map_err(translate)?;
        Ok(done.rows_affected())
    }

    async fn event_delete_finished(
        &self,
        table: &OutboxTable,
        params: &EventDeleteFinishedParams,
    ) -> Result<u64> {
        let statements = Statements::new(table);
        let sql = match params.state {
            FinishedState::Published => statements.event_delete_published,
            FinishedState::DeadLettered => statements.event_delete_dead_lettered,
        };
        let query = sqlx::query(AssertSqlSafe(sql))
            .bind(params.before)
            .bind(params.limit);
        let done = bind_topics(query, &params.topics)
            .execute(&self.pool)
            .await
            .map_err(translate)?;
        Ok(done.rows_affected())
    }

    async fn backlog(&self, table: &OutboxTable, params: &BacklogParams) -> Result<Backlog> {
        let query = sqlx::query(AssertSqlSafe(Statements::new(table).backlog));
        let row = bind_topics(query, &params.topics)
            .fetch_one(&self.pool)
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

/// Decodes one row of [`sql::COLUMNS`] into an event.
fn decode(row: &PgRow) -> Result<OutboxEvent> {
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
    })
}
