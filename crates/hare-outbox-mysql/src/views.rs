//! The operator's views (`queries/event_neighbours.sql`, `key_held_walk.sql`,
//! `key_head_update.sql`, `topic_stats_list.sql`, `relay_lease_list.sql`): an event's
//! neighbours of its ordering key, the held keys and the actions on their head, counts per
//! topic, the relays holding leases.

use chrono::{DateTime, Utc};
use hare_outbox_core::backend::{
    EventNeighbours, EventNeighboursParams, HeldKey, HeldKeyPage, KeyHeadAction, KeyHeadParams,
    KeyHeldListParams, RELEASED_KEY_HEADER, RelayLeaseListParams, RelayLeases, TopicStats,
    TopicStatsParams,
};
use hare_outbox_core::{OutboxTable, Result};
use sqlx::mysql::MySqlPool;
use sqlx::{AssertSqlSafe, Row};

use crate::decode;
use crate::error::translate;
use crate::sql::{placeholders, render_table, statement};

/// The sequences of the key's events around `params.sequence` (see `event_neighbours.sql`).
pub(crate) async fn neighbours(
    pool: &MySqlPool,
    table: &OutboxTable,
    params: &EventNeighboursParams,
) -> Result<EventNeighbours> {
    let window = params.window.max(1);
    let (s, key) = (params.sequence, &params.ordering_key);
    let row = sqlx::query(AssertSqlSafe(statement!(table, "event_neighbours")))
        .bind(key)
        .bind(s)
        .bind(s)
        .bind(s)
        .bind(window)
        .bind(key)
        .bind(key)
        .bind(s)
        .bind(s)
        .bind(s)
        .bind(window)
        .bind(key)
        .fetch_one(pool)
        .await
        .map_err(translate)?;
    let previous: i64 = row.try_get("previous").map_err(translate)?;
    let next: i64 = row.try_get("next").map_err(translate)?;
    Ok(EventNeighbours::new(
        (previous >= 0).then_some(previous),
        (next != i64::MAX).then_some(next),
    ))
}

/// One page of held keys: a walk over the distinct keys from `params.after` in steps that each
/// read a bounded range of the pending-key index (a key's backlog costs at most one step), stopping after `limit` held keys or `max_walk` keys walked; then each
/// held head read and its key's undelivered events counted up to `count_cap`.
pub(crate) async fn held_keys(
    pool: &MySqlPool,
    table: &OutboxTable,
    params: &KeyHeldListParams,
) -> Result<HeldKeyPage> {
    let mut conn = pool.acquire().await.map_err(translate)?;
    let scan = (params.max_walk.clamp(1, 100) * 4).max(64);
    let walk = render_table(
        include_str!("../queries/key_held_walk.sql"),
        table,
        &[("scan", scan.to_string())],
    );
    let mut after = params.after.clone();
    let mut walked = 0_i64;
    let mut held: Vec<i64> = Vec::new();
    let mut last_key: Option<String> = None;
    'walk: loop {
        let rows = sqlx::query(AssertSqlSafe(walk.as_str()))
            .bind(&after)
            .fetch_all(&mut *conn)
            .await
            .map_err(translate)?;
        let exhausted = (rows.len() as i64) < scan;
        for row in &rows {
            let key: String = row.try_get("head_key").map_err(translate)?;
            if last_key.as_deref() == Some(key.as_str()) {
                // A later event of a key already walked: only the first row is its head.
                continue;
            }
            if held.len() as i64 >= params.limit || walked >= params.max_walk {
                break 'walk;
            }
            walked += 1;
            if row.try_get::<i64, _>("held").map_err(translate)? != 0 {
                held.push(row.try_get("head").map_err(translate)?);
            }
            after.clone_from(&key);
            last_key = Some(key);
        }
        if exhausted {
            break;
        }
    }
    let mut keys = Vec::with_capacity(held.len());
    if !held.is_empty() {
        let mut query = sqlx::query(AssertSqlSafe(render_table(
            include_str!("../queries/event_get_by_sequences.sql"),
            table,
            &[("sequences", placeholders(held.len()))],
        )));
        for s in &held {
            query = query.bind(s);
        }
        let rows = query.fetch_all(&mut *conn).await.map_err(translate)?;
        let count = render_table(
            include_str!("../queries/key_waiting.sql"),
            table,
            &[("count_cap", params.count_cap.max(1).to_string())],
        );
        for row in &rows {
            let head = decode::event(table, row)?;
            let key = head.ordering_key.clone().unwrap_or_default();
            let waiting: i64 = sqlx::query_scalar(AssertSqlSafe(count.as_str()))
                .bind(&key)
                .fetch_one(&mut *conn)
                .await
                .map_err(translate)?;
            keys.push(HeldKey::new(key, head, waiting));
        }
    }
    keys.sort_by(|a, b| a.ordering_key.cmp(&b.ordering_key));
    let stopped = keys.len() as i64 >= params.limit || walked >= params.max_walk;
    let next = if stopped { last_key } else { None };
    Ok(HeldKeyPage::new(keys, next, walked))
}

/// Retries or releases a held head (see `key_head_update.sql`), in one transaction with the test
/// that it is still its key's head.
pub(crate) async fn key_head(
    pool: &MySqlPool,
    table: &OutboxTable,
    params: &KeyHeadParams,
) -> Result<u64> {
    let action = match params.action {
        KeyHeadAction::Retry => "retry",
        KeyHeadAction::Release => "release",
    };
    let header_path = format!("$.\"{}\"", RELEASED_KEY_HEADER.replace('"', "\\\""));
    let mut tx = pool.begin().await.map_err(translate)?;
    let earlier: Option<i64> =
        sqlx::query_scalar(AssertSqlSafe(statement!(table, "key_head_earlier")))
            .bind(&params.ordering_key)
            .bind(params.sequence)
            .fetch_optional(&mut *tx)
            .await
            .map_err(translate)?;
    if earlier.is_some() {
        tx.rollback().await.map_err(translate)?;
        return Ok(0);
    }
    let sql = render_table(
        include_str!("../queries/key_head_update.sql"),
        table,
        &[("action", action.to_owned())],
    );
    let done = sqlx::query(AssertSqlSafe(sql))
        .bind(header_path)
        .bind(params.sequence)
        .bind(&params.ordering_key)
        .bind(params.now)
        .execute(&mut *tx)
        .await
        .map_err(translate)?;
    tx.commit().await.map_err(translate)?;
    Ok(done.rows_affected())
}

/// One page of per-topic counts.
pub(crate) async fn topic_stats(
    pool: &MySqlPool,
    table: &OutboxTable,
    params: &TopicStatsParams,
) -> Result<Vec<TopicStats>> {
    let rows = sqlx::query(AssertSqlSafe(statement!(table, "topic_stats_list")))
        .bind(params.now)
        .bind(params.now)
        .bind(params.now)
        .bind(&params.after)
        .bind(params.published_since)
        .bind(&params.after)
        .bind(params.limit)
        .fetch_all(pool)
        .await
        .map_err(translate)?;
    rows.iter()
        .map(|row| {
            let mut stats = TopicStats::new(row.try_get("topic").map_err(translate)?);
            stats.pending = row.try_get("pending").map_err(translate)?;
            stats.leased = row.try_get("leased").map_err(translate)?;
            stats.retrying = row.try_get("retrying").map_err(translate)?;
            stats.dead = row.try_get("dead").map_err(translate)?;
            stats.published = row.try_get("published").map_err(translate)?;
            stats.oldest_pending_at = row
                .try_get::<Option<DateTime<Utc>>, _>("oldest_pending_at")
                .map_err(translate)?;
            Ok(stats)
        })
        .collect()
}

/// One page of the relays holding leases.
pub(crate) async fn relay_leases(
    pool: &MySqlPool,
    table: &OutboxTable,
    params: &RelayLeaseListParams,
) -> Result<Vec<RelayLeases>> {
    let rows = sqlx::query(AssertSqlSafe(statement!(table, "relay_lease_list")))
        .bind(params.now)
        .bind(params.now)
        .bind(&params.after)
        .bind(params.limit)
        .fetch_all(pool)
        .await
        .map_err(translate)?;
    rows.iter()
        .map(|row| {
            let mut leases = RelayLeases::new(row.try_get("leased_by").map_err(translate)?);
            leases.live = row.try_get("live").map_err(translate)?;
            leases.expired = row.try_get("expired").map_err(translate)?;
            leases.lease_until_max = row.try_get("lease_until_max").map_err(translate)?;
            leases.lease_until_min = row.try_get("lease_until_min").map_err(translate)?;
            Ok(leases)
        })
        .collect()
}
