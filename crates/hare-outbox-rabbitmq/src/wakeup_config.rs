//! [`RabbitMqWakeupConfig`]: the RabbitMQ wake-up as a config file describes it.

use std::path::PathBuf;

use hare_outbox_core::secrets::{ConfigError, SecretUrl, Secrets, use_url_env};
use serde::Deserialize;

use crate::{DEFAULT_EXCHANGE, RabbitMqWakeup};

/// The RabbitMQ wake-up ([`RabbitMqWakeup`]) as a config file describes it (`kind = "rabbitmq"` in the
/// `hare-outbox` command's `[wakeup]`): writers publish to a fanout exchange after their commit, and a relay with a queue bound to it polls at once.
///
/// The URL (`amqp://user:password@host:port/vhost`) is given by exactly one of `url` (no password allowed in it), `url_env`
/// or `url_file`; see [`hare_outbox_core::secrets`]. Writers and the relay must use the same
/// exchange.
///
/// # Example
///
/// ```
/// use hare_outbox_rabbitmq::RabbitMqWakeupConfig;
///
/// let config: RabbitMqWakeupConfig = toml::from_str(
///     r#"
///     url = "amqp://127.0.0.1:5672/%2f"
///     exchange = "erp"
///     "#,
/// )?;
/// let wakeup = config.build()?;
/// # let _ = wakeup;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RabbitMqWakeupConfig {
    /// The URL, written in the file; refused when it carries a password.
    pub url: Option<String>,
    /// The environment variable holding the URL.
    pub url_env: Option<String>,
    /// A file holding the URL (relative to the config file's directory).
    pub url_file: Option<PathBuf>,
    /// The fanout exchange. Defaults to [`DEFAULT_EXCHANGE`] (`hare_outbox`).
    pub exchange: Option<String>,
    #[serde(skip)]
    resolved: Option<SecretUrl>,
}

impl RabbitMqWakeupConfig {
    /// The keys a config may set.
    pub const KEYS: &'static [&'static str] = &["url", "url_env", "url_file", "exchange"];

    /// The URL comes from the environment variable `variable` instead of `url`, `url_env` or
    /// `url_file` (a program's override of its config file).
    ///
    /// # Errors
    /// A [`ConfigError`] when the config sets its URL in more than one way.
    pub fn use_url_from_env(&mut self, variable: &str) -> Result<(), ConfigError> {
        use_url_env(
            &mut self.url,
            &mut self.url_env,
            &mut self.url_file,
            variable,
        )
    }

    /// Reads the URL from `secrets` and checks every value, so that [`RabbitMqWakeupConfig::build`] only
    /// fails on what needs the network.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the key: no URL (then [`ConfigError::is_missing_endpoint`]),
    /// more than one of `url`, `url_env` and `url_file`, an unset variable, a password written
    /// in `url`, a URL or fanout exchange RabbitMQ cannot take.
    pub fn resolve(&mut self, secrets: &Secrets<'_>) -> Result<(), ConfigError> {
        let url = self.url(secrets)?;
        self.wakeup(&url)?;
        self.resolved = Some(url);
        Ok(())
    }

    /// The URL as [`RabbitMqWakeupConfig::resolve`] read it, with where it came from; `None` before.
    pub fn resolved_url(&self) -> Option<&SecretUrl> {
        self.resolved.as_ref()
    }

    /// A one-line description for a start-up log, the password hidden.
    pub fn describe(&self) -> String {
        let exchange = self.exchange.as_deref().unwrap_or(DEFAULT_EXCHANGE);
        match &self.resolved {
            Some(url) => format!(
                "rabbitmq {} (from {}) exchange {exchange:?}",
                url.shown(),
                url.source
            ),
            None => format!("rabbitmq exchange {exchange:?}"),
        }
    }

    /// The wake-up; the URL from [`RabbitMqWakeupConfig::resolve`], or else from the process's environment.
    /// Nothing is connected until a relay subscribes.
    ///
    /// # Errors
    /// As [`RabbitMqWakeupConfig::resolve`].
    pub fn build(&self) -> Result<RabbitMqWakeup, ConfigError> {
        let url = self.url(&Secrets::default())?;
        self.wakeup(&url)
    }

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

    fn wakeup(&self, url: &SecretUrl) -> Result<RabbitMqWakeup, ConfigError> {
        let mut wakeup = RabbitMqWakeup::new(&url.value)?;
        if let Some(exchange) = &self.exchange {
            wakeup = wakeup.with_exchange(exchange.clone())?;
        }
        Ok(wakeup)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> RabbitMqWakeupConfig {
        toml::from_str(text).expect("valid TOML of the config")
    }

    #[test]
    fn mistakes_name_the_key() {
        let e = config("exchange = \"x\"").build().expect_err("no url");
        assert!(e.is_missing_endpoint(), "{e}");
        assert!(e.message().contains("url_env"), "{e}");
        let e = toml::from_str::<RabbitMqWakeupConfig>(
            "url = \"amqp://127.0.0.1:5672/%2f\"\nchanel = \"x\"",
        )
        .expect_err("unknown key");
        assert!(e.to_string().contains("unknown field `chanel`"), "{e}");
        let e = config("url = \"amqp://guest:pw@127.0.0.1:5672/%2f\"")
            .build()
            .expect_err("a password in the file");
        assert!(
            e.message().contains("url_env") && !e.message().contains("pw@"),
            "{e}"
        );
    }

    #[test]
    fn the_url_comes_from_the_environment_and_is_never_shown() {
        let env =
            |name: &str| (name == "U").then(|| "amqp://guest:pw@127.0.0.1:5672/%2f".to_owned());
        let mut config = config("url_env = \"U\"\nexchange = \"erp\"");
        config
            .resolve(&Secrets::new(&env, "."))
            .expect("the variable is set");
        let described = config.describe();
        assert!(
            described.contains("(from $U) exchange \"erp\""),
            "{described}"
        );
        assert!(!described.contains("pw") && !format!("{config:?}").contains("pw"));
        config.build().expect("built from the resolved URL");
        let mut overridden = RabbitMqWakeupConfig {
            url: Some("amqp://127.0.0.1:5672/%2f".to_owned()),
            ..RabbitMqWakeupConfig::default()
        };
        overridden
            .use_url_from_env("U")
            .expect("one URL source before the override");
        overridden
            .resolve(&Secrets::new(&env, "."))
            .expect("the override's variable is set");
        assert_eq!(
            overridden.resolved_url().map(|u| u.source.as_str()),
            Some("$U")
        );
    }
}
