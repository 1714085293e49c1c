//! The dashboard's options.

use std::sync::Arc;
use std::time::Duration;

use axum::http::request::Parts;

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

/// A check every request must pass before the dashboard answers it (pages, assets, the JSON
/// API, `/metrics`, `/healthz`, and the token-protected actions too): `true` lets it through,
/// `false` answers 401. It sees the request's method, URI (inside the dashboard: `/api/events`
/// when nested under `/outbox`), headers and extensions (a session your own layer put there).
pub type ReadAuth = Arc<dyn Fn(&Parts) -> bool + Send + Sync>;

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
    /// The check every request must pass ([`ReadAuth`]); `None` = every request that reaches
    /// the dashboard is answered. Defaults to `None`.
    pub read_auth: Option<ReadAuth>,
    /// The path the browser sees the dashboard under, ending in `/` (`/ops/outbox/`); `None` =
    /// taken from each request: the prefix it was `nest`ed under in your router (axum's
    /// `OriginalUri`), `/` at the root. Set it when a proxy strips a prefix before the request
    /// reaches your server. Defaults to `None`.
    pub base_path: Option<String>,
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
            .field("read_auth", &self.read_auth.as_ref().map(|_| "<set>"))
            .field("base_path", &self.base_path)
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
            read_auth: None,
            base_path: None,
        }
    }
}

impl DashboardOptions {
    /// The defaults: no token (read-only), no thresholds, no metrics, no destinations, 50 events
    /// per page, title `hare-outbox`, loopback only, objects by captured table, no read check,
    /// the base path taken from each request.
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

    /// A check every request must pass, or 401 ([`ReadAuth`]). For a check that needs to await
    /// (a session store), wrap [`Dashboard::router`](crate::Dashboard::router) in a tower layer
    /// of your own instead: `dashboard.router().layer(my_auth_layer)`.
    ///
    /// ```
    /// use hare_outbox_dashboard::DashboardOptions;
    ///
    /// let options = DashboardOptions::new().with_read_auth(|request| {
    ///     request.headers.get("x-operator").is_some_and(|v| v == "on-call")
    /// });
    /// # let _ = options;
    /// ```
    pub fn with_read_auth(
        mut self,
        check: impl Fn(&Parts) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.read_auth = Some(Arc::new(check));
        self
    }

    /// The path the browser sees the dashboard under (`/ops/outbox`; a trailing `/` is added),
    /// for a proxy that strips a prefix before the request reaches your server. Without it the
    /// prefix is taken from each request (`Router::nest` needs nothing).
    ///
    /// # Errors
    /// [`Error::Configuration`] when `path` does not start with a single `/` or holds
    /// whitespace, a control character, `?`, `#`, `"`, `'`, `<`, `>` or a backslash.
    pub fn with_base_path(mut self, path: impl Into<String>) -> Result<Self> {
        let mut path = path.into();
        if !path.starts_with('/')
            || path.starts_with("//")
            || path
                .chars()
                .any(|c| c.is_whitespace() || c.is_control() || "?#\"'<>\\".contains(c))
        {
            return Err(Error::Configuration(format!(
                "dashboard base path {path:?} is not allowed; give an absolute path such as \
                 \"/ops/outbox\""
            )));
        }
        if !path.ends_with('/') {
            path.push('/');
        }
        self.base_path = Some(path);
        Ok(self)
    }

    /// Whether an address other than loopback may be served, and whether requests naming
    /// another `Host` are answered. Without it, [`Dashboard::router`](crate::Dashboard::router)
    /// answers 421 to a request whose `Host` is not a loopback name, also when mounted in your
    /// own router. Only behind a proxy that adds TLS and access control (or with
    /// [`with_read_auth`](Self::with_read_auth)): the token travels in clear otherwise.
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
        for bad in ["outbox", "//evil.example/", "/a b", "/a\"b", "/a?b"] {
            assert!(
                DashboardOptions::new().with_base_path(bad).is_err(),
                "{bad}"
            );
        }
        assert_eq!(
            DashboardOptions::new()
                .with_base_path("/ops/outbox")
                .unwrap()
                .base_path
                .as_deref(),
            Some("/ops/outbox/")
        );
    }
}
