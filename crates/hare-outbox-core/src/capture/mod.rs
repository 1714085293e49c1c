//! Change capture by database triggers: the declaration, its validation, and the transaction
//! context that captured events carry as headers.
//!
//! A [`ChangeCapture`] names one table and says what its trigger writes. Installing it
//! ([`ChangeCapture::install`]) creates, in one transaction, a row trigger that writes one outbox
//! event for every inserted, updated or deleted row of the table — whoever writes it: the ORM,
//! hand-written SQL, a bulk statement, a cascade done by the database. The event is written in
//! the writing statement's transaction, while the row's lock is held, so the events of one row
//! are numbered in commit order, and a rollback (of the transaction or of a savepoint) takes the
//! events with it.
//!
//! The payload is an envelope:
//!
//! ```json
//! {"model": "library.Loan", "table": "loans", "operation": "updated", "pk": 7,
//!  "changed": ["status"], "before": {"status": "lent"}, "after": {"status": "returned"},
//!  "occurred_at": "2026-10-06T12:00:00+00:00"}
//! ```
//!
//! - `model`: the declaration's label;
//! - `table`: the captured table's name, without its schema (the journal's object column shows
//!   it: `loans #7`); captures installed before it was written lack it until installed again;
//! - `operation`: `inserted`, `updated` or `deleted`;
//! - `pk`: the primary key's value, or an object of its columns for a composite key;
//! - `changed`: for an update, the captured columns whose values differ (`IS DISTINCT FROM`), in
//!   table column order, possibly none (`[]`); `null` for an insert or a delete;
//! - `before` / `after`: per [`ChangePayload`];
//! - `occurred_at`: when the writing statement started, ISO 8601 in UTC (`+00:00`), with six
//!   fractional digits unless they are all zero.
//!
//! Every row a statement touches writes an event, also an update that changed none of the
//! captured columns (`changed` is then `[]`): `fields` and `exclude` narrow what an event holds,
//! not which rows are captured. [`ChangeCapture::skip_unchanged`] writes nothing for such an
//! update instead.
//!
//! A trigger cannot call Rust, so what hare's `extend` adds (seed 001 § ChangeExtension) comes
//! from the database: [`Outbox::set_context`](crate::Outbox::set_context) stores a
//! [`CaptureContext`] for the current transaction — headers every captured event of that
//! transaction carries (the author shown in the journal's "who" column) and payload keys merged
//! into every envelope next to the keys above (recipients, a scope) —, and
//! [`ChangeCapture::with_extra_from_row`] copies a row column (a tenant) into an outbox column.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::message::MAX_KEY_CHARS;

mod install;

/// Columns of the outbox table that enqueue and the relay own; `extra_from_row` may not write
/// them.
pub const OUTBOX_OWNED_COLUMNS: &[&str] = &[
    "sequence",
    "id",
    "topic",
    "payload",
    "headers",
    "ordering_key",
    "idempotency_key",
    "created_at",
    "attempts",
    "last_error",
    "next_attempt_at",
    "lease_until",
    "leased_by",
    "published_at",
    "dead_lettered_at",
];

/// The keys of the envelope a capture trigger writes, the same in every [`ChangePayload`] mode.
/// A [`CaptureContext`]'s payload may add keys to the envelope, never one of these (seed 001
/// § ChangeExtension: "not its own").
pub const ENVELOPE_KEYS: &[&str] = &[
    "model",
    "table",
    "operation",
    "pk",
    "changed",
    "before",
    "after",
    "occurred_at",
];

/// What [`Outbox::set_context`](crate::Outbox::set_context) stores for one transaction: the
/// headers every event a capture trigger writes in it carries, and the keys merged into each
/// such event's envelope (the trigger-side form of seed 001 § ChangeExtension: `headers` and
/// `payload`; `extra_field_values` is [`ChangeCapture::with_extra_from_row`]).
///
/// Both are JSON objects, empty by default. A `serde_json::Value` converts into the headers of
/// a context (`outbox.set_context(&mut *tx, json!({"author": "u-7"}))`).
///
/// ```
/// use hare_outbox_core::capture::CaptureContext;
/// use serde_json::json;
///
/// let context = CaptureContext::new()
///     .with_headers(json!({"author": "u-7"}))
///     .with_payload(json!({"recipients": ["ops@example.com"]}));
/// assert!(context.validate().is_ok());
///
/// // The envelope's own keys cannot be replaced.
/// let err = CaptureContext::new().with_payload(json!({"before": {}})).validate().unwrap_err();
/// assert!(err.to_string().contains("\"before\""));
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CaptureContext {
    headers: Value,
    payload: Value,
}

impl CaptureContext {
    /// An empty context: no headers, no payload keys.
    pub fn new() -> Self {
        CaptureContext {
            headers: Value::Object(Map::new()),
            payload: Value::Object(Map::new()),
        }
    }

    /// Sets the headers: a JSON object of header names (non-empty text) and values. Checked by
    /// [`validate`](Self::validate).
    #[must_use]
    pub fn with_headers(mut self, headers: Value) -> Self {
        self.headers = headers;
        self
    }

    /// Sets the payload keys merged into every captured envelope of the transaction: a JSON
    /// object whose keys are non-empty and none of [`ENVELOPE_KEYS`]. Values are kept as given
    /// (nulls and nested objects included). Checked by [`validate`](Self::validate).
    #[must_use]
    pub fn with_payload(mut self, payload: Value) -> Self {
        self.payload = payload;
        self
    }

    /// The headers as set.
    pub fn headers(&self) -> &Value {
        &self.headers
    }

    /// The payload keys as set.
    pub fn payload(&self) -> &Value {
        &self.payload
    }

    /// Checks the context and returns its headers and payload keys.
    ///
    /// # Errors
    /// [`Error::Validation`] on field `headers` when the headers are not a JSON object or a
    /// name is empty; on field `payload` when the payload is not a JSON object, a key is empty,
    /// or a key is one of [`ENVELOPE_KEYS`] (the error names the key).
    pub fn validate(&self) -> Result<(Map<String, Value>, Map<String, Value>)> {
        let Value::Object(headers) = &self.headers else {
            return Err(Error::validation(
                "headers",
                format!(
                    "{} is not a JSON object of header names and values",
                    self.headers
                ),
            ));
        };
        if headers.keys().any(|name| name.trim().is_empty()) {
            return Err(Error::validation(
                "headers",
                "a header name is empty; names must be non-empty text",
            ));
        }
        let Value::Object(payload) = &self.payload else {
            return Err(Error::validation(
                "payload",
                format!(
                    "{} is not a JSON object of keys to add to the captured envelope",
                    self.payload
                ),
            ));
        };
        for key in payload.keys() {
            if key.trim().is_empty() {
                return Err(Error::validation(
                    "payload",
                    "a key is empty; keys must be non-empty text",
                ));
            }
            if ENVELOPE_KEYS.contains(&key.as_str()) {
                return Err(Error::validation(
                    "payload",
                    format!(
                        "key {key:?} is one of the envelope's own keys ({}); a context adds keys, it does not replace them",
                        ENVELOPE_KEYS.join(", ")
                    ),
                ));
            }
        }
        Ok((headers.clone(), payload.clone()))
    }
}

impl From<Value> for CaptureContext {
    /// A context of these headers and no payload keys.
    fn from(headers: Value) -> Self {
        CaptureContext::new().with_headers(headers)
    }
}

/// The topic template used when none is declared: `{app}.{model}.{operation}`, lower-cased
/// (`library.loan.updated`). A label without an app part (no dot) uses `{model}.{operation}`.
pub const DEFAULT_TOPIC: &str = "{app}.{model}.{operation}";

/// The ordering-key template used when none is declared: `{label}:{pk}`, so the events of one
/// row are delivered in order.
pub const DEFAULT_ORDERING_KEY: &str = "{label}:{pk}";

/// The channel [`ChangeCapture::notify`] uses when a configuration file says `notify = true`:
/// `hare_outbox`, the default channel of the PostgreSQL LISTEN/NOTIFY wake-up.
pub const DEFAULT_NOTIFY_CHANNEL: &str = "hare_outbox";

/// Characters of the start kept when an ordering key is longer than 255 characters: the key
/// becomes those characters, `#` and the 64 hex digits of the SHA-256 of the whole key (UTF-8),
/// 255 characters in all.
pub const LONG_KEY_PREFIX_CHARS: usize = MAX_KEY_CHARS - 65;

/// A row operation a capture writes events for.
///
/// Written in configuration files as `"insert"`, `"update"`, `"delete"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RowOperation {
    /// An inserted row: the event's operation is `inserted`.
    #[serde(alias = "INSERT", alias = "inserted")]
    Insert,
    /// An updated row: the event's operation is `updated`.
    #[serde(alias = "UPDATE", alias = "updated")]
    Update,
    /// A deleted row: the event's operation is `deleted`.
    #[serde(alias = "DELETE", alias = "deleted")]
    Delete,
}

impl RowOperation {
    /// Every operation, in the order events name them.
    pub const ALL: [RowOperation; 3] = [
        RowOperation::Insert,
        RowOperation::Update,
        RowOperation::Delete,
    ];

    /// The operation as the envelope and the `{operation}` placeholder write it: `inserted`,
    /// `updated`, `deleted`.
    pub fn past_tense(self) -> &'static str {
        match self {
            RowOperation::Insert => "inserted",
            RowOperation::Update => "updated",
            RowOperation::Delete => "deleted",
        }
    }

    /// The SQL keyword: `INSERT`, `UPDATE`, `DELETE`.
    pub fn sql_keyword(self) -> &'static str {
        match self {
            RowOperation::Insert => "INSERT",
            RowOperation::Update => "UPDATE",
            RowOperation::Delete => "DELETE",
        }
    }
}

impl fmt::Display for RowOperation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RowOperation::Insert => "insert",
            RowOperation::Update => "update",
            RowOperation::Delete => "delete",
        })
    }
}

/// What an event holds of its row.
///
/// Written in configuration files as `"keys"`, `"after"`, `"before_and_after"`, `"changes"` (the
/// seed's upper-case names are accepted too). Defaults to [`ChangePayload::After`].
///
/// | mode | insert | update | delete |
/// |---|---|---|---|
/// | `Keys` | `before`, `after` null | both null | both null |
/// | `After` | `after` = new row | `after` = new row | `before` = old row |
/// | `BeforeAndAfter` | `after` = new row | both rows | `before` = old row |
/// | `Changes` | `after` = new row | both, limited to `changed` | `before` = old row |
///
/// `Changes` is the journal form: `before` is the "from" of each changed column.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangePayload {
    /// Only the key: `before` and `after` are null.
    #[serde(alias = "KEYS")]
    Keys,
    /// The row as the write left it; for a delete, the row as it was (in `before`).
    #[default]
    #[serde(alias = "AFTER")]
    After,
    /// Both rows; `before` is null for an insert, `after` for a delete.
    #[serde(alias = "BEFORE_AND_AFTER")]
    BeforeAndAfter,
    /// Like `BeforeAndAfter`, with an update's `before` and `after` limited to the changed
    /// columns.
    #[serde(alias = "CHANGES")]
    Changes,
}

/// Declares the capture of one table: which operations write events, what they hold, their
/// topic and ordering key.
///
/// Built in code with [`ChangeCapture::new`] and the `with_*` methods, or read from a
/// configuration table (every field has a serde form; unknown keys are refused):
///
/// ```toml
/// table = "sales_orders"          # required
/// schema = "erp"                  # optional; the search path / `main` otherwise
/// label = "erp.sales_order"       # default: the table name
/// operations = ["insert", "update", "delete"]   # default: all three
/// payload = "changes"             # keys | after | before_and_after | changes; default: after
/// exclude = ["updated_at"]        # or fields = [...]; not both
/// topic = "doc.{operation}"       # default: "{app}.{model}.{operation}" lower-cased
/// ordering_key = "{label}:{pk}"   # default; false = unordered
/// extra_from_row = { tenant_id = "tenant_id" }   # outbox column = row column
/// ```
///
/// [`validate`](Self::validate) checks what needs no database (placeholders, fields with
/// exclude, lengths); [`install`](Self::install) checks the rest against the catalog (unknown
/// column, the outbox table itself, a table without a primary key) before anything is created.
///
/// ```
/// use hare_outbox_core::capture::{ChangeCapture, ChangePayload};
///
/// let capture = ChangeCapture::new("loans")
///     .with_label("library.Loan")
///     .with_payload(ChangePayload::BeforeAndAfter)
///     .with_exclude(["internal_note"]);
/// let plan = capture.validate().unwrap();
/// assert_eq!(plan.topic(hare_outbox_core::capture::RowOperation::Update), Some("library.loan.updated"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ChangeCapture {
    /// The captured table's name, unquoted (it is quoted in every statement).
    pub table: String,
    /// The table's schema (PostgreSQL) or attached database (SQLite). Defaults to none: the
    /// search path on PostgreSQL, `main` on SQLite.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    /// The model label, `app.Model` (`library.Loan`): the envelope's `model`, and `{app}` (before
    /// the first dot) and `{model}` (after it) in templates. Defaults to the table name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The operations that write events. At least one. Defaults to insert, update and delete.
    #[serde(default = "default_operations")]
    pub operations: Vec<RowOperation>,
    /// What each event holds of its row. Defaults to [`ChangePayload::After`].
    #[serde(default)]
    pub payload: ChangePayload,
    /// The columns events hold; `None` = every column. Not together with `exclude`. The primary
    /// key is always in `pk`. Defaults to `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fields: Option<Vec<String>>,
    /// Columns left out of the default (every column). Not together with `fields`. Defaults to
    /// none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
    /// The topic template, from `{app}`, `{model}`, `{table}` and `{operation}` (`inserted`,
    /// `updated`, `deleted`); `{{` and `}}` are literal braces. `None` = [`DEFAULT_TOPIC`],
    /// lower-cased. Defaults to `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    /// The ordering-key template, from `{label}`, `{pk}` (the key's parts joined by `:`),
    /// `{app}`, `{model}` and `{table}`; `None` = unordered (`false` in a configuration file).
    /// A key longer than 255 characters keeps its first 190, then `#` and the SHA-256 hex of the
    /// whole key. Defaults to [`DEFAULT_ORDERING_KEY`].
    #[serde(default = "default_ordering_key", with = "ordering_key_serde")]
    pub ordering_key: Option<String>,
    /// Outbox columns filled from the row: outbox column → row column (the row as written; the
    /// old row for a delete). The outbox column must exist and may not be one of
    /// [`OUTBOX_OWNED_COLUMNS`]. Defaults to none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra_from_row: BTreeMap<String, String>,
    /// PostgreSQL only: the LISTEN/NOTIFY channel the trigger notifies, with each event's topic as
    /// payload, inside the writing transaction — so a relay waiting on a
    /// `ListenNotifyWakeup` of that channel polls at once after the commit (and never for a
    /// rollback), also for raw SQL. PostgreSQL folds identical notifications of one transaction
    /// into one, so a bulk statement sends one per topic. `true` in a configuration file means
    /// [`DEFAULT_NOTIFY_CHANNEL`], `false` none.
    ///
    /// Off by default: PostgreSQL serializes the commits of notifying transactions, which costs
    /// concurrent writers a large share of their throughput; without
    /// it captured events are found by the relay's next poll. Defaults to `None`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "notify_serde"
    )]
    pub notify: Option<String>,
    /// Whether an UPDATE that leaves every captured column as it was (a column set to its own
    /// value, or only columns outside `fields` / in `exclude` changed) writes no event. Off by
    /// default: every row a statement touches writes an event, `changed` listing the captured
    /// columns that differ (possibly none) — `fields` and `exclude` narrow what an event holds,
    /// not which rows are captured. Turn it on for journal-style consumers that only care about
    /// visible changes. Defaults to `false`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skip_unchanged: bool,
}

/// `notify` in configuration files: a channel name, `true` for [`DEFAULT_NOTIFY_CHANNEL`] or
/// `false` for none.
mod notify_serde {
    use super::*;

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Form {
        Channel(String),
        Flag(bool),
    }

    pub(super) fn serialize<S: Serializer>(
        value: &Option<String>,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        match value {
            Some(channel) => serializer.serialize_str(channel),
            None => serializer.serialize_bool(false),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<Option<String>, D::Error> {
        match Option::<Form>::deserialize(deserializer)? {
            Some(Form::Channel(channel)) => Ok(Some(channel)),
            Some(Form::Flag(true)) => Ok(Some(DEFAULT_NOTIFY_CHANNEL.to_owned())),
            Some(Form::Flag(false)) | None => Ok(None),
        }
    }
}

fn default_operations() -> Vec<RowOperation> {
    RowOperation::ALL.to_vec()
}

fn default_ordering_key() -> Option<String> {
    Some(DEFAULT_ORDERING_KEY.to_owned())
}

/// `ordering_key` in configuration files: a template string, or `false` for none (TOML has no
/// null).
mod ordering_key_serde {
    use super::*;

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Form {
        Template(String),
        Flag(bool),
    }

    pub(super) fn serialize<S: Serializer>(
        value: &Option<String>,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        match value {
            Some(template) => serializer.serialize_str(template),
            None => serializer.serialize_bool(false),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<Option<String>, D::Error> {
        match Option::<Form>::deserialize(deserializer)? {
            Some(Form::Template(template)) => Ok(Some(template)),
            Some(Form::Flag(false)) | None => Ok(None),
            Some(Form::Flag(true)) => Ok(default_ordering_key()),
        }
    }
}

impl ChangeCapture {
    /// A capture of `table` with every default: all operations, [`ChangePayload::After`], every
    /// column, the default topic and ordering key, the table name as label.
    pub fn new(table: impl Into<String>) -> Self {
        ChangeCapture {
            table: table.into(),
            schema: None,
            label: None,
            operations: default_operations(),
            payload: ChangePayload::default(),
            fields: None,
            exclude: Vec::new(),
            topic: None,
            ordering_key: default_ordering_key(),
            extra_from_row: BTreeMap::new(),
            notify: None,
            skip_unchanged: false,
        }
    }

    /// Sets [`ChangeCapture::skip_unchanged`]: `true` writes no event for an UPDATE that changed
    /// no captured column.
    pub fn with_skip_unchanged(mut self, skip: bool) -> Self {
        self.skip_unchanged = skip;
        self
    }

    /// Sets [`ChangeCapture::notify`]: the LISTEN/NOTIFY channel the trigger notifies (PostgreSQL
    /// only), or `None` for no NOTIFY.
    pub fn with_notify(mut self, channel: Option<impl Into<String>>) -> Self {
        self.notify = channel.map(Into::into);
        self
    }

    /// Sets [`ChangeCapture::schema`].
    pub fn with_schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = Some(schema.into());
        self
    }

    /// Sets [`ChangeCapture::label`].
    pub fn with_label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// Sets [`ChangeCapture::operations`].
    pub fn with_operations(mut self, operations: impl IntoIterator<Item = RowOperation>) -> Self {
        self.operations = operations.into_iter().collect();
        self
    }

    /// Sets [`ChangeCapture::payload`].
    pub fn with_payload(mut self, payload: ChangePayload) -> Self {
        self.payload = payload;
        self
    }

    /// Sets [`ChangeCapture::fields`] and clears `exclude` (as hare's `replace` does).
    pub fn with_fields<S: Into<String>>(mut self, fields: impl IntoIterator<Item = S>) -> Self {
        self.fields = Some(fields.into_iter().map(Into::into).collect());
        self.exclude.clear();
        self
    }

    /// Sets [`ChangeCapture::exclude`] and clears `fields` (as hare's `replace` does).
    pub fn with_exclude<S: Into<String>>(mut self, exclude: impl IntoIterator<Item = S>) -> Self {
        self.exclude = exclude.into_iter().map(Into::into).collect();
        self.fields = None;
        self
    }

    /// Sets [`ChangeCapture::topic`].
    pub fn with_topic(mut self, template: impl Into<String>) -> Self {
        self.topic = Some(template.into());
        self
    }

    /// Sets [`ChangeCapture::ordering_key`]; `None` = unordered.
    pub fn with_ordering_key(mut self, template: Option<impl Into<String>>) -> Self {
        self.ordering_key = template.map(Into::into);
        self
    }

    /// Adds to [`ChangeCapture::extra_from_row`]: `outbox_column` of every event gets the row's
    /// `row_column` (a tenant id, say).
    pub fn with_extra_from_row(
        mut self,
        outbox_column: impl Into<String>,
        row_column: impl Into<String>,
    ) -> Self {
        self.extra_from_row
            .insert(outbox_column.into(), row_column.into());
        self
    }

    /// A copy with some options replaced, given in their configuration form (a JSON object with
    /// the keys of the serde form; hare's `replace(**options)`). `fields` replaces `exclude`
    /// and the other way round; `self` is unchanged. Useful to derive the capture of one table
    /// from a shared declaration: `base.replace(json!({"table": "accounts", "exclude": ["token"]}))`.
    ///
    /// # Errors
    /// [`Error::Configuration`] naming the option when `options` is not an object, names an
    /// unknown option or gives a value of the wrong form.
    pub fn replace(&self, options: Value) -> Result<Self> {
        let Value::Object(options) = options else {
            return Err(Error::configuration(format!(
                "change capture replace: {options} is not an object of options"
            )));
        };
        let mut merged = match serde_json::to_value(self) {
            Ok(Value::Object(map)) => map,
            _ => Map::new(),
        };
        if options.contains_key("fields") {
            merged.remove("exclude");
        }
        if options.contains_key("exclude") {
            merged.remove("fields");
        }
        for (name, value) in options {
            merged.insert(name, value);
        }
        serde_json::from_value(Value::Object(merged))
            .map_err(|e| Error::configuration(format!("change capture replace: {e}")))
    }

    /// The label, or the table name when none is set.
    pub fn effective_label(&self) -> &str {
        self.label.as_deref().unwrap_or(&self.table)
    }

    /// Checks everything that needs no database and returns the plan a backend installs: the
    /// rendered topic of each operation and the parsed ordering-key template.
    ///
    /// # Errors
    /// [`Error::Configuration`] naming the value and what is allowed: an empty table, schema,
    /// label or column name, or one with a NUL character; no operation or a repeated one;
    /// `fields` together with `exclude`; an empty or repeated field; a template with an unknown
    /// placeholder or an unmatched brace; `{operation}` in the ordering key; a topic that renders
    /// empty or longer than 255 characters; an `extra_from_row` target that enqueue or the relay
    /// owns; a `notify` channel that is empty, longer than 63 bytes or holds NUL.
    pub fn validate(&self) -> Result<CapturePlan> {
        let what = self.describe();
        check_name(&what, "table", &self.table)?;
        if let Some(schema) = &self.schema {
            check_name(&what, "schema", schema)?;
        }
        let label = self.effective_label().to_owned();
        check_name(&what, "label", &label)?;
        if label.chars().count() > MAX_KEY_CHARS {
            return Err(Error::configuration(format!(
                "{what}: label {label:?} has more than {MAX_KEY_CHARS} characters"
            )));
        }
        if self.operations.is_empty() {
            return Err(Error::configuration(format!(
                "{what}: operations is empty; name at least one of insert, update, delete"
            )));
        }
        let mut operations = Vec::new();
        for op in &self.operations {
            if operations.contains(op) {
                return Err(Error::configuration(format!(
                    "{what}: operation {op} is named twice"
                )));
            }
            operations.push(*op);
        }
        operations.sort();
        if let Some(fields) = &self.fields {
            if !self.exclude.is_empty() {
                return Err(Error::configuration(format!(
                    "{what}: fields and exclude are both set; set one of them"
                )));
            }
            if fields.is_empty() {
                return Err(Error::configuration(format!(
                    "{what}: fields is empty; name at least one column, or use payload = \"keys\""
                )));
            }
            check_columns(&what, "fields", fields)?;
        }
        check_columns(&what, "exclude", &self.exclude)?;
        for (outbox_column, row_column) in &self.extra_from_row {
            check_name(&what, "extra_from_row outbox column", outbox_column)?;
            check_name(&what, "extra_from_row row column", row_column)?;
            if OUTBOX_OWNED_COLUMNS.contains(&outbox_column.as_str()) {
                return Err(Error::configuration(format!(
                    "{what}: extra_from_row may not write outbox column {outbox_column:?}, which enqueue and the relay own; name an extra column of the outbox table"
                )));
            }
        }

        if let Some(channel) = &self.notify
            && (channel.is_empty() || channel.len() > 63 || channel.contains('\0'))
        {
            return Err(Error::configuration(format!(
                "{what}: notify channel {channel:?} is not allowed; use a PostgreSQL channel name of 1 to 63 bytes, or true for {DEFAULT_NOTIFY_CHANNEL:?}"
            )));
        }

        let (app, model) = match label.split_once('.') {
            Some((app, model)) => (app.to_owned(), model.to_owned()),
            None => (String::new(), label.clone()),
        };
        let values = |p: Placeholder, op: Option<RowOperation>| -> String {
            match p {
                Placeholder::App => app.clone(),
                Placeholder::Model => model.clone(),
                Placeholder::Table => self.table.clone(),
                Placeholder::Label => label.clone(),
                Placeholder::Operation => op
                    .map(RowOperation::past_tense)
                    .unwrap_or_default()
                    .to_owned(),
                Placeholder::Pk => String::new(),
            }
        };

        let (topic_template, lower) = match &self.topic {
            Some(t) => (t.clone(), false),
            None if app.is_empty() => ("{model}.{operation}".to_owned(), true),
            None => (DEFAULT_TOPIC.to_owned(), true),
        };
        let topic_parts = parse_template(&what, "topic", &topic_template, TOPIC_PLACEHOLDERS)?;
        let mut topics = Vec::new();
        for op in &operations {
            let mut topic = String::new();
            for part in &topic_parts {
                match part {
                    TemplatePart::Text(text) => topic.push_str(text),
                    TemplatePart::Placeholder(p) => topic.push_str(&values(*p, Some(*op))),
                }
            }
            if lower {
                topic = topic.to_lowercase();
            }
            let chars = topic.chars().count();
            if topic.trim().is_empty() || chars > MAX_KEY_CHARS || topic.contains('\0') {
                return Err(Error::configuration(format!(
                    "{what}: topic template {topic_template:?} renders {topic:?} for {op}; a topic must have 1 to {MAX_KEY_CHARS} characters and no NUL"
                )));
            }
            topics.push((*op, topic));
        }

        let ordering_key = match &self.ordering_key {
            None => None,
            Some(template) => {
                let parts = parse_template(&what, "ordering_key", template, KEY_PLACEHOLDERS)?;
                let mut key = Vec::new();
                for part in parts {
                    let text = match part {
                        TemplatePart::Placeholder(Placeholder::Pk) => {
                            key.push(KeyPart::Pk);
                            continue;
                        }
                        TemplatePart::Placeholder(p) => values(p, None),
                        TemplatePart::Text(text) => text,
                    };
                    if text.contains('\0') {
                        return Err(Error::configuration(format!(
                            "{what}: ordering_key template {template:?} contains a NUL character"
                        )));
                    }
                    match key.last_mut() {
                        Some(KeyPart::Text(previous)) => previous.push_str(&text),
                        _ => key.push(KeyPart::Text(text)),
                    }
                }
                key.retain(|part| !matches!(part, KeyPart::Text(t) if t.is_empty()));
                if key.is_empty() {
                    return Err(Error::configuration(format!(
                        "{what}: ordering_key template {template:?} renders an empty key; use false for unordered events"
                    )));
                }
                Some(key)
            }
        };

        Ok(CapturePlan {
            declaration: self.clone(),
            label,
            operations,
            topics,
            ordering_key,
        })
    }

    fn describe(&self) -> String {
        match &self.schema {
            Some(schema) => format!("change capture of {schema:?}.{:?}", self.table),
            None => format!("change capture of {:?}", self.table),
        }
    }
}

fn check_name(what: &str, field: &str, value: &str) -> Result<()> {
    if value.is_empty() || value.contains('\0') {
        return Err(Error::configuration(format!(
            "{what}: {field} {value:?} is not allowed; use non-empty text without NUL characters"
        )));
    }
    Ok(())
}

fn check_columns(what: &str, field: &str, columns: &[String]) -> Result<()> {
    for (i, column) in columns.iter().enumerate() {
        check_name(what, field, column)?;
        if columns[..i].contains(column) {
            return Err(Error::configuration(format!(
                "{what}: {field} names column {column:?} twice"
            )));
        }
    }
    Ok(())
}

/// A placeholder of a topic or ordering-key template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placeholder {
    App,
    Model,
    Table,
    Operation,
    Label,
    Pk,
}

const TOPIC_PLACEHOLDERS: &[(&str, Placeholder)] = &[
    ("app", Placeholder::App),
    ("model", Placeholder::Model),
    ("table", Placeholder::Table),
    ("operation", Placeholder::Operation),
];

const KEY_PLACEHOLDERS: &[(&str, Placeholder)] = &[
    ("label", Placeholder::Label),
    ("pk", Placeholder::Pk),
    ("app", Placeholder::App),
    ("model", Placeholder::Model),
    ("table", Placeholder::Table),
];

#[derive(Debug, PartialEq)]
enum TemplatePart {
    Text(String),
    Placeholder(Placeholder),
}

fn parse_template(
    what: &str,
    field: &str,
    template: &str,
    allowed: &[(&str, Placeholder)],
) -> Result<Vec<TemplatePart>> {
    let names = || {
        allowed
            .iter()
            .map(|(n, _)| format!("{{{n}}}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut parts = Vec::new();
    let mut text = String::new();
    let mut chars = template.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                text.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                text.push('}');
            }
            '{' => {
                let mut name = String::new();
                let mut closed = false;
                for c in chars.by_ref() {
                    if c == '}' {
                        closed = true;
                        break;
                    }
                    name.push(c);
                }
                if !closed {
                    return Err(Error::configuration(format!(
                        "{what}: {field} template {template:?} has an unclosed `{{`; write `{{{{` for a literal brace"
                    )));
                }
                let Some((_, p)) = allowed.iter().find(|(n, _)| *n == name) else {
                    return Err(Error::configuration(format!(
                        "{what}: {field} template {template:?} has unknown placeholder {{{name}}}; allowed: {}",
                        names()
                    )));
                };
                if !text.is_empty() {
                    parts.push(TemplatePart::Text(std::mem::take(&mut text)));
                }
                parts.push(TemplatePart::Placeholder(*p));
            }
            '}' => {
                return Err(Error::configuration(format!(
                    "{what}: {field} template {template:?} has an unmatched `}}`; write `}}}}` for a literal brace"
                )));
            }
            c => text.push(c),
        }
    }
    if !text.is_empty() {
        parts.push(TemplatePart::Text(text));
    }
    Ok(parts)
}

/// One part of a parsed ordering-key template.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyPart {
    /// Fixed text (the rendered `{label}`, `{app}`, `{model}`, `{table}` and literal text).
    Text(String),
    /// The row's primary key: its parts' text forms joined by `:`.
    Pk,
}

/// A validated declaration, ready for a backend to install ([`ChangeCapture::validate`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct CapturePlan {
    /// The declaration as given (stored with the installed capture, for status).
    pub declaration: ChangeCapture,
    /// The effective label (the envelope's `model`).
    pub label: String,
    /// The captured operations, in insert, update, delete order.
    pub operations: Vec<RowOperation>,
    /// The rendered topic of each captured operation.
    pub topics: Vec<(RowOperation, String)>,
    /// The parsed ordering key; `None` = unordered.
    pub ordering_key: Option<Vec<KeyPart>>,
}

impl CapturePlan {
    /// The topic of `operation`'s events, or `None` when it is not captured.
    pub fn topic(&self, operation: RowOperation) -> Option<&str> {
        self.topics
            .iter()
            .find(|(op, _)| *op == operation)
            .map(|(_, t)| t.as_str())
    }

    /// Whether `operation` is captured.
    pub fn captures(&self, operation: RowOperation) -> bool {
        self.operations.contains(&operation)
    }
}

/// One column of a captured table as recorded at install: its name and database type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureColumn {
    /// The column name.
    pub name: String,
    /// The type as the catalog spells it (`numeric(10,2)`, `TEXT`).
    #[serde(rename = "type")]
    pub type_name: String,
}

impl CaptureColumn {
    /// A column `name` of type `type_name`.
    pub fn new(name: impl Into<String>, type_name: impl Into<String>) -> Self {
        CaptureColumn {
            name: name.into(),
            type_name: type_name.into(),
        }
    }
}

/// What a backend stores with an installed capture (as the trigger function's comment on
/// PostgreSQL, inside the trigger's text on SQLite) so that status can report drift. Internal to
/// backends; its JSON form may change between releases.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CaptureRecord {
    /// The outbox table the events go to, schema-qualified as resolved at install.
    pub outbox: String,
    /// The captured table's schema as resolved at install.
    pub schema: String,
    /// The captured table.
    pub table: String,
    /// Every column of the table at install, in table order.
    pub columns: Vec<CaptureColumn>,
    /// The primary key's columns at install.
    pub primary_key: Vec<String>,
    /// The declaration installed.
    pub declaration: ChangeCapture,
}

impl CaptureRecord {
    /// A record of an install.
    pub fn new(
        outbox: String,
        schema: String,
        table: String,
        columns: Vec<CaptureColumn>,
        primary_key: Vec<String>,
        declaration: ChangeCapture,
    ) -> Self {
        CaptureRecord {
            outbox,
            schema,
            table,
            columns,
            primary_key,
            declaration,
        }
    }

    /// The drift between this record and the table's current columns and primary key: columns
    /// added, dropped or retyped since install, a changed primary key.
    pub fn drift(&self, columns: &[CaptureColumn], primary_key: &[String]) -> Vec<CaptureDrift> {
        let mut drift = Vec::new();
        for old in &self.columns {
            match columns.iter().find(|c| c.name == old.name) {
                None => drift.push(CaptureDrift::ColumnDropped {
                    column: old.name.clone(),
                }),
                Some(now) if now.type_name != old.type_name => {
                    drift.push(CaptureDrift::ColumnTypeChanged {
                        column: old.name.clone(),
                        installed: old.type_name.clone(),
                        current: now.type_name.clone(),
                    })
                }
                Some(_) => {}
            }
        }
        for now in columns {
            if !self.columns.iter().any(|c| c.name == now.name) {
                drift.push(CaptureDrift::ColumnAdded {
                    column: now.name.clone(),
                });
            }
        }
        if self.primary_key != primary_key {
            drift.push(CaptureDrift::PrimaryKeyChanged {
                installed: self.primary_key.clone(),
                current: primary_key.to_vec(),
            });
        }
        drift
    }

    /// The record as the JSON text backends store.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Parses stored JSON text; `None` when it is not a record.
    pub fn from_json(text: &str) -> Option<Self> {
        serde_json::from_str(text).ok()
    }
}

/// How an installed capture differs from its table or its declaration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum CaptureDrift {
    /// The captured table no longer exists.
    TableMissing,
    /// The trigger function exists but its trigger on the table is gone.
    TriggerMissing,
    /// The trigger exists but is disabled (`ALTER TABLE … DISABLE TRIGGER`).
    TriggerDisabled,
    /// A column was added after install: the trigger does not capture it. Install again.
    ColumnAdded {
        /// The new column.
        column: String,
    },
    /// A column the trigger reads was dropped: writes to the table fail until installed again.
    ColumnDropped {
        /// The dropped column.
        column: String,
    },
    /// A column's type changed after install: its JSON form may be wrong. Install again.
    ColumnTypeChanged {
        /// The column.
        column: String,
        /// Its type at install.
        installed: String,
        /// Its type now.
        current: String,
    },
    /// The primary key's columns changed after install. Install again.
    PrimaryKeyChanged {
        /// The key at install.
        installed: Vec<String>,
        /// The key now.
        current: Vec<String>,
    },
    /// The installed declaration differs from the one asked about. Install again.
    DeclarationChanged,
}

impl fmt::Display for CaptureDrift {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CaptureDrift::TableMissing => f.write_str("the table no longer exists"),
            CaptureDrift::TriggerMissing => f.write_str("the trigger is missing"),
            CaptureDrift::TriggerDisabled => f.write_str("the trigger is disabled"),
            CaptureDrift::ColumnAdded { column } => {
                write!(
                    f,
                    "column {column:?} was added after install and is not captured"
                )
            }
            CaptureDrift::ColumnDropped { column } => write!(
                f,
                "column {column:?} was dropped after install; writes fail until installed again"
            ),
            CaptureDrift::ColumnTypeChanged {
                column,
                installed,
                current,
            } => write!(
                f,
                "column {column:?} changed type from {installed} to {current} after install"
            ),
            CaptureDrift::PrimaryKeyChanged { installed, current } => write!(
                f,
                "the primary key changed from {installed:?} to {current:?} after install"
            ),
            CaptureDrift::DeclarationChanged => {
                f.write_str("the installed declaration differs from this one")
            }
        }
    }
}

/// One installed capture writing into an outbox table, as [`Outbox::capture_status`](crate::Outbox::capture_status) reports it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct CaptureStatus {
    /// The captured table's schema (or attached database), as resolved at install.
    pub schema: Option<String>,
    /// The captured table.
    pub table: String,
    /// The declaration installed, when it could be read back.
    pub declaration: Option<ChangeCapture>,
    /// The table's columns at install.
    pub columns: Vec<CaptureColumn>,
    /// Differences found now; empty = up to date.
    pub drift: Vec<CaptureDrift>,
}

impl CaptureStatus {
    /// A status from its parts (for backends).
    pub fn new(
        schema: Option<String>,
        table: String,
        declaration: Option<ChangeCapture>,
        columns: Vec<CaptureColumn>,
        drift: Vec<CaptureDrift>,
    ) -> Self {
        CaptureStatus {
            schema,
            table,
            declaration,
            columns,
            drift,
        }
    }

    /// Whether the installed capture matches its table (no drift).
    pub fn is_current(&self) -> bool {
        self.drift.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn skip_unchanged_is_read_from_a_configuration_entry_and_off_when_left_out() {
        let on: ChangeCapture =
            serde_json::from_value(json!({"table": "orders", "skip_unchanged": true})).unwrap();
        assert!(on.skip_unchanged);
        let off: ChangeCapture = serde_json::from_value(json!({"table": "orders"})).unwrap();
        assert!(!off.skip_unchanged);
        assert!(
            !serde_json::to_value(&off)
                .unwrap()
                .as_object()
                .unwrap()
                .contains_key("skip_unchanged"),
            "left out of stored declarations when off"
        );
        let e =
            serde_json::from_value::<ChangeCapture>(json!({"table": "o", "skip_unchanged": "yes"}))
                .unwrap_err()
                .to_string();
        assert!(e.contains("bool"), "{e}");
    }

    fn config_error(capture: &ChangeCapture) -> String {
        match capture.validate() {
            Err(Error::Configuration(message)) => message,
            other => panic!("expected a configuration error, got {other:?}"),
        }
    }

    #[test]
    fn defaults_follow_the_seed() {
        let plan = ChangeCapture::new("loans")
            .with_label("library.Loan")
            .validate()
            .unwrap();
        assert_eq!(
            plan.topic(RowOperation::Insert),
            Some("library.loan.inserted")
        );
        assert_eq!(
            plan.topic(RowOperation::Update),
            Some("library.loan.updated")
        );
        assert_eq!(
            plan.topic(RowOperation::Delete),
            Some("library.loan.deleted")
        );
        assert_eq!(
            plan.ordering_key,
            Some(vec![KeyPart::Text("library.Loan:".into()), KeyPart::Pk])
        );
        assert_eq!(plan.declaration.payload, ChangePayload::After);
    }

    #[test]
    fn label_without_app_and_custom_templates() {
        let plan = ChangeCapture::new("Sales_Orders").validate().unwrap();
        assert_eq!(
            plan.topic(RowOperation::Update),
            Some("sales_orders.updated")
        );
        let plan = ChangeCapture::new("sales_orders")
            .with_label("erp.SalesOrder")
            .with_topic("doc.{operation}")
            .with_ordering_key(Some("{{{table}}}/{model}/{pk}!"))
            .with_operations([RowOperation::Update])
            .validate()
            .unwrap();
        assert_eq!(
            plan.topics,
            vec![(RowOperation::Update, "doc.updated".to_owned())]
        );
        assert_eq!(
            plan.ordering_key,
            Some(vec![
                KeyPart::Text("{sales_orders}/SalesOrder/".into()),
                KeyPart::Pk,
                KeyPart::Text("!".into())
            ])
        );
        let plan = ChangeCapture::new("t")
            .with_ordering_key(None::<String>)
            .validate()
            .unwrap();
        assert_eq!(plan.ordering_key, None);
    }

    #[test]
    fn refuses_bad_templates() {
        let e = config_error(&ChangeCapture::new("t").with_topic("{app}.{tenant}"));
        assert!(e.contains("unknown placeholder {tenant}"), "{e}");
        assert!(e.contains("{operation}"), "{e}");
        let e = config_error(&ChangeCapture::new("t").with_ordering_key(Some("{operation}:{pk}")));
        assert!(e.contains("unknown placeholder {operation}"), "{e}");
        let e = config_error(&ChangeCapture::new("t").with_topic("a{b"));
        assert!(e.contains("unclosed"), "{e}");
        let e = config_error(&ChangeCapture::new("t").with_topic("a}b"));
        assert!(e.contains("unmatched"), "{e}");
        let e = config_error(&ChangeCapture::new("t").with_topic("x".repeat(250) + "{operation}"));
        assert!(e.contains("1 to 255"), "{e}");
        let e = config_error(&ChangeCapture::new("t").with_ordering_key(Some("")));
        assert!(e.contains("empty key"), "{e}");
    }

    #[test]
    fn refuses_fields_with_exclude_and_other_mistakes() {
        let mut both = ChangeCapture::new("t").with_fields(["a"]);
        both.exclude = vec!["b".into()];
        assert!(config_error(&both).contains("fields and exclude are both set"));
        assert!(
            config_error(&ChangeCapture::new("t").with_operations([]))
                .contains("operations is empty")
        );
        assert!(
            config_error(
                &ChangeCapture::new("t")
                    .with_operations([RowOperation::Insert, RowOperation::Insert])
            )
            .contains("twice")
        );
        assert!(config_error(&ChangeCapture::new("")).contains("table"));
        assert!(config_error(&ChangeCapture::new("t").with_fields(["a", "a"])).contains("twice"));
        assert!(
            config_error(&ChangeCapture::new("t").with_extra_from_row("topic", "x"))
                .contains("relay own")
        );
        // The builders replace one with the other, as hare's replace() does.
        let c = ChangeCapture::new("t")
            .with_exclude(["a"])
            .with_fields(["b"]);
        assert!(c.exclude.is_empty() && c.fields == Some(vec!["b".into()]));
    }

    #[test]
    fn notify_takes_a_channel_or_a_flag_and_is_checked() {
        let c: ChangeCapture =
            serde_json::from_value(json!({"table": "t", "notify": "erp_events"})).unwrap();
        assert_eq!(c.notify.as_deref(), Some("erp_events"));
        let c: ChangeCapture =
            serde_json::from_value(json!({"table": "t", "notify": true})).unwrap();
        assert_eq!(c.notify.as_deref(), Some(DEFAULT_NOTIFY_CHANNEL));
        let c: ChangeCapture =
            serde_json::from_value(json!({"table": "t", "notify": false})).unwrap();
        assert_eq!(c.notify, None);
        let c: ChangeCapture = serde_json::from_value(json!({"table": "t"})).unwrap();
        assert_eq!(c.notify, None, "off by default");
        assert!(
            !serde_json::to_value(&c)
                .unwrap()
                .as_object()
                .unwrap()
                .contains_key("notify"),
            "an unset notify is left out of the stored declaration"
        );
        let long = "c".repeat(64);
        for bad in ["", long.as_str(), "a\0b"] {
            let e = ChangeCapture::new("t")
                .with_notify(Some(bad))
                .validate()
                .unwrap_err()
                .to_string();
            assert!(e.contains("notify") && e.contains("63 bytes"), "{e}");
        }
        assert!(
            ChangeCapture::new("t")
                .with_notify(Some("c".repeat(63)))
                .validate()
                .is_ok()
        );
    }

    #[test]
    fn serde_form_reads_a_config_table() {
        let c: ChangeCapture = serde_json::from_value(json!({
            "table": "sales_orders",
            "label": "erp.sales_order",
            "operations": ["update"],
            "payload": "CHANGES",
            "exclude": ["updated_at"],
            "topic": "doc.{operation}",
            "ordering_key": false,
            "extra_from_row": {"tenant_id": "tenant_id"}
        }))
        .unwrap();
        assert_eq!(c.payload, ChangePayload::Changes);
        assert_eq!(c.ordering_key, None);
        assert_eq!(c.operations, vec![RowOperation::Update]);
        let back: ChangeCapture =
            serde_json::from_value(serde_json::to_value(&c).unwrap()).unwrap();
        assert_eq!(back, c);
        let minimal: ChangeCapture = serde_json::from_value(json!({"table": "t"})).unwrap();
        assert_eq!(minimal, ChangeCapture::new("t"));
        let unknown = serde_json::from_value::<ChangeCapture>(json!({"table": "t", "feilds": []}));
        assert!(unknown.is_err());
    }

    #[test]
    fn replace_copies_with_other_options() {
        let base = ChangeCapture::new("t")
            .with_label("app.T")
            .with_fields(["a", "b"]);
        let derived = base
            .replace(json!({"table": "accounts", "exclude": ["token"]}))
            .unwrap();
        assert_eq!(derived.table, "accounts");
        assert_eq!(derived.fields, None);
        assert_eq!(derived.exclude, vec!["token".to_owned()]);
        assert_eq!(derived.label.as_deref(), Some("app.T"));
        assert_eq!(base.fields, Some(vec!["a".into(), "b".into()]));
        let e = base.replace(json!({"outbox": "x"})).unwrap_err();
        assert!(matches!(e, Error::Configuration(_)), "{e}");
        assert!(base.replace(json!(1)).is_err());
    }

    #[test]
    fn drift_names_added_dropped_and_retyped_columns() {
        let record = CaptureRecord::new(
            "public.outbox".into(),
            "public".into(),
            "t".into(),
            vec![
                CaptureColumn::new("id", "integer"),
                CaptureColumn::new("a", "text"),
            ],
            vec!["id".into()],
            ChangeCapture::new("t"),
        );
        assert!(
            record
                .drift(&record.columns.clone(), &["id".to_owned()])
                .is_empty()
        );
        let now = vec![
            CaptureColumn::new("id", "bigint"),
            CaptureColumn::new("b", "text"),
        ];
        let drift = record.drift(&now, &["id".to_owned()]);
        assert_eq!(
            drift,
            vec![
                CaptureDrift::ColumnTypeChanged {
                    column: "id".into(),
                    installed: "integer".into(),
                    current: "bigint".into()
                },
                CaptureDrift::ColumnDropped { column: "a".into() },
                CaptureDrift::ColumnAdded { column: "b".into() },
            ]
        );
        assert_eq!(CaptureRecord::from_json(&record.to_json()), Some(record));
    }
}
