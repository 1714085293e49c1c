//! `[delivery]`, `[deliveries.NAME]`, `[[route]]` and `default_delivery`: where the relay sends
//! events.
//!
//! One delivery: a `[delivery]` section. Several: named `[deliveries.NAME]` sections (same keys
//! as `[delivery]`), `[[route]]` entries sending topics to them, and a default — the `[delivery]`
//! section or `default_delivery = "NAME"`, not both — built into a [`TopicRouter`]: the route
//! naming the topic exactly first, else the first glob route that matches it in file order, else
//! the default; an event no route takes fails (retried, then dead-lettered, never published).
//!
//! Secrets never come from the file: a URL that may carry a password is read from `url_env` (an
//! environment variable) or `url_file` (a file), and a `url` written in the file with a password
//! in it is refused; webhook secrets, MQTT passwords and secret Kafka properties likewise.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use async_trait::async_trait;
use hare_outbox::{
    BreakerConfig, Delivery, DeliveryError, Destination, JsonLinesDelivery, OutboxEvent,
    TopicRouter,
};
use serde::Deserialize;

use crate::config::{non_empty, seconds};
use crate::error::{redact_url, usage};

/// Overrides the webhook URL of the config file.
pub const ENV_WEBHOOK_URL: &str = "HARE_OUTBOX_WEBHOOK_URL";
/// The environment variable read for the webhook secret when `secret_env` is not set.
pub const ENV_WEBHOOK_SECRET: &str = "HARE_OUTBOX_WEBHOOK_SECRET";
/// Overrides the URL of the `[delivery]` section whatever its kind (the bootstrap servers for
/// `kafka`); without a `[delivery]` section its scheme picks the kind.
pub const ENV_DELIVERY_URL: &str = "HARE_OUTBOX_DELIVERY_URL";

/// `[delivery]` and each `[deliveries.NAME]`: every key of every kind, checked against the kind.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeliverySection {
    /// `stdout`, `webhook`, `kafka`, `rabbitmq`, `redis`, `nats`, `mqtt` or `taskiq`.
    pub kind: Option<DeliveryKind>,
    /// Webhook, RabbitMQ, Redis, NATS, MQTT: the URL, written in the file (no password allowed).
    pub url: Option<String>,
    /// The environment variable holding the URL.
    pub url_env: Option<String>,
    /// A file holding the URL (relative to the config file).
    pub url_file: Option<PathBuf>,
    /// Timeout of one delivery call, in seconds.
    pub timeout_seconds: Option<f64>,
    /// Webhook: extra headers sent with every request.
    pub headers: Option<BTreeMap<String, String>>,
    /// Webhook: `true` shows the URL's path in logs, `last_error`, result records and the
    /// dashboard (the userinfo password and query values stay hidden); by default only the
    /// scheme, host and port are shown.
    pub url_public: Option<bool>,
    /// Webhook: the header carrying the HMAC-SHA256 signature.
    pub signature_header: Option<String>,
    /// Webhook: the environment variable holding the signing secret.
    pub secret_env: Option<String>,
    /// Webhook: a file holding the signing secret (relative to the config file).
    pub secret_file: Option<PathBuf>,
    /// Refused with an explanation: secrets do not belong in the config file.
    pub secret: Option<toml::Value>,
    /// Kafka: `host:port[,host:port…]`.
    pub bootstrap_servers: Option<String>,
    /// Kafka: the topic every event goes to instead of its own topic.
    pub topic: Option<String>,
    /// Kafka: extra librdkafka producer properties.
    pub properties: Option<BTreeMap<String, toml::Value>>,
    /// Kafka: librdkafka properties read from environment variables (property → variable).
    pub properties_env: Option<BTreeMap<String, String>>,
    /// RabbitMQ: the exchange (must exist); default the default exchange.
    pub exchange: Option<String>,
    /// RabbitMQ: the routing key instead of the topic.
    pub routing_key: Option<String>,
    /// RabbitMQ: the connection name shown by the broker.
    pub connection_name: Option<String>,
    /// Redis: the stream every event goes to instead of its topic; NATS: the stream made sure of.
    pub stream: Option<String>,
    /// Redis: approximate most entries kept per stream.
    pub max_length: Option<i64>,
    /// NATS: what the subject starts with, before the topic.
    pub subject_prefix: Option<String>,
    /// NATS: the subjects of `stream` when it has to be created.
    pub stream_subjects: Option<Vec<String>>,
    /// MQTT: the broker host (instead of `url`).
    pub host: Option<String>,
    /// MQTT: the broker port with `host`.
    pub port: Option<i64>,
    /// MQTT: the client id with `host`.
    pub client_id: Option<String>,
    /// MQTT: the user name with `host`.
    pub username: Option<String>,
    /// MQTT: the environment variable holding the password.
    pub password_env: Option<String>,
    /// MQTT: a file holding the password (relative to the config file).
    pub password_file: Option<PathBuf>,
    /// Refused with an explanation: passwords do not belong in the config file.
    pub password: Option<toml::Value>,
    /// MQTT: the topic levels put before the mapped event topic.
    pub topic_prefix: Option<String>,
    /// taskiq: the queue the worker reads (default `taskiq`; a task's `queue_name` label wins).
    pub queue: Option<String>,
    /// Every kind: this delivery's circuit breaker on or off, instead of `[relay] breaker`.
    pub breaker: Option<bool>,
    /// Every kind: consecutive outage failures that open it, instead of `[relay]`'s.
    pub breaker_failure_threshold: Option<i64>,
    /// Every kind: the first wait before a probe, in seconds, instead of `[relay]`'s.
    pub breaker_probe_interval_seconds: Option<f64>,
    /// Every kind: the longest wait between probes, in seconds, instead of `[relay]`'s.
    pub breaker_probe_interval_max_seconds: Option<f64>,
    /// Every kind: at most this many sends per second (fractions allowed); default no limit.
    pub max_per_second: Option<f64>,
}

/// The keys every kind of delivery section takes: its circuit breaker and rate limit.
const DESTINATION_KEYS: [&str; 5] = [
    "breaker",
    "breaker_failure_threshold",
    "breaker_probe_interval_seconds",
    "breaker_probe_interval_max_seconds",
    "max_per_second",
];

/// The circuit breaker and rate limit one delivery section sets; what it leaves unset comes
/// from `[relay]` (the breaker) or is off (the rate limit).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DestinationOptions {
    /// `breaker`.
    pub enabled: Option<bool>,
    /// `breaker_failure_threshold`.
    pub failure_threshold: Option<u32>,
    /// `breaker_probe_interval_seconds`.
    pub probe_interval: Option<Duration>,
    /// `breaker_probe_interval_max_seconds`.
    pub probe_interval_max: Option<Duration>,
    /// `max_per_second`.
    pub max_per_second: Option<f64>,
}

impl DestinationOptions {
    /// The section's options, checked one by one.
    ///
    /// # Errors
    /// A usage error naming the key and what is allowed.
    fn of(section: &DeliverySection) -> anyhow::Result<DestinationOptions> {
        let failure_threshold = section
            .breaker_failure_threshold
            .map(|v| {
                u32::try_from(v)
                    .ok()
                    .filter(|v| (1..=hare_outbox::relay::MAX_FAILURE_THRESHOLD).contains(v))
                    .ok_or_else(|| {
                        usage(format!(
                            "breaker_failure_threshold = {v} is out of range; allowed 1 to {}",
                            hare_outbox::relay::MAX_FAILURE_THRESHOLD
                        ))
                    })
            })
            .transpose()?;
        let probe = |key: &str, value: Option<f64>| -> anyhow::Result<Option<Duration>> {
            value
                .map(|v| {
                    let d = seconds(key, v, false)?;
                    if d < hare_outbox::relay::MIN_PROBE_INTERVAL {
                        return Err(usage(format!(
                            "{key} = {v} is out of range; allowed {} or more (seconds)",
                            hare_outbox::relay::MIN_PROBE_INTERVAL.as_secs_f64()
                        )));
                    }
                    Ok(d)
                })
                .transpose()
        };
        let max_per_second = section
            .max_per_second
            .map(|v| {
                hare_outbox::relay::check_max_per_second(v)
                    .map(|()| v)
                    .map_err(|_| {
                        usage(format!(
                            "max_per_second = {v} is not allowed; use a number of sends per second above 0 and at most {} (0.5 = one send every 2 s)",
                            hare_outbox::relay::MAX_PER_SECOND
                        ))
                    })
            })
            .transpose()?;
        Ok(DestinationOptions {
            enabled: section.breaker,
            failure_threshold,
            probe_interval: probe(
                "breaker_probe_interval_seconds",
                section.breaker_probe_interval_seconds,
            )?,
            probe_interval_max: probe(
                "breaker_probe_interval_max_seconds",
                section.breaker_probe_interval_max_seconds,
            )?,
            max_per_second,
        })
    }

    /// The breaker of this section: `base` (the relay's) with what the section sets; `None` when
    /// it sets nothing of the breaker.
    pub fn breaker(&self, base: &BreakerConfig) -> Option<BreakerConfig> {
        if self.enabled.is_none()
            && self.failure_threshold.is_none()
            && self.probe_interval.is_none()
            && self.probe_interval_max.is_none()
        {
            return None;
        }
        let mut config = base.clone();
        if let Some(enabled) = self.enabled {
            config = config.with_enabled(enabled);
        }
        if let Some(n) = self.failure_threshold {
            config = config.with_failure_threshold(n);
        }
        if let Some(d) = self.probe_interval {
            config = config.with_probe_interval(d);
        }
        if let Some(d) = self.probe_interval_max {
            config = config.with_probe_interval_max(d);
        }
        Some(config)
    }

    /// Checks the section's breaker merged with the relay's.
    ///
    /// # Errors
    /// A usage error naming the keys, e.g. a longest probe interval below the first.
    pub fn check(&self, base: &BreakerConfig) -> anyhow::Result<()> {
        if let Some(config) = self.breaker(base)
            && config.probe_interval_max < config.probe_interval
        {
            return Err(usage(format!(
                "breaker_probe_interval_max_seconds = {} is below breaker_probe_interval_seconds = {} (with what [relay] sets); allowed: at least the first interval",
                config.probe_interval_max.as_secs_f64(),
                config.probe_interval.as_secs_f64()
            )));
        }
        Ok(())
    }

    /// `delivery` as the destination `name` with these options over `base`.
    ///
    /// # Errors
    /// A configuration error the destination refuses (none after [`DestinationOptions::check`]).
    pub fn wrap(
        &self,
        name: &str,
        delivery: Arc<dyn Delivery>,
        base: &BreakerConfig,
    ) -> anyhow::Result<Arc<dyn Delivery>> {
        let mut destination = Destination::new(name, delivery)?;
        if let Some(config) = self.breaker(base) {
            destination = destination.with_breaker(config)?;
        }
        if let Some(rate) = self.max_per_second {
            destination = destination.with_max_per_second(rate)?;
        }
        Ok(Arc::new(destination))
    }
}

/// The kinds of delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryKind {
    /// JSON lines on standard output.
    Stdout,
    /// HTTP POST to a URL.
    Webhook,
    /// Kafka topics.
    Kafka,
    /// A RabbitMQ exchange.
    Rabbitmq,
    /// Redis streams.
    Redis,
    /// NATS JetStream.
    Nats,
    /// An MQTT broker, QoS 1.
    Mqtt,
    /// taskiq task messages on the Redis list or RabbitMQ queue a Python taskiq worker reads.
    Taskiq,
}

impl DeliveryKind {
    /// The name written in the file.
    pub fn name(self) -> &'static str {
        match self {
            DeliveryKind::Stdout => "stdout",
            DeliveryKind::Webhook => "webhook",
            DeliveryKind::Kafka => "kafka",
            DeliveryKind::Rabbitmq => "rabbitmq",
            DeliveryKind::Redis => "redis",
            DeliveryKind::Nats => "nats",
            DeliveryKind::Mqtt => "mqtt",
            DeliveryKind::Taskiq => "taskiq",
        }
    }

    /// The keys a section of this kind may set besides `kind`.
    fn keys(self) -> &'static [&'static str] {
        const URL: [&str; 4] = ["url", "url_env", "url_file", "timeout_seconds"];
        match self {
            DeliveryKind::Stdout => &[],
            DeliveryKind::Webhook => &[
                URL[0],
                URL[1],
                URL[2],
                URL[3],
                "headers",
                "signature_header",
                "secret_env",
                "secret_file",
                "url_public",
            ],
            DeliveryKind::Kafka => &[
                "bootstrap_servers",
                "topic",
                "properties",
                "properties_env",
                "timeout_seconds",
            ],
            DeliveryKind::Rabbitmq => &[
                URL[0],
                URL[1],
                URL[2],
                URL[3],
                "exchange",
                "routing_key",
                "connection_name",
            ],
            DeliveryKind::Redis => &[URL[0], URL[1], URL[2], URL[3], "stream", "max_length"],
            DeliveryKind::Nats => &[
                URL[0],
                URL[1],
                URL[2],
                URL[3],
                "subject_prefix",
                "stream",
                "stream_subjects",
            ],
            DeliveryKind::Mqtt => &[
                URL[0],
                URL[1],
                URL[2],
                URL[3],
                "host",
                "port",
                "client_id",
                "username",
                "password_env",
                "password_file",
                "topic_prefix",
            ],
            DeliveryKind::Taskiq => &[URL[0], URL[1], URL[2], URL[3], "queue", "exchange"],
        }
    }

    /// The kind a URL's scheme stands for, for [`ENV_DELIVERY_URL`] without a `[delivery]`.
    fn from_scheme(url: &str) -> Option<DeliveryKind> {
        let scheme = url.split_once("://")?.0.to_ascii_lowercase();
        Some(match scheme.as_str() {
            "http" | "https" => DeliveryKind::Webhook,
            "amqp" | "amqps" => DeliveryKind::Rabbitmq,
            "redis" | "rediss" => DeliveryKind::Redis,
            "nats" | "tls" => DeliveryKind::Nats,
            "mqtt" | "mqtts" => DeliveryKind::Mqtt,
            _ => return None,
        })
    }
}

impl DeliverySection {
    /// The keys set in this section, `kind` aside, in the order of the struct.
    fn keys_set(&self) -> Vec<&'static str> {
        [
            ("url", self.url.is_some()),
            ("url_env", self.url_env.is_some()),
            ("url_file", self.url_file.is_some()),
            ("timeout_seconds", self.timeout_seconds.is_some()),
            ("headers", self.headers.is_some()),
            ("url_public", self.url_public.is_some()),
            ("signature_header", self.signature_header.is_some()),
            ("secret_env", self.secret_env.is_some()),
            ("secret_file", self.secret_file.is_some()),
            ("bootstrap_servers", self.bootstrap_servers.is_some()),
            ("topic", self.topic.is_some()),
            ("properties", self.properties.is_some()),
            ("properties_env", self.properties_env.is_some()),
            ("exchange", self.exchange.is_some()),
            ("routing_key", self.routing_key.is_some()),
            ("connection_name", self.connection_name.is_some()),
            ("stream", self.stream.is_some()),
            ("max_length", self.max_length.is_some()),
            ("subject_prefix", self.subject_prefix.is_some()),
            ("stream_subjects", self.stream_subjects.is_some()),
            ("host", self.host.is_some()),
            ("port", self.port.is_some()),
            ("client_id", self.client_id.is_some()),
            ("username", self.username.is_some()),
            ("password_env", self.password_env.is_some()),
            ("password_file", self.password_file.is_some()),
            ("topic_prefix", self.topic_prefix.is_some()),
            ("queue", self.queue.is_some()),
            ("breaker", self.breaker.is_some()),
            (
                "breaker_failure_threshold",
                self.breaker_failure_threshold.is_some(),
            ),
            (
                "breaker_probe_interval_seconds",
                self.breaker_probe_interval_seconds.is_some(),
            ),
            (
                "breaker_probe_interval_max_seconds",
                self.breaker_probe_interval_max_seconds.is_some(),
            ),
            ("max_per_second", self.max_per_second.is_some()),
        ]
        .into_iter()
        .filter_map(|(key, set)| set.then_some(key))
        .collect()
    }
}

/// `[[route]]`: the events of `topic` go to the delivery `delivery`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteSection {
    /// An exact topic, or a glob (`*`, `?`, `[…]`) as [`TopicRouter`] reads it.
    pub topic: String,
    /// The name of a `[deliveries.NAME]` section.
    pub delivery: String,
}

/// A URL that may carry a password: shown redacted, never in `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretUrl {
    /// The URL itself.
    pub value: String,
    /// Where it came from (`url`, `$VAR`, `file …`), for the start-up log.
    pub source: String,
}

impl SecretUrl {
    /// The URL with its password replaced by `***`.
    pub fn shown(&self) -> String {
        redact_url(&self.value)
    }
}

impl std::fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?} (from {})", self.shown(), self.source)
    }
}

/// One delivery, resolved.
#[derive(Debug, Clone)]
pub enum DeliverySettings {
    /// JSON lines on standard output.
    Stdout,
    /// HTTP POST to a URL.
    Webhook(WebhookSettings),
    /// Kafka.
    Kafka(KafkaSettings),
    /// RabbitMQ.
    RabbitMq(RabbitMqSettings),
    /// Redis Streams.
    Redis(RedisSettings),
    /// NATS JetStream.
    Nats(NatsSettings),
    /// MQTT.
    Mqtt(MqttSettings),
    /// taskiq.
    Taskiq(TaskiqSettings),
    /// Named deliveries behind a [`TopicRouter`].
    Routed(RouterSettings),
}

/// A webhook delivery, resolved.
#[derive(Clone)]
pub struct WebhookSettings {
    /// The URL.
    pub url: String,
    /// Timeout of one request.
    pub timeout: Option<Duration>,
    /// Extra headers.
    pub headers: Vec<(String, String)>,
    /// The signature header name.
    pub signature_header: Option<String>,
    /// The signing secret, if any.
    pub secret: Option<Vec<u8>>,
    /// Where the secret came from, for the start-up log.
    pub secret_source: Option<String>,
    /// Whether the URL may be shown with its path (`url_public`).
    pub url_public: bool,
}

impl WebhookSettings {
    /// The URL as logs and messages show it: scheme, host and port, or with `url_public` the
    /// path too (password and query values hidden).
    pub fn shown_url(&self) -> String {
        use hare_outbox::redact::{UrlKind, redact_url};
        let kind = if self.url_public {
            UrlKind::PublicEndpoint
        } else {
            UrlKind::Endpoint
        };
        redact_url(&self.url, kind)
    }
}

impl std::fmt::Debug for WebhookSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookSettings")
            .field("url", &self.shown_url())
            .field("timeout", &self.timeout)
            .field(
                "headers",
                &self
                    .headers
                    .iter()
                    .map(|(n, v)| (n.as_str(), hare_outbox::redact::header_value(n, v)))
                    .collect::<Vec<_>>(),
            )
            .field("signature_header", &self.signature_header)
            .field("secret", &self.secret.as_ref().map(|_| "***"))
            .field("secret_source", &self.secret_source)
            .finish()
    }
}

/// A Kafka delivery, resolved.
#[derive(Clone)]
pub struct KafkaSettings {
    /// `host:port[,host:port…]`.
    pub bootstrap_servers: String,
    /// The topic instead of each event's own.
    pub topic: Option<String>,
    /// librdkafka properties, the file's and the environment's, applied after the defaults.
    pub properties: Vec<(String, String)>,
    /// Names of the properties whose value came from the environment (never shown).
    pub secret_properties: Vec<String>,
    /// Timeout of one delivery.
    pub timeout: Option<Duration>,
}

impl std::fmt::Debug for KafkaSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let properties: Vec<(&str, &str)> = self
            .properties
            .iter()
            .map(|(k, v)| {
                let shown = if self.secret_properties.contains(k) {
                    "***"
                } else {
                    v.as_str()
                };
                (k.as_str(), shown)
            })
            .collect();
        f.debug_struct("KafkaSettings")
            .field("bootstrap_servers", &self.bootstrap_servers)
            .field("topic", &self.topic)
            .field("properties", &properties)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// A RabbitMQ delivery, resolved.
#[derive(Debug, Clone)]
pub struct RabbitMqSettings {
    /// `amqp://…`.
    pub url: SecretUrl,
    /// The exchange; `None` for the default exchange.
    pub exchange: Option<String>,
    /// The routing key instead of the topic.
    pub routing_key: Option<String>,
    /// The connection name.
    pub connection_name: Option<String>,
    /// Timeout of one call.
    pub timeout: Option<Duration>,
}

/// A Redis Streams delivery, resolved.
#[derive(Debug, Clone)]
pub struct RedisSettings {
    /// `redis://…`.
    pub url: SecretUrl,
    /// The stream instead of each event's topic.
    pub stream: Option<String>,
    /// Approximate most entries kept per stream.
    pub max_length: Option<usize>,
    /// Timeout of one call.
    pub timeout: Option<Duration>,
}

/// A taskiq delivery, resolved.
#[derive(Debug, Clone)]
pub struct TaskiqSettings {
    /// `redis://…` (a Redis list broker) or `amqp://…` (an AMQP broker).
    pub url: SecretUrl,
    /// The queue instead of `taskiq`.
    pub queue: Option<String>,
    /// AMQP only: the exchange instead of `taskiq`.
    pub exchange: Option<String>,
    /// Timeout of one call.
    pub timeout: Option<Duration>,
}

/// A NATS JetStream delivery, resolved.
#[derive(Debug, Clone)]
pub struct NatsSettings {
    /// `nats://…`.
    pub url: SecretUrl,
    /// What subjects start with.
    pub subject_prefix: Option<String>,
    /// The stream made sure of, with its subjects.
    pub stream: Option<(String, Vec<String>)>,
    /// Timeout of one call.
    pub timeout: Option<Duration>,
}

/// Where an MQTT delivery connects.
#[derive(Debug, Clone)]
pub enum MqttTarget {
    /// `mqtt://…?client_id=…`.
    Url(SecretUrl),
    /// Host, port, client id and credentials given one by one.
    Host {
        /// The broker host.
        host: String,
        /// The broker port.
        port: u16,
        /// The client id.
        client_id: String,
        /// User name and password.
        credentials: Option<MqttCredentials>,
    },
}

/// An MQTT user name and password.
#[derive(Clone)]
pub struct MqttCredentials {
    /// The user name.
    pub username: String,
    /// The password (empty when none was given).
    pub password: String,
}

impl std::fmt::Debug for MqttCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MqttCredentials")
            .field("username", &self.username)
            .field("password", &"***")
            .finish()
    }
}

/// An MQTT delivery, resolved.
#[derive(Debug, Clone)]
pub struct MqttSettings {
    /// Where it connects.
    pub target: MqttTarget,
    /// Topic levels before the mapped event topic.
    pub topic_prefix: Option<String>,
    /// Timeout of one call.
    pub timeout: Option<Duration>,
}

/// Named deliveries, the routes to them and the default, resolved.
#[derive(Debug, Clone)]
pub struct RouterSettings {
    /// `[deliveries.NAME]`, by name.
    pub deliveries: BTreeMap<String, DeliverySettings>,
    /// `[[route]]` in file order: (topic pattern, delivery name).
    pub routes: Vec<(String, String)>,
    /// The default: a named delivery, or the `[delivery]` section (named `[delivery]`).
    pub default: Option<(String, Box<DeliverySettings>)>,
    /// The circuit breaker and rate limit of each delivery, by name (`[delivery]` included).
    pub options: BTreeMap<String, DestinationOptions>,
}

/// The destination name of the `[delivery]` section in logs, metrics and `/healthz`.
pub const MAIN_DESTINATION: &str = "delivery";

/// The deliveries the file describes, resolved: one delivery or a router, and for one delivery
/// its destination name and circuit breaker and rate-limit options.
#[derive(Debug)]
pub struct ResolvedDelivery {
    /// The delivery or the router.
    pub settings: DeliverySettings,
    /// The destination name of a single delivery: `delivery` for `[delivery]`, else the name of
    /// the `[deliveries.NAME]` section that `default_delivery` names.
    pub name: String,
    /// Its circuit breaker and rate limit (a router's deliveries keep theirs in
    /// [`RouterSettings::options`]).
    pub options: DestinationOptions,
}

/// What the file says about deliveries: `[delivery]`, `[deliveries.*]`, `[[route]]`,
/// `default_delivery`.
#[derive(Debug, Default)]
pub struct DeliveryConfig {
    /// `[delivery]`.
    pub delivery: Option<DeliverySection>,
    /// `[deliveries.NAME]`.
    pub deliveries: BTreeMap<String, DeliverySection>,
    /// `[[route]]`.
    pub routes: Vec<RouteSection>,
    /// `default_delivery`.
    pub default_delivery: Option<String>,
}

/// Resolves the deliveries of the file with the environment: one delivery, or a router.
///
/// # Errors
/// A usage error naming the section, the key and what is allowed: an unknown or missing kind, a
/// key of another kind, a missing required key, a password in a URL written in the file, a route
/// to an unknown delivery, `default_delivery` together with `[delivery]`.
pub fn resolve(
    config: DeliveryConfig,
    base_dir: &Path,
    env: &dyn Fn(&str) -> Option<String>,
    warnings: &mut Vec<String>,
) -> anyhow::Result<ResolvedDelivery> {
    let DeliveryConfig {
        delivery,
        deliveries,
        routes,
        default_delivery,
    } = config;
    let routed = !routes.is_empty() || !deliveries.is_empty() || default_delivery.is_some();
    let main_options = delivery
        .as_ref()
        .map(DestinationOptions::of)
        .transpose()
        .context("[delivery]")?
        .unwrap_or_default();
    if !routed {
        let settings = main_section(delivery, base_dir, env, warnings)
            .with_context(|| "[delivery]".to_owned())?;
        return Ok(ResolvedDelivery {
            settings,
            name: MAIN_DESTINATION.to_owned(),
            options: main_options,
        });
    }

    let mut named = BTreeMap::new();
    let mut options = BTreeMap::new();
    for (name, section) in deliveries {
        if name.is_empty() {
            return Err(usage(
                "[deliveries.\"\"]: a delivery name is empty; name it e.g. [deliveries.audit]",
            ));
        }
        let what = format!("[deliveries.{name}]");
        let kind = section.kind.ok_or_else(|| {
            usage(format!(
                "{what}: kind is missing; allowed: {}",
                kinds_allowed()
            ))
        })?;
        options.insert(
            name.clone(),
            DestinationOptions::of(&section).context(what.clone())?,
        );
        let settings =
            section_settings(kind, section, None, base_dir, env, warnings).context(what)?;
        named.insert(name, settings);
    }
    let known = || {
        if named.is_empty() {
            "none is defined; add a [deliveries.NAME] section".to_owned()
        } else {
            format!(
                "defined: {}",
                named
                    .keys()
                    .map(|n| format!("{n:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    };

    let default = match (default_delivery, delivery) {
        (Some(name), Some(_)) => {
            return Err(usage(format!(
                "default_delivery = {name:?} and a [delivery] section are both set; the default \
                 delivery is one of them: remove default_delivery, or the [delivery] section"
            )));
        }
        (Some(name), None) => match named.get(&name) {
            Some(settings) => Some((name, Box::new(settings.clone()))),
            None => {
                return Err(usage(format!(
                    "default_delivery = {name:?} names no [deliveries.{name}] section; {}",
                    known()
                )));
            }
        },
        (None, section) => {
            let has_env = non_empty(env(ENV_WEBHOOK_URL)).is_some()
                || non_empty(env(ENV_DELIVERY_URL)).is_some();
            if section.is_some() || has_env {
                let settings = main_section(section, base_dir, env, warnings)
                    .with_context(|| "[delivery]".to_owned())?;
                options.insert("[delivery]".to_owned(), main_options);
                Some(("[delivery]".to_owned(), Box::new(settings)))
            } else {
                None
            }
        }
    };

    let mut route_list = Vec::with_capacity(routes.len());
    for (i, route) in routes.into_iter().enumerate() {
        let what = format!("[[route]] #{} (topic {:?})", i + 1, route.topic);
        if route.topic.is_empty() {
            return Err(usage(format!(
                "{what}: topic is empty; give a topic or a glob such as \"audit.*\""
            )));
        }
        if !named.contains_key(&route.delivery) {
            return Err(usage(format!(
                "{what}: delivery = {:?} names no [deliveries.{}] section; {}",
                route.delivery,
                route.delivery,
                known()
            )));
        }
        if let Some(j) = route_list
            .iter()
            .position(|(topic, _): &(String, String)| *topic == route.topic)
        {
            return Err(usage(format!(
                "{what}: the topic is already routed by [[route]] #{}; one route per topic",
                j + 1
            )));
        }
        route_list.push((route.topic, route.delivery));
    }
    for name in named.keys() {
        let used = route_list.iter().any(|(_, d)| d == name)
            || default.as_ref().is_some_and(|(d, _)| d == name);
        if !used {
            warnings.push(format!(
                "[deliveries.{name}] is not used: no [[route]] names it and it is not default_delivery"
            ));
        }
    }
    if default.is_none() && !route_list.is_empty() {
        warnings.push(
            "no default delivery: events of topics no [[route]] takes fail and are dead-lettered; \
             set default_delivery or a [delivery] section to catch them"
                .to_owned(),
        );
    }
    if route_list.is_empty() {
        // Only a default: no router needed.
        return match default {
            Some((name, settings)) => Ok(ResolvedDelivery {
                settings: *settings,
                options: options.remove(&name).unwrap_or_default(),
                name: if name == "[delivery]" {
                    MAIN_DESTINATION.to_owned()
                } else {
                    name
                },
            }),
            None => Err(usage(format!(
                "[deliveries.*] are defined but nothing sends events to them; add [[route]] entries (topic = \"…\", delivery = \"NAME\") or default_delivery = \"NAME\"; {}",
                known()
            ))),
        };
    }
    let settings = DeliverySettings::Routed(RouterSettings {
        deliveries: named,
        routes: route_list,
        default,
        options,
    });
    // The router checks the patterns; a bad one is a config error now.
    if let DeliverySettings::Routed(router) = &settings {
        let mut check = TopicRouter::new();
        for (i, (topic, _)) in router.routes.iter().enumerate() {
            check = check
                .route(topic, JsonLinesDelivery::stdout())
                .with_context(|| format!("[[route]] #{} (topic {topic:?})", i + 1))?;
        }
    }
    Ok(ResolvedDelivery {
        settings,
        name: MAIN_DESTINATION.to_owned(),
        options: DestinationOptions::default(),
    })
}

fn kinds_allowed() -> &'static str {
    "kind = \"stdout\", \"webhook\", \"kafka\", \"rabbitmq\", \"redis\", \"nats\" or \"mqtt\""
}

/// The `[delivery]` section with the environment overrides, or the default without one.
fn main_section(
    section: Option<DeliverySection>,
    base_dir: &Path,
    env: &dyn Fn(&str) -> Option<String>,
    warnings: &mut Vec<String>,
) -> anyhow::Result<DeliverySettings> {
    let webhook_url = non_empty(env(ENV_WEBHOOK_URL));
    let delivery_url = non_empty(env(ENV_DELIVERY_URL));
    let section_given = section.is_some();
    let section = section.unwrap_or_default();
    let kind = match section.kind {
        Some(kind) => kind,
        None if section_given => {
            if section.secret.is_some() {
                return Err(secret_refused());
            }
            return Err(usage(format!(
                "kind is missing; allowed: {}",
                kinds_allowed()
            )));
        }
        None => match (&delivery_url, &webhook_url) {
            (Some(url), _) => DeliveryKind::from_scheme(url).ok_or_else(|| {
                usage(format!(
                    "{ENV_DELIVERY_URL} = {:?} does not say which delivery: with no [delivery] \
                     section its scheme picks the kind, one of http(s)://, amqp(s)://, \
                     redis(s)://, nats://, mqtt(s)://; for kafka write a [delivery] section",
                    redact_url(url)
                ))
            })?,
            (None, Some(_)) => DeliveryKind::Webhook,
            (None, None) => DeliveryKind::Stdout,
        },
    };
    let url_override = match kind {
        DeliveryKind::Stdout => {
            for (name, value) in [
                (ENV_DELIVERY_URL, &delivery_url),
                (ENV_WEBHOOK_URL, &webhook_url),
            ] {
                if value.is_some() {
                    warnings.push(format!(
                        "{name} is ignored: the config file chooses kind = \"stdout\""
                    ));
                }
            }
            None
        }
        DeliveryKind::Webhook => delivery_url
            .map(|u| (u, ENV_DELIVERY_URL))
            .or(webhook_url.map(|u| (u, ENV_WEBHOOK_URL))),
        _ => {
            if webhook_url.is_some() {
                warnings.push(format!(
                    "{ENV_WEBHOOK_URL} is ignored: the [delivery] section is kind = \"{}\"",
                    kind.name()
                ));
            }
            delivery_url.map(|u| (u, ENV_DELIVERY_URL))
        }
    };
    section_settings(kind, section, url_override, base_dir, env, warnings)
}

fn secret_refused() -> anyhow::Error {
    usage(format!(
        "secret is not read from the config file; put the secret in the environment variable named by secret_env (default {ENV_WEBHOOK_SECRET}) or in a file named by secret_file"
    ))
}

/// Checks a section's keys against its kind and resolves it. `url_override` is a URL from the
/// environment with the variable's name.
fn section_settings(
    kind: DeliveryKind,
    section: DeliverySection,
    url_override: Option<(String, &'static str)>,
    base_dir: &Path,
    env: &dyn Fn(&str) -> Option<String>,
    warnings: &mut Vec<String>,
) -> anyhow::Result<DeliverySettings> {
    if section.secret.is_some() {
        return Err(secret_refused());
    }
    if section.password.is_some() {
        return Err(usage(
            "password is not read from the config file; put it in the environment variable named by password_env, or in a file named by password_file",
        ));
    }
    let allowed = kind.keys();
    if let Some(key) = section
        .keys_set()
        .into_iter()
        .find(|k| !allowed.contains(k) && !DESTINATION_KEYS.contains(k))
    {
        let keys = if allowed.is_empty() {
            "none besides kind".to_owned()
        } else {
            allowed.join(", ")
        };
        let keys = format!("{keys} (and in every kind {})", DESTINATION_KEYS.join(", "));
        return Err(usage(format!(
            "{key} does not apply to kind = \"{}\"; the keys of that kind: {keys}",
            kind.name()
        )));
    }
    let timeout = section
        .timeout_seconds
        .map(|v| seconds("timeout_seconds", v, false))
        .transpose()?;
    Ok(match kind {
        DeliveryKind::Stdout => DeliverySettings::Stdout,
        DeliveryKind::Webhook => {
            webhook_settings(section, url_override, timeout, base_dir, env, warnings)?
        }
        DeliveryKind::Kafka => {
            let bootstrap_servers = match url_override {
                Some((value, _)) => value,
                None => non_empty(section.bootstrap_servers).ok_or_else(|| {
                    usage(format!(
                        "kind = \"kafka\" needs bootstrap_servers, e.g. \"127.0.0.1:9092\" (or the environment variable {ENV_DELIVERY_URL} for [delivery])"
                    ))
                })?,
            };
            if let Some(topic) = &section.topic
                && let Some(reason) = hare_outbox::kafka::invalid_topic_reason(topic)
            {
                return Err(usage(format!(
                    "topic = {topic:?} is not a valid Kafka topic name: {reason}"
                )));
            }
            let (properties, secret_properties) =
                kafka_properties(section.properties, section.properties_env, env)?;
            DeliverySettings::Kafka(KafkaSettings {
                bootstrap_servers,
                topic: section.topic,
                properties,
                secret_properties,
                timeout,
            })
        }
        DeliveryKind::Rabbitmq => {
            let url = required_url(kind, &section, url_override, base_dir, env)?;
            let settings = RabbitMqSettings {
                url,
                exchange: section.exchange.filter(|e| !e.is_empty()),
                routing_key: section.routing_key,
                connection_name: section.connection_name,
                timeout,
            };
            build_rabbitmq(&settings)?;
            DeliverySettings::RabbitMq(settings)
        }
        DeliveryKind::Redis => {
            let url = required_url(kind, &section, url_override, base_dir, env)?;
            let max_length = section
                .max_length
                .map(|v| {
                    usize::try_from(v).ok().filter(|v| *v > 0).ok_or_else(|| {
                        usage(format!(
                            "max_length = {v} is not allowed; use 1 or more, or leave it out for no trimming"
                        ))
                    })
                })
                .transpose()?;
            let settings = RedisSettings {
                url,
                stream: section.stream,
                max_length,
                timeout,
            };
            build_redis(&settings)?;
            DeliverySettings::Redis(settings)
        }
        DeliveryKind::Taskiq => {
            let url = required_url(kind, &section, url_override, base_dir, env)?;
            let settings = TaskiqSettings {
                url,
                queue: section.queue,
                exchange: section.exchange,
                timeout,
            };
            build_taskiq(&settings)?;
            DeliverySettings::Taskiq(settings)
        }
        DeliveryKind::Nats => {
            let url = required_url(kind, &section, url_override, base_dir, env)?;
            let stream = match (section.stream, section.stream_subjects) {
                (Some(name), Some(subjects)) => Some((name, subjects)),
                (None, None) => None,
                (Some(name), None) => {
                    return Err(usage(format!(
                        "stream = {name:?} needs stream_subjects, the subjects the stream captures when it has to be created, e.g. [\"events.>\"]"
                    )));
                }
                (None, Some(_)) => {
                    return Err(usage(
                        "stream_subjects needs stream, the name of the stream to make sure of",
                    ));
                }
            };
            let settings = NatsSettings {
                url,
                subject_prefix: section.subject_prefix,
                stream,
                timeout,
            };
            build_nats(&settings)?;
            DeliverySettings::Nats(settings)
        }
        DeliveryKind::Mqtt => {
            let settings = mqtt_settings(section, url_override, timeout, base_dir, env, warnings)?;
            build_mqtt(&settings)?;
            DeliverySettings::Mqtt(settings)
        }
    })
}

/// `url`, `url_env` or `url_file` (one of them), or the override from the environment.
fn url_of(
    section: &DeliverySection,
    url_override: Option<(String, &'static str)>,
    base_dir: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> anyhow::Result<Option<SecretUrl>> {
    secret_url(
        section.url.as_deref(),
        section.url_env.as_deref(),
        section.url_file.as_deref(),
        url_override,
        base_dir,
        env,
    )
}

/// A URL from the file (no password allowed), an environment variable or a file, or the
/// override from the environment, which beats them all.
///
/// # Errors
/// A usage error when more than one source is set, the variable is unset, the file unreadable or
/// empty, or a URL written in the file carries a password.
pub fn secret_url(
    url: Option<&str>,
    url_env: Option<&str>,
    url_file: Option<&Path>,
    url_override: Option<(String, &'static str)>,
    base_dir: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> anyhow::Result<Option<SecretUrl>> {
    let set = [url.is_some(), url_env.is_some(), url_file.is_some()]
        .into_iter()
        .filter(|s| *s)
        .count();
    if set > 1 {
        return Err(usage(
            "url, url_env and url_file are alternatives; set one of them",
        ));
    }
    if let Some((value, name)) = url_override {
        return Ok(Some(SecretUrl {
            value,
            source: format!("${name}"),
        }));
    }
    if let Some(url) = url {
        if let Some(secret) = hare_outbox::redact::secret_in_url(url) {
            return Err(usage(format!(
                "url = {:?} carries a secret ({secret}), and secrets are not read from the config file; put the whole URL in an environment variable named by url_env (or a file named by url_file)",
                redact_url(url)
            )));
        }
        if url.trim().is_empty() {
            return Err(usage("url is empty"));
        }
        return Ok(Some(SecretUrl {
            value: url.to_owned(),
            source: "url".to_owned(),
        }));
    }
    if let Some(name) = url_env {
        let value = non_empty(env(name)).ok_or_else(|| {
            usage(format!(
                "url_env = {name:?} names an environment variable that is not set or empty"
            ))
        })?;
        return Ok(Some(SecretUrl {
            value: value.trim().to_owned(),
            source: format!("${name}"),
        }));
    }
    if let Some(file) = url_file {
        let bytes = read_secret_file("url_file", file, base_dir)?;
        let value = String::from_utf8(bytes.0)
            .map_err(|_| usage(format!("url_file {} is not UTF-8 text", bytes.1.display())))?;
        return Ok(Some(SecretUrl {
            value: value.trim().to_owned(),
            source: format!("file {}", bytes.1.display()),
        }));
    }
    Ok(None)
}

fn required_url(
    kind: DeliveryKind,
    section: &DeliverySection,
    url_override: Option<(String, &'static str)>,
    base_dir: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> anyhow::Result<SecretUrl> {
    url_of(section, url_override, base_dir, env)?.ok_or_else(|| {
        usage(format!(
            "kind = \"{}\" needs url, url_env or url_file (or the environment variable {ENV_DELIVERY_URL} for [delivery])",
            kind.name()
        ))
    })
}

/// Reads a file of secrets (relative to `base_dir`), without its final line break.
fn read_secret_file(key: &str, file: &Path, base_dir: &Path) -> anyhow::Result<(Vec<u8>, PathBuf)> {
    let file = if file.is_relative() {
        base_dir.join(file)
    } else {
        file.to_path_buf()
    };
    let bytes = std::fs::read(&file)
        .map_err(|e| usage(format!("{key} {}: cannot read it: {e}", file.display())))?;
    let bytes = trim_line_end(bytes);
    if bytes.is_empty() {
        return Err(usage(format!("{key} {} is empty", file.display())));
    }
    Ok((bytes, file))
}

fn trim_line_end(mut bytes: Vec<u8>) -> Vec<u8> {
    while bytes.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        bytes.pop();
    }
    bytes
}

/// Property names whose values are secrets: only from `properties_env`. Besides passwords and
/// secrets, librdkafka's inline key material (`ssl.key.pem`, `ssl_key`, `ssl.keystore…`) and
/// the OAuth bearer configuration.
fn is_secret_property(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.contains("password")
        || lower.contains("secret")
        || lower.starts_with("ssl.key")
        || lower == "ssl_key"
        || lower == "sasl.oauthbearer.config"
}

/// librdkafka properties as (name, value) pairs, in order.
type Properties = Vec<(String, String)>;

/// The file's properties and those from the environment, with the names of the latter.
fn kafka_properties(
    file: Option<BTreeMap<String, toml::Value>>,
    from_env: Option<BTreeMap<String, String>>,
    env: &dyn Fn(&str) -> Option<String>,
) -> anyhow::Result<(Properties, Vec<String>)> {
    let mut properties = Vec::new();
    for (name, value) in file.unwrap_or_default() {
        if name == "bootstrap.servers" {
            return Err(usage(
                "properties.\"bootstrap.servers\" is set by bootstrap_servers; set it there",
            ));
        }
        if is_secret_property(&name) {
            return Err(usage(format!(
                "properties.{name:?} is a secret, and secrets are not read from the config file; name the environment variable holding it in properties_env, e.g. properties_env = {{ {name:?} = \"KAFKA_PASSWORD\" }}"
            )));
        }
        let text = match value {
            toml::Value::String(s) => s,
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Float(f) => f.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            other => {
                return Err(usage(format!(
                    "properties.{name:?} = {other} is not allowed; use a string, number or boolean"
                )));
            }
        };
        properties.push((name, text));
    }
    let mut secret = Vec::new();
    for (name, variable) in from_env.unwrap_or_default() {
        if properties.iter().any(|(n, _)| *n == name) {
            return Err(usage(format!(
                "property {name:?} is set in both properties and properties_env; choose one"
            )));
        }
        let value = non_empty(env(&variable)).ok_or_else(|| {
            usage(format!(
                "properties_env.{name:?} = {variable:?} names an environment variable that is not set or empty"
            ))
        })?;
        properties.push((name.clone(), value));
        secret.push(name);
    }
    Ok((properties, secret))
}

fn webhook_settings(
    section: DeliverySection,
    url_override: Option<(String, &'static str)>,
    timeout: Option<Duration>,
    base_dir: &Path,
    env: &dyn Fn(&str) -> Option<String>,
    warnings: &mut Vec<String>,
) -> anyhow::Result<DeliverySettings> {
    let url = url_of(&section, url_override, base_dir, env)?
        .ok_or_else(|| {
            usage(format!(
                "kind = \"webhook\" needs url, url_env or url_file (or the environment variable {ENV_WEBHOOK_URL})"
            ))
        })?
        .value;
    let (secret, secret_source) = match (section.secret_env, section.secret_file) {
        (Some(_), Some(_)) => {
            return Err(usage(
                "secret_env and secret_file are both set; choose one source for the secret",
            ));
        }
        (None, Some(file)) => {
            let (secret, file) = read_secret_file("secret_file", &file, base_dir)?;
            (Some(secret), Some(format!("file {}", file.display())))
        }
        (Some(name), None) => match non_empty(env(&name)) {
            Some(value) => (Some(value.into_bytes()), Some(format!("${name}"))),
            None => {
                return Err(usage(format!(
                    "secret_env = {name:?} names an environment variable that is not set or empty"
                )));
            }
        },
        (None, None) => match non_empty(env(ENV_WEBHOOK_SECRET)) {
            Some(value) => (
                Some(value.into_bytes()),
                Some(format!("${ENV_WEBHOOK_SECRET}")),
            ),
            None => {
                warnings.push(format!(
                    "webhook requests are not signed: set {ENV_WEBHOOK_SECRET}, secret_env or secret_file"
                ));
                (None, None)
            }
        },
    };
    let settings = WebhookSettings {
        url,
        timeout,
        headers: section.headers.unwrap_or_default().into_iter().collect(),
        signature_header: section.signature_header,
        secret,
        secret_source,
        url_public: section.url_public.unwrap_or(false),
    };
    // Build it once now so a bad URL or header is a config error, before any connection.
    build_webhook(&settings)?;
    Ok(DeliverySettings::Webhook(settings))
}

fn mqtt_settings(
    section: DeliverySection,
    url_override: Option<(String, &'static str)>,
    timeout: Option<Duration>,
    base_dir: &Path,
    env: &dyn Fn(&str) -> Option<String>,
    warnings: &mut Vec<String>,
) -> anyhow::Result<MqttSettings> {
    let host_keys: Vec<&str> = [
        ("host", section.host.is_some()),
        ("port", section.port.is_some()),
        ("client_id", section.client_id.is_some()),
        ("username", section.username.is_some()),
        ("password_env", section.password_env.is_some()),
        ("password_file", section.password_file.is_some()),
    ]
    .into_iter()
    .filter_map(|(k, set)| set.then_some(k))
    .collect();
    let overridden = url_override.is_some();
    let url = url_of(&section, url_override, base_dir, env)?;
    let target = match url {
        Some(url) => {
            if let Some(key) = host_keys.first() {
                if !overridden {
                    return Err(usage(format!(
                        "{key} goes with host, not with url: give the broker either as url (mqtt://host:port?client_id=…) or as host, port, client_id, username and password_env"
                    )));
                }
                warnings.push(format!(
                    "{ENV_DELIVERY_URL} replaces host, port, client_id, username and password of the [delivery] section"
                ));
            }
            MqttTarget::Url(url)
        }
        None => {
            let host = non_empty(section.host).ok_or_else(|| {
                usage(
                    "kind = \"mqtt\" needs url, url_env, url_file or host (or the environment variable HARE_OUTBOX_DELIVERY_URL for [delivery])",
                )
            })?;
            let port = match section.port {
                None => 1883,
                Some(p) => u16::try_from(p)
                    .ok()
                    .filter(|p| *p > 0)
                    .ok_or_else(|| usage(format!("port = {p} is not allowed; use 1 to 65535")))?,
            };
            let client_id = match section.client_id {
                Some(id) if id.is_empty() => {
                    return Err(usage(
                        "client_id is empty; give one, or leave it out for a random hare-outbox-<hex>",
                    ));
                }
                Some(id) => id,
                None => format!("hare-outbox-{:016x}", fastrand::u64(..)),
            };
            let password = match (section.password_env, section.password_file) {
                (Some(_), Some(_)) => {
                    return Err(usage(
                        "password_env and password_file are both set; choose one source for the password",
                    ));
                }
                (Some(name), None) => Some(non_empty(env(&name)).ok_or_else(|| {
                    usage(format!(
                        "password_env = {name:?} names an environment variable that is not set or empty"
                    ))
                })?),
                (None, Some(file)) => {
                    let (bytes, file) = read_secret_file("password_file", &file, base_dir)?;
                    Some(String::from_utf8(bytes).map_err(|_| {
                        usage(format!("password_file {} is not UTF-8 text", file.display()))
                    })?)
                }
                (None, None) => None,
            };
            let credentials = match (section.username, password) {
                (Some(username), password) => Some(MqttCredentials {
                    username,
                    password: password.unwrap_or_default(),
                }),
                (None, Some(_)) => {
                    return Err(usage(
                        "a password is set without username; set username too",
                    ));
                }
                (None, None) => None,
            };
            MqttTarget::Host {
                host,
                port,
                client_id,
                credentials,
            }
        }
    };
    Ok(MqttSettings {
        target,
        topic_prefix: section.topic_prefix,
        timeout,
    })
}

fn build_webhook(
    settings: &WebhookSettings,
) -> anyhow::Result<hare_outbox::webhook::WebhookDelivery> {
    let mut delivery = hare_outbox::webhook::WebhookDelivery::builder()
        .with_url(settings.url.clone())
        .with_public_url(settings.url_public)
        .build()
        .with_context(|| format!("url {:?}", settings.shown_url()))?;
    if let Some(timeout) = settings.timeout {
        delivery = delivery.with_timeout(timeout);
    }
    for (name, value) in &settings.headers {
        delivery = delivery
            .with_header(name, value)
            .with_context(|| format!("headers.{name:?}"))?;
    }
    if let Some(name) = &settings.signature_header {
        delivery = delivery
            .with_signature_header(name)
            .with_context(|| format!("signature_header {name:?}"))?;
    }
    if let Some(secret) = &settings.secret {
        delivery = delivery.with_secret(secret.clone())?;
    }
    Ok(delivery)
}

fn build_kafka(settings: &KafkaSettings) -> anyhow::Result<hare_outbox::kafka::KafkaDelivery> {
    use hare_outbox::kafka::rdkafka::ClientConfig;
    use hare_outbox::kafka::rdkafka::producer::FutureProducer;
    let timeout = settings
        .timeout
        .unwrap_or(hare_outbox::kafka::DEFAULT_TIMEOUT);
    let ms = timeout.as_millis().clamp(1, i32::MAX as u128).to_string();
    let mut config = ClientConfig::new();
    // The settings KafkaDelivery::new uses; the file's properties come after and may change them.
    config
        .set("bootstrap.servers", settings.bootstrap_servers.trim())
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("partitioner", "murmur2_random")
        .set("message.timeout.ms", &ms)
        .set("request.timeout.ms", &ms);
    for (name, value) in &settings.properties {
        config.set(name, value);
    }
    let producer: FutureProducer = config.create().map_err(|e| {
        usage(format!(
            "librdkafka refused the producer settings (bootstrap_servers {:?}, properties {}): {e}",
            settings.bootstrap_servers,
            settings
                .properties
                .iter()
                .map(|(k, _)| k.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })?;
    let mut delivery =
        hare_outbox::kafka::KafkaDelivery::from_producer(producer).with_timeout(timeout)?;
    if let Some(topic) = &settings.topic {
        delivery = delivery.with_topic(topic.clone())?;
    }
    Ok(delivery)
}

fn build_rabbitmq(
    settings: &RabbitMqSettings,
) -> anyhow::Result<hare_outbox::rabbitmq::RabbitMqDelivery> {
    let mut delivery = hare_outbox::rabbitmq::RabbitMqDelivery::new(&settings.url.value)?;
    if let Some(exchange) = &settings.exchange {
        delivery = delivery.with_exchange(exchange.clone())?;
    }
    if let Some(key) = &settings.routing_key {
        delivery = delivery.with_routing_key(key.clone())?;
    }
    if let Some(name) = &settings.connection_name {
        delivery = delivery.with_connection_name(name.clone());
    }
    if let Some(timeout) = settings.timeout {
        delivery = delivery.with_timeout(timeout);
    }
    Ok(delivery)
}

fn build_redis(
    settings: &RedisSettings,
) -> anyhow::Result<hare_outbox::redis::RedisStreamsDelivery> {
    let mut delivery = hare_outbox::redis::RedisStreamsDelivery::new(&settings.url.value)?;
    if let Some(stream) = &settings.stream {
        delivery = delivery.with_stream(stream.clone())?;
    }
    if let Some(max_length) = settings.max_length {
        delivery = delivery.with_max_length(max_length)?;
    }
    if let Some(timeout) = settings.timeout {
        delivery = delivery.with_timeout(timeout);
    }
    Ok(delivery)
}

fn build_taskiq(settings: &TaskiqSettings) -> anyhow::Result<hare_outbox::taskiq::TaskiqDelivery> {
    use hare_outbox::taskiq::TaskiqDelivery;
    let url = &settings.url.value;
    let scheme = url
        .split_once("://")
        .map(|(scheme, _)| scheme.to_ascii_lowercase());
    let mut delivery = match scheme.as_deref() {
        Some("redis" | "rediss" | "unix") => {
            if settings.exchange.is_some() {
                return Err(usage(
                    "exchange is an AMQP setting; a taskiq delivery to Redis takes url and queue",
                ));
            }
            TaskiqDelivery::redis(url)?
        }
        Some("amqp" | "amqps") => {
            let delivery = TaskiqDelivery::rabbitmq(url)?;
            match &settings.exchange {
                Some(exchange) => delivery.with_exchange(exchange.clone())?,
                None => delivery,
            }
        }
        _ => {
            return Err(usage(format!(
                "taskiq url {} is not allowed; use redis://… (taskiq-redis ListQueueBroker) or amqp://… (taskiq-aio-pika)",
                settings.url.shown()
            )));
        }
    };
    if let Some(queue) = &settings.queue {
        delivery = delivery.with_queue_name(queue.clone())?;
    }
    if let Some(timeout) = settings.timeout {
        delivery = delivery.with_timeout(timeout);
    }
    Ok(delivery)
}

fn build_nats(settings: &NatsSettings) -> anyhow::Result<hare_outbox::nats::NatsDelivery> {
    let mut delivery = hare_outbox::nats::NatsDelivery::new(&settings.url.value)?;
    if let Some(prefix) = &settings.subject_prefix {
        delivery = delivery.with_subject_prefix(prefix.clone())?;
    }
    if let Some((name, subjects)) = &settings.stream {
        delivery = delivery.with_stream(name.clone(), subjects.iter().cloned())?;
    }
    if let Some(timeout) = settings.timeout {
        delivery = delivery.with_timeout(timeout);
    }
    Ok(delivery)
}

fn build_mqtt(settings: &MqttSettings) -> anyhow::Result<hare_outbox::mqtt::MqttDelivery> {
    use hare_outbox::mqtt::rumqttc::MqttOptions;
    let mut delivery = match &settings.target {
        MqttTarget::Url(url) => hare_outbox::mqtt::MqttDelivery::new(&url.value)?,
        MqttTarget::Host {
            host,
            port,
            client_id,
            credentials,
        } => {
            let mut options = MqttOptions::new(client_id.clone(), host.clone(), *port);
            if let Some(credentials) = credentials {
                options.set_credentials(credentials.username.clone(), credentials.password.clone());
            }
            hare_outbox::mqtt::MqttDelivery::from_options(options)
        }
    };
    if let Some(prefix) = &settings.topic_prefix {
        delivery = delivery.with_topic_prefix(prefix.clone())?;
    }
    if let Some(timeout) = settings.timeout {
        delivery = delivery.with_timeout(timeout);
    }
    Ok(delivery)
}

/// A delivery shared by several routes, closed once however many routes hold it.
struct Shared {
    inner: Arc<dyn Delivery>,
    closed: AtomicBool,
}

#[async_trait]
impl Delivery for Shared {
    async fn deliver(&self, event: &OutboxEvent) -> Result<(), DeliveryError> {
        self.inner.deliver(event).await
    }

    async fn deliver_batch(
        &self,
        events: &[OutboxEvent],
        concurrency: usize,
        timeout: Duration,
    ) -> Vec<Result<(), DeliveryError>> {
        self.inner.deliver_batch(events, concurrency, timeout).await
    }

    async fn deliver_batch_reported(
        &self,
        events: &[OutboxEvent],
        concurrency: usize,
        timeout: Duration,
    ) -> Vec<hare_outbox::DeliveryReport> {
        self.inner
            .deliver_batch_reported(events, concurrency, timeout)
            .await
    }

    fn keeps_key_order(&self) -> bool {
        self.inner.keeps_key_order()
    }

    fn destination(&self) -> Option<&hare_outbox::DestinationSpec> {
        self.inner.destination()
    }

    async fn destination_of(&self, event: &OutboxEvent) -> Option<String> {
        self.inner.destination_of(event).await
    }

    async fn close(&self) -> Result<(), DeliveryError> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        self.inner.close().await
    }
}

impl DeliverySettings {
    /// Builds the delivery (a [`TopicRouter`] for [`DeliverySettings::Routed`]). Nothing is
    /// connected yet, except that a Kafka producer starts connecting in the background.
    ///
    /// # Errors
    /// A configuration error naming the value the delivery refused.
    pub fn build(&self) -> anyhow::Result<Arc<dyn Delivery>> {
        Ok(match self {
            DeliverySettings::Stdout => Arc::new(JsonLinesDelivery::stdout()),
            DeliverySettings::Webhook(settings) => Arc::new(build_webhook(settings)?),
            DeliverySettings::Kafka(settings) => Arc::new(build_kafka(settings)?),
            DeliverySettings::RabbitMq(settings) => Arc::new(build_rabbitmq(settings)?),
            DeliverySettings::Redis(settings) => Arc::new(build_redis(settings)?),
            DeliverySettings::Nats(settings) => Arc::new(build_nats(settings)?),
            DeliverySettings::Mqtt(settings) => Arc::new(build_mqtt(settings)?),
            DeliverySettings::Taskiq(settings) => Arc::new(build_taskiq(settings)?),
            DeliverySettings::Routed(router) => {
                let mut built: BTreeMap<&str, Arc<Shared>> = BTreeMap::new();
                for (name, settings) in &router.deliveries {
                    let inner = settings
                        .build()
                        .with_context(|| format!("[deliveries.{name}]"))?;
                    built.insert(
                        name,
                        Arc::new(Shared {
                            inner,
                            closed: AtomicBool::new(false),
                        }),
                    );
                }
                let mut out = TopicRouter::new();
                for (i, (topic, name)) in router.routes.iter().enumerate() {
                    let delivery = built.get(name.as_str()).cloned().ok_or_else(|| {
                        usage(format!(
                            "[[route]] #{} names the unknown delivery {name:?}",
                            i + 1
                        ))
                    })?;
                    out = out
                        .route(topic, delivery)
                        .with_context(|| format!("[[route]] #{} (topic {topic:?})", i + 1))?;
                }
                if let Some((name, settings)) = &router.default {
                    match built.get(name.as_str()) {
                        Some(delivery) => out = out.with_default(delivery.clone()),
                        None => {
                            out = out.with_default(settings.build().with_context(|| name.clone())?);
                        }
                    }
                }
                Arc::new(out)
            }
        })
    }

    /// Builds the delivery for the relay: each delivery section a destination of its own —
    /// named `name` for a single delivery, by its section name behind a router — with its
    /// circuit breaker (`relay_breaker` with what the section sets) and rate limit.
    ///
    /// # Errors
    /// A configuration error naming the value the delivery refused.
    pub fn build_for_relay(
        &self,
        name: &str,
        options: &DestinationOptions,
        relay_breaker: &BreakerConfig,
    ) -> anyhow::Result<Arc<dyn Delivery>> {
        let DeliverySettings::Routed(router) = self else {
            return options.wrap(name, self.build()?, relay_breaker);
        };
        let options_of = |name: &str| router.options.get(name).cloned().unwrap_or_default();
        let mut built: BTreeMap<&str, Arc<Shared>> = BTreeMap::new();
        for (name, settings) in &router.deliveries {
            let inner = settings
                .build()
                .with_context(|| format!("[deliveries.{name}]"))?;
            let inner = options_of(name)
                .wrap(name, inner, relay_breaker)
                .with_context(|| format!("[deliveries.{name}]"))?;
            built.insert(
                name,
                Arc::new(Shared {
                    inner,
                    closed: AtomicBool::new(false),
                }),
            );
        }
        let mut out = TopicRouter::new();
        for (i, (topic, name)) in router.routes.iter().enumerate() {
            let delivery = built.get(name.as_str()).cloned().ok_or_else(|| {
                usage(format!(
                    "[[route]] #{} names the unknown delivery {name:?}",
                    i + 1
                ))
            })?;
            out = out
                .route(topic, delivery)
                .with_context(|| format!("[[route]] #{} (topic {topic:?})", i + 1))?;
        }
        if let Some((name, settings)) = &router.default {
            match built.get(name.as_str()) {
                Some(delivery) => out = out.with_default(delivery.clone()),
                None => {
                    let inner = settings.build().with_context(|| name.clone())?;
                    out = out.with_default(options_of(name).wrap(
                        MAIN_DESTINATION,
                        inner,
                        relay_breaker,
                    )?);
                }
            }
        }
        Ok(Arc::new(out))
    }

    /// Checks the circuit breaker options of every delivery section against the relay's.
    ///
    /// # Errors
    /// A usage error naming the section and the keys.
    pub fn check_options(
        &self,
        options: &DestinationOptions,
        relay_breaker: &BreakerConfig,
    ) -> anyhow::Result<()> {
        match self {
            DeliverySettings::Routed(router) => {
                for (name, options) in &router.options {
                    let section = if name == "[delivery]" {
                        name.clone()
                    } else {
                        format!("[deliveries.{name}]")
                    };
                    options.check(relay_breaker).context(section)?;
                }
                Ok(())
            }
            _ => options.check(relay_breaker).context("[delivery]"),
        }
    }

    /// A short description for the start-up log, passwords hidden.
    pub fn describe(&self) -> String {
        match self {
            DeliverySettings::Stdout => "stdout (JSON lines)".to_owned(),
            DeliverySettings::Webhook(w) => format!(
                "webhook {} ({})",
                w.shown_url(),
                w.secret_source.as_deref().map_or_else(
                    || "unsigned".to_owned(),
                    |s| format!("signed, secret from {s}")
                )
            ),
            DeliverySettings::Kafka(k) => format!(
                "kafka {} topic {}",
                k.bootstrap_servers,
                k.topic.as_deref().unwrap_or("= event topic")
            ),
            DeliverySettings::RabbitMq(r) => format!(
                "rabbitmq {} (from {}) exchange {:?} routing key {}",
                r.url.shown(),
                r.url.source,
                r.exchange.as_deref().unwrap_or(""),
                r.routing_key.as_deref().unwrap_or("= event topic")
            ),
            DeliverySettings::Redis(r) => format!(
                "redis {} (from {}) stream {}",
                r.url.shown(),
                r.url.source,
                r.stream.as_deref().unwrap_or("= event topic")
            ),
            DeliverySettings::Taskiq(t) => format!(
                "taskiq {} (from {}) queue {}",
                t.url.shown(),
                t.url.source,
                t.queue.as_deref().unwrap_or("taskiq")
            ),
            DeliverySettings::Nats(n) => format!(
                "nats {} (from {}) subject {}<event topic>",
                n.url.shown(),
                n.url.source,
                n.subject_prefix.as_deref().unwrap_or("")
            ),
            DeliverySettings::Mqtt(m) => match &m.target {
                MqttTarget::Url(url) => format!("mqtt {} (from {})", url.shown(), url.source),
                MqttTarget::Host {
                    host,
                    port,
                    client_id,
                    ..
                } => format!("mqtt {host}:{port} client {client_id}"),
            },
            DeliverySettings::Routed(router) => {
                let routes: Vec<String> = router
                    .routes
                    .iter()
                    .map(|(topic, name)| format!("{topic} -> {name}"))
                    .collect();
                let mut text = format!("router: {}", routes.join(", "));
                match &router.default {
                    Some((name, _)) => text.push_str(&format!("; default {name}")),
                    None => text.push_str("; no default (unrouted topics fail)"),
                }
                for (name, settings) in &router.deliveries {
                    text.push_str(&format!("; {name} = {}", settings.describe()));
                }
                if let Some((name, settings)) = &router.default
                    && !router.deliveries.contains_key(name)
                {
                    text.push_str(&format!("; {name} = {}", settings.describe()));
                }
                text
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Overrides, Settings, parse};

    fn resolve_with(text: &str, env: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<Settings> {
        let file = parse(text).map_err(|e| usage(e.to_string()))?;
        crate::config::resolve(file, None, Overrides::default(), env)
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn error_text(text: &str, env: &dyn Fn(&str) -> Option<String>) -> String {
        let e = resolve_with(text, env).expect_err("should be refused");
        assert_eq!(
            crate::error::exit_code(&e),
            crate::error::EXIT_USAGE,
            "{e:#}"
        );
        format!("{e:#}")
    }

    fn router(settings: DeliverySettings) -> RouterSettings {
        match settings {
            DeliverySettings::Routed(router) => router,
            other => panic!("not a router: {other:?}"),
        }
    }

    #[test]
    fn the_readme_routes_example_resolves_into_a_router() {
        let readme = include_str!("../../../README.md");
        let block: String = readme
            .split("Several deliveries, chosen by topic")
            .nth(1)
            .expect("README has the routes example")
            .lines()
            .skip_while(|l| l.trim() != "```toml")
            .skip(1)
            .take_while(|l| l.trim() != "```")
            .map(|l| format!("{l}\n"))
            .collect();
        let env = |name: &str| {
            (name == "AUDIT_REDIS_URL").then(|| "redis://:pw@127.0.0.1:6379/0".to_owned())
        };
        let s = resolve_with(&block, &env).unwrap();
        let r = router(s.delivery);
        assert_eq!(
            r.routes,
            [
                ("audit.*".to_owned(), "audit".to_owned()),
                ("erp.order.*".to_owned(), "analytics".to_owned())
            ]
        );
        assert_eq!(r.default.as_ref().map(|(n, _)| n.as_str()), Some("hooks"));
        let DeliverySettings::Redis(audit) = &r.deliveries["audit"] else {
            panic!("{:?}", r.deliveries)
        };
        assert_eq!(audit.url.source, "$AUDIT_REDIS_URL");
        assert!(
            !format!("{audit:?}").contains("pw"),
            "Debug hides the password"
        );
        let DeliverySettings::Kafka(kafka) = &r.deliveries["analytics"] else {
            panic!()
        };
        assert_eq!(
            kafka.properties,
            [("compression.type".to_owned(), "lz4".to_owned())]
        );
    }

    #[test]
    fn routes_build_a_router_that_picks_exact_then_glob_then_default() {
        let text = "[delivery]\nkind = \"stdout\"\n[deliveries.a]\nkind = \"stdout\"\n[deliveries.b]\nkind = \"redis\"\nurl = \"redis://127.0.0.1:6379/0\"\n[[route]]\ntopic = \"x.*\"\ndelivery = \"a\"\n[[route]]\ntopic = \"x.y\"\ndelivery = \"b\"\n[[route]]\ntopic = \"*\"\ndelivery = \"b\"\n";
        let s = resolve_with(text, &no_env).unwrap();
        let described = s.delivery.describe();
        assert!(
            described.contains("x.* -> a") && described.contains("default [delivery]"),
            "{described}"
        );
        s.delivery.build().expect("builds without connecting");
        let r = router(s.delivery);
        assert_eq!(r.routes.len(), 3);
        assert_eq!(
            r.default.as_ref().map(|(n, _)| n.as_str()),
            Some("[delivery]")
        );
        assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    }

    #[test]
    fn only_a_default_delivery_needs_no_router() {
        let s = resolve_with(
            "default_delivery = \"a\"\n[deliveries.a]\nkind = \"nats\"\nurl = \"nats://127.0.0.1:4222\"\n",
            &no_env,
        )
        .unwrap();
        assert!(
            matches!(s.delivery, DeliverySettings::Nats(_)),
            "{:?}",
            s.delivery
        );
    }

    #[test]
    fn route_mistakes_are_named() {
        let e = error_text(
            "[deliveries.a]\nkind = \"stdout\"\n[[route]]\ntopic = \"x\"\ndelivery = \"b\"\n",
            &no_env,
        );
        assert!(
            e.contains("[[route]] #1") && e.contains("\"b\"") && e.contains("\"a\""),
            "{e}"
        );
        let e = error_text(
            "[deliveries.a]\nkind = \"stdout\"\n[[route]]\ntopic = \"x\"\ndelivery = \"a\"\n[[route]]\ntopic = \"x\"\ndelivery = \"a\"\n",
            &no_env,
        );
        assert!(e.contains("#2") && e.contains("#1"), "{e}");
        let e = error_text("[deliveries.a]\nkind = \"stdout\"\n", &no_env);
        assert!(
            e.contains("[[route]]") && e.contains("default_delivery"),
            "{e}"
        );
        let e = error_text("[[route]]\ntopic = \"x\"\n", &no_env);
        assert!(e.contains("delivery"), "{e}");
        let e = error_text("[deliveries.a]\nurl = \"http://x/\"\n", &no_env);
        assert!(
            e.contains("[deliveries.a]") && e.contains("kind is missing"),
            "{e}"
        );
        let e = error_text(
            "default_delivery = \"a\"\n[delivery]\nkind = \"stdout\"\n[deliveries.a]\nkind = \"stdout\"\n",
            &no_env,
        );
        assert!(
            e.contains("default_delivery") && e.contains("[delivery]"),
            "{e}"
        );
        // A glob the router refuses is a config error too.
        let e = error_text(
            "[deliveries.a]\nkind = \"stdout\"\n[[route]]\ntopic = \"\"\ndelivery = \"a\"\n",
            &no_env,
        );
        assert!(e.contains("topic is empty"), "{e}");
    }

    #[test]
    fn unused_deliveries_and_a_missing_default_are_warned_about() {
        let s = resolve_with(
            "[deliveries.a]\nkind = \"stdout\"\n[deliveries.b]\nkind = \"stdout\"\n[[route]]\ntopic = \"x\"\ndelivery = \"a\"\n",
            &no_env,
        )
        .unwrap();
        assert!(
            s.warnings
                .iter()
                .any(|w| w.contains("[deliveries.b] is not used")),
            "{:?}",
            s.warnings
        );
        assert!(
            s.warnings.iter().any(|w| w.contains("no default delivery")),
            "{:?}",
            s.warnings
        );
    }

    #[test]
    fn passwords_in_file_urls_are_refused_and_env_urls_accepted() {
        for kind in ["rabbitmq", "redis", "nats", "mqtt", "webhook"] {
            let url = match kind {
                "rabbitmq" => "amqp://u:hunter2@h/%2f",
                "redis" => "redis://:hunter2@h:6379/0",
                "nats" => "nats://u:hunter2@h:4222",
                "mqtt" => "mqtt://u:hunter2@h:1883?client_id=x",
                _ => "https://u:hunter2@h/hook",
            };
            let e = error_text(
                &format!("[delivery]\nkind = \"{kind}\"\nurl = \"{url}\"\n"),
                &no_env,
            );
            assert!(
                e.contains("url_env") && !e.contains("hunter2"),
                "{kind}: {e}"
            );
            let env = |name: &str| (name == "U").then(|| url.to_owned());
            let s = resolve_with(
                &format!("[delivery]\nkind = \"{kind}\"\nurl_env = \"U\"\n"),
                &env,
            )
            .unwrap_or_else(|e| panic!("{kind}: {e:#}"));
            let shown = s.delivery.describe();
            assert!(!shown.contains("hunter2"), "{kind}: {shown}");
            assert!(!format!("{:?}", s.delivery).contains("hunter2"), "{kind}");
        }
        // NATS takes a list of servers, and servers without a scheme: a password in any of them
        // is refused too.
        for url in [
            "nats://h1:4222,nats://u:hunter2@h2:4222",
            "nats://h1:4222, u:hunter2@h2:4222",
            "u:hunter2@h:4222",
        ] {
            let e = error_text(
                &format!("[delivery]\nkind = \"nats\"\nurl = \"{url}\"\n"),
                &no_env,
            );
            assert!(
                e.contains("url_env") && !e.contains("hunter2"),
                "{url}: {e}"
            );
        }
        let e = error_text(
            "[delivery]\nkind = \"redis\"\nurl = \"redis://h\"\nurl_env = \"U\"\n",
            &no_env,
        );
        assert!(e.contains("set one"), "{e}");
    }

    #[test]
    fn url_file_is_read_relative_to_the_config_file() {
        let dir =
            std::env::temp_dir().join(format!("hare-outbox-cli-urlfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("redis-url"), "redis://:pw@127.0.0.1:6379/3\n").unwrap();
        let file = parse("[delivery]\nkind = \"redis\"\nurl_file = \"redis-url\"\n").unwrap();
        let s = crate::config::resolve(
            file,
            Some(dir.join("x.toml")),
            Overrides::default(),
            &no_env,
        )
        .unwrap();
        let DeliverySettings::Redis(r) = s.delivery else {
            panic!()
        };
        assert_eq!(r.url.value, "redis://:pw@127.0.0.1:6379/3");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn environment_overrides_pick_and_replace_urls() {
        let env =
            |name: &str| (name == ENV_DELIVERY_URL).then(|| "redis://127.0.0.1:6379/1".to_owned());
        // Without [delivery], the scheme picks the kind.
        let s = resolve_with("", &env).unwrap();
        let DeliverySettings::Redis(r) = s.delivery else {
            panic!()
        };
        assert_eq!(r.url.source, "$HARE_OUTBOX_DELIVERY_URL");
        // With one, it replaces the file's url.
        let s = resolve_with(
            "[delivery]\nkind = \"redis\"\nurl = \"redis://other/0\"\nstream = \"s\"\n",
            &env,
        )
        .unwrap();
        let DeliverySettings::Redis(r) = s.delivery else {
            panic!()
        };
        assert_eq!(r.url.value, "redis://127.0.0.1:6379/1");
        // Kafka: bootstrap servers.
        let env = |name: &str| (name == ENV_DELIVERY_URL).then(|| "k1:9092,k2:9092".to_owned());
        let s = resolve_with("[delivery]\nkind = \"kafka\"\n", &env).unwrap();
        let DeliverySettings::Kafka(k) = s.delivery else {
            panic!()
        };
        assert_eq!(k.bootstrap_servers, "k1:9092,k2:9092");
        let e = error_text("", &env);
        assert!(e.contains(ENV_DELIVERY_URL) && e.contains("kafka"), "{e}");
    }

    #[test]
    fn broker_keys_are_checked() {
        let e = error_text("[delivery]\nkind = \"stdout\"\nstream = \"s\"\n", &no_env);
        assert!(
            e.contains("stream") && e.contains("none besides kind"),
            "{e}"
        );
        let e = error_text(
            "[delivery]\nkind = \"redis\"\nurl = \"redis://h/0\"\nmax_length = 0\n",
            &no_env,
        );
        assert!(e.contains("max_length = 0"), "{e}");
        let e = error_text(
            "[delivery]\nkind = \"nats\"\nurl = \"nats://h:4222\"\nstream = \"S\"\n",
            &no_env,
        );
        assert!(e.contains("stream_subjects"), "{e}");
        let e = error_text(
            "[delivery]\nkind = \"kafka\"\nbootstrap_servers = \"h:9092\"\ntopic = \"a b\"\n",
            &no_env,
        );
        assert!(e.contains("a b") && e.contains("Kafka topic"), "{e}");
        let e = error_text(
            "[delivery]\nkind = \"kafka\"\nbootstrap_servers = \"h:9092\"\nproperties = { \"bootstrap.servers\" = \"x\" }\n",
            &no_env,
        );
        assert!(e.contains("bootstrap_servers"), "{e}");
        let e = error_text(
            "[delivery]\nkind = \"mqtt\"\nurl = \"mqtt://h:1883?client_id=x\"\nhost = \"h\"\n",
            &no_env,
        );
        assert!(e.contains("host") && e.contains("url"), "{e}");
        let e = error_text(
            "[delivery]\nkind = \"mqtt\"\nhost = \"h\"\nport = 70000\n",
            &no_env,
        );
        assert!(e.contains("port = 70000"), "{e}");
        let e = error_text(
            "[delivery]\nkind = \"mqtt\"\nhost = \"h\"\npassword = \"x\"\n",
            &no_env,
        );
        assert!(e.contains("password_env"), "{e}");
        let e = error_text(
            "[delivery]\nkind = \"mqtt\"\nhost = \"h\"\npassword_env = \"P\"\n",
            &|n: &str| (n == "P").then(|| "x".to_owned()),
        );
        assert!(e.contains("username"), "{e}");
        let e = error_text(
            "[delivery]\nkind = \"rabbitmq\"\nurl = \"http://h/\"\n",
            &no_env,
        );
        assert!(e.contains("AMQP"), "{e}");
        let s = resolve_with(
            "[delivery]\nkind = \"mqtt\"\nhost = \"127.0.0.1\"\nusername = \"u\"\npassword_env = \"P\"\ntopic_prefix = \"site\"\n",
            &|n: &str| (n == "P").then(|| "secret-pw".to_owned()),
        )
        .unwrap();
        assert!(!format!("{:?}", s.delivery).contains("secret-pw"));
        let DeliverySettings::Mqtt(m) = &s.delivery else {
            panic!()
        };
        let MqttTarget::Host {
            port, client_id, ..
        } = &m.target
        else {
            panic!()
        };
        assert_eq!(*port, 1883);
        assert!(client_id.starts_with("hare-outbox-"), "{client_id}");
        let e = error_text(
            "[delivery]\nkind = \"kafka\"\nbootstrap_servers = \"h:9092\"\nproperties_env = { \"sasl.password\" = \"KP\" }\n",
            &no_env,
        );
        assert!(e.contains("KP") && e.contains("not set"), "{e}");
        let s = resolve_with(
            "[delivery]\nkind = \"kafka\"\nbootstrap_servers = \"h:9092\"\nproperties_env = { \"sasl.password\" = \"KP\" }\n",
            &|n: &str| (n == "KP").then(|| "kafka-pw".to_owned()),
        )
        .unwrap();
        assert!(!format!("{:?}", s.delivery).contains("kafka-pw"));
        // Inline key material is a secret too; the refusal does not echo it.
        for name in ["ssl.key.pem", "ssl.key.password", "ssl.keystore.password"] {
            let e = error_text(
                &format!(
                    "[delivery]\nkind = \"kafka\"\nbootstrap_servers = \"h:9092\"\nproperties = {{ \"{name}\" = \"-----BEGIN PRIVATE KEY-----\" }}\n"
                ),
                &no_env,
            );
            assert!(e.contains(name) && e.contains("properties_env"), "{e}");
            assert!(!e.contains("BEGIN PRIVATE KEY"), "{e}");
        }
    }
}
