//! `KafkaWakeup`: wake-up signals through a Kafka signal topic.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use hare_outbox_core::wakeup::listener::{self, Connecting, Listener, Source};
use hare_outbox_core::{BoxError, Error, Result, Wakeup, WakeupSubscription};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

use crate::{check_bootstrap, invalid_topic_reason, millis};

/// The signal topic unless [`KafkaWakeup::with_topic`] names another: `hare_outbox`.
pub const DEFAULT_TOPIC: &str = "hare_outbox";

/// How long the broker keeps signals in a signal topic this wake-up creates (`retention.ms`):
/// one minute. Subscribers read from the end, so old signals are never read.
pub const SIGNAL_RETENTION: Duration = Duration::from_secs(60);

/// How long a signal may take, creating the topic included.
const SIGNAL_TIMEOUT: Duration = Duration::from_secs(5);

/// How long one admin or metadata request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

/// Wakes relays through a Kafka signal topic.
///
/// Pass the same object (or a clone: clones share everything) to
/// [`Outbox::with_wakeup`](hare_outbox_core::Outbox::with_wakeup): every
/// [`OutboxTransaction`](hare_outbox_core::OutboxTransaction) that wrote events then produces,
/// after its commit, one message to partition 0 of the signal topic — a JSON array of the topics
/// it wrote, e.g. `["orders.created","orders.paid"]` — and every relay of that outbox, in this
/// process or any other connected to the same cluster, polls at once if one of the topics is its
/// own.
///
/// **The signal topic** ([`DEFAULT_TOPIC`] unless set) is created on first use, by a signal or a
/// subscription, with one partition, the broker's default replication factor (or
/// [`with_replication_factor`](Self::with_replication_factor)) and `retention.ms` of one minute
/// ([`SIGNAL_RETENTION`]), unless it exists; an existing topic is used as it is. With
/// [`with_create_topic(false)`](Self::with_create_topic) it is never created: it must exist.
///
/// **Signals.** [`Wakeup::signal`] produces through a producer made on first use and waits for
/// the acknowledgement (at most 5 s). Its errors are returned (the transaction logs them and goes
/// on: the events are committed and polling delivers them).
///
/// **Subscriptions.** One listener task per object, whatever the number of subscribers, reading
/// partition 0 from its end: outside any consumer group (the partition is assigned, never
/// subscribed; the `group.id` librdkafka requires is a fresh random one, never joined, and nothing
/// is committed), so relays never wait for a group rebalance and every relay sees
/// every signal. The first [`Wakeup::subscribe`] looks up the partition's end offset and starts
/// reading there (it returns once that is done, or the first attempt failed), so a signal sent
/// after it returns is received. Later subscribers share the task through a broadcast channel, and
/// the task stops when the last subscriber is gone. A consumer error (e.g. the broker went away)
/// ends the subscription; it is made again after a pause of 100 ms, doubled after each failed
/// attempt up to 60 s, with jitter. After five failed attempts in a row the task logs an ERROR —
/// relays poll at their poll interval meanwhile — and goes on retrying; it never gives up while
/// anyone subscribes. Signals sent while no subscription was live are not read; each restored
/// subscription sends an empty signal instead, so every relay polls once.
/// The consumer asks the broker to answer a fetch after at most 10 ms (`fetch.wait.max.ms`), so
/// a signal reaches relays within a few milliseconds (p50 4 ms on tansu, against 20–28 ms with
/// 100 ms; BENCHMARKS.md), at the price of up to 100 fetch requests per second per listening
/// process while idle.
///
/// A lost signal is harmless: relays poll anyway. A message on the topic that is not a JSON array
/// of strings is logged and ignored.
#[derive(Clone)]
pub struct KafkaWakeup {
    inner: Arc<Inner>,
}

struct Inner {
    shared: Arc<Shared>,
    producer: Mutex<Option<FutureProducer>>,
    listener: Listener,
}

/// What signals and the listener task both use.
struct Shared {
    config: ClientConfig,
    servers: String,
    topic: String,
    /// Whether the signal topic is created when missing ([`KafkaWakeup::with_create_topic`]).
    create_topic: bool,
    /// The replication factor of a created signal topic; `None` = the broker's default.
    replication_factor: Option<i32>,
    /// Set once the signal topic is known to exist; cleared when using it failed, so that a
    /// broker that lost it (e.g. restarted with in-memory storage) gets it created again.
    topic_ready: AtomicBool,
}

impl std::fmt::Debug for KafkaWakeup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaWakeup")
            .field("servers", &self.inner.shared.servers)
            .field("topic", &self.inner.shared.topic)
            .finish()
    }
}

impl KafkaWakeup {
    /// A wake-up through the Kafka cluster reached through `bootstrap_servers` (`host:port`,
    /// several separated by commas), on the signal topic [`DEFAULT_TOPIC`] (`hare_outbox`).
    /// Nothing is connected until the first signal or subscription.
    ///
    /// # Errors
    /// [`Error::Configuration`] naming the value when `bootstrap_servers` is not a list of
    /// `host:port`.
    pub fn new(bootstrap_servers: &str) -> Result<Self> {
        check_bootstrap("kafka wake-up", bootstrap_servers)?;
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", bootstrap_servers.trim());
        Self::from_config(config)
    }

    /// Like [`new`](Self::new) with client settings of your own (TLS, SASL, …), used for the
    /// admin client, the producer and the consumers alike (as `KafkaWakeup(config=...)`).
    /// It must set `bootstrap.servers`; a `group.id` in it is replaced.
    ///
    /// # Errors
    /// [`Error::Configuration`] when `bootstrap.servers` is missing or librdkafka refuses the
    /// settings.
    pub fn from_config(config: ClientConfig) -> Result<Self> {
        let servers = config
            .get("bootstrap.servers")
            .unwrap_or_default()
            .to_owned();
        check_bootstrap("kafka wake-up", &servers)?;
        // Checks the settings now rather than on the first signal.
        config
            .create::<AdminClient<DefaultClientContext>>()
            .map_err(|e| {
                Error::configuration(format!(
                    "kafka wake-up: librdkafka refused the client settings (bootstrap servers \
                     {servers:?}): {e}"
                ))
            })?;
        Ok(Self::build(Shared {
            config,
            servers,
            topic: DEFAULT_TOPIC.to_owned(),
            create_topic: true,
            replication_factor: None,
            topic_ready: AtomicBool::new(false),
        }))
    }

    fn build(shared: Shared) -> Self {
        KafkaWakeup {
            inner: Arc::new(Inner {
                shared: Arc::new(shared),
                producer: Mutex::new(None),
                listener: Listener::default(),
            }),
        }
    }

    /// Signals through the topic `name` instead of [`DEFAULT_TOPIC`]; use
    /// one signal topic per outbox table when several share a cluster, so their relays do not
    /// wake each other.
    ///
    /// # Errors
    /// [`Error::Configuration`] naming the value when `name` is not a valid Kafka topic name.
    pub fn with_topic(self, name: impl Into<String>) -> Result<Self> {
        let name = name.into();
        if let Some(reason) = invalid_topic_reason(&name) {
            return Err(Error::configuration(format!(
                "kafka wake-up topic {name:?} is not a valid Kafka topic name: {reason}"
            )));
        }
        Ok(self.rebuilt(|shared| shared.topic = name))
    }

    /// Whether the signal topic is created when it is missing (default `true`). `false` for a
    /// cluster whose ACLs let services write and read topics but not create them: the topic must
    /// then exist (created by its operators, one partition is enough); a signal to a missing
    /// topic fails with the broker's error, logged by the transaction, and relays poll meanwhile.
    pub fn with_create_topic(self, create: bool) -> Self {
        self.rebuilt(|shared| shared.create_topic = create)
    }

    /// The replication factor of the signal topic when this wake-up creates it (seed 001:
    /// `replication_factor=`). Unset by default: the broker's `default.replication.factor`.
    ///
    /// # Errors
    /// [`Error::Configuration`] naming the value when it is not 1 to 32767 (Kafka keeps it in 16
    /// bits).
    pub fn with_replication_factor(self, factor: i32) -> Result<Self> {
        if !(1..=i32::from(i16::MAX)).contains(&factor) {
            return Err(Error::configuration(format!(
                "kafka wake-up replication factor {factor} is not allowed; use 1 to {}, or leave it unset for the broker's default",
                i16::MAX
            )));
        }
        Ok(self.rebuilt(|shared| shared.replication_factor = Some(factor)))
    }

    /// Whether a missing signal topic is created ([`with_create_topic`](Self::with_create_topic)).
    pub fn creates_topic(&self) -> bool {
        self.inner.shared.create_topic
    }

    /// The replication factor of a created signal topic; `None` = the broker's default.
    pub fn replication_factor(&self) -> Option<i32> {
        self.inner.shared.replication_factor
    }

    /// A fresh object (no producer, no listener yet) with the settings changed by `change`.
    fn rebuilt(self, change: impl FnOnce(&mut Shared)) -> Self {
        let old = &self.inner.shared;
        let mut shared = Shared {
            config: old.config.clone(),
            servers: old.servers.clone(),
            topic: old.topic.clone(),
            create_topic: old.create_topic,
            replication_factor: old.replication_factor,
            topic_ready: AtomicBool::new(false),
        };
        change(&mut shared);
        Self::build(shared)
    }

    /// The signal topic.
    pub fn topic(&self) -> &str {
        &self.inner.shared.topic
    }

    fn producer(&self) -> Result<FutureProducer> {
        let mut slot = self
            .inner
            .producer
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(producer) = slot.as_ref() {
            return Ok(producer.clone());
        }
        let ms = millis("kafka wake-up signal timeout", SIGNAL_TIMEOUT)?;
        let producer = self
            .inner
            .shared
            .config
            .clone()
            .set("message.timeout.ms", &ms)
            .set("linger.ms", "0")
            .create::<FutureProducer>()
            .map_err(Error::database)?;
        *slot = Some(producer.clone());
        Ok(producer)
    }
}

impl Shared {
    /// Creates the signal topic unless it exists (or is known to exist since it last worked).
    async fn ensure_topic(&self) -> std::result::Result<(), BoxError> {
        if !self.create_topic || self.topic_ready.load(Ordering::Acquire) {
            return Ok(());
        }
        let admin: AdminClient<DefaultClientContext> = self.config.create()?;
        let retention = SIGNAL_RETENTION.as_millis().to_string();
        // -1: the broker's default replication factor (KIP-464).
        let replication = self.replication_factor.unwrap_or(-1);
        let topic = NewTopic::new(&self.topic, 1, TopicReplication::Fixed(replication))
            .set("retention.ms", &retention);
        let options = AdminOptions::new()
            .request_timeout(Some(REQUEST_TIMEOUT))
            .operation_timeout(Some(REQUEST_TIMEOUT));
        let results = admin.create_topics([&topic], &options).await?;
        for result in results {
            match result {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((name, code)) => {
                    return Err(BoxError::from(format!(
                        "creating the signal topic {name:?} on {} failed: {code}",
                        self.servers
                    )));
                }
            }
        }
        self.topic_ready.store(true, Ordering::Release);
        Ok(())
    }

    /// After a failure: check (and create) the topic again next time.
    fn topic_in_doubt(&self) {
        self.topic_ready.store(false, Ordering::Release);
    }
}

/// The subscribing side, run by the shared listener task.
struct KafkaSource {
    shared: Arc<Shared>,
}

impl Source for KafkaSource {
    fn connect(&self) -> Connecting<'_> {
        Box::pin(async move {
            let subscribed = self.subscribe().await;
            if subscribed.is_err() {
                self.shared.topic_in_doubt();
            }
            subscribed
        })
    }

    fn describe(&self) -> String {
        format!(
            "kafka {} topic {:?}",
            self.shared.servers, self.shared.topic
        )
    }

    fn reconnects_itself(&self) -> bool {
        false
    }
}

impl KafkaSource {
    /// One attempt: a consumer assigned partition 0 of the signal topic at its current end.
    async fn subscribe(&self) -> std::result::Result<listener::Messages, BoxError> {
        let shared = &self.shared;
        shared.ensure_topic().await?;
        // librdkafka needs a group.id to assign partitions; a fresh one per connection, never
        // joined (no `subscribe`) and never committed to.
        let consumer: StreamConsumer = shared
            .config
            .clone()
            .set("group.id", private_group_id())
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "false")
            .set("fetch.wait.max.ms", "10")
            .create()?;
        let consumer = Arc::new(consumer);
        // The end offset now: every signal produced after this is read.
        let (_low, high) = {
            let consumer = consumer.clone();
            let topic = shared.topic.clone();
            tokio::task::spawn_blocking(move || {
                consumer.fetch_watermarks(&topic, 0, REQUEST_TIMEOUT)
            })
            .await??
        };
        let mut assignment = TopicPartitionList::new();
        assignment.add_partition_offset(&shared.topic, 0, Offset::Offset(high))?;
        consumer.assign(&assignment)?;
        let shared = shared.clone();
        Ok(futures::stream::unfold(consumer, move |consumer| {
            let shared = shared.clone();
            async move {
                let payload = match consumer.recv().await {
                    Ok(message) => message.payload().unwrap_or_default().to_vec(),
                    Err(error) => {
                        tracing::warn!(
                            wakeup = %format!("kafka {} topic {:?}", shared.servers, shared.topic),
                            error = &error as &dyn std::error::Error,
                            "reading the wake-up signal topic failed"
                        );
                        // The broker may have lost the topic: check it on the next attempt.
                        shared.topic_in_doubt();
                        return None;
                    }
                };
                Some((payload, consumer))
            }
        })
        .boxed())
    }
}

/// `hare_outbox_wakeup_<pid>_<random>`: a group id no other consumer uses.
fn private_group_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    format!("hare_outbox_wakeup_{}_{random:016x}", std::process::id())
}

#[async_trait]
impl Wakeup for KafkaWakeup {
    /// Produces one message naming `topics` (a JSON array) to partition 0 of the signal topic,
    /// creating the topic first if it is missing.
    ///
    /// # Errors
    /// [`Error::Database`] with the Kafka error when creating the topic or producing failed, or
    /// took longer than 5 s.
    async fn signal(&self, topics: &[String]) -> Result<()> {
        let shared = &self.inner.shared;
        let producer = self.producer()?;
        let payload = listener::encode_topics(topics);
        let send = async {
            shared.ensure_topic().await?;
            let record = FutureRecord::<(), [u8]>::to(&shared.topic)
                .partition(0)
                .payload(&payload);
            producer
                .send(record, SIGNAL_TIMEOUT)
                .await
                .map(|_delivered| ())
                .map_err(|(error, _)| BoxError::from(error))
        };
        let sent = tokio::time::timeout(SIGNAL_TIMEOUT, send).await;
        if !matches!(sent, Ok(Ok(()))) {
            shared.topic_in_doubt();
        }
        match sent {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(Error::database(error)),
            Err(_) => Err(Error::database(format!(
                "producing a wake-up signal to kafka {} topic {:?} took longer than {} s",
                shared.servers,
                shared.topic,
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
        let source: Arc<dyn Source> = Arc::new(KafkaSource {
            shared: self.inner.shared.clone(),
        });
        Ok(self
            .inner
            .listener
            .subscribe(&source, listener::CONNECT_TIMEOUT)
            .await)
    }

    /// Stops the listener task (its subscriptions see the wake-up closed) and drops the
    /// producer. A later `signal` or `subscribe` connects again.
    async fn close(&self) -> Result<()> {
        self.inner.listener.close();
        self.inner
            .producer
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
    fn topic_defaults_and_can_be_set_but_must_be_valid() {
        let w = KafkaWakeup::new("127.0.0.1:9092").unwrap();
        assert_eq!(w.topic(), "hare_outbox");
        let w = w.with_topic("shop_outbox").unwrap();
        assert_eq!(w.topic(), "shop_outbox");
        let e = w.with_topic("shop outbox").unwrap_err();
        assert!(matches!(e, Error::Configuration(_)), "{e}");
        assert!(e.to_string().contains("\"shop outbox\""), "{e}");
        let e = KafkaWakeup::new(" ").unwrap_err();
        assert!(matches!(e, Error::Configuration(_)), "{e}");
    }

    #[test]
    fn bad_settings_are_configuration_errors() {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", "127.0.0.1:9092")
            .set("no.such.setting", "1");
        let e = KafkaWakeup::from_config(config).unwrap_err();
        assert!(matches!(e, Error::Configuration(_)), "{e}");
        assert!(e.to_string().contains("no.such.setting"), "{e}");
    }
}
