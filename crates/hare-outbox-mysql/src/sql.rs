//! The SQL text of the backend, from `queries/*.sql`, rendered for one table with
//! [`render`](hare_outbox_core::backend::template::render).
//!
//! Placeholders every statement may use: `{table}` the quoted, possibly database-qualified table
//! (`` `billing`.`outbox` ``); `{columns}` the columns every statement returns ([`COLUMNS`], then
//! the table's extra columns); `{id_key}`, `{idempotency_key_name}`, `{pending_idx}`,
//! `{pending_key_idx}`, `{published_idx}`, `{dead_idx}`, `{topic_idx}` the quoted index names;
//! `{extra_column_defs}`, `{idempotency_constraint}`, `{extra_foreign_keys}` the DDL the table's
//! declaration adds; `{key_locks}` the table of strict-order key locks. Every identifier goes
//! through [`quote_ident`]; every value is a bound parameter.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use hare_outbox_core::backend::template::render;
use hare_outbox_core::{ColumnType, ExtraColumn, IdempotencyScope, OutboxTable};

/// The columns every statement returns, in this order: the outbox-owned columns of the core.
pub(crate) const COLUMNS: &[&str] = hare_outbox_core::capture::OUTBOX_OWNED_COLUMNS;

/// The base columns an insert writes, in the order their parameters are bound; the extra columns
/// the message sets follow.
const INSERT_COLUMNS: &[&str] = &[
    "id",
    "topic",
    "payload",
    "headers",
    "ordering_key",
    "idempotency_key",
];

/// The most parameters one prepared statement may bind (MySQL's protocol counts them in 16 bits).
pub(crate) const MAX_BOUND_PARAMETERS: usize = 65_535;

/// How many rows of `extra` extra columns one multi-row insert takes at most: bounded by the
/// parameters of one statement and by 1,000 rows, which keeps a statement of large payloads well
/// within the default `max_allowed_packet` (64 MiB on MySQL 8 and MariaDB ≥ 10.6) as long as a
/// row stays under about 64 KiB; a run past that is split into several statements.
pub(crate) fn rows_per_insert(extra: usize) -> usize {
    (MAX_BOUND_PARAMETERS / (INSERT_COLUMNS.len() + extra)).clamp(1, 1_000)
}

/// The most bytes of values one multi-row insert carries (4 MiB): well within
/// `max_allowed_packet` (16 MiB by default on MariaDB 10.11, 64 MiB on MySQL 8.0), so a run of
/// large payloads is split into several statements instead of being refused.
pub(crate) const MAX_INSERT_BYTES: usize = 4 << 20;

/// `run` split into the chunks one multi-row insert each takes: at most
/// [`rows_per_insert`] rows and about [`MAX_INSERT_BYTES`] bytes of payload, headers and keys
/// (extra values count 64 bytes a row; a single larger message is a chunk of its own).
pub(crate) fn insert_chunks<'a>(
    run: &'a [&'a hare_outbox_core::backend::EventInsertParams],
    extra: usize,
) -> Vec<&'a [&'a hare_outbox_core::backend::EventInsertParams]> {
    let max_rows = rows_per_insert(extra);
    let mut chunks = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, p) in run.iter().enumerate() {
        let size = p.payload.to_string().len()
            + serde_json::Value::Object(p.headers.clone())
                .to_string()
                .len()
            + p.topic.len()
            + p.ordering_key.as_ref().map_or(0, String::len)
            + p.idempotency_key.as_ref().map_or(0, String::len)
            + 64;
        if i > start && (i - start >= max_rows || bytes + size > MAX_INSERT_BYTES) {
            chunks.push(&run[start..i]);
            start = i;
            bytes = 0;
        }
        bytes += size;
    }
    if start < run.len() {
        chunks.push(&run[start..]);
    }
    chunks
}

/// Every statement rendered so far, per table and shape, for the life of the process.
static CACHE: LazyLock<Mutex<StatementCache>> = LazyLock::new(Mutex::default);

/// Rendered statements by (table, shape).
type StatementCache = HashMap<(OutboxTable, String), Arc<str>>;

/// The statement of `table` and `shape`, rendered by `make` on first use.
pub(crate) fn cached(
    table: &OutboxTable,
    shape: String,
    make: impl FnOnce() -> String,
) -> Arc<str> {
    let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    cache
        .entry((table.clone(), shape))
        .or_insert_with(|| make().into())
        .clone()
}

/// A quoted identifier: `` `name` `` with inner backticks doubled.
pub(crate) fn quote_ident(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// A SQL string literal (quotes doubled, backslashes escaped for the default `sql_mode`).
pub(crate) fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "''"))
}

/// `name` qualified by the table's database (its schema), quoted.
pub(crate) fn qualified(table: &OutboxTable, name: &str) -> String {
    match table.schema() {
        Some(schema) => format!("{}.{}", quote_ident(schema), quote_ident(name)),
        None => quote_ident(name),
    }
}

/// The name of the unique index of idempotency keys for the table's scope; the insert tells a
/// taken key from any other unique violation by it.
pub(crate) fn idempotency_index(table: &OutboxTable) -> Option<String> {
    match table.idempotency_scope() {
        IdempotencyScope::Table => Some(format!("{}_idempotency_key_key", table.name())),
        IdempotencyScope::PerTenant => Some(format!("{}_tenant_idempotency_key_key", table.name())),
        IdempotencyScope::None => None,
    }
}

/// The table of strict-order key locks of `table`: one row per ordering key ever written with
/// strict order, locked by the writer until its transaction ends.
pub(crate) fn key_locks_table(table: &OutboxTable) -> String {
    qualified(table, &format!("{}_key_locks", table.name()))
}

/// `template` (a statement or a migration) for `table`, with the placeholders of every statement
/// and `more` filled.
pub(crate) fn render_table(template: &str, table: &OutboxTable, more: &[(&str, String)]) -> String {
    let name = table.name();
    let index = |suffix: &str| quote_ident(&format!("{name}_{suffix}"));
    let columns = COLUMNS
        .iter()
        .map(|c| (*c).to_owned())
        .chain(table.columns().iter().map(|c| quote_ident(c.name())))
        .collect::<Vec<_>>()
        .join(", ");
    let extra_column_defs: String = table
        .columns()
        .iter()
        .map(|c| format!(",\n    {}", column_def(table, c)))
        .collect();
    let extra_foreign_keys: String = table
        .columns()
        .iter()
        .filter_map(|c| foreign_key(table, c))
        .map(|fk| format!(",\n    {fk}"))
        .collect();
    let idempotency_constraint = match (table.idempotency_scope(), idempotency_index(table)) {
        (IdempotencyScope::Table, Some(index)) => {
            format!(
                ",\n    UNIQUE KEY {} (idempotency_key)",
                quote_ident(&index)
            )
        }
        (IdempotencyScope::PerTenant, Some(index)) => format!(
            ",\n    UNIQUE KEY {} ({}, idempotency_key)",
            quote_ident(&index),
            quote_ident(table.tenant_column().unwrap_or_default())
        ),
        _ => String::new(),
    };
    let mut values = vec![
        ("table", qualified(table, name)),
        ("key_locks", key_locks_table(table)),
        ("columns", columns),
        ("id_key", index("id_key")),
        ("pending_idx", index("pending_idx")),
        ("pending_key_idx", index("pending_key_idx")),
        ("published_idx", index("published_idx")),
        ("dead_idx", index("dead_idx")),
        ("topic_idx", index("topic_idx")),
        ("extra_column_defs", extra_column_defs),
        ("extra_foreign_keys", extra_foreign_keys),
        ("idempotency_constraint", idempotency_constraint),
    ];
    values.extend(more.iter().cloned());
    render(template, &values)
}

/// The column definition of an extra column (its foreign key is a separate clause: MySQL
/// ignores `REFERENCES` written on a column).
pub(crate) fn column_def(table: &OutboxTable, column: &ExtraColumn) -> String {
    // The tenant column is part of a unique index, so it cannot be TEXT.
    let tenant = table.tenant_column() == Some(column.name());
    let sql_type = if tenant && column.column_type() == ColumnType::Text {
        "VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
    } else {
        sql_type(column.column_type())
    };
    let mut def = format!("{} {sql_type}", quote_ident(column.name()));
    if column.is_not_null() {
        def.push_str(" NOT NULL");
    }
    def
}

/// The foreign key clause of an extra column that references a table, if it does.
pub(crate) fn foreign_key(table: &OutboxTable, column: &ExtraColumn) -> Option<String> {
    let (referenced_table, referenced) = column.referenced()?;
    let target: Vec<String> = referenced_table.split('.').map(quote_ident).collect();
    Some(format!(
        "CONSTRAINT {} FOREIGN KEY ({}) REFERENCES {} ({}) ON DELETE CASCADE",
        quote_ident(&format!("{}_{}_fkey", table.name(), column.name())),
        quote_ident(column.name()),
        target.join("."),
        quote_ident(referenced)
    ))
}

/// The MySQL type of a portable column type.
pub(crate) fn sql_type(column_type: ColumnType) -> &'static str {
    match column_type {
        ColumnType::BigInt => "BIGINT",
        ColumnType::Text => "TEXT",
        ColumnType::Uuid => "BINARY(16)",
        ColumnType::Boolean => "BOOLEAN",
        ColumnType::Timestamp => "DATETIME(6)",
        ColumnType::Json => "JSON",
    }
}

/// The columns an insert of a message setting the `extra` columns writes, in binding order.
fn insert_columns(extra: &[&str]) -> String {
    INSERT_COLUMNS
        .iter()
        .map(|c| (*c).to_owned())
        .chain(extra.iter().map(|c| quote_ident(c)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The insert of `rows` messages setting the `extra` columns, in one statement (one row: the
/// single insert), `RETURNING` the stored rows when `returning` (MariaDB). Cached per row count
/// up to 16 rows, rendered afresh above.
pub(crate) fn event_insert(
    table: &OutboxTable,
    extra: &[&str],
    rows: usize,
    returning: bool,
) -> Arc<str> {
    let make = || {
        let row = format!(
            "({})",
            vec!["?"; INSERT_COLUMNS.len() + extra.len()].join(", ")
        );
        render_table(
            include_str!("../queries/event_insert.sql"),
            table,
            &[
                ("insert_columns", insert_columns(extra)),
                ("insert_rows", vec![row; rows].join(",\n       ")),
                (
                    "returning",
                    if returning { "RETURNING {columns}" } else { "" }.to_owned(),
                ),
            ],
        )
    };
    if rows <= 16 {
        cached(
            table,
            format!("insert {rows} {returning} {extra:?}"),
            || render_table(&make(), table, &[]),
        )
    } else {
        render_table(&make(), table, &[]).into()
    }
}

/// A statement of `queries/` by file name, rendered for `table` (cached).
macro_rules! statement {
    ($table:expr, $file:literal) => {
        $crate::sql::cached($table, concat!("file ", $file).to_owned(), || {
            $crate::sql::render_table(
                include_str!(concat!("../queries/", $file, ".sql")),
                $table,
                &[],
            )
        })
    };
}
pub(crate) use statement;

/// The test of the relay's topics for the row aliased `alias`, with its five parameters in this
/// order: every topic? (0/1), included names, included prefixes, excluded names, excluded
/// prefixes (JSON arrays of strings, read with `JSON_TABLE`).
pub(crate) fn topic_filter(alias: &str) -> String {
    render(
        include_str!("../queries/event_topic_filter.sql"),
        &[("a", alias)],
    )
    .trim_end()
    .to_owned()
}

/// `template` rendered for `table` with `{topic_filter:o}` replaced by the topic test of the
/// row aliased `alias` (the quoted table itself in a single-table `DELETE`, which takes no alias
/// on MySQL 8.0).
pub(crate) fn with_topic_filter(template: &str, table: &OutboxTable, alias: &str) -> String {
    render_table(template, table, &[("topic_filter:o", topic_filter(alias))])
}

/// `sql` with its `{result_column}` placeholder replaced by the quoted `column`.
pub(crate) fn with_result_column(sql: &str, column: &str) -> String {
    render(sql, &[("result_column", quote_ident(column))])
}

/// `n` placeholders separated by commas, for an `IN (…)` list of `n` values (at least one: an
/// empty list is never sent).
pub(crate) fn placeholders(n: usize) -> String {
    vec!["?"; n.max(1)].join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_split_by_rows_and_by_bytes() {
        use hare_outbox_core::backend::EventInsertParams;
        let message = |size: usize| {
            EventInsertParams::new(
                uuid::Uuid::nil(),
                "t".to_owned(),
                serde_json::Value::String("x".repeat(size)),
                serde_json::Map::new(),
                None,
                None,
            )
        };
        let small: Vec<EventInsertParams> = (0..2_500).map(|_| message(10)).collect();
        let refs: Vec<&EventInsertParams> = small.iter().collect();
        let sizes: Vec<usize> = insert_chunks(&refs, 0).iter().map(|c| c.len()).collect();
        assert_eq!(sizes, [1_000, 1_000, 500]);
        let large: Vec<EventInsertParams> = (0..5).map(|_| message(1 << 20)).collect();
        let refs: Vec<&EventInsertParams> = large.iter().collect();
        let sizes: Vec<usize> = insert_chunks(&refs, 0).iter().map(|c| c.len()).collect();
        assert_eq!(sizes, [3, 2]);
        let huge = [message(5 << 20)];
        let refs: Vec<&EventInsertParams> = huge.iter().collect();
        assert_eq!(insert_chunks(&refs, 0).len(), 1);
    }

    #[test]
    fn identifiers_are_quoted_and_qualified() {
        assert_eq!(quote_ident("a`b"), "`a``b`");
        assert_eq!(literal("it's \\"), "'it''s \\\\'");
        let table = OutboxTable::parse("billing.events").expect("valid");
        assert_eq!(qualified(&table, "events"), "`billing`.`events`");
        let sql = render_table(
            include_str!("../migrations/outbox/0001_create_outbox.sql"),
            &table,
            &[],
        );
        assert!(
            sql.contains("CREATE TABLE IF NOT EXISTS `billing`.`events` ("),
            "{sql}"
        );
        assert!(sql.contains("UNIQUE KEY `events_idempotency_key_key` (idempotency_key)"));
        assert!(!sql.contains('{'), "{sql}");
        for c in COLUMNS {
            assert!(sql.contains(&format!("\n    {c} ")), "column {c} missing");
        }
    }
}
