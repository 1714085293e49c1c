//! `RabbitMqDelivery`: events published to RabbitMQ with publisher confirms.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use hare_outbox_core::{
    BatchDelivery, Delivery, DeliveryError, DeliveryErrorKind, Error, OutboxEvent, Result,
};
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties};
use tokio::time::Instant;

use crate::{Broker, MAX_SHORT_STRING, exchange_name, parse_url};

/// How long one call may take unless [`RabbitMqDelivery::with_timeout`] sets another: 10 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The AMQP header that carries the event's ordering key, when it has one. AMQP messages have no
/// key of their own, so consumers that process keys separately read it from here.
pub const ORDERING_KEY_HEADER: &str = "hare-outbox-ordering-key";

/// The connection name shown by RabbitMQ unless [`RabbitMqDelivery::with_connection_name`] sets
/// another.
const DEFAULT_CONNECTION_NAME: &str = "hare-outbox delivery";

/// The content type of every message: the body is the payload as JSON.
const CONTENT_TYPE: &str = "application/json";

/// AMQP delivery mode 2: the broker writes the message to disk (on a durable queue).
const PERSISTENT: u8 = 2;

/// Delivers events to RabbitMQ.
///
/// Each event becomes one AMQP message, published through the exchange set by
/// [`with_exchange`](Self::with_exchange) — an exchange that must exist already; by default the
/// default exchange `""`, which routes a message to the queue named like its routing key:
/// - routing key: the one set by [`with_routing_key`](Self::with_routing_key), else the event's
///   topic;
/// - body: [`OutboxEvent::body`], the payload as compact JSON; content type `application/json`;
/// - `delivery_mode` 2 (persistent): a durable queue keeps the message across a broker restart;
/// - `message_id`: the event id, by which consumers drop the duplicates at-least-once delivery
///   makes;
/// - headers: [`OutboxEvent::message_headers`] as AMQP long strings (among them
///   `hare-outbox-event-id` and `hare-outbox-topic`), then [`ORDERING_KEY_HEADER`] when the event
///   has an ordering key.
///
/// Every message is published with publisher confirms and `mandatory`: an event is delivered once
/// the broker confirmed it (an `ack`, for a persistent message on a durable queue after writing it
/// to disk). It fails — a [`DeliveryError`], retried by the relay — when the broker cannot route
/// it to any queue (the message comes back, `NO_ROUTE`), refuses it (a `nack`), the exchange does
/// not exist (the broker closes the channel, `NOT_FOUND`; so do the other messages in flight on
/// it), its routing key or a header name is longer than 255 bytes, the connection fails, or no
/// confirm comes within the timeout.
///
/// A relay batch is published whole on one channel, then the confirms are awaited; one result per
/// event, in order. Events of one ordering key keep their order: the relay sends the next event of
/// a key only after the previous one was confirmed.
///
/// The connection and its channel are opened on the first delivery and shared by clones. After a
/// lost connection or a closed channel, the next call opens them again; the calls in flight when
/// it broke fail, and the relay retries them.
///
/// # Cancel safety
/// A call dropped midway (e.g. by a timeout) may have published some of its events already; the
/// relay counts them as failed and publishes them again later (at least once).
#[derive(Clone)]
pub struct RabbitMqDelivery {
    broker: Broker,
    exchange: ShortString,
    routing_key: Option<ShortString>,
    connection_name: String,
    timeout: Duration,
    link: Arc<tokio::sync::Mutex<Option<Link>>>,
}

/// The open connection and its channel in confirm mode (none after a timeout).
struct Link {
    connection: Connection,
    channel: Option<Channel>,
}

impl std::fmt::Debug for RabbitMqDelivery {
    /// Shows the broker, never a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RabbitMqDelivery")
            .field("broker", &self.broker.describe)
            .field("exchange", &self.exchange.as_str())
            .field(
                "routing_key",
                &self.routing_key.as_ref().map(|k| k.as_str()),
            )
            .field("connection_name", &self.connection_name)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl RabbitMqDelivery {
    /// A delivery to the RabbitMQ broker at `url` — `amqp[s]://[user[:password]@]host[:port][/vhost]`,
    /// e.g. `amqp://guest:guest@127.0.0.1:5672/%2f` (user and password default to `guest`, the port
    /// to 5672, or 5671 for `amqps`; the vhost is percent-encoded, `%2f` being `/`, the default when
    /// the path is left out) — publishing through the default exchange `""` with each event's
    /// topic as routing key, with a timeout of [`DEFAULT_TIMEOUT`] (10 s). Nothing is connected
    /// until the first delivery.
    ///
    /// # Errors
    /// [`Error::Configuration`] naming the URL (password hidden) when it is not an AMQP URL.
    pub fn new(url: &str) -> Result<Self> {
        Ok(RabbitMqDelivery {
            broker: parse_url("rabbitmq delivery", url)?,
            exchange: ShortString::default(),
            routing_key: None,
            connection_name: DEFAULT_CONNECTION_NAME.to_owned(),
            timeout: DEFAULT_TIMEOUT,
            link: Arc::default(),
        })
    }

    /// Publishes through the exchange `name` instead of the default exchange. The exchange must
    /// exist: it is not declared. Unset by default.
    ///
    /// # Errors
    /// [`Error::Configuration`] naming the value when `name` is empty (leave it unset for the
    /// default exchange), longer than 255 bytes, or holds control characters.
    pub fn with_exchange(mut self, name: impl Into<String>) -> Result<Self> {
        self.exchange = exchange_name("rabbitmq delivery exchange", name.into())?;
        self.reset();
        Ok(self)
    }

    /// Publishes every event with the routing key `key` instead of its topic. An empty key is
    /// allowed (fanout exchanges ignore the key). Unset by default.
    ///
    /// # Errors
    /// [`Error::Configuration`] naming the value when `key` is longer than 255 bytes.
    pub fn with_routing_key(mut self, key: impl Into<String>) -> Result<Self> {
        let key = key.into();
        if key.len() > MAX_SHORT_STRING {
            return Err(Error::configuration(format!(
                "rabbitmq delivery routing key {key:?} is longer than 255 bytes, which AMQP cannot \
                 carry"
            )));
        }
        self.routing_key =
            Some(ShortString::try_new(key).map_err(|e| Error::configuration(e.to_string()))?);
        self.reset();
        Ok(self)
    }

    /// How long one call may take — connecting, publishing and waiting for every confirm of a
    /// single event or a whole batch; what has not been confirmed by then fails. In a relay the
    /// shorter of this and the relay's delivery timeout applies. Defaults to 10 s
    /// ([`DEFAULT_TIMEOUT`]).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self.reset();
        self
    }

    /// The `connection_name` client property of the connection, which RabbitMQ shows in its
    /// management UI and `rabbitmqctl list_connections client_properties`. Defaults to
    /// `hare-outbox delivery`.
    pub fn with_connection_name(mut self, name: impl Into<String>) -> Self {
        self.connection_name = name.into();
        self.reset();
        self
    }

    /// The exchange messages go through; `""` is the default exchange.
    pub fn exchange(&self) -> &str {
        self.exchange.as_str()
    }

    /// The routing key `event` is published with: the configured one, else its topic.
    pub fn routing_key_for<'a>(&'a self, event: &'a OutboxEvent) -> &'a str {
        self.routing_key
            .as_ref()
            .map_or(event.topic.as_str(), ShortString::as_str)
    }

    /// A builder method changed what a connection is set up with: clones made before keep theirs.
    fn reset(&mut self) {
        self.link = Arc::default();
    }

    /// The routing key and properties of `event`, or why it cannot be published.
    fn message(
        &self,
        event: &OutboxEvent,
    ) -> Result<(ShortString, BasicProperties), DeliveryError> {
        let routing_key = match &self.routing_key {
            Some(key) => key.clone(),
            None => ShortString::try_new(event.topic.as_str()).map_err(|_| {
                DeliveryError::new(format!(
                    "event {} cannot be published: its topic, the routing key, is longer than \
                     255 bytes",
                    event.id
                ))
            })?,
        };
        let mut headers = FieldTable::default();
        let mut put = |name: &str, value: &str| -> Result<(), DeliveryError> {
            let key = ShortString::try_new(name).map_err(|_| {
                DeliveryError::new(format!(
                    "event {} cannot be published: header name {name:?} is longer than 255 bytes",
                    event.id
                ))
            })?;
            headers.insert(key, AMQPValue::LongString(LongString::from(value)));
            Ok(())
        };
        for (name, value) in event.message_headers() {
            put(&name, &value)?;
        }
        if let Some(key) = event.message_key() {
            put(ORDERING_KEY_HEADER, key)?;
        }
        let properties = BasicProperties::default()
            .with_content_type(ShortString::from(CONTENT_TYPE))
            .with_delivery_mode(PERSISTENT)
            .with_message_id(ShortString::from(event.id.to_string()))
            .with_headers(headers);
        Ok((routing_key, properties))
    }

    /// The shared channel in confirm mode, opening the connection and the channel when there are
    /// none or they broke.
    async fn channel(&self) -> Result<Channel, DeliveryError> {
        let channel_failed = |e| {
            DeliveryError::with_source(
                format!("opening a channel on {} failed", self.broker.describe),
                e,
            )
            .with_kind(DeliveryErrorKind::Outage)
        };
        let mut slot = self.link.lock().await;
        if let Some(link) = slot.as_mut()
            && link.connection.status().connected()
        {
            if let Some(channel) = &link.channel
                && channel.status().connected()
            {
                return Ok(channel.clone());
            }
            // The broker closed the channel (e.g. an exchange that does not exist), or a timeout
            // left it in doubt: a new one on the same connection.
            let channel = open_channel(&link.connection)
                .await
                .map_err(channel_failed)?;
            link.channel = Some(channel.clone());
            return Ok(channel);
        }
        // Dropping a broken link closes what is left of it.
        *slot = None;
        let properties = ConnectionProperties::default()
            .with_connection_name(LongString::from(self.connection_name.as_str()));
        let connection = Connection::connect_uri(self.broker.uri.clone(), properties)
            .await
            .map_err(|e| {
                DeliveryError::with_source(
                    format!("connecting to {} failed", self.broker.describe),
                    e,
                )
                .with_kind(DeliveryErrorKind::Outage)
            })?;
        let channel = open_channel(&connection).await.map_err(channel_failed)?;
        *slot = Some(Link {
            connection,
            channel: Some(channel.clone()),
        });
        Ok(channel)
    }

    /// Forgets `channel` if it is still the shared one, so the next call opens a fresh channel
    /// (after a timeout, the state of its confirms is unknown), and closes it in the background.
    async fn drop_channel(&self, channel: &Channel) {
        let mut slot = self.link.lock().await;
        if let Some(link) = slot.as_mut()
            && link.channel.as_ref().map(Channel::id) == Some(channel.id())
            && let Some(stale) = link.channel.take()
        {
            tokio::spawn(async move {
                let _ = tokio::time::timeout(
                    Duration::from_secs(5),
                    stale.close(200, ShortString::from("timed out")),
                )
                .await;
            });
        }
    }

    async fn send(
        &self,
        events: &[OutboxEvent],
        timeout: Duration,
    ) -> Vec<Result<(), DeliveryError>> {
        let deadline = Instant::now() + timeout;
        let timed_out = |what: &str| {
            DeliveryError::outage(format!(
                "{what} on {} timed out after {:.3} s",
                self.broker.describe,
                timeout.as_secs_f64()
            ))
        };
        let channel = match tokio::time::timeout_at(deadline, self.channel()).await {
            Ok(Ok(channel)) => channel,
            Ok(Err(error)) => {
                let text = error.chain();
                let kind = error.kind();
                return events
                    .iter()
                    .map(|_| Err(DeliveryError::new(text.clone()).with_kind(kind)))
                    .collect();
            }
            Err(_) => {
                return events
                    .iter()
                    .map(|_| Err(timed_out("connecting")))
                    .collect();
            }
        };
        let options = BasicPublishOptions {
            mandatory: true,
            immediate: false,
        };
        let mut any_timeout = false;
        // Publish every event first…
        let mut pending = Vec::with_capacity(events.len());
        for event in events {
            let confirm = match self.message(event) {
                Err(error) => Err(error),
                Ok((routing_key, properties)) => {
                    let body = event.body();
                    let publish = channel.basic_publish(
                        self.exchange.clone(),
                        routing_key,
                        options,
                        &body,
                        properties,
                    );
                    match tokio::time::timeout_at(deadline, publish).await {
                        Ok(Ok(confirm)) => Ok(confirm),
                        Ok(Err(error)) => Err(DeliveryError::with_source(
                            format!(
                                "publishing event {} to exchange {:?} on {} failed",
                                event.id,
                                self.exchange.as_str(),
                                self.broker.describe
                            ),
                            error,
                        )
                        .with_kind(DeliveryErrorKind::Outage)),
                        Err(_) => {
                            any_timeout = true;
                            Err(timed_out(&format!("publishing event {}", event.id)))
                        }
                    }
                }
            };
            pending.push(confirm);
        }
        // …then wait for the confirms.
        let mut results = Vec::with_capacity(events.len());
        for (event, confirm) in events.iter().zip(pending) {
            let result = match confirm {
                Err(error) => Err(error),
                Ok(confirm) => match tokio::time::timeout_at(deadline, confirm).await {
                    Ok(Ok(confirmation)) => self.check(event, confirmation),
                    Ok(Err(error)) => Err(DeliveryError::with_source(
                        format!(
                            "the broker did not confirm event {} (exchange {:?}, routing key \
                             {:?}, {})",
                            event.id,
                            self.exchange.as_str(),
                            self.routing_key_for(event),
                            self.broker.describe
                        ),
                        error,
                    )
                    .with_kind(DeliveryErrorKind::Outage)),
                    Err(_) => {
                        any_timeout = true;
                        Err(timed_out(&format!(
                            "waiting for the confirm of event {}",
                            event.id
                        )))
                    }
                },
            };
            results.push(result);
        }
        if any_timeout {
            self.drop_channel(&channel).await;
        }
        results
    }

    /// The result of one confirm: an ack without a returned message is delivered.
    fn check(&self, event: &OutboxEvent, confirmation: Confirmation) -> Result<(), DeliveryError> {
        let refused = |what: String| {
            Err(DeliveryError::new(format!(
                "event {} {what} (exchange {:?}, routing key {:?}, {})",
                event.id,
                self.exchange.as_str(),
                self.routing_key_for(event),
                self.broker.describe
            )))
        };
        match confirmation {
            Confirmation::Ack(None) => Ok(()),
            Confirmation::Ack(Some(returned)) | Confirmation::Nack(Some(returned)) => {
                refused(format!(
                    "came back unroutable: {} {}; no queue is bound for it",
                    returned.reply_code, returned.reply_text
                ))
            }
            // A nack is the broker's own trouble (it could not take the message), not the event's.
            Confirmation::Nack(None) => refused("was refused by the broker (nack)".to_owned())
                .map_err(|e| e.with_kind(DeliveryErrorKind::Outage)),
            Confirmation::NotRequested => {
                refused("got no publisher confirm (confirms are off on the channel)".to_owned())
            }
        }
    }
}

/// A new channel on `connection`, in confirm mode.
async fn open_channel(connection: &Connection) -> lapin::Result<Channel> {
    let channel = connection.create_channel().await?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    Ok(channel)
}

/// The whole batch at once, behind the shared batching adaptor.
#[async_trait]
impl BatchDelivery for RabbitMqDelivery {
    fn batch_timeout(&self) -> Duration {
        self.timeout
    }

    async fn send_batch(
        &self,
        events: &[OutboxEvent],
        timeout: Duration,
    ) -> Vec<Result<(), DeliveryError>> {
        self.send(events, timeout).await
    }
}

#[async_trait]
impl Delivery for RabbitMqDelivery {
    /// Publishes one event and waits for its confirm, within the timeout ([`DEFAULT_TIMEOUT`]
    /// unless set).
    async fn deliver(&self, event: &OutboxEvent) -> Result<(), DeliveryError> {
        self.deliver_one(event).await
    }

    /// Publishes the whole batch on one channel, then waits for the confirms, all within the
    /// shorter of `timeout` and this delivery's timeout; one result per event, in order.
    /// `concurrency` does not apply: every publish of the batch is in flight at once.
    async fn deliver_batch(
        &self,
        events: &[OutboxEvent],
        _concurrency: usize,
        timeout: Duration,
    ) -> Vec<Result<(), DeliveryError>> {
        self.deliver_all(events, timeout).await
    }

    /// `true`: a batch is published in order on one channel, and a queue keeps the order of the
    /// messages published on one channel. When a publish is not confirmed, later events of its
    /// key may already be queued; the relay republishes them after the failed one.
    fn keeps_key_order(&self) -> bool {
        true
    }

    /// Closes the connection this delivery opened; a later call connects again.
    async fn close(&self) -> Result<(), DeliveryError> {
        if let Some(link) = self.link.lock().await.take()
            && link.connection.status().connected()
        {
            let closed = tokio::time::timeout(
                self.timeout,
                link.connection.close(200, ShortString::from("OK")),
            )
            .await;
            if !matches!(closed, Ok(Ok(()))) {
                tracing::debug!(broker = %self.broker.describe, "closing the RabbitMQ connection failed");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Map, json};

    fn event(topic: &str, key: Option<&str>, headers: serde_json::Value) -> OutboxEvent {
        OutboxEvent {
            sequence: 1,
            headers: headers.as_object().cloned().unwrap_or_default(),
            ordering_key: key.map(str::to_owned),
            ..OutboxEvent::new(topic.to_owned(), json!({"n": 1}))
        }
    }

    fn delivery() -> RabbitMqDelivery {
        RabbitMqDelivery::new("amqp://127.0.0.1:5672/%2f").unwrap()
    }

    fn text(value: &AMQPValue) -> String {
        match value {
            AMQPValue::LongString(s) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
            other => panic!("not a long string: {other:?}"),
        }
    }

    #[test]
    fn message_carries_properties_headers_and_key() {
        let e = event(
            "orders.created",
            Some("order:1"),
            json!({"author": "ann", "n": 3, "hare-outbox-topic": "spoofed"}),
        );
        let (routing_key, properties) = delivery().message(&e).unwrap();
        assert_eq!(routing_key.as_str(), "orders.created");
        assert_eq!(*properties.delivery_mode(), Some(2));
        assert_eq!(
            properties.content_type().as_ref().map(ShortString::as_str),
            Some("application/json")
        );
        assert_eq!(
            properties.message_id().as_ref().map(ShortString::as_str),
            Some(e.id.to_string().as_str())
        );
        let headers = properties.headers().clone().unwrap();
        let get = |name: &str| headers.inner().get(name).map(text);
        assert_eq!(get("author").as_deref(), Some("ann"));
        assert_eq!(get("n").as_deref(), Some("3"));
        assert_eq!(get("hare-outbox-event-id"), Some(e.id.to_string()));
        assert_eq!(get("hare-outbox-topic").as_deref(), Some("orders.created"));
        assert_eq!(get(ORDERING_KEY_HEADER).as_deref(), Some("order:1"));
        assert_eq!(headers.inner().len(), 5);
        let (_, unkeyed) = delivery().message(&event("t", None, json!({}))).unwrap();
        let unkeyed = unkeyed.headers().clone().unwrap();
        assert!(unkeyed.inner().get(ORDERING_KEY_HEADER).is_none());
    }

    #[test]
    fn configured_routing_key_and_exchange_apply() {
        let d = delivery()
            .with_exchange("events")
            .unwrap()
            .with_routing_key("all")
            .unwrap();
        assert_eq!(d.exchange(), "events");
        let e = event("orders.created", None, json!({}));
        assert_eq!(d.routing_key_for(&e), "all");
        assert_eq!(d.message(&e).unwrap().0.as_str(), "all");
        assert_eq!(delivery().exchange(), "");
        assert_eq!(delivery().routing_key_for(&e), "orders.created");
    }

    #[test]
    fn too_long_routing_keys_and_header_names_fail_the_event() {
        let long = "t".repeat(256);
        let error = delivery()
            .message(&event(&long, None, json!({})))
            .unwrap_err();
        assert!(error.to_string().contains("255 bytes"), "{error}");
        let mut headers = Map::new();
        headers.insert(long.clone(), json!("x"));
        let error = delivery()
            .message(&event("t", None, serde_json::Value::Object(headers)))
            .unwrap_err();
        assert!(error.to_string().contains(&long), "{error}");
    }

    #[test]
    fn bad_configuration_is_refused_naming_the_value() {
        let e = delivery().with_exchange("").unwrap_err();
        assert!(matches!(e, Error::Configuration(_)), "{e}");
        assert!(e.to_string().contains("\"\""), "{e}");
        let e = delivery().with_routing_key("k".repeat(256)).unwrap_err();
        assert!(matches!(e, Error::Configuration(_)), "{e}");
        assert!(delivery().with_routing_key("").is_ok());
        let e = RabbitMqDelivery::new("amqp://u:hunter2@host:x").unwrap_err();
        assert!(matches!(e, Error::Configuration(_)), "{e}");
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }

    #[test]
    fn debug_hides_the_password() {
        let d = RabbitMqDelivery::new("amqp://user:hunter2@127.0.0.1:5672/%2f").unwrap();
        let text = format!("{d:?}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("127.0.0.1:5672"), "{text}");
    }
}
