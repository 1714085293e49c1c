//! The SQL text of the backend, from `queries/*.sql`, rendered for one table.
//!
//! Placeholders: `{table}` the quoted, possibly schema-qualified table (`"billing"."outbox"`);
//! `{table_name}` the quoted table alone (an index's `ON` clause names its table without schema on
//! SQLite); `{schema_prefix}` the quoted schema and a dot, or nothing; `{pending_idx}`,
//! `{pending_key_idx}`, `{published_idx}`, `{dead_idx}`, `{topic_idx}` the quoted index names
//! `<table>_pending_idx` and so on; `{columns}` the columns every statement returns
//! ([`COLUMNS`], then the table's extra columns); `{idempotency_key_unique}`,
//! `{extra_column_defs}`, `{idempotency_constraint}` the DDL of the extra columns and of the
//! idempotency key's unique constraint; `{on_conflict}` the matching `ON CONFLICT … DO NOTHING`.
//! Per message shape: `{insert_columns}`, `{insert_values}`, `{insert_rows}`; per added column:
//! `{column_def}`; per journal page direction: `{keyset}` (`<` or `>`) and `{order}` (`DESC` or
//! `ASC`). Every identifier goes through [`quote_ident`].

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use hare_outbox_core::backend::template::render;
use hare_outbox_core::journal::ObjectName;
use hare_outbox_core::{ColumnType, Error, ExtraColumn, IdempotencyScope, OutboxTable, Result};

/// Every statement rendered so far, per table and statement shape (a query, a lease's limits, an
/// insert's extra columns, a result column), for the life of the process: rendering happens once.
static CACHE: LazyLock<Mutex<StatementCache>> = LazyLock::new(Mutex::default);

/// Rendered statements by (table, shape).
type StatementCache = HashMap<(OutboxTable, String), Arc<str>>;

/// The statement of `table` and `shape`, rendered by `make` on first use.
fn cached(table: &OutboxTable, shape: String, make: impl FnOnce() -> String) -> Arc<str> {
    let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    cache
        .entry((table.clone(), shape))
        .or_insert_with(|| make().into())
        .clone()
}

const EVENT_INSERT: &str = include_str!("../queries/event_insert.sql");
const EVENT_INSERT_MANY: &str = include_str!("../queries/event_insert_many.sql");
const EVENT_GET: &str = include_str!("../queries/event_get.sql");
const EVENT_LIST_PENDING: &str = include_str!("../queries/event_list_pending.sql");
const EVENT_LIST: &str = include_str!("../queries/event_list.sql");
const EVENT_TIMELINE: &str = include_str!("../queries/event_timeline.sql");
const EVENT_TIMELINE_LATENCY: &str = include_str!("../queries/event_timeline_latency.sql");
const EVENT_GET_BY_IDEMPOTENCY_KEYS: &str =
    include_str!("../queries/event_get_by_idempotency_key.sql");
const EVENT_LEASE: &str = include_str!("../queries/event_lease.sql");
const EVENT_READY: &str = include_str!("../queries/event_ready.sql");
const EVENT_LEASE_RELEASE: &str = include_str!("../queries/event_lease_release.sql");
const EVENT_LEASE_EXTEND: &str = include_str!("../queries/event_lease_extend.sql");
const EVENT_MARK_DELIVERED: &str = include_str!("../queries/event_mark_delivered.sql");
const EVENT_MARK_FAILED: &str = include_str!("../queries/event_mark_failed.sql");
const EVENT_MARK_DELIVERED_RESULT: &str =
    include_str!("../queries/event_mark_delivered_result.sql");
const EVENT_MARK_FAILED_RESULT: &str = include_str!("../queries/event_mark_failed_result.sql");
const EVENT_RETRY_DEAD_LETTERED: &str = include_str!("../queries/event_retry_dead_lettered.sql");
const EVENT_DELETE_PUBLISHED: &str = include_str!("../queries/event_delete_published.sql");
const EVENT_DELETE_DEAD_LETTERED: &str = include_str!("../queries/event_delete_dead_lettered.sql");
const BACKLOG: &str = include_str!("../queries/backlog.sql");
const TABLE_COLUMNS: &str = include_str!("../queries/table_columns.sql");
const ADD_COLUMN: &str = include_str!("../queries/add_column.sql");
const EVENT_NEIGHBOURS: &str = include_str!("../queries/event_neighbours.sql");
const KEY_HELD_LIST: &str = include_str!("../queries/key_held_list.sql");
const KEY_HEAD_UPDATE: &str = include_str!("../queries/key_head_update.sql");
const TOPIC_STATS_LIST: &str = include_str!("../queries/topic_stats_list.sql");
const RELAY_LEASE_LIST: &str = include_str!("../queries/relay_lease_list.sql");

/// The journal's object name by captured table: the payload's `table` when it is a string, else
/// its `model` when that is one (NULL otherwise, which matches nothing).
const OBJECT_BY_TABLE: &str = "CASE WHEN json_type(o.payload, '$.table') = 'text' \
     THEN o.payload ->> '$.table' \
     WHEN json_type(o.payload, '$.model') = 'text' THEN o.payload ->> '$.model' END";

/// The journal's object name by the capture's label: the payload's `model` when it is a string.
const OBJECT_BY_LABEL: &str =
    "CASE WHEN json_type(o.payload, '$.model') = 'text' THEN o.payload ->> '$.model' END";

/// The columns every statement returns, in this order (the outbox-owned columns of the core,
/// the one list every backend shares); the table's extra columns follow.
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
    "created_at",
];

/// The most parameters one statement may bind: `SQLITE_MAX_VARIABLE_NUMBER` of the bundled SQLite
/// (32766 since SQLite 3.32). A run of messages whose rows need more is split into chunks.
pub(crate) const MAX_BOUND_PARAMETERS: usize = 32766;

/// How many rows of `extra` extra columns one multi-row insert takes at most.
pub(crate) fn rows_per_insert(extra: usize) -> usize {
    (MAX_BOUND_PARAMETERS / (INSERT_COLUMNS.len() + extra)).max(1)
}

/// The statements of the backend.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Query {
    EventInsert,
    EventInsertMany,
    EventGet,
    EventListPending,
    EventGetByIdempotencyKeys,
    /// Rendered by [`event_list`].
    EventList,
    EventTimeline,
    EventTimelineLatency,
    /// Rendered by [`event_lease`].
    EventLease,
    EventLeaseExtend,
    EventLeaseRelease,
    EventMarkDelivered,
    EventMarkFailed,
    /// Rendered by [`with_result_column`].
    EventMarkDeliveredResult,
    /// Rendered by [`with_result_column`].
    EventMarkFailedResult,
    EventRetryDeadLettered,
    EventDeletePublished,
    EventDeleteDeadLettered,
    Backlog,
    TableColumns,
    AddColumn,
    // The operator's views (src/views.rs).
    EventNeighbours,
    KeyHeldList,
    KeyHeadUpdate,
    TopicStatsList,
    RelayLeaseList,
}

impl Query {
    fn template(self) -> &'static str {
        match self {
            Query::EventInsert => EVENT_INSERT,
            Query::EventInsertMany => EVENT_INSERT_MANY,
            Query::EventGet => EVENT_GET,
            Query::EventListPending => EVENT_LIST_PENDING,
            Query::EventGetByIdempotencyKeys => EVENT_GET_BY_IDEMPOTENCY_KEYS,
            Query::EventList => EVENT_LIST,
            Query::EventTimeline => EVENT_TIMELINE,
            Query::EventTimelineLatency => EVENT_TIMELINE_LATENCY,
            Query::EventLease => EVENT_LEASE,
            Query::EventLeaseExtend => EVENT_LEASE_EXTEND,
            Query::EventLeaseRelease => EVENT_LEASE_RELEASE,
            Query::EventMarkDelivered => EVENT_MARK_DELIVERED,
            Query::EventMarkFailed => EVENT_MARK_FAILED,
            Query::EventMarkDeliveredResult => EVENT_MARK_DELIVERED_RESULT,
            Query::EventMarkFailedResult => EVENT_MARK_FAILED_RESULT,
            Query::EventRetryDeadLettered => EVENT_RETRY_DEAD_LETTERED,
            Query::EventDeletePublished => EVENT_DELETE_PUBLISHED,
            Query::EventDeleteDeadLettered => EVENT_DELETE_DEAD_LETTERED,
            Query::Backlog => BACKLOG,
            Query::TableColumns => TABLE_COLUMNS,
            Query::AddColumn => ADD_COLUMN,
            Query::EventNeighbours => EVENT_NEIGHBOURS,
            Query::KeyHeldList => KEY_HELD_LIST,
            Query::KeyHeadUpdate => KEY_HEAD_UPDATE,
            Query::TopicStatsList => TOPIC_STATS_LIST,
            Query::RelayLeaseList => RELAY_LEASE_LIST,
        }
    }

    /// The statement's text for `table` (cached). The statements with per-message placeholders
    /// are rendered by [`event_insert`], [`event_insert_many`] and [`add_column`].
    pub(crate) fn render(self, table: &OutboxTable) -> Arc<str> {
        cached(table, format!("{self:?}"), || self.render_with(table, &[]))
    }

    /// The statement's text for `table`, with `more` placeholders filled as well.
    fn render_with(self, table: &OutboxTable, more: &[(&str, String)]) -> String {
        render_table(self.template(), table, more)
    }
}

/// `template` (a statement or a migration) for `table`, with the placeholders of every statement
/// and `more` filled.
pub(crate) fn render_table(template: &str, table: &OutboxTable, more: &[(&str, String)]) -> String {
    let name = table.name();
    let table_name = quote_ident(name);
    let (qualified, schema_prefix) = match table.schema() {
        Some(schema) => {
            let prefix = format!("{}.", quote_ident(schema));
            (format!("{prefix}{table_name}"), prefix)
        }
        None => (table_name.clone(), String::new()),
    };
    let index = |suffix: &str| quote_ident(&format!("{name}_{suffix}"));
    let columns = COLUMNS
        .iter()
        .map(|c| (*c).to_owned())
        .chain(table.columns().iter().map(|c| quote_column(c.name())))
        .collect::<Vec<_>>()
        .join(", ");
    let extra_column_defs: String = table
        .columns()
        .iter()
        .map(|c| format!(",\n    {}", column_def(c, false)))
        .collect();
    let (idempotency_key_unique, idempotency_constraint) = match table.idempotency_scope() {
        // The column constraint of every table created before scopes existed: the same
        // UNIQUE (idempotency_key), and the same DDL for a table without extra columns.
        IdempotencyScope::Table => (" UNIQUE".to_owned(), String::new()),
        IdempotencyScope::PerTenant => (
            String::new(),
            format!(
                ",\n    CONSTRAINT {} UNIQUE ({}, idempotency_key)",
                index("tenant_idempotency_key_key"),
                quote_ident(table.tenant_column().unwrap_or_default())
            ),
        ),
        IdempotencyScope::None => (String::new(), String::new()),
    };
    let mut replacements = vec![
        ("table", qualified),
        ("table_name", table_name),
        ("schema_prefix", schema_prefix),
        ("pending_idx", index("pending_idx")),
        ("pending_key_idx", index("pending_key_idx")),
        ("published_idx", index("published_idx")),
        ("dead_idx", index("dead_idx")),
        ("topic_idx", index("topic_idx")),
        ("columns", columns),
        ("idempotency_key_unique", idempotency_key_unique),
        ("extra_column_defs", extra_column_defs),
        ("idempotency_constraint", idempotency_constraint),
        ("on_conflict", on_conflict(table)),
    ];
    replacements.extend(more.iter().cloned());
    render(template, &replacements)
}

/// `ON CONFLICT` for the table's idempotency scope (nothing when keys have no unique constraint).
fn on_conflict(table: &OutboxTable) -> String {
    match table.idempotency_scope() {
        IdempotencyScope::Table => "ON CONFLICT (idempotency_key) DO NOTHING".to_owned(),
        IdempotencyScope::PerTenant => format!(
            "ON CONFLICT ({}, idempotency_key) DO NOTHING",
            quote_ident(table.tenant_column().unwrap_or_default())
        ),
        IdempotencyScope::None => String::new(),
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

/// The lease of `limit` events with at most `per_key` per ordering key, whose walk may stop once
/// it holds `min_keys` keys that fill the batch; integers from a validated relay configuration,
/// rendered as literals. Each `{ready:ALIAS}` becomes the readiness test of `event_ready.sql` for
/// that alias.
pub(crate) fn event_lease(
    table: &OutboxTable,
    limit: i64,
    per_key: i64,
    min_keys: i64,
) -> Arc<str> {
    let limit = limit.max(1);
    let run_limit = (per_key.max(1) - 1).min(limit - 1).max(0);
    let min_keys = min_keys.clamp(1, limit);
    // A key counts towards filling the batch with up to its share of it, and never more than its
    // run may take.
    let fill_cap = ((limit + min_keys - 1) / min_keys).min(run_limit + 1);
    let shape = format!("lease {limit} {run_limit} {min_keys}");
    cached(table, shape, || {
        let mut more = vec![
            ("limit", limit.to_string()),
            ("run_limit", run_limit.to_string()),
            ("min_keys", min_keys.to_string()),
            ("fill_cap", fill_cap.to_string()),
        ];
        for (name, alias) in [("ready:o", "o"), ("ready:e", "e"), ("ready:u", "u")] {
            let ready = render(EVENT_READY, &[("a", alias)]);
            more.push((name, ready.trim_end().to_owned()));
        }
        Query::EventLease.render_with(table, &more)
    })
}

/// The single-row insert of a message setting the `extra` columns (in the table's order).
pub(crate) fn event_insert(table: &OutboxTable, extra: &[&str]) -> Arc<str> {
    cached(table, format!("insert {extra:?}"), || {
        let values: Vec<String> = (1..=INSERT_COLUMNS.len() + extra.len())
            .map(|i| format!("?{i}"))
            .collect();
        Query::EventInsert.render_with(
            table,
            &[
                ("insert_columns", insert_columns(extra)),
                ("insert_values", values.join(", ")),
            ],
        )
    })
}

/// The insert of `rows` messages setting the `extra` columns, in one statement; `rows` is at most
/// [`rows_per_insert`]. Not cached: one text per row count would keep thousands of long
/// statements.
pub(crate) fn event_insert_many(table: &OutboxTable, extra: &[&str], rows: usize) -> String {
    let row = format!(
        "({})",
        vec!["?"; INSERT_COLUMNS.len() + extra.len()].join(", ")
    );
    Query::EventInsertMany.render_with(
        table,
        &[
            ("insert_columns", insert_columns(extra)),
            ("insert_rows", vec![row; rows].join(",\n       ")),
        ],
    )
}

/// The journal page statement: newest first below a cursor sequence (`ascending = false`) or
/// oldest first above it (`ascending = true`). Only the comparison and the sort direction
/// differ; every filter value is a parameter.
pub(crate) fn event_list(
    table: &OutboxTable,
    ascending: bool,
    object_name: ObjectName,
) -> Arc<str> {
    let (keyset, order) = if ascending {
        (">", "ASC")
    } else {
        ("<", "DESC")
    };
    let object_name = match object_name {
        ObjectName::Table => OBJECT_BY_TABLE,
        ObjectName::Label => OBJECT_BY_LABEL,
    };
    cached(table, format!("list {order} {object_name}"), || {
        Query::EventList.render_with(
            table,
            &[
                ("keyset", keyset.to_owned()),
                ("order", order.to_owned()),
                ("object_name", object_name.to_owned()),
            ],
        )
    })
}

/// A mark statement that also writes the result column `column` (the relay's
/// `result_column`): [`Query::EventMarkDeliveredResult`] or [`Query::EventMarkFailedResult`].
pub(crate) fn with_result_column(query: Query, table: &OutboxTable, column: &str) -> Arc<str> {
    cached(table, format!("{query:?} {column}"), || {
        query.render_with(table, &[("result_column", quote_column(column))])
    })
}

/// The `ALTER TABLE … ADD COLUMN` of an extra column missing from an existing table.
pub(crate) fn add_column(table: &OutboxTable, column: &ExtraColumn) -> String {
    Query::AddColumn.render_with(table, &[("column_def", column_def(column, true))])
}

/// The SQLite type of a portable column type.
pub(crate) fn sql_type(column_type: ColumnType) -> &'static str {
    match column_type {
        ColumnType::BigInt | ColumnType::Boolean => "INTEGER",
        ColumnType::Text | ColumnType::Uuid | ColumnType::Timestamp | ColumnType::Json => "TEXT",
    }
}

/// The definition of an extra column: in `CREATE TABLE`, or (`adding`) in `ADD COLUMN`, where
/// SQLite refuses `NOT NULL` without a default and a `CHECK` stands in for it.
///
/// A foreign key names its table without schema: SQLite's `REFERENCES` takes a table of the
/// child's own database only ([`check_references`] refuses another database).
fn column_def(column: &ExtraColumn, adding: bool) -> String {
    let name = quote_ident(column.name());
    let mut def = format!("{name} {}", sql_type(column.column_type()));
    if column.is_not_null() {
        if adding {
            def.push_str(&format!(" CHECK ({name} IS NOT NULL)"));
        } else {
            def.push_str(" NOT NULL");
        }
    }
    if let Some((table, referenced)) = column.referenced() {
        let table = table.rsplit('.').next().unwrap_or(table);
        def.push_str(&format!(
            " REFERENCES {} ({}) ON DELETE CASCADE",
            quote_ident(table),
            quote_ident(referenced)
        ));
    }
    def
}

/// Refuses a foreign key to a table of another database than the outbox table's: SQLite
/// enforces foreign keys within one database only.
///
/// # Errors
/// [`Error::Configuration`] naming the column and both databases.
pub(crate) fn check_references(table: &OutboxTable) -> Result<()> {
    let database = table.schema().unwrap_or("main");
    for column in table.columns() {
        let Some((referenced, _)) = column.referenced() else {
            continue;
        };
        if let Some((schema, _)) = referenced.rsplit_once('.')
            && !schema.eq_ignore_ascii_case(database)
        {
            return Err(Error::configuration(format!(
                "outbox table {table}: extra column {:?} references {referenced:?} in database {schema:?}, but SQLite foreign keys stay within one database ({database:?}, the outbox table's)",
                column.name()
            )));
        }
    }
    Ok(())
}

/// A quoted SQL identifier: `"name"`, with inner double quotes doubled.
pub(crate) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `name` quoted as a column read in an expression (a select list, `RETURNING`): in backticks,
/// which SQLite always takes as an identifier. A double-quoted name that matches no column is
/// read as a string literal instead (SQLite's double-quoted-string compatibility), so a
/// connection that prepared a statement before `migrate` added the column elsewhere would
/// select the text `'tenant_id'` rather than fail and reload its schema.
pub(crate) fn quote_column(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_and_doubles_inner_quotes() {
        assert_eq!(quote_ident("outbox"), "\"outbox\"");
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
    }

    #[test]
    fn schema_qualified_index_names_the_table_without_schema() {
        let table = OutboxTable::parse("billing.events").expect("valid name");
        let sql = render_table(crate::migrate::OUTBOX[0].template, &table, &[]);
        assert!(
            sql.contains("CREATE TABLE IF NOT EXISTS \"billing\".\"events\" ("),
            "{sql}"
        );
        assert!(
            sql.contains("CREATE INDEX IF NOT EXISTS \"billing\".\"events_pending_idx\"\n    ON \"events\" (sequence)"),
            "{sql}"
        );
        assert!(!sql.contains('{') || sql.contains("DEFAULT '{}'"), "{sql}");
    }

    #[test]
    fn every_placeholder_is_filled() {
        let table = OutboxTable::parse("main.outbox")
            .expect("valid name")
            .with_column(ExtraColumn::new("tenant", ColumnType::Text).expect("valid column"))
            .expect("new column")
            .with_tenant_column("tenant")
            .expect("tenant column");
        let tenant = table.column("tenant").expect("declared").clone();
        let mut rendered: Vec<Arc<str>> = vec![
            event_insert(&table, &["tenant"]),
            event_insert_many(&table, &["tenant"], 3).into(),
            add_column(&table, &tenant).into(),
            event_list(&table, false, ObjectName::Table),
            event_list(&table, true, ObjectName::Label),
            with_result_column(Query::EventMarkDeliveredResult, &table, "tenant"),
            with_result_column(Query::EventMarkFailedResult, &table, "tenant"),
        ];
        rendered.push(render_table(crate::migrate::OUTBOX[0].template, &table, &[]).into());
        for query in [
            Query::EventGet,
            Query::EventListPending,
            Query::EventGetByIdempotencyKeys,
            Query::EventLeaseExtend,
            Query::EventMarkDelivered,
            Query::EventMarkFailed,
            Query::EventRetryDeadLettered,
            Query::EventDeletePublished,
            Query::EventDeleteDeadLettered,
            Query::Backlog,
            Query::EventTimeline,
            Query::EventTimelineLatency,
            Query::TableColumns,
            Query::EventNeighbours,
            Query::KeyHeldList,
            Query::KeyHeadUpdate,
            Query::TopicStatsList,
            Query::RelayLeaseList,
        ] {
            rendered.push(query.render(&table));
        }
        rendered.push(event_lease(&table, 100, 10, 10));
        for sql in rendered {
            let sql = sql.replace("'{}'", "");
            assert!(!sql.contains('{') && !sql.contains('}'), "{sql}");
        }
    }

    #[test]
    fn extra_columns_and_scopes_in_the_ddl() {
        let base = || {
            OutboxTable::parse("outbox")
                .expect("valid name")
                .with_column(
                    ExtraColumn::new("tenant_id", ColumnType::BigInt)
                        .expect("valid")
                        .not_null(),
                )
                .expect("column")
                .with_column(
                    ExtraColumn::new("sub", ColumnType::BigInt)
                        .expect("valid")
                        .references("main.subs", "id")
                        .expect("valid"),
                )
                .expect("column")
                .with_tenant_column("tenant_id")
                .expect("tenant")
        };
        let table = base();
        let sql = render_table(crate::migrate::OUTBOX[0].template, &table, &[]);
        assert!(sql.contains("idempotency_key TEXT UNIQUE,"), "{sql}");
        assert!(
            sql.contains(
                "dead_lettered_at TEXT,\n    \"tenant_id\" INTEGER NOT NULL,\n    \"sub\" INTEGER REFERENCES \"subs\" (\"id\") ON DELETE CASCADE\n);"
            ),
            "{sql}"
        );
        assert!(event_insert(&table, &[]).contains("ON CONFLICT (idempotency_key) DO NOTHING"));
        check_references(&table).expect("same database");

        let per_tenant = base()
            .with_idempotency_scope(IdempotencyScope::PerTenant)
            .expect("scope");
        let sql = render_table(crate::migrate::OUTBOX[0].template, &per_tenant, &[]);
        assert!(sql.contains("idempotency_key TEXT,"), "{sql}");
        assert!(
            sql.contains("CONSTRAINT \"outbox_tenant_idempotency_key_key\" UNIQUE (\"tenant_id\", idempotency_key)\n);"),
            "{sql}"
        );
        assert!(
            event_insert_many(&per_tenant, &["tenant_id"], 2)
                .contains("ON CONFLICT (\"tenant_id\", idempotency_key) DO NOTHING")
        );

        let none = base()
            .with_idempotency_scope(IdempotencyScope::None)
            .expect("scope");
        let sql = render_table(crate::migrate::OUTBOX[0].template, &none, &[]);
        assert!(
            !sql.contains("UNIQUE (") && sql.contains("idempotency_key TEXT,"),
            "{sql}"
        );
        assert!(!event_insert(&none, &[]).contains("ON CONFLICT"));

        let tenant = table.column("tenant_id").expect("declared");
        assert_eq!(
            add_column(&table, tenant).lines().last(),
            Some(
                "ALTER TABLE \"outbox\" ADD COLUMN \"tenant_id\" INTEGER CHECK (\"tenant_id\" IS NOT NULL)"
            )
        );
        let elsewhere = OutboxTable::parse("outbox")
            .expect("valid")
            .with_column(
                ExtraColumn::new("sub", ColumnType::BigInt)
                    .expect("valid")
                    .references("other.subs", "id")
                    .expect("valid"),
            )
            .expect("column");
        assert!(matches!(
            check_references(&elsewhere),
            Err(Error::Configuration(_))
        ));
    }

    #[test]
    fn rows_per_insert_stay_within_the_parameter_limit() {
        assert_eq!(rows_per_insert(0), 4680);
        assert_eq!(rows_per_insert(3), 3276);
        for extra in 0..40 {
            assert!(
                rows_per_insert(extra) * (INSERT_COLUMNS.len() + extra) <= MAX_BOUND_PARAMETERS
            );
        }
        let sql = event_insert_many(&OutboxTable::default(), &[], 2);
        assert!(
            sql.contains("VALUES (?, ?, ?, ?, ?, ?, ?),\n       (?, ?, ?, ?, ?, ?, ?)\n"),
            "{sql}"
        );
    }
}
