//! [`TaskiqDeliveryConfig`]: the taskiq delivery as a config file describes it.

use std::path::PathBuf;
use std::sync::Arc;

use hare_outbox_core::Delivery;
use hare_outbox_core::delivery::DeliveryConfig;
use hare_outbox_core::secrets::{ConfigError, SecretUrl, Secrets, seconds, use_url_env};
use serde::Deserialize;

use crate::TaskiqDelivery;

/// The taskiq delivery as a config file describes it (`kind = "taskiq"` in the `hare-outbox`
/// command's `[delivery]`).
///
/// The broker URL — `redis://…` for a taskiq-redis `ListQueueBroker`, `amqp://…` for
/// taskiq-aio-pika (with the `rabbitmq` feature) — is given by exactly one of `url` (no
/// password allowed in it), `url_env` or `url_file`; see [`hare_outbox_core::secrets`].
///
/// # Example
///
/// ```
/// use hare_outbox_taskiq::TaskiqDeliveryConfig;
///
/// let config: TaskiqDeliveryConfig = toml::from_str(
///     r#"
///     url = "redis://127.0.0.1:6379/0"
///     queue = "billing"
///     "#,
/// )?;
/// let delivery = config.build()?;
/// # let _ = delivery;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct TaskiqDeliveryConfig {
    /// The URL, written in the file; refused when it carries a password.
    pub url: Option<String>,
    /// The environment variable holding the URL.
    pub url_env: Option<String>,
    /// A file holding the URL (relative to the config file's directory).
    pub url_file: Option<PathBuf>,
    /// Timeout of one delivery call, in seconds. Defaults to 10 s.
    pub timeout_seconds: Option<f64>,
    /// The queue the worker reads; a task's `queue_name` label wins. Defaults to `taskiq`.
    pub queue: Option<String>,
    /// AMQP only: the exchange. Defaults to `taskiq`.
    pub exchange: Option<String>,
    #[serde(skip)]
    resolved: Option<SecretUrl>,
}

impl TaskiqDeliveryConfig {
    /// The keys a config may set.
    pub const KEYS: &'static [&'static str] = &[
        "url",
        "url_env",
        "url_file",
        "timeout_seconds",
        "queue",
        "exchange",
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
                ConfigError::missing_endpoint("kind = \"taskiq\" needs url, url_env or url_file")
            })
    }

    fn delivery(&self, url: &SecretUrl) -> Result<TaskiqDelivery, ConfigError> {
        let timeout = self
            .timeout_seconds
            .map(|v| seconds("timeout_seconds", v, false))
            .transpose()?;
        let scheme = url
            .value
            .split_once("://")
            .map(|(scheme, _)| scheme.to_ascii_lowercase());
        let mut delivery = match scheme.as_deref() {
            Some("redis" | "rediss" | "unix") => {
                if self.exchange.is_some() {
                    return Err(ConfigError::new(
                        "exchange is an AMQP setting; a taskiq delivery to Redis takes url and queue",
                    ));
                }
                TaskiqDelivery::redis(&url.value)?
            }
            #[cfg(feature = "rabbitmq")]
            Some("amqp" | "amqps") => {
                let delivery = TaskiqDelivery::rabbitmq(&url.value)?;
                match &self.exchange {
                    Some(exchange) => delivery.with_exchange(exchange.clone())?,
                    None => delivery,
                }
            }
            _ => {
                return Err(ConfigError::new(format!(
                    "taskiq url {} is not allowed; use redis://… (taskiq-redis ListQueueBroker) or amqp://… (taskiq-aio-pika)",
                    url.shown()
                )));
            }
        };
        if let Some(queue) = &self.queue {
            delivery = delivery.with_queue_name(queue.clone())?;
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
    /// A [`ConfigError`] naming the key: no URL, an unset variable, a scheme other than
    /// `redis`/`amqp`, `exchange` with Redis, an empty queue, `timeout_seconds` not above 0.
    pub fn build(&self) -> Result<TaskiqDelivery, ConfigError> {
        let url = self.url(&Secrets::default())?;
        self.delivery(&url)
    }
}

impl DeliveryConfig for TaskiqDeliveryConfig {
    fn kind(&self) -> &'static str {
        "taskiq"
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
        let queue = self.queue.as_deref().unwrap_or("taskiq");
        match &self.resolved {
            Some(url) => format!("taskiq {} (from {}) queue {queue}", url.shown(), url.source),
            None => format!("taskiq queue {queue}"),
        }
    }

    fn build_delivery(&self) -> Result<Arc<dyn Delivery>, ConfigError> {
        Ok(Arc::new(self.build()?))
    }
}
