//! `serve` and `relay --http`: the dashboard, `/metrics` and `/healthz` on one
//! address, bound to loopback unless `--allow-remote` (or `[dashboard] allow_remote`) says
//! otherwise.
//!
//! The dashboard token is never read from the config file itself: only from an environment
//! variable (`[dashboard] token_env`, default `HARE_OUTBOX_DASHBOARD_TOKEN`) or a file of its own
//! (`[dashboard] token_file`). Without a token the dashboard is read-only.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use hare_outbox::backend::JournalBackend;
use hare_outbox::journal::ObjectName;
use hare_outbox::{CancellationToken, Journal};
use hare_outbox_dashboard::{Dashboard, DashboardOptions, HealthThresholds};
use metrics_exporter_prometheus::PrometheusHandle;
use serde::Deserialize;

use crate::cli::{HttpArgs, ServeArgs};
use crate::commands::Db;
use crate::config::Settings;
use crate::error::usage;

/// How often the Prometheus recorder's histograms are compacted.
const METRICS_UPKEEP: Duration = Duration::from_secs(5);

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

/// Resolves `address` (`host:port`; a host name is looked up) and refuses an address other than
/// loopback unless remote access is allowed by `--allow-remote` or `[dashboard] allow_remote`.
///
/// # Errors
/// A usage error naming the address and what is allowed.
pub async fn listen_address(
    address: &str,
    args: &HttpArgs,
    dashboard: &DashboardSettings,
) -> anyhow::Result<SocketAddr> {
    let addr = match address.parse::<SocketAddr>() {
        Ok(addr) => addr,
        Err(_) => tokio::net::lookup_host(address)
            .await
            .ok()
            .and_then(|mut addrs| addrs.next())
            .ok_or_else(|| {
                usage(format!(
                    "HTTP address {address:?} is not host:port (e.g. 127.0.0.1:8080, [::1]:8080, localhost:8080)"
                ))
            })?,
    };
    if !addr.ip().is_loopback() && !args.allow_remote && !dashboard.allow_remote {
        return Err(usage(format!(
            "HTTP address {address} is not a loopback address; the dashboard is served on 127.0.0.1 or ::1 unless --allow-remote (or [dashboard] allow_remote = true) is given, behind a proxy that adds TLS and access control"
        )));
    }
    Ok(addr)
}

/// The dashboard's options from the settings: the token, the `[backlog]` thresholds for
/// `/healthz`, the metrics handle, whether remote addresses are allowed.
///
/// # Errors
/// A usage error when the dashboard refuses the token (too short, whitespace).
fn dashboard_options(
    settings: &Settings,
    metrics: Option<PrometheusHandle>,
    allow_remote: bool,
) -> anyhow::Result<DashboardOptions> {
    let backlog = &settings.backlog;
    let thresholds = HealthThresholds::new()
        .with_max_pending(
            backlog
                .max_pending
                .map(|n| i64::try_from(n).unwrap_or(i64::MAX)),
        )
        .with_max_oldest_pending_age(backlog.max_age)
        .with_max_dead_lettered(
            backlog
                .max_dead
                .map(|n| i64::try_from(n).unwrap_or(i64::MAX)),
        )
        .with_max_open_destinations(
            backlog
                .max_open_destinations
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        );
    let source = settings
        .dashboard
        .token_source
        .as_deref()
        .unwrap_or(ENV_DASHBOARD_TOKEN);
    let options = DashboardOptions::new()
        .with_token(settings.dashboard.token.clone())
        .map_err(|e| usage(format!("dashboard token from {source}: {e}")))?
        .with_thresholds(thresholds)
        .with_metrics(metrics)
        .with_allow_remote(allow_remote)
        .with_object_name(settings.dashboard.object_name);
    match &settings.dashboard.token_source {
        Some(source) => tracing::info!("dashboard actions need the token from {source}"),
        None => tracing::info!(
            "no dashboard token ({ENV_DASHBOARD_TOKEN}, [dashboard] token_env or token_file): retry and clean-up buttons are refused"
        ),
    }
    Ok(options)
}

/// `hare-outbox serve`: the dashboard and `/healthz` (`/metrics` answers 404: the metrics are
/// the relay's, served by `relay --http`) on `--http` (or `[dashboard] address`, default 127.0.0.1:8080) until `shutdown` is
/// cancelled; prints `dashboard on http://ADDR/` on stdout once listening (port 0 picks a free
/// port, shown there).
///
/// # Errors
/// A usage error for a bad or remote address or a bad token, before connecting; a runtime error
/// when the database is unreachable or the address cannot be bound.
pub async fn serve(
    settings: &Settings,
    args: &ServeArgs,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let address = args
        .http
        .clone()
        .or_else(|| settings.dashboard.address.clone())
        .unwrap_or_else(|| DEFAULT_ADDRESS.to_owned());
    let addr = listen_address(&address, &args.server, &settings.dashboard).await?;
    let allow_remote = args.server.allow_remote || settings.dashboard.allow_remote;
    let options = dashboard_options(settings, None, allow_remote)?;
    let db = Db::connect(settings.database()?).await?;
    let listener = with_backend!(db, backend => {
        let dashboard = Dashboard::new(Journal::new(backend, settings.table.clone()), options)?;
        let listener = dashboard.bind(addr).await?;
        let local = listener.local_addr().context("reading the listening address")?;
        println!("dashboard on http://{local}/");
        dashboard
            .serve(listener, async move { shutdown.cancelled().await })
            .await
    });
    listener?;
    tracing::info!("dashboard stopped");
    Ok(())
}

/// The HTTP side of `relay --http ADDR`: installs a Prometheus recorder (the relay's metrics),
/// checks the address, connects a pool of its own and starts serving the dashboard, `/metrics`
/// and `/healthz` on it until `shutdown` is cancelled. Returns the serving task.
///
/// # Errors
/// A usage error for a bad or remote address or a bad token; a runtime error when the database
/// is unreachable, the address cannot be bound or a metrics recorder is already installed.
pub async fn start_for_relay(
    settings: &Settings,
    address: &str,
    args: &HttpArgs,
    destinations: hare_outbox::Destinations,
    shutdown: CancellationToken,
) -> anyhow::Result<tokio::task::JoinHandle<anyhow::Result<()>>> {
    let addr = listen_address(address, args, &settings.dashboard).await?;
    let allow_remote = args.allow_remote || settings.dashboard.allow_remote;
    // Check the token before installing anything.
    dashboard_options(settings, None, allow_remote)?;
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .context("installing the Prometheus metrics recorder failed")?;
    let upkeep = handle.clone();
    let upkeep_stop = shutdown.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = upkeep_stop.cancelled() => break,
                () = tokio::time::sleep(METRICS_UPKEEP) => upkeep.run_upkeep(),
            }
        }
    });
    let options = dashboard_options(settings, Some(handle), allow_remote)?
        .with_destinations(Some(destinations));
    let db = Db::connect(settings.database()?).await?;
    let table = settings.table.clone();
    with_backend!(db, backend => spawn_dashboard(Journal::new(backend, table), options, addr, shutdown).await)
}

async fn spawn_dashboard<B: JournalBackend>(
    journal: Journal<B>,
    options: DashboardOptions,
    addr: SocketAddr,
    shutdown: CancellationToken,
) -> anyhow::Result<tokio::task::JoinHandle<anyhow::Result<()>>> {
    let dashboard = Dashboard::new(journal, options)?;
    let listener = dashboard.bind(addr).await?;
    Ok(tokio::spawn(async move {
        dashboard
            .serve(listener, async move { shutdown.cancelled().await })
            .await?;
        Ok(())
    }))
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

    #[tokio::test]
    async fn remote_addresses_need_allow_remote() {
        let none = DashboardSettings::default();
        let local = HttpArgs {
            allow_remote: false,
        };
        let a = listen_address("127.0.0.1:0", &local, &none).await.unwrap();
        assert!(a.ip().is_loopback());
        let e = format!(
            "{:#}",
            listen_address("0.0.0.0:8080", &local, &none)
                .await
                .unwrap_err()
        );
        assert!(
            e.contains("0.0.0.0:8080") && e.contains("--allow-remote"),
            "{e}"
        );
        let remote = HttpArgs { allow_remote: true };
        assert!(listen_address("0.0.0.0:8080", &remote, &none).await.is_ok());
        let e = format!(
            "{:#}",
            listen_address("nonsense", &local, &none).await.unwrap_err()
        );
        assert!(e.contains("nonsense") && e.contains("host:port"), "{e}");
    }
}
