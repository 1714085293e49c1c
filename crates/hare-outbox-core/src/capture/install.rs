//! Installing, removing and inspecting a capture, and the capture context of a transaction:
//! the part of change capture that talks to the backend.

use serde_json::Map;

use super::{CaptureContext, CaptureDrift, CaptureStatus, ChangeCapture};
use crate::backend::CaptureBackend;
use crate::backend::params::{CaptureInstallParams, CaptureUninstallParams, ContextSetParams};
use crate::error::{Error, Result};
use crate::outbox::Outbox;

impl ChangeCapture {
    /// Installs (or replaces) the capture: creates, in one transaction, the trigger that writes
    /// an event per changed row of the table into `outbox`'s table. Idempotent: installing the
    /// same declaration again changes nothing; a changed declaration replaces the installed one.
    /// Run it after the outbox table exists ([`Outbox::migrate`]) and again after the table's
    /// columns change ([`ChangeCapture::status`] reports the drift).
    ///
    /// # Errors
    /// - [`Error::Configuration`] naming the value: anything [`validate`](Self::validate)
    ///   refuses; a table that does not exist or has no primary key; a column in `fields`,
    ///   `exclude` or `extra_from_row` that the table (or the outbox table) does not have;
    ///   capturing the outbox table itself (or any table shaped like an outbox); on SQLite, a
    ///   table in another database than the outbox. Nothing is installed.
    /// - [`Error::Unsupported`] on a backend without triggers.
    /// - [`Error::Database`] when the database refuses the DDL.
    pub async fn install<B: CaptureBackend>(&self, outbox: &Outbox<B>) -> Result<()> {
        let plan = self.validate()?;
        outbox
            .backend()
            .capture_install(outbox.table(), &CaptureInstallParams::new(plan))
            .await
    }

    /// Removes the capture of this declaration's table (its trigger and trigger function);
    /// returns whether one was installed. Events already written stay.
    ///
    /// # Errors
    /// [`Error::Unsupported`] on a backend without triggers; [`Error::Database`] when the
    /// database refuses the DDL.
    pub async fn uninstall<B: CaptureBackend>(&self, outbox: &Outbox<B>) -> Result<bool> {
        outbox
            .backend()
            .capture_uninstall(
                outbox.table(),
                &CaptureUninstallParams::new(self.schema.clone(), self.table.clone()),
            )
            .await
    }

    /// The installed capture of this declaration's table, or `None` when none is installed; its
    /// drift includes [`CaptureDrift::DeclarationChanged`] when the installed declaration differs
    /// from `self`.
    ///
    /// # Errors
    /// [`Error::Unsupported`] on a backend without triggers; [`Error::Database`] when the catalog
    /// cannot be read.
    pub async fn status<B: CaptureBackend>(
        &self,
        outbox: &Outbox<B>,
    ) -> Result<Option<CaptureStatus>> {
        let all = outbox.capture_status().await?;
        let mine = all.into_iter().find(|s| {
            s.table == self.table
                && (self.schema.is_none() || s.schema.as_deref() == self.schema.as_deref())
        });
        Ok(mine.map(|mut status| {
            if status.declaration.as_ref() != Some(self) {
                status.drift.push(CaptureDrift::DeclarationChanged);
            }
            status
        }))
    }
}

impl<B: CaptureBackend> Outbox<B> {
    /// Stores `context` as the context of the transaction on `conn` (`&mut *tx`): every event a
    /// capture trigger writes in that transaction carries its headers, merged into the event's
    /// headers — the author of a change, a trace id — and its payload keys, merged into the
    /// event's envelope next to `model`, `table`, `operation`, … (seed 001 § ChangeExtension:
    /// `headers` and `payload`). A [`serde_json::Value`] is taken as headers only
    /// (`json!({"author": "u-7"})`); a [`CaptureContext`] carries both. A later call replaces
    /// the whole context; [`clear_context`](Self::clear_context) removes it. Events written by
    /// [`enqueue`](Self::enqueue) are not affected. Triggers installed by a release before
    /// payload keys existed carry the headers only until installed again.
    ///
    /// Scope, per backend:
    /// - PostgreSQL: transaction-local settings (`set_config('hare_outbox.headers', …, true)`
    ///   and `hare_outbox.payload`): gone at COMMIT or ROLLBACK, undone by ROLLBACK TO
    ///   SAVEPOINT.
    /// - SQLite: a row of the `hare_outbox_context` table next to the outbox table (columns
    ///   `headers` and `payload`), valid only while SQLite's `defer_foreign_keys` flag is on,
    ///   which this call sets and SQLite itself switches off at COMMIT and ROLLBACK — so the
    ///   context ends with the transaction. The price: in that transaction foreign-key
    ///   violations are reported at COMMIT instead of at the statement. A transaction that turns
    ///   `defer_foreign_keys` on by itself, without setting a context, would see a context left
    ///   by an earlier transaction that did not clear it;
    ///   [`clear_context`](Self::clear_context) before COMMIT rules that out.
    ///
    /// Call it inside a transaction (`&mut *tx` of a sqlx transaction or an
    /// [`OutboxTransaction`](crate::OutboxTransaction)): outside one the context would end with
    /// this very call and no captured event would carry it, so that is refused.
    ///
    /// # Errors
    /// - [`Error::Validation`] as [`CaptureContext::validate`]: headers that are not a JSON
    ///   object or have an empty name; payload that is not a JSON object, has an empty key or a
    ///   key of the envelope's own ([`ENVELOPE_KEYS`](crate::capture::ENVELOPE_KEYS), named in
    ///   the message); nothing is stored and an earlier context stays.
    /// - [`Error::Validation`] on field `conn` when `conn` is not inside a transaction begun by
    ///   sqlx (`pool.begin()`, `conn.begin()`, [`Outbox::begin`](crate::Outbox::begin)).
    /// - [`Error::Database`] when the statement fails.
    pub async fn set_context(
        &self,
        conn: &mut B::Conn,
        context: impl Into<CaptureContext>,
    ) -> Result<()> {
        let (headers, payload) = context.into().validate()?;
        if !self.backend().in_transaction(conn) {
            return Err(Error::validation(
                "conn",
                "set_context needs a transaction: outside one the context ends with this call, \
                 so no captured event would carry it; call it on `&mut *tx` of a begun transaction",
            ));
        }
        self.backend()
            .context_set(
                conn,
                self.table(),
                &ContextSetParams::new(Some(headers), payload),
            )
            .await
    }

    /// Removes the transaction's context set by [`set_context`](Self::set_context): captured
    /// events written after it carry no context headers.
    ///
    /// # Errors
    /// [`Error::Unsupported`] on a backend without capture; [`Error::Database`] otherwise.
    pub async fn clear_context(&self, conn: &mut B::Conn) -> Result<()> {
        self.backend()
            .context_set(conn, self.table(), &ContextSetParams::new(None, Map::new()))
            .await
    }

    /// Every capture installed into this outbox table, with its drift (columns added, dropped
    /// or retyped since install, a changed primary key, a missing or disabled trigger, a dropped
    /// table), sorted by schema and table.
    ///
    /// # Errors
    /// [`Error::Unsupported`] on a backend without capture; [`Error::Database`] when the catalog
    /// cannot be read.
    pub async fn capture_status(&self) -> Result<Vec<CaptureStatus>> {
        let mut all = self.backend().capture_status(self.table()).await?;
        all.sort_by(|a, b| (&a.schema, &a.table).cmp(&(&b.schema, &b.table)));
        Ok(all)
    }
}
