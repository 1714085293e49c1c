//! `serve` and `relay --http`: the dashboard, `/metrics` and `/healthz` on one
//! address, bound to loopback unless `--allow-remote` (or `[dashboard] allow_remote`) says
//! otherwise.
//!
//! The dashboard token is never read from the config file itself: only from an environment
//! variable (`[dashboard] token_env`, default `HARE_OUTBOX_DASHBOARD_TOKEN`) or a file of its own
//! (`[dashboard] token_file`). Without a token the dashboard is read-only.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context as _;
use hare_outbox::backend::JournalBackend;
use hare_outbox::{CancellationToken, Journal};
use hare_outbox_dashboard::{Dashboard, DashboardOptions, HealthThresholds};
use metrics_exporter_prometheus::PrometheusHandle;

use crate::args::{HttpArgs, ServeArgs};
use crate::config::Settings;
use crate::config::dashboard::{DEFAULT_ADDRESS, DashboardSettings, ENV_DASHBOARD_TOKEN};
use crate::db::Db;
use crate::error::usage;

/// How often the Prometheus recorder's histograms are compacted.
const METRICS_UPKEEP: Duration = Duration::from_secs(5);

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
