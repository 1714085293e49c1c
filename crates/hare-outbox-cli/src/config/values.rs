//! Values the sections share: the backend a database URL selects, and checked seconds. A leaf:
//! the other modules of `config` import it, it imports none of them.

use std::time::Duration;

use crate::error::{redact_url, usage};

/// Which backend a database URL selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbKind {
    /// `postgres://` or `postgresql://`.
    Postgres,
    /// `sqlite:`.
    Sqlite,
    /// `mysql://` or `mariadb://` (MySQL ≥ 8.0, MariaDB ≥ 10.6).
    MySql,
}

impl DbKind {
    /// The backend for `url`, by its scheme.
    ///
    /// # Errors
    /// A usage error naming the URL and the schemes allowed.
    pub fn from_url(url: &str) -> anyhow::Result<DbKind> {
        let lower = url.trim_start().to_ascii_lowercase();
        if lower.starts_with("postgres://") || lower.starts_with("postgresql://") {
            Ok(DbKind::Postgres)
        } else if lower.starts_with("sqlite:") {
            Ok(DbKind::Sqlite)
        } else if lower.starts_with("mysql://") || lower.starts_with("mariadb://") {
            Ok(DbKind::MySql)
        } else {
            Err(usage(format!(
                "database URL {:?} has an unsupported scheme; allowed: postgres://…, postgresql://…, mysql://…, mariadb://… or sqlite:FILE",
                redact_url(url)
            )))
        }
    }
}

/// `value` unless it is missing or blank.
pub(crate) fn non_empty(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.trim().is_empty())
}

/// `value` seconds as a duration, or a usage error naming `key` and what is allowed.
pub(crate) fn seconds(key: &str, value: f64, zero_ok: bool) -> anyhow::Result<Duration> {
    let bad = !value.is_finite() || value < 0.0 || (!zero_ok && value == 0.0);
    let result = if bad {
        None
    } else {
        Duration::try_from_secs_f64(value).ok()
    };
    result.ok_or_else(|| {
        let allowed = if zero_ok {
            "a number of seconds, 0 or more"
        } else {
            "a number of seconds above 0"
        };
        usage(format!("{key} = {value} is not allowed; use {allowed}"))
    })
}
