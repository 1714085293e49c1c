//! The SQL text of the backend, from `queries/*.sql`, rendered for one table.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use hare_outbox_core::backend::template::{self, render};
use hare_outbox_core::{ColumnType, IdempotencyScope, OutboxTable};

/// The columns every statement returns, in this order: the outbox-owned columns of the core,
/// the one list every backend shares.
pub(crate) const COLUMNS: &[&str] = hare_outbox_core::capture::OUTBOX_OWNED_COLUMNS;

/// Every statement, rendered for one table.
pub(crate) struct Statements {
    /// The values of the table's placeholders (names without braces).
    placeholders: Vec<(&'static str, String)>,
    /// `ALTER TABLE … ADD COLUMN IF NOT EXISTS` of each declared extra column, `;`-terminated
    /// (empty without extra columns): run by every `migrate` after the versioned migrations,
    /// since the declaration changes without a new version.
    pub(crate) extra_column_alters: String,
    event_insert: String,
    event_insert_many: String,
    pub(crate) event_get: Arc<str>,
    pub(crate) event_list_pending: Arc<str>,
    pub(crate) event_get_by_idempotency_key: Arc<str>,
    /// The journal page after a cursor, oldest first.
    pub(crate) event_list_after: Arc<str>,
    /// The journal page before a cursor, newest first.
    pub(crate) event_list_before: Arc<str>,
    /// `event_list_after` and `event_list_before` with the object filter comparing the capture's
    /// label (`ObjectName::Label`) instead of the captured table.
    pub(crate) event_list_after_label: Arc<str>,
    pub(crate) event_list_before_label: Arc<str>,
    /// The operator's views (`queries/event_neighbours.sql`, `key_held_list.sql`,
    /// `key_head_update.sql`, `topic_stats_list.sql`, `relay_lease_list.sql`).
    pub(crate) event_neighbours: Arc<str>,
    pub(crate) key_held_list: Arc<str>,
    pub(crate) key_head_update: Arc<str>,
    pub(crate) topic_stats_list: Arc<str>,
    pub(crate) relay_lease_list: Arc<str>,
    pub(crate) event_timeline: Arc<str>,
    pub(crate) event_timeline_latency: Arc<str>,
    /// With `{limit}`, `{run_limit}`, `{min_keys}` and `{fill_cap}` left for
    /// [`Statements::event_lease`]: for relays of some topics, then of every topic.
    event_lease: [String; 2],
    pub(crate) event_lease_extend: Arc<str>,
    pub(crate) event_lease_release: Arc<str>,
    pub(crate) event_mark_delivered: Arc<str>,
    pub(crate) event_mark_failed: Arc<str>,
    /// With a `{result_column}` placeholder left for [`with_result_column`].
    pub(crate) event_mark_delivered_result: String,
    /// With a `{result_column}` placeholder left for [`with_result_column`].
    pub(crate) event_mark_failed_result: String,
    pub(crate) event_retry_dead_lettered: Arc<str>,
    pub(crate) event_delete_published: Arc<str>,
    pub(crate) event_delete_dead_lettered: Arc<str>,
    pub(crate) backlog: Arc<str>,
    /// Rendered inserts by (multi-row?, extra columns).
    inserts: Mutex<HashMap<InsertKey, Arc<str>>>,
    /// Rendered leases by their shape.
    leases: Mutex<HashMap<LeaseShape, Arc<str>>>,
}

/// What a rendered lease statement was rendered for: batch size, run limit, the keys the walk
/// gathers, and whether it filters topics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct LeaseShape {
    limit: i64,
    run_limit: i64,
    min_keys: i64,
    topic_filter: bool,
}

/// (multi-row?, extra columns) of a rendered insert.
type InsertKey = (bool, Vec<String>);

/// Statements rendered once per table, relay-commit mode and process.
static CACHE: LazyLock<Mutex<StatementCache>> = LazyLock::new(Mutex::default);

/// The rendered statements by table and relay-commit mode.
type StatementCache = HashMap<(OutboxTable, RelayCommit), Arc<Statements>>;

/// How the relay's own statements (lease, extend, release, marks) commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub(crate) enum RelayCommit {
    /// Without waiting for the WAL flush: `synchronous_commit = off` for that statement's
    /// transaction only.
    #[default]
    Asynchronous,
    /// With the server's own `synchronous_commit`.
    Synchronous,
}

impl RelayCommit {
    /// The condition spliced into each relay statement as `{relay_commit}`: it sets
    /// `synchronous_commit` for the statement's own transaction (`set_config(…, true)`, evaluated
    /// once as an uncorrelated sub-select) and is always true.
    fn condition(self) -> &'static str {
        match self {
            RelayCommit::Asynchronous => {
                "(SELECT set_config('synchronous_commit', 'off', true)) = 'off'"
            }
            RelayCommit::Synchronous => "true",
        }
    }
}

/// The journal's object name by captured table: the payload's `table` when it is a JSON string,
/// else its `model`. One expression, so an index on it (with `payload -> 'pk'`) serves the
/// object filter.
pub(crate) const OBJECT_BY_TABLE: &str = concat!(
    "(CASE WHEN jsonb_typeof(o.payload -> 'table') = 'string' ",
    "THEN o.payload -> 'table' ELSE o.payload -> 'model' END)"
);

/// The journal's object name by the capture's label: the payload's `model`.
pub(crate) const OBJECT_BY_LABEL: &str = "o.payload -> 'model'";

/// A quoted identifier: `"name"` with inner quotes doubled.
pub(crate) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The quoted, possibly schema-qualified table name.
pub(crate) fn quoted_table(table: &OutboxTable) -> String {
    match table.schema() {
        Some(schema) => format!("{}.{}", quote_ident(schema), quote_ident(table.name())),
        None => quote_ident(table.name()),
    }
}

impl Statements {
    /// The statements of `table` with relay statements committing asynchronously (the
    /// default), rendered on first use and kept for the process. For statements other than the
    /// relay's, both renderings are the same.
    pub(crate) fn for_table(table: &OutboxTable) -> Arc<Statements> {
        Statements::for_relay(table, RelayCommit::default())
    }

    /// The statements of `table` with relay statements committing as `commit` says (cached).
    pub(crate) fn for_relay(table: &OutboxTable, commit: RelayCommit) -> Arc<Statements> {
        let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
        cache
            .entry((table.clone(), commit))
            .or_insert_with(|| Arc::new(Statements::new(table, commit)))
            .clone()
    }

    pub(crate) fn new(table: &OutboxTable, commit: RelayCommit) -> Self {
        let quoted = quoted_table(table);
        let all: Vec<String> = COLUMNS
            .iter()
            .map(|c| (*c).to_owned())
            .chain(table.columns().iter().map(|c| quote_ident(c.name())))
            .collect();
        let columns = all.join(", ");
        let t_columns = all
            .iter()
            .map(|c| format!("t.{c}"))
            .collect::<Vec<_>>()
            .join(", ");
        let extra_column_defs: String = table
            .columns()
            .iter()
            .map(|c| format!(",\n    {}", column_def(c)))
            .collect();
        let extra_column_alters: String = table
            .columns()
            .iter()
            .map(|c| {
                format!(
                    "ALTER TABLE {quoted} ADD COLUMN IF NOT EXISTS {};\n",
                    column_def(c)
                )
            })
            .collect();
        let idempotency_constraint = match table.idempotency_scope() {
            IdempotencyScope::Table => format!(
                ",\n    CONSTRAINT {} UNIQUE (idempotency_key)",
                quote_ident(&format!("{}_idempotency_key_key", table.name()))
            ),
            IdempotencyScope::PerTenant => format!(
                ",\n    CONSTRAINT {} UNIQUE ({}, idempotency_key)",
                quote_ident(&format!("{}_tenant_idempotency_key_key", table.name())),
                quote_ident(table.tenant_column().unwrap_or_default())
            ),
            IdempotencyScope::None => String::new(),
        };
        // The table name is validated to [A-Za-z0-9_], so it is safe inside a quoted index name.
        let placeholders = vec![
            ("extra_column_defs", extra_column_defs),
            ("idempotency_constraint", idempotency_constraint),
            ("table", quoted),
            ("prefix", table.name().to_owned()),
            ("columns", columns),
            ("t_columns", t_columns),
            ("relay_commit", commit.condition().to_owned()),
        ];
        let render = |sql: &str| -> String { template::render(sql, &placeholders) };
        let r = |sql: &str| -> Arc<str> { render(sql).into() };
        // Only the comparison and the direction differ between the two journal pages, and the
        // object's name between the table and the label forms.
        let list = |keyset: &str, order: &str, object_name: &str| -> Arc<str> {
            template::render(
                &render(include_str!("../queries/event_list.sql")),
                &[
                    ("keyset", keyset),
                    ("order", order),
                    ("object_name", object_name),
                ],
            )
            .into()
        };
        Statements {
            extra_column_alters,
            event_insert: render(include_str!("../queries/event_insert.sql")),
            event_insert_many: render(include_str!("../queries/event_insert_many.sql")),
            event_get: r(include_str!("../queries/event_get.sql")),
            event_list_pending: r(include_str!("../queries/event_list_pending.sql")),
            event_get_by_idempotency_key: r(include_str!(
                "../queries/event_get_by_idempotency_key.sql"
            )),
            event_list_after: list(">", "ASC", OBJECT_BY_TABLE),
            event_list_before: list("<", "DESC", OBJECT_BY_TABLE),
            event_list_after_label: list(">", "ASC", OBJECT_BY_LABEL),
            event_list_before_label: list("<", "DESC", OBJECT_BY_LABEL),
            event_neighbours: r(include_str!("../queries/event_neighbours.sql")),
            key_held_list: r(include_str!("../queries/key_held_list.sql")),
            key_head_update: r(include_str!("../queries/key_head_update.sql")),
            topic_stats_list: r(include_str!("../queries/topic_stats_list.sql")),
            relay_lease_list: r(include_str!("../queries/relay_lease_list.sql")),
            event_timeline: r(include_str!("../queries/event_timeline.sql")),
            event_timeline_latency: r(include_str!("../queries/event_timeline_latency.sql")),
            event_lease: [true, false].map(|topic_filter| {
                lease_template(
                    &render(include_str!("../queries/event_lease.sql")),
                    topic_filter,
                )
            }),
            event_lease_extend: r(include_str!("../queries/event_lease_extend.sql")),
            event_lease_release: r(include_str!("../queries/event_lease_release.sql")),
            event_mark_delivered: r(include_str!("../queries/event_mark_delivered.sql")),
            event_mark_failed: r(include_str!("../queries/event_mark_failed.sql")),
            event_mark_delivered_result: render(include_str!(
                "../queries/event_mark_delivered_result.sql"
            )),
            event_mark_failed_result: render(include_str!(
                "../queries/event_mark_failed_result.sql"
            )),
            event_retry_dead_lettered: r(include_str!("../queries/event_retry_dead_lettered.sql")),
            event_delete_published: r(include_str!("../queries/event_delete_published.sql")),
            event_delete_dead_lettered: r(include_str!(
                "../queries/event_delete_dead_lettered.sql"
            )),
            backlog: r(include_str!("../queries/backlog.sql")),
            inserts: Mutex::default(),
            leases: Mutex::default(),
            placeholders,
        }
    }

    /// `sql` (a statement or a migration's template) with the table's placeholders filled.
    pub(crate) fn render(&self, sql: &str) -> String {
        template::render(sql, &self.placeholders)
    }
}

/// The lease template with each `{ready:ALIAS}` replaced by the readiness test of that alias
/// (`queries/event_ready.sql`, then `queries/event_topic_filter.sql` when `topic_filter`);
/// `{limit}`, `{run_limit}`, `{min_keys}` and `{fill_cap}` stay.
fn lease_template(sql: &str, topic_filter: bool) -> String {
    let mut ready = include_str!("../queries/event_ready.sql").to_owned();
    if topic_filter {
        ready.push('\n');
        ready.push_str(include_str!("../queries/event_topic_filter.sql"));
    }
    let fragments = ["k", "o", "e", "u"].map(|alias| {
        let fragment = render(&ready, &[("a", alias)]);
        (format!("ready:{alias}"), fragment.trim_end().to_owned())
    });
    render(sql, &fragments)
}

/// `sql` with its `{result_column}` placeholder replaced by the quoted `column`.
pub(crate) fn with_result_column(sql: &str, column: &str) -> String {
    render(sql, &[("result_column", quote_ident(column))])
}

/// The column definition of an extra column.
fn column_def(column: &hare_outbox_core::ExtraColumn) -> String {
    let mut def = format!(
        "{} {}",
        quote_ident(column.name()),
        sql_type(column.column_type())
    );
    if column.is_not_null() {
        def.push_str(" NOT NULL");
    }
    if let Some((table, referenced)) = column.referenced() {
        let table: Vec<String> = table.split('.').map(quote_ident).collect();
        def.push_str(&format!(
            " REFERENCES {} ({}) ON DELETE CASCADE",
            table.join("."),
            quote_ident(referenced)
        ));
    }
    def
}

/// The PostgreSQL type of a portable column type.
pub(crate) fn sql_type(column_type: ColumnType) -> &'static str {
    match column_type {
        ColumnType::BigInt => "BIGINT",
        ColumnType::Text => "TEXT",
        ColumnType::Uuid => "UUID",
        ColumnType::Boolean => "BOOLEAN",
        ColumnType::Timestamp => "TIMESTAMPTZ",
        ColumnType::Json => "JSONB",
    }
}

/// `ON CONFLICT` for the table's idempotency scope ("" when keys have no unique constraint).
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

/// The base columns an insert writes, then the extra columns named.
fn insert_columns(extra: &[&str]) -> String {
    [
        "id",
        "topic",
        "payload",
        "headers",
        "ordering_key",
        "idempotency_key",
    ]
    .iter()
    .map(|c| (*c).to_owned())
    .chain(extra.iter().map(|c| quote_ident(c)))
    .collect::<Vec<_>>()
    .join(", ")
}

impl Statements {
    /// The lease of `limit` events with at most `per_key` per ordering key, whose walk may stop
    /// once it holds `min_keys` keys that fill the batch (cached); `topic_filter` = whether it
    /// takes the five topic parameters `$5..$9`. The integers come from a validated relay
    /// configuration and are rendered as literals so PostgreSQL plans with them.
    pub(crate) fn event_lease(
        &self,
        limit: i64,
        per_key: i64,
        min_keys: i64,
        topic_filter: bool,
    ) -> Arc<str> {
        let limit = limit.max(1);
        let run_limit = (per_key.max(1) - 1).min(limit - 1).max(0);
        let min_keys = min_keys.clamp(1, limit);
        let shape = LeaseShape {
            limit,
            run_limit,
            min_keys,
            topic_filter,
        };
        // A key counts towards filling the batch with up to its share of it, and never more
        // than its run may take.
        let fill_cap = ((limit + min_keys - 1) / min_keys).min(run_limit + 1);
        let mut leases = self.leases.lock().unwrap_or_else(|p| p.into_inner());
        leases
            .entry(shape)
            .or_insert_with(|| {
                render(
                    &self.event_lease[usize::from(!topic_filter)],
                    &[
                        ("limit", limit),
                        ("run_limit", run_limit),
                        ("min_keys", min_keys),
                        ("fill_cap", fill_cap),
                    ]
                    .map(|(name, n)| (name, n.to_string())),
                )
                .into()
            })
            .clone()
    }

    /// The single-row insert for a message setting the `extra` columns.
    /// A rendered insert from the cache, rendering it with `make` on first use.
    fn insert_cached(&self, many: bool, extra: &[&str], make: impl FnOnce() -> String) -> Arc<str> {
        let key = (many, extra.iter().map(|c| (*c).to_owned()).collect());
        let mut inserts = self.inserts.lock().unwrap_or_else(|p| p.into_inner());
        inserts.entry(key).or_insert_with(|| make().into()).clone()
    }

    /// The single-row insert for a message setting the `extra` columns (cached).
    pub(crate) fn insert_one(&self, table: &OutboxTable, extra: &[&str]) -> Arc<str> {
        self.insert_cached(false, extra, || self.event_insert(table, extra))
    }

    /// The multi-row insert for a run setting the `extra` columns (cached).
    pub(crate) fn insert_many(&self, table: &OutboxTable, extra: &[&str]) -> Arc<str> {
        self.insert_cached(true, extra, || self.event_insert_many(table, extra))
    }

    fn event_insert(&self, table: &OutboxTable, extra: &[&str]) -> String {
        let values: Vec<String> = (1..=6 + extra.len()).map(|i| format!("${i}")).collect();
        render(
            &self.event_insert,
            &[
                ("insert_columns", insert_columns(extra)),
                ("insert_values", values.join(", ")),
                ("on_conflict", on_conflict(table)),
            ],
        )
    }

    /// The multi-row insert of one run of messages setting the `extra` columns.
    fn event_insert_many(&self, table: &OutboxTable, extra: &[&str]) -> String {
        let mut args = vec![
            "$1::uuid[]".to_owned(),
            "$2::text[]".to_owned(),
            "$3::jsonb[]".to_owned(),
            "$4::jsonb[]".to_owned(),
            "$5::text[]".to_owned(),
            "$6::text[]".to_owned(),
        ];
        for (i, name) in extra.iter().enumerate() {
            let column_type = table
                .column(name)
                .map_or(ColumnType::Text, |c| c.column_type());
            args.push(format!("${}::{}[]", 7 + i, sql_type(column_type)));
        }
        render(
            &self.event_insert_many,
            &[
                ("insert_columns", insert_columns(extra)),
                ("unnest_args", args.join(", ")),
                ("on_conflict", on_conflict(table)),
            ],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_quoted_qualified_names() {
        let table = OutboxTable::parse("billing.events").unwrap();
        let s = Statements::new(&table, RelayCommit::Asynchronous);
        let schema = crate::migrate::sql(
            crate::migrate::OUTBOX,
            hare_outbox_core::MigrationStream::Outbox,
            &table,
            0,
        );
        assert!(schema.starts_with("CREATE SCHEMA IF NOT EXISTS \"billing\";"));
        assert!(schema.contains("CREATE TABLE IF NOT EXISTS \"billing\".\"events\""));
        assert!(schema.contains("\"events_pending_idx\" ON \"billing\".\"events\""));
        let lease = s.event_lease(100, 10, 10, true);
        assert!(lease.contains("LIMIT 9") && lease.contains("w.found < 100"));
        assert!(lease.contains("w.found >= 10 AND w.filled >= 100") && lease.contains("LIMIT 10)"));
        assert!(lease.contains("$9") && lease.contains("set_config('synchronous_commit', 'off'"));
        let every_topic = s.event_lease(100, 10, 10, false);
        assert!(!every_topic.contains("$5 OR") && !every_topic.contains("$9::"));
        let synchronous = Statements::new(
            &OutboxTable::parse("billing.events").unwrap(),
            RelayCommit::Synchronous,
        );
        for sql in [
            &synchronous.event_lease(100, 1, 10, false),
            &synchronous.event_mark_delivered,
            &synchronous.event_mark_failed,
            &synchronous.event_lease_extend,
            &synchronous.event_lease_release,
        ] {
            assert!(!sql.contains("set_config"), "{sql}");
        }
        for sql in [
            &lease,
            &every_topic,
            &s.event_mark_delivered,
            &s.event_mark_failed,
            &s.event_lease_extend,
            &s.event_lease_release,
            &s.event_list_after,
            &s.event_list_before,
            &s.event_timeline,
            &s.event_timeline_latency,
        ] {
            assert!(!sql.contains('{') && !sql.contains('}'), "{sql}");
        }
        assert!(s.event_list_before.contains("o.sequence < $19"));
        assert!(s.event_list_before.contains("ORDER BY o.sequence DESC"));
        assert!(s.event_list_after.contains("o.sequence > $19"));
        assert!(s.event_list_after.contains("ORDER BY o.sequence ASC"));
        for c in COLUMNS {
            assert!(
                schema.contains(&format!("\n    {c} ")),
                "column {c} missing"
            );
        }
    }
}
