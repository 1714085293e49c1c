//! `[delivery]`, `[deliveries.NAME]`, `[[route]]` and `default_delivery`: where the relay sends
//! events.
//!
//! One delivery: a `[delivery]` section. Several: named `[deliveries.NAME]` sections (same keys
//! as `[delivery]`), `[[route]]` entries sending topics to them, and a default — the `[delivery]`
//! section or `default_delivery = "NAME"`, not both — built into a [`TopicRouter`]: the route
//! naming the topic exactly first, else the first glob route that matches it in file order, else
//! the default; an event no route takes fails (retried, then dead-lettered, never published).
//!
//! Each kind's keys belong to its broker crate's config type ([`BrokerConfig`] is a
//! `kind`-tagged enum over them); this module adds what every section takes (circuit breaker,
//! rate limit), the router, the environment overrides, and the secrets resolution
//! ([`hare_outbox::secrets`]): a URL that may carry a password is read from `url_env` or
//! `url_file`, and a `url` written in the file with a password in it is refused; webhook
//! secrets, MQTT passwords and secret Kafka properties likewise.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

use anyhow::Context as _;
use hare_outbox::kafka::KafkaDeliveryConfig;
use hare_outbox::mqtt::MqttDeliveryConfig;
use hare_outbox::nats::NatsDeliveryConfig;
use hare_outbox::rabbitmq::RabbitMqDeliveryConfig;
use hare_outbox::redis::RedisDeliveryConfig;
use hare_outbox::secrets::{ConfigError, Secrets};
use hare_outbox::taskiq::TaskiqDeliveryConfig;
use hare_outbox::webhook::WebhookDeliveryConfig;
use hare_outbox::{JsonLinesDelivery, TopicRouter};
use serde::de::{Error as _, MapAccess};
use serde::{Deserialize, Deserializer};

use crate::error::usage;

/// Overrides the webhook URL of the config file.
pub const ENV_WEBHOOK_URL: &str = "HARE_OUTBOX_WEBHOOK_URL";
/// The environment variable read for the webhook secret when `secret_env` is not set.
pub const ENV_WEBHOOK_SECRET: &str = "HARE_OUTBOX_WEBHOOK_SECRET";
/// Overrides the URL of the `[delivery]` section whatever its kind (the bootstrap servers for
/// `kafka`); without a `[delivery]` section its scheme picks the kind.
pub const ENV_DELIVERY_URL: &str = "HARE_OUTBOX_DELIVERY_URL";

/// Declares [`BrokerConfig`] and what goes with each of its arms: one line per broker.
macro_rules! brokers {
    ($($(#[$doc:meta])* $arm:ident($config:ty) = $kind:literal;)*) => {
        /// One delivery, by its `kind`: the config type of the broker's crate.
        #[derive(Debug, Clone, Deserialize)]
        #[serde(tag = "kind", rename_all = "lowercase")]
        pub enum BrokerConfig {
            /// JSON lines on standard output.
            Stdout,
            $($(#[$doc])* $arm($config),)*
        }

        /// Each kind with the keys its section may set besides `kind` (and
        /// [`DESTINATION_KEYS`]).
        const KINDS: &[(&str, &[&str])] = &[("stdout", &[]), $(($kind, <$config>::KEYS),)*];

        impl BrokerConfig {
            /// The broker's config behind the shared seam; `None` for `stdout`.
            pub fn broker(&self) -> Option<&dyn hare_outbox::delivery::DeliveryConfig> {
                match self {
                    BrokerConfig::Stdout => None,
                    $(BrokerConfig::$arm(c) => Some(c),)*
                }
            }

            fn broker_mut(&mut self) -> Option<&mut dyn hare_outbox::delivery::DeliveryConfig> {
                match self {
                    BrokerConfig::Stdout => None,
                    $(BrokerConfig::$arm(c) => Some(c),)*
                }
            }
        }
    };
}

brokers! {
    /// HTTP POST to a URL.
    Webhook(WebhookDeliveryConfig) = "webhook";
    /// Kafka topics.
    Kafka(KafkaDeliveryConfig) = "kafka";
    /// A RabbitMQ exchange.
    Rabbitmq(RabbitMqDeliveryConfig) = "rabbitmq";
    /// Redis streams.
    Redis(RedisDeliveryConfig) = "redis";
    /// NATS JetStream.
    Nats(NatsDeliveryConfig) = "nats";
    /// An MQTT broker, QoS 1.
    Mqtt(MqttDeliveryConfig) = "mqtt";
    /// taskiq task messages on the Redis list or RabbitMQ queue a Python taskiq worker reads.
    Taskiq(TaskiqDeliveryConfig) = "taskiq";
}

/// Every key a delivery section may hold, for the message about an unknown one.
fn all_keys() -> &'static [&'static str] {
    static KEYS: OnceLock<Vec<&'static str>> = OnceLock::new();
    KEYS.get_or_init(|| {
        let mut keys = vec!["kind"];
        for key in KINDS.iter().flat_map(|(_, keys)| keys.iter()) {
            if !keys.contains(key) {
                keys.push(key);
            }
        }
        keys.extend(["secret", "password"]);
        keys.extend(DESTINATION_KEYS);
        keys
    })
}

/// `[delivery]` and each `[deliveries.NAME]`: its kind, the keys every kind takes, and the
/// rest, checked against the kind when it is resolved. A key of no kind, or an unknown kind, is
/// refused when the file is read.
#[derive(Debug, Default, Clone)]
pub struct DeliverySection {
    /// `stdout`, `webhook`, `kafka`, `rabbitmq`, `redis`, `nats`, `mqtt` or `taskiq`.
    pub kind: Option<String>,
    /// The circuit breaker and rate limit.
    destination: DestinationSection,
    /// The kind's own keys.
    table: toml::Table,
}

/// The kinds, as written after `kind =`.
fn kind_names() -> &'static [&'static str] {
    static NAMES: OnceLock<Vec<&'static str>> = OnceLock::new();
    NAMES.get_or_init(|| KINDS.iter().map(|(kind, _)| *kind).collect())
}

/// A key of a delivery section, refused where it is written when no kind has it.
struct SectionKey(String);

impl<'de> Deserialize<'de> for SectionKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let key = String::deserialize(deserializer)?;
        if !all_keys().contains(&key.as_str()) {
            return Err(D::Error::unknown_field(&key, all_keys()));
        }
        Ok(SectionKey(key))
    }
}

/// The value of `kind`, refused where it is written when it names no kind.
struct KindName(String);

impl<'de> Deserialize<'de> for KindName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let kind = String::deserialize(deserializer)?;
        if !kind_names().contains(&kind.as_str()) {
            return Err(D::Error::unknown_variant(&kind, kind_names()));
        }
        Ok(KindName(kind))
    }
}

impl<'de> Deserialize<'de> for DeliverySection {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = DeliverySection;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a delivery section")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut section = DeliverySection::default();
                let mut common = toml::Table::new();
                while let Some(SectionKey(key)) = map.next_key()? {
                    if key == "kind" {
                        section.kind = Some(map.next_value::<KindName>()?.0);
                        continue;
                    }
                    let value = map.next_value_seed(TypedValue { key: &key })?;
                    if DESTINATION_KEYS.contains(&key.as_str()) {
                        common.insert(key, value);
                    } else {
                        section.table.insert(key, value);
                    }
                }
                section.destination = DestinationSection::deserialize(toml::Value::Table(common))
                    .map_err(A::Error::custom)?;
                Ok(section)
            }
        }
        deserializer.deserialize_map(Visitor)
    }
}

/// The value of `key`, checked against the type the key has in the kinds that take it (the
/// same in each), so a value of the wrong type is refused where it is written.
struct TypedValue<'a> {
    key: &'a str,
}

impl<'de> serde::de::DeserializeSeed<'de> for TypedValue<'_> {
    type Value = toml::Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<toml::Value, D::Error> {
        let value = toml::Value::deserialize(deserializer)?;
        let mut one = toml::Table::new();
        one.insert(self.key.to_owned(), value.clone());
        let checked = if DESTINATION_KEYS.contains(&self.key) {
            DestinationSection::deserialize(toml::Value::Table(one)).map(drop)
        } else if let Some((kind, _)) = KINDS.iter().find(|(_, keys)| keys.contains(&self.key)) {
            one.insert("kind".to_owned(), toml::Value::String((*kind).to_owned()));
            BrokerConfig::deserialize(toml::Value::Table(one)).map(drop)
        } else {
            Ok(())
        };
        checked.map_err(|e| D::Error::custom(e.message()))?;
        Ok(value)
    }
}

/// The keys of [`DESTINATION_KEYS`], as written.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct DestinationSection {
    breaker: Option<bool>,
    breaker_failure_threshold: Option<i64>,
    breaker_probe_interval_seconds: Option<f64>,
    breaker_probe_interval_max_seconds: Option<f64>,
    max_per_second: Option<f64>,
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

/// One delivery or a router, resolved: secrets read, every value checked.
#[derive(Debug, Clone)]
#[allow(
    clippy::large_enum_variant,
    reason = "one value per config file, made once at start-up"
)]
pub enum DeliverySettings {
    /// One delivery.
    One(BrokerConfig),
    /// Named deliveries behind a [`TopicRouter`].
    Routed(RouterSettings),
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
    let secrets = Secrets::new(env, base_dir);
    let main_options = delivery
        .as_ref()
        .map(|s| DestinationOptions::of(&s.destination))
        .transpose()
        .context("[delivery]")?
        .unwrap_or_default();
    if !routed {
        let settings =
            main_section(delivery, &secrets, warnings).with_context(|| "[delivery]".to_owned())?;
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
        let kind = section.kind.clone().ok_or_else(|| {
            usage(format!(
                "{what}: kind is missing; allowed: {}",
                kinds_allowed()
            ))
        })?;
        options.insert(
            name.clone(),
            DestinationOptions::of(&section.destination).context(what.clone())?,
        );
        let settings = section_settings(&kind, section, None, &secrets, warnings).context(what)?;
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
            let has_env =
                secrets.var(ENV_WEBHOOK_URL).is_some() || secrets.var(ENV_DELIVERY_URL).is_some();
            if section.is_some() || has_env {
                let settings = main_section(section, &secrets, warnings)
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
    // The router checks the patterns; a bad one is a config error now.
    let mut check = TopicRouter::new();
    for (i, (topic, _)) in route_list.iter().enumerate() {
        check = check
            .route(topic, JsonLinesDelivery::stdout())
            .with_context(|| format!("[[route]] #{} (topic {topic:?})", i + 1))?;
    }
    Ok(ResolvedDelivery {
        settings: DeliverySettings::Routed(RouterSettings {
            deliveries: named,
            routes: route_list,
            default,
            options,
        }),
        name: MAIN_DESTINATION.to_owned(),
        options: DestinationOptions::default(),
    })
}

pub(super) fn kinds_allowed() -> &'static str {
    "kind = \"stdout\", \"webhook\", \"kafka\", \"rabbitmq\", \"redis\", \"nats\" or \"mqtt\""
}

pub(super) fn secret_refused() -> anyhow::Error {
    usage(format!(
        "secret is not read from the config file; put the secret in the environment variable named by secret_env (default {ENV_WEBHOOK_SECRET}) or in a file named by secret_file"
    ))
}

/// Checks a section's keys against its kind and resolves it with the broker's config type.
/// `url_override` is a URL from the environment with the variable's name.
pub(super) fn section_settings(
    kind: &str,
    section: DeliverySection,
    url_override: Option<(String, &'static str)>,
    secrets: &Secrets<'_>,
    warnings: &mut Vec<String>,
) -> anyhow::Result<DeliverySettings> {
    let mut table = section.table;
    if table.contains_key("secret") {
        return Err(secret_refused());
    }
    if table.contains_key("password") {
        return Err(usage(
            "password is not read from the config file; put it in the environment variable named by password_env, or in a file named by password_file",
        ));
    }
    let allowed = KINDS
        .iter()
        .find(|(k, _)| *k == kind)
        .map_or(&[][..], |(_, keys)| keys);
    if let Some(key) = all_keys()
        .iter()
        .find(|k| table.contains_key(**k) && !allowed.contains(k))
    {
        let keys = if allowed.is_empty() {
            "none besides kind".to_owned()
        } else {
            allowed.join(", ")
        };
        let keys = format!("{keys} (and in every kind {})", DESTINATION_KEYS.join(", "));
        return Err(usage(format!(
            "{key} does not apply to kind = \"{kind}\"; the keys of that kind: {keys}"
        )));
    }
    table.insert("kind".to_owned(), toml::Value::String(kind.to_owned()));
    let mut config: BrokerConfig = toml::Value::Table(table)
        .try_into()
        .map_err(|e: toml::de::Error| usage(e.message().to_owned()))?;
    if let BrokerConfig::Webhook(webhook) = &mut config
        && webhook.secret_env.is_none()
        && webhook.secret_file.is_none()
    {
        if secrets.var(ENV_WEBHOOK_SECRET).is_some() {
            webhook.secret_env = Some(ENV_WEBHOOK_SECRET.to_owned());
        } else {
            warnings.push(format!(
                "webhook requests are not signed: set {ENV_WEBHOOK_SECRET}, secret_env or secret_file"
            ));
        }
    }
    if let Some(broker) = config.broker_mut() {
        if let Some((value, variable)) = url_override {
            let more = broker
                .use_url_from_env(variable, &value)
                .map_err(|e| config_error(kind, e))?;
            warnings.extend(more);
        }
        broker.resolve(secrets).map_err(|e| config_error(kind, e))?;
    }
    Ok(DeliverySettings::One(config))
}

/// A broker config's error; a missing address also names the variable that can give it.
fn config_error(kind: &str, error: ConfigError) -> anyhow::Error {
    if !error.is_missing_endpoint() {
        return anyhow::Error::new(error);
    }
    let hint = if kind == "webhook" {
        format!("the environment variable {ENV_WEBHOOK_URL}")
    } else {
        format!("the environment variable {ENV_DELIVERY_URL} for [delivery]")
    };
    usage(format!("{error} (or {hint})"))
}

mod build;
mod destination;
mod env;
#[cfg(test)]
mod tests;

pub use destination::{DESTINATION_KEYS, DestinationOptions};
use env::main_section;
