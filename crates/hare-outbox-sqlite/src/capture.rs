//! Change capture on SQLite: one trigger per captured operation, generated at install from
//! `PRAGMA table_info`.
//!
//! JSON forms follow the value's storage class, refined by
//! the column's declared type:
//!
//! | value | JSON |
//! |---|---|
//! | INTEGER | number |
//! | REAL | number; ±infinity as `"Infinity"`, `"-Infinity"` (SQLite stores NaN as NULL) |
//! | TEXT | string, as stored (dates and times are text in SQLite: they stay as written) |
//! | BLOB | base64 |
//! | NULL | null |
//! | declared `DECIMAL(p,s)` / `NUMERIC(p,s)`, a number | its text with `s` decimals, `"12.50"` |
//! | declared `DECIMAL` / `NUMERIC` without scale, a number | its text, `"12.5"` |
//! | declared `BOOL…`, a number | `true` / `false` |
//! | declared `JSON…`, valid JSON text | the JSON as is |
//! | declared `UUID`, a 16-byte BLOB | the hyphenated lower-case text |
//!
//! SQLite has no hash function, so the SHA-256 of an ordering key longer than 255 characters is
//! computed in SQL (a recursive common table expression); base64 likewise. Both run only for the
//! values that need them.
//!
//! A trigger in a database may only use tables of that database, so the captured table must live
//! in the outbox table's database (`main` unless the outbox table is schema-qualified).
//! Generated columns are not captured (`table_info` leaves them out).

use hare_outbox_core::backend::template::render;
use hare_outbox_core::backend::{CaptureInstallParams, CaptureUninstallParams, ContextSetParams};
use hare_outbox_core::capture::{
    CaptureColumn, CaptureDrift, CapturePlan, CaptureRecord, CaptureStatus, ChangePayload, KeyPart,
    RowOperation,
};
use hare_outbox_core::{Error, OutboxTable, Result};
use serde_json::Value;
use sqlx::{AssertSqlSafe, Row, SqliteConnection, SqlitePool};

use crate::error::map_err;
use crate::sql::quote_ident;

const TRIGGER: &str = include_str!("../queries/capture_trigger.sql");
const CONTEXT_TABLE: &str = include_str!("../queries/capture_context_table.sql");
const CONTEXT_SET: &str = include_str!("../queries/capture_context_set.sql");
const CONTEXT_CLEAR: &str = include_str!("../queries/capture_context_clear.sql");
const LIST: &str = include_str!("../queries/capture_list.sql");
const COLUMNS: &str = include_str!("../queries/capture_columns.sql");
const TABLE: &str = include_str!("../queries/capture_table.sql");

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
const BASE64: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const MASK: &str = "4294967295";

/// A quoted SQL string literal (single quotes doubled; SQLite has no backslash escapes).
pub(crate) fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// The base64 text of BLOB expression `x`, in SQL.
pub(crate) fn base64_sql(x: &str) -> String {
    let digit = |k: usize| format!("instr('123456789ABCDEF', substr(h, {k}, 1))");
    let v = (1..=6)
        .map(|k| format!("({} << {})", digit(k), 4 * (6 - k)))
        .collect::<Vec<_>>()
        .join(" | ");
    let a = quote_literal(BASE64);
    // The chunks are appended in order by a recursive query rather than by
    // `group_concat(c, '' ORDER BY i)`: an ordered aggregate needs SQLite 3.44, and a trigger
    // using one makes the whole database unreadable ("malformed database schema") to programs
    // built on an older SQLite.
    format!(
        "(WITH RECURSIVE b64(i, acc) AS (SELECT 0, '' UNION ALL \
         SELECT i + 1, acc || (SELECT substr({a}, (v >> 18) + 1, 1) || substr({a}, ((v >> 12) & 63) + 1, 1) \
         || CASE WHEN n > 1 THEN substr({a}, ((v >> 6) & 63) + 1, 1) ELSE '=' END \
         || CASE WHEN n > 2 THEN substr({a}, (v & 63) + 1, 1) ELSE '=' END FROM (\
         SELECT n, {v} AS v FROM (\
         SELECT length(substr({x}, i * 3 + 1, 3)) AS n, hex(substr({x}, i * 3 + 1, 3)) || '0000' AS h))) \
         FROM b64 WHERE i * 3 < length({x})) \
         SELECT acc FROM b64 ORDER BY i DESC LIMIT 1)"
    )
}

const SHA256_K: [u32; 64] = [
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
];
const SHA256_H: [u32; 8] = [
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
];

/// The lower-case hex SHA-256 of the UTF-8 bytes of text expression `input`, in SQL: the
/// message is padded as hex text, parsed into 32-bit words, and compressed by a recursive common
/// table expression whose rows carry the eight working variables, the block's starting hash and
/// a 16-word window of the message schedule (the block number is `b`, the second working variable
/// `b2`). SQLite has no XOR; `a ^ b` is `(a | b) - (a & b)`.
pub(crate) fn sha256_sql(input: &str) -> String {
    let rotr = |x: &str, n: u32| format!("(({x} >> {n}) | (({x} << {}) & {MASK}))", 32 - n);
    let xor = |a: &str, b: &str| format!("(({a} | {b}) - ({a} & {b}))");
    let xor3 = |a: &str, b: &str, c: &str| xor(&xor(a, b), c);
    let big_s0 = xor3(&rotr("a", 2), &rotr("a", 13), &rotr("a", 22));
    let big_s1 = xor3(&rotr("e", 6), &rotr("e", 11), &rotr("e", 25));
    let ch = xor("(e & f)", "((~e) & g)");
    let maj = xor3("(a & b2)", "(a & c)", "(b2 & c)");
    let small_s0 = xor3(&rotr("w1", 7), &rotr("w1", 18), "(w1 >> 3)");
    let small_s1 = xor3(&rotr("w14", 17), &rotr("w14", 19), "(w14 >> 10)");
    let t1 = format!("(hh + {big_s1} + {ch} + (SELECT v FROM k WHERE k.t = s.t) + w0)");
    let t2 = format!("({big_s0} + {maj})");
    let word =
        |block: &str, j: usize| format!("(SELECT v FROM words WHERE i = ({block}) * 16 + {j})");
    let k_rows = SHA256_K
        .iter()
        .enumerate()
        .map(|(t, v)| format!("({t}, {v})"))
        .collect::<Vec<_>>()
        .join(", ");
    let parse = (0..8)
        .map(|d| {
            format!(
                "(instr('123456789ABCDEF', substr(p.h, i * 8 + {}, 1)) << {})",
                d + 1,
                4 * (7 - d)
            )
        })
        .collect::<Vec<_>>()
        .join(" | ");
    let h: Vec<String> = SHA256_H.iter().map(|v| v.to_string()).collect();
    let w_names: Vec<String> = (0..16).map(|j| format!("w{j}")).collect();
    let init_words: Vec<String> = (0..16).map(|j| word("0", j)).collect();
    // Within a block: shift the variables and the schedule window.
    let next_a = format!("(({t1} + {t2}) & {MASK})");
    let next_e = format!("((d + {t1}) & {MASK})");
    let w_next = format!("(({small_s1} + w9 + {small_s0} + w0) & {MASK})");
    // At a block's last round: add the block's starting hash.
    let end = [
        format!("((h0 + {t1} + {t2}) & {MASK})"),
        format!("((h1 + a) & {MASK})"),
        format!("((h2 + b2) & {MASK})"),
        format!("((h3 + c) & {MASK})"),
        format!("((h4 + d + {t1}) & {MASK})"),
        format!("((h5 + e) & {MASK})"),
        format!("((h6 + f) & {MASK})"),
        format!("((h7 + g) & {MASK})"),
    ];
    let within = [
        next_a.clone(),
        "a".to_owned(),
        "b2".to_owned(),
        "c".to_owned(),
        next_e.clone(),
        "e".to_owned(),
        "f".to_owned(),
        "g".to_owned(),
    ];
    let mut step: Vec<String> = vec![
        "CASE WHEN s.t = 63 THEN s.b + 1 ELSE s.b END".to_owned(),
        "CASE WHEN s.t = 63 THEN 0 ELSE s.t + 1 END".to_owned(),
    ];
    for i in 0..8 {
        step.push(format!(
            "CASE WHEN s.t = 63 THEN {} ELSE {} END",
            end[i], within[i]
        ));
    }
    for (i, e) in end.iter().enumerate() {
        step.push(format!("CASE WHEN s.t = 63 THEN {e} ELSE h{i} END"));
    }
    for j in 0..16 {
        let shifted = if j < 15 {
            format!("w{}", j + 1)
        } else {
            w_next.clone()
        };
        step.push(format!(
            "CASE WHEN s.t = 63 THEN {} ELSE {shifted} END",
            word("s.b + 1", j)
        ));
    }
    format!(
        "(WITH RECURSIVE \
         m(x) AS (SELECT hex(CAST(({input}) AS BLOB))), \
         p(h, nb) AS (SELECT x || '80' || substr(hex(zeroblob(64)), 1, 2 * (((55 - length(x) / 2) % 64 + 64) % 64)) \
            || printf('%016X', length(x) / 2 * 8), \
            (length(x) / 2 + 9 + 63) / 64 FROM m), \
         k(t, v) AS (VALUES {k_rows}), \
         idx(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM idx, p WHERE i + 1 < p.nb * 16), \
         words(i, v) AS (SELECT i, {parse} FROM idx, p), \
         s(b, t, a, b2, c, d, e, f, g, hh, h0, h1, h2, h3, h4, h5, h6, h7, {w}) AS ( \
            SELECT 0, 0, {h}, {h}, {init} \
            UNION ALL \
            SELECT {step} FROM s, p WHERE s.b < p.nb) \
         SELECT printf('%08x%08x%08x%08x%08x%08x%08x%08x', h0, h1, h2, h3, h4, h5, h6, h7) \
         FROM s, p WHERE s.b = p.nb)",
        w = w_names.join(", "),
        h = h.join(", "),
        init = init_words.join(", "),
        step = step.join(", "),
    )
}

/// One column of the captured table.
struct Column {
    name: String,
    declared: String,
}

impl Column {
    /// The JSON-ready value of this column of `record` (`NEW` or `OLD`).
    fn json(&self, record: &str) -> String {
        value_sql(
            &self.declared,
            &format!("{record}.{}", quote_ident(&self.name)),
        )
    }

    /// The text of this column of `record`, for ordering keys.
    fn text(&self, record: &str) -> String {
        format!("CAST({} AS TEXT)", self.json(record))
    }

    fn differs(&self) -> String {
        let column = quote_ident(&self.name);
        format!("OLD.{column} IS NOT NEW.{column}")
    }
}

/// The JSON-ready form of `x` for a column declared `declared`: a value `json_object` and
/// `json_quote` write in hare's form.
fn value_sql(declared: &str, x: &str) -> String {
    let generic = format!(
        "CASE typeof({x}) WHEN 'blob' THEN {b64} WHEN 'real' THEN \
         CASE WHEN {x} = 9e999 THEN 'Infinity' WHEN {x} = -9e999 THEN '-Infinity' ELSE {x} END \
         ELSE {x} END",
        b64 = base64_sql(x)
    );
    let upper = declared.to_ascii_uppercase();
    let numeric = typeof_number(x);
    if upper.contains("BOOL") {
        return format!(
            "CASE WHEN {numeric} THEN json(CASE WHEN {x} THEN 'true' ELSE 'false' END) ELSE {generic} END"
        );
    }
    if upper.contains("DEC") || upper.starts_with("NUMERIC") {
        let scale = declared_scale(&upper);
        let text = match scale {
            Some(scale) => format!("printf('%.{scale}f', {x})"),
            None => format!("CAST({x} AS TEXT)"),
        };
        return format!("CASE WHEN {numeric} THEN {text} ELSE {generic} END");
    }
    if upper.contains("JSON") {
        return format!(
            "CASE WHEN typeof({x}) = 'text' AND json_valid({x}) THEN json({x}) ELSE {generic} END"
        );
    }
    if upper == "UUID" {
        return format!(
            "CASE WHEN typeof({x}) = 'blob' AND length({x}) = 16 THEN lower(substr(hex({x}), 1, 8) || '-' \
             || substr(hex({x}), 9, 4) || '-' || substr(hex({x}), 13, 4) || '-' || substr(hex({x}), 17, 4) \
             || '-' || substr(hex({x}), 21, 12)) ELSE {generic} END"
        );
    }
    generic
}

fn typeof_number(x: &str) -> String {
    format!("typeof({x}) IN ('integer', 'real')")
}

/// The scale of `DECIMAL(p,s)` / `NUMERIC(p,s)`, if declared.
fn declared_scale(upper: &str) -> Option<u32> {
    let inside = upper.split_once('(')?.1.split_once(')')?.0;
    let (_, scale) = inside.split_once(',')?;
    scale.trim().parse().ok().filter(|s| *s <= 30)
}

/// FNV-1a, for short stable name suffixes.
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The common start of a capture's trigger names: `hare_capture_<8 hex>_<table start>_`.
fn base_name(outbox: &str, schema: &str, table: &str) -> String {
    let hash = fnv(&format!("{outbox}\u{1}{schema}\u{1}{table}")) as u32;
    let start: String = table.chars().take(40).collect();
    format!("{NAME_PREFIX}{hash:08x}_{start}_")
}

fn suffix(op: RowOperation) -> &'static str {
    match op {
        RowOperation::Insert => "ins",
        RowOperation::Update => "upd",
        RowOperation::Delete => "del",
    }
}

async fn table_exists(conn: &mut SqliteConnection, schema: &str, table: &str) -> Result<bool> {
    let sql = render(TABLE, &[("schema", quote_ident(schema))]);
    Ok(sqlx::query(AssertSqlSafe(sql))
        .bind(table)
        .fetch_optional(&mut *conn)
        .await
        .map_err(map_err)?
        .is_some())
}

/// (name, declared type, primary-key position) of each column.
async fn columns(
    conn: &mut SqliteConnection,
    schema: &str,
    table: &str,
) -> Result<Vec<(String, String, i64)>> {
    let rows = sqlx::query(COLUMNS)
        .bind(table)
        .bind(schema)
        .fetch_all(&mut *conn)
        .await
        .map_err(map_err)?;
    rows.iter()
        .map(|row| {
            Ok((
                row.try_get("name").map_err(map_err)?,
                row.try_get::<Option<String>, _>("type")
                    .map_err(map_err)?
                    .unwrap_or_default(),
                row.try_get("pk").map_err(map_err)?,
            ))
        })
        .collect()
}

fn primary_key(columns: &[(String, String, i64)]) -> Vec<String> {
    let mut key: Vec<&(String, String, i64)> = columns.iter().filter(|c| c.2 > 0).collect();
    key.sort_by_key(|c| c.2);
    key.into_iter().map(|c| c.0.clone()).collect()
}

fn outbox_schema(outbox: &OutboxTable) -> String {
    outbox.schema().unwrap_or("main").to_owned()
}

fn outbox_id(outbox: &OutboxTable) -> String {
    format!("{}.{}", outbox_schema(outbox), outbox.name())
}

/// Installs one capture in one `BEGIN IMMEDIATE` transaction; see `Backend::capture_install`.
pub(crate) async fn install(
    pool: &SqlitePool,
    outbox: &OutboxTable,
    params: &CaptureInstallParams,
) -> Result<()> {
    let plan = &params.plan;
    let declaration = &plan.declaration;
    let schema = declaration
        .schema
        .clone()
        .unwrap_or_else(|| "main".to_owned());
    let target = format!("{schema}.{}", declaration.table);
    if let Some(channel) = &declaration.notify {
        return Err(Error::configuration(format!(
            "change capture of {target:?}: notify = {channel:?} needs PostgreSQL LISTEN/NOTIFY, which SQLite does not have; leave notify out (the relay finds the events by polling)"
        )));
    }
    let outbox_db = outbox_schema(outbox);
    if schema != outbox_db {
        return Err(Error::configuration(format!(
            "change capture: table {target:?} is in database {schema:?} but the outbox table {outbox} is in {outbox_db:?}; SQLite triggers can only write to their own database"
        )));
    }
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.map_err(map_err)?;
    if !table_exists(&mut tx, &outbox_db, outbox.name()).await? {
        return Err(Error::configuration(format!(
            "outbox table {outbox} does not exist; create it first (Outbox::migrate)"
        )));
    }
    if !table_exists(&mut tx, &schema, &declaration.table).await? {
        return Err(Error::configuration(format!(
            "change capture: table {target:?} does not exist"
        )));
    }
    if declaration.table == outbox.name() {
        return Err(Error::configuration(format!(
            "change capture: {target:?} is the outbox table {outbox}; an outbox cannot capture itself"
        )));
    }
    let raw = columns(&mut tx, &schema, &declaration.table).await?;
    if OUTBOX_SHAPE
        .iter()
        .all(|c| raw.iter().any(|(name, _, _)| name == c))
    {
        return Err(Error::configuration(format!(
            "change capture: {target:?} is an outbox table (it has every outbox column); outbox tables cannot be captured"
        )));
    }
    let key_names = primary_key(&raw);
    if key_names.is_empty() {
        return Err(Error::configuration(format!(
            "change capture: table {target:?} has no primary key; events name their row by it"
        )));
    }
    let all: Vec<Column> = raw
        .iter()
        .map(|(name, declared, _)| Column {
            name: name.clone(),
            declared: declared.clone(),
        })
        .collect();
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
    let outbox_columns = columns(&mut tx, &outbox_db, outbox.name()).await?;
    for outbox_column in declaration.extra_from_row.keys() {
        if !outbox_columns
            .iter()
            .any(|(name, _, _)| name == outbox_column)
        {
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

    let id = outbox_id(outbox);
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
    ensure_context_table(&mut tx, &schema).await?;
    let mut statements = Vec::new();
    for name in trigger_names(&mut tx, &schema, &base).await? {
        statements.push(format!(
            "DROP TRIGGER IF EXISTS {}.{}",
            quote_ident(&schema),
            quote_ident(&name)
        ));
    }
    for op in &plan.operations {
        statements.push(trigger_sql(
            plan, *op, &schema, &base, outbox, &captured, &key, &record,
        ));
    }
    for sql in statements {
        sqlx::raw_sql(AssertSqlSafe(sql))
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
    }
    tx.commit().await.map_err(map_err)
}

async fn trigger_names(
    conn: &mut SqliteConnection,
    schema: &str,
    base: &str,
) -> Result<Vec<String>> {
    let sql = render(LIST, &[("schema", quote_ident(schema))]);
    let rows = sqlx::query(AssertSqlSafe(sql))
        .fetch_all(&mut *conn)
        .await
        .map_err(map_err)?;
    let mut out = Vec::new();
    for row in rows {
        let name: String = row.try_get("name").map_err(map_err)?;
        if name.starts_with(base) {
            out.push(name);
        }
    }
    Ok(out)
}

/// The `CREATE TRIGGER` of one operation.
#[allow(clippy::too_many_arguments)]
fn trigger_sql(
    plan: &CapturePlan,
    op: RowOperation,
    schema: &str,
    base: &str,
    outbox: &OutboxTable,
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
    let json_name = |name: &str| quote_literal(&Value::from(name).to_string());
    let row = |r: &str| -> String {
        let parts: Vec<String> = captured
            .iter()
            .map(|c| format!("{} || ':' || json_quote({})", json_name(&c.name), c.json(r)))
            .collect();
        format!("json('{{' || {} || '}}')", parts.join(" || ',' || "))
    };
    let changed_only = |r: &str| -> String {
        let parts: Vec<String> = captured
            .iter()
            .map(|c| {
                format!(
                    "CASE WHEN {} THEN ',' || {} || ':' || json_quote({}) ELSE '' END",
                    c.differs(),
                    json_name(&c.name),
                    c.json(r)
                )
            })
            .collect();
        format!("json('{{' || substr({}, 2) || '}}')", parts.join(" || "))
    };
    let changed = match op {
        RowOperation::Update => {
            let parts: Vec<String> = captured
                .iter()
                .map(|c| {
                    format!(
                        "CASE WHEN {} THEN ',' || {} ELSE '' END",
                        c.differs(),
                        json_name(&c.name)
                    )
                })
                .collect();
            format!("json('[' || substr({}, 2) || ']')", parts.join(" || "))
        }
        _ => "NULL".to_owned(),
    };
    let (before, after) = match (declaration.payload, op) {
        (ChangePayload::Keys, _) => (None, None),
        (_, RowOperation::Insert) => (None, Some(row("NEW"))),
        (_, RowOperation::Delete) => (Some(row("OLD")), None),
        (ChangePayload::After, RowOperation::Update) => (None, Some(row("NEW"))),
        (ChangePayload::BeforeAndAfter, RowOperation::Update) => {
            (Some(row("OLD")), Some(row("NEW")))
        }
        (ChangePayload::Changes, RowOperation::Update) => {
            (Some(changed_only("OLD")), Some(changed_only("NEW")))
        }
    };
    let pk = match key {
        [single] => single.json(record_sql),
        many => format!(
            "json_object({})",
            many.iter()
                .map(|c| format!("{}, {}", quote_literal(&c.name), c.json(record_sql)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let pk_text = key
        .iter()
        .map(|c| c.text(record_sql))
        .collect::<Vec<_>>()
        .join(" || ':' || ");
    let key_sql = match &plan.ordering_key {
        None => "NULL".to_owned(),
        Some(parts) => parts
            .iter()
            .map(|part| match part {
                KeyPart::Pk => format!("({pk_text})"),
                KeyPart::Text(text) => quote_literal(text),
                _ => "''".to_owned(),
            })
            .collect::<Vec<_>>()
            .join(" || "),
    };
    let long_key = format!("substr(g.k, 1, 190) || '#' || {}", sha256_sql("g.k"));
    let when = match op {
        RowOperation::Update if declaration.skip_unchanged => format!(
            "WHEN {}",
            captured
                .iter()
                .map(|c| c.differs())
                .collect::<Vec<_>>()
                .join(" OR ")
        ),
        _ => String::new(),
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
    // JSON escapes `/` as `\/` on request only; do it here so the record cannot close the comment.
    let record_comment = format!("{RECORD_MARK}{} */", record.to_json().replace("*/", "*\\/"));
    render(
        TRIGGER,
        &[
            (
                "trigger",
                format!(
                    "{}.{}",
                    quote_ident(schema),
                    quote_ident(&format!("{base}{}", suffix(op)))
                ),
            ),
            ("operation", op.sql_keyword().to_owned()),
            ("table", quote_ident(&declaration.table)),
            ("when", when),
            ("record", record_comment),
            ("outbox", quote_ident(outbox.name())),
            ("topic", quote_literal(plan.topic(op).unwrap_or_default())),
            ("label", quote_literal(&plan.label)),
            ("table_name", quote_literal(&declaration.table)),
            ("past", quote_literal(op.past_tense())),
            ("pk", pk),
            ("changed", changed),
            ("before", before.unwrap_or_else(|| "NULL".to_owned())),
            ("after", after.unwrap_or_else(|| "NULL".to_owned())),
            ("key", key_sql),
            ("long_key", long_key),
            ("extra_columns", extra_columns),
            ("extra_values", extra_values),
        ],
    )
}

/// The installed captures into `outbox`: (record, names of its triggers).
async fn list(
    conn: &mut SqliteConnection,
    outbox: &OutboxTable,
) -> Result<Vec<(CaptureRecord, Vec<String>)>> {
    let schema = outbox_schema(outbox);
    let id = outbox_id(outbox);
    let sql = render(LIST, &[("schema", quote_ident(&schema))]);
    let rows = sqlx::query(AssertSqlSafe(sql))
        .fetch_all(&mut *conn)
        .await
        .map_err(map_err)?;
    let mut out: Vec<(CaptureRecord, Vec<String>)> = Vec::new();
    for row in rows {
        let name: String = row.try_get("name").map_err(map_err)?;
        let text: String = row.try_get("sql").map_err(map_err)?;
        let Some(start) = text.find(RECORD_MARK) else {
            continue;
        };
        let rest = &text[start + RECORD_MARK.len()..];
        let Some(end) = rest.find(" */") else {
            continue;
        };
        let Some(record) = CaptureRecord::from_json(&rest[..end]) else {
            continue;
        };
        if record.outbox != id || !name.starts_with(&base_name(&id, &record.schema, &record.table))
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
    Ok(out)
}

/// Removes one capture; see `Backend::capture_uninstall`.
pub(crate) async fn uninstall(
    pool: &SqlitePool,
    outbox: &OutboxTable,
    params: &CaptureUninstallParams,
) -> Result<bool> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.map_err(map_err)?;
    let schema = params
        .schema
        .clone()
        .unwrap_or_else(|| outbox_schema(outbox));
    let installed = list(&mut tx, outbox).await?;
    let Some((record, names)) = installed
        .into_iter()
        .find(|(r, _)| r.table == params.table && r.schema == schema)
    else {
        return Ok(false);
    };
    for name in names {
        sqlx::raw_sql(AssertSqlSafe(format!(
            "DROP TRIGGER IF EXISTS {}.{}",
            quote_ident(&record.schema),
            quote_ident(&name)
        )))
        .execute(&mut *tx)
        .await
        .map_err(map_err)?;
    }
    tx.commit().await.map_err(map_err)?;
    Ok(true)
}

/// Every capture into `outbox` with its drift; see `Backend::capture_status`.
pub(crate) async fn status(pool: &SqlitePool, outbox: &OutboxTable) -> Result<Vec<CaptureStatus>> {
    let mut conn = pool.acquire().await.map_err(map_err)?;
    let installed = list(&mut conn, outbox).await?;
    let mut out = Vec::new();
    for (record, names) in installed {
        let mut drift = Vec::new();
        if table_exists(&mut conn, &record.schema, &record.table).await? {
            let base = base_name(&record.outbox, &record.schema, &record.table);
            let expected = record
                .declaration
                .operations
                .iter()
                .all(|op| names.contains(&format!("{base}{}", suffix(*op))));
            if !expected {
                drift.push(CaptureDrift::TriggerMissing);
            }
            let raw = columns(&mut conn, &record.schema, &record.table).await?;
            let current: Vec<CaptureColumn> = raw
                .iter()
                .map(|(name, declared, _)| CaptureColumn::new(name, declared))
                .collect();
            drift.extend(record.drift(&current, &primary_key(&raw)));
        } else {
            drift.push(CaptureDrift::TableMissing);
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

/// Creates the context table in `schema` if missing, and adds its `payload` column to a table
/// made before that column existed; returns the table's quoted, schema-qualified name.
async fn ensure_context_table(conn: &mut SqliteConnection, schema: &str) -> Result<String> {
    let table = format!(
        "{}.{}",
        quote_ident(schema),
        quote_ident(CONTEXT_TABLE_NAME)
    );
    sqlx::raw_sql(AssertSqlSafe(render(
        CONTEXT_TABLE,
        &[("table", table.clone())],
    )))
    .execute(&mut *conn)
    .await
    .map_err(map_err)?;
    let columns: Vec<String> = sqlx::query_scalar(include_str!("../queries/table_columns.sql"))
        .bind(CONTEXT_TABLE_NAME)
        .bind(schema)
        .fetch_all(&mut *conn)
        .await
        .map_err(map_err)?;
    if !columns.iter().any(|c| c == "payload") {
        sqlx::raw_sql(AssertSqlSafe(format!(
            "ALTER TABLE {table} ADD COLUMN payload TEXT"
        )))
        .execute(&mut *conn)
        .await
        .map_err(map_err)?;
    }
    Ok(table)
}

/// Sets or clears the transaction's context (headers, payload keys); see
/// `CaptureBackend::context_set`.
pub(crate) async fn context_set(
    conn: &mut SqliteConnection,
    outbox: &OutboxTable,
    params: &ContextSetParams,
) -> Result<()> {
    let schema = outbox_schema(outbox);
    let table = ensure_context_table(conn, &schema).await?;
    match &params.headers {
        Some(headers) => {
            sqlx::query(AssertSqlSafe(render(CONTEXT_SET, &[("table", table)])))
                .bind(Value::Object(headers.clone()).to_string())
                .bind(
                    (!params.payload.is_empty())
                        .then(|| Value::Object(params.payload.clone()).to_string()),
                )
                .execute(&mut *conn)
                .await
                .map_err(map_err)?;
            // SQLite turns this flag off at COMMIT and ROLLBACK: triggers read the context only
            // while it is on, so the context ends with its transaction.
            sqlx::raw_sql("PRAGMA defer_foreign_keys = ON")
                .execute(&mut *conn)
                .await
                .map_err(map_err)?;
        }
        None => {
            sqlx::raw_sql(AssertSqlSafe(render(CONTEXT_CLEAR, &[("table", table)])))
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
    fn scale_of_declared_decimals() {
        assert_eq!(declared_scale("DECIMAL(10,2)"), Some(2));
        assert_eq!(declared_scale("NUMERIC(10, 0)"), Some(0));
        assert_eq!(declared_scale("NUMERIC"), None);
        assert_eq!(declared_scale("DECIMAL(10)"), None);
    }

    #[test]
    fn trigger_values_need_no_ordered_aggregate() {
        // `group_concat(x, '' ORDER BY …)` needs SQLite 3.44; a trigger holding it makes the
        // database unreadable ("malformed database schema") to any program on an older SQLite.
        for declared in ["BLOB", "", "TEXT", "BOOLEAN", "DECIMAL(10,2)"] {
            let sql = value_sql(declared, "NEW.\"c\"");
            assert!(!sql.contains("group_concat"), "{declared}: {sql}");
            let aggregate_order = sql
                .match_indices("ORDER BY")
                .any(|(at, _)| sql[..at].trim_end().ends_with(['\'', ',']));
            assert!(!aggregate_order, "{declared}: {sql}");
        }
    }
}
