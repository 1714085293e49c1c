//! Kafka for hare-outbox: the Kafka delivery and the Kafka signal-topic wake-up.
//!
//! - [`KafkaDelivery`] produces every event to a Kafka topic — the configured one or, by default,
//!   the topic named like the event's topic — keyed by the ordering key, with the event headers as
//!   Kafka headers, through an idempotent producer with `acks=all`. A relay batch is sent whole:
//!   every message is handed to the producer first, then all acknowledgements are awaited.
//! - [`KafkaWakeup`] tells relays to poll right after a commit, through a signal topic that every
//!   subscriber reads from its end outside consumer groups. A wake-up is a hint: relays poll the
//!   table anyway, so a lost signal only delays delivery.
//!
//! Built on [`rdkafka`] (librdkafka, bundled and built from source). Tested against tansu 0.6, a
//! Kafka-protocol broker; any Kafka from 2.4 should do.
//!
//! ```no_run
//! use hare_outbox_core::{Outbox, OutboxRelay, OutboxTable, RelayConfig};
//! use hare_outbox_kafka::{KafkaDelivery, KafkaWakeup};
//!
//! # async fn example(backend: impl hare_outbox_core::Backend) -> hare_outbox_core::Result<()> {
//! let wakeup = KafkaWakeup::new("127.0.0.1:9092")?;
//! // The same object on both sides: transactions signal it after commit, relays subscribe.
//! let outbox = Outbox::new(backend, OutboxTable::parse("outbox")?).with_wakeup(wakeup)?;
//! // Every event goes to the Kafka topic "events"; without `with_topic`, to its own topic.
//! let delivery = KafkaDelivery::new("127.0.0.1:9092")?.with_topic("events")?;
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

pub use config::{KafkaDeliveryConfig, is_secret_property};
pub use delivery::{DEFAULT_TIMEOUT, KafkaDelivery, error_kind};
pub use wakeup::{DEFAULT_TOPIC, KafkaWakeup, SIGNAL_RETENTION};
pub use wakeup_config::KafkaWakeupConfig;

/// Re-exported so callers can build a [`rdkafka::producer::FutureProducer`] or a
/// [`rdkafka::ClientConfig`] for the `from_…` constructors without depending on the same
/// `rdkafka` version themselves.
pub use rdkafka;

use hare_outbox_core::{Error, Result};

/// The longest topic name Kafka accepts.
const MAX_TOPIC_LENGTH: usize = 249;

/// Why `name` is not a valid Kafka topic name, or `None` when it is one: 1 to 249 characters out
/// of `a-z A-Z 0-9 . _ -`, and neither `.` nor `..`.
pub fn invalid_topic_reason(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("it is empty".to_owned());
    }
    if name.len() > MAX_TOPIC_LENGTH {
        return Some(format!(
            "it is {} characters long, more than Kafka's {MAX_TOPIC_LENGTH}",
            name.len()
        ));
    }
    if name == "." || name == ".." {
        return Some("Kafka does not allow \".\" or \"..\" as a topic name".to_owned());
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Some(format!(
            "it contains {bad:?}; Kafka topic names allow only ASCII letters, digits, '.', '_' \
             and '-'"
        ));
    }
    None
}

/// Checks the bootstrap server list: not empty, no whitespace inside.
fn check_bootstrap(what: &str, servers: &str) -> Result<()> {
    let trimmed = servers.trim();
    if trimmed.is_empty()
        || trimmed.chars().any(char::is_whitespace)
        || trimmed.split(',').any(str::is_empty)
    {
        return Err(Error::configuration(format!(
            "{what} bootstrap servers {servers:?} are not a list of host:port; expected e.g. \
             \"127.0.0.1:9092\" or \"kafka1:9092,kafka2:9092\""
        )));
    }
    Ok(())
}

/// A librdkafka duration setting in whole milliseconds (at least 1).
fn millis(what: &str, duration: std::time::Duration) -> Result<String> {
    let ms = duration.as_millis();
    if ms == 0 || ms > i32::MAX as u128 {
        return Err(Error::configuration(format!(
            "{what} {:.3} s is out of range; give between 1 ms and {} s",
            duration.as_secs_f64(),
            i32::MAX / 1000
        )));
    }
    Ok(ms.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn topic_names_follow_kafka_rules() {
        for good in [
            "orders",
            "orders.created",
            "a_b-c.D9",
            "x",
            &"t".repeat(249),
        ] {
            assert_eq!(invalid_topic_reason(good), None, "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            "orders created",
            "a/b",
            "ünï",
            "a:b",
            &"t".repeat(250),
        ] {
            assert!(invalid_topic_reason(bad).is_some(), "{bad}");
        }
        assert!(invalid_topic_reason("a b").unwrap().contains("' '"),);
    }

    #[test]
    fn bootstrap_lists_are_checked() {
        check_bootstrap("kafka delivery", "127.0.0.1:9092").unwrap();
        check_bootstrap("kafka delivery", "a:9092,b:9093").unwrap();
        for bad in ["", "  ", "a:1, b:2", "a:1,,b:2"] {
            let e = check_bootstrap("kafka delivery", bad).unwrap_err();
            assert!(matches!(e, Error::Configuration(_)), "{bad}: {e}");
            assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
        }
    }

    #[test]
    fn millis_is_bounded() {
        assert_eq!(millis("t", Duration::from_secs(10)).unwrap(), "10000");
        assert!(millis("t", Duration::ZERO).is_err());
        assert!(millis("t", Duration::from_secs(u64::from(u32::MAX))).is_err());
    }
}
