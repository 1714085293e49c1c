//! Change capture on MySQL and MariaDB: one `AFTER INSERT|UPDATE|DELETE … FOR EACH ROW` trigger
//! per captured operation, generated at install from `information_schema` (columns, their types,
//! the primary key). No stored function is needed: each trigger is one `INSERT … SELECT` into the
//! outbox table.
//!
//! JSON forms of the captured values:
//!
//! | column type | JSON |
//! |---|---|
//! | integers, `FLOAT`, `DOUBLE` | number (MySQL stores no NaN or infinity) |
//! | `DECIMAL(p,s)` | its exact text with `s` decimals, `"12.50"` |
//! | `CHAR`, `VARCHAR`, `TEXT`, `ENUM`, `SET` | string |
//! | `DATETIME`, `TIMESTAMP` | ISO 8601 text, `"2026-11-13T17:20:00"` (fraction when not zero; `TIMESTAMP` in UTC with `+00:00`) |
//! | `DATE`, `TIME`, `YEAR` | their text |
//! | `BINARY`, `VARBINARY`, `BLOB` | base64 |
//! | `BIT(n)` | its bits as text, `"101"` |
//! | `JSON` (MySQL's type, MariaDB's `json_valid` check) | the JSON as is |
//! | NULL | null |
//!
//! An ordering key longer than 255 characters keeps its first 190 characters and ends with `#`
//! and the hex SHA-256 of the whole key (`SHA2(…, 256)`).
//!
//! **Context.** MySQL has no transaction-local variable, and a session variable outlives the
//! transaction on a pooled connection. [`Outbox::set_context`](hare_outbox_core::Outbox) writes
//! one row per connection (keyed by `CONNECTION_ID()`) into `hare_outbox_context` in the outbox
//! table's database, inside the caller's transaction, so a rollback (or a rollback to an earlier
//! savepoint) takes it back. A committed row would outlive the transaction, so the row also holds
//! the session's count of `BEGIN`, `COMMIT` and `ROLLBACK` statements (`Com_begin`,
//! `Com_commit`, `Com_rollback` of the session status) when it was set, and a random token of
//! the session (`@hare_outbox_session`): a trigger takes the row only while both are unchanged,
//! i.e. within the same transaction of the same session. Reading that count is the costliest part
//! of a trigger (about 0.3 ms on MariaDB 10.11), so it is read only when the session has a
//! context row, and a trigger that finds the row stale deletes it. The transaction id of
//! `information_schema.innodb_trx` is not used: that table is a cache refreshed at most every
//! 0.1 s (and not while it is read more often), so it may show an earlier transaction's id. A
//! transaction ended by a statement that commits implicitly (DDL) keeps the context until the
//! session's next `BEGIN`, `COMMIT` or `ROLLBACK`.
//!
//! **Cascades.** MySQL and MariaDB do not fire triggers for rows changed by cascading
//! foreign-key actions (`ON DELETE CASCADE`, `ON UPDATE CASCADE`, `SET NULL`): those changes
//! are not captured. Delete or update the child rows with statements of their own where their
//! events are needed.
//!
//! Installing replaces the table's capture triggers: on MariaDB each in one statement
//! (`CREATE OR REPLACE TRIGGER`), so every write meanwhile is captured by the old trigger or the
//! new one; MySQL has no such statement, so there it is `DROP TRIGGER` then `CREATE TRIGGER`
//! (each DDL commits on its own), and a write to the table between the two is not captured.

use hare_outbox_core::backend::template::render;
use hare_outbox_core::backend::{CaptureInstallParams, CaptureUninstallParams, ContextSetParams};
use hare_outbox_core::capture::{
    CaptureColumn, CaptureDrift, CapturePlan, CaptureRecord, CaptureStatus, ChangePayload, KeyPart,
    RowOperation,
};
use hare_outbox_core::{Error, OutboxTable, Result};
use serde_json::Value;
use sqlx::mysql::{MySqlConnection, MySqlPool};
use sqlx::{AssertSqlSafe, Row};

use crate::error::translate as map_err;
use crate::sql::{literal, quote_ident};

const TRIGGER: &str = include_str!("../queries/capture_trigger.sql");
const CONTEXT_TABLE: &str = include_str!("../queries/capture_context_table.sql");
const CONTEXT_SET: &str = include_str!("../queries/capture_context_set.sql");
const COLUMNS: &str = include_str!("../queries/capture_columns.sql");
const LIST: &str = include_str!("../queries/capture_list.sql");

/// The table capture triggers read context headers from, in the outbox table's database.
const CONTEXT_TABLE_NAME: &str = "hare_outbox_context";
/// Prefix of every capture trigger's name.
const NAME_PREFIX: &str = "hare_capture_";
/// Marks the install record inside a trigger's text.
const RECORD_MARK: &str = "/* hare_outbox_capture ";
/// Outbox columns a table must all have to be taken for an outbox table.
const OUTBOX_SHAPE: &[&str] = &[
    "sequence",
    "id",
    "topic",
    "payload",
    "headers",
    "ordering_key",
    "idempotency_key",
    "lease_until",
    "leased_by",
    "published_at",
    "dead_lettered_at",
];

/// The session's count of `BEGIN`, `COMMIT` and `ROLLBACK` statements, in SQL.
fn marks_sql(mariadb: bool) -> &'static str {
    if mariadb {
        "(SELECT CAST(SUM(s.variable_value) AS SIGNED) FROM information_schema.session_status AS s \
         WHERE s.variable_name IN ('COM_BEGIN', 'COM_COMMIT', 'COM_ROLLBACK'))"
    } else {
        "(SELECT CAST(SUM(s.variable_value) AS SIGNED) FROM performance_schema.session_status AS s \
         WHERE s.variable_name IN ('Com_begin', 'Com_commit', 'Com_rollback'))"
    }
}

/// Whether the server is MariaDB.
async fn is_mariadb(conn: &mut MySqlConnection) -> Result<bool> {
    let version: String = sqlx::query_scalar("SELECT CAST(VERSION() AS CHAR)")
        .fetch_one(&mut *conn)
        .await
        .map_err(map_err)?;
    Ok(version.contains("MariaDB"))
}

/// One column of the captured table.
#[derive(Debug, Clone)]
struct Column {
    name: String,
    /// The column type as the catalog spells it (`decimal(10,2)`).
    declared: String,
    /// The bare type (`decimal`).
    data_type: String,
    /// Whether the column holds JSON (MySQL's type or MariaDB's `json_valid` check).
    json: bool,
    /// Position in the primary key; 0 when not part of it.
    pk: i64,
}

impl Column {
    fn reference(&self, record: &str) -> String {
        format!("{record}.{}", quote_ident(&self.name))
    }

    /// The JSON-ready value of this column of `record` (`NEW` or `OLD`): an expression
    /// `JSON_OBJECT` writes in hare's form.
    fn json(&self, record: &str) -> String {
        value_sql(
            &self.data_type,
            &self.declared,
            self.json,
            &self.reference(record),
        )
    }

    /// The text of this column of `record`, for ordering keys.
    fn text(&self, record: &str) -> String {
        let x = self.reference(record);
        match self.data_type.as_str() {
            _ if self.json => format!("CAST({x} AS CHAR)"),
            "binary" | "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob" | "bit"
            | "datetime" | "timestamp" => {
                format!(
                    "JSON_UNQUOTE(JSON_EXTRACT(JSON_ARRAY({}), '$[0]'))",
                    self.json(record)
                )
            }
            _ => format!("CAST({x} AS CHAR CHARACTER SET utf8mb4)"),
        }
    }

    /// Whether the column's value differs between `OLD` and `NEW` (NULL-safe).
    fn differs(&self) -> String {
        let column = quote_ident(&self.name);
        if self.json {
            // JSON text compared as JSON: a rewrite of the same document is no change.
            format!("NOT (JSON_EXTRACT(OLD.{column}, '$') <=> JSON_EXTRACT(NEW.{column}, '$'))")
        } else {
            format!("NOT (OLD.{column} <=> NEW.{column})")
        }
    }
}

/// The JSON-ready form of `x`, a column of bare type `data_type` declared `declared`.
fn value_sql(data_type: &str, declared: &str, json: bool, x: &str) -> String {
    if json {
        return format!("JSON_EXTRACT({x}, '$')");
    }
    match data_type {
        "decimal" => format!("CAST({x} AS CHAR)"),
        "datetime" => format!(
            "CASE WHEN {x} IS NULL THEN NULL WHEN MICROSECOND({x}) = 0 \
             THEN DATE_FORMAT({x}, '%Y-%m-%dT%H:%i:%s') \
             ELSE TRIM(TRAILING '0' FROM DATE_FORMAT({x}, '%Y-%m-%dT%H:%i:%s.%f')) END"
        ),
        "timestamp" => {
            let utc = format!(
                "TIMESTAMPADD(MICROSECOND, ROUND(UNIX_TIMESTAMP({x}) * 1000000), '1970-01-01 00:00:00')"
            );
            format!(
                "CASE WHEN {x} IS NULL THEN NULL WHEN MICROSECOND({x}) = 0 \
                 THEN DATE_FORMAT({utc}, '%Y-%m-%dT%H:%i:%s+00:00') \
                 ELSE CONCAT(TRIM(TRAILING '0' FROM DATE_FORMAT({utc}, '%Y-%m-%dT%H:%i:%s.%f')), '+00:00') END"
            )
        }
        "date" | "time" | "year" => format!("CAST({x} AS CHAR)"),
        "binary" | "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob" => {
            format!("REPLACE(TO_BASE64({x}), '\\n', '')")
        }
        "bit" => {
            let width = declared
                .split_once('(')
                .and_then(|(_, rest)| rest.split_once(')'))
                .and_then(|(n, _)| n.trim().parse::<u32>().ok())
                .unwrap_or(1);
            format!("LPAD(BIN({x} + 0), {width}, '0')")
        }
        _ => x.to_owned(),
    }
}

/// FNV-1a, for short stable name suffixes.
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The common start of a capture's trigger names: `hare_capture_<8 hex>_<table start>_`
/// (at most 56 characters with the operation's suffix; MySQL allows 64).
fn base_name(outbox: &str, schema: &str, table: &str) -> String {
    let hash = fnv(&format!("{outbox}\u{1}{schema}\u{1}{table}")) as u32;
    let start: String = table.chars().take(30).collect();
    format!("{NAME_PREFIX}{hash:08x}_{start}_")
}

fn suffix(op: RowOperation) -> &'static str {
    match op {
        RowOperation::Insert => "ins",
        RowOperation::Update => "upd",
        RowOperation::Delete => "del",
    }
}

/// The database of `outbox`: its schema, or the connection's database.
async fn outbox_schema(conn: &mut MySqlConnection, outbox: &OutboxTable) -> Result<String> {
    match outbox.schema() {
        Some(schema) => Ok(schema.to_owned()),
        None => current_database(conn).await,
    }
}

async fn current_database(conn: &mut MySqlConnection) -> Result<String> {
    let db: Option<String> = sqlx::query_scalar("SELECT CAST(DATABASE() AS CHAR(64))")
        .fetch_one(&mut *conn)
        .await
        .map_err(map_err)?;
    db.ok_or_else(|| {
        Error::configuration(
            "change capture: the connection has no database selected; name one in the URL or qualify the tables",
        )
    })
}

fn qualified(schema: &str, name: &str) -> String {
    format!("{}.{}", quote_ident(schema), quote_ident(name))
}

/// The columns of `schema.table` in order; empty when the table does not exist.
async fn columns(conn: &mut MySqlConnection, schema: &str, table: &str) -> Result<Vec<Column>> {
    let rows = sqlx::query(COLUMNS)
        .bind(schema)
        .bind(table)
        .fetch_all(&mut *conn)
        .await
        .map_err(map_err)?;
    let mut out = Vec::new();
    for row in rows {
        let data_type: String = row.try_get("data_type").map_err(map_err)?;
        out.push(Column {
            name: row.try_get("name").map_err(map_err)?,
            declared: row.try_get("type").map_err(map_err)?,
            json: data_type.eq_ignore_ascii_case("json"),
            data_type: data_type.to_ascii_lowercase(),
            pk: row.try_get("pk").map_err(map_err)?,
        });
    }
    // MariaDB's JSON is LONGTEXT with a `json_valid(column)` check. MySQL's own JSON type needs
    // no check, and its `check_constraints` has no `table_name` column: there the query fails
    // and no LONGTEXT column is taken for JSON.
    if out.iter().any(|c| c.data_type == "longtext") {
        let checks: Vec<String> = sqlx::query_scalar(
            "SELECT CAST(check_clause AS CHAR) FROM information_schema.check_constraints \
             WHERE constraint_schema = ? AND table_name = ?",
        )
        .bind(schema)
        .bind(table)
        .fetch_all(&mut *conn)
        .await
        .unwrap_or_default();
        for column in out.iter_mut().filter(|c| c.data_type == "longtext") {
            let check = format!("json_valid({})", quote_ident(&column.name));
            if checks.iter().any(|c| c.trim() == check) {
                column.json = true;
                column.declared = "json".to_owned();
            }
        }
    }
    Ok(out)
}

fn primary_key(columns: &[Column]) -> Vec<String> {
    let mut key: Vec<&Column> = columns.iter().filter(|c| c.pk > 0).collect();
    key.sort_by_key(|c| c.pk);
    key.into_iter().map(|c| c.name.clone()).collect()
}

/// Installs one capture; see `Backend::capture_install`.
pub(crate) async fn install(
    pool: &MySqlPool,
    outbox: &OutboxTable,
    params: &CaptureInstallParams,
) -> Result<()> {
    let plan = &params.plan;
    let declaration = &plan.declaration;
    let mut conn = pool.acquire().await.map_err(map_err)?;
    let outbox_db = outbox_schema(&mut conn, outbox).await?;
    let schema = match &declaration.schema {
        Some(schema) => schema.clone(),
        None => outbox_db.clone(),
    };
    let target = format!("{schema}.{}", declaration.table);
    if let Some(channel) = &declaration.notify {
        return Err(Error::configuration(format!(
            "change capture of {target:?}: notify = {channel:?} needs PostgreSQL LISTEN/NOTIFY, which MySQL does not have; leave notify out (the relay finds the events by polling)"
        )));
    }
    let outbox_columns = columns(&mut conn, &outbox_db, outbox.name()).await?;
    if outbox_columns.is_empty() {
        return Err(Error::configuration(format!(
            "outbox table {outbox} does not exist; create it first (Outbox::migrate)"
        )));
    }
    if declaration.table == outbox.name() && schema == outbox_db {
        return Err(Error::configuration(format!(
            "change capture: {target:?} is the outbox table {outbox}; an outbox cannot capture itself"
        )));
    }
    let all = columns(&mut conn, &schema, &declaration.table).await?;
    if all.is_empty() {
        return Err(Error::configuration(format!(
            "change capture: table {target:?} does not exist"
        )));
    }
    if OUTBOX_SHAPE
        .iter()
        .all(|c| all.iter().any(|col| col.name == *c))
    {
        return Err(Error::configuration(format!(
            "change capture: {target:?} is an outbox table (it has every outbox column); outbox tables cannot be captured"
        )));
    }
    let key_names = primary_key(&all);
    if key_names.is_empty() {
        return Err(Error::configuration(format!(
            "change capture: table {target:?} has no primary key; events name their row by it"
        )));
    }
    let known = |what: &str, names: &[String]| -> Result<()> {
        for name in names {
            if !all.iter().any(|c| &c.name == name) {
                return Err(Error::configuration(format!(
                    "change capture of {target:?}: {what} names column {name:?}, which the table does not have; its columns: {}",
                    all.iter()
                        .map(|c| c.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        }
        Ok(())
    };
    if let Some(fields) = &declaration.fields {
        known("fields", fields)?;
    }
    known("exclude", &declaration.exclude)?;
    let row_columns: Vec<String> = declaration.extra_from_row.values().cloned().collect();
    known("extra_from_row", &row_columns)?;
    for outbox_column in declaration.extra_from_row.keys() {
        if !outbox_columns.iter().any(|c| &c.name == outbox_column) {
            return Err(Error::configuration(format!(
                "change capture of {target:?}: extra_from_row names outbox column {outbox_column:?}, which {outbox} does not have"
            )));
        }
    }
    let captured: Vec<&Column> = all
        .iter()
        .filter(|c| match &declaration.fields {
            Some(fields) => fields.contains(&c.name),
            None => !declaration.exclude.contains(&c.name),
        })
        .collect();
    if captured.is_empty() {
        return Err(Error::configuration(format!(
            "change capture of {target:?}: exclude leaves no column to capture; use payload = \"keys\" with fields naming the key"
        )));
    }
    let key: Vec<&Column> = key_names
        .iter()
        .filter_map(|name| all.iter().find(|c| &c.name == name))
        .collect();

    let id = format!("{outbox_db}.{}", outbox.name());
    let base = base_name(&id, &schema, &declaration.table);
    let record = CaptureRecord::new(
        id,
        schema.clone(),
        declaration.table.clone(),
        all.iter()
            .map(|c| CaptureColumn::new(&c.name, &c.declared))
            .collect(),
        key_names.clone(),
        declaration.clone(),
    );
    let mariadb = is_mariadb(&mut conn).await?;
    let context = ensure_context_table(&mut conn, &outbox_db).await?;
    let target_sql = Target {
        schema: &schema,
        base: &base,
        outbox: qualified(&outbox_db, outbox.name()),
        context,
        marks: marks_sql(mariadb),
        create: if mariadb {
            "CREATE OR REPLACE TRIGGER"
        } else {
            "CREATE TRIGGER"
        },
    };
    // MariaDB replaces a trigger in one statement (`CREATE OR REPLACE TRIGGER`), so a write to
    // the table meanwhile is captured by the old trigger or the new one; MySQL drops it first.
    let mut statements = Vec::new();
    let kept: Vec<String> = plan
        .operations
        .iter()
        .map(|op| format!("{base}{}", suffix(*op)))
        .collect();
    for name in trigger_names(&mut conn, &schema, &base).await? {
        if !mariadb || !kept.contains(&name) {
            statements.push(format!(
                "DROP TRIGGER IF EXISTS {}",
                qualified(&schema, &name)
            ));
        }
    }
    for op in &plan.operations {
        statements.push(trigger_sql(
            plan,
            *op,
            &target_sql,
            &captured,
            &key,
            &record,
        ));
    }
    for sql in statements {
        sqlx::raw_sql(AssertSqlSafe(sql))
            .execute(&mut *conn)
            .await
            .map_err(map_err)?;
    }
    Ok(())
}

/// Where a trigger lives and what it writes to.
struct Target<'a> {
    schema: &'a str,
    base: &'a str,
    outbox: String,
    context: String,
    marks: &'static str,
    /// `CREATE TRIGGER`, or `CREATE OR REPLACE TRIGGER` on MariaDB.
    create: &'static str,
}

async fn trigger_names(
    conn: &mut MySqlConnection,
    schema: &str,
    base: &str,
) -> Result<Vec<String>> {
    Ok(list_triggers(conn, schema)
        .await?
        .into_iter()
        .map(|(name, _)| name)
        .filter(|name| name.starts_with(base))
        .collect())
}

/// (name, body) of every capture trigger of `schema`.
async fn list_triggers(conn: &mut MySqlConnection, schema: &str) -> Result<Vec<(String, String)>> {
    let rows = sqlx::query(LIST)
        .bind(schema)
        .fetch_all(&mut *conn)
        .await
        .map_err(map_err)?;
    rows.iter()
        .map(|row| {
            Ok((
                row.try_get("name").map_err(map_err)?,
                row.try_get::<Option<String>, _>("body")
                    .map_err(map_err)?
                    .unwrap_or_default(),
            ))
        })
        .collect()
}

/// `JSON_OBJECT` of `columns` of `record`.
fn row_object(columns: &[&Column], record: &str) -> String {
    format!(
        "JSON_OBJECT({})",
        columns
            .iter()
            .map(|c| format!("{}, {}", literal(&c.name), c.json(record)))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// The `CREATE TRIGGER` of one operation.
fn trigger_sql(
    plan: &CapturePlan,
    op: RowOperation,
    target: &Target<'_>,
    captured: &[&Column],
    key: &[&Column],
    record: &CaptureRecord,
) -> String {
    let declaration = &plan.declaration;
    let record_sql = if matches!(op, RowOperation::Delete) {
        "OLD"
    } else {
        "NEW"
    };
    let json_name = |name: &str| literal(&Value::from(name).to_string());
    // The object of the changed columns only: its text put together from the JSON text of each
    // changed value (CONCAT_WS leaves out the NULLs of unchanged columns).
    let changed_only = |r: &str| -> String {
        let parts: Vec<String> = captured
            .iter()
            .map(|c| {
                format!(
                    "IF({}, CONCAT({}, ':', CAST(JSON_EXTRACT(JSON_ARRAY({}), '$[0]') AS CHAR)), NULL)",
                    c.differs(),
                    json_name(&c.name),
                    c.json(r)
                )
            })
            .collect();
        format!(
            "JSON_EXTRACT(CONCAT('{{', CONCAT_WS(',', {}), '}}'), '$')",
            parts.join(", ")
        )
    };
    let changed = match op {
        RowOperation::Update => {
            let parts: Vec<String> = captured
                .iter()
                .map(|c| format!("IF({}, {}, NULL)", c.differs(), json_name(&c.name)))
                .collect();
            format!(
                "JSON_EXTRACT(CONCAT('[', CONCAT_WS(',', {}), ']'), '$')",
                parts.join(", ")
            )
        }
        _ => "NULL".to_owned(),
    };
    let (before, after) = match (declaration.payload, op) {
        (ChangePayload::Keys, _) => (None, None),
        (_, RowOperation::Insert) => (None, Some(row_object(captured, "NEW"))),
        (_, RowOperation::Delete) => (Some(row_object(captured, "OLD")), None),
        (ChangePayload::After, RowOperation::Update) => (None, Some(row_object(captured, "NEW"))),
        (ChangePayload::BeforeAndAfter, RowOperation::Update) => (
            Some(row_object(captured, "OLD")),
            Some(row_object(captured, "NEW")),
        ),
        (ChangePayload::Changes, RowOperation::Update) => {
            (Some(changed_only("OLD")), Some(changed_only("NEW")))
        }
    };
    let pk = match key {
        [single] => single.json(record_sql),
        many => format!(
            "JSON_OBJECT({})",
            many.iter()
                .map(|c| format!("{}, {}", literal(&c.name), c.json(record_sql)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let pk_text = format!(
        "CONCAT_WS(':', {})",
        key.iter()
            .map(|c| format!("COALESCE({}, '')", c.text(record_sql)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let key_sql = match &plan.ordering_key {
        None => "NULL".to_owned(),
        Some(parts) => format!(
            "CONCAT('', {})",
            parts
                .iter()
                .map(|part| match part {
                    KeyPart::Pk => pk_text.clone(),
                    KeyPart::Text(text) => literal(text),
                    _ => "''".to_owned(),
                })
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let when = match op {
        RowOperation::Update if declaration.skip_unchanged => format!(
            "({})",
            captured
                .iter()
                .map(|c| c.differs())
                .collect::<Vec<_>>()
                .join(" OR ")
        ),
        _ => "TRUE".to_owned(),
    };
    let mut extra_columns = String::new();
    let mut extra_values = String::new();
    for (outbox_column, row_column) in &declaration.extra_from_row {
        extra_columns.push_str(&format!(", {}", quote_ident(outbox_column)));
        extra_values.push_str(&format!(
            ",\n        {record_sql}.{}",
            quote_ident(row_column)
        ));
    }
    // JSON escapes `/` on request only; do it here so the record cannot close the comment.
    let record_comment = format!("{RECORD_MARK}{} */", record.to_json().replace("*/", "*\\/"));
    render(
        TRIGGER,
        &[
            (
                "trigger",
                qualified(target.schema, &format!("{}{}", target.base, suffix(op))),
            ),
            ("create", target.create.to_owned()),
            ("operation", op.sql_keyword().to_owned()),
            ("table", qualified(target.schema, &declaration.table)),
            ("when", when),
            ("record", record_comment),
            ("outbox", target.outbox.clone()),
            ("context", target.context.clone()),
            ("marks", target.marks.to_owned()),
            ("topic", literal(plan.topic(op).unwrap_or_default())),
            ("label", literal(&plan.label)),
            ("table_name", literal(&declaration.table)),
            ("past", literal(op.past_tense())),
            ("pk", pk),
            ("changed", changed),
            ("before", before.unwrap_or_else(|| "NULL".to_owned())),
            ("after", after.unwrap_or_else(|| "NULL".to_owned())),
            ("key", key_sql),
            ("extra_columns", extra_columns),
            ("extra_values", extra_values),
        ],
    )
}

/// The installed captures into `outbox`: (record, names of its triggers).
async fn list(
    conn: &mut MySqlConnection,
    outbox: &OutboxTable,
    schemas: &[String],
) -> Result<Vec<(CaptureRecord, Vec<String>)>> {
    let outbox_db = outbox_schema(conn, outbox).await?;
    let id = format!("{outbox_db}.{}", outbox.name());
    let mut out: Vec<(CaptureRecord, Vec<String>)> = Vec::new();
    let mut all_schemas = vec![outbox_db];
    all_schemas.extend(schemas.iter().cloned());
    all_schemas.dedup();
    for schema in all_schemas {
        for (name, body) in list_triggers(conn, &schema).await? {
            let Some(start) = body.find(RECORD_MARK) else {
                continue;
            };
            let rest = &body[start + RECORD_MARK.len()..];
            let Some(end) = rest.find(" */") else {
                continue;
            };
            let Some(record) = CaptureRecord::from_json(&rest[..end]) else {
                continue;
            };
            if record.outbox != id
                || !name.starts_with(&base_name(&id, &record.schema, &record.table))
            {
                continue;
            }
            match out
                .iter_mut()
                .find(|(r, _)| r.table == record.table && r.schema == record.schema)
            {
                Some((_, names)) => names.push(name),
                None => out.push((record, vec![name])),
            }
        }
    }
    Ok(out)
}

/// Removes one capture; see `Backend::capture_uninstall`.
pub(crate) async fn uninstall(
    pool: &MySqlPool,
    outbox: &OutboxTable,
    params: &CaptureUninstallParams,
) -> Result<bool> {
    let mut conn = pool.acquire().await.map_err(map_err)?;
    let schema = match &params.schema {
        Some(schema) => schema.clone(),
        None => outbox_schema(&mut conn, outbox).await?,
    };
    let installed = list(&mut conn, outbox, std::slice::from_ref(&schema)).await?;
    let Some((record, names)) = installed
        .into_iter()
        .find(|(r, _)| r.table == params.table && r.schema == schema)
    else {
        return Ok(false);
    };
    for name in names {
        sqlx::raw_sql(AssertSqlSafe(format!(
            "DROP TRIGGER IF EXISTS {}",
            qualified(&record.schema, &name)
        )))
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    }
    Ok(true)
}

/// Every capture into `outbox` with its drift; see `Backend::capture_status`. Captures of
/// tables in other databases are found through the databases holding capture triggers.
pub(crate) async fn status(pool: &MySqlPool, outbox: &OutboxTable) -> Result<Vec<CaptureStatus>> {
    let mut conn = pool.acquire().await.map_err(map_err)?;
    let schemas: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT CAST(trigger_schema AS CHAR(64)) FROM information_schema.triggers \
         WHERE trigger_name LIKE 'hare\\_capture\\_%'",
    )
    .fetch_all(&mut *conn)
    .await
    .map_err(map_err)?;
    let installed = list(&mut conn, outbox, &schemas).await?;
    let mut out = Vec::new();
    for (record, names) in installed {
        let mut drift = Vec::new();
        let current = columns(&mut conn, &record.schema, &record.table).await?;
        if current.is_empty() {
            drift.push(CaptureDrift::TableMissing);
        } else {
            let base = base_name(&record.outbox, &record.schema, &record.table);
            let expected = record
                .declaration
                .operations
                .iter()
                .all(|op| names.contains(&format!("{base}{}", suffix(*op))));
            if !expected {
                drift.push(CaptureDrift::TriggerMissing);
            }
            let now: Vec<CaptureColumn> = current
                .iter()
                .map(|c| CaptureColumn::new(&c.name, &c.declared))
                .collect();
            drift.extend(record.drift(&now, &primary_key(&current)));
        }
        out.push(CaptureStatus::new(
            Some(record.schema.clone()),
            record.table.clone(),
            Some(record.declaration.clone()),
            record.columns.clone(),
            drift,
        ));
    }
    Ok(out)
}

/// Creates the context table in `schema` if missing; returns its quoted, qualified name.
async fn ensure_context_table(conn: &mut MySqlConnection, schema: &str) -> Result<String> {
    let table = qualified(schema, CONTEXT_TABLE_NAME);
    sqlx::raw_sql(AssertSqlSafe(render(
        CONTEXT_TABLE,
        &[("table", table.clone())],
    )))
    .execute(&mut *conn)
    .await
    .map_err(map_err)?;
    Ok(table)
}

/// Sets or clears the transaction's context (headers, payload keys); see
/// `CaptureBackend::context_set`. The context table must exist (a capture install creates it):
/// creating it here would commit the caller's transaction.
pub(crate) async fn context_set(
    conn: &mut MySqlConnection,
    outbox: &OutboxTable,
    params: &ContextSetParams,
) -> Result<()> {
    let schema = outbox_schema(conn, outbox).await?;
    let table = qualified(&schema, CONTEXT_TABLE_NAME);
    let exists: Option<i64> = sqlx::query_scalar(
        "SELECT 1 FROM information_schema.tables WHERE table_schema = ? AND table_name = ?",
    )
    .bind(&schema)
    .bind(CONTEXT_TABLE_NAME)
    .fetch_optional(&mut *conn)
    .await
    .map_err(map_err)?;
    if exists.is_none() {
        return Err(Error::configuration(format!(
            "the context table {table} does not exist: install a change capture into {outbox} first (it creates the table)"
        )));
    }
    match &params.headers {
        Some(headers) => {
            let mariadb = is_mariadb(conn).await?;
            sqlx::raw_sql("SET @hare_outbox_session = COALESCE(@hare_outbox_session, UUID())")
                .execute(&mut *conn)
                .await
                .map_err(map_err)?;
            sqlx::query(AssertSqlSafe(render(
                CONTEXT_SET,
                &[("table", table), ("marks", marks_sql(mariadb).to_owned())],
            )))
            .bind(Value::Object(headers.clone()).to_string())
            .bind(
                (!params.payload.is_empty())
                    .then(|| Value::Object(params.payload.clone()).to_string()),
            )
            .execute(&mut *conn)
            .await
            .map_err(map_err)?;
        }
        None => {
            sqlx::raw_sql(AssertSqlSafe(format!(
                "DELETE FROM {table} WHERE connection_id = CONNECTION_ID()"
            )))
            .execute(&mut *conn)
            .await
            .map_err(map_err)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trigger_names_fit_in_64_characters() {
        let name = base_name("db.outbox", "db", &"t".repeat(64));
        assert!(name.len() + 3 <= 64, "{name}");
    }

    #[test]
    fn bit_width_is_read_from_the_declared_type() {
        assert_eq!(
            value_sql("bit", "bit(3)", false, "x"),
            "LPAD(BIN(x + 0), 3, '0')"
        );
    }
}
