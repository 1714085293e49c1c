//! RabbitMQ for hare-outbox: the AMQP delivery and the fanout-exchange wake-up.
//!
//! - [`RabbitMqDelivery`] publishes every event as a persistent message through an existing
//!   exchange (the default exchange `""` unless one is configured), with the configured routing
//!   key or the event's topic, and waits for the broker's publisher confirm. A message the broker
//!   cannot route (`mandatory`) or refuses (a nack) fails its event, which the relay retries.
//! - [`RabbitMqWakeup`] tells relays to poll right after a commit, through a durable fanout
//!   exchange; each wake-up object listens on one exclusive, auto-delete queue of its own. A
//!   wake-up is a hint: relays poll the table anyway, so a lost signal only delays delivery.
//!
//! Tested against RabbitMQ 3.10 (AMQP 0-9-1, through [`lapin`]).
//!
//! ```no_run
//! use hare_outbox_core::{Outbox, OutboxRelay, OutboxTable, RelayConfig};
//! use hare_outbox_rabbitmq::{RabbitMqDelivery, RabbitMqWakeup};
//!
//! # async fn example(backend: impl hare_outbox_core::Backend) -> hare_outbox_core::Result<()> {
//! let wakeup = RabbitMqWakeup::new("amqp://guest:guest@127.0.0.1:5672/%2f")?;
//! // The same object on both sides: transactions signal it after commit, relays subscribe.
//! let outbox = Outbox::new(backend, OutboxTable::parse("outbox")?).with_wakeup(wakeup)?;
//! // Every event goes to the existing exchange "events", routed by its topic.
//! let delivery = RabbitMqDelivery::new("amqp://guest:guest@127.0.0.1:5672/%2f")?
//!     .with_exchange("events")?;
//! let relay = OutboxRelay::new(outbox, delivery, RelayConfig::default())?;
//! relay.start()?;
//! # relay.stop().await?;
//! # Ok(())
//! # }
//! ```

mod config;
mod delivery;
pub mod reader;
mod wakeup;
mod wakeup_config;

pub use config::RabbitMqDeliveryConfig;
pub use delivery::{DEFAULT_TIMEOUT, ORDERING_KEY_HEADER, RabbitMqDelivery};
pub use wakeup::{DEFAULT_EXCHANGE, RabbitMqWakeup};
pub use wakeup_config::RabbitMqWakeupConfig;

/// Re-exported so callers can name [`lapin`] types without depending on the same version
/// themselves.
pub use lapin;

use hare_outbox_core::{Error, Result};
use lapin::types::ShortString;
use lapin::uri::AMQPUri;

/// The longest exchange name, routing key or header name AMQP 0-9-1 can carry: 255 bytes.
const MAX_SHORT_STRING: usize = 255;

/// A parsed broker URL and how it is shown in messages and logs.
#[derive(Clone)]
struct Broker {
    uri: AMQPUri,
    /// `amqp 127.0.0.1:5672 vhost "/"`, never with a password.
    describe: String,
}

/// Parses `url` (`amqp[s]://[user[:password]@]host[:port][/vhost]`), or says which URL is wrong
/// (password hidden) and what is expected.
fn parse_url(what: &str, url: &str) -> Result<Broker> {
    let invalid = |reason: String| {
        Error::configuration(format!(
            "{what} url {:?} is not a valid AMQP URL ({reason}); expected e.g. \
             \"amqp://guest:guest@127.0.0.1:5672/%2f\"",
            redact(url)
        ))
    };
    if url.trim().is_empty() {
        return Err(invalid("it is empty".to_owned()));
    }
    // The parser's messages may quote the URL; only its kind of error is kept.
    let mut uri: AMQPUri = url
        .parse()
        .map_err(|e: String| invalid(e.replace(url, &redact(url))))?;
    // The parser keeps only domain names and puts "localhost" in place of an IP address.
    if let Some(ip) = ip_host(url) {
        uri.authority.host = ip;
    }
    if uri.authority.host.is_empty() {
        return Err(invalid("it names no host".to_owned()));
    }
    let describe = format!(
        "amqp {}:{} vhost {:?}",
        uri.authority.host, uri.authority.port, uri.vhost
    );
    Ok(Broker { uri, describe })
}

/// The host of `url` when it is an IP address (`127.0.0.1`, `[::1]`), without brackets.
fn ip_host(url: &str) -> Option<String> {
    let rest = &url[url.find("://")? + 3..];
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let host_port = &authority[authority.rfind('@').map_or(0, |at| at + 1)..];
    let host = match host_port.strip_prefix('[') {
        Some(v6) => &v6[..v6.find(']')?],
        None => &host_port[..host_port.find(':').unwrap_or(host_port.len())],
    };
    host.parse::<std::net::IpAddr>()
        .ok()
        .map(|ip| ip.to_string())
}

impl std::fmt::Debug for Broker {
    /// Shows where the broker is, never the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe)
    }
}

/// `url` as messages show it: the shared redaction of connection URLs
/// ([`hare_outbox_core::redact::redact_url`]), password and secret parameters as `***`.
fn redact(url: &str) -> String {
    hare_outbox_core::redact::redact_url(url, hare_outbox_core::redact::UrlKind::Connection)
}

/// `name` as an exchange name, or a configuration error naming it: non-empty, at most 255 bytes,
/// without control characters.
fn exchange_name(what: &str, name: String) -> Result<ShortString> {
    let problem = if name.is_empty() {
        Some("it is empty")
    } else if name.len() > MAX_SHORT_STRING {
        Some("it is longer than 255 bytes")
    } else if name.chars().any(char::is_control) {
        Some("it contains control characters")
    } else {
        None
    };
    match problem {
        Some(problem) => Err(Error::configuration(format!(
            "{what} {name:?} is not a valid exchange name: {problem}"
        ))),
        None => ShortString::try_new(name).map_err(|e| Error::configuration(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_hides_only_the_password() {
        assert_eq!(
            redact("amqp://user:s3cret@host:5672/%2f"),
            "amqp://user:***@host:5672/%2f"
        );
        assert_eq!(redact("amqp://host:5672"), "amqp://host:5672");
        assert_eq!(redact("amqp://user@host"), "amqp://user@host");
        assert_eq!(redact("user:pw@host"), "user:***@host");
    }

    #[test]
    fn urls_parse_and_bad_ones_are_configuration_errors_without_the_password() {
        let broker = parse_url("rabbitmq delivery", "amqp://u:pw@127.0.0.1:5673/%2f").unwrap();
        assert_eq!(broker.describe, "amqp 127.0.0.1:5673 vhost \"/\"");
        assert_eq!(broker.uri.authority.userinfo.password, "pw");
        let broker = parse_url("rabbitmq delivery", "amqp://[::1]").unwrap();
        assert_eq!(broker.uri.authority.host, "::1");
        let broker = parse_url("rabbitmq delivery", "amqp://10.1.2.3/").unwrap();
        assert_eq!(broker.describe, "amqp 10.1.2.3:5672 vhost \"\"");
        let broker = parse_url("rabbitmq delivery", "amqp://localhost").unwrap();
        assert_eq!(broker.describe, "amqp localhost:5672 vhost \"/\"");
        for url in [
            "",
            "http://host:5672",
            "amqp://u:pw@host:notaport/",
            "not a url",
            "amqp://u:pw@host/?heartbeat=x",
        ] {
            let e = parse_url("rabbitmq delivery", url).unwrap_err();
            assert!(matches!(e, Error::Configuration(_)), "{url}: {e}");
            assert!(!e.to_string().contains(":pw@"), "{e}");
            assert!(e.to_string().contains("rabbitmq delivery url"), "{e}");
        }
        let e = parse_url("rabbitmq delivery", "http://host:5672").unwrap_err();
        assert!(e.to_string().contains("\"http://host:5672\""), "{e}");
    }

    #[test]
    fn exchange_names_are_checked() {
        assert_eq!(
            exchange_name("x", "events".to_owned()).unwrap().as_str(),
            "events"
        );
        for bad in [String::new(), "a".repeat(256), "a\nb".to_owned()] {
            let e = exchange_name("rabbitmq exchange", bad.clone()).unwrap_err();
            assert!(matches!(e, Error::Configuration(_)), "{bad:?}: {e}");
            assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
        }
    }
}
