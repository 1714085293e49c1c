//! `[wakeup]`: how a relay learns of new events before its poll interval is up.
//!
//! Kinds: `none`, `listen_notify` (PostgreSQL only), `redis`, `nats`, `rabbitmq`, `kafka`. Writers
//! that use the same kind and channel (subject, exchange, topic) wake the relay after their
//! commit; a lost signal only waits for the next poll.
//!
//! The keys of the broker kinds belong to their crates' config types
//! ([`RedisWakeupConfig`], [`NatsWakeupConfig`], [`RabbitMqWakeupConfig`],
//! [`KafkaWakeupConfig`]); `none` and `listen_notify` are the command's own.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use hare_outbox::Wakeup;
use hare_outbox::kafka::KafkaWakeupConfig;
use hare_outbox::nats::NatsWakeupConfig;
use hare_outbox::rabbitmq::RabbitMqWakeupConfig;
use hare_outbox::redis::RedisWakeupConfig;
use hare_outbox::secrets::{ConfigError, SecretUrl, Secrets, check_one_url};
use serde::Deserialize;

use crate::config::values::{DbKind, non_empty};
use crate::error::usage;

/// Overrides the URL of a broker wake-up (the bootstrap servers for `kafka`).
pub const ENV_WAKEUP_URL: &str = "HARE_OUTBOX_WAKEUP_URL";

/// The LISTEN/NOTIFY channel when none is configured.
pub const DEFAULT_WAKEUP_CHANNEL: &str = "hare_outbox";

/// `[wakeup]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WakeupSection {
    /// `none`, `listen_notify`, `redis`, `nats`, `rabbitmq` or `kafka`.
    pub kind: Option<WakeupKind>,
    /// listen_notify, redis: the channel. Default `hare_outbox`.
    pub channel: Option<String>,
    /// listen_notify: when writers NOTIFY. Default `after_commit`.
    pub mode: Option<WakeupMode>,
    /// redis, nats, rabbitmq: the broker URL written in the file (no password allowed).
    pub url: Option<String>,
    /// redis, nats, rabbitmq: the environment variable holding the URL.
    pub url_env: Option<String>,
    /// redis, nats, rabbitmq: a file holding the URL (relative to the config file).
    pub url_file: Option<PathBuf>,
    /// nats: the subject. Default `hare_outbox`.
    pub subject: Option<String>,
    /// rabbitmq: the fanout exchange. Default `hare_outbox`.
    pub exchange: Option<String>,
    /// kafka: `host:port[,host:port…]`.
    pub bootstrap_servers: Option<String>,
    /// kafka: the signal topic. Default `hare_outbox`.
    pub topic: Option<String>,
    /// kafka: whether a missing signal topic is created. Default `true`.
    pub create_topic: Option<bool>,
    /// kafka: the replication factor of a created signal topic. Default: the broker's.
    pub replication_factor: Option<i32>,
    /// listen_notify: a direct `postgres://` URL for the LISTEN connection when `database_url`
    /// goes through a transaction pooler (which cannot hold LISTEN); no password allowed here.
    pub listen_url: Option<String>,
    /// listen_notify: the environment variable holding that URL.
    pub listen_url_env: Option<String>,
    /// listen_notify: a file holding that URL (relative to the config file).
    pub listen_url_file: Option<PathBuf>,
}

/// The kinds of wake-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WakeupKind {
    /// No wake-up: relays poll.
    None,
    /// PostgreSQL LISTEN/NOTIFY.
    ListenNotify,
    /// Redis pub/sub.
    Redis,
    /// A core NATS subject.
    Nats,
    /// A RabbitMQ fanout exchange.
    Rabbitmq,
    /// A Kafka signal topic.
    Kafka,
}

impl WakeupKind {
    fn name(self) -> &'static str {
        match self {
            WakeupKind::None => "none",
            WakeupKind::ListenNotify => "listen_notify",
            WakeupKind::Redis => "redis",
            WakeupKind::Nats => "nats",
            WakeupKind::Rabbitmq => "rabbitmq",
            WakeupKind::Kafka => "kafka",
        }
    }

    fn keys(self) -> &'static [&'static str] {
        match self {
            WakeupKind::None => &[],
            WakeupKind::ListenNotify => &[
                "channel",
                "mode",
                "listen_url",
                "listen_url_env",
                "listen_url_file",
            ],
            WakeupKind::Redis => RedisWakeupConfig::KEYS,
            WakeupKind::Nats => NatsWakeupConfig::KEYS,
            WakeupKind::Rabbitmq => RabbitMqWakeupConfig::KEYS,
            WakeupKind::Kafka => KafkaWakeupConfig::KEYS,
        }
    }
}

/// When a writer using the config sends its NOTIFY.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WakeupMode {
    /// After commit, from a background task (only writes through an outbox transaction signal).
    AfterCommit,
    /// Inside the writing transaction: every enqueue signals, at a cost to concurrent writers.
    InTransaction,
}

/// The wake-up, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WakeupSettings {
    /// Relays poll only.
    None,
    /// PostgreSQL LISTEN/NOTIFY on `channel`.
    ListenNotify {
        /// The channel.
        channel: String,
        /// When writers NOTIFY.
        mode: WakeupMode,
        /// A direct URL for the LISTEN connection; `None`: the database pool's.
        listen_url: Option<SecretUrl>,
    },
    /// Redis pub/sub, its URL resolved.
    Redis(RedisWakeupConfig),
    /// A core NATS subject, its URL resolved.
    Nats(NatsWakeupConfig),
    /// A RabbitMQ fanout exchange, its URL resolved.
    RabbitMq(RabbitMqWakeupConfig),
    /// A Kafka signal topic, checked.
    Kafka(KafkaWakeupConfig),
}

impl WakeupSettings {
    /// Refuses a wake-up the backend of `kind` cannot carry.
    ///
    /// # Errors
    /// A usage error naming the wake-up kind and the backend.
    pub fn check_backend(&self, kind: DbKind) -> anyhow::Result<()> {
        match (self, kind) {
            (WakeupSettings::ListenNotify { .. }, DbKind::Sqlite) => Err(usage(
                "[wakeup] kind = \"listen_notify\" needs PostgreSQL LISTEN/NOTIFY, but the database URL selects the sqlite backend; use kind = \"none\" (the relay polls), a broker wake-up (redis, nats, rabbitmq, kafka) or a postgres:// URL",
            )),
            (WakeupSettings::ListenNotify { .. }, DbKind::MySql) => Err(usage(
                "[wakeup] kind = \"listen_notify\" needs PostgreSQL LISTEN/NOTIFY, but the database URL selects the mysql backend (MySQL and MariaDB have no LISTEN/NOTIFY); use kind = \"none\" (the relay polls), a broker wake-up (redis, nats, rabbitmq, kafka) or a postgres:// URL",
            )),
            _ => Ok(()),
        }
    }

    /// Refuses what a relay cannot apply: `mode = "in_transaction"` sets when writers NOTIFY,
    /// and a relay writes no events (it only listens). `after_commit`, the default, is what the
    /// relay's own wake-up object does and is accepted.
    ///
    /// # Errors
    /// A usage error naming the key, the value and what to do instead.
    pub fn check_for_relay(&self) -> anyhow::Result<()> {
        match self {
            WakeupSettings::ListenNotify {
                mode: WakeupMode::InTransaction,
                ..
            } => Err(usage(
                "[wakeup] mode = \"in_transaction\" decides when writers send their NOTIFY, and the relay writes no events, so it cannot apply it; give the writers' own ListenNotifyWakeup NotifyMode::InTransaction, or capture triggers `notify`, and remove mode here (or set it to \"after_commit\")",
            )),
            _ => Ok(()),
        }
    }

    /// Builds a broker wake-up; `None` for `none` and `listen_notify` (which needs the pool).
    /// Nothing is connected until the relay subscribes.
    ///
    /// # Errors
    /// A configuration error naming the value the wake-up refused.
    pub fn build_broker(&self) -> anyhow::Result<Option<Arc<dyn Wakeup>>> {
        Ok(match self {
            WakeupSettings::None | WakeupSettings::ListenNotify { .. } => None,
            WakeupSettings::Redis(config) => Some(Arc::new(config.build()?)),
            WakeupSettings::Nats(config) => Some(Arc::new(config.build()?)),
            WakeupSettings::RabbitMq(config) => Some(Arc::new(config.build()?)),
            WakeupSettings::Kafka(config) => Some(Arc::new(config.build()?)),
        })
    }

    /// A short description for the start-up log, passwords hidden.
    pub fn describe(&self) -> String {
        match self {
            WakeupSettings::None => "none (polling only)".to_owned(),
            WakeupSettings::ListenNotify {
                channel,
                mode,
                listen_url,
            } => format!(
                "listen_notify on channel {channel:?} ({}){}",
                match mode {
                    WakeupMode::AfterCommit => "after_commit",
                    WakeupMode::InTransaction => "in_transaction",
                },
                listen_url.as_ref().map_or_else(String::new, |url| format!(
                    ", LISTEN through {} (from {})",
                    url.shown(),
                    url.source
                ))
            ),
            WakeupSettings::Redis(config) => config.describe(),
            WakeupSettings::Nats(config) => config.describe(),
            WakeupSettings::RabbitMq(config) => config.describe(),
            WakeupSettings::Kafka(config) => config.describe(),
        }
    }
}

/// Resolves `[wakeup]` with the environment.
///
/// # Errors
/// A usage error naming the key and what is allowed.
pub fn resolve(
    section: Option<&WakeupSection>,
    base_dir: &Path,
    env: &dyn Fn(&str) -> Option<String>,
    warnings: &mut Vec<String>,
) -> anyhow::Result<WakeupSettings> {
    let url_override = non_empty(env(ENV_WAKEUP_URL));
    let Some(section) = section else {
        if url_override.is_some() {
            warnings.push(format!(
                "{ENV_WAKEUP_URL} is ignored: there is no [wakeup] section saying which kind"
            ));
        }
        return Ok(WakeupSettings::None);
    };
    let kind = section.kind.ok_or_else(|| {
        usage("kind is missing; allowed: kind = \"none\", \"listen_notify\", \"redis\", \"nats\", \"rabbitmq\" or \"kafka\"")
    })?;
    let set: Vec<&str> = [
        ("channel", section.channel.is_some()),
        ("mode", section.mode.is_some()),
        ("url", section.url.is_some()),
        ("url_env", section.url_env.is_some()),
        ("url_file", section.url_file.is_some()),
        ("subject", section.subject.is_some()),
        ("exchange", section.exchange.is_some()),
        ("bootstrap_servers", section.bootstrap_servers.is_some()),
        ("topic", section.topic.is_some()),
        ("create_topic", section.create_topic.is_some()),
        ("replication_factor", section.replication_factor.is_some()),
        ("listen_url", section.listen_url.is_some()),
        ("listen_url_env", section.listen_url_env.is_some()),
        ("listen_url_file", section.listen_url_file.is_some()),
    ]
    .into_iter()
    .filter_map(|(k, s)| s.then_some(k))
    .collect();
    let allowed = kind.keys();
    if let Some(key) = set.iter().find(|k| !allowed.contains(k)) {
        let keys = if allowed.is_empty() {
            "none besides kind".to_owned()
        } else {
            allowed.join(", ")
        };
        return Err(usage(format!(
            "{key} does not apply to kind = \"{}\"; the keys of that kind: {keys}",
            kind.name()
        )));
    }
    if url_override.is_some() && matches!(kind, WakeupKind::None | WakeupKind::ListenNotify) {
        warnings.push(format!(
            "{ENV_WAKEUP_URL} is ignored: [wakeup] is kind = \"{}\"",
            kind.name()
        ));
    }
    // A broker config's error; a missing URL names the environment variable too.
    let broker_error = |e: ConfigError| {
        if e.is_missing_endpoint() {
            usage(format!(
                "{e} (or the environment variable {ENV_WAKEUP_URL})"
            ))
        } else {
            usage(e.to_string())
        }
    };
    let secrets = Secrets::new(env, base_dir);
    let settings = match kind {
        WakeupKind::None => WakeupSettings::None,
        WakeupKind::ListenNotify => {
            let channel = section
                .channel
                .clone()
                .unwrap_or_else(|| DEFAULT_WAKEUP_CHANNEL.to_owned());
            if channel.is_empty() || channel.len() > 63 || channel.contains('\0') {
                return Err(usage(format!(
                    "channel = {channel:?} is not allowed; use a PostgreSQL channel name of 1 to 63 bytes"
                )));
            }
            let listen_url = secret_url(
                section.listen_url.as_deref(),
                section.listen_url_env.as_deref(),
                section.listen_url_file.as_deref(),
                None,
                base_dir,
                env,
            )
            .map_err(|e| usage(format!("listen_url: {e:#}")))?;
            if let Some(url) = &listen_url
                && !(url.value.starts_with("postgres://") || url.value.starts_with("postgresql://"))
            {
                return Err(usage(format!(
                    "listen_url = {:?} is not a postgres:// or postgresql:// URL",
                    url.shown()
                )));
            }
            WakeupSettings::ListenNotify {
                channel,
                mode: section.mode.unwrap_or(WakeupMode::AfterCommit),
                listen_url,
            }
        }
        WakeupKind::Redis => {
            let mut config = RedisWakeupConfig::default();
            config.url.clone_from(&section.url);
            config.url_env.clone_from(&section.url_env);
            config.url_file.clone_from(&section.url_file);
            config.channel.clone_from(&section.channel);
            if url_override.is_some() {
                config
                    .use_url_from_env(ENV_WAKEUP_URL)
                    .map_err(broker_error)?;
            }
            config.resolve(&secrets).map_err(broker_error)?;
            WakeupSettings::Redis(config)
        }
        WakeupKind::Nats => {
            let mut config = NatsWakeupConfig::default();
            config.url.clone_from(&section.url);
            config.url_env.clone_from(&section.url_env);
            config.url_file.clone_from(&section.url_file);
            config.subject.clone_from(&section.subject);
            if url_override.is_some() {
                config
                    .use_url_from_env(ENV_WAKEUP_URL)
                    .map_err(broker_error)?;
            }
            config.resolve(&secrets).map_err(broker_error)?;
            WakeupSettings::Nats(config)
        }
        WakeupKind::Rabbitmq => {
            let mut config = RabbitMqWakeupConfig::default();
            config.url.clone_from(&section.url);
            config.url_env.clone_from(&section.url_env);
            config.url_file.clone_from(&section.url_file);
            config.exchange.clone_from(&section.exchange);
            if url_override.is_some() {
                config
                    .use_url_from_env(ENV_WAKEUP_URL)
                    .map_err(broker_error)?;
            }
            config.resolve(&secrets).map_err(broker_error)?;
            WakeupSettings::RabbitMq(config)
        }
        WakeupKind::Kafka => {
            let mut config = KafkaWakeupConfig::default();
            config
                .bootstrap_servers
                .clone_from(&section.bootstrap_servers);
            config.topic.clone_from(&section.topic);
            config.create_topic = section.create_topic;
            config.replication_factor = section.replication_factor;
            if let Some(servers) = url_override {
                config.use_bootstrap_servers(servers);
            }
            // Only checked here: Kafka's client is made at relay start.
            config.check().map_err(broker_error)?;
            WakeupSettings::Kafka(config)
        }
    };
    Ok(settings)
}

/// A URL from the file (no password allowed), an environment variable or a file, or the
/// override from the environment, which beats them all.
///
/// # Errors
/// A usage error when more than one source is set, the variable is unset, the file unreadable or
/// empty, or a URL written in the file carries a password.
pub fn secret_url(
    url: Option<&str>,
    url_env: Option<&str>,
    url_file: Option<&Path>,
    url_override: Option<(String, &'static str)>,
    base_dir: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> anyhow::Result<Option<SecretUrl>> {
    check_one_url(url, url_env, url_file).map_err(|e| usage(e.to_string()))?;
    if let Some((value, name)) = url_override {
        return Ok(Some(SecretUrl::new(value, format!("${name}"))));
    }
    Secrets::new(env, base_dir)
        .url(url, url_env, url_file)
        .map_err(|e| usage(e.to_string()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_relay_refuses_a_writers_mode_it_cannot_apply() {
        use super::{WakeupMode, WakeupSettings};
        let settings = |mode| WakeupSettings::ListenNotify {
            channel: "erp".to_owned(),
            mode,
            listen_url: None,
        };
        let e = format!(
            "{:#}",
            settings(WakeupMode::InTransaction)
                .check_for_relay()
                .unwrap_err()
        );
        assert!(
            e.contains("mode = \"in_transaction\"") && e.contains("after_commit"),
            "{e}"
        );
        assert!(settings(WakeupMode::AfterCommit).check_for_relay().is_ok());
        assert!(WakeupSettings::None.check_for_relay().is_ok());
    }

    use super::*;

    fn resolve_text(
        text: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> anyhow::Result<WakeupSettings> {
        let section: WakeupSection = toml::from_str(text).map_err(|e| usage(e.to_string()))?;
        resolve(Some(&section), Path::new(""), env, &mut Vec::new())
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn every_broker_kind_resolves_and_builds() {
        let env =
            |name: &str| (name == "AMQP").then(|| "amqp://guest:pw@127.0.0.1:5672/%2f".to_owned());
        let cases = [
            "kind = \"redis\"\nurl = \"redis://127.0.0.1:6379/0\"\nchannel = \"c\"",
            "kind = \"nats\"\nurl = \"nats://127.0.0.1:4222\"\nsubject = \"s\"",
            "kind = \"rabbitmq\"\nurl_env = \"AMQP\"\nexchange = \"x\"",
            "kind = \"kafka\"\nbootstrap_servers = \"127.0.0.1:9092\"\ntopic = \"signals\"",
        ];
        for text in cases {
            let settings = resolve_text(text, &env).unwrap_or_else(|e| panic!("{text}: {e:#}"));
            assert!(
                !settings.describe().contains("pw"),
                "{}",
                settings.describe()
            );
            assert!(!format!("{settings:?}").contains("pw"));
            assert!(settings.build_broker().unwrap().is_some(), "{text}");
            assert!(settings.check_backend(DbKind::Sqlite).is_ok(), "{text}");
        }
        assert_eq!(
            resolve_text("kind = \"none\"", &no_env).unwrap(),
            WakeupSettings::None
        );
    }

    #[test]
    fn mistakes_name_the_key() {
        let e = format!(
            "{:#}",
            resolve_text("kind = \"redis\"", &no_env).unwrap_err()
        );
        assert!(e.contains("url_env") && e.contains(ENV_WAKEUP_URL), "{e}");
        let e = format!(
            "{:#}",
            resolve_text(
                "kind = \"nats\"\nurl = \"nats://h:4222\"\nchannel = \"c\"",
                &no_env
            )
            .unwrap_err()
        );
        assert!(e.contains("channel") && e.contains("subject"), "{e}");
        let e = format!(
            "{:#}",
            resolve_text(
                "kind = \"kafka\"\nbootstrap_servers = \"h:9092\"\ntopic = \"a b\"",
                &no_env
            )
            .unwrap_err()
        );
        assert!(e.contains("a b"), "{e}");
        let e = format!(
            "{:#}",
            resolve_text("kind = \"rabbitmq\"\nurl = \"amqp://u:pw@h/%2f\"", &no_env).unwrap_err()
        );
        assert!(e.contains("url_env") && !e.contains("pw@"), "{e}");
        let e = format!(
            "{:#}",
            resolve_text(
                "kind = \"rabbitmq\"\nurl = \"amqp://h/%2f\"\nexchange = \"amq.x\"",
                &no_env
            )
            .unwrap_err()
        );
        assert!(e.contains("amq."), "{e}");
    }

    #[test]
    fn the_environment_overrides_the_broker() {
        let env =
            |name: &str| (name == ENV_WAKEUP_URL).then(|| "redis://127.0.0.1:6379/2".to_owned());
        let s = resolve_text("kind = \"redis\"\nurl = \"redis://other:6379/0\"", &env).unwrap();
        let WakeupSettings::Redis(redis) = s else {
            panic!("{s:?}")
        };
        let url = redis.resolved_url().expect("resolved");
        assert_eq!(url.value, "redis://127.0.0.1:6379/2");
        let env = |name: &str| (name == ENV_WAKEUP_URL).then(|| "k1:9092".to_owned());
        let s = resolve_text("kind = \"kafka\"", &env).unwrap();
        let WakeupSettings::Kafka(kafka) = s else {
            panic!("{s:?}")
        };
        assert_eq!(kafka.bootstrap_servers.as_deref(), Some("k1:9092"));
        assert_eq!(kafka.topic, None);
        assert!(kafka.creates_topic());
        assert_eq!(kafka.replication_factor, None);
        let s = resolve_text(
            "kind = \"kafka\"\ncreate_topic = false\nreplication_factor = 3",
            &env,
        )
        .unwrap();
        let WakeupSettings::Kafka(kafka) = s else {
            panic!("{s:?}")
        };
        assert_eq!(kafka.bootstrap_servers.as_deref(), Some("k1:9092"));
        assert_eq!(kafka.topic, None);
        assert!(!kafka.creates_topic());
        assert_eq!(kafka.replication_factor, Some(3));
        let e = format!(
            "{:#}",
            resolve_text("kind = \"kafka\"\nreplication_factor = 0", &env).unwrap_err()
        );
        assert!(
            e.contains("replication_factor = 0") && e.contains("1 to 32767"),
            "{e}"
        );
        let mut warnings = Vec::new();
        resolve(None, Path::new(""), &env, &mut warnings).unwrap();
        assert!(warnings[0].contains(ENV_WAKEUP_URL), "{warnings:?}");
    }
}
