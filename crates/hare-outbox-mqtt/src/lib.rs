//! MQTT for hare-outbox: the MQTT delivery, QoS 1.
//!
//! [`MqttDelivery`] publishes every event as one MQTT message with QoS 1 ("at least once") and
//! reports success only after the broker acknowledged it (`PUBACK`). The MQTT topic is the event's
//! topic with dots turned into slashes (`library.loan.created` → `library/loan/created`), after an
//! optional prefix; the payload is [`OutboxEvent::body`](hare_outbox_core::OutboxEvent::body).
//!
//! The client is [rumqttc](https://docs.rs/rumqttc/0.25) 0.25, speaking MQTT 3.1.1. Tested against
//! Mosquitto 2.0; any MQTT 3.1.1 broker should do.
//!
//! # TLS
//! Plain TCP (`mqtt://`) only by default, so no TLS stack is compiled. Enable this crate's `tls`
//! feature (rumqttc's `use-rustls`) to accept `mqtts://` URLs, which then use rustls with the
//! platform's root certificates. When more than one rustls crypto provider is compiled into the
//! program, install one at startup
//! (`rustls::crypto::aws_lc_rs::default_provider().install_default()`). For client certificates or
//! your own roots, build [`rumqttc::MqttOptions`] with `set_transport(Transport::tls_with_config(…))`
//! and pass them to [`MqttDelivery::from_options`].
//!
//! ```no_run
//! use hare_outbox_core::{Outbox, OutboxRelay, OutboxTable, RelayConfig};
//! use hare_outbox_mqtt::MqttDelivery;
//!
//! # async fn example(backend: impl hare_outbox_core::Backend) -> hare_outbox_core::Result<()> {
//! let outbox = Outbox::new(backend, OutboxTable::parse("outbox")?);
//! // `library.loan.created` is published to `site-1/library/loan/created`.
//! let delivery = MqttDelivery::new("mqtt://127.0.0.1:1883?client_id=outbox-relay-1")?
//!     .with_topic_prefix("site-1")?;
//! let relay = OutboxRelay::new(outbox, delivery, RelayConfig::default())?;
//! relay.start()?;
//! # relay.stop().await?;
//! # Ok(())
//! # }
//! ```

mod config;
mod connection;
mod delivery;

pub use config::MqttDeliveryConfig;
pub use delivery::{DEFAULT_TIMEOUT, MqttDelivery, mqtt_topic};

/// Re-exported so callers can build [`rumqttc::MqttOptions`] for
/// [`MqttDelivery::from_options`] without depending on the same `rumqttc` version themselves.
pub use rumqttc;
