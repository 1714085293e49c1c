//! The environment's part in `[delivery]`: [`ENV_DELIVERY_URL`] and [`ENV_WEBHOOK_URL`] beat
//! the file's URL, and without a `[delivery]` section they pick its kind.

use hare_outbox::secrets::Secrets;

use super::{
    DeliverySection, DeliverySettings, ENV_DELIVERY_URL, ENV_WEBHOOK_URL, kinds_allowed,
    secret_refused, section_settings,
};
use crate::error::{redact_url, usage};

/// The `[delivery]` section with the environment overrides, or the default without one.
pub(super) fn main_section(
    section: Option<DeliverySection>,
    secrets: &Secrets<'_>,
    warnings: &mut Vec<String>,
) -> anyhow::Result<DeliverySettings> {
    let webhook_url = secrets.var(ENV_WEBHOOK_URL);
    let delivery_url = secrets.var(ENV_DELIVERY_URL);
    let section_given = section.is_some();
    let section = section.unwrap_or_default();
    let kind = match section.kind.clone() {
        Some(kind) => kind,
        None if section_given => {
            if section.table.contains_key("secret") {
                return Err(secret_refused());
            }
            return Err(usage(format!(
                "kind is missing; allowed: {}",
                kinds_allowed()
            )));
        }
        None => match (&delivery_url, &webhook_url) {
            (Some(url), _) => kind_of_scheme(url).ok_or_else(|| {
                usage(format!(
                    "{ENV_DELIVERY_URL} = {:?} does not say which delivery: with no [delivery] \
                     section its scheme picks the kind, one of http(s)://, amqp(s)://, \
                     redis(s)://, nats://, mqtt(s)://; for kafka write a [delivery] section",
                    redact_url(url)
                ))
            })?,
            (None, Some(_)) => "webhook".to_owned(),
            (None, None) => "stdout".to_owned(),
        },
    };
    let url_override = match kind.as_str() {
        "stdout" => {
            for (name, value) in [
                (ENV_DELIVERY_URL, &delivery_url),
                (ENV_WEBHOOK_URL, &webhook_url),
            ] {
                if value.is_some() {
                    warnings.push(format!(
                        "{name} is ignored: the config file chooses kind = \"stdout\""
                    ));
                }
            }
            None
        }
        "webhook" => delivery_url
            .map(|u| (u, ENV_DELIVERY_URL))
            .or(webhook_url.map(|u| (u, ENV_WEBHOOK_URL))),
        _ => {
            if webhook_url.is_some() {
                warnings.push(format!(
                    "{ENV_WEBHOOK_URL} is ignored: the [delivery] section is kind = \"{kind}\""
                ));
            }
            delivery_url.map(|u| (u, ENV_DELIVERY_URL))
        }
    };
    section_settings(&kind, section, url_override, secrets, warnings)
}

/// The kind a URL's scheme stands for, for [`ENV_DELIVERY_URL`] without a `[delivery]`.
fn kind_of_scheme(url: &str) -> Option<String> {
    let scheme = url.split_once("://")?.0.to_ascii_lowercase();
    let kind = match scheme.as_str() {
        "http" | "https" => "webhook",
        "amqp" | "amqps" => "rabbitmq",
        "redis" | "rediss" => "redis",
        "nats" | "tls" => "nats",
        "mqtt" | "mqtts" => "mqtt",
        _ => return None,
    };
    Some(kind.to_owned())
}
