//! [`KafkaWakeupConfig`]: the Kafka wake-up as a config file describes it.

use hare_outbox_core::secrets::{ConfigError, non_empty};
use serde::Deserialize;

use crate::{DEFAULT_TOPIC, KafkaWakeup, invalid_topic_reason};

/// The Kafka wake-up ([`KafkaWakeup`]) as a config file describes it (`kind = "kafka"` in the
/// `hare-outbox` command's `[wakeup]`): writers produce a signal to a topic after their commit,
/// and a relay consuming it polls at once. Writers and the relay must use the same topic.
///
/// # Example
///
/// ```
/// use hare_outbox_kafka::KafkaWakeupConfig;
///
/// let config: KafkaWakeupConfig = toml::from_str(
///     r#"
///     bootstrap_servers = "127.0.0.1:9092"
///     topic = "erp_signals"
///     create_topic = true
///     replication_factor = 3
///     "#,
/// )?;
/// let wakeup = config.build()?;
/// assert_eq!(wakeup.topic(), "erp_signals");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct KafkaWakeupConfig {
    /// `host:port[,host:port…]`. Required.
    pub bootstrap_servers: Option<String>,
    /// The signal topic. Defaults to [`DEFAULT_TOPIC`] (`hare_outbox`).
    pub topic: Option<String>,
    /// Whether a missing signal topic is created (one partition, short retention). Defaults to
    /// `true`.
    pub create_topic: Option<bool>,
    /// The replication factor of a created signal topic, 1 to 32767. Defaults to the broker's.
    pub replication_factor: Option<i32>,
}

impl KafkaWakeupConfig {
    /// The keys a config may set.
    pub const KEYS: &'static [&'static str] = &[
        "bootstrap_servers",
        "topic",
        "create_topic",
        "replication_factor",
    ];

    /// The bootstrap servers come from `servers` (a program's override, from the environment
    /// for one) instead of `bootstrap_servers`.
    pub fn use_bootstrap_servers(&mut self, servers: impl Into<String>) {
        self.bootstrap_servers = Some(servers.into());
    }

    /// Whether a missing signal topic is created: `create_topic`, default `true`.
    pub fn creates_topic(&self) -> bool {
        self.create_topic.unwrap_or(true)
    }

    /// Checks every value without connecting.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the key: no `bootstrap_servers` (then
    /// [`ConfigError::is_missing_endpoint`]), a `topic` Kafka refuses, a `replication_factor`
    /// outside 1 to 32767.
    pub fn check(&self) -> Result<(), ConfigError> {
        self.servers()?;
        if let Some(topic) = &self.topic
            && let Some(reason) = invalid_topic_reason(topic)
        {
            return Err(ConfigError::new(format!(
                "topic = {topic:?} is not a valid Kafka topic name: {reason}"
            )));
        }
        if let Some(factor) = self.replication_factor
            && !(1..=i32::from(i16::MAX)).contains(&factor)
        {
            return Err(ConfigError::new(format!(
                "replication_factor = {factor} is not allowed; use 1 to {}, or leave it out for the broker's default",
                i16::MAX
            )));
        }
        Ok(())
    }

    /// A one-line description for a start-up log.
    pub fn describe(&self) -> String {
        format!(
            "kafka {} signal topic {:?}",
            self.bootstrap_servers.as_deref().unwrap_or_default(),
            self.topic.as_deref().unwrap_or(DEFAULT_TOPIC)
        )
    }

    /// The wake-up. Its client is made here; nothing is connected until a relay subscribes.
    ///
    /// # Errors
    /// As [`KafkaWakeupConfig::check`], and the client's refusal of the servers.
    pub fn build(&self) -> Result<KafkaWakeup, ConfigError> {
        self.check()?;
        let mut wakeup =
            KafkaWakeup::new(&self.servers()?)?.with_create_topic(self.creates_topic());
        if let Some(topic) = &self.topic {
            wakeup = wakeup.with_topic(topic.clone())?;
        }
        if let Some(factor) = self.replication_factor {
            wakeup = wakeup.with_replication_factor(factor)?;
        }
        Ok(wakeup)
    }

    fn servers(&self) -> Result<String, ConfigError> {
        non_empty(self.bootstrap_servers.clone()).ok_or_else(|| {
            ConfigError::missing_endpoint(
                "kind = \"kafka\" needs bootstrap_servers, e.g. \"127.0.0.1:9092\"",
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> KafkaWakeupConfig {
        toml::from_str(text).expect("valid TOML of the config")
    }

    #[test]
    fn values_are_checked_naming_the_key() {
        let e = config("topic = \"t\"").check().expect_err("no servers");
        assert!(e.is_missing_endpoint(), "{e}");
        let e = config("bootstrap_servers = \"h:9092\"\ntopic = \"a b\"")
            .check()
            .expect_err("a topic Kafka refuses");
        assert!(e.message().starts_with("topic = \"a b\""), "{e}");
        let e = config("bootstrap_servers = \"h:9092\"\nreplication_factor = 0")
            .check()
            .expect_err("factor 0");
        assert!(
            e.message().contains("replication_factor = 0") && e.message().contains("1 to 32767"),
            "{e}"
        );
        let e =
            toml::from_str::<KafkaWakeupConfig>("bootstrap_servers = \"h:9092\"\ntopics = \"t\"")
                .expect_err("unknown key");
        assert!(e.to_string().contains("unknown field `topics`"), "{e}");
    }

    #[test]
    fn defaults_and_the_override() {
        let mut c = config("bootstrap_servers = \"h:9092\"");
        assert!(c.creates_topic());
        assert_eq!(c.describe(), "kafka h:9092 signal topic \"hare_outbox\"");
        c.use_bootstrap_servers("k1:9092");
        let wakeup = c.build().expect("valid");
        assert!(wakeup.creates_topic() && wakeup.replication_factor().is_none());
        assert_eq!(wakeup.topic(), DEFAULT_TOPIC);
        assert_eq!(c.describe(), "kafka k1:9092 signal topic \"hare_outbox\"");
    }
}
