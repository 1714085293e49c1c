//! `relay`: delivers the outbox until stopped, with the wake-up of the config (LISTEN/NOTIFY on
//! PostgreSQL, or a broker).

use std::time::Duration;

use hare_outbox::backend::Backend;
use hare_outbox::postgres::{ListenNotifyWakeup, NotifyMode};
use hare_outbox::{CancellationToken, Outbox, OutboxRelay};

use crate::config::{Settings, WakeupMode, WakeupSettings};
use crate::db::{CONNECT_TIMEOUT, Db, migrate_on};
use crate::error::usage;

/// `hare-outbox relay`: delivers until `shutdown` is cancelled, then finishes the batch in
/// flight, marks it and returns.
///
/// # Errors
/// When the delivery or relay options are refused, or the database is unreachable at start.
pub async fn relay(
    settings: &Settings,
    create_table: bool,
    destinations: hare_outbox::Destinations,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let database = settings.database()?;
    let delivery = settings.delivery.build_for_relay(
        &settings.delivery_name,
        &settings.delivery_options,
        &settings.relay.breaker,
    )?;
    // Validate before connecting, so a config mistake is reported as one.
    settings.relay.validate()?;
    settings.wakeup.check_backend(database.kind)?;
    settings.wakeup.check_for_relay()?;
    let broker_wakeup = settings.wakeup.build_broker()?;
    let db = Db::connect(database).await?;
    match db {
        Db::Postgres(backend) => {
            let mut outbox = Outbox::new(backend.clone(), settings.table.clone());
            if let Some(wakeup) = broker_wakeup {
                outbox = outbox.with_shared_wakeup(wakeup)?;
            }
            if let WakeupSettings::ListenNotify {
                channel,
                mode,
                listen_url,
            } = &settings.wakeup
            {
                let mode = match mode {
                    WakeupMode::AfterCommit => NotifyMode::AfterCommit {
                        coalesce: Duration::from_millis(1),
                    },
                    WakeupMode::InTransaction => NotifyMode::InTransaction,
                };
                let mut wakeup = ListenNotifyWakeup::new(backend.pool().clone())
                    .with_channel(channel)
                    .map_err(|e| usage(format!("[wakeup] {e}")))?
                    .with_mode(mode);
                if let Some(url) = listen_url {
                    // One connection held for LISTEN; connected when the relay subscribes.
                    let pool = sqlx::postgres::PgPoolOptions::new()
                        .max_connections(2)
                        .acquire_timeout(CONNECT_TIMEOUT)
                        .connect_lazy(&url.value)
                        .map_err(|e| usage(format!("[wakeup] listen_url {}: {e}", url.shown())))?;
                    wakeup = wakeup.with_listen_pool(pool);
                } else if backend.transaction_pooler() {
                    // A LISTEN sent through the pooler would hear nothing and stay registered on
                    // a server connection, which then hands notifications to the application's
                    // own clients: the relay polls instead.
                    tracing::warn!(
                        "database_transaction_pooler = true and [wakeup] kind = \"listen_notify\" without listen_url: LISTEN cannot go through a transaction pooler, so this relay does not LISTEN and polls every poll_interval_seconds; set [wakeup] listen_url to a direct connection"
                    );
                    return relay_on(
                        outbox,
                        settings,
                        delivery,
                        create_table,
                        destinations,
                        shutdown,
                    )
                    .await;
                }
                outbox = outbox.with_wakeup(wakeup)?;
            }
            relay_on(
                outbox,
                settings,
                delivery,
                create_table,
                destinations,
                shutdown,
            )
            .await
        }
        Db::Sqlite(backend) => {
            let mut outbox = Outbox::new(backend, settings.table.clone());
            if let Some(wakeup) = broker_wakeup {
                outbox = outbox.with_shared_wakeup(wakeup)?;
            }
            relay_on(
                outbox,
                settings,
                delivery,
                create_table,
                destinations,
                shutdown,
            )
            .await
        }
        Db::MySql(backend) => {
            let mut outbox = Outbox::new(backend, settings.table.clone());
            if let Some(wakeup) = broker_wakeup {
                outbox = outbox.with_shared_wakeup(wakeup)?;
            }
            relay_on(
                outbox,
                settings,
                delivery,
                create_table,
                destinations,
                shutdown,
            )
            .await
        }
    }
}

async fn relay_on<B: Backend>(
    outbox: Outbox<B>,
    settings: &Settings,
    delivery: std::sync::Arc<dyn hare_outbox::Delivery>,
    create_table: bool,
    destinations: hare_outbox::Destinations,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    if create_table {
        migrate_on(outbox.backend().clone(), settings).await?;
    }
    let config = settings.relay.clone();
    tracing::info!(
        backend = outbox.backend().name(),
        table = %settings.table,
        delivery = %settings.delivery.describe(),
        wakeup = %settings.wakeup.describe(),
        name = %config.name,
        poll_interval_seconds = config.poll_interval.as_secs_f64(),
        batch_size = config.batch_size,
        lease_seconds = config.lease.as_secs_f64(),
        "relay starting"
    );
    let relay = OutboxRelay::new(outbox, delivery, config)?.with_destinations(destinations);
    relay.run(shutdown).await?;
    let stats = relay.stats();
    tracing::info!(
        delivered = stats.delivered,
        failed = stats.failed,
        dead_lettered = stats.dead_lettered,
        polls = stats.polls,
        "relay stopped cleanly"
    );
    Ok(())
}
