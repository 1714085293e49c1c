//! [`RabbitMqDeliveryConfig`]: the RabbitMQ delivery as a config file describes it.

use std::path::PathBuf;
use std::sync::Arc;

use hare_outbox_core::Delivery;
use hare_outbox_core::delivery::DeliveryConfig;
use hare_outbox_core::secrets::{ConfigError, SecretUrl, Secrets, seconds, use_url_env};
use serde::Deserialize;

use crate::RabbitMqDelivery;

/// The RabbitMQ delivery as a config file describes it (`kind = "rabbitmq"` in the
/// `hare-outbox` command's `[delivery]`).
///
/// The URL (`amqp://user:password@host:5672/vhost`) is given by exactly one of `url` (no
/// password allowed in it), `url_env` or `url_file`; see [`hare_outbox_core::secrets`].
///
/// # Example
///
/// ```
/// use hare_outbox_rabbitmq::RabbitMqDeliveryConfig;
///
/// let config: RabbitMqDeliveryConfig = toml::from_str(
///     r#"
///     url = "amqp://127.0.0.1:5672/%2f"
///     exchange = "events"
///     connection_name = "billing-relay"
///     "#,
/// )?;
/// let delivery = config.build()?;
/// # let _ = delivery;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RabbitMqDeliveryConfig {
    /// The URL, written in the file; refused when it carries a password.
    pub url: Option<String>,
    /// The environment variable holding the URL.
    pub url_env: Option<String>,
    /// A file holding the URL (relative to the config file's directory).
    pub url_file: Option<PathBuf>,
    /// Timeout of one delivery call, in seconds. Defaults to 10 s.
    pub timeout_seconds: Option<f64>,
    /// The exchange published to; it must exist. Defaults to the default exchange (an empty
    /// name is the default exchange too).
    pub exchange: Option<String>,
    /// The routing key of every message. Defaults to the event's topic.
    pub routing_key: Option<String>,
    /// The connection name the broker shows. Defaults to none.
    pub connection_name: Option<String>,
    #[serde(skip)]
    resolved: Option<SecretUrl>,
}

impl RabbitMqDeliveryConfig {
    /// The keys a config may set.
    pub const KEYS: &'static [&'static str] = &[
        "url",
        "url_env",
        "url_file",
        "timeout_seconds",
        "exchange",
        "routing_key",
        "connection_name",
    ];

    fn url(&self, secrets: &Secrets<'_>) -> Result<SecretUrl, ConfigError> {
        if let Some(url) = &self.resolved {
            return Ok(url.clone());
        }
        secrets
            .url(
                self.url.as_deref(),
                self.url_env.as_deref(),
                self.url_file.as_deref(),
            )?
            .ok_or_else(|| {
                ConfigError::missing_endpoint("kind = \"rabbitmq\" needs url, url_env or url_file")
            })
    }

    fn delivery(&self, url: &SecretUrl) -> Result<RabbitMqDelivery, ConfigError> {
        let timeout = self
            .timeout_seconds
            .map(|v| seconds("timeout_seconds", v, false))
            .transpose()?;
        let mut delivery = RabbitMqDelivery::new(&url.value)?;
        if let Some(exchange) = self.exchange.as_ref().filter(|e| !e.is_empty()) {
            delivery = delivery.with_exchange(exchange.clone())?;
        }
        if let Some(key) = &self.routing_key {
            delivery = delivery.with_routing_key(key.clone())?;
        }
        if let Some(name) = &self.connection_name {
            delivery = delivery.with_connection_name(name.clone());
        }
        if let Some(timeout) = timeout {
            delivery = delivery.with_timeout(timeout);
        }
        Ok(delivery)
    }

    /// The delivery; secrets from [`DeliveryConfig::resolve`], or else from the process's
    /// environment. Nothing is connected yet.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the key: no URL, an unset variable, `timeout_seconds` not above
    /// 0, a URL, exchange or routing key the delivery refuses.
    pub fn build(&self) -> Result<RabbitMqDelivery, ConfigError> {
        let url = self.url(&Secrets::default())?;
        self.delivery(&url)
    }
}

impl DeliveryConfig for RabbitMqDeliveryConfig {
    fn kind(&self) -> &'static str {
        "rabbitmq"
    }

    fn use_url_from_env(
        &mut self,
        variable: &str,
        _value: &str,
    ) -> Result<Vec<String>, ConfigError> {
        use_url_env(
            &mut self.url,
            &mut self.url_env,
            &mut self.url_file,
            variable,
        )?;
        Ok(Vec::new())
    }

    fn resolve(&mut self, secrets: &Secrets<'_>) -> Result<(), ConfigError> {
        let url = self.url(secrets)?;
        self.delivery(&url)?;
        self.resolved = Some(url);
        Ok(())
    }

    fn resolved_url(&self) -> Option<&SecretUrl> {
        self.resolved.as_ref()
    }

    fn describe(&self) -> String {
        let exchange = self.exchange.as_deref().unwrap_or("");
        let key = self.routing_key.as_deref().unwrap_or("= event topic");
        match &self.resolved {
            Some(url) => format!(
                "rabbitmq {} (from {}) exchange {exchange:?} routing key {key}",
                url.shown(),
                url.source
            ),
            None => format!("rabbitmq exchange {exchange:?} routing key {key}"),
        }
    }

    fn build_delivery(&self) -> Result<Arc<dyn Delivery>, ConfigError> {
        Ok(Arc::new(self.build()?))
    }
}
