//! [`RedisDeliveryConfig`]: the Redis Streams delivery as a config file describes it.

use std::path::PathBuf;
use std::sync::Arc;

use hare_outbox_core::Delivery;
use hare_outbox_core::delivery::DeliveryConfig;
use hare_outbox_core::secrets::{ConfigError, SecretUrl, Secrets, seconds, use_url_env};
use serde::Deserialize;

use crate::RedisStreamsDelivery;

/// The Redis Streams delivery as a config file describes it (`kind = "redis"` in the
/// `hare-outbox` command's `[delivery]`).
///
/// The URL (`redis://[:password@]host:port/db`) is given by exactly one of `url` (no password
/// allowed in it), `url_env` or `url_file`; see [`hare_outbox_core::secrets`].
///
/// # Example
///
/// ```
/// use hare_outbox_redis::RedisDeliveryConfig;
///
/// let config: RedisDeliveryConfig = toml::from_str(
///     r#"
///     url = "redis://127.0.0.1:6379/0"
///     stream = "events"
///     max_length = 100000
///     timeout_seconds = 5
///     "#,
/// )?;
/// let delivery = config.build()?;
/// # let _ = delivery;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RedisDeliveryConfig {
    /// The URL, written in the file; refused when it carries a password.
    pub url: Option<String>,
    /// The environment variable holding the URL.
    pub url_env: Option<String>,
    /// A file holding the URL (relative to the config file's directory).
    pub url_file: Option<PathBuf>,
    /// The stream every event is appended to instead of the stream named like its topic.
    /// Defaults to the event's topic.
    pub stream: Option<String>,
    /// About the most entries kept per stream (`XADD … MAXLEN ~`), 1 or more. Defaults to no
    /// trimming.
    pub max_length: Option<i64>,
    /// Timeout of one delivery call, in seconds. Defaults to 10 s.
    pub timeout_seconds: Option<f64>,
    #[serde(skip)]
    resolved: Option<SecretUrl>,
}

impl RedisDeliveryConfig {
    /// The keys a config may set.
    pub const KEYS: &'static [&'static str] = &[
        "url",
        "url_env",
        "url_file",
        "timeout_seconds",
        "stream",
        "max_length",
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
                ConfigError::missing_endpoint("kind = \"redis\" needs url, url_env or url_file")
            })
    }

    fn delivery(&self, url: &SecretUrl) -> Result<RedisStreamsDelivery, ConfigError> {
        let max_length = self
            .max_length
            .map(|v| {
                usize::try_from(v).ok().filter(|v| *v > 0).ok_or_else(|| {
                    ConfigError::new(format!(
                        "max_length = {v} is not allowed; use 1 or more, or leave it out for no trimming"
                    ))
                })
            })
            .transpose()?;
        let timeout = self
            .timeout_seconds
            .map(|v| seconds("timeout_seconds", v, false))
            .transpose()?;
        let mut delivery = RedisStreamsDelivery::new(&url.value)?;
        if let Some(stream) = &self.stream {
            delivery = delivery.with_stream(stream.clone())?;
        }
        if let Some(max_length) = max_length {
            delivery = delivery.with_max_length(max_length)?;
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
    /// A [`ConfigError`] naming the key: no URL, an unset variable, `max_length` below 1,
    /// `timeout_seconds` not above 0, a URL or stream name Redis cannot take.
    pub fn build(&self) -> Result<RedisStreamsDelivery, ConfigError> {
        let url = self.url(&Secrets::default())?;
        self.delivery(&url)
    }
}

impl DeliveryConfig for RedisDeliveryConfig {
    fn kind(&self) -> &'static str {
        "redis"
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
        let stream = self.stream.as_deref().unwrap_or("= event topic");
        match &self.resolved {
            Some(url) => format!(
                "redis {} (from {}) stream {stream}",
                url.shown(),
                url.source
            ),
            None => format!("redis stream {stream}"),
        }
    }

    fn build_delivery(&self) -> Result<Arc<dyn Delivery>, ConfigError> {
        Ok(Arc::new(self.build()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> RedisDeliveryConfig {
        toml::from_str(text).expect("valid TOML of the config")
    }

    #[test]
    fn values_are_checked_naming_the_key() {
        let e = config("url = \"redis://127.0.0.1:6379/0\"\nmax_length = 0")
            .build()
            .expect_err("max_length 0");
        assert_eq!(
            e.message(),
            "max_length = 0 is not allowed; use 1 or more, or leave it out for no trimming"
        );
        let e = config("stream = \"s\"").build().expect_err("no url");
        assert!(e.is_missing_endpoint(), "{e}");
        let e = toml::from_str::<RedisDeliveryConfig>("url = \"redis://h/0\"\nstreem = \"s\"")
            .expect_err("unknown key");
        assert!(e.to_string().contains("unknown field `streem`"), "{e}");
    }

    #[test]
    fn the_url_comes_from_the_environment_and_is_never_shown() {
        let env = |name: &str| (name == "R").then(|| "redis://:pw@127.0.0.1:6379/2".to_owned());
        let mut config = config("url_env = \"R\"\nstream = \"audit\"");
        config
            .resolve(&Secrets::new(&env, "."))
            .expect("the variable is set");
        let described = config.describe();
        assert_eq!(
            described,
            "redis redis://:***@127.0.0.1:6379/2 (from $R) stream audit"
        );
        assert!(!format!("{config:?}").contains("pw"));
        config.build().expect("built from the resolved URL");
    }
}
