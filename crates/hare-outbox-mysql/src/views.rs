//! The operator's views on MySQL.

use hare_outbox_core::backend::{
    EventNeighbours, EventNeighboursParams, HeldKeyPage, KeyHeadParams, KeyHeldListParams,
    RelayLeaseListParams, RelayLeases, TopicStats, TopicStatsParams,
};
use hare_outbox_core::{Error, OutboxTable, Result};
use sqlx::mysql::MySqlPool;

pub(crate) async fn neighbours(
    _pool: &MySqlPool,
    _table: &OutboxTable,
    _params: &EventNeighboursParams,
) -> Result<EventNeighbours> {
    Err(Error::configuration("todo"))
}
pub(crate) async fn held_keys(
    _pool: &MySqlPool,
    _table: &OutboxTable,
    _params: &KeyHeldListParams,
) -> Result<HeldKeyPage> {
    Err(Error::configuration("todo"))
}
pub(crate) async fn key_head(
    _pool: &MySqlPool,
    _table: &OutboxTable,
    _params: &KeyHeadParams,
) -> Result<u64> {
    Err(Error::configuration("todo"))
}
pub(crate) async fn topic_stats(
    _pool: &MySqlPool,
    _table: &OutboxTable,
    _params: &TopicStatsParams,
) -> Result<Vec<TopicStats>> {
    Err(Error::configuration("todo"))
}
pub(crate) async fn relay_leases(
    _pool: &MySqlPool,
    _table: &OutboxTable,
    _params: &RelayLeaseListParams,
) -> Result<Vec<RelayLeases>> {
    Err(Error::configuration("todo"))
}
