//! The seam between a program's config file and the broker crates' config types.

use std::sync::Arc;

use super::Delivery;
use crate::secrets::{ConfigError, SecretUrl, Secrets};

/// A broker's delivery config (`KafkaDeliveryConfig`, `RedisDeliveryConfig`, …): what a
/// program holding a `kind`-tagged enum over them needs, without knowing the broker.
///
/// The life of one: deserialized from a config file (`serde`, unknown keys refused), then
/// optionally [`DeliveryConfig::use_url_from_env`], then [`DeliveryConfig::resolve`] (secrets
/// read, every value checked), then [`DeliveryConfig::build_delivery`] as often as needed.
pub trait DeliveryConfig: std::fmt::Debug + Send + Sync {
    /// The `kind` written in a config file: `webhook`, `kafka`, `rabbitmq`, …
    fn kind(&self) -> &'static str;

    /// The broker's address comes from the environment variable `variable` (whose value is
    /// `value`) instead of the config's `url`, `url_env` and `url_file` (or
    /// `bootstrap_servers`). Returns warnings about keys the override makes unused.
    ///
    /// # Errors
    /// A [`ConfigError`] when the config sets its address in more than one way.
    fn use_url_from_env(&mut self, variable: &str, value: &str)
    -> Result<Vec<String>, ConfigError>;

    /// Reads the secrets the config refers to from `secrets` and checks every value, so that
    /// [`DeliveryConfig::build_delivery`] only fails on what needs the network.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the key, the value and what is allowed.
    fn resolve(&mut self, secrets: &Secrets<'_>) -> Result<(), ConfigError>;

    /// The broker's URL as [`DeliveryConfig::resolve`] read it, with where it came from;
    /// `None` before, or for a broker given otherwise (Kafka's `bootstrap_servers`, MQTT's
    /// `host`).
    fn resolved_url(&self) -> Option<&SecretUrl> {
        None
    }

    /// A one-line description for a start-up log: the broker's address with its password
    /// hidden, and where it came from.
    fn describe(&self) -> String;

    /// The delivery. Nothing is connected yet (a Kafka producer starts connecting in the
    /// background). Without [`DeliveryConfig::resolve`] first, secrets come from the
    /// process's environment and relative files from the working directory.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the value the delivery refused.
    fn build_delivery(&self) -> Result<Arc<dyn Delivery>, ConfigError>;
}
