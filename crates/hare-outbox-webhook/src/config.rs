//! [`WebhookDeliveryConfig`]: the webhook delivery as a config file describes it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use hare_outbox_core::Delivery;
use hare_outbox_core::delivery::DeliveryConfig;
use hare_outbox_core::redact::{UrlKind, header_value, redact_url};
use hare_outbox_core::secrets::{
    ConfigError, SecretUrl, SecretValue, Secrets, seconds, use_url_env,
};
use serde::Deserialize;

use crate::WebhookDelivery;

/// The webhook delivery as a config file describes it (`kind = "webhook"` in the
/// `hare-outbox` command's `[delivery]`).
///
/// The URL is given by exactly one of `url` (no password allowed in it), `url_env` or
/// `url_file`; the signing secret only as `secret_env` or `secret_file` (see
/// [`hare_outbox_core::secrets`]). `Debug` hides the secret and secret header values.
///
/// # Example
///
/// ```
/// use hare_outbox_webhook::WebhookDeliveryConfig;
///
/// let config: WebhookDeliveryConfig = toml::from_str(
///     r#"
///     url = "https://hooks.example.com/outbox"
///     timeout_seconds = 5
///     headers = { "X-Source" = "billing" }
///     "#,
/// )?;
/// let delivery = config.build()?;
/// # let _ = delivery;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct WebhookDeliveryConfig {
    /// The URL, written in the file; refused when it carries a password.
    pub url: Option<String>,
    /// The environment variable holding the URL.
    pub url_env: Option<String>,
    /// A file holding the URL (relative to the config file's directory).
    pub url_file: Option<PathBuf>,
    /// Timeout of one request, in seconds. Defaults to 10 s.
    pub timeout_seconds: Option<f64>,
    /// Extra headers sent with every request. Defaults to none.
    pub headers: Option<BTreeMap<String, String>>,
    /// `true` shows the URL's path in logs, `last_error`, result records and the dashboard
    /// (the userinfo password and query values stay hidden). Defaults to `false`: only the
    /// scheme, host and port are shown.
    pub url_public: Option<bool>,
    /// The header carrying the HMAC-SHA256 signature. Defaults to
    /// [`DEFAULT_SIGNATURE_HEADER`](crate::DEFAULT_SIGNATURE_HEADER) (`hare-outbox-signature`).
    pub signature_header: Option<String>,
    /// The environment variable holding the signing secret. Defaults to none: unsigned.
    pub secret_env: Option<String>,
    /// A file holding the signing secret (relative to the config file's directory).
    pub secret_file: Option<PathBuf>,
    #[serde(skip)]
    resolved: Option<(SecretUrl, Option<SecretValue>)>,
}

impl std::fmt::Debug for WebhookDeliveryConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let headers = self.headers.as_ref().map(|headers| {
            headers
                .iter()
                .map(|(n, v)| (n.as_str(), header_value(n, v)))
                .collect::<Vec<_>>()
        });
        f.debug_struct("WebhookDeliveryConfig")
            .field("url", &self.url.as_deref().map(|u| self.shown(u)))
            .field("url_env", &self.url_env)
            .field("url_file", &self.url_file)
            .field("timeout_seconds", &self.timeout_seconds)
            .field("headers", &headers)
            .field("url_public", &self.url_public)
            .field("signature_header", &self.signature_header)
            .field("secret_env", &self.secret_env)
            .field("secret_file", &self.secret_file)
            .field(
                "secret",
                &self
                    .resolved
                    .as_ref()
                    .and_then(|(_, s)| s.as_ref().map(|s| s.source.as_str())),
            )
            .finish()
    }
}

impl WebhookDeliveryConfig {
    /// The keys a config may set.
    pub const KEYS: &'static [&'static str] = &[
        "url",
        "url_env",
        "url_file",
        "timeout_seconds",
        "headers",
        "signature_header",
        "secret_env",
        "secret_file",
        "url_public",
    ];

    /// `url` as logs and messages show it: scheme, host and port, or with `url_public` the
    /// path too (password and query values hidden).
    pub fn shown(&self, url: &str) -> String {
        let kind = if self.url_public.unwrap_or(false) {
            UrlKind::PublicEndpoint
        } else {
            UrlKind::Endpoint
        };
        redact_url(url, kind)
    }

    /// Where the signing secret came from (`$VARIABLE`, `file PATH`) after
    /// [`DeliveryConfig::resolve`]; `None` when requests are not signed.
    pub fn secret_source(&self) -> Option<&str> {
        self.resolved
            .as_ref()
            .and_then(|(_, s)| s.as_ref().map(|s| s.source.as_str()))
    }

    /// The signing secret as [`DeliveryConfig::resolve`] read it; `None` before, or when
    /// requests are not signed.
    pub fn resolved_secret(&self) -> Option<&SecretValue> {
        self.resolved.as_ref().and_then(|(_, s)| s.as_ref())
    }

    fn secrets(
        &self,
        secrets: &Secrets<'_>,
    ) -> Result<(SecretUrl, Option<SecretValue>), ConfigError> {
        if let Some(resolved) = &self.resolved {
            return Ok(resolved.clone());
        }
        let url = secrets
            .url(
                self.url.as_deref(),
                self.url_env.as_deref(),
                self.url_file.as_deref(),
            )?
            .ok_or_else(|| {
                ConfigError::missing_endpoint("kind = \"webhook\" needs url, url_env or url_file")
            })?;
        let secret = secrets.value(
            "secret",
            self.secret_env.as_deref(),
            self.secret_file.as_deref(),
        )?;
        Ok((url, secret))
    }

    fn delivery(
        &self,
        url: &SecretUrl,
        secret: Option<&SecretValue>,
    ) -> Result<WebhookDelivery, ConfigError> {
        let timeout = self
            .timeout_seconds
            .map(|v| seconds("timeout_seconds", v, false))
            .transpose()?;
        let mut delivery = WebhookDelivery::builder()
            .with_url(url.value.clone())
            .with_public_url(self.url_public.unwrap_or(false))
            .build()
            .map_err(|e| {
                ConfigError::with_source(format!("url {:?}", self.shown(&url.value)), e)
            })?;
        if let Some(timeout) = timeout {
            delivery = delivery.with_timeout(timeout);
        }
        for (name, value) in self.headers.iter().flatten() {
            delivery = delivery
                .with_header(name, value)
                .map_err(|e| ConfigError::with_source(format!("headers.{name:?}"), e))?;
        }
        if let Some(name) = &self.signature_header {
            delivery = delivery
                .with_signature_header(name)
                .map_err(|e| ConfigError::with_source(format!("signature_header {name:?}"), e))?;
        }
        if let Some(secret) = secret {
            delivery = delivery.with_secret(secret.bytes.clone())?;
        }
        Ok(delivery)
    }

    /// The delivery; secrets from [`DeliveryConfig::resolve`], or else from the process's
    /// environment. Nothing is connected yet.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the key: no URL, an unset variable, both `secret_env` and
    /// `secret_file`, an unreadable or empty secret file, `timeout_seconds` not above 0, a URL,
    /// header or signature header the delivery refuses.
    pub fn build(&self) -> Result<WebhookDelivery, ConfigError> {
        let (url, secret) = self.secrets(&Secrets::default())?;
        self.delivery(&url, secret.as_ref())
    }
}

impl DeliveryConfig for WebhookDeliveryConfig {
    fn kind(&self) -> &'static str {
        "webhook"
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
        Ok(Vec::new())
    }

    fn resolve(&mut self, secrets: &Secrets<'_>) -> Result<(), ConfigError> {
        let (url, secret) = self.secrets(secrets)?;
        self.delivery(&url, secret.as_ref())?;
        self.resolved = Some((url, secret));
        Ok(())
    }

    fn resolved_url(&self) -> Option<&SecretUrl> {
        self.resolved.as_ref().map(|(url, _)| url)
    }

    fn describe(&self) -> String {
        let signed = match self.secret_source() {
            Some(source) => format!("signed, secret from {source}"),
            None => "unsigned".to_owned(),
        };
        match &self.resolved {
            Some((url, _)) => format!("webhook {} ({signed})", self.shown(&url.value)),
            None => format!("webhook ({signed})"),
        }
    }

    fn build_delivery(&self) -> Result<Arc<dyn Delivery>, ConfigError> {
        Ok(Arc::new(self.build()?))
    }
}
