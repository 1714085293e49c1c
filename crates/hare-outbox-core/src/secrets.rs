//! Secrets and checks of the broker configs (`KafkaDeliveryConfig`, `RedisDeliveryConfig`, …).
//!
//! A config type never holds a secret as a field: a URL that may carry a password is given as
//! `url` (written in the file, refused when it carries a password), `url_env` (the name of an
//! environment variable) or `url_file` (a file, relative to the config file's directory); other
//! secrets (a webhook signing key, an MQTT password, secret Kafka properties) only as `*_env` or
//! `*_file` references. [`Secrets`] resolves those references, the same way for every broker,
//! and [`SecretUrl`] and [`SecretValue`] keep what it read out of `Debug` output and logs
//! (the shared redaction of [`crate::redact`]).

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::BoxError;
use crate::redact::{UrlKind, redact_url, secret_in_url};

/// A mistake in a broker config: the message names the key, the value and what is allowed,
/// e.g. `max_length = 0 is not allowed; use 1 or more, or leave it out for no trimming`;
/// optionally with the error of the library that refused the value as its source.
///
/// It shows only its message (no prefix), so a program can put it after the section's name.
#[derive(Debug)]
pub struct ConfigError {
    message: String,
    missing_endpoint: bool,
    source: Option<BoxError>,
}

impl ConfigError {
    /// A config error with `message`.
    pub fn new(message: impl Into<String>) -> Self {
        ConfigError {
            message: message.into(),
            missing_endpoint: false,
            source: None,
        }
    }

    /// A config error with `message` (e.g. the key and its value, `url "http://…"`) caused by
    /// `source`, the error of the library that refused the value.
    pub fn with_source(
        message: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        ConfigError {
            message: message.into(),
            missing_endpoint: false,
            source: Some(source.into()),
        }
    }

    /// A config error saying that the broker's address (`url`, `bootstrap_servers`, …) is
    /// missing; a program that can take it from elsewhere (an environment variable) may say so
    /// after the message.
    pub fn missing_endpoint(message: impl Into<String>) -> Self {
        ConfigError {
            missing_endpoint: true,
            ..ConfigError::new(message)
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether it says that the broker's address is missing.
    pub fn is_missing_endpoint(&self) -> bool {
        self.missing_endpoint
    }
}

impl From<crate::error::Error> for ConfigError {
    /// A value the library refused: the library's message, with its error as the source.
    fn from(error: crate::error::Error) -> Self {
        ConfigError::with_source(error.to_string(), error)
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// A URL that may carry a password, resolved from `url`, `url_env` or `url_file`: shown
/// redacted, never in `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretUrl {
    /// The URL itself.
    pub value: String,
    /// Where it came from: `url`, `$VARIABLE` or `file PATH`, for a start-up log.
    pub source: String,
}

impl SecretUrl {
    /// A URL with where it came from.
    pub fn new(value: impl Into<String>, source: impl Into<String>) -> Self {
        SecretUrl {
            value: value.into(),
            source: source.into(),
        }
    }

    /// The URL with its password, token and secret parameters replaced by `***`.
    pub fn shown(&self) -> String {
        redact_url(&self.value, UrlKind::Connection)
    }
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} (from {})", self.shown(), self.source)
    }
}

/// A secret read from `*_env` or `*_file`: its bytes and where it came from; `Debug` shows
/// `***` and the source only.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretValue {
    /// The secret, without a final line break when it came from a file.
    pub bytes: Vec<u8>,
    /// `$VARIABLE` or `file PATH`, for a start-up log.
    pub source: String,
}

impl SecretValue {
    /// The secret as UTF-8 text.
    ///
    /// # Errors
    /// A [`ConfigError`] naming `key` and the source when the bytes are not UTF-8.
    pub fn text(&self, key: &str) -> Result<String, ConfigError> {
        String::from_utf8(self.bytes.clone()).map_err(|_| {
            let source = self.source.strip_prefix("file ").unwrap_or(&self.source);
            ConfigError::new(format!("{key} {source} is not UTF-8 text"))
        })
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"***\" (from {})", self.source)
    }
}

/// Reads the environment variable of the running process.
fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Where `*_env` and `*_file` references are read: an environment (the process's, or a lookup
/// function) and the directory relative file names start from.
#[derive(Clone)]
pub struct Secrets<'a> {
    env: &'a dyn Fn(&str) -> Option<String>,
    base_dir: PathBuf,
}

impl fmt::Debug for Secrets<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secrets")
            .field("base_dir", &self.base_dir)
            .finish_non_exhaustive()
    }
}

impl Default for Secrets<'static> {
    fn default() -> Self {
        Secrets::from_process_env(".")
    }
}

impl Secrets<'static> {
    /// The process's environment; relative files from `base_dir`.
    pub fn from_process_env(base_dir: impl Into<PathBuf>) -> Self {
        Secrets {
            env: &process_env,
            base_dir: base_dir.into(),
        }
    }
}

impl<'a> Secrets<'a> {
    /// Variables looked up with `env`; relative files from `base_dir`.
    pub fn new(env: &'a dyn Fn(&str) -> Option<String>, base_dir: impl Into<PathBuf>) -> Self {
        Secrets {
            env,
            base_dir: base_dir.into(),
        }
    }

    /// The directory relative file names start from.
    pub fn base_dir(&self) -> &Path {
        &self.base_dir
    }

    /// The value of the environment variable `name`, `None` when unset or blank.
    pub fn var(&self, name: &str) -> Option<String> {
        (self.env)(name).filter(|v| !v.trim().is_empty())
    }

    /// The URL given by one of `url` (written in a config file; no password allowed), `url_env`
    /// or `url_file`; `None` when none is set.
    ///
    /// # Errors
    /// A [`ConfigError`] when more than one is set, `url` carries a secret or is empty, the
    /// variable is unset or blank, or the file is unreadable, empty or not UTF-8.
    pub fn url(
        &self,
        url: Option<&str>,
        url_env: Option<&str>,
        url_file: Option<&Path>,
    ) -> Result<Option<SecretUrl>, ConfigError> {
        check_one_url(url, url_env, url_file)?;
        if let Some(url) = url {
            if let Some(secret) = secret_in_url(url) {
                return Err(ConfigError::new(format!(
                    "url = {:?} carries a secret ({secret}), and secrets are not read from the config file; put the whole URL in an environment variable named by url_env (or a file named by url_file)",
                    redact_url(url, UrlKind::Connection)
                )));
            }
            if url.trim().is_empty() {
                return Err(ConfigError::new("url is empty"));
            }
            return Ok(Some(SecretUrl::new(url, "url")));
        }
        let Some(value) = self.value("url", url_env, url_file)? else {
            return Ok(None);
        };
        let text = value.text("url_file")?;
        Ok(Some(SecretUrl::new(text.trim(), value.source)))
    }

    /// The secret `key` read from the variable `from_env` (the `{key}_env` key) or the file
    /// `from_file` (the `{key}_file` key); `None` when neither is set.
    ///
    /// # Errors
    /// A [`ConfigError`] when both are set, the variable is unset or blank, or the file is
    /// unreadable or empty.
    pub fn value(
        &self,
        key: &str,
        from_env: Option<&str>,
        from_file: Option<&Path>,
    ) -> Result<Option<SecretValue>, ConfigError> {
        match (from_env, from_file) {
            (Some(_), Some(_)) => Err(ConfigError::new(format!(
                "{key}_env and {key}_file are both set; choose one source for the {key}"
            ))),
            (Some(name), _) => match self.var(name) {
                Some(value) => Ok(Some(SecretValue {
                    bytes: value.into_bytes(),
                    source: format!("${name}"),
                })),
                None => Err(ConfigError::new(format!(
                    "{key}_env = {name:?} names an environment variable that is not set or empty"
                ))),
            },
            (None, Some(file)) => {
                let (bytes, path) = self.read_file(&format!("{key}_file"), file)?;
                Ok(Some(SecretValue {
                    bytes,
                    source: format!("file {}", path.display()),
                }))
            }
            (None, None) => Ok(None),
        }
    }

    /// Reads `file` (relative to [`Secrets::base_dir`]) without its final line breaks; `key`
    /// names the config key in errors. Returns the bytes and the path read.
    ///
    /// # Errors
    /// A [`ConfigError`] when the file cannot be read or is empty.
    pub fn read_file(&self, key: &str, file: &Path) -> Result<(Vec<u8>, PathBuf), ConfigError> {
        let file = if file.is_relative() {
            self.base_dir.join(file)
        } else {
            file.to_path_buf()
        };
        let mut bytes = std::fs::read(&file).map_err(|e| {
            ConfigError::new(format!("{key} {}: cannot read it: {e}", file.display()))
        })?;
        while bytes.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
            bytes.pop();
        }
        if bytes.is_empty() {
            return Err(ConfigError::new(format!(
                "{key} {} is empty",
                file.display()
            )));
        }
        Ok((bytes, file))
    }
}

/// Checks that at most one of `url`, `url_env` and `url_file` is set, then makes the
/// environment variable `variable` the source of the URL (a program's override of the file).
///
/// # Errors
/// A [`ConfigError`] when more than one of them is set.
pub fn use_url_env(
    url: &mut Option<String>,
    url_env: &mut Option<String>,
    url_file: &mut Option<PathBuf>,
    variable: &str,
) -> Result<(), ConfigError> {
    check_one_url(url.as_deref(), url_env.as_deref(), url_file.as_deref())?;
    *url = None;
    *url_file = None;
    *url_env = Some(variable.to_owned());
    Ok(())
}

/// Checks that at most one of `url`, `url_env` and `url_file` is set.
///
/// # Errors
/// A [`ConfigError`] naming the three keys when more than one is set.
pub fn check_one_url(
    url: Option<&str>,
    url_env: Option<&str>,
    url_file: Option<&Path>,
) -> Result<(), ConfigError> {
    let set = [url.is_some(), url_env.is_some(), url_file.is_some()]
        .into_iter()
        .filter(|s| *s)
        .count();
    if set > 1 {
        return Err(ConfigError::new(
            "url, url_env and url_file are alternatives; set one of them",
        ));
    }
    Ok(())
}

/// `value` seconds as a duration, for a key such as `timeout_seconds`.
///
/// # Errors
/// A [`ConfigError`] naming `key` and the value when it is not a finite number above 0 (or 0
/// and more with `zero_ok`).
pub fn seconds(key: &str, value: f64, zero_ok: bool) -> Result<Duration, ConfigError> {
    let bad = !value.is_finite() || value < 0.0 || (!zero_ok && value == 0.0);
    let result = if bad {
        None
    } else {
        Duration::try_from_secs_f64(value).ok()
    };
    result.ok_or_else(|| {
        let allowed = if zero_ok {
            "a number of seconds, 0 or more"
        } else {
            "a number of seconds above 0"
        };
        ConfigError::new(format!("{key} = {value} is not allowed; use {allowed}"))
    })
}

/// `value` unless it is missing or blank.
pub fn non_empty(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.trim().is_empty())
}

/// Defines the config type of a broker wake-up that connects to one URL and signals on one
/// named destination (a Redis channel, a NATS subject, a RabbitMQ exchange): the keys `url`,
/// `url_env`, `url_file` and the destination's key, `KEYS`, `use_url_from_env`, `resolve`,
/// `resolved_url`, `describe` and `build`. The broker crates' `*WakeupConfig` types are made by
/// it, so the three read, check and hide their URL the same way; the caller writes the type's
/// own documentation (with its example) above the name.
///
/// ```ignore
/// hare_outbox_core::url_wakeup_config! {
///     /// The Redis wake-up as a config file describes it.
///     RedisWakeupConfig {
///         kind: "redis",
///         key: channel,
///         key_doc: "The pub/sub channel. Defaults to [`DEFAULT_CHANNEL`] (`hare_outbox`).",
///         default: crate::DEFAULT_CHANNEL,
///         what: "pub/sub channel Redis",
///         wakeup: crate::RedisWakeup,
///         with: with_channel,
///     }
/// }
/// ```
#[macro_export]
macro_rules! url_wakeup_config {
    (
        $(#[$doc:meta])*
        $name:ident {
            kind: $kind:literal,
            key: $key:ident,
            key_doc: $key_doc:literal,
            default: $default:path,
            what: $what:literal,
            wakeup: $wakeup:path,
            with: $with:ident $(,)?
        }
    ) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[non_exhaustive]
        pub struct $name {
            /// The URL, written in the file; refused when it carries a password.
            pub url: Option<String>,
            /// The environment variable holding the URL.
            pub url_env: Option<String>,
            /// A file holding the URL (relative to the config file's directory).
            pub url_file: Option<std::path::PathBuf>,
            #[doc = $key_doc]
            pub $key: Option<String>,
            #[serde(skip)]
            resolved: Option<$crate::secrets::SecretUrl>,
        }

        impl $name {
            /// The keys a config may set.
            pub const KEYS: &'static [&'static str] =
                &["url", "url_env", "url_file", stringify!($key)];

            /// The URL comes from the environment variable `variable` instead of `url`,
            /// `url_env` or `url_file` (a program's override of its config file).
            ///
            /// # Errors
            /// A [`ConfigError`]($crate::secrets::ConfigError) when the config sets its URL in
            /// more than one way.
            pub fn use_url_from_env(
                &mut self,
                variable: &str,
            ) -> Result<(), $crate::secrets::ConfigError> {
                $crate::secrets::use_url_env(
                    &mut self.url,
                    &mut self.url_env,
                    &mut self.url_file,
                    variable,
                )
            }

            /// Reads the URL from `secrets` and checks every value, so that `build` only fails
            /// on what needs the network.
            ///
            /// # Errors
            #[doc = concat!(
                "A `ConfigError` naming the key: no URL (then `is_missing_endpoint`), more than ",
                "one of `url`, `url_env` and `url_file`, an unset variable, a password written in ",
                "`url`, a URL or ", $what, " cannot take."
            )]
            pub fn resolve(
                &mut self,
                secrets: &$crate::secrets::Secrets<'_>,
            ) -> Result<(), $crate::secrets::ConfigError> {
                let url = self.secret_url(secrets)?;
                self.wakeup(&url)?;
                self.resolved = Some(url);
                Ok(())
            }

            /// The URL as `resolve` read it, with where it came from; `None` before.
            pub fn resolved_url(&self) -> Option<&$crate::secrets::SecretUrl> {
                self.resolved.as_ref()
            }

            /// A one-line description for a start-up log, the password hidden.
            pub fn describe(&self) -> String {
                let $key = self.$key.as_deref().unwrap_or($default);
                match &self.resolved {
                    Some(url) => format!(
                        concat!($kind, " {} (from {}) ", stringify!($key), " {:?}"),
                        url.shown(),
                        url.source,
                        $key
                    ),
                    None => format!(concat!($kind, " ", stringify!($key), " {:?}"), $key),
                }
            }

            /// The wake-up; the URL from `resolve`, or else from the process's environment.
            /// Nothing is connected until a relay subscribes.
            ///
            /// # Errors
            /// As `resolve`.
            pub fn build(&self) -> Result<$wakeup, $crate::secrets::ConfigError> {
                let url = self.secret_url(&$crate::secrets::Secrets::default())?;
                self.wakeup(&url)
            }

            fn secret_url(
                &self,
                secrets: &$crate::secrets::Secrets<'_>,
            ) -> Result<$crate::secrets::SecretUrl, $crate::secrets::ConfigError> {
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
                        $crate::secrets::ConfigError::missing_endpoint(concat!(
                            "kind = \"",
                            $kind,
                            "\" needs url, url_env or url_file"
                        ))
                    })
            }

            fn wakeup(
                &self,
                url: &$crate::secrets::SecretUrl,
            ) -> Result<$wakeup, $crate::secrets::ConfigError> {
                let mut wakeup = <$wakeup>::new(&url.value)?;
                if let Some(value) = &self.$key {
                    wakeup = wakeup.$with(value.clone())?;
                }
                Ok(wakeup)
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "SET" => Some("amqp://u:pw@h/%2f\n".to_owned()),
            "BLANK" => Some("  ".to_owned()),
            _ => None,
        }
    }

    #[test]
    fn a_url_comes_from_one_source_and_hides_its_password() {
        let secrets = Secrets::new(&env, "/nonexistent");
        let url = secrets.url(None, Some("SET"), None).unwrap().unwrap();
        assert_eq!(url.value, "amqp://u:pw@h/%2f");
        assert_eq!(url.source, "$SET");
        assert!(!format!("{url:?}").contains("pw"));
        let e = secrets
            .url(Some("amqp://u:pw@h"), None, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("carries a secret"), "{e}");
        assert!(!e.contains("pw@"), "{e}");
        let e = secrets.url(Some("a"), Some("SET"), None).unwrap_err();
        assert_eq!(
            e.message(),
            "url, url_env and url_file are alternatives; set one of them"
        );
        let e = secrets.url(None, Some("BLANK"), None).unwrap_err();
        assert_eq!(
            e.message(),
            "url_env = \"BLANK\" names an environment variable that is not set or empty"
        );
        assert_eq!(secrets.url(None, None, None).unwrap(), None);
    }

    #[test]
    fn a_secret_file_is_read_without_its_line_break() {
        let dir = std::env::temp_dir().join(format!("hare-secrets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("s"), "k3y\r\n").unwrap();
        std::fs::write(dir.join("empty"), "\n").unwrap();
        let secrets = Secrets::new(&env, &dir);
        let value = secrets
            .value("secret", None, Some(Path::new("s")))
            .unwrap()
            .unwrap();
        assert_eq!(value.bytes, b"k3y");
        assert!(!format!("{value:?}").contains("k3y"));
        let e = secrets
            .value("secret", None, Some(Path::new("empty")))
            .unwrap_err();
        assert!(e.message().ends_with(" is empty"), "{e}");
        let e = secrets
            .value("password", Some("SET"), Some(Path::new("s")))
            .unwrap_err();
        assert_eq!(
            e.message(),
            "password_env and password_file are both set; choose one source for the password"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn seconds_names_the_key() {
        assert_eq!(
            seconds("timeout_seconds", 1.5, false).unwrap(),
            Duration::from_millis(1500)
        );
        assert_eq!(
            seconds("timeout_seconds", 0.0, false)
                .unwrap_err()
                .message(),
            "timeout_seconds = 0 is not allowed; use a number of seconds above 0"
        );
    }
}
