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
use hare_outbox_core::{OutboxTable, Result};
use sqlx::{AssertSqlSafe, Row};

use crate::exec::{Db, RunIn};
use crate::sql::Statements;
use crate::{decode, translate};

/// See `queries/event_neighbours.sql`.
pub(crate) async fn neighbours(
    db: Db<'_>,
    table: &OutboxTable,
    params: &EventNeighboursParams,
) -> Result<EventNeighbours> {
    let row = sqlx::query(AssertSqlSafe(
        Statements::for_table(table).event_neighbours.clone(),
    ))
    .bind(params.sequence)
    .bind(&params.ordering_key)
    .bind(params.window.max(1))
    .fetch_one_in(db)
    .await
    .map_err(translate)?;
    Ok(EventNeighbours::new(
        row.try_get("previous").map_err(translate)?,
        row.try_get("next").map_err(translate)?,
    ))
}

/// See `queries/key_held_list.sql`.
pub(crate) async fn held_keys(
    db: Db<'_>,
    table: &OutboxTable,
    params: &KeyHeldListParams,
) -> Result<HeldKeyPage> {
    let rows = sqlx::query(AssertSqlSafe(
        Statements::for_table(table).key_held_list.clone(),
    ))
    .bind(&params.after)
    .bind(params.limit)
    .bind(params.max_walk)
    .bind(params.count_cap)
    .fetch_all_in(db)
    .await
    .map_err(translate)?;
    let mut keys = Vec::with_capacity(rows.len());
    let mut last_key: Option<String> = None;
    let mut walked = 0;
    for row in &rows {
        last_key = row.try_get("last_key").map_err(translate)?;
        walked = row
            .try_get::<Option<i32>, _>("walked")
            .map_err(translate)?
            .unwrap_or(0);
        if row
            .try_get::<Option<i64>, _>("sequence")
            .map_err(translate)?
            .is_none()
        {
            continue;
        }
        let head = decode(table, row)?;
        let waiting: i64 = row.try_get("waiting").map_err(translate)?;
        let key = head.ordering_key.clone().unwrap_or_default();
        keys.push(HeldKey::new(key, head, waiting));
    }
    keys.sort_by(|a, b| a.ordering_key.cmp(&b.ordering_key));
    Ok(page(keys, last_key, i64::from(walked), params))
}

/// The page of `keys` after a walk of `walked` keys ending at `last_key`: it goes on after
/// `last_key` unless the walk ran out of keys (it stopped short of both limits).
pub(crate) fn page(
    keys: Vec<HeldKey>,
    last_key: Option<String>,
    walked: i64,
    params: &KeyHeldListParams,
) -> HeldKeyPage {
    let stopped = keys.len() as i64 >= params.limit || walked >= params.max_walk;
    let next = if stopped { last_key } else { None };
    HeldKeyPage::new(keys, next, walked)
}

/// The action's name in `queries/key_head_update.sql`.
pub(crate) fn action_name(action: KeyHeadAction) -> &'static str {
    match action {
        KeyHeadAction::Retry => "retry",
        KeyHeadAction::Release => "release",
    }
}

/// See `queries/key_head_update.sql`.
pub(crate) async fn key_head(
    db: Db<'_>,
    table: &OutboxTable,
    params: &KeyHeadParams,
) -> Result<u64> {
    let done = sqlx::query(AssertSqlSafe(
        Statements::for_table(table).key_head_update.clone(),
    ))
    .bind(params.sequence)
    .bind(&params.ordering_key)
    .bind(action_name(params.action))
    .bind(params.now)
    .bind(RELEASED_KEY_HEADER)
    .execute_in(db)
    .await
    .map_err(translate)?;
    Ok(done.rows_affected())
}

/// See `queries/topic_stats_list.sql`.
pub(crate) async fn topic_stats(
    db: Db<'_>,
    table: &OutboxTable,
    params: &TopicStatsParams,
) -> Result<Vec<TopicStats>> {
    let rows = sqlx::query(AssertSqlSafe(
        Statements::for_table(table).topic_stats_list.clone(),
    ))
    .bind(&params.after)
    .bind(params.limit)
    .bind(params.published_since)
    .bind(params.now)
    .fetch_all_in(db)
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

/// See `queries/relay_lease_list.sql`.
pub(crate) async fn relay_leases(
    db: Db<'_>,
    table: &OutboxTable,
    params: &RelayLeaseListParams,
) -> Result<Vec<RelayLeases>> {
    let rows = sqlx::query(AssertSqlSafe(
        Statements::for_table(table).relay_lease_list.clone(),
    ))
    .bind(&params.after)
    .bind(params.limit)
    .bind(params.now)
    .fetch_all_in(db)
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
