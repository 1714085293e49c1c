//! `NatsWakeup`: wake-up signals over a core NATS subject.

use std::sync::Arc;
use std::time::Duration;

use async_nats::ServerAddr;
use async_nats::connection::State;
use async_trait::async_trait;
use futures::StreamExt;
use hare_outbox_core::{Error, Result, Wakeup, WakeupSubscription};

use crate::{describe_servers, parse_servers, publish_subject_problem};
use hare_outbox_core::wakeup::listener::{self, Connecting, Listener, MAX_FAILURES, Source};

/// The subject unless [`NatsWakeup::with_subject`] names another: `hare_outbox`.
pub const DEFAULT_SUBJECT: &str = "hare_outbox";

/// How long connecting the publishing client may take.
const SIGNAL_TIMEOUT: Duration = Duration::from_secs(5);

/// Wakes relays through a core NATS subject.
///
/// Pass the same object (or a clone: clones share everything) to
/// [`Outbox::with_wakeup`](hare_outbox_core::Outbox::with_wakeup): every
/// [`OutboxTransaction`](hare_outbox_core::OutboxTransaction) that wrote events then publishes,
/// after its commit, one message on the subject — a JSON array of the topics it wrote, e.g.
/// `["orders.created","orders.paid"]` — and every relay of that outbox, in this process or any
/// other connected to the same NATS, polls at once if one of the topics is its own. Signals are
/// plain NATS messages, not JetStream: nothing is stored.
///
/// **Signals.** [`Wakeup::signal`] publishes through a client connected on first use, which
/// reconnects by itself without limit. Its errors are returned (the transaction logs them and goes
/// on: the events are committed and polling delivers them); while that client is disconnected a
/// signal fails at once rather than being queued.
///
/// **Subscriptions.** One listener task per object, whatever the number of subscribers: the
/// first [`Wakeup::subscribe`] connects its own client and subscribes (it returns once the server
/// has the subscription, or the first attempt failed), later ones share that subscription through
/// a broadcast channel, and the task stops when the last subscriber is gone. If the first connect
/// fails, it is tried again after 100 ms, doubled after each failure up to 60 s, with jitter.
/// Once connected, the client reconnects and resubscribes by itself when the connection breaks,
/// at once and then with growing pauses. After five failed attempts in a row — either way — the
/// task logs an ERROR (relays poll at their poll interval meanwhile) and goes on with a new
/// client; it never gives up while anyone subscribes. Each new subscription after the first sends
/// an empty signal, so every relay polls once for the signals lost meanwhile.
///
/// A lost signal is harmless: relays poll anyway. A message on the subject that is not a JSON
/// array of strings is logged and ignored.
#[derive(Clone)]
pub struct NatsWakeup {
    inner: Arc<Inner>,
}

struct Inner {
    servers: Vec<ServerAddr>,
    server: String,
    subject: String,
    publisher: tokio::sync::Mutex<Option<async_nats::Client>>,
    listener: Listener,
}

impl std::fmt::Debug for NatsWakeup {
    /// Shows the servers and the subject, never a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsWakeup")
            .field("server", &self.inner.server)
            .field("subject", &self.inner.subject)
            .finish()
    }
}

impl NatsWakeup {
    /// A wake-up through the NATS server(s) at `url` — `nats://[user:password@]host[:port]`,
    /// several separated by commas — on the subject [`DEFAULT_SUBJECT`] (`hare_outbox`). Nothing is
    /// connected until the first signal or subscription.
    ///
    /// # Errors
    /// [`Error::Configuration`] naming the URL (password hidden) when it is not a NATS URL.
    pub fn new(url: &str) -> Result<Self> {
        let servers = parse_servers("nats wake-up", url)?;
        Ok(Self::build(servers, DEFAULT_SUBJECT.to_owned()))
    }

    fn build(servers: Vec<ServerAddr>, subject: String) -> Self {
        NatsWakeup {
            inner: Arc::new(Inner {
                server: describe_servers(&servers),
                servers,
                subject,
                publisher: tokio::sync::Mutex::new(None),
                listener: Listener::default(),
            }),
        }
    }

    /// Publishes and subscribes on `subject` instead of [`DEFAULT_SUBJECT`]; use one subject per
    /// outbox table when several share a NATS, so their relays do not wake each other.
    ///
    /// # Errors
    /// [`Error::Configuration`] naming the subject when it is empty or cannot be published to
    /// (whitespace, an empty token, a `*` or `>` token).
    pub fn with_subject(self, subject: impl Into<String>) -> Result<Self> {
        let subject = subject.into();
        if let Some(problem) = publish_subject_problem(&subject) {
            return Err(Error::configuration(format!(
                "nats wake-up subject {subject:?} is not valid: {problem}; use e.g. \"hare_outbox\""
            )));
        }
        Ok(Self::build(self.inner.servers.clone(), subject))
    }

    /// The subject signals go through.
    pub fn subject(&self) -> &str {
        &self.inner.subject
    }

    async fn publisher(&self) -> Result<async_nats::Client> {
        let mut slot = self.inner.publisher.lock().await;
        if let Some(client) = slot.as_ref() {
            return Ok(client.clone());
        }
        let connect = async_nats::ConnectOptions::new()
            .name("hare-outbox wake-up signals")
            .connection_timeout(SIGNAL_TIMEOUT)
            .connect(self.inner.servers.clone());
        let client = match tokio::time::timeout(SIGNAL_TIMEOUT, connect).await {
            Ok(Ok(client)) => client,
            Ok(Err(error)) => return Err(Error::database(error)),
            Err(_) => {
                return Err(Error::database(format!(
                    "connecting to {} took longer than {} s",
                    self.inner.server,
                    SIGNAL_TIMEOUT.as_secs()
                )));
            }
        };
        *slot = Some(client.clone());
        Ok(client)
    }
}

/// The subscribing side, run by the shared listener task.
struct NatsSource {
    servers: Vec<ServerAddr>,
    subject: String,
    what: String,
}

impl Source for NatsSource {
    fn connect(&self) -> Connecting<'_> {
        Box::pin(async move {
            let client = async_nats::ConnectOptions::new()
                .name("hare-outbox wake-up listener")
                .connection_timeout(listener::CONNECT_TIMEOUT)
                // The client reconnects and resubscribes by itself, and stops after
                // MAX_FAILURES failed attempts in a row; then the subscription ends.
                .max_reconnects(MAX_FAILURES as usize)
                .reconnect_delay_callback(|attempt| match u32::try_from(attempt) {
                    Ok(0 | 1) => Duration::ZERO,
                    Ok(attempt) => listener::reconnect_delay(attempt - 1),
                    Err(_) => listener::reconnect_delay(u32::MAX),
                })
                .connect(self.servers.clone())
                .await?;
            let subscriber = client.subscribe(self.subject.clone()).await?;
            // The server has the subscription once it answered the flush's PING.
            client.flush().await?;
            Ok(subscriber
                .map(move |message| {
                    // The client lives as long as the stream.
                    let _client = &client;
                    message.payload.to_vec()
                })
                .boxed())
        })
    }

    fn describe(&self) -> String {
        self.what.clone()
    }

    fn reconnects_itself(&self) -> bool {
        true
    }
}

#[async_trait]
impl Wakeup for NatsWakeup {
    /// Publishes one message naming `topics` (a JSON array) on the subject.
    ///
    /// # Errors
    /// [`Error::Database`] when connecting failed or took longer than 5 s, when the client is
    /// disconnected (the signal is dropped, not queued), or when publishing failed.
    async fn signal(&self, topics: &[String]) -> Result<()> {
        let client = self.publisher().await?;
        if client.connection_state() != State::Connected {
            return Err(Error::database(format!(
                "the connection to {} is down; the wake-up signal is dropped",
                self.inner.server
            )));
        }
        client
            .publish(
                self.inner.subject.clone(),
                listener::encode_topics(topics).into(),
            )
            .await
            .map_err(Error::database)
    }

    /// A subscription fed by this object's shared listener task; see the type's docs for
    /// reconnects. Waits for the first attempt to subscribe (at most 5 s).
    ///
    /// # Errors
    /// None: a subscription that cannot be made yet stays open while the listener retries;
    /// it closes only on `close()`.
    async fn subscribe(&self) -> Result<WakeupSubscription> {
        let source: Arc<dyn Source> = Arc::new(NatsSource {
            servers: self.inner.servers.clone(),
            subject: self.inner.subject.clone(),
            what: format!("{} subject {:?}", self.inner.server, self.inner.subject),
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
        if let Some(client) = self.inner.publisher.lock().await.take() {
            let _ = tokio::time::timeout(SIGNAL_TIMEOUT, client.flush()).await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subject_defaults_and_can_be_set_but_must_be_publishable() {
        let w = NatsWakeup::new("nats://127.0.0.1:4222").unwrap();
        assert_eq!(w.subject(), "hare_outbox");
        let w = w.with_subject("shop.outbox").unwrap();
        assert_eq!(w.subject(), "shop.outbox");
        for bad in ["", "a b", "a.*", "a..b"] {
            let e = w.clone().with_subject(bad).unwrap_err();
            assert!(matches!(e, Error::Configuration(_)), "{bad:?}: {e}");
            assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
        }
    }

    #[test]
    fn debug_hides_the_password() {
        let w = NatsWakeup::new("nats://user:hunter2@127.0.0.1:4222").unwrap();
        let text = format!("{w:?}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("hare_outbox"), "{text}");
    }
}
