//! The dashboard's options.

use std::time::Duration;

use hare_outbox_core::Destinations;
use hare_outbox_core::journal::{DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, ObjectName};
use metrics_exporter_prometheus::PrometheusHandle;

use crate::error::{Error, Result};

/// The longest title accepted, in characters.
const MAX_TITLE_LENGTH: usize = 200;
/// The shortest token accepted, in characters.
pub(crate) const MIN_TOKEN_LENGTH: usize = 8;

/// Backlog limits past which `/healthz` answers 503. Every limit is optional; none set = the
/// check only needs the database to answer. Defaults to no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[non_exhaustive]
pub struct HealthThresholds {
    /// Most events still to deliver (pending, leased or retrying). Defaults to no limit.
    pub max_pending: Option<i64>,
    /// Oldest age of an event still to deliver. Defaults to no limit.
    pub max_oldest_pending_age: Option<Duration>,
    /// Most destinations open at once (circuit breaker; needs
    /// [`DashboardOptions::with_destinations`]). Defaults to no limit: open destinations are
    /// listed but the answer stays 200, since a relay whose endpoint is down is not itself
    /// unhealthy.
    pub max_open_destinations: Option<usize>,
    /// Most dead-lettered events. Defaults to no limit.
    pub max_dead_lettered: Option<i64>,
}

impl HealthThresholds {
    /// No limits.
    pub fn new() -> Self {
        Self::default()
    }

    /// At most `max` events still to deliver; `None` = no limit.
    pub fn with_max_pending(mut self, max: Option<i64>) -> Self {
        self.max_pending = max;
        self
    }

    /// The oldest event still to deliver at most `max` old; `None` = no limit.
    pub fn with_max_oldest_pending_age(mut self, max: Option<Duration>) -> Self {
        self.max_oldest_pending_age = max;
        self
    }

    /// At most `max` dead letters; `None` = no limit.
    pub fn with_max_dead_lettered(mut self, max: Option<i64>) -> Self {
        self.max_dead_lettered = max;
        self
    }

    /// At most `max` destinations open at once; `None` = no limit.
    pub fn with_max_open_destinations(mut self, max: Option<usize>) -> Self {
        self.max_open_destinations = max;
        self
    }
}

/// How a [`Dashboard`](crate::Dashboard) behaves. Build with [`DashboardOptions::new`] and the
/// `with_*` methods; each says its default.
#[derive(Clone)]
#[non_exhaustive]
pub struct DashboardOptions {
    /// The token mutating actions need (`Authorization: Bearer <token>`); `None` = mutating
    /// actions are refused with 403. Defaults to `None`.
    pub token: Option<String>,
    /// `/healthz` limits. Defaults to none.
    pub thresholds: HealthThresholds,
    /// Where `/metrics` reads Prometheus text from; `None` = `/metrics` answers 404 saying so.
    /// Defaults to `None`.
    pub metrics: Option<PrometheusHandle>,
    /// The destinations of a relay running in this process and their circuit breakers
    /// ([`OutboxRelay::destinations`](hare_outbox_core::OutboxRelay::destinations)), shown by the
    /// page, `GET /api/destinations` and `/healthz`; `None` = not shown (the relay runs
    /// elsewhere). Defaults to `None`.
    pub destinations: Option<Destinations>,
    /// Events per page when the request names no `limit`, 1 to 1000. Defaults to 50.
    pub page_size: u32,
    /// The page title. Defaults to `hare-outbox`.
    pub title: String,
    /// Whether [`Dashboard::bind`](crate::Dashboard::bind) and
    /// [`Dashboard::serve`](crate::Dashboard::serve) accept an address other than loopback.
    /// Defaults to `false`.
    pub allow_remote: bool,
    /// What the object column shows and the object filter compares: the captured table
    /// (`plan_prod_orders #18`) or the capture's label (`prod_order #18`). Defaults to
    /// [`ObjectName::Table`].
    pub object_name: ObjectName,
}

impl std::fmt::Debug for DashboardOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DashboardOptions")
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("thresholds", &self.thresholds)
            .field("metrics", &self.metrics.is_some())
            .field("destinations", &self.destinations.is_some())
            .field("page_size", &self.page_size)
            .field("title", &self.title)
            .field("allow_remote", &self.allow_remote)
            .field("object_name", &self.object_name)
            .finish()
    }
}

impl Default for DashboardOptions {
    fn default() -> Self {
        DashboardOptions {
            token: None,
            thresholds: HealthThresholds::default(),
            metrics: None,
            destinations: None,
            page_size: DEFAULT_PAGE_SIZE,
            title: "hare-outbox".to_owned(),
            allow_remote: false,
            object_name: ObjectName::Table,
        }
    }
}

impl DashboardOptions {
    /// The defaults: no token (read-only), no thresholds, no metrics, no destinations, 50 events
    /// per page, title `hare-outbox`, loopback only, objects by captured table.
    pub fn new() -> Self {
        Self::default()
    }

    /// The token mutating actions need; `None` disables them.
    ///
    /// # Errors
    /// [`Error::Configuration`] when the token is shorter than 8 characters or holds whitespace
    /// or control characters (it travels in an HTTP header).
    pub fn with_token(mut self, token: Option<String>) -> Result<Self> {
        if let Some(token) = &token {
            if token.chars().count() < MIN_TOKEN_LENGTH {
                return Err(Error::Configuration(format!(
                    "a dashboard token of {} characters is too short; use at least \
                     {MIN_TOKEN_LENGTH} (a random one: `openssl rand -hex 32`)",
                    token.chars().count()
                )));
            }
            if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(Error::Configuration(
                    "the dashboard token holds whitespace or a control character; use printable \
                     characters only"
                        .to_owned(),
                ));
            }
        }
        self.token = token;
        Ok(self)
    }

    /// The `/healthz` limits.
    pub fn with_thresholds(mut self, thresholds: HealthThresholds) -> Self {
        self.thresholds = thresholds;
        self
    }

    /// The Prometheus exporter handle `/metrics` renders.
    pub fn with_metrics(mut self, handle: Option<PrometheusHandle>) -> Self {
        self.metrics = handle;
        self
    }

    /// The destinations of the relay in this process, shown with their circuit breakers.
    pub fn with_destinations(mut self, destinations: Option<Destinations>) -> Self {
        self.destinations = destinations;
        self
    }

    /// Events per page when a request names no `limit`.
    ///
    /// # Errors
    /// [`Error::Configuration`] unless 1 ≤ `page_size` ≤ 1000.
    pub fn with_page_size(mut self, page_size: u32) -> Result<Self> {
        if page_size == 0 || page_size > MAX_PAGE_SIZE {
            return Err(Error::Configuration(format!(
                "dashboard page size {page_size} is not allowed; use 1 to {MAX_PAGE_SIZE}"
            )));
        }
        self.page_size = page_size;
        Ok(self)
    }

    /// The page title.
    ///
    /// # Errors
    /// [`Error::Configuration`] when empty or longer than 200 characters.
    pub fn with_title(mut self, title: impl Into<String>) -> Result<Self> {
        let title = title.into();
        if title.trim().is_empty() || title.chars().count() > MAX_TITLE_LENGTH {
            return Err(Error::Configuration(format!(
                "dashboard title {title:?} is not allowed; use 1 to {MAX_TITLE_LENGTH} characters"
            )));
        }
        self.title = title;
        Ok(self)
    }

    /// What the object column shows and the object filter compares: the captured table or the
    /// capture's label.
    pub fn with_object_name(mut self, name: ObjectName) -> Self {
        self.object_name = name;
        self
    }

    /// Whether an address other than loopback may be served. Only behind a proxy that adds TLS
    /// and access control: the token travels in clear otherwise.
    pub fn with_allow_remote(mut self, allow: bool) -> Self {
        self.allow_remote = allow;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_checked() {
        assert!(
            DashboardOptions::new()
                .with_token(Some("short".into()))
                .is_err()
        );
        assert!(
            DashboardOptions::new()
                .with_token(Some("has a space".into()))
                .is_err()
        );
        assert!(
            DashboardOptions::new()
                .with_token(Some("0123456789abcdef".into()))
                .is_ok()
        );
        assert!(DashboardOptions::new().with_page_size(0).is_err());
        assert!(DashboardOptions::new().with_page_size(1001).is_err());
        assert!(DashboardOptions::new().with_title(" ").is_err());
        let o = DashboardOptions::new()
            .with_token(Some("0123456789abcdef".into()))
            .unwrap();
        assert!(!format!("{o:?}").contains("0123456789abcdef"));
    }
}
