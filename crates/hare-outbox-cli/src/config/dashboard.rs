//! `[dashboard]`: the address, remote access and token of `serve` and `relay --http`.
//!
//! The dashboard token is never read from the config file itself: only from an environment
//! variable (`token_env`, default `HARE_OUTBOX_DASHBOARD_TOKEN`) or a file of its own
//! (`token_file`). Without a token the dashboard is read-only.

use std::path::{Path, PathBuf};

use hare_outbox::journal::ObjectName;
use serde::Deserialize;

use crate::error::usage;

/// The environment variable read for the dashboard token when `token_env` is not set.
pub const ENV_DASHBOARD_TOKEN: &str = "HARE_OUTBOX_DASHBOARD_TOKEN";

/// The address `serve` listens on when neither `--http` nor `[dashboard] address` is given.
pub const DEFAULT_ADDRESS: &str = "127.0.0.1:8080";

/// `[dashboard]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DashboardSection {
    /// The address `serve` listens on (`host:port`). Defaults to `127.0.0.1:8080`.
    pub address: Option<String>,
    /// Whether an address other than loopback is accepted. Defaults to `false`.
    pub allow_remote: Option<bool>,
    /// The environment variable holding the token of the mutating actions.
    pub token_env: Option<String>,
    /// A file holding the token (relative to the config file).
    pub token_file: Option<PathBuf>,
    /// Refused with an explanation: secrets do not belong in the config file.
    pub token: Option<toml::Value>,
    /// What the object column (and `events`) shows: `table` (`plan_prod_orders #18`, the
    /// default) or `label` (the capture's label, `prod_order #18`).
    pub object: Option<String>,
}

/// `[dashboard]`, resolved.
#[derive(Clone, Default)]
pub struct DashboardSettings {
    /// The address from the config file, if any.
    pub address: Option<String>,
    /// Whether an address other than loopback is accepted.
    pub allow_remote: bool,
    /// The token of the mutating actions; `None` = read-only dashboard.
    pub token: Option<String>,
    /// Where the token came from, for the start-up log.
    pub token_source: Option<String>,
    /// What the object column and `events` show.
    pub object_name: ObjectName,
}

impl std::fmt::Debug for DashboardSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DashboardSettings")
            .field("address", &self.address)
            .field("allow_remote", &self.allow_remote)
            .field("token", &self.token.as_ref().map(|_| "***"))
            .field("token_source", &self.token_source)
            .field("object_name", &self.object_name)
            .finish()
    }
}

/// Resolves `[dashboard]` with the environment as `env` reports it; `base_dir` is the config
/// file's directory, which a relative `token_file` is read from.
///
/// # Errors
/// A usage error naming the key: `token` set in the file, both `token_env` and `token_file`, a
/// `token_env` naming an unset variable, an unreadable or empty `token_file`.
pub fn dashboard_settings(
    section: Option<&DashboardSection>,
    base_dir: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> anyhow::Result<DashboardSettings> {
    let empty = DashboardSection::default();
    let section = section.unwrap_or(&empty);
    if section.token.is_some() {
        return Err(usage(format!(
            "token is not read from the config file; put the token in the environment variable named by token_env (default {ENV_DASHBOARD_TOKEN}) or in a file named by token_file"
        )));
    }
    let non_empty = |v: Option<String>| v.filter(|v| !v.trim().is_empty());
    let (token, token_source) = match (&section.token_env, &section.token_file) {
        (Some(_), Some(_)) => {
            return Err(usage(
                "token_env and token_file are both set; choose one source for the token",
            ));
        }
        (None, Some(file)) => {
            let file = if file.is_relative() {
                base_dir.join(file)
            } else {
                file.clone()
            };
            let text = std::fs::read_to_string(&file).map_err(|e| {
                usage(format!(
                    "token_file {}: cannot read it: {e}",
                    file.display()
                ))
            })?;
            let token = text.trim_end_matches(['\n', '\r']).to_owned();
            if token.is_empty() {
                return Err(usage(format!("token_file {} is empty", file.display())));
            }
            (Some(token), Some(format!("file {}", file.display())))
        }
        (Some(name), None) => match non_empty(env(name)) {
            Some(token) => (Some(token), Some(format!("${name}"))),
            None => {
                return Err(usage(format!(
                    "token_env = {name:?} names an environment variable that is not set or empty"
                )));
            }
        },
        (None, None) => match non_empty(env(ENV_DASHBOARD_TOKEN)) {
            Some(token) => (Some(token), Some(format!("${ENV_DASHBOARD_TOKEN}"))),
            None => (None, None),
        },
    };
    let object_name = match section.object.as_deref() {
        None => ObjectName::Table,
        Some(name) => name.parse::<ObjectName>().map_err(|_| {
            usage(format!(
                "object = {name:?} is not known; use \"table\" (plan_prod_orders #18) or \
                 \"label\" (the capture's label, prod_order #18)"
            ))
        })?,
    };
    Ok(DashboardSettings {
        address: section.address.clone().filter(|a| !a.trim().is_empty()),
        allow_remote: section.allow_remote.unwrap_or(false),
        token,
        token_source,
        object_name,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn the_token_comes_from_the_environment_or_a_file() {
        let s = dashboard_settings(None, Path::new("."), &no_env).unwrap();
        assert!(s.token.is_none() && !s.allow_remote && s.address.is_none());
        let env = |n: &str| (n == ENV_DASHBOARD_TOKEN).then(|| "0123456789".to_owned());
        let s = dashboard_settings(None, Path::new("."), &env).unwrap();
        assert_eq!(s.token.as_deref(), Some("0123456789"));
        assert!(!format!("{s:?}").contains("0123456789"));

        let in_file = DashboardSection {
            token: Some(toml::Value::String("oops-secret".into())),
            ..DashboardSection::default()
        };
        let e = format!(
            "{:#}",
            dashboard_settings(Some(&in_file), Path::new("."), &no_env).unwrap_err()
        );
        assert!(e.contains("token_env") && !e.contains("oops-secret"), "{e}");
        let named = DashboardSection {
            token_env: Some("MY_TOKEN".into()),
            ..DashboardSection::default()
        };
        let e = format!(
            "{:#}",
            dashboard_settings(Some(&named), Path::new("."), &no_env).unwrap_err()
        );
        assert!(e.contains("MY_TOKEN"), "{e}");

        let dir =
            std::env::temp_dir().join(format!("hare-outbox-cli-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("token"), "file-token-123\n").unwrap();
        let from_file = DashboardSection {
            token_file: Some("token".into()),
            ..DashboardSection::default()
        };
        let s = dashboard_settings(Some(&from_file), &dir, &no_env).unwrap();
        assert_eq!(s.token.as_deref(), Some("file-token-123"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
