//! The JSON API, `/metrics`, `/healthz` and the OpenAPI document.

use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use hare_outbox_core::backend::FinishedState;
use hare_outbox_core::journal::{Cursor, TimelineBucket, TimelineParams};
use hare_outbox_core::{Backlog, Error as CoreError, JournalBackend, OutboxEvent};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, OpenApi, ToSchema};
use uuid::Uuid;

use crate::AppState;
use crate::filters::{FilterError, Filters};
use crate::view::{EventStatusView, EventView};

/// Rows deleted per statement by a clean-up from the dashboard.
const CLEANUP_BATCH: u32 = 1000;
/// The chart window when the request names none: the last hour.
pub(crate) const DEFAULT_WINDOW_SECONDS: u64 = 3600;
/// The chart buckets when the request names none: one per minute of the default window.
pub(crate) const DEFAULT_BUCKETS: u32 = 60;

/// An error answer: `{"error": {"field": …, "message": …}}`.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) field: String,
    pub(crate) message: String,
}

/// The body of every error answer.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct ErrorBody {
    /// What was refused.
    error: ErrorDetail,
}

/// What was refused and why.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct ErrorDetail {
    /// The parameter, body field or check that failed (`status`, `topic`, `token`, `origin`,
    /// `database`, …).
    field: String,
    /// What is wrong and what is allowed.
    message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, field: &str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            field: field.to_owned(),
            message: message.into(),
        }
    }

    /// A core error: validation and configuration are the caller's (400), an unsupported
    /// operation is 501, the rest is the database's (503).
    pub(crate) fn core(field: &str, error: CoreError) -> Self {
        match error {
            CoreError::Validation { field, message } => ApiError {
                status: StatusCode::BAD_REQUEST,
                field,
                message,
            },
            CoreError::Configuration(message) => {
                ApiError::new(StatusCode::BAD_REQUEST, field, message)
            }
            CoreError::Unsupported(message) => {
                ApiError::new(StatusCode::NOT_IMPLEMENTED, "backend", message)
            }
            other => {
                tracing::warn!(error = %other, "dashboard query failed");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "database",
                    other.to_string(),
                )
            }
        }
    }
}

impl From<FilterError> for ApiError {
    fn from(e: FilterError) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            field: e.field,
            message: e.message,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (
            self.status,
            Json(ErrorBody {
                error: ErrorDetail {
                    field: self.field,
                    message: self.message,
                },
            }),
        )
            .into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

/// The filters of `GET /api/events` (and of the page). `topic` and `status` may repeat or hold
/// several values separated by commas.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub(crate) struct EventListParams {
    /// Topic patterns: exact names or prefixes ending in `*` (`doc.*`).
    topic: Option<Vec<String>>,
    /// Statuses: pending, leased, retrying, dead, published.
    status: Option<Vec<EventStatusView>>,
    /// The captured object as the object column shows it: `table` or `table #pk`
    /// (`plan_prod_orders #18`), or the capture's label when the dashboard shows labels.
    object: Option<String>,
    /// The author (the `author` header), exactly.
    author: Option<String>,
    /// Created at or after: RFC 3339, `YYYY-MM-DDTHH:MM` (UTC) or `YYYY-MM-DD` (UTC).
    created_from: Option<String>,
    /// Created before; same forms.
    created_until: Option<String>,
    /// Events with a smaller sequence, newest first (the next, older page).
    before: Option<i64>,
    /// Events with a larger sequence, oldest first (a live tail).
    after: Option<i64>,
    /// Events per page, 1 to 1000; the dashboard's page size by default (50).
    limit: Option<u32>,
}

/// Where the next page starts.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct NextPage {
    /// `before` (older events) or `after` (newer events, for a tail).
    cursor: String,
    /// The sequence to pass as that parameter.
    sequence: i64,
    /// The URL of the next page with the same filters, relative to the dashboard's root
    /// (`api/events?topic=doc.*&before=120`).
    href: String,
}

/// One page of `GET /api/events`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct EventList {
    /// Newest first, or oldest first with `after`.
    events: Vec<EventView>,
    /// The next page in the same direction; `null` when this page was not full. A live tail
    /// keeps polling with `after` = the largest sequence it has seen.
    next: Option<NextPage>,
}

/// Lists events.
#[utoipa::path(
    get,
    path = "/api/events",
    params(EventListParams),
    responses(
        (status = 200, description = "One page of events", body = EventList),
        (status = 400, description = "A filter was refused", body = ErrorBody),
    )
)]
pub(crate) async fn list<B: JournalBackend>(
    State(state): State<AppState<B>>,
    RawQuery(query): RawQuery,
) -> Result<Json<EventList>, ApiError> {
    let filters = Filters::parse(query.as_deref())?;
    let query = filters
        .query(state.options.page_size)?
        .with_object_name(state.options.object_name);
    let page = state
        .journal
        .list(&query)
        .await
        .map_err(|e| ApiError::core("query", e))?;
    let next = page.next_query(&query).and_then(|next| {
        let (cursor, sequence) = match next.cursor {
            Cursor::Before(s) => ("before", s),
            Cursor::After(s) => ("after", s),
            Cursor::Newest => return None,
        };
        Some(NextPage {
            cursor: cursor.to_owned(),
            sequence,
            href: format!(
                "api/events?{}",
                filters.query_string(&[(cursor, sequence.to_string())])
            ),
        })
    });
    let now = Utc::now();
    Ok(Json(EventList {
        events: page
            .events
            .into_iter()
            .map(|e| EventView::named(e, now, state.options.object_name))
            .collect(),
        next,
    }))
}

/// The event `reference` names: its id (a UUID) or its sequence (№, a whole number ≥ 1).
pub(crate) async fn find_event<B: JournalBackend>(
    state: &AppState<B>,
    reference: &str,
) -> Result<OutboxEvent, ApiError> {
    let found = if let Ok(sequence) = reference.parse::<i64>() {
        if sequence < 1 {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "id",
                format!("sequence {sequence} is not allowed; sequences start at 1"),
            ));
        }
        state.journal.get_by_sequence(sequence).await
    } else {
        let uuid = Uuid::parse_str(reference).map_err(|_| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "id",
                format!(
                    "event {reference:?} is neither a UUID (0192f5e4-7c1a-7d2e-8b3c-…) nor a \
                     sequence number (138)"
                ),
            )
        })?;
        state.journal.get(uuid).await
    };
    found.map_err(|e| ApiError::core("id", e))?.ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "id",
            format!("no event has id or sequence {reference}"),
        )
    })
}

/// One event by id or sequence.
#[utoipa::path(
    get,
    path = "/api/events/{id}",
    params(("id" = String, Path, description = "The event id (UUID) or its sequence (№)")),
    responses(
        (status = 200, description = "The event", body = EventView),
        (status = 400, description = "Neither a UUID nor a sequence", body = ErrorBody),
        (status = 404, description = "No such event", body = ErrorBody),
    )
)]
pub(crate) async fn get<B: JournalBackend>(
    State(state): State<AppState<B>>,
    Path(id): Path<String>,
) -> Result<Json<EventView>, ApiError> {
    let event = find_event(&state, &id).await?;
    Ok(Json(EventView::named(
        event,
        Utc::now(),
        state.options.object_name,
    )))
}

/// The parameters of `GET /api/timeline`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub(crate) struct TimelineQuery {
    /// The window up to now, in seconds, 1 to 31622400 (366 days). Defaults to 3600.
    window_seconds: Option<u64>,
    /// Buckets, 1 to 1440. Defaults to 60.
    buckets: Option<u32>,
}

/// The timeline behind the charts.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct Timeline {
    /// Start of the first bucket.
    since: DateTime<Utc>,
    /// End of the last bucket.
    until: DateTime<Utc>,
    /// Oldest first, empty buckets included.
    buckets: Vec<BucketView>,
}

/// One bucket of the timeline.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct BucketView {
    /// Start (inclusive).
    start: DateTime<Utc>,
    /// End (exclusive).
    end: DateTime<Utc>,
    /// Events created in the bucket.
    created: i64,
    /// Events published in the bucket (the delivery rate).
    published: i64,
    /// Events dead-lettered in the bucket.
    dead_lettered: i64,
    /// Events still to deliver at the bucket's end.
    backlog: i64,
    /// Median delivery latency (published − created) of the bucket's published events, ms.
    latency_p50_ms: Option<f64>,
    /// 95th percentile of the same, ms.
    latency_p95_ms: Option<f64>,
    /// Largest of the same, ms.
    latency_max_ms: Option<f64>,
}

impl From<TimelineBucket> for BucketView {
    fn from(b: TimelineBucket) -> Self {
        BucketView {
            start: b.start,
            end: b.end,
            created: b.created,
            published: b.published,
            dead_lettered: b.dead_lettered,
            backlog: b.backlog,
            latency_p50_ms: b.latency_p50_ms,
            latency_p95_ms: b.latency_p95_ms,
            latency_max_ms: b.latency_max_ms,
        }
    }
}

/// Reads the timeline parameters of a raw query: `window_seconds` and `buckets`.
pub(crate) fn timeline_params(query: Option<&str>) -> Result<TimelineParams, ApiError> {
    let mut window = DEFAULT_WINDOW_SECONDS;
    let mut buckets = DEFAULT_BUCKETS;
    for (key, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        let bad = |what: &str| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                &key,
                format!("{key} {value:?} is not {what}"),
            )
        };
        match key.as_ref() {
            "window_seconds" => {
                window = value
                    .parse()
                    .map_err(|_| bad("a whole number of seconds (1 to 31622400)"))?;
            }
            "buckets" => {
                buckets = value
                    .parse()
                    .map_err(|_| bad("a whole number of buckets (1 to 1440)"))?;
            }
            other => {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    other,
                    format!("parameter {other:?} is not known; use window_seconds, buckets"),
                ));
            }
        }
    }
    TimelineParams::last(Duration::from_secs(window), buckets, Utc::now())
        .map_err(|e| ApiError::core("window_seconds", e))
}

/// Counts per bucket: created, published, dead-lettered, backlog, latency percentiles.
#[utoipa::path(
    get,
    path = "/api/timeline",
    params(TimelineQuery),
    responses(
        (status = 200, description = "The timeline", body = Timeline),
        (status = 400, description = "A parameter was refused", body = ErrorBody),
    )
)]
pub(crate) async fn timeline<B: JournalBackend>(
    State(state): State<AppState<B>>,
    RawQuery(query): RawQuery,
) -> Result<Json<Timeline>, ApiError> {
    let params = timeline_params(query.as_deref())?;
    let buckets = state
        .journal
        .timeline(&params)
        .await
        .map_err(|e| ApiError::core("timeline", e))?;
    Ok(Json(Timeline {
        since: params.since,
        until: params.until,
        buckets: buckets.into_iter().map(BucketView::from).collect(),
    }))
}

/// The backlog.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
pub(crate) struct BacklogView {
    /// Events still to deliver (neither published nor dead-lettered).
    pending: i64,
    /// Age in seconds of the oldest of them; 0 when there is none.
    oldest_pending_age_seconds: f64,
    /// Dead-lettered events.
    dead_lettered: i64,
}

impl From<Backlog> for BacklogView {
    fn from(b: Backlog) -> Self {
        BacklogView {
            pending: b.pending,
            oldest_pending_age_seconds: b.oldest_pending_age_seconds,
            dead_lettered: b.dead_lettered,
        }
    }
}

/// The parameters of `GET /api/backlog`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub(crate) struct BacklogQuery {
    /// Topic patterns (exact or `prefix*`, repeatable or comma-separated); every topic by default.
    topic: Option<Vec<String>>,
}

/// Pending events, the oldest pending age and dead letters.
#[utoipa::path(
    get,
    path = "/api/backlog",
    params(BacklogQuery),
    responses(
        (status = 200, description = "The backlog", body = BacklogView),
        (status = 400, description = "A topic pattern was refused", body = ErrorBody),
    )
)]
pub(crate) async fn backlog<B: JournalBackend>(
    State(state): State<AppState<B>>,
    RawQuery(query): RawQuery,
) -> Result<Json<BacklogView>, ApiError> {
    let mut topics = Vec::new();
    for (key, value) in form_urlencoded::parse(query.as_deref().unwrap_or("").as_bytes()) {
        if key != "topic" {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                &key,
                format!("parameter {key:?} is not known; use topic"),
            ));
        }
        topics.extend(
            value
                .split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_owned),
        );
    }
    let topics: Vec<&str> = topics.iter().map(String::as_str).collect();
    let backlog = state
        .journal
        .backlog(&topics)
        .await
        .map_err(|e| ApiError::core("topic", e))?;
    Ok(Json(backlog.into()))
}

/// Which dead letters to retry.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RetryRequest {
    /// Only these event ids.
    #[serde(default)]
    ids: Vec<Uuid>,
    /// Only dead letters of these topic patterns (exact or `prefix*`; `["*"]` = every topic).
    #[serde(default)]
    topics: Vec<String>,
}

/// What a retry did.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct RetryResult {
    /// Dead letters returned to the queue (attempts reset to 0).
    retried: u64,
}

/// The JSON request body as `T`, or a 400 naming the expected `shape`.
pub(crate) fn body<T: serde::de::DeserializeOwned>(
    bytes: &Bytes,
    shape: &str,
) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "body",
            format!("the request body is not {shape}: {e}"),
        )
    })
}

/// Returns dead letters to the queue with their attempts reset:
/// those named by `ids`, or every dead letter of `topics`, or both narrowed together. Needs the
/// token.
#[utoipa::path(
    post,
    path = "/api/dead-letters/retry",
    request_body = RetryRequest,
    security(("token" = [])),
    responses(
        (status = 200, description = "How many were retried", body = RetryResult),
        (status = 400, description = "The body was refused", body = ErrorBody),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 403, description = "No token configured, or a cross-site request", body = ErrorBody),
    )
)]
pub(crate) async fn retry<B: JournalBackend>(
    State(state): State<AppState<B>>,
    bytes: Bytes,
) -> Result<Json<RetryResult>, ApiError> {
    let request: RetryRequest = body(
        &bytes,
        r#"a JSON object {"ids": [uuid, …], "topics": [pattern, …]}"#,
    )?;
    if request.ids.is_empty() && request.topics.is_empty() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "ids",
            "name the dead letters to retry: `ids`, `topics`, or both (`\"topics\": [\"*\"]` \
             retries every dead letter)",
        ));
    }
    let topics: Vec<&str> = request
        .topics
        .iter()
        .map(String::as_str)
        .filter(|t| *t != "*")
        .collect();
    let retried = state
        .journal
        .retry_dead_lettered(&topics, &request.ids)
        .await
        .map_err(|e| ApiError::core("topics", e))?;
    Ok(Json(RetryResult { retried }))
}

/// Which finished events to delete.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CleanupRequest {
    /// Delete events finished more than this many seconds ago.
    older_than_seconds: u64,
    /// Only these topic patterns; every topic by default.
    #[serde(default)]
    topics: Vec<String>,
    /// `dead` (dead letters, by when they died) or `published` (by when they were delivered).
    /// Defaults to `dead`.
    #[serde(default)]
    state: Option<String>,
}

/// What a clean-up did.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct CleanupResult {
    /// Events deleted.
    deleted: u64,
}

/// Deletes dead letters (or published events) finished more than `older_than_seconds` ago, in
/// batches of 1000 rows. Needs the token.
#[utoipa::path(
    post,
    path = "/api/dead-letters/cleanup",
    request_body = CleanupRequest,
    security(("token" = [])),
    responses(
        (status = 200, description = "How many were deleted", body = CleanupResult),
        (status = 400, description = "The body was refused", body = ErrorBody),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 403, description = "No token configured, or a cross-site request", body = ErrorBody),
    )
)]
pub(crate) async fn cleanup<B: JournalBackend>(
    State(state): State<AppState<B>>,
    bytes: Bytes,
) -> Result<Json<CleanupResult>, ApiError> {
    let request: CleanupRequest = body(
        &bytes,
        r#"a JSON object {"older_than_seconds": n, "topics": [pattern, …], "state": "dead"|"published"}"#,
    )?;
    let finished = match request.state.as_deref() {
        None | Some("dead") => FinishedState::DeadLettered,
        Some("published") => FinishedState::Published,
        Some(other) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "state",
                format!("state {other:?} is not known; use dead or published"),
            ));
        }
    };
    const MAX_AGE: u64 = 100 * 366 * 86_400;
    if request.older_than_seconds > MAX_AGE {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "older_than_seconds",
            format!(
                "older_than_seconds {} is not allowed; use 0 to {MAX_AGE}",
                request.older_than_seconds
            ),
        ));
    }
    let topics: Vec<&str> = request
        .topics
        .iter()
        .map(String::as_str)
        .filter(|t| *t != "*")
        .collect();
    let deleted = state
        .journal
        .cleanup(
            finished,
            Duration::from_secs(request.older_than_seconds),
            &topics,
            CLEANUP_BATCH,
            &|_| std::ops::ControlFlow::Continue(()),
        )
        .await
        .map_err(|e| ApiError::core("topics", e))?
        .deleted;
    Ok(Json(CleanupResult { deleted }))
}

/// The health answer.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct Health {
    /// `ok`, `failing` (a threshold is passed) or `error` (the database did not answer).
    status: String,
    /// The backlog, when the database answered.
    backlog: Option<BacklogView>,
    /// The failed checks, each naming the value and its limit.
    failing: Vec<String>,
    /// The relay's destinations that are open or half-open (circuit breaker), when the
    /// dashboard runs with the relay; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    open_destinations: Option<Vec<DestinationView>>,
}

/// One destination of the relay and its circuit breaker.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub(crate) struct DestinationView {
    /// The delivery's name, a route, or `name/host:port` for a webhook target.
    pub(crate) name: String,
    /// `closed` (sending), `open` (paused until its next probe) or `half_open` (a probe is
    /// out).
    pub(crate) state: String,
    /// Outage failures in a row.
    pub(crate) consecutive_failures: u32,
    /// When it opened (RFC 3339); absent while closed.
    pub(crate) opened_at: Option<DateTime<Utc>>,
    /// When its next probe may go out; absent unless open.
    pub(crate) next_probe_at: Option<DateTime<Utc>>,
    /// Why it opened: the error of the failure that opened it, or of the last failed probe.
    pub(crate) reason: Option<String>,
    /// Times it opened since the relay started.
    pub(crate) opens: u64,
    /// Its rate limit in sends per second, if any.
    pub(crate) max_per_second: Option<f64>,
    /// Whether its circuit breaker is on.
    pub(crate) breaker: bool,
}

impl From<hare_outbox_core::DestinationStatus> for DestinationView {
    fn from(s: hare_outbox_core::DestinationStatus) -> Self {
        DestinationView {
            name: s.name,
            state: s.state.as_str().to_owned(),
            consecutive_failures: s.consecutive_failures,
            opened_at: s.opened_at,
            next_probe_at: s.next_probe_at,
            reason: s.reason.map(|r| {
                hare_outbox_core::redact::in_text(&r, hare_outbox_core::redact::UrlKind::Connection)
            }),
            opens: s.opens,
            max_per_second: s.max_per_second,
            breaker: s.breaker,
        }
    }
}

/// The destinations answer.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct DestinationList {
    /// Every destination the relay sent to, by name.
    destinations: Vec<DestinationView>,
}

/// The relay's destinations and their circuit breakers (only when the dashboard runs with the
/// relay, `hare-outbox relay --http`).
#[utoipa::path(
    get,
    path = "/api/destinations",
    responses(
        (status = 200, description = "The destinations", body = DestinationList),
        (status = 404, description = "No relay runs with this dashboard", body = ErrorBody),
    )
)]
pub(crate) async fn destinations<B: JournalBackend>(State(state): State<AppState<B>>) -> Response {
    match &state.options.destinations {
        Some(destinations) => Json(DestinationList {
            destinations: destinations.statuses().into_iter().map(Into::into).collect(),
        })
        .into_response(),
        None => ApiError::new(
            StatusCode::NOT_FOUND,
            "destinations",
            "no relay runs with this dashboard: destinations and their circuit breakers are shown by the relay's own (hare-outbox relay --http ADDR, or DashboardOptions::with_destinations)",
        )
        .into_response(),
    }
}

/// How long `/healthz` waits for the database before it reports it down: 3 s (a pool whose
/// server is gone would otherwise hold the answer for its whole acquire timeout).
const HEALTH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// 200 when the database answers (within 3 s) and every configured backlog threshold holds, 503
/// otherwise.
#[utoipa::path(
    get,
    path = "/healthz",
    responses(
        (status = 200, description = "Healthy", body = Health),
        (status = 503, description = "A check failed", body = Health),
    )
)]
pub(crate) async fn healthz<B: JournalBackend>(State(state): State<AppState<B>>) -> Response {
    let answer = tokio::time::timeout(HEALTH_TIMEOUT, state.journal.backlog(&[])).await;
    let backlog = match answer {
        Ok(Ok(backlog)) => backlog,
        Err(_) => {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(Health {
                    status: "error".to_owned(),
                    backlog: None,
                    failing: vec![format!(
                        "database: no answer within {} s",
                        HEALTH_TIMEOUT.as_secs()
                    )],
                    open_destinations: open_destinations(&state),
                }),
            )
                .into_response();
        }
        Ok(Err(e)) => {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(Health {
                    status: "error".to_owned(),
                    backlog: None,
                    failing: vec![format!("database: {e}")],
                    open_destinations: open_destinations(&state),
                }),
            )
                .into_response();
        }
    };
    let t = &state.options.thresholds;
    let mut failing = Vec::new();
    if let Some(max) = t.max_pending
        && backlog.pending > max
    {
        failing.push(format!(
            "pending: {} events to deliver, above max_pending {max}",
            backlog.pending
        ));
    }
    if let Some(max) = t.max_oldest_pending_age
        && backlog.oldest_pending_age_seconds > max.as_secs_f64()
    {
        failing.push(format!(
            "oldest_pending_age: {:.1} s, above max_oldest_pending_age {} s",
            backlog.oldest_pending_age_seconds,
            max.as_secs_f64()
        ));
    }
    if let Some(max) = t.max_dead_lettered
        && backlog.dead_lettered > max
    {
        failing.push(format!(
            "dead_lettered: {} dead letters, above max_dead_lettered {max}",
            backlog.dead_lettered
        ));
    }
    let open = open_destinations(&state);
    if let (Some(max), Some(open)) = (t.max_open_destinations, &open)
        && open.len() > max
    {
        let names: Vec<String> = open
            .iter()
            .map(|d| match &d.reason {
                Some(reason) => format!("{} ({reason})", d.name),
                None => d.name.clone(),
            })
            .collect();
        failing.push(format!(
            "open_destinations: {} open, above max_open_destinations {max}: {}",
            open.len(),
            names.join("; ")
        ));
    }
    let (code, status) = if failing.is_empty() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "failing")
    };
    (
        code,
        Json(Health {
            status: status.to_owned(),
            backlog: Some(backlog.into()),
            failing,
            open_destinations: open,
        }),
    )
        .into_response()
}

/// The open destinations of the relay running with the dashboard, if one does.
fn open_destinations<B: JournalBackend>(state: &AppState<B>) -> Option<Vec<DestinationView>> {
    state
        .options
        .destinations
        .as_ref()
        .map(|d| d.open().into_iter().map(Into::into).collect())
}

/// Prometheus text from the configured exporter handle.
#[utoipa::path(
    get,
    path = "/metrics",
    responses(
        (status = 200, description = "Prometheus text format 0.0.4", content_type = "text/plain"),
        (status = 404, description = "No exporter configured", body = ErrorBody),
    )
)]
pub(crate) async fn metrics<B: JournalBackend>(State(state): State<AppState<B>>) -> Response {
    match &state.options.metrics {
        Some(handle) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            handle.render(),
        )
            .into_response(),
        None => ApiError::new(
            StatusCode::NOT_FOUND,
            "metrics",
            "no Prometheus exporter is configured for this dashboard; install one \
             (metrics_exporter_prometheus::PrometheusBuilder::install_recorder) and pass its \
             handle to DashboardOptions::with_metrics",
        )
        .into_response(),
    }
}

/// Anything else: 404 as JSON.
pub(crate) async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "path",
        format!(
            "{} is not a dashboard path; see /api/openapi.json",
            uri.path()
        ),
    )
}

struct TokenScheme;

impl utoipa::Modify for TokenScheme {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "token",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("The dashboard token"))
                    .build(),
            ),
        );
    }
}

/// The OpenAPI document of the dashboard's JSON API.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "hare-outbox dashboard API",
        description = "The outbox read as the journal of the system: events, timeline, backlog, dead-letter actions, held keys, topics, relays."
    ),
    paths(
        list, get, timeline, backlog, destinations, retry, cleanup, healthz, metrics,
        crate::views_api::held_keys, crate::views_api::key_head, crate::views_api::topics,
        crate::views_api::relays, crate::views_api::neighbours
    ),
    components(schemas(
        EventList, EventView, EventStatusView, NextPage, Timeline, BucketView, BacklogView,
        DestinationList, DestinationView, RetryRequest, RetryResult, CleanupRequest,
        CleanupResult, Health, ErrorBody, ErrorDetail,
        crate::views_api::HeldKeyList, crate::views_api::HeldKeyView,
        crate::views_api::KeyHeadRequest, crate::views_api::KeyHeadResult,
        crate::views_api::TopicList, crate::views_api::TopicView, crate::views_api::RelayList,
        crate::views_api::RelayView, crate::views_api::PageLink, crate::views_api::Neighbours
    )),
    modifiers(&TokenScheme)
)]
pub(crate) struct ApiDoc;

/// `GET /api/openapi.json`.
pub(crate) async fn openapi() -> Response {
    match ApiDoc::openapi().to_json() {
        Ok(json) => ([(header::CONTENT_TYPE, "application/json")], json).into_response(),
        Err(e) => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "openapi",
            format!("the OpenAPI document could not be written: {e}"),
        )
        .into_response(),
    }
}
