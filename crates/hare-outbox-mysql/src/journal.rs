//! The journal's statements on MySQL.

use hare_outbox_core::journal::{EventQuery, TimelineBucket, TimelineParams};
use hare_outbox_core::{Error, OutboxEvent, OutboxTable, Result};
use sqlx::mysql::MySqlPool;

pub(crate) async fn list(
    _pool: &MySqlPool,
    _table: &OutboxTable,
    _query: &EventQuery,
) -> Result<Vec<OutboxEvent>> {
    Err(Error::configuration("todo"))
}

pub(crate) async fn timeline(
    _pool: &MySqlPool,
    _table: &OutboxTable,
    _params: &TimelineParams,
) -> Result<Vec<TimelineBucket>> {
    Err(Error::configuration("todo"))
}
