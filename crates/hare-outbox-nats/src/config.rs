//! [`NatsDeliveryConfig`]: the NATS JetStream delivery as a config file describes it.

use std::path::PathBuf;
use std::sync::Arc;

use hare_outbox_core::Delivery;
use hare_outbox_core::delivery::DeliveryConfig;
use hare_outbox_core::secrets::{ConfigError, SecretUrl, Secrets, seconds, use_url_env};
use serde::Deserialize;

use crate::NatsDelivery;

/// The NATS JetStream delivery as a config file describes it (`kind = "nats"` in the
/// `hare-outbox` command's `[delivery]`).
///
/// The URL (`nats://[user:password@]host:4222`, several separated by commas) is given by
/// exactly one of `url` (no password or token allowed in it), `url_env` or `url_file`; see
/// [`hare_outbox_core::secrets`].
///
/// # Example
///
/// ```
/// use hare_outbox_nats::NatsDeliveryConfig;
///
/// let config: NatsDeliveryConfig = toml::from_str(
///     r#"
///     url = "nats://127.0.0.1:4222"
///     subject_prefix = "events."
///     stream = "EVENTS"
///     stream_subjects = ["events.>"]
///     "#,
/// )?;
/// let delivery = config.build()?;
/// # let _ = delivery;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct NatsDeliveryConfig {
    /// The URL, written in the file; refused when it carries a password or token.
    pub url: Option<String>,
    /// The environment variable holding the URL.
    pub url_env: Option<String>,
    /// A file holding the URL (relative to the config file's directory).
    pub url_file: Option<PathBuf>,
    /// Timeout of one delivery call, in seconds. Defaults to 10 s.
    pub timeout_seconds: Option<f64>,
    /// What the subject starts with, before the event's topic. Defaults to nothing.
    pub subject_prefix: Option<String>,
    /// The stream made sure of at the first connection (created with `stream_subjects` when
    /// missing). Defaults to none: the stream must exist.
    pub stream: Option<String>,
    /// The subjects of `stream` when it has to be created; set together with `stream`.
    pub stream_subjects: Option<Vec<String>>,
    #[serde(skip)]
    resolved: Option<SecretUrl>,
}

impl NatsDeliveryConfig {
    /// The keys a config may set.
    pub const KEYS: &'static [&'static str] = &[
        "url",
        "url_env",
        "url_file",
        "timeout_seconds",
        "subject_prefix",
        "stream",
        "stream_subjects",
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
                ConfigError::missing_endpoint("kind = \"nats\" needs url, url_env or url_file")
            })
    }

    fn delivery(&self, url: &SecretUrl) -> Result<NatsDelivery, ConfigError> {
        let stream = match (&self.stream, &self.stream_subjects) {
            (Some(name), Some(subjects)) => Some((name, subjects)),
            (None, None) => None,
            (Some(name), None) => {
                return Err(ConfigError::new(format!(
                    "stream = {name:?} needs stream_subjects, the subjects the stream captures when it has to be created, e.g. [\"events.>\"]"
                )));
            }
            (None, Some(_)) => {
                return Err(ConfigError::new(
                    "stream_subjects needs stream, the name of the stream to make sure of",
                ));
            }
        };
        let timeout = self
            .timeout_seconds
            .map(|v| seconds("timeout_seconds", v, false))
            .transpose()?;
        let mut delivery = NatsDelivery::new(&url.value)?;
        if let Some(prefix) = &self.subject_prefix {
            delivery = delivery.with_subject_prefix(prefix.clone())?;
        }
        if let Some((name, subjects)) = stream {
            delivery = delivery.with_stream(name.clone(), subjects.iter().cloned())?;
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
    /// A [`ConfigError`] naming the key: no URL, an unset variable, `stream` without
    /// `stream_subjects` or the other way round, `timeout_seconds` not above 0, a URL, subject
    /// prefix or stream the delivery refuses.
    pub fn build(&self) -> Result<NatsDelivery, ConfigError> {
        let url = self.url(&Secrets::default())?;
        self.delivery(&url)
    }
}

impl DeliveryConfig for NatsDeliveryConfig {
    fn kind(&self) -> &'static str {
        "nats"
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
        let prefix = self.subject_prefix.as_deref().unwrap_or("");
        match &self.resolved {
            Some(url) => format!(
                "nats {} (from {}) subject {prefix}<event topic>",
                url.shown(),
                url.source
            ),
            None => format!("nats subject {prefix}<event topic>"),
        }
    }

    fn build_delivery(&self) -> Result<Arc<dyn Delivery>, ConfigError> {
        Ok(Arc::new(self.build()?))
    }
}
