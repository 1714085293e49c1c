//! Change capture on MySQL.

use hare_outbox_core::backend::{CaptureInstallParams, CaptureUninstallParams, ContextSetParams};
use hare_outbox_core::capture::CaptureStatus;
use hare_outbox_core::{Error, OutboxTable, Result};
use sqlx::mysql::{MySqlConnection, MySqlPool};

pub(crate) async fn install(
    _pool: &MySqlPool,
    _table: &OutboxTable,
    _params: &CaptureInstallParams,
) -> Result<()> {
    Err(Error::configuration("todo"))
}
pub(crate) async fn uninstall(
    _pool: &MySqlPool,
    _table: &OutboxTable,
    _params: &CaptureUninstallParams,
) -> Result<bool> {
    Err(Error::configuration("todo"))
}
pub(crate) async fn status(_pool: &MySqlPool, _table: &OutboxTable) -> Result<Vec<CaptureStatus>> {
    Err(Error::configuration("todo"))
}
pub(crate) async fn context_set(
    _conn: &mut MySqlConnection,
    _table: &OutboxTable,
    _params: &ContextSetParams,
) -> Result<()> {
    Err(Error::configuration("todo"))
}
