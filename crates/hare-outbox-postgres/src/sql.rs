//! The SQL text of the backend, from `queries/*.sql`, rendered for one table.

use hare_outbox_core::OutboxTable;

/// The columns every statement returns, in this order.
pub(crate) const COLUMNS: &[&str] = &[
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

/// Every statement, rendered for one table.
pub(crate) struct Statements {
    pub(crate) schema: String,
    pub(crate) event_insert: String,
    pub(crate) event_get: String,
    pub(crate) event_get_by_idempotency_key: String,
    pub(crate) event_lease: String,
    pub(crate) event_lease_extend: String,
    pub(crate) event_mark_delivered: String,
    pub(crate) event_mark_failed: String,
    pub(crate) event_retry_dead_lettered: String,
    pub(crate) event_delete_published: String,
    pub(crate) event_delete_dead_lettered: String,
    pub(crate) backlog: String,
}

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
    pub(crate) fn new(table: &OutboxTable) -> Self {
        let quoted = quoted_table(table);
        let columns = COLUMNS.join(", ");
        let t_columns = COLUMNS
            .iter()
            .map(|c| format!("t.{c}"))
            .collect::<Vec<_>>()
            .join(", ");
        // The table name is validated to [A-Za-z0-9_], so it is safe inside a quoted index name.
        let render = |sql: &str| {
            sql.replace("{table}", &quoted)
                .replace("{prefix}", table.name())
                .replace("{columns}", &columns)
                .replace("{t_columns}", &t_columns)
        };
        let mut schema = String::new();
        if let Some(name) = table.schema() {
            schema.push_str(&format!(
                "CREATE SCHEMA IF NOT EXISTS {};\n",
                quote_ident(name)
            ));
        }
        schema.push_str(&render(include_str!("../queries/schema.sql")));
        Statements {
            schema,
            event_insert: render(include_str!("../queries/event_insert.sql")),
            event_get: render(include_str!("../queries/event_get.sql")),
            event_get_by_idempotency_key: render(include_str!(
                "../queries/event_get_by_idempotency_key.sql"
            )),
            event_lease: render(include_str!("../queries/event_lease.sql")),
            event_lease_extend: render(include_str!("../queries/event_lease_extend.sql")),
            event_mark_delivered: render(include_str!("../queries/event_mark_delivered.sql")),
            event_mark_failed: render(include_str!("../queries/event_mark_failed.sql")),
            event_retry_dead_lettered: render(include_str!(
                "../queries/event_retry_dead_lettered.sql"
            )),
            event_delete_published: render(include_str!("../queries/event_delete_published.sql")),
            event_delete_dead_lettered: render(include_str!(
                "../queries/event_delete_dead_lettered.sql"
            )),
            backlog: render(include_str!("../queries/backlog.sql")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_quoted_qualified_names() {
        let s = Statements::new(&OutboxTable::parse("billing.events").unwrap());
        assert!(
            s.schema
                .starts_with("CREATE SCHEMA IF NOT EXISTS \"billing\";")
        );
        assert!(
            s.schema
                .contains("CREATE TABLE IF NOT EXISTS \"billing\".\"events\"")
        );
        assert!(
            s.schema
                .contains("\"events_pending_idx\" ON \"billing\".\"events\"")
        );
        assert!(!s.event_lease.contains('{'), "{}", s.event_lease);
        for c in COLUMNS {
            assert!(
                s.schema.contains(&format!("\n    {c} ")),
                "column {c} missing"
            );
        }
    }
}
