//! The SQL text of the backend, from `queries/*.sql`, rendered for one table.
//!
//! Placeholders: `{table}` the quoted, possibly schema-qualified table (`"billing"."outbox"`);
//! `{table_name}` the quoted table alone (an index's `ON` clause names its table without schema on
//! SQLite); `{schema_prefix}` the quoted schema and a dot, or nothing; `{pending_idx}`,
//! `{pending_key_idx}`, `{published_idx}`, `{dead_idx}`, `{topic_idx}` the quoted index names
//! `<table>_pending_idx` and so on. Every identifier goes through [`quote_ident`].

use hare_outbox_core::OutboxTable;

const SCHEMA: &str = include_str!("../queries/schema.sql");
const EVENT_INSERT: &str = include_str!("../queries/event_insert.sql");
const EVENT_GET: &str = include_str!("../queries/event_get.sql");
const EVENT_GET_BY_IDEMPOTENCY_KEY: &str =
    include_str!("../queries/event_get_by_idempotency_key.sql");
const EVENT_LEASE: &str = include_str!("../queries/event_lease.sql");
const EVENT_LEASE_EXTEND: &str = include_str!("../queries/event_lease_extend.sql");
const EVENT_MARK_DELIVERED: &str = include_str!("../queries/event_mark_delivered.sql");
const EVENT_MARK_FAILED: &str = include_str!("../queries/event_mark_failed.sql");
const EVENT_RETRY_DEAD_LETTERED: &str = include_str!("../queries/event_retry_dead_lettered.sql");
const EVENT_DELETE_PUBLISHED: &str = include_str!("../queries/event_delete_published.sql");
const EVENT_DELETE_DEAD_LETTERED: &str = include_str!("../queries/event_delete_dead_lettered.sql");
const BACKLOG: &str = include_str!("../queries/backlog.sql");

/// The statements of the backend.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Query {
    Schema,
    EventInsert,
    EventGet,
    EventGetByIdempotencyKey,
    EventLease,
    EventLeaseExtend,
    EventMarkDelivered,
    EventMarkFailed,
    EventRetryDeadLettered,
    EventDeletePublished,
    EventDeleteDeadLettered,
    Backlog,
}

impl Query {
    fn template(self) -> &'static str {
        match self {
            Query::Schema => SCHEMA,
            Query::EventInsert => EVENT_INSERT,
            Query::EventGet => EVENT_GET,
            Query::EventGetByIdempotencyKey => EVENT_GET_BY_IDEMPOTENCY_KEY,
            Query::EventLease => EVENT_LEASE,
            Query::EventLeaseExtend => EVENT_LEASE_EXTEND,
            Query::EventMarkDelivered => EVENT_MARK_DELIVERED,
            Query::EventMarkFailed => EVENT_MARK_FAILED,
            Query::EventRetryDeadLettered => EVENT_RETRY_DEAD_LETTERED,
            Query::EventDeletePublished => EVENT_DELETE_PUBLISHED,
            Query::EventDeleteDeadLettered => EVENT_DELETE_DEAD_LETTERED,
            Query::Backlog => BACKLOG,
        }
    }

    /// The statement's text for `table`.
    pub(crate) fn render(self, table: &OutboxTable) -> String {
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
        let replacements = [
            ("{table}", qualified),
            ("{table_name}", table_name),
            ("{schema_prefix}", schema_prefix),
            ("{pending_idx}", index("pending_idx")),
            ("{pending_key_idx}", index("pending_key_idx")),
            ("{published_idx}", index("published_idx")),
            ("{dead_idx}", index("dead_idx")),
            ("{topic_idx}", index("topic_idx")),
        ];
        // The values hold quoted identifiers only, never a `{`, so no replacement feeds another.
        replacements
            .iter()
            .fold(self.template().to_owned(), |sql, (placeholder, value)| {
                sql.replace(placeholder, value)
            })
    }
}

/// A quoted SQL identifier: `"name"`, with inner double quotes doubled.
pub(crate) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
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
        let sql = Query::Schema.render(&table);
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
        let table = OutboxTable::parse("main.outbox").expect("valid name");
        for query in [
            Query::Schema,
            Query::EventInsert,
            Query::EventGet,
            Query::EventGetByIdempotencyKey,
            Query::EventLease,
            Query::EventLeaseExtend,
            Query::EventMarkDelivered,
            Query::EventMarkFailed,
            Query::EventRetryDeadLettered,
            Query::EventDeletePublished,
            Query::EventDeleteDeadLettered,
            Query::Backlog,
        ] {
            let sql = query.render(&table).replace("'{}'", "");
            assert!(!sql.contains('{') && !sql.contains('}'), "{query:?}: {sql}");
        }
    }
}
