//! Redis for hare-outbox: the Redis Streams delivery and the Redis pub/sub wake-up.
//!
//! - [`RedisStreamsDelivery`] appends every event to a stream with `XADD`: to the configured
//!   stream or, by default, to the stream named like the event's topic. A relay batch goes out as
//!   one pipeline, with one result per event.
//! - [`reader`] reads such an entry back on the consumer's side, as a
//!   [`ReceivedEvent`](hare_outbox_core::ReceivedEvent).
//! - [`RedisWakeup`] tells relays to poll right after a commit, through pub/sub on one channel.
//!   A wake-up is a hint: relays poll the table anyway, so a lost signal only delays delivery.
//!
//! Tested against Redis 7.0; any Redis from 5.0 (streams) should do. One server (or the primary
//! of a replicated set) per URL: Redis Cluster is not supported, since one batch pipeline may name
//! streams in different hash slots.
//!
//! ```no_run
//! use std::time::Duration;
//! use hare_outbox_core::{Outbox, OutboxRelay, OutboxTable, RelayConfig};
//! use hare_outbox_redis::{RedisStreamsDelivery, RedisWakeup};
//!
//! # async fn example(backend: impl hare_outbox_core::Backend) -> hare_outbox_core::Result<()> {
//! let wakeup = RedisWakeup::new("redis://127.0.0.1:6379/0")?;
//! // The same object on both sides: transactions signal it after commit, relays subscribe.
//! let outbox = Outbox::new(backend, OutboxTable::parse("outbox")?).with_wakeup(wakeup)?;
//! let delivery = RedisStreamsDelivery::new("redis://127.0.0.1:6379/0")?
//!     .with_stream("events")?
//!     .with_max_length(1_000_000)?;
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

pub use config::RedisDeliveryConfig;
pub use delivery::{DEFAULT_TIMEOUT, RedisStreamsDelivery, error_kind};
pub use wakeup::{DEFAULT_CHANNEL, RedisWakeup};
pub use wakeup_config::RedisWakeupConfig;

/// Re-exported so callers can build a [`redis::Client`] for the `from_client` constructors
/// without depending on the same `redis` version themselves.
pub use redis;

use hare_outbox_core::{Error, Result};

/// Parses `url` into a client, or says which URL is wrong and what is expected.
fn open_client(what: &str, url: &str) -> Result<redis::Client> {
    redis::Client::open(url).map_err(|e| {
        Error::configuration(format!(
            "{what} url {:?} is not a valid Redis URL ({e}); expected e.g. \
             \"redis://127.0.0.1:6379/0\" or \"redis://:password@host:6379/0\"",
            redact(url)
        ))
    })
}

/// How a client's server is shown in messages and logs: `redis 127.0.0.1:6379 db 0`, never with
/// a password.
fn describe_client(client: &redis::Client) -> String {
    let info = client.get_connection_info();
    format!("redis {} db {}", info.addr(), info.redis_settings().db())
}

/// `url` as messages show it: the shared redaction of connection URLs
/// ([`hare_outbox_core::redact::redact_url`]), password and secret parameters as `***`.
fn redact(url: &str) -> String {
    hare_outbox_core::redact::redact_url(url, hare_outbox_core::redact::UrlKind::Connection)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_hides_only_the_password() {
        assert_eq!(
            redact("redis://user:s3cret@host:6379/0"),
            "redis://user:***@host:6379/0"
        );
        assert_eq!(redact("redis://:s3cret@host/0"), "redis://:***@host/0");
        assert_eq!(redact("redis://host:6379/0"), "redis://host:6379/0");
        assert_eq!(redact("redis://user@host"), "redis://user@host");
        assert_eq!(redact("not a url"), "not a url");
    }

    #[test]
    fn bad_urls_are_configuration_errors_naming_the_url() {
        for url in ["", "http://host:6379", "redis://:pw@host:notaport/0"] {
            let e = open_client("redis delivery", url).unwrap_err();
            assert!(matches!(e, Error::Configuration(_)), "{url}: {e}");
            assert!(!e.to_string().contains("pw@"), "{e}");
        }
        let e = open_client("redis delivery", "http://host:6379").unwrap_err();
        assert!(e.to_string().contains("\"http://host:6379\""), "{e}");
    }
}
