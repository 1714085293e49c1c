//! PostgreSQL LISTEN/NOTIFY wake-up (seed 001 § Будильники: ListenNotifyWakeup).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use hare_outbox_core::wakeup::{Topics, Wakeup, WakeupSubscription};
use hare_outbox_core::{Error, Result};
use sqlx::postgres::{PgListener, PgPool};
use tokio::sync::{broadcast, mpsc};

use crate::error::translate;

/// The default channel, shared with hare (seed 001 § Будильники).
pub const DEFAULT_CHANNEL: &str = "hare_outbox";

/// Consecutive failed reconnects after which the listener gives up (relays poll on).
pub const MAX_LISTEN_FAILURES: u32 = 5;

/// When the NOTIFY for a committed event is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotifyMode {
    /// After commit, from a background task of this process that sends one `pg_notify` per topic
    /// for every signal of a short window (`coalesce`), on its own connection. Writers pay nothing
    /// inside their transaction. Only writes through
    /// [`OutboxTransaction`](hare_outbox_core::OutboxTransaction) signal; other writes are found
    /// by polling. The default, with a 1 ms window.
    AfterCommit {
        /// How long signals are gathered before one NOTIFY statement goes out.
        coalesce: Duration,
    },
    /// NOTIFY inside the writing transaction, one per topic, delivered by PostgreSQL at commit and
    /// never for a rollback — every `enqueue` signals, in any transaction (seed 001's behaviour).
    /// PostgreSQL serializes the commits of notifying transactions, which costs concurrent writers
    /// a large share of their throughput (see BENCHMARKS.md).
    InTransaction,
}

/// Wakes relays through PostgreSQL LISTEN/NOTIFY on a channel (default `hare_outbox`); the
/// payload of each notification is one topic.
///
/// One object serves the outbox and every relay that uses it: the relays of one process share
/// one listening connection. A broken listening connection reconnects with backoff (0.5 s doubling
/// up to 10 s); after [`MAX_LISTEN_FAILURES`] failures in a row it logs an ERROR and gives up, and
/// the relays poll on. After a reconnect the relays poll once, since signals may have been lost.
/// Cheap to clone; clones share the listener and the notifier.
#[derive(Clone)]
pub struct ListenNotifyWakeup {
    inner: Arc<Inner>,
}

struct Inner {
    pool: PgPool,
    channel: String,
    mode: NotifyMode,
    // Weak: the listening task holds the only strong sender, so subscribers see the wake-up
    // closed when it gives up.
    listener: Mutex<Option<broadcast::WeakSender<Topics>>>,
    notifier: Mutex<Option<mpsc::UnboundedSender<Vec<String>>>>,
}

impl std::fmt::Debug for ListenNotifyWakeup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenNotifyWakeup")
            .field("channel", &self.inner.channel)
            .field("mode", &self.inner.mode)
            .finish()
    }
}

impl ListenNotifyWakeup {
    /// A wake-up on `pool`'s server, channel `hare_outbox`, [`NotifyMode::AfterCommit`] with a
    /// 1 ms window.
    pub fn new(pool: PgPool) -> Self {
        ListenNotifyWakeup {
            inner: Arc::new(Inner {
                pool,
                channel: DEFAULT_CHANNEL.to_owned(),
                mode: NotifyMode::AfterCommit {
                    coalesce: Duration::from_millis(1),
                },
                listener: Mutex::new(None),
                notifier: Mutex::new(None),
            }),
        }
    }

    /// Uses `channel` instead of `hare_outbox`.
    ///
    /// # Errors
    /// [`Error::Configuration`] for an empty channel or one over 63 bytes (PostgreSQL's limit).
    pub fn with_channel(self, channel: &str) -> Result<Self> {
        if channel.is_empty() || channel.len() > 63 {
            return Err(Error::configuration(format!(
                "LISTEN/NOTIFY channel {channel:?} must have 1 to 63 bytes"
            )));
        }
        Ok(self.rebuild(channel.to_owned(), self.inner.mode))
    }

    /// Sets when NOTIFY is sent. Defaults to [`NotifyMode::AfterCommit`] with a 1 ms window.
    pub fn with_mode(self, mode: NotifyMode) -> Self {
        let channel = self.inner.channel.clone();
        self.rebuild(channel, mode)
    }

    fn rebuild(&self, channel: String, mode: NotifyMode) -> Self {
        ListenNotifyWakeup {
            inner: Arc::new(Inner {
                pool: self.inner.pool.clone(),
                channel,
                mode,
                listener: Mutex::new(None),
                notifier: Mutex::new(None),
            }),
        }
    }

    /// The channel.
    pub fn channel(&self) -> &str {
        &self.inner.channel
    }

    fn notifier(&self, coalesce: Duration) -> mpsc::UnboundedSender<Vec<String>> {
        let mut slot = self
            .inner
            .notifier
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = slot.as_ref().filter(|tx| !tx.is_closed()) {
            return tx.clone();
        }
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(notify_loop(
            self.inner.pool.clone(),
            self.inner.channel.clone(),
            coalesce,
            rx,
        ));
        *slot = Some(tx.clone());
        tx
    }
}

/// Gathers signals for `coalesce`, then sends one `pg_notify` per distinct topic in one statement.
async fn notify_loop(
    pool: PgPool,
    channel: String,
    coalesce: Duration,
    mut rx: mpsc::UnboundedReceiver<Vec<String>>,
) {
    while let Some(first) = rx.recv().await {
        let mut topics: std::collections::BTreeSet<String> = first.into_iter().collect();
        let deadline = tokio::time::Instant::now() + coalesce;
        while let Ok(Some(more)) = tokio::time::timeout_at(deadline, rx.recv()).await {
            topics.extend(more);
        }
        let topics: Vec<String> = topics.into_iter().collect();
        if let Err(error) = sqlx::query(include_str!("../queries/wakeup_notify.sql"))
            .bind(&channel)
            .bind(&topics)
            .execute(&pool)
            .await
        {
            tracing::warn!(channel = %channel, error = &error as &dyn std::error::Error, "NOTIFY failed; relays will poll");
        }
    }
}

/// Listens on `channel`, fanning notifications out to `tx` until every subscriber is gone or the
/// connection failed [`MAX_LISTEN_FAILURES`] times in a row.
async fn listen_loop(pool: PgPool, channel: String, tx: broadcast::Sender<Topics>) {
    let mut failures = 0u32;
    let mut listener: Option<PgListener> = None;
    loop {
        if tx.receiver_count() == 0 {
            return;
        }
        let current = match listener.as_mut() {
            Some(l) => l,
            None => match connect(&pool, &channel).await {
                Ok(l) => {
                    if failures > 0 {
                        // Signals may have been lost while reconnecting: poll now.
                        let _ = tx.send(Vec::new().into());
                    }
                    listener.insert(l)
                }
                Err(error) => {
                    failures += 1;
                    if failures >= MAX_LISTEN_FAILURES {
                        tracing::error!(channel = %channel, failures, error = &error as &dyn std::error::Error, "LISTEN failed too often; giving up, relays poll on");
                        return;
                    }
                    let pause = backoff(failures);
                    tracing::warn!(channel = %channel, failures, retry_in_seconds = pause.as_secs_f64(), error = &error as &dyn std::error::Error, "LISTEN failed; retrying");
                    tokio::time::sleep(pause).await;
                    continue;
                }
            },
        };
        match current.try_recv().await {
            Ok(Some(notification)) => {
                failures = 0;
                let topics: Topics = vec![notification.payload().to_owned()].into();
                let _ = tx.send(topics);
            }
            Ok(None) | Err(_) => {
                // The connection was lost: reconnect with backoff.
                listener = None;
                failures += 1;
                if failures >= MAX_LISTEN_FAILURES {
                    tracing::error!(channel = %channel, failures, "LISTEN connection lost too often; giving up, relays poll on");
                    return;
                }
                let pause = backoff(failures);
                tracing::warn!(channel = %channel, failures, retry_in_seconds = pause.as_secs_f64(), "LISTEN connection lost; reconnecting");
                tokio::time::sleep(pause).await;
            }
        }
    }
}

async fn connect(pool: &PgPool, channel: &str) -> std::result::Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.ignore_pool_close_event(false);
    listener.listen(channel).await?;
    Ok(listener)
}

fn backoff(failures: u32) -> Duration {
    Duration::from_millis(500)
        .saturating_mul(1 << failures.saturating_sub(1).min(5))
        .min(Duration::from_secs(10))
}

#[async_trait]
impl Wakeup for ListenNotifyWakeup {
    async fn signal(&self, topics: &[String]) -> Result<()> {
        match self.inner.mode {
            NotifyMode::AfterCommit { coalesce } => {
                // A closed notifier (runtime shut down) only loses a hint.
                let _ = self.notifier(coalesce).send(topics.to_vec());
                Ok(())
            }
            NotifyMode::InTransaction => sqlx::query(include_str!("../queries/wakeup_notify.sql"))
                .bind(&self.inner.channel)
                .bind(topics)
                .execute(&self.inner.pool)
                .await
                .map(|_| ())
                .map_err(translate),
        }
    }

    async fn subscribe(&self) -> Result<WakeupSubscription> {
        let mut slot = self
            .inner
            .listener
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = slot.as_ref().and_then(broadcast::WeakSender::upgrade)
            && tx.receiver_count() > 0
        {
            return Ok(WakeupSubscription::new(tx.subscribe()));
        }
        let (tx, rx) = broadcast::channel(1024);
        *slot = Some(tx.downgrade());
        tokio::spawn(listen_loop(
            self.inner.pool.clone(),
            self.inner.channel.clone(),
            tx,
        ));
        Ok(WakeupSubscription::new(rx))
    }

    fn in_transaction_channel(&self) -> Option<&str> {
        (self.inner.mode == NotifyMode::InTransaction).then_some(self.inner.channel.as_str())
    }

    fn check_supported(&self, backend: &str) -> Result<()> {
        if backend == "postgres" {
            Ok(())
        } else {
            Err(Error::configuration(format!(
                "ListenNotifyWakeup needs PostgreSQL LISTEN/NOTIFY; the {backend} backend has none (use InProcessWakeup or a broker wake-up)"
            )))
        }
    }
}
