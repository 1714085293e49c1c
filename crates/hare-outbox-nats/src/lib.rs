//! NATS for hare-outbox: the JetStream delivery and the NATS wake-up.
//!
//! - [`NatsDelivery`] publishes every event to JetStream, on the subject named like its topic, with
//!   `Nats-Msg-Id` set to the event id so that the stream drops the duplicates at-least-once
//!   delivery makes, and waits for the stream's acknowledgement.
//! - [`NatsWakeup`] tells relays to poll right after a commit, through a core NATS subject. A
//!   wake-up is a hint: relays poll the table anyway, so a lost signal only delays delivery.
//!
//! Tested against nats-server 2.9 with JetStream enabled (`-js`).
//!
//! ```no_run
//! use hare_outbox_core::{Outbox, OutboxRelay, OutboxTable, RelayConfig};
//! use hare_outbox_nats::{NatsDelivery, NatsWakeup};
//!
//! # async fn example(backend: impl hare_outbox_core::Backend) -> hare_outbox_core::Result<()> {
//! let wakeup = NatsWakeup::new("nats://127.0.0.1:4222")?;
//! // The same object on both sides: transactions signal it after commit, relays subscribe.
//! let outbox = Outbox::new(backend, OutboxTable::parse("outbox")?).with_wakeup(wakeup)?;
//! // Topics such as "orders.created" go to subjects "events.orders.created", stored by the
//! // stream EVENTS (created on the first delivery unless it exists).
//! let delivery = NatsDelivery::new("nats://127.0.0.1:4222")?
//!     .with_subject_prefix("events.")?
//!     .with_stream("EVENTS", ["events.>"])?;
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

pub use config::NatsDeliveryConfig;
pub use delivery::{DEFAULT_TIMEOUT, NatsDelivery, ORDERING_KEY_HEADER};
pub use wakeup::{DEFAULT_SUBJECT, NatsWakeup};
pub use wakeup_config::NatsWakeupConfig;

/// Re-exported so callers can build an [`async_nats::Client`] for
/// [`NatsDelivery::from_client`] without depending on the same version themselves.
pub use async_nats;

use async_nats::ServerAddr;
use hare_outbox_core::{Error, Result};

/// Parses `url` — one server or several separated by commas, each `nats://[user:password@]host[:port]`
/// (`nats://` and port 4222 are assumed when left out) — or says which one is wrong.
fn parse_servers(what: &str, url: &str) -> Result<Vec<ServerAddr>> {
    if url.trim().is_empty() {
        return Err(Error::configuration(format!(
            "{what} url \"\" is empty; expected e.g. \"nats://127.0.0.1:4222\""
        )));
    }
    let servers: Vec<ServerAddr> = url
        .split(',')
        .map(|part| {
            part.trim().parse::<ServerAddr>().map_err(|e| {
                Error::configuration(format!(
                    "{what} url {:?} is not a valid NATS server URL ({e}); expected e.g. \
                     \"nats://127.0.0.1:4222\" or \"nats://user:password@host:4222\"",
                    redact(part.trim())
                ))
            })
        })
        .collect::<Result<_>>()?;
    Ok(servers)
}

/// How servers are shown in messages and logs: `nats 127.0.0.1:4222`, never with a password.
fn describe_servers(servers: &[ServerAddr]) -> String {
    let list: Vec<String> = servers
        .iter()
        .map(|s| format!("{}:{}", s.host(), s.port()))
        .collect();
    format!("nats {}", list.join(","))
}

/// `url` as messages show it: the shared redaction of connection URLs
/// ([`hare_outbox_core::redact::redact_url`]), password and secret parameters as `***`.
fn redact(url: &str) -> String {
    hare_outbox_core::redact::redact_url(url, hare_outbox_core::redact::UrlKind::Connection)
}

/// Why `subject` cannot be published to, if it cannot: it must be non-empty tokens separated by
/// `.`, without whitespace or control characters, and without the wildcards `*` and `>`.
fn publish_subject_problem(subject: &str) -> Option<String> {
    if subject.is_empty() {
        return Some("it is empty".to_owned());
    }
    if subject.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Some("it contains whitespace or control characters".to_owned());
    }
    for token in subject.split('.') {
        if token.is_empty() {
            return Some("it has an empty token (a leading, trailing or double \".\")".to_owned());
        }
        if token == "*" || token == ">" {
            return Some(format!(
                "its token {token:?} is a wildcard, which cannot be published to"
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_hides_passwords_and_tokens() {
        assert_eq!(
            redact("nats://user:s3cret@host:4222"),
            "nats://user:***@host:4222"
        );
        assert_eq!(redact("nats://t0ken@host"), "nats://***@host");
        assert_eq!(redact("nats://host:4222"), "nats://host:4222");
        assert_eq!(redact("user:pw@host"), "user:***@host");
    }

    #[test]
    fn server_lists_parse_and_bad_urls_are_configuration_errors() {
        let servers = parse_servers("nats delivery", "nats://a:4222, b").unwrap();
        assert_eq!(describe_servers(&servers), "nats a:4222,b:4222");
        for url in ["", "http://host:4222", "nats://u:pw@host:notaport"] {
            let e = parse_servers("nats delivery", url).unwrap_err();
            assert!(matches!(e, Error::Configuration(_)), "{url}: {e}");
            assert!(!e.to_string().contains("pw@"), "{e}");
        }
        let e = parse_servers("nats delivery", "http://host:4222").unwrap_err();
        assert!(e.to_string().contains("\"http://host:4222\""), "{e}");
    }

    #[test]
    fn publish_subjects_are_checked() {
        assert_eq!(publish_subject_problem("orders.created"), None);
        assert_eq!(publish_subject_problem("a-b_c.ünï"), None);
        for bad in ["", "a b", "a..b", ".a", "a.", "a.*", ">", "a.>", "a\nb"] {
            assert!(publish_subject_problem(bad).is_some(), "{bad:?}");
        }
    }
}
