//! [`KafkaDeliveryConfig`]: the Kafka delivery as a config file describes it.

use std::collections::BTreeMap;
use std::sync::Arc;

use hare_outbox_core::Delivery;
use hare_outbox_core::delivery::DeliveryConfig;
use hare_outbox_core::secrets::{ConfigError, Secrets, non_empty, seconds};
use rdkafka::producer::FutureProducer;
use serde::Deserialize;

use crate::delivery::producer_defaults;
use crate::{DEFAULT_TIMEOUT, KafkaDelivery, invalid_topic_reason};

/// The Kafka delivery as a config file describes it (`kind = "kafka"` in the `hare-outbox`
/// command's `[delivery]`).
///
/// The producer gets the settings of [`KafkaDelivery::new`] (`acks=all`,
/// `enable.idempotence=true`, `partitioner=murmur2_random`, `message.timeout.ms` and
/// `request.timeout.ms` = the timeout), then `properties`, then `properties_env`. A property
/// whose value is a secret (a name with `password` or `secret`, `ssl.key*`, `ssl_key`,
/// `sasl.oauthbearer.config`) is only taken from `properties_env`, an environment variable
/// (see [`hare_outbox_core::secrets`]); `Debug` hides those values.
///
/// # Example
///
/// ```
/// use hare_outbox_kafka::KafkaDeliveryConfig;
///
/// let config: KafkaDeliveryConfig = toml::from_str(
///     r#"
///     bootstrap_servers = "127.0.0.1:9092"
///     topic = "events"
///     properties = { "compression.type" = "lz4", "linger.ms" = 5 }
///     properties_env = { "sasl.password" = "KAFKA_PASSWORD" }
///     "#,
/// )?;
/// assert_eq!(config.topic.as_deref(), Some("events"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct KafkaDeliveryConfig {
    /// `host:port[,host:port…]`; required.
    pub bootstrap_servers: Option<String>,
    /// The topic every event goes to. Defaults to the event's own topic.
    pub topic: Option<String>,
    /// Extra librdkafka producer properties (strings, numbers or booleans), applied after the
    /// defaults. Defaults to none.
    pub properties: Option<BTreeMap<String, serde_json::Value>>,
    /// librdkafka properties read from environment variables: property name → variable name.
    /// Defaults to none.
    pub properties_env: Option<BTreeMap<String, String>>,
    /// Timeout of one delivery, in seconds (also `message.timeout.ms`). Defaults to 10 s.
    pub timeout_seconds: Option<f64>,
    #[serde(skip)]
    resolved: Option<Resolved>,
}

/// The properties with the values from the environment.
#[derive(Clone)]
struct Resolved {
    properties: Vec<(String, String)>,
    secret: Vec<String>,
}

impl std::fmt::Debug for KafkaDeliveryConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let properties = self.resolved.as_ref().map(|r| {
            r.properties
                .iter()
                .map(|(k, v)| {
                    let shown = if r.secret.contains(k) { "***" } else { v };
                    (k.as_str(), shown)
                })
                .collect::<Vec<_>>()
        });
        f.debug_struct("KafkaDeliveryConfig")
            .field("bootstrap_servers", &self.bootstrap_servers)
            .field("topic", &self.topic)
            .field("properties", &properties)
            .field("properties_env", &self.properties_env)
            .field("timeout_seconds", &self.timeout_seconds)
            .finish()
    }
}

/// Whether the property `name` holds a secret, so only `properties_env` may set it: passwords
/// and secrets, librdkafka's inline key material (`ssl.key.pem`, `ssl_key`, `ssl.keystore…`)
/// and the OAuth bearer configuration.
pub fn is_secret_property(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.contains("password")
        || lower.contains("secret")
        || lower.starts_with("ssl.key")
        || lower == "ssl_key"
        || lower == "sasl.oauthbearer.config"
}

/// A value as TOML writes it (`[1, 2]`, `{ a = 1 }`), for an error message.
fn shown(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::Array(items) => {
            let items: Vec<String> = items.iter().map(shown).collect();
            format!("[{}]", items.join(", "))
        }
        serde_json::Value::Object(map) => {
            let items: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{k} = {}", shown(v)))
                .collect();
            format!("{{ {} }}", items.join(", "))
        }
        other => other.to_string(),
    }
}

impl KafkaDeliveryConfig {
    /// The keys a config may set.
    pub const KEYS: &'static [&'static str] = &[
        "bootstrap_servers",
        "topic",
        "properties",
        "properties_env",
        "timeout_seconds",
    ];

    /// The librdkafka properties as [`DeliveryConfig::resolve`] read them (the file's, then
    /// the environment's), applied after the defaults; `None` before.
    pub fn resolved_properties(&self) -> Option<&[(String, String)]> {
        self.resolved.as_ref().map(|r| r.properties.as_slice())
    }

    /// The properties of the file and of the environment, in order, and the names of the
    /// latter.
    fn properties(&self, secrets: &Secrets<'_>) -> Result<Resolved, ConfigError> {
        if let Some(resolved) = &self.resolved {
            return Ok(resolved.clone());
        }
        let mut properties = Vec::new();
        for (name, value) in self.properties.iter().flatten() {
            if name == "bootstrap.servers" {
                return Err(ConfigError::new(
                    "properties.\"bootstrap.servers\" is set by bootstrap_servers; set it there",
                ));
            }
            if is_secret_property(name) {
                return Err(ConfigError::new(format!(
                    "properties.{name:?} is a secret, and secrets are not read from the config file; name the environment variable holding it in properties_env, e.g. properties_env = {{ {name:?} = \"KAFKA_PASSWORD\" }}"
                )));
            }
            let text = match value {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Number(n) => n.to_string(),
                serde_json::Value::Bool(b) => b.to_string(),
                other => {
                    return Err(ConfigError::new(format!(
                        "properties.{name:?} = {} is not allowed; use a string, number or boolean",
                        shown(other)
                    )));
                }
            };
            properties.push((name.clone(), text));
        }
        let mut secret = Vec::new();
        for (name, variable) in self.properties_env.iter().flatten() {
            if properties.iter().any(|(n, _)| n == name) {
                return Err(ConfigError::new(format!(
                    "property {name:?} is set in both properties and properties_env; choose one"
                )));
            }
            let value = secrets.var(variable).ok_or_else(|| {
                ConfigError::new(format!(
                    "properties_env.{name:?} = {variable:?} names an environment variable that is not set or empty"
                ))
            })?;
            properties.push((name.clone(), value));
            secret.push(name.clone());
        }
        Ok(Resolved { properties, secret })
    }

    /// `bootstrap_servers`, the topic and the timeout, checked.
    fn checked(&self) -> Result<(String, std::time::Duration), ConfigError> {
        let servers = non_empty(self.bootstrap_servers.clone()).ok_or_else(|| {
            ConfigError::missing_endpoint(
                "kind = \"kafka\" needs bootstrap_servers, e.g. \"127.0.0.1:9092\"",
            )
        })?;
        if let Some(topic) = &self.topic
            && let Some(reason) = invalid_topic_reason(topic)
        {
            return Err(ConfigError::new(format!(
                "topic = {topic:?} is not a valid Kafka topic name: {reason}"
            )));
        }
        let timeout = self
            .timeout_seconds
            .map(|v| seconds("timeout_seconds", v, false))
            .transpose()?
            .unwrap_or(DEFAULT_TIMEOUT);
        Ok((servers, timeout))
    }

    /// The delivery; properties from the environment as [`DeliveryConfig::resolve`] read
    /// them, or else from the process's environment. The producer starts connecting in the
    /// background.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the key: no `bootstrap_servers`, an invalid topic name, a
    /// secret property in `properties`, a property set twice or of another type, an unset
    /// variable, `timeout_seconds` not above 0, settings librdkafka refuses.
    pub fn build(&self) -> Result<KafkaDelivery, ConfigError> {
        let (servers, timeout) = self.checked()?;
        let resolved = self.properties(&Secrets::default())?;
        let ms = timeout.as_millis().clamp(1, i32::MAX as u128).to_string();
        let mut config = producer_defaults(&servers);
        config
            .set("message.timeout.ms", &ms)
            .set("request.timeout.ms", &ms);
        for (name, value) in &resolved.properties {
            config.set(name, value);
        }
        let producer: FutureProducer = config.create().map_err(|e| {
            ConfigError::new(format!(
                "librdkafka refused the producer settings (bootstrap_servers {servers:?}, properties {}): {e}",
                resolved
                    .properties
                    .iter()
                    .map(|(k, _)| k.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        let mut delivery = KafkaDelivery::from_producer(producer).with_timeout(timeout)?;
        if let Some(topic) = &self.topic {
            delivery = delivery.with_topic(topic.clone())?;
        }
        Ok(delivery)
    }
}

impl DeliveryConfig for KafkaDeliveryConfig {
    fn kind(&self) -> &'static str {
        "kafka"
    }

    fn use_url_from_env(
        &mut self,
        _variable: &str,
        value: &str,
    ) -> Result<Vec<String>, ConfigError> {
        self.bootstrap_servers = Some(value.to_owned());
        Ok(Vec::new())
    }

    /// Checks the values and reads `properties_env`; the producer is made by
    /// [`DeliveryConfig::build_delivery`] only.
    fn resolve(&mut self, secrets: &Secrets<'_>) -> Result<(), ConfigError> {
        self.checked()?;
        self.resolved = Some(self.properties(secrets)?);
        Ok(())
    }

    fn describe(&self) -> String {
        format!(
            "kafka {} topic {}",
            self.bootstrap_servers.as_deref().unwrap_or(""),
            self.topic.as_deref().unwrap_or("= event topic")
        )
    }

    fn build_delivery(&self) -> Result<Arc<dyn Delivery>, ConfigError> {
        Ok(Arc::new(self.build()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_properties_come_only_from_the_environment() {
        let config: KafkaDeliveryConfig = toml::from_str(
            "bootstrap_servers = \"h:9092\"\nproperties = { \"sasl.password\" = \"x\" }",
        )
        .expect("valid TOML");
        let e = config.build().expect_err("a secret in the file");
        assert!(e.message().contains("properties_env"), "{e}");
        assert!(!e.message().contains("\"x\""), "{e}");
        let env = |name: &str| (name == "KP").then(|| "kafka-pw".to_owned());
        let mut config: KafkaDeliveryConfig = toml::from_str(
            "bootstrap_servers = \"h:9092\"\nproperties = { \"linger.ms\" = 5, \"a.b\" = [1, 2] }",
        )
        .expect("valid TOML");
        let e = config
            .resolve(&Secrets::new(&env, "."))
            .expect_err("an array value");
        assert_eq!(
            e.message(),
            "properties.\"a.b\" = [1, 2] is not allowed; use a string, number or boolean"
        );
        let mut config: KafkaDeliveryConfig = toml::from_str(
            "bootstrap_servers = \"h:9092\"\nproperties = { \"linger.ms\" = 5 }\nproperties_env = { \"sasl.password\" = \"KP\" }",
        )
        .expect("valid TOML");
        config
            .resolve(&Secrets::new(&env, "."))
            .expect("the variable is set");
        assert_eq!(
            config.resolved_properties(),
            Some(
                &[
                    ("linger.ms".to_owned(), "5".to_owned()),
                    ("sasl.password".to_owned(), "kafka-pw".to_owned())
                ][..]
            )
        );
        assert!(!format!("{config:?}").contains("kafka-pw"));
    }
}
