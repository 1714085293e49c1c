//! `RedisWakeup`: wake-up signals over Redis pub/sub.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use hare_outbox_core::{Error, Result, Wakeup, WakeupSubscription};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::{describe_client, open_client};
use hare_outbox_core::wakeup::listener::{self, Connecting, Listener, Source};

/// The pub/sub channel unless [`RedisWakeup::with_channel`] names another: `hare_outbox`.
pub const DEFAULT_CHANNEL: &str = "hare_outbox";

/// How long a signal (`PUBLISH`) may take, connecting included.
const SIGNAL_TIMEOUT: Duration = Duration::from_secs(5);

/// How often a live subscription is checked with `PING`, so a connection that died silently is
/// noticed.
const PING_INTERVAL: Duration = Duration::from_secs(30);

/// Wakes relays through Redis pub/sub.
///
/// Pass the same object (or a clone: clones share everything) to
/// [`Outbox::with_wakeup`](hare_outbox_core::Outbox::with_wakeup): every
/// [`OutboxTransaction`](hare_outbox_core::OutboxTransaction) that wrote events then publishes,
/// after its commit, one message on the channel — a JSON array of the topics it wrote, e.g.
/// `["orders.created","orders.paid"]` — and every relay of that outbox, in this process or any
/// other connected to the same Redis, polls at once if one of the topics is its own.
///
/// **Signals.** [`Wakeup::signal`] publishes through a [`redis::aio::ConnectionManager`] opened on
/// first use. Its errors are returned (the transaction logs them and goes on: the events are
/// committed and polling delivers them). Right after Redis restarts, the first signal may be lost:
/// it goes out on the connection the server closed, fails, and the next one reconnects.
///
/// **Subscriptions.** One listener task per object, whatever the number of subscribers: the
/// first [`Wakeup::subscribe`] connects and subscribes (it returns once Redis confirmed the
/// subscription, or the first attempt failed), later ones share that subscription through a
/// broadcast channel, and the task stops when the last subscriber is gone. A subscription that
/// breaks (Redis restarted, the connection was killed, a `PING` every 30 s went unanswered for
/// 5 s) is made again after a pause of 100 ms, doubled after each failed attempt up to 60 s, with
/// jitter. After five failed attempts in a row the task logs an ERROR — relays poll at their
/// poll interval meanwhile — and goes on retrying; it never gives up while anyone subscribes.
/// Each restored subscription sends an empty signal, so every relay polls once for the signals
/// lost meanwhile.
///
/// A lost signal is harmless: relays poll anyway. A message on the channel that is not a JSON
/// array of strings is logged and ignored.
#[derive(Clone)]
pub struct RedisWakeup {
    inner: Arc<Inner>,
}

struct Inner {
    client: redis::Client,
    server: String,
    channel: String,
    publisher: Mutex<Option<ConnectionManager>>,
    listener: Listener,
}

impl std::fmt::Debug for RedisWakeup {
    /// Shows the server and the channel, never a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisWakeup")
            .field("server", &self.inner.server)
            .field("channel", &self.inner.channel)
            .finish()
    }
}

impl RedisWakeup {
    /// A wake-up through the Redis server at `url` (`redis://[[user]:password@]host[:port][/db]`)
    /// on the channel [`DEFAULT_CHANNEL`] (`hare_outbox`). Nothing is connected until the first
    /// signal or subscription.
    ///
    /// # Errors
    /// [`Error::Configuration`] naming the URL (password hidden) when it is not a Redis URL.
    pub fn new(url: &str) -> Result<Self> {
        Ok(Self::from_client(open_client("redis wake-up", url)?))
    }

    /// Like [`new`](Self::new) with a client you built yourself (as
    /// `RedisWakeup(client=...)` of the original hare outbox).
    pub fn from_client(client: redis::Client) -> Self {
        Self::build(client, DEFAULT_CHANNEL.to_owned())
    }

    fn build(client: redis::Client, channel: String) -> Self {
        RedisWakeup {
            inner: Arc::new(Inner {
                server: describe_client(&client),
                client,
                channel,
                publisher: Mutex::new(None),
                listener: Listener::default(),
            }),
        }
    }

    /// Publishes and subscribes on `channel` instead of [`DEFAULT_CHANNEL`]; use one channel per
    /// outbox table when several share a Redis, so their relays do not wake each other. Redis
    /// pub/sub channels are global: the database number in the URL does not separate them.
    ///
    /// # Errors
    /// [`Error::Configuration`] when `channel` is empty.
    pub fn with_channel(self, channel: impl Into<String>) -> Result<Self> {
        let channel = channel.into();
        if channel.is_empty() {
            return Err(Error::configuration(
                "redis wake-up channel \"\" is empty; give a channel name such as \"hare_outbox\"",
            ));
        }
        Ok(Self::build(self.inner.client.clone(), channel))
    }

    /// The channel signals go through.
    pub fn channel(&self) -> &str {
        &self.inner.channel
    }

    fn publisher(&self) -> Result<ConnectionManager> {
        let mut slot = self
            .inner
            .publisher
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(connection) = slot.as_ref() {
            return Ok(connection.clone());
        }
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(SIGNAL_TIMEOUT))
            .set_response_timeout(Some(SIGNAL_TIMEOUT))
            .set_number_of_retries(0);
        let connection = ConnectionManager::new_lazy_with_config(self.inner.client.clone(), config)
            .map_err(Error::database)?;
        *slot = Some(connection.clone());
        Ok(connection)
    }
}

/// The subscribing side, run by the shared listener task.
struct RedisSource {
    client: redis::Client,
    channel: String,
    what: String,
}

impl Source for RedisSource {
    fn connect(&self) -> Connecting<'_> {
        Box::pin(async move {
            let mut pubsub = self.client.get_async_pubsub().await?;
            // Returns once Redis confirmed the subscription.
            pubsub.subscribe(&self.channel).await?;
            let (mut sink, messages) = pubsub.split();
            // The sink lives in this future, which lives as long as the stream.
            let dead = async move {
                loop {
                    tokio::time::sleep(PING_INTERVAL).await;
                    let pong = tokio::time::timeout(
                        listener::CONNECT_TIMEOUT,
                        sink.ping::<redis::Value>(),
                    )
                    .await;
                    if !matches!(pong, Ok(Ok(_))) {
                        return;
                    }
                }
            };
            Ok(messages
                .map(|message| message.get_payload_bytes().to_vec())
                .take_until(dead)
                .boxed())
        })
    }

    fn describe(&self) -> String {
        self.what.clone()
    }

    fn reconnects_itself(&self) -> bool {
        false
    }
}

#[async_trait]
impl Wakeup for RedisWakeup {
    /// Publishes one message naming `topics` (a JSON array) on the channel.
    ///
    /// # Errors
    /// [`Error::Database`] with the Redis error when publishing failed or took longer than 5 s.
    async fn signal(&self, topics: &[String]) -> Result<()> {
        let mut connection = self.publisher()?;
        let mut cmd = redis::cmd("PUBLISH");
        cmd.arg(&self.inner.channel)
            .arg(listener::encode_topics(topics));
        match tokio::time::timeout(SIGNAL_TIMEOUT, cmd.query_async::<i64>(&mut connection)).await {
            Ok(Ok(_receivers)) => Ok(()),
            Ok(Err(error)) => Err(Error::database(error)),
            Err(_) => Err(Error::database(format!(
                "publishing a wake-up signal on {} channel {:?} took longer than {} s",
                self.inner.server,
                self.inner.channel,
                SIGNAL_TIMEOUT.as_secs()
            ))),
        }
    }

    /// A subscription fed by this object's shared listener task; see the type's docs for
    /// reconnects. Waits for the first attempt to subscribe (at most 5 s).
    ///
    /// # Errors
    /// None: a subscription that cannot be made yet stays open while the listener retries;
    /// it closes only on `close()`.
    async fn subscribe(&self) -> Result<WakeupSubscription> {
        let source: Arc<dyn Source> = Arc::new(RedisSource {
            client: self.inner.client.clone(),
            channel: self.inner.channel.clone(),
            what: format!("{} channel {:?}", self.inner.server, self.inner.channel),
        });
        Ok(self
            .inner
            .listener
            .subscribe(&source, listener::CONNECT_TIMEOUT)
            .await)
    }

    /// Stops the listener task (its subscriptions see the wake-up closed) and drops the
    /// publishing connection. A later `signal` or `subscribe` connects again.
    async fn close(&self) -> Result<()> {
        self.inner.listener.close();
        self.inner
            .publisher
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_defaults_and_can_be_set_but_not_empty() {
        let w = RedisWakeup::new("redis://127.0.0.1:6379/0").unwrap();
        assert_eq!(w.channel(), "hare_outbox");
        let w = w.with_channel("shop_outbox").unwrap();
        assert_eq!(w.channel(), "shop_outbox");
        let e = w.with_channel("").unwrap_err();
        assert!(matches!(e, Error::Configuration(_)), "{e}");
    }

    #[test]
    fn debug_hides_the_password() {
        let w = RedisWakeup::new("redis://user:hunter2@127.0.0.1:6379/0").unwrap();
        let text = format!("{w:?}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("hare_outbox"), "{text}");
    }
}
