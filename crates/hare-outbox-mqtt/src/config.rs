//! [`MqttDeliveryConfig`]: the MQTT delivery as a config file describes it.

use std::path::PathBuf;
use std::sync::Arc;

use hare_outbox_core::Delivery;
use hare_outbox_core::delivery::DeliveryConfig;
use hare_outbox_core::secrets::{
    ConfigError, SecretUrl, SecretValue, Secrets, non_empty, seconds, use_url_env,
};
use rumqttc::MqttOptions;
use serde::Deserialize;

use crate::MqttDelivery;

/// The MQTT delivery as a config file describes it (`kind = "mqtt"` in the `hare-outbox`
/// command's `[delivery]`).
///
/// The broker is given either as a URL (`mqtt://host:1883?client_id=…`, by exactly one of
/// `url`, `url_env` or `url_file`; no password allowed in `url`), or key by key: `host`,
/// `port`, `client_id`, `username`, and the password only as `password_env` or
/// `password_file` (see [`hare_outbox_core::secrets`]).
///
/// # Example
///
/// ```
/// use hare_outbox_mqtt::MqttDeliveryConfig;
///
/// let config: MqttDeliveryConfig = toml::from_str(
///     r#"
///     host = "127.0.0.1"
///     port = 1883
///     client_id = "billing-relay"
///     topic_prefix = "outbox"
///     "#,
/// )?;
/// let delivery = config.build()?;
/// # let _ = delivery;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct MqttDeliveryConfig {
    /// The URL, written in the file; refused when it carries a password.
    pub url: Option<String>,
    /// The environment variable holding the URL.
    pub url_env: Option<String>,
    /// A file holding the URL (relative to the config file's directory).
    pub url_file: Option<PathBuf>,
    /// Timeout of one delivery call, in seconds. Defaults to 10 s.
    pub timeout_seconds: Option<f64>,
    /// The broker host, instead of a URL.
    pub host: Option<String>,
    /// The broker port with `host`, 1 to 65535. Defaults to 1883.
    pub port: Option<i64>,
    /// The client id with `host`. Defaults to a random `hare-outbox-<hex>`.
    pub client_id: Option<String>,
    /// The user name with `host`. Defaults to none.
    pub username: Option<String>,
    /// The environment variable holding the password (with `username`).
    pub password_env: Option<String>,
    /// A file holding the password (relative to the config file's directory).
    pub password_file: Option<PathBuf>,
    /// Topic levels put before the mapped event topic. Defaults to none.
    pub topic_prefix: Option<String>,
    #[serde(skip)]
    resolved: Option<Target>,
}

/// Where the delivery connects, secrets read.
#[derive(Debug, Clone)]
enum Target {
    Url(SecretUrl),
    Host {
        host: String,
        port: u16,
        client_id: String,
        credentials: Option<(String, Option<SecretValue>)>,
    },
}

/// A client id no other process is likely to use.
fn random_client_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    format!("hare-outbox-{:016x}", hasher.finish())
}

impl MqttDeliveryConfig {
    /// The keys a config may set.
    pub const KEYS: &'static [&'static str] = &[
        "url",
        "url_env",
        "url_file",
        "timeout_seconds",
        "host",
        "port",
        "client_id",
        "username",
        "password_env",
        "password_file",
        "topic_prefix",
    ];

    /// The keys of the key-by-key form that are set.
    fn host_keys(&self) -> Vec<&'static str> {
        [
            ("host", self.host.is_some()),
            ("port", self.port.is_some()),
            ("client_id", self.client_id.is_some()),
            ("username", self.username.is_some()),
            ("password_env", self.password_env.is_some()),
            ("password_file", self.password_file.is_some()),
        ]
        .into_iter()
        .filter_map(|(k, set)| set.then_some(k))
        .collect()
    }

    fn target(&self, secrets: &Secrets<'_>) -> Result<Target, ConfigError> {
        if let Some(target) = &self.resolved {
            return Ok(target.clone());
        }
        let url = secrets.url(
            self.url.as_deref(),
            self.url_env.as_deref(),
            self.url_file.as_deref(),
        )?;
        if let Some(url) = url {
            if let Some(key) = self.host_keys().first() {
                return Err(ConfigError::new(format!(
                    "{key} goes with host, not with url: give the broker either as url (mqtt://host:port?client_id=…) or as host, port, client_id, username and password_env"
                )));
            }
            return Ok(Target::Url(url));
        }
        let host = non_empty(self.host.clone()).ok_or_else(|| {
            ConfigError::missing_endpoint("kind = \"mqtt\" needs url, url_env, url_file or host")
        })?;
        let port = match self.port {
            None => 1883,
            Some(p) => u16::try_from(p).ok().filter(|p| *p > 0).ok_or_else(|| {
                ConfigError::new(format!("port = {p} is not allowed; use 1 to 65535"))
            })?,
        };
        let client_id = match &self.client_id {
            Some(id) if id.is_empty() => {
                return Err(ConfigError::new(
                    "client_id is empty; give one, or leave it out for a random hare-outbox-<hex>",
                ));
            }
            Some(id) => id.clone(),
            None => random_client_id(),
        };
        let password = secrets.value(
            "password",
            self.password_env.as_deref(),
            self.password_file.as_deref(),
        )?;
        if let Some(password) = &password {
            password.text("password_file")?;
        }
        let credentials = match (&self.username, password) {
            (Some(username), password) => Some((username.clone(), password)),
            (None, Some(_)) => {
                return Err(ConfigError::new(
                    "a password is set without username; set username too",
                ));
            }
            (None, None) => None,
        };
        Ok(Target::Host {
            host,
            port,
            client_id,
            credentials,
        })
    }

    fn delivery(&self, target: &Target) -> Result<MqttDelivery, ConfigError> {
        let timeout = self
            .timeout_seconds
            .map(|v| seconds("timeout_seconds", v, false))
            .transpose()?;
        let mut delivery = match target {
            Target::Url(url) => MqttDelivery::new(&url.value)?,
            Target::Host {
                host,
                port,
                client_id,
                credentials,
            } => {
                let mut options = MqttOptions::new(client_id.clone(), host.clone(), *port);
                if let Some((username, password)) = credentials {
                    let password = match password {
                        Some(p) => p.text("password_file")?,
                        None => String::new(),
                    };
                    options.set_credentials(username.clone(), password);
                }
                MqttDelivery::from_options(options)
            }
        };
        if let Some(prefix) = &self.topic_prefix {
            delivery = delivery.with_topic_prefix(prefix.clone())?;
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
    /// A [`ConfigError`] naming the key: neither URL nor host, a host key with a URL, a port
    /// outside 1 to 65535, an empty client id, a password without username, an unset
    /// variable, `timeout_seconds` not above 0, a URL or topic prefix the delivery refuses.
    pub fn build(&self) -> Result<MqttDelivery, ConfigError> {
        let target = self.target(&Secrets::default())?;
        self.delivery(&target)
    }
}

impl DeliveryConfig for MqttDeliveryConfig {
    fn kind(&self) -> &'static str {
        "mqtt"
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
        if self.host_keys().is_empty() {
            return Ok(Vec::new());
        }
        self.host = None;
        self.port = None;
        self.client_id = None;
        self.username = None;
        self.password_env = None;
        self.password_file = None;
        Ok(vec![format!(
            "{variable} replaces host, port, client_id, username and password of the [delivery] section"
        )])
    }

    fn resolve(&mut self, secrets: &Secrets<'_>) -> Result<(), ConfigError> {
        let target = self.target(secrets)?;
        self.delivery(&target)?;
        self.resolved = Some(target);
        Ok(())
    }

    fn resolved_url(&self) -> Option<&SecretUrl> {
        match &self.resolved {
            Some(Target::Url(url)) => Some(url),
            _ => None,
        }
    }

    fn describe(&self) -> String {
        match &self.resolved {
            Some(Target::Url(url)) => format!("mqtt {} (from {})", url.shown(), url.source),
            Some(Target::Host {
                host,
                port,
                client_id,
                ..
            }) => format!("mqtt {host}:{port} client {client_id}"),
            None => "mqtt".to_owned(),
        }
    }

    fn build_delivery(&self) -> Result<Arc<dyn Delivery>, ConfigError> {
        Ok(Arc::new(self.build()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> MqttDeliveryConfig {
        toml::from_str(text).expect("valid TOML of the config")
    }

    #[test]
    fn the_broker_is_a_url_or_a_host_not_both() {
        let e = config("url = \"mqtt://h:1883?client_id=a\"\nport = 1884")
            .build()
            .expect_err("port with url");
        assert!(e.message().starts_with("port goes with host"), "{e}");
        let e = config("host = \"h\"\nport = 70000")
            .build()
            .expect_err("port");
        assert_eq!(e.message(), "port = 70000 is not allowed; use 1 to 65535");
        let env = |name: &str| (name == "P").then(|| "mqtt-pw".to_owned());
        let mut with_password = config("host = \"h\"\nusername = \"u\"\npassword_env = \"P\"");
        with_password
            .resolve(&Secrets::new(&env, "."))
            .expect("the variable is set");
        assert!(
            with_password
                .describe()
                .starts_with("mqtt h:1883 client hare-outbox-"),
            "{}",
            with_password.describe()
        );
        assert!(!format!("{with_password:?}").contains("mqtt-pw"));
        let mut overridden = config("host = \"h\"\nport = 1884");
        let warnings = overridden
            .use_url_from_env("MQTT_URL", "mqtt://other:1883?client_id=x")
            .expect("one URL source");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert_eq!(overridden.url_env.as_deref(), Some("MQTT_URL"));
        assert_eq!(overridden.port, None);
    }
}
