//! PostgreSQL LISTEN/NOTIFY wake-up.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use hare_outbox_core::backend::Capabilities;
use hare_outbox_core::wakeup::listener::{self, Connecting, Listener, Messages, Source};
use hare_outbox_core::wakeup::{Wakeup, WakeupSubscription};
use hare_outbox_core::{Error, Result};
use sqlx::postgres::{PgListener, PgPool};
use tokio::sync::mpsc;

use crate::capture::quote_literal;
use crate::error::translate;

/// The default channel, shared with hare.
pub const DEFAULT_CHANNEL: &str = "hare_outbox";

/// Consecutive failed LISTEN attempts after which the listener logs an ERROR; it goes on
/// retrying with a backoff of up to 60 s (relays poll meanwhile).
pub const MAX_LISTEN_FAILURES: u32 = listener::MAX_FAILURES;

/// How long a new LISTEN connection waits for its own probe notification before it is judged
/// deaf (behind a transaction pooler): 2 s.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The payload prefix of the probe each new LISTEN connection sends itself; listeners skip it.
const PROBE_PREFIX: &str = "hare-outbox-probe:";

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
    /// never for a rollback — every `enqueue` signals, in any transaction.
    /// PostgreSQL serializes the commits of notifying transactions, which costs concurrent writers
    /// a large share of their throughput (see BENCHMARKS.md).
    InTransaction,
}

/// Wakes relays through PostgreSQL LISTEN/NOTIFY on a channel (default `hare_outbox`); the
/// payload of each notification is one topic.
///
/// One object serves the outbox and every relay that uses it: the relays of one process share
/// one listening connection. A broken listening connection reconnects with backoff (100 ms
/// doubling up to 60 s, with jitter); after [`MAX_LISTEN_FAILURES`] failures in a row it logs an
/// ERROR and goes on retrying — it never gives up while a relay subscribes, and relays poll
/// meanwhile. Every successful reconnect resets the count and tells the relays to poll once,
/// since signals may have been lost.
///
/// Each new LISTEN connection first sends itself a probe notification (payload
/// `hare-outbox-probe:…`, skipped by every listener) through the notifying pool. When it does
/// not arrive within `PROBE_TIMEOUT` (2 s), LISTEN sits behind a transaction pooler (PgBouncer in
/// `pool_mode = transaction` drops notifications): the attempt fails with an error saying so,
/// logged at WARN, and relays poll. Give the listener a direct connection with
/// [`ListenNotifyWakeup::with_listen_pool`] (`[wakeup] listen_url` in the command); NOTIFY itself
/// works through the pooler.
///
/// [`Wakeup::close`] stops the listener and returns its connection to the pool.
/// Cheap to clone; clones share the listener and the notifier.
#[derive(Clone)]
pub struct ListenNotifyWakeup {
    inner: Arc<Inner>,
}

struct Inner {
    /// NOTIFY goes through this pool (and LISTEN too, unless `listen_pool` is set).
    pool: PgPool,
    /// A direct (unpooled) connection for LISTEN, when `pool` goes through a transaction pooler.
    listen_pool: Option<PgPool>,
    channel: String,
    mode: NotifyMode,
    listener: Listener,
    notifier: Mutex<Option<mpsc::UnboundedSender<Vec<String>>>>,
}

impl std::fmt::Debug for ListenNotifyWakeup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenNotifyWakeup")
            .field("channel", &self.inner.channel)
            .field("mode", &self.inner.mode)
            .field("listen_pool", &self.inner.listen_pool.is_some())
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
                listen_pool: None,
                channel: DEFAULT_CHANNEL.to_owned(),
                mode: NotifyMode::AfterCommit {
                    coalesce: Duration::from_millis(1),
                },
                listener: Listener::default(),
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
        Ok(self.rebuild(
            channel.to_owned(),
            self.inner.mode,
            self.inner.listen_pool.clone(),
        ))
    }

    /// LISTENs on `pool` instead of the notifying pool: a direct connection to the server when
    /// the main pool goes through a transaction pooler (PgBouncer `pool_mode = transaction`),
    /// which cannot hold a LISTEN session. One connection of `pool` is held while relays
    /// subscribe; a pool of 1 or 2 connections is enough.
    pub fn with_listen_pool(self, pool: PgPool) -> Self {
        let channel = self.inner.channel.clone();
        self.rebuild(channel, self.inner.mode, Some(pool))
    }

    /// Sets when NOTIFY is sent. Defaults to [`NotifyMode::AfterCommit`] with a 1 ms window.
    pub fn with_mode(self, mode: NotifyMode) -> Self {
        let channel = self.inner.channel.clone();
        self.rebuild(channel, mode, self.inner.listen_pool.clone())
    }

    fn rebuild(&self, channel: String, mode: NotifyMode, listen_pool: Option<PgPool>) -> Self {
        ListenNotifyWakeup {
            inner: Arc::new(Inner {
                pool: self.inner.pool.clone(),
                listen_pool,
                channel,
                mode,
                listener: Listener::default(),
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
        if let Err(error) = notify(&pool, &channel, &topics).await {
            tracing::warn!(channel = %channel, error = &error as &dyn std::error::Error, "NOTIFY failed; relays will poll");
        }
    }
}

/// Sends each of `payloads` on `channel` in one simple-protocol statement: literals instead of
/// parameters, so nothing is prepared and a transaction pooler passes it as it is.
async fn notify(pool: &PgPool, channel: &str, payloads: &[String]) -> sqlx::Result<()> {
    if payloads.is_empty() {
        return Ok(());
    }
    let channel = quote_literal(channel);
    let calls: Vec<String> = payloads
        .iter()
        .map(|payload| format!("pg_notify({channel}, {})", quote_literal(payload)))
        .collect();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("SELECT {}", calls.join(", "))))
        .execute(pool)
        .await
        .map(|_| ())
}

/// The PostgreSQL side of the shared listener: one LISTEN connection that proves it hears
/// notifications before it counts as subscribed.
struct PgSource {
    listen_pool: PgPool,
    notify_pool: PgPool,
    channel: String,
}

impl Source for PgSource {
    fn connect(&self) -> Connecting<'_> {
        Box::pin(async move {
            let mut listener = PgListener::connect_with(&self.listen_pool).await?;
            // A lost connection ends the stream, so the shared listener reconnects with its own
            // backoff and tells the relays to poll.
            listener.ignore_pool_close_event(false);
            listener.listen(&self.channel).await?;
            probe(&mut listener, &self.notify_pool, &self.channel).await?;
            let messages: Messages = futures::stream::unfold(listener, |mut listener| async move {
                match listener.try_recv().await {
                    Ok(Some(notification)) => Some((Some(notification), listener)),
                    Ok(None) | Err(_) => None,
                }
            })
            .filter_map(|notification| async move {
                let payload = notification?.payload().to_owned();
                (!payload.starts_with(PROBE_PREFIX)).then(|| listener::encode_topics(&[payload]))
            })
            .boxed();
            Ok(messages)
        })
    }

    fn describe(&self) -> String {
        format!("postgres LISTEN channel {:?}", self.channel)
    }

    /// Connecting and LISTEN get the usual 5 s, the probe its own 2 s on top.
    fn connect_timeout(&self) -> Duration {
        listener::CONNECT_TIMEOUT + PROBE_TIMEOUT
    }

    fn reconnects_itself(&self) -> bool {
        false
    }
}

/// Sends `listener` a notification of its own through `notify_pool` and waits for it; fails
/// when it does not come within [`PROBE_TIMEOUT`]. Other notifications arriving meanwhile are
/// dropped (relays poll when they start and after every reconnect).
async fn probe(
    listener: &mut PgListener,
    notify_pool: &PgPool,
    channel: &str,
) -> std::result::Result<(), hare_outbox_core::error::BoxError> {
    let payload = format!("{PROBE_PREFIX}{}", uuid::Uuid::now_v7());
    notify(notify_pool, channel, std::slice::from_ref(&payload)).await?;
    let heard = tokio::time::timeout(PROBE_TIMEOUT, async {
        loop {
            match listener.try_recv().await {
                Ok(Some(notification)) if notification.payload() == payload => return Ok(()),
                Ok(Some(_)) => {}
                Ok(None) => return Err("the LISTEN connection was lost during its probe".into()),
                Err(error) => return Err(hare_outbox_core::error::BoxError::from(error)),
            }
        }
    })
    .await;
    match heard {
        Ok(result) => result,
        Err(_) => Err(format!(
            "LISTEN on channel {channel:?} did not hear its own probe notification within {} s: \
             the connection probably goes through a transaction pooler (PgBouncer \
             pool_mode = transaction drops LISTEN); give the listener a direct connection \
             ([wakeup] listen_url, ListenNotifyWakeup::with_listen_pool). Relays poll meanwhile",
            PROBE_TIMEOUT.as_secs()
        )
        .into()),
    }
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
            NotifyMode::InTransaction => notify(&self.inner.pool, &self.inner.channel, topics)
                .await
                .map_err(translate),
        }
    }

    /// A subscription fed by this object's shared LISTEN connection; see the type's docs for
    /// reconnects and the probe. Waits for the first attempt (at most 5 s + the probe).
    ///
    /// # Errors
    /// None: a LISTEN that cannot be made yet leaves the subscription open while the listener
    /// retries; it closes on [`Wakeup::close`].
    async fn subscribe(&self) -> Result<WakeupSubscription> {
        let source: Arc<dyn Source> = Arc::new(PgSource {
            listen_pool: self
                .inner
                .listen_pool
                .clone()
                .unwrap_or_else(|| self.inner.pool.clone()),
            notify_pool: self.inner.pool.clone(),
            channel: self.inner.channel.clone(),
        });
        Ok(self
            .inner
            .listener
            .subscribe(&source, listener::CONNECT_TIMEOUT + PROBE_TIMEOUT)
            .await)
    }

    /// Stops the listener (its LISTEN connection goes back to its pool after `UNLISTEN *`) and
    /// the after-commit notifier; subscriptions see the wake-up closed. Pools passed in are not
    /// closed: they are the caller's.
    async fn close(&self) -> Result<()> {
        self.inner.listener.close();
        self.inner
            .notifier
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        Ok(())
    }

    fn in_transaction_channel(&self) -> Option<&str> {
        (self.inner.mode == NotifyMode::InTransaction).then_some(self.inner.channel.as_str())
    }

    fn check_supported(&self, backend: &Capabilities) -> Result<()> {
        if backend.notify_in_transaction {
            Ok(())
        } else {
            Err(Error::configuration(format!(
                "ListenNotifyWakeup needs PostgreSQL LISTEN/NOTIFY; the {} backend has none (use InProcessWakeup or a broker wake-up)",
                backend.name
            )))
        }
    }
}
