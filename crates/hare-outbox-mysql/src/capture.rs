//! Change capture on MySQL: not written yet. Every call is refused with
//! [`Error::Configuration`] naming what is missing, so nothing is half-installed.
//!
//! What it will take (see `docs/architecture.md` § Adding a database backend): AFTER
//! INSERT/UPDATE/DELETE triggers generated from `information_schema.columns`; per-type JSON forms
//! (`JSON_OBJECT` keeps DECIMAL exact as text, DATETIME as ISO 8601, BLOB as base64 through
//! `TO_BASE64`); the 255-character key rule through `SHA2(…, 256)`; and a context that lasts one
//! transaction, which MySQL has no variable for (a session variable outlives the transaction on
//! a pooled connection, so it must carry the transaction's id). MySQL and MariaDB do not fire
//! triggers for changes made by cascading foreign-key actions: such rows would not be captured.

use hare_outbox_core::backend::{CaptureInstallParams, CaptureUninstallParams, ContextSetParams};
use hare_outbox_core::capture::CaptureStatus;
use hare_outbox_core::{Error, OutboxTable, Result};
use sqlx::mysql::{MySqlConnection, MySqlPool};

/// The refusal of every capture call.
fn not_yet(what: &str) -> Error {
    Error::configuration(format!(
        "change capture ({what}) is not available on MySQL/MariaDB yet; enqueue events from the application instead"
    ))
}

pub(crate) async fn install(
    _pool: &MySqlPool,
    _table: &OutboxTable,
    _params: &CaptureInstallParams,
) -> Result<()> {
    Err(not_yet("install"))
}

pub(crate) async fn uninstall(
    _pool: &MySqlPool,
    _table: &OutboxTable,
    _params: &CaptureUninstallParams,
) -> Result<bool> {
    Err(not_yet("uninstall"))
}

pub(crate) async fn status(_pool: &MySqlPool, _table: &OutboxTable) -> Result<Vec<CaptureStatus>> {
    Err(not_yet("status"))
}

pub(crate) async fn context_set(
    _conn: &mut MySqlConnection,
    _table: &OutboxTable,
    _params: &ContextSetParams,
) -> Result<()> {
    Err(not_yet("the transaction's context"))
}
