//! The hare-outbox dashboard: the outbox read as the journal of the
//! system, as an [`axum::Router`] you serve yourself or with [`Dashboard::serve`].
//!
//! What it serves:
//!
//! | path | what |
//! |---|---|
//! | `GET /` | the journal page, one line per event: № (sequence, linking to the event's page), event (topic), object (`table #pk`, or the capture's label, [`DashboardOptions::with_object_name`]), data (the changed columns `from → to`, or the payload on one line; its JSON on a click), created, processed, who (the `author` header), status, attempts, last error; filters, keyset pagination, a live tail, dead-letter retry and clean-up, charts of backlog, delivery rate and latency |
//! | `GET /events/{sequence or id}` | one event: every column, headers, the payload with the changes, the last error and the result record (extra columns), lease owner and end, the previous and next event of its ordering key, retry (dead letters) and copy as JSON |
//! | `GET /keys` | the ordering keys held back by a dead or failing head: the blocking event, its error and age, the events waiting; retry or skip-and-release the head (token, confirmed) |
//! | `GET /topics` | per topic: pending, leased, retrying, dead, published in a window, the oldest event to deliver |
//! | `GET /relays` | the relays holding leases: the batch in flight, expired leases, lease ends |
//! | `GET /charts.svg` | the page's charts as one SVG image (`window_seconds`, `buckets`) |
//! | `GET /api/events` | the same rows as JSON, with the same filters, a cursor and a `next` page |
//! | `GET /api/events/{id}` | one event, by id or sequence |
//! | `GET /api/events/{id}/neighbours` | the previous and next event of its ordering key |
//! | `GET /api/keys/held`, `POST /api/keys/head` | held keys (keyset pages by key); retry or release a head (token needed) |
//! | `GET /api/topics`, `GET /api/relays` | counts per topic; relays holding leases (keyset pages by name) |
//! | `GET /api/timeline` | per-bucket counts and latency percentiles behind the charts |
//! | `GET /api/backlog` | pending, oldest pending age, dead letters |
//! | `GET /api/destinations` | the relay's destinations and their circuit breakers (state, failures in a row, when and why it opened), when the relay runs with the dashboard ([`DashboardOptions::with_destinations`]) |
//! | `POST /api/dead-letters/retry` | returns dead letters to the queue (token needed) |
//! | `POST /api/dead-letters/cleanup` | deletes finished events older than a cut-off (token needed) |
//! | `GET /api/openapi.json` | the OpenAPI 3.1 document of the JSON API |
//! | `GET /metrics` | Prometheus text from the configured exporter handle |
//! | `GET /healthz` | 200 when the database answers (within 3 s) and the backlog thresholds hold, else 503; lists the relay's open destinations when it runs with the dashboard |
//!
//! Security:
//! - [`Dashboard::bind`] and [`Dashboard::serve`] refuse an address other than loopback unless
//!   [`DashboardOptions::with_allow_remote`] says otherwise. Without it, [`Dashboard::serve`]
//!   also answers 421 to a request whose `Host` is not a loopback name, so a web page re-pointing
//!   its own name at 127.0.0.1 (DNS rebinding) cannot read the journal.
//! - Every mutating action is a `POST` that needs the configured token in an
//!   `Authorization: Bearer …` header (compared in constant time). Without a configured token
//!   they answer 403. A browser cannot add that header to a cross-site request without a CORS
//!   preflight, which the dashboard never allows, so the actions are safe against CSRF; requests
//!   whose `Origin` differs from their `Host`, marked `Sec-Fetch-Site: cross-site`, or — when
//!   a browser sent neither header — whose `Referer` names another host, are refused as well.
//!   A request with none of the three did not come from a browser page (curl, a script): the
//!   token alone decides.
//! - Errors are shown as stored, and stored with every URL redacted
//!   ([`hare_outbox_core::redact`]); the dashboard redacts them once more for rows written
//!   before that or by another program.
//! - Filters are bound as SQL parameters by the backends, never spliced into SQL.
//! - Payloads, headers and errors are HTML-escaped by the templates: a payload holding
//!   `<script>` shows as text. The page runs no inline script (`Content-Security-Policy:
//!   script-src 'self'`), and cannot be framed (`frame-ancestors 'none'`).
//!
//! Texts are in English or Russian, chosen by the `lang` query parameter of the page's language
//! links (remembered in a cookie), else by `Accept-Language`; dates are written as the viewer's
//! language writes them (`13.11.2026 17:20` for Russian, `2026-11-13 17:20` otherwise) in the
//! viewer's time zone, with UTC on hover.
//!
//! The live tail polls `GET /api/events?after=SEQ` with the page's filters every 2 s while its
//! box is ticked, and prepends what arrived.
//!
//! # Quick start
//!
//! ```no_run
//! use hare_outbox_core::{Journal, OutboxTable};
//! use hare_outbox_dashboard::{Dashboard, DashboardOptions};
//! use hare_outbox_sqlite::SqliteBackend;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = hare_outbox_sqlite::connect("sqlite://app.db").await?;
//! let journal = Journal::new(SqliteBackend::new(pool), OutboxTable::parse("hare_outbox")?);
//! let dashboard = Dashboard::new(
//!     journal,
//!     DashboardOptions::new().with_token(Some(std::env::var("DASHBOARD_TOKEN")?))?,
//! )?;
//! // Or mount `dashboard.router()` into a router of your own.
//! let listener = dashboard.bind("127.0.0.1:8080".parse()?).await?;
//! dashboard
//!     .serve(listener, async {
//!         let _ = tokio::signal::ctrl_c().await;
//!     })
//!     .await?;
//! # Ok(()) }
//! ```

mod api;
mod charts;
mod error;
mod filters;
mod i18n;
mod options;
mod page;
mod pages;
mod paging;
mod security;
mod view;
mod views_api;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};
use hare_outbox_core::{Journal, JournalBackend};
use tokio::net::TcpListener;

pub use error::{Error, Result};
pub use options::{DashboardOptions, HealthThresholds, ReadAuth};
pub use view::{EventStatusView, EventView};

/// The state every handler shares.
pub(crate) struct Shared<B: JournalBackend> {
    pub(crate) journal: Journal<B>,
    pub(crate) options: DashboardOptions,
}

pub(crate) type AppState<B> = Arc<Shared<B>>;

/// The dashboard of one outbox table: build it with [`Dashboard::new`], then take its
/// [`router`](Dashboard::router) or [`serve`](Dashboard::serve) it.
///
/// It only reads the journal, except for the two token-protected dead-letter actions; it never
/// leases, so it does not disturb running relays.
pub struct Dashboard<B: JournalBackend> {
    state: AppState<B>,
}

impl<B: JournalBackend> Clone for Dashboard<B> {
    fn clone(&self) -> Self {
        Dashboard {
            state: Arc::clone(&self.state),
        }
    }
}

impl<B: JournalBackend> std::fmt::Debug for Dashboard<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dashboard")
            .field("table", self.state.journal.table())
            .field("options", &self.state.options)
            .finish()
    }
}

impl<B: JournalBackend> Dashboard<B> {
    /// The dashboard of `journal` with `options`.
    ///
    /// # Errors
    /// None today; the `Result` leaves room for checks that need the journal.
    pub fn new(journal: Journal<B>, options: DashboardOptions) -> Result<Self> {
        Ok(Dashboard {
            state: Arc::new(Shared { journal, options }),
        })
    }

    /// The options it was built with.
    pub fn options(&self) -> &DashboardOptions {
        &self.state.options
    }

    /// The routes of the module documentation, with the security headers on every response, as
    /// a router for any state of yours (`S`: the state of the router you merge or nest it in).
    ///
    /// Mount it at the root of a server or `nest` it under a prefix of your own
    /// (`app.nest("/outbox", dashboard.router())`): its pages link to absolute paths under the
    /// prefix the request came through ([`DashboardOptions::with_base_path`] when a proxy
    /// strips it). Unless [`DashboardOptions::with_allow_remote`] is set, it answers 421 to a
    /// request whose `Host` is not a loopback name, wherever it is mounted;
    /// [`DashboardOptions::with_read_auth`] (or a tower layer of yours around it) decides who may
    /// read.
    ///
    /// ```no_run
    /// # fn f(dashboard: hare_outbox_dashboard::Dashboard<impl hare_outbox_core::JournalBackend>) {
    /// use axum::Router;
    ///
    /// #[derive(Clone)]
    /// struct AppState {/* your pool, … */}
    ///
    /// let app: Router<AppState> = Router::new()
    ///     // .route("/orders", post(create_order))
    ///     .nest("/outbox", dashboard.router());
    /// let app: Router = app.with_state(AppState {});
    /// # let _ = app;
    /// # }
    /// ```
    pub fn router<S: Clone + Send + Sync + 'static>(&self) -> Router<S> {
        let mutating = Router::new()
            .route("/api/dead-letters/retry", post(api::retry::<B>))
            .route("/api/dead-letters/cleanup", post(api::cleanup::<B>))
            .route("/api/keys/head", post(views_api::key_head::<B>))
            .route_layer(axum::middleware::from_fn_with_state(
                Arc::clone(&self.state),
                security::guard_mutation::<B>,
            ));
        let router = Router::new()
            .route("/", get(page::journal::<B>))
            .route("/events/{reference}", get(pages::event::<B>))
            .route("/keys", get(pages::keys::<B>))
            .route("/topics", get(pages::topics::<B>))
            .route("/relays", get(pages::relays::<B>))
            .route("/charts.svg", get(page::charts::<B>))
            .route("/assets/dashboard.js", get(page::script))
            .route("/assets/dashboard.css", get(page::stylesheet))
            .route("/api/events", get(api::list::<B>))
            .route("/api/events/{id}", get(api::get::<B>))
            .route(
                "/api/events/{id}/neighbours",
                get(views_api::neighbours::<B>),
            )
            .route("/api/keys/held", get(views_api::held_keys::<B>))
            .route("/api/topics", get(views_api::topics::<B>))
            .route("/api/relays", get(views_api::relays::<B>))
            .route("/api/timeline", get(api::timeline::<B>))
            .route("/api/backlog", get(api::backlog::<B>))
            .route("/api/destinations", get(api::destinations::<B>))
            .route("/api/openapi.json", get(api::openapi))
            .route("/metrics", get(api::metrics::<B>))
            .route("/healthz", get(api::healthz::<B>))
            .merge(mutating)
            .fallback(api::not_found)
            .layer(axum::middleware::from_fn_with_state(
                Arc::clone(&self.state),
                security::base::<B>,
            ))
            .layer(axum::middleware::from_fn_with_state(
                Arc::clone(&self.state),
                security::read_auth::<B>,
            ));
        let router = if self.state.options.allow_remote {
            router
        } else {
            router.layer(axum::middleware::from_fn(security::loopback_host))
        };
        router
            .layer(axum::middleware::map_response(security::headers))
            .with_state(Arc::clone(&self.state))
    }

    /// Binds a TCP listener on `addr` (port 0 = any free port; read it back with
    /// `local_addr`).
    ///
    /// # Errors
    /// - [`Error::Remote`] when `addr` is not a loopback address (127.0.0.0/8, `::1`) and
    ///   [`DashboardOptions::with_allow_remote`] was not set.
    /// - [`Error::Io`] when the address cannot be bound (in use, no permission).
    pub async fn bind(&self, addr: SocketAddr) -> Result<TcpListener> {
        self.check_address(addr)?;
        TcpListener::bind(addr).await.map_err(|source| Error::Io {
            what: format!("binding the dashboard to {addr}"),
            source,
        })
    }

    /// Serves [`router`](Dashboard::router) on `listener` until `shutdown` completes, then
    /// lets requests in flight finish.
    ///
    /// # Errors
    /// - [`Error::Remote`] when the listener is bound to an address other than loopback and
    ///   [`DashboardOptions::with_allow_remote`] was not set.
    /// - [`Error::Io`] when the listener's address cannot be read or serving fails.
    pub async fn serve(
        &self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<()> {
        let addr = listener.local_addr().map_err(|source| Error::Io {
            what: "reading the dashboard listener's address".to_owned(),
            source,
        })?;
        self.check_address(addr)?;
        tracing::info!(%addr, table = %self.state.journal.table(), "dashboard listening");
        let router: Router = self.router();
        axum::serve(listener, router)
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(|source| Error::Io {
                what: format!("serving the dashboard on {addr}"),
                source,
            })
    }

    fn check_address(&self, addr: SocketAddr) -> Result<()> {
        if addr.ip().is_loopback() || self.state.options.allow_remote {
            Ok(())
        } else {
            Err(Error::Remote { addr })
        }
    }
}
