//! `RabbitMqWakeup`: wake-up signals through a RabbitMQ fanout exchange.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use hare_outbox_core::{Error, Result, Wakeup, WakeupSubscription};
use lapin::options::{
    BasicConsumeOptions, BasicPublishOptions, ExchangeDeclareOptions, QueueBindOptions,
    QueueDeclareOptions,
};
use lapin::types::{FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};

use crate::{Broker, exchange_name, parse_url};
use hare_outbox_core::wakeup::listener::{self, Connecting, Listener, Source};

/// The fanout exchange unless [`RabbitMqWakeup::with_exchange`] names another: `hare_outbox`.
pub const DEFAULT_EXCHANGE: &str = "hare_outbox";

/// The connection name unless [`RabbitMqWakeup::with_connection_name`] sets another.
const DEFAULT_CONNECTION_NAME: &str = "hare-outbox wake-up";

/// How long a signal may take, connecting included.
const SIGNAL_TIMEOUT: Duration = Duration::from_secs(5);

/// Wakes relays through a RabbitMQ fanout exchange.
///
/// Pass the same object (or a clone: clones share everything) to
/// [`Outbox::with_wakeup`](hare_outbox_core::Outbox::with_wakeup): every
/// [`OutboxTransaction`](hare_outbox_core::OutboxTransaction) that wrote events then publishes,
/// after its commit, one message to the exchange — a JSON array of the topics it wrote, e.g.
/// `["orders.created","orders.paid"]` — and every relay of that outbox, in this process or any
/// other connected to the same broker and vhost, polls at once if one of the topics is its own.
///
/// The exchange (default [`DEFAULT_EXCHANGE`], `hare_outbox`) is declared durable and of type
/// `fanout` by both sides; an existing exchange of that name with other settings makes the
/// declaration fail (`PRECONDITION_FAILED`), and with it every signal and subscription.
///
/// **Signals.** [`Wakeup::signal`] publishes a transient message (no publisher confirm) through
/// a connection opened on first use and opened again after it broke. Its errors are returned (the
/// transaction logs them and goes on: the events are committed and polling delivers them).
///
/// **Subscriptions.** One listener per object, whatever the number of subscribers: the first
/// [`Wakeup::subscribe`] connects, declares an exclusive, auto-delete queue with a name the
/// broker chooses, binds it to the exchange and consumes from it (it returns once the queue is
/// bound, or the first attempt failed); later ones share that queue through a broadcast channel,
/// and the listener stops — its connection closed and its queue gone — when the last subscriber
/// is gone. A subscription that breaks (the connection closed by the broker or lost) is made
/// again, with a new queue, after a pause of 100 ms, doubled after each failed attempt up to 60 s,
/// with jitter. After five failed attempts in a row the listener logs an ERROR — relays poll at
/// their poll interval meanwhile — and goes on retrying; it never gives up while anyone
/// subscribes. Each restored subscription sends an empty signal, so every relay polls once for
/// the signals lost meanwhile.
///
/// A lost signal is harmless: relays poll anyway (signals sent while a listener reconnects are
/// not queued for it). A message that is not a JSON array of strings is logged and ignored.
#[derive(Clone)]
pub struct RabbitMqWakeup {
    inner: Arc<Inner>,
}

struct Inner {
    broker: Broker,
    exchange: ShortString,
    connection_name: String,
    publisher: tokio::sync::Mutex<Option<(Connection, Channel)>>,
    listener: Listener,
}

impl std::fmt::Debug for RabbitMqWakeup {
    /// Shows the broker and the exchange, never a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RabbitMqWakeup")
            .field("broker", &self.inner.broker.describe)
            .field("exchange", &self.inner.exchange.as_str())
            .field("connection_name", &self.inner.connection_name)
            .finish()
    }
}

impl RabbitMqWakeup {
    /// A wake-up through the RabbitMQ broker at `url` —
    /// `amqp[s]://[user[:password]@]host[:port][/vhost]`, e.g.
    /// `amqp://guest:guest@127.0.0.1:5672/%2f` — on the fanout exchange [`DEFAULT_EXCHANGE`]
    /// (`hare_outbox`). Nothing is connected until the first signal or subscription.
    ///
    /// # Errors
    /// [`Error::Configuration`] naming the URL (password hidden) when it is not an AMQP URL.
    pub fn new(url: &str) -> Result<Self> {
        Ok(Self::build(
            parse_url("rabbitmq wake-up", url)?,
            ShortString::from(DEFAULT_EXCHANGE),
            DEFAULT_CONNECTION_NAME.to_owned(),
        ))
    }

    fn build(broker: Broker, exchange: ShortString, connection_name: String) -> Self {
        RabbitMqWakeup {
            inner: Arc::new(Inner {
                broker,
                exchange,
                connection_name,
                publisher: tokio::sync::Mutex::new(None),
                listener: Listener::default(),
            }),
        }
    }

    /// Signals and listens through the fanout exchange `name` instead of [`DEFAULT_EXCHANGE`]; use
    /// one exchange per outbox table when several share a broker, so their relays do not wake each
    /// other. The result is a new object, sharing nothing with
    /// `self`.
    ///
    /// # Errors
    /// [`Error::Configuration`] naming the value when `name` is empty, longer than 255 bytes,
    /// holds control characters, or starts with `amq.` (reserved by the broker, so it cannot be
    /// declared).
    pub fn with_exchange(self, name: impl Into<String>) -> Result<Self> {
        let name = name.into();
        if name.starts_with("amq.") {
            return Err(Error::configuration(format!(
                "rabbitmq wake-up exchange {name:?} is not allowed: names starting with \"amq.\" \
                 are reserved by the broker; use e.g. \"hare_outbox\""
            )));
        }
        let exchange = exchange_name("rabbitmq wake-up exchange", name)?;
        Ok(Self::build(
            self.inner.broker.clone(),
            exchange,
            self.inner.connection_name.clone(),
        ))
    }

    /// Names the connections in RabbitMQ's `connection_name` client property (shown in its
    /// management UI and `rabbitmqctl list_connections client_properties`): the listener's
    /// connection `<name> listener`, the signals' connection `<name> signals`. Defaults to
    /// `hare-outbox wake-up`. The result is a new object, sharing nothing with `self`.
    pub fn with_connection_name(self, name: impl Into<String>) -> Self {
        Self::build(
            self.inner.broker.clone(),
            self.inner.exchange.clone(),
            name.into(),
        )
    }

    /// The exchange signals go through.
    pub fn exchange(&self) -> &str {
        self.inner.exchange.as_str()
    }

    /// The channel signals are published on, connecting and declaring the exchange when there is
    /// none or it broke.
    async fn publisher(&self) -> lapin::Result<Channel> {
        let mut slot = self.inner.publisher.lock().await;
        if let Some((connection, channel)) = slot.as_ref()
            && connection.status().connected()
            && channel.status().connected()
        {
            return Ok(channel.clone());
        }
        *slot = None;
        let (connection, channel) = connect(
            &self.inner.broker,
            &self.inner.exchange,
            format!("{} signals", self.inner.connection_name),
        )
        .await?;
        *slot = Some((connection, channel.clone()));
        Ok(channel)
    }

    async fn publish(&self, topics: &[String]) -> lapin::Result<()> {
        let channel = self.publisher().await?;
        let properties = BasicProperties::default()
            .with_content_type(ShortString::from("application/json"))
            .with_delivery_mode(1);
        channel
            .basic_publish(
                self.inner.exchange.clone(),
                ShortString::default(),
                BasicPublishOptions::default(),
                &listener::encode_topics(topics),
                properties,
            )
            .await?
            // Confirms are off: resolves at once.
            .await?;
        Ok(())
    }
}

/// Connects, opens a channel and declares the durable fanout `exchange` on it.
async fn connect(
    broker: &Broker,
    exchange: &ShortString,
    connection_name: String,
) -> lapin::Result<(Connection, Channel)> {
    let properties =
        ConnectionProperties::default().with_connection_name(LongString::from(connection_name));
    let connection = Connection::connect_uri(broker.uri.clone(), properties).await?;
    let channel = connection.create_channel().await?;
    channel
        .exchange_declare(
            exchange.clone(),
            ExchangeKind::Fanout,
            ExchangeDeclareOptions {
                durable: true,
                ..ExchangeDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await?;
    Ok((connection, channel))
}

/// The subscribing side, run by the shared listener task.
struct RabbitMqSource {
    broker: Broker,
    exchange: ShortString,
    connection_name: String,
    what: String,
}

impl Source for RabbitMqSource {
    fn connect(&self) -> Connecting<'_> {
        Box::pin(async move {
            let (connection, channel) =
                connect(&self.broker, &self.exchange, self.connection_name.clone()).await?;
            // Exclusive: deleted by the broker when this connection closes, however it closes.
            let queue = channel
                .queue_declare(
                    ShortString::default(),
                    QueueDeclareOptions {
                        exclusive: true,
                        auto_delete: true,
                        ..QueueDeclareOptions::default()
                    },
                    FieldTable::default(),
                )
                .await?;
            channel
                .queue_bind(
                    queue.name().clone(),
                    self.exchange.clone(),
                    ShortString::default(),
                    QueueBindOptions::default(),
                    FieldTable::default(),
                )
                .await?;
            let consumer = channel
                .basic_consume(
                    queue.name().clone(),
                    ShortString::default(),
                    BasicConsumeOptions {
                        no_ack: true,
                        exclusive: true,
                        ..BasicConsumeOptions::default()
                    },
                    FieldTable::default(),
                )
                .await?;
            // The stream ends at the first error (a lost connection, a closed channel) or when
            // the broker cancels the consumer; the connection lives as long as the stream.
            Ok(consumer
                .take_while(|delivery| std::future::ready(delivery.is_ok()))
                .filter_map(move |delivery| {
                    let _link = (&connection, &channel);
                    std::future::ready(delivery.ok().map(|delivery| delivery.data))
                })
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
impl Wakeup for RabbitMqWakeup {
    /// Publishes one message naming `topics` (a JSON array) to the exchange.
    ///
    /// # Errors
    /// [`Error::Database`] with the broker's error when connecting, declaring the exchange or
    /// publishing failed, or took longer than 5 s. The broken connection is dropped and the next
    /// signal connects again.
    async fn signal(&self, topics: &[String]) -> Result<()> {
        let error = match tokio::time::timeout(SIGNAL_TIMEOUT, self.publish(topics)).await {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(error)) => Error::database(error),
            Err(_) => Error::database(format!(
                "publishing a wake-up signal to {} exchange {:?} took longer than {} s",
                self.inner.broker.describe,
                self.inner.exchange.as_str(),
                SIGNAL_TIMEOUT.as_secs()
            )),
        };
        self.inner.publisher.lock().await.take();
        Err(error)
    }

    /// A subscription fed by this object's shared listener; see the type's docs for reconnects.
    /// Waits for the first attempt to subscribe (at most 5 s).
    ///
    /// # Errors
    /// None: a subscription that cannot be made yet stays open while the listener retries;
    /// it closes only on `close()`.
    async fn subscribe(&self) -> Result<WakeupSubscription> {
        let source: Arc<dyn Source> = Arc::new(RabbitMqSource {
            broker: self.inner.broker.clone(),
            exchange: self.inner.exchange.clone(),
            connection_name: format!("{} listener", self.inner.connection_name),
            what: format!(
                "{} exchange {:?}",
                self.inner.broker.describe,
                self.inner.exchange.as_str()
            ),
        });
        Ok(self
            .inner
            .listener
            .subscribe(&source, listener::CONNECT_TIMEOUT)
            .await)
    }

    /// Stops the listener (its subscriptions see the wake-up closed; its connection closes and
    /// its queue goes away) and closes the signals' connection. A later `signal` or `subscribe`
    /// connects again.
    async fn close(&self) -> Result<()> {
        self.inner.listener.close();
        if let Some((connection, _channel)) = self.inner.publisher.lock().await.take()
            && connection.status().connected()
        {
            let _ = tokio::time::timeout(
                SIGNAL_TIMEOUT,
                connection.close(200, ShortString::from("OK")),
            )
            .await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exchange_defaults_and_can_be_set_but_must_be_declarable() {
        let w = RabbitMqWakeup::new("amqp://127.0.0.1:5672/%2f").unwrap();
        assert_eq!(w.exchange(), "hare_outbox");
        let w = w.with_exchange("shop_outbox").unwrap();
        assert_eq!(w.exchange(), "shop_outbox");
        for bad in ["", "amq.fanout", "a\nb"] {
            let e = w.clone().with_exchange(bad).unwrap_err();
            assert!(matches!(e, Error::Configuration(_)), "{bad:?}: {e}");
            assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
        }
    }

    #[test]
    fn bad_urls_are_refused_without_the_password() {
        let e = RabbitMqWakeup::new("amqp://u:hunter2@host:x/").unwrap_err();
        assert!(matches!(e, Error::Configuration(_)), "{e}");
        assert!(!e.to_string().contains("hunter2"), "{e}");
        assert!(e.to_string().contains("rabbitmq wake-up url"), "{e}");
    }

    #[test]
    fn debug_hides_the_password() {
        let w = RabbitMqWakeup::new("amqp://user:hunter2@127.0.0.1:5672/%2f").unwrap();
        let text = format!("{w:?}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("hare_outbox"), "{text}");
    }
}
