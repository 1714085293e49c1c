//! The name of one outbox table.

use std::fmt;

use crate::error::{Error, Result};

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
        })
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
