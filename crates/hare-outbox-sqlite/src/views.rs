//! The operator's views (`queries/event_neighbours.sql`, `key_held_list.sql`,
//! `key_head_update.sql`, `topic_stats_list.sql`, `relay_lease_list.sql`): an event's
//! neighbours of its ordering key, the held keys and the actions on their head, counts per
//! topic, the relays holding leases.

use chrono::{DateTime, Utc};
use hare_outbox_core::backend::{
    EventNeighbours, EventNeighboursParams, HeldKey, HeldKeyPage, KeyHeadAction, KeyHeadParams,
    KeyHeldListParams, RELEASED_KEY_HEADER, RelayLeaseListParams, RelayLeases, TopicStats,
    TopicStatsParams,
};
use hare_outbox_core::{Error, OutboxTable, Result};
use sqlx::sqlite::SqliteRow;
use sqlx::{AssertSqlSafe, Row, SqlitePool};

use crate::decode::{self, parse_timestamp, timestamp};
use crate::error::map_err;
use crate::sql::Query;

/// A stored timestamp column of `row` (`None` = NULL).
fn time(row: &SqliteRow, column: &str) -> Result<Option<DateTime<Utc>>> {
    row.try_get::<Option<String>, _>(column)
        .map_err(map_err)?
        .map(|text| {
            parse_timestamp(&text).ok_or_else(|| {
                Error::database(format!(
                    "outbox column {column}: {text:?} is not a timestamp"
                ))
            })
        })
        .transpose()
}

/// See `queries/event_neighbours.sql`.
pub(crate) async fn neighbours(
    pool: &SqlitePool,
    table: &OutboxTable,
    params: &EventNeighboursParams,
) -> Result<EventNeighbours> {
    let row = sqlx::query(AssertSqlSafe(Query::EventNeighbours.render(table)))
        .bind(params.sequence)
        .bind(&params.ordering_key)
        .bind(params.window.max(1))
        .fetch_one(pool)
        .await
        .map_err(map_err)?;
    Ok(EventNeighbours::new(
        row.try_get("previous").map_err(map_err)?,
        row.try_get("next").map_err(map_err)?,
    ))
}

/// See `queries/key_held_list.sql`.
pub(crate) async fn held_keys(
    pool: &SqlitePool,
    table: &OutboxTable,
    params: &KeyHeldListParams,
) -> Result<HeldKeyPage> {
    let rows = sqlx::query(AssertSqlSafe(Query::KeyHeldList.render(table)))
        .bind(&params.after)
        .bind(params.limit)
        .bind(params.max_walk)
        .bind(params.count_cap)
        .fetch_all(pool)
        .await
        .map_err(map_err)?;
    let mut keys = Vec::with_capacity(rows.len());
    let mut last_key: Option<String> = None;
    let mut walked = 0;
    for row in &rows {
        last_key = row.try_get("last_key").map_err(map_err)?;
        walked = row
            .try_get::<Option<i64>, _>("walked")
            .map_err(map_err)?
            .unwrap_or(0);
        if row
            .try_get::<Option<i64>, _>("sequence")
            .map_err(map_err)?
            .is_none()
        {
            continue;
        }
        let head = decode::event(table, row)?;
        let waiting: i64 = row.try_get("waiting").map_err(map_err)?;
        let key = head.ordering_key.clone().unwrap_or_default();
        keys.push(HeldKey::new(key, head, waiting));
    }
    keys.sort_by(|a, b| a.ordering_key.cmp(&b.ordering_key));
    let stopped = keys.len() as i64 >= params.limit || walked >= params.max_walk;
    let next = if stopped { last_key } else { None };
    Ok(HeldKeyPage::new(keys, next, walked))
}

/// See `queries/key_head_update.sql`.
pub(crate) async fn key_head(
    pool: &SqlitePool,
    table: &OutboxTable,
    params: &KeyHeadParams,
) -> Result<u64> {
    let action = match params.action {
        KeyHeadAction::Retry => "retry",
        KeyHeadAction::Release => "release",
    };
    let header_path = format!("$.\"{}\"", RELEASED_KEY_HEADER.replace('"', "\\\""));
    let done = sqlx::query(AssertSqlSafe(Query::KeyHeadUpdate.render(table)))
        .bind(params.sequence)
        .bind(&params.ordering_key)
        .bind(action)
        .bind(timestamp(params.now))
        .bind(header_path)
        .execute(pool)
        .await
        .map_err(map_err)?;
    Ok(done.rows_affected())
}

/// See `queries/topic_stats_list.sql`.
pub(crate) async fn topic_stats(
    pool: &SqlitePool,
    table: &OutboxTable,
    params: &TopicStatsParams,
) -> Result<Vec<TopicStats>> {
    let rows = sqlx::query(AssertSqlSafe(Query::TopicStatsList.render(table)))
        .bind(&params.after)
        .bind(params.limit)
        .bind(timestamp(params.published_since))
        .bind(timestamp(params.now))
        .fetch_all(pool)
        .await
        .map_err(map_err)?;
    rows.iter()
        .map(|row| {
            let mut stats = TopicStats::new(row.try_get("topic").map_err(map_err)?);
            stats.pending = row.try_get("pending").map_err(map_err)?;
            stats.leased = row.try_get("leased").map_err(map_err)?;
            stats.retrying = row.try_get("retrying").map_err(map_err)?;
            stats.dead = row.try_get("dead").map_err(map_err)?;
            stats.published = row.try_get("published").map_err(map_err)?;
            stats.oldest_pending_at = time(row, "oldest_pending_at")?;
            Ok(stats)
        })
        .collect()
}

/// See `queries/relay_lease_list.sql`.
pub(crate) async fn relay_leases(
    pool: &SqlitePool,
    table: &OutboxTable,
    params: &RelayLeaseListParams,
) -> Result<Vec<RelayLeases>> {
    let rows = sqlx::query(AssertSqlSafe(Query::RelayLeaseList.render(table)))
        .bind(&params.after)
        .bind(params.limit)
        .bind(timestamp(params.now))
        .fetch_all(pool)
        .await
        .map_err(map_err)?;
    rows.iter()
        .map(|row| {
            let mut leases = RelayLeases::new(row.try_get("leased_by").map_err(map_err)?);
            leases.live = row.try_get("live").map_err(map_err)?;
            leases.expired = row.try_get("expired").map_err(map_err)?;
            leases.lease_until_max = time(row, "lease_until_max")?;
            leases.lease_until_min = time(row, "lease_until_min")?;
            Ok(leases)
        })
        .collect()
}
