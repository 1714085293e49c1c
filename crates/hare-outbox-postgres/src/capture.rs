//! Change capture on PostgreSQL: one PL/pgSQL trigger function per captured table, generated at
//! install from the catalog (`pg_attribute`, `pg_type`, `pg_range`), so each column gets the
//! exact JSON form of its type and the trigger does no catalog work per row.
//!
//! JSON forms, per column type:
//!
//! | type | JSON |
//! |---|---|
//! | smallint, integer, bigint | number |
//! | numeric | its exact text, `"12.50"` (`"NaN"`, `"Infinity"`) |
//! | real, double precision | number; NaN and ±infinity as `"NaN"`, `"Infinity"`, `"-Infinity"` |
//! | boolean | `true` / `false` |
//! | text, varchar, char(n), uuid, inet, cidr, enum | their text (enum: the label) |
//! | timestamptz | ISO 8601 in UTC, `"2026-10-06T12:00:00+00:00"`, six fractional digits unless zero |
//! | timestamp | the same without offset |
//! | date | `"2026-10-06"` |
//! | time | `"12:00:00"`, `"12:00:00.250000"` |
//! | interval | seconds, a number (months count 30 days) |
//! | bytea | base64 |
//! | json, jsonb | as is |
//! | arrays | lists, each element in its type's form (1-dimensional; a multi-dimensional array of a type whose form differs from PostgreSQL's own JSON is written in PostgreSQL's form) |
//! | ranges | `{"lower", "upper", "lower_inc", "upper_inc", "is_empty"}`, bounds in the subtype's form |
//! | multiranges | a list of such objects |
//! | composite types | an object of their attributes, each in its form |
//! | domains | their base type's form |
//! | anything else | `to_jsonb` of the value |
//!
//! `occurred_at` is `statement_timestamp()`: every row of one statement carries the time that
//! statement started (SQLite, whose clock is per statement, does the same). The event id is a UUID
//! v7 built from `clock_timestamp()` and random bits; `created_at` keeps the outbox table's
//! default, `now()`, as enqueue does.

use std::collections::HashMap;

use hare_outbox_core::backend::template::render;
use hare_outbox_core::backend::{CaptureInstallParams, CaptureUninstallParams, ContextSetParams};
use hare_outbox_core::capture::{
    CaptureColumn, CaptureDrift, CapturePlan, CaptureRecord, CaptureStatus, ChangePayload, KeyPart,
    RowOperation,
};
use hare_outbox_core::{Error, OutboxTable, Result};
use serde_json::Value;
use sqlx::postgres::PgConnection;
use sqlx::{AssertSqlSafe, Row};

use crate::error::translate;
use crate::exec::Db;
use crate::sql::{quote_ident, quoted_table};

const FUNCTION: &str = include_str!("../queries/capture_function.sql");
const TRIGGER: &str = include_str!("../queries/capture_trigger.sql");
const DROP: &str = include_str!("../queries/capture_drop.sql");
const RELATION: &str = include_str!("../queries/capture_relation.sql");
const COLUMNS: &str = include_str!("../queries/capture_columns.sql");
const PRIMARY_KEY: &str = include_str!("../queries/capture_primary_key.sql");
const TYPE: &str = include_str!("../queries/capture_type.sql");
const LIST: &str = include_str!("../queries/capture_list.sql");
const CONTEXT_SET: &str = include_str!("../queries/capture_context_set.sql");

/// Prefix of every capture function and trigger name.
const NAME_PREFIX: &str = "hare_capture_";
/// Deepest nesting of arrays, ranges and composite types described.
const MAX_TYPE_DEPTH: usize = 16;
/// `jsonb_build_object` takes at most 100 arguments: 50 key/value pairs per call.
const PAIRS_PER_CALL: usize = 50;
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

/// A quoted SQL string literal. With a backslash in the text it becomes an `E'…'` literal with
/// the backslashes doubled, so it reads the same whatever `standard_conforming_strings` says (as
/// PostgreSQL's own `quote_literal` does).
pub(crate) fn quote_literal(text: &str) -> String {
    let quoted = text.replace('\'', "''");
    if text.contains('\\') {
        format!("E'{}'", quoted.replace('\\', "\\\\"))
    } else {
        format!("'{quoted}'")
    }
}

/// How a value of one type becomes JSON.
#[derive(Debug, Clone, PartialEq)]
enum Form {
    /// `to_jsonb` already writes hare's form.
    Plain,
    Numeric,
    TimestampTz,
    Timestamp,
    Time,
    Interval,
    Bytea,
    Array(Box<Form>),
    Range(Box<Form>),
    Multirange(Box<Form>),
    Composite(Vec<(String, Form)>),
}

/// One described type: its form, and whether `IS DISTINCT FROM` works on it (else changes are
/// detected on the JSON forms).
#[derive(Debug, Clone)]
struct TypeInfo {
    form: Form,
    native_eq: bool,
}

/// Base types whose equality operator the change detection may use directly.
const NATIVE_EQ: &[&str] = &[
    "int2",
    "int4",
    "int8",
    "oid",
    "numeric",
    "float4",
    "float8",
    "bool",
    "text",
    "varchar",
    "bpchar",
    "name",
    "char",
    "uuid",
    "timestamptz",
    "timestamp",
    "date",
    "time",
    "timetz",
    "interval",
    "bytea",
    "inet",
    "cidr",
    "macaddr",
    "macaddr8",
    "money",
    "jsonb",
    "bit",
    "varbit",
];

/// Reads columns and types from the system catalogs on `conn` — a transaction, so that behind a
/// transaction pooler every statement reaches the same server connection.
struct Catalog<'c> {
    conn: &'c mut PgConnection,
    /// Whether statements may be prepared under a name: not behind a transaction pooler, where
    /// `sqlx_s_1` collides with another client's statement of that name on the server connection.
    persistent: bool,
    types: HashMap<i64, TypeInfo>,
}

impl Catalog<'_> {
    async fn columns(&mut self, relation: i64) -> Result<Vec<(String, i64, String)>> {
        let rows = sqlx::query(COLUMNS)
            .bind(relation)
            .persistent(self.persistent)
            .fetch_all(&mut *self.conn)
            .await
            .map_err(translate)?;
        rows.iter()
            .map(|row| {
                Ok((
                    row.try_get("name").map_err(translate)?,
                    row.try_get("type_oid").map_err(translate)?,
                    row.try_get("type_name").map_err(translate)?,
                ))
            })
            .collect()
    }

    async fn describe(&mut self, oid: i64, depth: usize) -> Result<TypeInfo> {
        if let Some(info) = self.types.get(&oid) {
            return Ok(info.clone());
        }
        if depth > MAX_TYPE_DEPTH {
            return Ok(TypeInfo {
                form: Form::Plain,
                native_eq: false,
            });
        }
        let row = sqlx::query(TYPE)
            .bind(oid)
            .persistent(self.persistent)
            .fetch_optional(&mut *self.conn)
            .await
            .map_err(translate)?
            .ok_or_else(|| Error::database(format!("type {oid} is not in pg_type")))?;
        let name: String = row.try_get("name").map_err(translate)?;
        let schema: String = row.try_get("schema").map_err(translate)?;
        let kind: String = row.try_get("kind").map_err(translate)?;
        let category: String = row.try_get("category").map_err(translate)?;
        let element: i64 = row.try_get("element").map_err(translate)?;
        let base: i64 = row.try_get("base").map_err(translate)?;
        let relation: i64 = row.try_get("relation").map_err(translate)?;
        let range_subtype: i64 = row.try_get("range_subtype").map_err(translate)?;
        let multirange_subtype: i64 = row.try_get("multirange_subtype").map_err(translate)?;
        let info = match kind.as_str() {
            "d" => Box::pin(self.describe(base, depth + 1)).await?,
            "e" => TypeInfo {
                form: Form::Plain,
                native_eq: true,
            },
            "c" => {
                let mut fields = Vec::new();
                let mut native_eq = true;
                for (field, type_oid, _) in self.columns(relation).await? {
                    let info = Box::pin(self.describe(type_oid, depth + 1)).await?;
                    native_eq &= info.native_eq;
                    fields.push((field, info.form));
                }
                let plain = fields.iter().all(|(_, f)| *f == Form::Plain);
                TypeInfo {
                    form: if plain {
                        Form::Plain
                    } else {
                        Form::Composite(fields)
                    },
                    native_eq,
                }
            }
            "r" => {
                let sub = Box::pin(self.describe(range_subtype, depth + 1)).await?;
                TypeInfo {
                    form: Form::Range(Box::new(sub.form)),
                    native_eq: sub.native_eq,
                }
            }
            "m" => {
                let sub = Box::pin(self.describe(multirange_subtype, depth + 1)).await?;
                TypeInfo {
                    form: Form::Multirange(Box::new(sub.form)),
                    native_eq: sub.native_eq,
                }
            }
            _ if category == "A" && element != 0 => {
                let elem = Box::pin(self.describe(element, depth + 1)).await?;
                TypeInfo {
                    form: if elem.form == Form::Plain {
                        Form::Plain
                    } else {
                        Form::Array(Box::new(elem.form))
                    },
                    native_eq: elem.native_eq,
                }
            }
            _ => {
                let builtin = schema == "pg_catalog";
                let form = match (builtin, name.as_str()) {
                    (true, "numeric") => Form::Numeric,
                    (true, "timestamptz") => Form::TimestampTz,
                    (true, "timestamp") => Form::Timestamp,
                    (true, "time") => Form::Time,
                    (true, "interval") => Form::Interval,
                    (true, "bytea") => Form::Bytea,
                    _ => Form::Plain,
                };
                TypeInfo {
                    form,
                    native_eq: builtin && NATIVE_EQ.contains(&name.as_str()),
                }
            }
        };
        self.types.insert(oid, info.clone());
        Ok(info)
    }
}

/// The jsonb expression of value `x` (an SQL expression that may be NULL, giving SQL NULL, which
/// `jsonb_build_object` writes as JSON null). `depth` keeps nested aliases apart.
fn json_expr(form: &Form, x: &str, depth: usize) -> String {
    match form {
        Form::Plain => format!("to_jsonb({x})"),
        Form::Numeric => format!("to_jsonb(({x})::text)"),
        Form::TimestampTz => timestamp_expr(&format!("(({x}) AT TIME ZONE 'UTC')"), x, "+00:00"),
        Form::Timestamp => timestamp_expr(&format!("({x})"), x, ""),
        Form::Time => format!(
            "to_jsonb(CASE WHEN strpos(({x})::text, '.') > 0 THEN rpad(({x})::text, 15, '0') ELSE ({x})::text END)"
        ),
        Form::Interval => format!("to_jsonb(trim_scale(extract(epoch FROM {x})::numeric))"),
        Form::Bytea => format!("to_jsonb(translate(encode({x}, 'base64'), E'\\n', ''))"),
        Form::Array(element) => {
            let i = format!("i{depth}");
            let item = json_expr(element, &format!("({x})[{i}]"), depth + 1);
            format!(
                "CASE WHEN ({x}) IS NULL THEN NULL WHEN array_ndims({x}) > 1 THEN to_jsonb({x}) ELSE \
                 (SELECT coalesce(jsonb_agg({item} ORDER BY {i}), '[]'::jsonb) \
                 FROM generate_subscripts({x}, 1) AS s{depth}({i})) END"
            )
        }
        Form::Range(sub) => range_expr(sub, x, depth),
        Form::Multirange(sub) => {
            let r = format!("r{depth}");
            let o = format!("o{depth}");
            let item = range_expr(sub, &r, depth + 1);
            format!(
                "CASE WHEN ({x}) IS NULL THEN NULL ELSE \
                 (SELECT coalesce(jsonb_agg({item} ORDER BY {o}), '[]'::jsonb) \
                 FROM unnest({x}) WITH ORDINALITY AS u{depth}({r}, {o})) END"
            )
        }
        Form::Composite(fields) => {
            let pairs: Vec<(String, String)> = fields
                .iter()
                .map(|(name, form)| {
                    (
                        name.clone(),
                        json_expr(form, &format!("({x}).{}", quote_ident(name)), depth + 1),
                    )
                })
                .collect();
            // `x IS NULL` is also true for a composite whose fields are all NULL; its text is not.
            format!(
                "CASE WHEN ({x})::text IS NULL THEN NULL ELSE {} END",
                build_object(&pairs)
            )
        }
    }
}

/// ISO 8601 text of a timestamp `local` (already in UTC for timestamptz): seconds, then six
/// fractional digits unless they are all zero, then `suffix`; ±infinity as PostgreSQL writes it.
fn timestamp_expr(local: &str, x: &str, suffix: &str) -> String {
    format!(
        "to_jsonb(CASE WHEN isfinite({x}) THEN to_char({local}, 'YYYY-MM-DD\"T\"HH24:MI:SS') || \
         CASE WHEN date_part('microseconds', {local})::int8 % 1000000 <> 0 \
         THEN to_char({local}, '.US') ELSE '' END || '{suffix}' ELSE ({x})::text END)"
    )
}

fn range_expr(sub: &Form, x: &str, depth: usize) -> String {
    format!(
        "CASE WHEN ({x}) IS NULL THEN NULL ELSE jsonb_build_object('lower', {}, 'upper', {}, \
         'lower_inc', lower_inc({x}), 'upper_inc', upper_inc({x}), 'is_empty', isempty({x})) END",
        json_expr(sub, &format!("lower({x})"), depth + 1),
        json_expr(sub, &format!("upper({x})"), depth + 1),
    )
}

/// `jsonb_build_object` over `pairs` (name, jsonb expression), chained with `||` past 50 pairs.
fn build_object(pairs: &[(String, String)]) -> String {
    if pairs.is_empty() {
        return "'{}'::jsonb".to_owned();
    }
    pairs
        .chunks(PAIRS_PER_CALL)
        .map(|chunk| {
            let args: Vec<String> = chunk
                .iter()
                .map(|(name, expr)| format!("{}, {expr}", quote_literal(name)))
                .collect();
            format!("jsonb_build_object({})", args.join(", "))
        })
        .collect::<Vec<_>>()
        .join(" || ")
}

/// One column of the captured table.
struct Column {
    name: String,
    type_name: String,
    info: TypeInfo,
}

impl Column {
    fn json(&self, record: &str) -> String {
        json_expr(
            &self.info.form,
            &format!("{record}.{}", quote_ident(&self.name)),
            0,
        )
    }

    fn changed(&self) -> String {
        let column = quote_ident(&self.name);
        let test = if self.info.native_eq {
            format!("OLD.{column} IS DISTINCT FROM NEW.{column}")
        } else {
            format!("{} IS DISTINCT FROM {}", self.json("OLD"), self.json("NEW"))
        };
        format!("CASE WHEN {test} THEN {} END", quote_literal(&self.name))
    }
}

/// The resolved target of an install.
struct Resolved {
    oid: i64,
    schema: String,
    name: String,
}

async fn resolve(db: Db<'_>, conn: &mut PgConnection, qualified: &str) -> Result<Option<Resolved>> {
    let row = sqlx::query(RELATION)
        .bind(qualified)
        .persistent(db.persistent())
        .fetch_optional(&mut *conn)
        .await
        .map_err(translate)?;
    let Some(row) = row else {
        return Ok(None);
    };
    let kind: String = row.try_get("kind").map_err(translate)?;
    if kind != "r" && kind != "p" {
        return Err(Error::configuration(format!(
            "{qualified} is not a table (relkind {kind:?}); only tables can be captured"
        )));
    }
    Ok(Some(Resolved {
        oid: row.try_get("oid").map_err(translate)?,
        schema: row.try_get("schema").map_err(translate)?,
        name: row.try_get("name").map_err(translate)?,
    }))
}

fn qualified(schema: Option<&str>, table: &str) -> String {
    match schema {
        Some(schema) => format!("{}.{}", quote_ident(schema), quote_ident(table)),
        None => quote_ident(table),
    }
}

/// FNV-1a, for short stable name suffixes.
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The name of the trigger and of its function: `hare_capture_<8 hex>_<table start>`, unique per
/// (outbox, schema, table), at most 63 bytes.
fn object_name(outbox: &str, schema: &str, table: &str) -> String {
    let hash = fnv(&format!("{outbox}\u{1}{schema}\u{1}{table}")) as u32;
    let mut start = String::new();
    for c in table.chars() {
        if start.len() + c.len_utf8() > 40 {
            break;
        }
        start.push(c);
    }
    format!("{NAME_PREFIX}{hash:08x}_{start}")
}

/// Installs one capture in one transaction; see `Backend::capture_install`.
pub(crate) async fn install(
    db: Db<'_>,
    outbox: &OutboxTable,
    params: &CaptureInstallParams,
) -> Result<()> {
    let plan = &params.plan;
    let declaration = &plan.declaration;
    let mut tx = db.pool.begin().await.map_err(translate)?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('hare_outbox.capture'))")
        .persistent(db.persistent())
        .execute(&mut *tx)
        .await
        .map_err(translate)?;

    let outbox_name = quoted_table(outbox);
    let Some(outbox_rel) = resolve(db, &mut tx, &outbox_name).await? else {
        return Err(Error::configuration(format!(
            "outbox table {outbox} does not exist; create it first (Outbox::migrate)"
        )));
    };
    let target = qualified(declaration.schema.as_deref(), &declaration.table);
    let Some(table) = resolve(db, &mut tx, &target).await? else {
        return Err(Error::configuration(format!(
            "change capture: table {target} does not exist"
        )));
    };
    if table.oid == outbox_rel.oid {
        return Err(Error::configuration(format!(
            "change capture: {target} is the outbox table {outbox}; an outbox cannot capture itself"
        )));
    }

    let mut catalog = Catalog {
        conn: &mut tx,
        persistent: db.persistent(),
        types: HashMap::new(),
    };
    let raw_columns = catalog.columns(table.oid).await?;
    if OUTBOX_SHAPE
        .iter()
        .all(|c| raw_columns.iter().any(|(name, _, _)| name == c))
    {
        return Err(Error::configuration(format!(
            "change capture: {target} is an outbox table (it has every outbox column); outbox tables cannot be captured"
        )));
    }
    let mut columns = Vec::new();
    for (name, type_oid, type_name) in &raw_columns {
        let info = catalog.describe(*type_oid, 0).await?;
        columns.push(Column {
            name: name.clone(),
            type_name: type_name.clone(),
            info,
        });
    }
    let outbox_columns: Vec<String> = catalog
        .columns(outbox_rel.oid)
        .await?
        .into_iter()
        .map(|(name, _, _)| name)
        .collect();
    let primary_key: Vec<String> = sqlx::query(PRIMARY_KEY)
        .bind(table.oid)
        .persistent(db.persistent())
        .fetch_all(&mut *tx)
        .await
        .map_err(translate)?
        .iter()
        .map(|row| row.try_get("name").map_err(translate))
        .collect::<Result<_>>()?;
    if primary_key.is_empty() {
        return Err(Error::configuration(format!(
            "change capture: table {target} has no primary key; events name their row by it"
        )));
    }

    let known = |what: &str, names: &[String]| -> Result<()> {
        for name in names {
            if !columns.iter().any(|c| &c.name == name) {
                return Err(Error::configuration(format!(
                    "change capture of {target}: {what} names column {name:?}, which the table does not have; its columns: {}",
                    columns
                        .iter()
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
        if !outbox_columns.contains(outbox_column) {
            return Err(Error::configuration(format!(
                "change capture of {target}: extra_from_row names outbox column {outbox_column:?}, which {outbox} does not have"
            )));
        }
    }
    let captured: Vec<&Column> = columns
        .iter()
        .filter(|c| match &declaration.fields {
            Some(fields) => fields.contains(&c.name),
            None => !declaration.exclude.contains(&c.name),
        })
        .collect();
    if captured.is_empty() {
        return Err(Error::configuration(format!(
            "change capture of {target}: exclude leaves no column to capture; use payload = \"keys\" with fields naming the key"
        )));
    }
    let key_columns: Vec<&Column> = primary_key
        .iter()
        .filter_map(|name| columns.iter().find(|c| &c.name == name))
        .collect();

    let outbox_qualified = format!(
        "{}.{}",
        quote_ident(&outbox_rel.schema),
        quote_ident(&outbox_rel.name)
    );
    let outbox_id = format!("{}.{}", outbox_rel.schema, outbox_rel.name);
    let name = object_name(&outbox_id, &table.schema, &table.name);
    let function = format!("{}.{}", quote_ident(&table.schema), quote_ident(&name));
    let table_sql = format!(
        "{}.{}",
        quote_ident(&table.schema),
        quote_ident(&table.name)
    );
    let record = CaptureRecord::new(
        outbox_id,
        table.schema.clone(),
        table.name.clone(),
        columns
            .iter()
            .map(|c| CaptureColumn::new(&c.name, &c.type_name))
            .collect(),
        primary_key.clone(),
        declaration.clone(),
    );

    let function_sql = function_sql(plan, &function, &outbox_qualified, &captured, &key_columns);
    let events: Vec<&str> = plan.operations.iter().map(|op| op.sql_keyword()).collect();
    let trigger_sql = render(
        TRIGGER,
        &[
            ("trigger", quote_ident(&name)),
            ("table", table_sql),
            ("events", events.join(" OR ")),
            ("function", function.clone()),
            ("record", quote_literal(&record.to_json())),
        ],
    );
    sqlx::raw_sql(AssertSqlSafe(function_sql))
        .execute(&mut *tx)
        .await
        .map_err(translate)?;
    sqlx::raw_sql(AssertSqlSafe(trigger_sql))
        .execute(&mut *tx)
        .await
        .map_err(translate)?;
    tx.commit().await.map_err(translate)
}

/// The `CREATE OR REPLACE FUNCTION` statement of one capture.
fn function_sql(
    plan: &CapturePlan,
    function: &str,
    outbox: &str,
    captured: &[&Column],
    key: &[&Column],
) -> String {
    let declaration = &plan.declaration;
    let row = |record: &str| -> String {
        let pairs: Vec<(String, String)> = captured
            .iter()
            .map(|c| (c.name.clone(), c.json(record)))
            .collect();
        build_object(&pairs)
    };
    let pk = |record: &str| -> String {
        match key {
            [single] => single.json(record),
            many => {
                let pairs: Vec<(String, String)> = many
                    .iter()
                    .map(|c| (c.name.clone(), c.json(record)))
                    .collect();
                build_object(&pairs)
            }
        }
    };
    let only_changed = |object: String| {
        format!(
            "(SELECT jsonb_object_agg(e.key, e.value) FROM jsonb_each({object}) AS e WHERE e.key = ANY (v_changed))"
        )
    };
    let (insert_before, insert_after, update_before, update_after, delete_before) =
        match declaration.payload {
            ChangePayload::Keys => (None, None, None, None, None),
            ChangePayload::After => (
                None,
                Some(row("NEW")),
                None,
                Some(row("NEW")),
                Some(row("OLD")),
            ),
            ChangePayload::BeforeAndAfter => (
                None,
                Some(row("NEW")),
                Some(row("OLD")),
                Some(row("NEW")),
                Some(row("OLD")),
            ),
            ChangePayload::Changes => (
                None,
                Some(row("NEW")),
                Some(only_changed(row("OLD"))),
                Some(only_changed(row("NEW"))),
                Some(row("OLD")),
            ),
        };
    let branch = |before: Option<String>, after: Option<String>, record: &str| -> String {
        let mut out = format!("v_pk := {};", pk(record));
        if let Some(before) = before {
            out.push_str(&format!("\n        v_before := {before};"));
        }
        if let Some(after) = after {
            out.push_str(&format!("\n        v_after := {after};"));
        }
        out
    };
    let pk_text = match key {
        [_] => "(v_pk #>> '{}')".to_owned(),
        many => {
            let parts: Vec<String> = many
                .iter()
                .map(|c| format!("(v_pk -> {} #>> '{{}}')", quote_literal(&c.name)))
                .collect();
            format!("concat_ws(':', {})", parts.join(", "))
        }
    };
    let key_sql = match &plan.ordering_key {
        None => "NULL".to_owned(),
        Some(parts) => parts
            .iter()
            .map(|part| match part {
                KeyPart::Pk => pk_text.clone(),
                KeyPart::Text(text) => quote_literal(text),
                _ => "''".to_owned(),
            })
            .collect::<Vec<_>>()
            .join(" || "),
    };
    let topic = |op: RowOperation| {
        plan.topic(op)
            .map(quote_literal)
            .unwrap_or_else(|| "NULL".to_owned())
    };
    let changed: Vec<String> = captured.iter().map(|c| c.changed()).collect();
    let mut extra_columns = String::new();
    let mut extra_values = String::new();
    for (outbox_column, row_column) in &declaration.extra_from_row {
        let column = quote_ident(row_column);
        extra_columns.push_str(&format!(", {}", quote_ident(outbox_column)));
        extra_values.push_str(&format!(
            ",\n        CASE WHEN TG_OP = 'DELETE' THEN OLD.{column} ELSE NEW.{column} END"
        ));
    }
    let mut values = vec![
        ("function", function.to_owned()),
        ("outbox", outbox.to_owned()),
        ("changed", changed.join(",\n            ")),
        ("insert", branch(insert_before, insert_after, "NEW")),
        ("update", branch(update_before, update_after, "NEW")),
        ("delete", branch(delete_before, None, "OLD")),
        ("key", key_sql),
        ("topic_insert", topic(RowOperation::Insert)),
        ("topic_update", topic(RowOperation::Update)),
        ("topic_delete", topic(RowOperation::Delete)),
        ("label", quote_literal(&plan.label)),
        ("table_name", quote_literal(&declaration.table)),
        (
            "occurred_at",
            json_expr(&Form::TimestampTz, "statement_timestamp()", 0),
        ),
        ("extra_columns", extra_columns),
        ("extra_values", extra_values),
        (
            "skip_unchanged",
            if declaration.skip_unchanged {
                "\n        IF cardinality(v_changed) = 0 THEN\n            RETURN NULL;\n        END IF;"
                    .to_owned()
            } else {
                String::new()
            },
        ),
        (
            "notify",
            declaration
                .notify
                .as_deref()
                .map(|channel| {
                    format!(
                        "\n    PERFORM pg_notify({}, v_topic);",
                        quote_literal(channel)
                    )
                })
                .unwrap_or_default(),
        ),
    ];
    // The body is dollar-quoted: pick a tag that no literal in it contains.
    let probe = render(FUNCTION, &values);
    let mut tag = "hare_outbox".to_owned();
    while probe.contains(&format!("${tag}$")) {
        tag.push('_');
    }
    values.push(("tag", tag));
    render(FUNCTION, &values)
}

/// Removes one capture; see `Backend::capture_uninstall`.
pub(crate) async fn uninstall(
    db: Db<'_>,
    outbox: &OutboxTable,
    params: &CaptureUninstallParams,
) -> Result<bool> {
    let mut tx = db.pool.begin().await.map_err(translate)?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('hare_outbox.capture'))")
        .persistent(db.persistent())
        .execute(&mut *tx)
        .await
        .map_err(translate)?;
    let installed = list(db, &mut tx, outbox).await?;
    let target = qualified(params.schema.as_deref(), &params.table);
    let resolved = resolve(db, &mut tx, &target).await.ok().flatten();
    let found = installed.into_iter().find(|(_, record, _)| {
        record.table == params.table
            && match (&params.schema, &resolved) {
                (Some(schema), _) => &record.schema == schema,
                (None, Some(resolved)) => record.schema == resolved.schema,
                (None, None) => true,
            }
    });
    let Some((function_schema, record, _)) = found else {
        return Ok(false);
    };
    let name = object_name(&record.outbox, &record.schema, &record.table);
    let table_sql = format!(
        "{}.{}",
        quote_ident(&record.schema),
        quote_ident(&record.table)
    );
    let table_exists = resolve(db, &mut tx, &table_sql).await?.is_some();
    let drop_trigger = if table_exists {
        format!(
            "DROP TRIGGER IF EXISTS {} ON {table_sql};",
            quote_ident(&name)
        )
    } else {
        String::new()
    };
    let sql = render(
        DROP,
        &[
            ("drop_trigger", drop_trigger),
            (
                "function",
                format!("{}.{}", quote_ident(&function_schema), quote_ident(&name)),
            ),
        ],
    );
    sqlx::raw_sql(AssertSqlSafe(sql))
        .execute(&mut *tx)
        .await
        .map_err(translate)?;
    tx.commit().await.map_err(translate)?;
    Ok(true)
}

/// The installed captures into `outbox`: (function schema, record, trigger state).
async fn list(
    db: Db<'_>,
    conn: &mut PgConnection,
    outbox: &OutboxTable,
) -> Result<Vec<(String, CaptureRecord, Option<String>)>> {
    let Some(outbox_rel) = resolve(db, conn, &quoted_table(outbox)).await? else {
        return Ok(Vec::new());
    };
    let outbox_id = format!("{}.{}", outbox_rel.schema, outbox_rel.name);
    let rows = sqlx::query(LIST)
        .persistent(db.persistent())
        .fetch_all(&mut *conn)
        .await
        .map_err(translate)?;
    let mut out = Vec::new();
    for row in rows {
        let schema: String = row.try_get("schema").map_err(translate)?;
        let name: String = row.try_get("name").map_err(translate)?;
        let text: String = row.try_get("record").map_err(translate)?;
        let state: Option<String> = row.try_get("trigger_state").map_err(translate)?;
        let Some(record) = CaptureRecord::from_json(&text) else {
            continue;
        };
        // Only functions this library named for this outbox (a renamed copy is not one).
        if record.outbox != outbox_id
            || name != object_name(&record.outbox, &record.schema, &record.table)
        {
            continue;
        }
        out.push((schema, record, state));
    }
    Ok(out)
}

/// Every capture into `outbox` with its drift; see `Backend::capture_status`. Reads in one
/// read-only transaction: one snapshot of the catalogs, and behind a transaction pooler one
/// server connection for all its statements (outside a transaction, the Parse and the Bind of an
/// unnamed statement may reach different server connections).
pub(crate) async fn status(db: Db<'_>, outbox: &OutboxTable) -> Result<Vec<CaptureStatus>> {
    let mut conn = db.pool.begin().await.map_err(translate)?;
    sqlx::query("SET TRANSACTION READ ONLY")
        .persistent(db.persistent())
        .execute(&mut *conn)
        .await
        .map_err(translate)?;
    let installed = list(db, &mut conn, outbox).await?;
    let mut out = Vec::new();
    for (_, record, state) in installed {
        let table_sql = format!(
            "{}.{}",
            quote_ident(&record.schema),
            quote_ident(&record.table)
        );
        let mut drift = Vec::new();
        match resolve(db, &mut conn, &table_sql).await? {
            None => drift.push(CaptureDrift::TableMissing),
            Some(table) => {
                let mut catalog = Catalog {
                    conn: &mut conn,
                    persistent: db.persistent(),
                    types: HashMap::new(),
                };
                let columns: Vec<CaptureColumn> = catalog
                    .columns(table.oid)
                    .await?
                    .into_iter()
                    .map(|(name, _, type_name)| CaptureColumn::new(name, type_name))
                    .collect();
                let primary_key: Vec<String> = sqlx::query(PRIMARY_KEY)
                    .bind(table.oid)
                    .persistent(db.persistent())
                    .fetch_all(&mut *conn)
                    .await
                    .map_err(translate)?
                    .iter()
                    .map(|row| row.try_get("name").map_err(translate))
                    .collect::<Result<_>>()?;
                match state.as_deref() {
                    None => drift.push(CaptureDrift::TriggerMissing),
                    Some("D") => drift.push(CaptureDrift::TriggerDisabled),
                    Some(_) => {}
                }
                drift.extend(record.drift(&columns, &primary_key));
            }
        }
        out.push(CaptureStatus::new(
            Some(record.schema.clone()),
            record.table.clone(),
            Some(record.declaration.clone()),
            record.columns.clone(),
            drift,
        ));
    }
    conn.commit().await.map_err(translate)?;
    Ok(out)
}

/// Sets or clears the transaction's context headers; see `Backend::context_set`.
pub(crate) async fn context_set(
    db: Db<'_>,
    conn: &mut PgConnection,
    params: &ContextSetParams,
) -> Result<()> {
    let (headers, payload) = match &params.headers {
        Some(headers) => (
            Value::Object(headers.clone()).to_string(),
            if params.payload.is_empty() {
                String::new()
            } else {
                Value::Object(params.payload.clone()).to_string()
            },
        ),
        None => (String::new(), String::new()),
    };
    sqlx::query(CONTEXT_SET)
        .bind(headers)
        .bind(payload)
        .persistent(db.persistent())
        .execute(&mut *conn)
        .await
        .map_err(translate)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_cannot_break_out() {
        assert_eq!(quote_literal("it's"), "'it''s'");
        assert_eq!(quote_literal("a\\'b"), "E'a\\\\''b'");
    }

    #[test]
    fn object_names_fit_and_differ() {
        let long = "t".repeat(100);
        let a = object_name("public.outbox", "public", &long);
        assert!(a.len() <= 63, "{a}");
        assert_ne!(a, object_name("public.outbox2", "public", &long));
        let unicode = object_name("o", "s", &"я".repeat(40));
        assert!(unicode.len() <= 63);
    }
}
