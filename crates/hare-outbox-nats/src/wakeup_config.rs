//! [`NatsWakeupConfig`]: the NATS wake-up as a config file describes it.

use std::path::PathBuf;

use hare_outbox_core::secrets::{ConfigError, SecretUrl, Secrets, use_url_env};
use serde::Deserialize;

use crate::{DEFAULT_SUBJECT, NatsWakeup};

/// The NATS wake-up ([`NatsWakeup`]) as a config file describes it (`kind = "nats"` in the
/// `hare-outbox` command's `[wakeup]`): writers publish on a core NATS subject after their commit, and a relay subscribed to it polls at once.
///
/// The URL (`nats://[user:password@]host:port`) is given by exactly one of `url` (no password allowed in it), `url_env`
/// or `url_file`; see [`hare_outbox_core::secrets`]. Writers and the relay must use the same
/// subject.
///
/// # Example
///
/// ```
/// use hare_outbox_nats::NatsWakeupConfig;
///
/// let config: NatsWakeupConfig = toml::from_str(
///     r#"
///     url = "nats://127.0.0.1:4222"
///     subject = "erp"
///     "#,
/// )?;
/// let wakeup = config.build()?;
/// # let _ = wakeup;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct NatsWakeupConfig {
    /// The URL, written in the file; refused when it carries a password.
    pub url: Option<String>,
    /// The environment variable holding the URL.
    pub url_env: Option<String>,
    /// A file holding the URL (relative to the config file's directory).
    pub url_file: Option<PathBuf>,
    /// The core NATS subject. Defaults to [`DEFAULT_SUBJECT`] (`hare_outbox`).
    pub subject: Option<String>,
    #[serde(skip)]
    resolved: Option<SecretUrl>,
}

impl NatsWakeupConfig {
    /// The keys a config may set.
    pub const KEYS: &'static [&'static str] = &["url", "url_env", "url_file", "subject"];

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

    /// Reads the URL from `secrets` and checks every value, so that [`NatsWakeupConfig::build`] only
    /// fails on what needs the network.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the key: no URL (then [`ConfigError::is_missing_endpoint`]),
    /// more than one of `url`, `url_env` and `url_file`, an unset variable, a password written
    /// in `url`, a URL or core NATS subject NATS cannot take.
    pub fn resolve(&mut self, secrets: &Secrets<'_>) -> Result<(), ConfigError> {
        let url = self.url(secrets)?;
        self.wakeup(&url)?;
        self.resolved = Some(url);
        Ok(())
    }

    /// The URL as [`NatsWakeupConfig::resolve`] read it, with where it came from; `None` before.
    pub fn resolved_url(&self) -> Option<&SecretUrl> {
        self.resolved.as_ref()
    }

    /// A one-line description for a start-up log, the password hidden.
    pub fn describe(&self) -> String {
        let subject = self.subject.as_deref().unwrap_or(DEFAULT_SUBJECT);
        match &self.resolved {
            Some(url) => format!(
                "nats {} (from {}) subject {subject:?}",
                url.shown(),
                url.source
            ),
            None => format!("nats subject {subject:?}"),
        }
    }

    /// The wake-up; the URL from [`NatsWakeupConfig::resolve`], or else from the process's environment.
    /// Nothing is connected until a relay subscribes.
    ///
    /// # Errors
    /// As [`NatsWakeupConfig::resolve`].
    pub fn build(&self) -> Result<NatsWakeup, ConfigError> {
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
                ConfigError::missing_endpoint("kind = \"nats\" needs url, url_env or url_file")
            })
    }

    fn wakeup(&self, url: &SecretUrl) -> Result<NatsWakeup, ConfigError> {
        let mut wakeup = NatsWakeup::new(&url.value)?;
        if let Some(subject) = &self.subject {
            wakeup = wakeup.with_subject(subject.clone())?;
        }
        Ok(wakeup)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> NatsWakeupConfig {
        toml::from_str(text).expect("valid TOML of the config")
    }

    #[test]
    fn mistakes_name_the_key() {
        let e = config("subject = \"x\"").build().expect_err("no url");
        assert!(e.is_missing_endpoint(), "{e}");
        assert!(e.message().contains("url_env"), "{e}");
        let e =
            toml::from_str::<NatsWakeupConfig>("url = \"nats://127.0.0.1:4222\"\nchanel = \"x\"")
                .expect_err("unknown key");
        assert!(e.to_string().contains("unknown field `chanel`"), "{e}");
        let e = config("url = \"nats://u:pw@127.0.0.1:4222\"")
            .build()
            .expect_err("a password in the file");
        assert!(
            e.message().contains("url_env") && !e.message().contains("pw@"),
            "{e}"
        );
    }

    #[test]
    fn the_url_comes_from_the_environment_and_is_never_shown() {
        let env = |name: &str| (name == "U").then(|| "nats://u:pw@127.0.0.1:4222".to_owned());
        let mut config = config("url_env = \"U\"\nsubject = \"erp\"");
        config
            .resolve(&Secrets::new(&env, "."))
            .expect("the variable is set");
        let described = config.describe();
        assert!(
            described.contains("(from $U) subject \"erp\""),
            "{described}"
        );
        assert!(!described.contains("pw") && !format!("{config:?}").contains("pw"));
        config.build().expect("built from the resolved URL");
        let mut overridden = NatsWakeupConfig {
            url: Some("nats://127.0.0.1:4222".to_owned()),
            ..NatsWakeupConfig::default()
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
