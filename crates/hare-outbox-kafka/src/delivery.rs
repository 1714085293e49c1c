//! `KafkaDelivery`: events produced to Kafka topics.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use hare_outbox_core::{
    BatchDelivery, Delivery, DeliveryError, DeliveryErrorKind, Error, OutboxEvent, Result,
};
use rdkafka::ClientConfig;
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer};
use tokio::time::Instant;

use crate::{check_bootstrap, invalid_topic_reason, millis};

/// How long one event may take to be acknowledged unless [`KafkaDelivery::with_timeout`] sets
/// another: 10 s, below the relay's default delivery timeout of 30 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Delivers events to Kafka.
///
/// Each event becomes one Kafka message:
///
/// | part    | value                                                                              |
/// |---------|------------------------------------------------------------------------------------|
/// | topic   | the topic set by [`with_topic`](Self::with_topic), else the event's topic          |
/// | key     | the ordering key ([`OutboxEvent::message_key`]); no key when the event has none    |
/// | value   | [`OutboxEvent::body`]: the payload as compact JSON                                 |
/// | headers | [`OutboxEvent::message_headers`], in order (among them `hare-outbox-event-id` and `hare-outbox-topic`), values as UTF-8 |
///
/// The producer made by [`new`](Self::new) is idempotent (`enable.idempotence=true`) with
/// `acks=all`, and partitions keys like the Java client (`partitioner=murmur2_random`), so all
/// events of one ordering key land in one partition, in the order the relay sends them (the relay
/// sends the next event of a key only after the previous one succeeded). Events without a key are
/// spread over the partitions.
///
/// A relay batch is sent whole: every message is handed to the producer first (librdkafka batches
/// them into few requests), then all acknowledgements are awaited, within the shorter of the
/// relay's timeout and this delivery's timeout; one result per event, in order. An event whose
/// topic is not a valid Kafka topic name (only `a-z A-Z 0-9 . _ -`, at most 249 characters) fails
/// alone, with a message saying so, and is never sent.
///
/// The producer's own delivery timeout (`message.timeout.ms`) is this delivery's timeout
/// ([`DEFAULT_TIMEOUT`], 10 s), so librdkafka stops retrying a message about when the relay stops
/// waiting for it. Keep it below the relay's
/// [`delivery_timeout`](hare_outbox_core::RelayConfig::delivery_timeout): a message still in
/// flight when the relay gives up may be written later and then again by the relay's retry —
/// delivery is at least once; receivers drop duplicates by `hare-outbox-event-id`.
///
/// # Broker outages
///
/// While the broker cannot be reached librdkafka keeps each message and retries it by itself;
/// `message.timeout.ms` — set to this delivery's timeout by [`new`](Self::new) and
/// [`with_timeout`](Self::with_timeout) — is what bounds that. Within it an event either is
/// acknowledged or fails (librdkafka's `MessageTimedOut`, or this delivery's own wait running
/// out), so the relay records the failure (attempts, `last_error`) and schedules the event again
/// with its backoff, instead of waiting on a producer that retries on its own for librdkafka's
/// default of 300 s and may then write a message the relay has already sent again. Once the broker
/// is back, the next attempt goes through. A shorter timeout surfaces an outage sooner; the
/// outage test runs with 2 s.
///
/// An idempotent producer whose messages time out while in flight has to re-establish its
/// producer id and epoch with the broker; when that goes wrong it is left refusing every later
/// message (`ProducerFenced`, `InvalidProducerEpoch`, `OutOfOrderSequenceNumber`,
/// `UnknownProducerId`), or in librdkafka's *fatal* state (`rd_kafka_fatal_error`), and never
/// recovers by itself (the tansu broker answers `ProducerFenced` after such an outage in this
/// crate's outage test).
/// A delivery made by [`new`](Self::new) then replaces the producer with a fresh one from the
/// same settings — after a send that failed with one of those errors, and before a send when the
/// producer is in the fatal state — so delivery resumes by itself once the broker is back; the
/// events of the failed send are retried by the relay. A producer handed in through
/// [`from_producer`](Self::from_producer) cannot be rebuilt: once fatal, every event fails with
/// the fatal error named, until the delivery is made again with a new producer.
///
/// Clones share the producer (and its replacement).
#[derive(Clone)]
pub struct KafkaDelivery {
    /// The producer in use; replaced when it is broken and `config` is known.
    producer: Arc<Mutex<Slot>>,
    /// The settings `producer` was made from; `None` when the caller handed in the producer.
    config: Option<ClientConfig>,
    servers: String,
    topic: Option<String>,
    timeout: Duration,
}

impl std::fmt::Debug for KafkaDelivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaDelivery")
            .field("servers", &self.servers)
            .field("topic", &self.topic)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl KafkaDelivery {
    /// A delivery to the Kafka cluster reached through `bootstrap_servers` (`host:port`, several
    /// separated by commas), producing each event to the topic named like its topic, with a
    /// timeout of [`DEFAULT_TIMEOUT`] (10 s). The producer connects in the background; nothing
    /// waits for the cluster here.
    ///
    /// Producer settings: `acks=all`, `enable.idempotence=true`, `partitioner=murmur2_random`,
    /// `message.timeout.ms` and `request.timeout.ms` = the timeout. For TLS, SASL or other
    /// settings build the producer yourself and use [`from_producer`](Self::from_producer).
    ///
    /// # Errors
    /// [`Error::Configuration`] naming the value when `bootstrap_servers` is not a list of
    /// `host:port` or librdkafka refuses the settings.
    pub fn new(bootstrap_servers: &str) -> Result<Self> {
        check_bootstrap("kafka delivery", bootstrap_servers)?;
        let mut config = producer_defaults(bootstrap_servers);
        let producer = create_producer(&mut config, DEFAULT_TIMEOUT)?;
        Ok(KafkaDelivery {
            producer: Slot::shared(producer),
            config: Some(config),
            servers: bootstrap_servers.trim().to_owned(),
            topic: None,
            timeout: DEFAULT_TIMEOUT,
        })
    }

    /// Like [`new`](Self::new) with a producer you built yourself, e.g. with TLS or SASL settings
    /// (as `KafkaDelivery(producer=...)` of the original). Its settings are used as they are: set
    /// `acks=all` and `enable.idempotence=true` yourself, and a `message.timeout.ms` below the
    /// relay's delivery timeout.
    pub fn from_producer(producer: FutureProducer) -> Self {
        KafkaDelivery {
            producer: Slot::shared(producer),
            config: None,
            servers: "a caller-built producer".to_owned(),
            topic: None,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// Produces every event to the Kafka topic `name` instead of the topic named like its topic.
    /// Unset by default.
    ///
    /// # Errors
    /// [`Error::Configuration`] naming the value when `name` is not a valid Kafka topic name.
    pub fn with_topic(mut self, name: impl Into<String>) -> Result<Self> {
        let name = name.into();
        if let Some(reason) = invalid_topic_reason(&name) {
            return Err(Error::configuration(format!(
                "kafka delivery topic {name:?} is not a valid Kafka topic name: {reason}"
            )));
        }
        self.topic = Some(name);
        Ok(self)
    }

    /// How long one event may take until the broker acknowledged it; a slower event fails. In a
    /// relay the shorter of this and the relay's delivery timeout applies. With a producer made by
    /// [`new`](Self::new), this is also its `message.timeout.ms` (the producer is made again);
    /// with one from [`from_producer`](Self::from_producer), only the wait is bounded. Defaults to
    /// 10 s ([`DEFAULT_TIMEOUT`]).
    ///
    /// # Errors
    /// [`Error::Configuration`] when `timeout` is zero or longer than about 24 days.
    pub fn with_timeout(mut self, timeout: Duration) -> Result<Self> {
        millis("kafka delivery timeout", timeout)?;
        if let Some(config) = self.config.as_mut() {
            // A producer of its own: clones made before keep the old one.
            self.producer = Slot::shared(create_producer(config, timeout)?);
        }
        self.timeout = timeout;
        Ok(self)
    }

    /// The Kafka topic `event` is produced to.
    pub fn topic_for<'a>(&'a self, event: &'a OutboxEvent) -> &'a str {
        self.topic.as_deref().unwrap_or(&event.topic)
    }

    /// The producer to send with and its generation. One in the fatal state is replaced first
    /// (see [`replace`](Self::replace)); when the producer was handed in, the fatal error is
    /// returned instead.
    fn producer(&self) -> Result<(FutureProducer, u64), DeliveryError> {
        let slot = self.producer.lock().unwrap_or_else(PoisonError::into_inner);
        let (producer, generation) = (slot.producer.clone(), slot.generation);
        drop(slot);
        let Some((code, reason)) = producer.client().fatal_error() else {
            return Ok((producer, generation));
        };
        let why = format!("a fatal error ({code:?}: {reason})");
        if self.config.is_none() {
            return Err(DeliveryError::outage(format!(
                "the Kafka producer for {} hit {why} and cannot send again; make the delivery \
                 again with a new producer",
                self.servers
            )));
        }
        drop(producer);
        self.replace(generation, &why)
    }

    /// Replaces the producer of `generation` (if no other call replaced it already) with a fresh
    /// one from the same settings, closing the old one on a blocking thread (dropping a producer
    /// waits for librdkafka). Returns the producer now in use.
    fn replace(&self, generation: u64, why: &str) -> Result<(FutureProducer, u64), DeliveryError> {
        let mut slot = self.producer.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(config) = self.config.as_ref() else {
            return Ok((slot.producer.clone(), slot.generation));
        };
        if slot.generation != generation {
            return Ok((slot.producer.clone(), slot.generation));
        }
        let fresh = config.create::<FutureProducer>().map_err(|e| {
            DeliveryError::with_source(
                format!(
                    "the Kafka producer for {} hit {why} and a new one could not be made",
                    self.servers
                ),
                e,
            )
            .with_kind(DeliveryErrorKind::Outage)
        })?;
        tracing::warn!(
            servers = %self.servers,
            "the Kafka producer hit {why}; replaced it with a new one"
        );
        let old = std::mem::replace(&mut slot.producer, fresh.clone());
        slot.generation += 1;
        let generation = slot.generation;
        drop(slot);
        tokio::task::spawn_blocking(move || drop(old));
        Ok((fresh, generation))
    }

    /// Hands `event` to `producer`; the future resolves once the broker acknowledged it.
    fn start(
        &self,
        producer: &FutureProducer,
        event: &OutboxEvent,
    ) -> Result<DeliveryFuture, DeliveryError> {
        let topic = self.topic_for(event);
        if let Some(reason) = invalid_topic_reason(topic) {
            return Err(DeliveryError::new(format!(
                "event {} not sent: topic {topic:?} is not a valid Kafka topic name ({reason}); \
                 route it to a valid topic, e.g. with KafkaDelivery::with_topic or a TopicRouter",
                event.id
            )));
        }
        let message_headers = event.message_headers();
        let mut headers = OwnedHeaders::new_with_capacity(message_headers.len());
        for (name, value) in &message_headers {
            headers = headers.insert(Header {
                key: name,
                value: Some(value.as_bytes()),
            });
        }
        let body = event.body();
        let mut record = FutureRecord::<str, [u8]>::to(topic)
            .payload(&body)
            .headers(headers);
        if let Some(key) = event.message_key() {
            record = record.key(key);
        }
        producer.send_result(record).map_err(|(error, _)| {
            let kind = error_kind(&error);
            DeliveryError::with_source(
                format!(
                    "event {} could not be queued for Kafka topic {topic:?} on {}",
                    event.id, self.servers
                ),
                error,
            )
            .with_kind(kind)
        })
    }

    /// Starts every send, then awaits them all until `timeout` from now.
    async fn send(
        &self,
        events: &[OutboxEvent],
        timeout: Duration,
    ) -> Vec<Result<(), DeliveryError>> {
        let deadline = Instant::now() + timeout;
        let (producer, generation) = match self.producer() {
            Ok(current) => current,
            Err(error) => {
                let text = error.chain();
                let kind = error.kind();
                return events
                    .iter()
                    .map(|_| Err(DeliveryError::new(text.clone()).with_kind(kind)))
                    .collect();
            }
        };
        let started: Vec<_> = events
            .iter()
            .map(|event| self.start(&producer, event))
            .collect();
        // The acknowledgements do not need the handle; a replaced producer is then closed by the
        // blocking task alone.
        drop(producer);
        let broken: Mutex<Option<RDKafkaErrorCode>> = Mutex::new(None);
        let waits = started
            .into_iter()
            .zip(events)
            .map(|(started, event)| async {
                let future = started?;
                let topic = self.topic_for(event);
                match tokio::time::timeout_at(deadline, future).await {
                    Ok(Ok(Ok(_delivered))) => Ok(()),
                    Ok(Ok(Err((error, _message)))) => {
                        if let Some(code) = error.rdkafka_error_code()
                            && breaks_the_producer(code)
                        {
                            *broken.lock().unwrap_or_else(PoisonError::into_inner) = Some(code);
                        }
                        let kind = error_kind(&error);
                        Err(DeliveryError::with_source(
                            format!(
                                "Kafka did not take event {} on topic {topic:?} ({})",
                                event.id, self.servers
                            ),
                            error,
                        )
                        .with_kind(kind))
                    }
                    Ok(Err(_canceled)) => Err(DeliveryError::outage(format!(
                        "the Kafka producer was closed before event {} on topic {topic:?} was \
                         acknowledged",
                        event.id
                    ))),
                    Err(_) => Err(DeliveryError::outage(format!(
                        "event {} on Kafka topic {topic:?} ({}) was not acknowledged within \
                         {:.3} s",
                        event.id,
                        self.servers,
                        timeout.as_secs_f64()
                    ))),
                }
            });
        let results = futures::future::join_all(waits).await;
        let broken = *broken.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(code) = broken {
            // The events of this send fail; the relay's retry goes out on the new producer.
            if let Err(error) = self.replace(generation, &format!("{code:?} on a send")) {
                tracing::warn!(error = %error.chain(), "keeping the broken Kafka producer");
            }
        }
        results
    }
}

/// The producer in use and how many times it was replaced.
struct Slot {
    producer: FutureProducer,
    generation: u64,
}

impl Slot {
    fn shared(producer: FutureProducer) -> Arc<Mutex<Slot>> {
        Arc::new(Mutex::new(Slot {
            producer,
            generation: 0,
        }))
    }
}

/// Whether a message failing with `code` means the idempotent producer lost its producer id,
/// epoch or sequence with the broker and refuses every later message: only a new producer helps.
/// How a Kafka error counts for the relay: a record too large or invalid is permanent (the
/// event is dead-lettered at once); an unknown topic or partition, a topic the producer may not
/// write, an invalid argument are the event's own fault; anything else (brokers down or
/// unreachable, timeouts, a full queue, leaders moving) is an outage.
pub fn error_kind(error: &rdkafka::error::KafkaError) -> DeliveryErrorKind {
    match error.rdkafka_error_code() {
        Some(
            RDKafkaErrorCode::MessageSizeTooLarge
            | RDKafkaErrorCode::InvalidMessageSize
            | RDKafkaErrorCode::InvalidRecord,
        ) => DeliveryErrorKind::Permanent,
        Some(
            RDKafkaErrorCode::UnknownTopicOrPartition
            | RDKafkaErrorCode::UnknownTopic
            | RDKafkaErrorCode::TopicAuthorizationFailed
            | RDKafkaErrorCode::InvalidArgument,
        ) => DeliveryErrorKind::Event,
        _ => DeliveryErrorKind::Outage,
    }
}

fn breaks_the_producer(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::ProducerFenced
            | RDKafkaErrorCode::InvalidProducerEpoch
            | RDKafkaErrorCode::OutOfOrderSequenceNumber
            | RDKafkaErrorCode::UnknownProducerId
            | RDKafkaErrorCode::InvalidProducerIdMapping
            | RDKafkaErrorCode::Fatal
    )
}

/// The producer settings of [`KafkaDelivery::new`] (and of
/// [`KafkaDeliveryConfig`](crate::KafkaDeliveryConfig), whose properties come after them):
/// `bootstrap.servers`, `acks=all`, `enable.idempotence=true`, `partitioner=murmur2_random`.
pub(crate) fn producer_defaults(bootstrap_servers: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap_servers.trim())
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("partitioner", "murmur2_random");
    config
}

/// Sets the timeouts on `config` and makes the producer.
fn create_producer(config: &mut ClientConfig, timeout: Duration) -> Result<FutureProducer> {
    let ms = millis("kafka delivery timeout", timeout)?;
    config
        .set("message.timeout.ms", &ms)
        .set("request.timeout.ms", &ms);
    config.create::<FutureProducer>().map_err(|e| {
        Error::configuration(format!(
            "kafka delivery: librdkafka refused the producer settings (bootstrap servers {:?}, \
             message.timeout.ms {ms}): {e}",
            config.get("bootstrap.servers").unwrap_or_default()
        ))
    })
}

/// The whole batch at once, behind the shared batching adaptor.
#[async_trait]
impl BatchDelivery for KafkaDelivery {
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
impl Delivery for KafkaDelivery {
    /// Produces one event and waits for its acknowledgement, within the timeout
    /// ([`DEFAULT_TIMEOUT`] unless set).
    async fn deliver(&self, event: &OutboxEvent) -> Result<(), DeliveryError> {
        self.deliver_one(event).await
    }

    /// Hands the whole batch to the producer, then waits for every acknowledgement, within the
    /// shorter of `timeout` and this delivery's timeout; one result per event, in order.
    /// `concurrency` does not apply: the whole batch is in flight at once.
    async fn deliver_batch(
        &self,
        events: &[OutboxEvent],
        _concurrency: usize,
        timeout: Duration,
    ) -> Vec<Result<(), DeliveryError>> {
        self.deliver_all(events, timeout).await
    }

    /// `true`: a key's run goes out in batch order to one partition (the key's murmur2
    /// partition) through the idempotent producer (`enable.idempotence`, `acks=all`), which keeps
    /// the order of a partition's messages across its own retries. When an event fails, later
    /// events of its key may already be written; the relay resends them after the failed one.
    fn keeps_key_order(&self) -> bool {
        true
    }

    /// Waits (at most the timeout) for messages still in flight.
    async fn close(&self) -> Result<(), DeliveryError> {
        let producer = self
            .producer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .producer
            .clone();
        let timeout = self.timeout;
        tokio::task::spawn_blocking(move || producer.flush(timeout))
            .await
            .map_err(|e| DeliveryError::with_source("flushing the Kafka producer failed", e))?
            .map_err(|e| DeliveryError::with_source("flushing the Kafka producer failed", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(topic: &str) -> OutboxEvent {
        OutboxEvent {
            sequence: 1,
            ..OutboxEvent::new(topic.to_owned(), serde_json::json!({"n": 1}))
        }
    }

    #[test]
    fn config_errors_name_the_value() {
        let e = KafkaDelivery::new("").unwrap_err();
        assert!(matches!(e, Error::Configuration(_)), "{e}");
        assert!(e.to_string().contains("\"\""), "{e}");
        let d = KafkaDelivery::new("127.0.0.1:9").unwrap();
        let e = d.clone().with_topic("bad topic").unwrap_err();
        assert!(matches!(e, Error::Configuration(_)), "{e}");
        assert!(e.to_string().contains("\"bad topic\""), "{e}");
        let e = d.with_timeout(Duration::ZERO).unwrap_err();
        assert!(matches!(e, Error::Configuration(_)), "{e}");
    }

    #[test]
    fn topic_is_the_configured_one_or_the_events() {
        let d = KafkaDelivery::new("127.0.0.1:9").unwrap();
        let e = event("orders.created");
        assert_eq!(d.topic_for(&e), "orders.created");
        let d = d.with_topic("events").unwrap();
        assert_eq!(d.topic_for(&e), "events");
    }

    #[test]
    fn producer_state_errors_call_for_a_new_producer() {
        for code in [
            RDKafkaErrorCode::ProducerFenced,
            RDKafkaErrorCode::InvalidProducerEpoch,
            RDKafkaErrorCode::OutOfOrderSequenceNumber,
            RDKafkaErrorCode::UnknownProducerId,
        ] {
            assert!(breaks_the_producer(code), "{code:?}");
        }
        for code in [
            RDKafkaErrorCode::MessageTimedOut,
            RDKafkaErrorCode::UnknownTopicOrPartition,
            RDKafkaErrorCode::MessageSizeTooLarge,
        ] {
            assert!(!breaks_the_producer(code), "{code:?}");
        }
    }

    #[tokio::test]
    async fn an_invalid_event_topic_fails_without_sending() {
        let d = KafkaDelivery::new("127.0.0.1:9").unwrap();
        let e = event("orders/created");
        let error = d.deliver(&e).await.unwrap_err().chain();
        assert!(error.contains("\"orders/created\""), "{error}");
        assert!(error.contains("not a valid Kafka topic name"), "{error}");
    }
}
