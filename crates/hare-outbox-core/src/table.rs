//! The name of one outbox table.

use std::fmt;

use crate::error::{Error, Result};
use crate::extra::ExtraColumn;

/// Longest schema name, in bytes: PostgreSQL keeps 63 bytes of an identifier.
pub const MAX_IDENTIFIER_BYTES: usize = 63;
/// Longest table name, in bytes: index names add up to 16 bytes (`_pending_key_idx`) and must stay
/// within PostgreSQL's 63, or two of them would be cut to the same name.
pub const MAX_TABLE_NAME_BYTES: usize = 47;

/// An outbox table's name, optionally schema-qualified: `outbox` or `billing.outbox`.
///
/// The schema is 1 to 63 bytes and the table 1 to 47 bytes of ASCII letters, digits and `_`, not starting with a digit, so the
/// derived index names stay valid; every backend quotes the parts anyway. Several outbox tables may
/// live in one database; each has its own indexes and never sees another's events.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OutboxTable {
    schema: Option<String>,
    name: String,
    columns: Vec<ExtraColumn>,
    tenant_column: Option<String>,
    idempotency_scope: IdempotencyScope,
    strict_key_order: bool,
}

/// Which unique constraint covers the idempotency key.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum IdempotencyScope {
    /// `UNIQUE (idempotency_key)`: one event per key in the whole table, across tenants too (a key
    /// taken by another tenant's event is an `Error::Integrity`). The default.
    #[default]
    Table,
    /// `UNIQUE (tenant, idempotency_key)`: keys are unique within a tenant. Needs a tenant column.
    PerTenant,
    /// No unique constraint: enqueueing a message with an idempotency key is an
    /// `Error::Configuration`.
    None,
}

impl OutboxTable {
    /// Parses `name` or `schema.name`.
    ///
    /// # Errors
    /// [`Error::Configuration`] naming the value when a part is empty, too long, or has a character
    /// other than ASCII letters, digits and `_`, or when there are more than two parts.
    pub fn parse(qualified: &str) -> Result<Self> {
        let parts: Vec<&str> = qualified.split('.').collect();
        let (schema, name) = match parts.as_slice() {
            [name] => (None, *name),
            [schema, name] => (Some(*schema), *name),
            _ => {
                return Err(Error::configuration(format!(
                    "outbox table {qualified:?} has {} dot-separated parts; write `table` or `schema.table`",
                    parts.len()
                )));
            }
        };
        if let Some(schema) = schema {
            check_part(qualified, "schema", schema, MAX_IDENTIFIER_BYTES)?;
        }
        check_part(qualified, "table", name, MAX_TABLE_NAME_BYTES)?;
        Ok(OutboxTable {
            schema: schema.map(str::to_owned),
            name: name.to_owned(),
            columns: Vec::new(),
            tenant_column: None,
            idempotency_scope: IdempotencyScope::Table,
            strict_key_order: false,
        })
    }

    /// Adds an extra column. Messages set it with
    /// `OutboxMessage::extra`; events carry it in `OutboxEvent::extra`.
    ///
    /// # Errors
    /// [`Error::Configuration`] when a column of that name is already declared.
    pub fn with_column(mut self, column: ExtraColumn) -> Result<Self> {
        if self.column(column.name()).is_some() {
            return Err(Error::configuration(format!(
                "outbox table {self}: extra column {:?} is declared twice",
                column.name()
            )));
        }
        self.columns.push(column);
        Ok(self)
    }

    /// Names the extra column that holds the tenant.
    ///
    /// # Errors
    /// [`Error::Configuration`] when no extra column of that name is declared.
    pub fn with_tenant_column(mut self, name: &str) -> Result<Self> {
        if self.column(name).is_none() {
            return Err(Error::configuration(format!(
                "outbox table {self}: tenant column {name:?} is not a declared extra column; declare it with with_column first"
            )));
        }
        self.tenant_column = Some(name.to_owned());
        Ok(self)
    }

    /// Sets which unique constraint covers the idempotency key. Defaults to
    /// [`IdempotencyScope::Table`].
    ///
    /// # Errors
    /// [`Error::Configuration`] for [`IdempotencyScope::PerTenant`] without a tenant column.
    pub fn with_idempotency_scope(mut self, scope: IdempotencyScope) -> Result<Self> {
        if scope == IdempotencyScope::PerTenant && self.tenant_column.is_none() {
            return Err(Error::configuration(format!(
                "outbox table {self}: idempotency keys unique per tenant need a tenant column (with_tenant_column)"
            )));
        }
        self.idempotency_scope = scope;
        Ok(self)
    }

    /// Strict per-key commit order for every message of this table that has an ordering key, as if
    /// each called [`OutboxMessage::strict_order`](crate::OutboxMessage::strict_order). Off by
    /// default.
    ///
    /// Without it, `sequence` is taken at INSERT: two transactions writing one ordering key
    /// concurrently may commit in the other order than their sequences, and the relay then
    /// delivers the events in sequence (write) order. With it, enqueue first takes a
    /// transaction-scoped lock on the key (PostgreSQL: `pg_advisory_xact_lock` on the key's hash;
    /// SQLite has one writer at a time already), so writers of one key queue up until the holder
    /// commits or rolls back, and sequence order equals commit order for every key. Writers of
    /// distinct keys never wait for each other, except on a 32-bit hash collision of two keys.
    pub fn with_strict_key_order(mut self, strict: bool) -> Self {
        self.strict_key_order = strict;
        self
    }

    /// Whether every keyed message is enqueued in strict per-key commit order
    /// ([`OutboxTable::with_strict_key_order`]).
    pub fn strict_key_order(&self) -> bool {
        self.strict_key_order
    }

    /// The extra columns, in declaration order.
    pub fn columns(&self) -> &[ExtraColumn] {
        &self.columns
    }

    /// The extra column `name`, if declared.
    pub fn column(&self, name: &str) -> Option<&ExtraColumn> {
        self.columns.iter().find(|c| c.name() == name)
    }

    /// The tenant column, if any.
    pub fn tenant_column(&self) -> Option<&str> {
        self.tenant_column.as_deref()
    }

    /// The idempotency key's unique constraint.
    pub fn idempotency_scope(&self) -> IdempotencyScope {
        self.idempotency_scope
    }

    /// The schema part, if any.
    pub fn schema(&self) -> Option<&str> {
        self.schema.as_deref()
    }

    /// The table part.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Default for OutboxTable {
    /// The table `hare_outbox` in the connection's default schema.
    fn default() -> Self {
        OutboxTable {
            schema: None,
            name: "hare_outbox".to_owned(),
            columns: Vec::new(),
            tenant_column: None,
            idempotency_scope: IdempotencyScope::Table,
            strict_key_order: false,
        }
    }
}

impl fmt::Display for OutboxTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.schema {
            Some(schema) => write!(f, "{schema}.{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

impl std::str::FromStr for OutboxTable {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        OutboxTable::parse(s)
    }
}

fn check_part(qualified: &str, what: &str, part: &str, max: usize) -> Result<()> {
    let ok_chars = part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let starts_ok = part.chars().next().is_some_and(|c| !c.is_ascii_digit());
    if part.is_empty() || part.len() > max || !ok_chars || !starts_ok {
        return Err(Error::configuration(format!(
            "outbox table {qualified:?}: {what} name {part:?} is not allowed; use 1 to {max} ASCII letters, digits or `_`, not starting with a digit"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_and_qualified() {
        let t = OutboxTable::parse("outbox").unwrap();
        assert_eq!((t.schema(), t.name()), (None, "outbox"));
        let t = OutboxTable::parse("billing.events_2").unwrap();
        assert_eq!((t.schema(), t.name()), (Some("billing"), "events_2"));
        assert_eq!(t.to_string(), "billing.events_2");
    }

    #[test]
    fn refuses_injection_and_junk() {
        for bad in [
            "",
            "a.b.c",
            "x\"; drop table y; --",
            "1abc",
            "a.",
            ".a",
            &"x".repeat(48),
            "a b",
        ] {
            let e = OutboxTable::parse(bad).unwrap_err();
            assert!(matches!(e, Error::Configuration(_)), "{bad}: {e}");
        }
    }
}
