//! The JSON API of the operator's views: held keys and the actions on their head, counts per
//! topic, the relays holding leases, and an event's neighbours of its ordering key.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use hare_outbox_core::JournalBackend;
use hare_outbox_core::backend::{HeldKey, KeyHeadAction, RelayLeases, TopicStats};
use hare_outbox_core::journal::WAITING_COUNT_CAP;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::AppState;
use crate::api::{ApiError, ErrorBody, find_event};
use crate::paging::Paging;
use crate::view::EventView;

/// Where the next page starts.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct PageLink {
    /// The value to pass as `after`.
    after: String,
    /// The URL of the next page, relative to the dashboard's root (`api/keys/held?after=k9`).
    href: String,
}

fn link(path: &str, paging: &Paging, after: &str, window: bool, default: u32) -> PageLink {
    PageLink {
        after: after.to_owned(),
        href: format!("{path}?{}", paging.next_query(after, window, default)),
    }
}

/// The page parameters of the views.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub(crate) struct PagingQuery {
    /// Names after this one (keyset pagination; at most 255 characters). From the first by
    /// default.
    after: Option<String>,
    /// Items per page, 1 to 1000; the dashboard's page size by default (50).
    limit: Option<u32>,
}

/// The page parameters of the topic counts.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub(crate) struct TopicQuery {
    /// Topics after this one (keyset pagination). From the first by default.
    after: Option<String>,
    /// Topics per page, 1 to 1000; the dashboard's page size by default (50).
    limit: Option<u32>,
    /// Published events count over this many seconds up to now, 1 to 31622400. Defaults to
    /// 3600.
    window_seconds: Option<u64>,
}

/// A held ordering key.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct HeldKeyView {
    /// The key.
    pub(crate) ordering_key: String,
    /// The blocking event: the key's first undelivered event, dead or failing.
    pub(crate) head: EventView,
    /// The key's undelivered events, the head included (counted up to 10,000).
    pub(crate) waiting: i64,
    /// Whether `waiting` stopped at its cap (there may be more).
    pub(crate) waiting_capped: bool,
}

impl HeldKeyView {
    pub(crate) fn new(
        key: HeldKey,
        now: DateTime<Utc>,
        name: hare_outbox_core::journal::ObjectName,
    ) -> Self {
        HeldKeyView {
            waiting_capped: key.waiting >= WAITING_COUNT_CAP,
            waiting: key.waiting,
            ordering_key: key.ordering_key,
            head: EventView::named(key.head, now, name),
        }
    }
}

/// One page of held keys.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct HeldKeyList {
    /// Held keys in key order.
    keys: Vec<HeldKeyView>,
    /// The next page; `null` when the walk reached the last key with undelivered events.
    next: Option<PageLink>,
    /// Keys with undelivered events this page looked at (at most 10,000 per page).
    walked: i64,
}

/// Ordering keys held back by their head (dead-lettered or failing), in key order.
#[utoipa::path(
    get,
    path = "/api/keys/held",
    params(PagingQuery),
    responses(
        (status = 200, description = "One page of held keys", body = HeldKeyList),
        (status = 400, description = "A parameter was refused", body = ErrorBody),
    )
)]
pub(crate) async fn held_keys<B: JournalBackend>(
    State(state): State<AppState<B>>,
    RawQuery(query): RawQuery,
) -> Result<Json<HeldKeyList>, ApiError> {
    let paging = Paging::parse(query.as_deref(), state.options.page_size, false)?;
    let page = state
        .journal
        .held_keys(&paging.after, paging.limit)
        .await
        .map_err(|e| ApiError::core("after", e))?;
    let now = Utc::now();
    let name = state.options.object_name;
    Ok(Json(HeldKeyList {
        next: page.next_after.as_deref().map(|after| {
            link(
                "api/keys/held",
                &paging,
                after,
                false,
                state.options.page_size,
            )
        }),
        walked: page.walked,
        keys: page
            .keys
            .into_iter()
            .map(|k| HeldKeyView::new(k, now, name))
            .collect(),
    }))
}

/// What to do with the head of a held key.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct KeyHeadRequest {
    /// The head's sequence (№).
    sequence: i64,
    /// Its ordering key.
    ordering_key: String,
    /// `retry` (a dead letter returns to the queue with its attempts reset; a failing head is
    /// due at once) or `release` (the event leaves its key, keeping its state, and the key's
    /// next events flow; the key is kept in its `released_ordering_key` header).
    #[schema(value_type = String, example = "retry")]
    action: KeyHeadAction,
}

/// What the action did.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct KeyHeadResult {
    /// Always `true`: a request that changed nothing answers 409.
    changed: bool,
}

/// Retries or releases the head of a held key, only while it is still that key's held head and
/// no relay holds a live lease on it. Needs the token.
#[utoipa::path(
    post,
    path = "/api/keys/head",
    request_body = KeyHeadRequest,
    security(("token" = [])),
    responses(
        (status = 200, description = "The head was retried or released", body = KeyHeadResult),
        (status = 400, description = "The body was refused", body = ErrorBody),
        (status = 401, description = "Missing or wrong token", body = ErrorBody),
        (status = 403, description = "No token configured, or a cross-site request", body = ErrorBody),
        (status = 409, description = "The event is no longer the key's held head, or is leased", body = ErrorBody),
    )
)]
pub(crate) async fn key_head<B: JournalBackend>(
    State(state): State<AppState<B>>,
    bytes: Bytes,
) -> Result<Json<KeyHeadResult>, ApiError> {
    let request: KeyHeadRequest = crate::api::body(
        &bytes,
        r#"{"sequence": n, "ordering_key": "…", "action": "retry"|"release"}"#,
    )?;
    let changed = state
        .journal
        .key_head(request.sequence, &request.ordering_key, request.action)
        .await
        .map_err(|e| ApiError::core("ordering_key", e))?;
    if !changed {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "sequence",
            format!(
                "event {} is not the held head of key {:?} any more (delivered, retried or \
                 released meanwhile), or a relay is delivering it now; nothing was changed",
                request.sequence, request.ordering_key
            ),
        ));
    }
    Ok(Json(KeyHeadResult { changed }))
}

/// The counts of one topic.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct TopicView {
    /// The topic.
    pub(crate) topic: String,
    /// Waiting for their first delivery.
    pub(crate) pending: i64,
    /// Under a live lease.
    pub(crate) leased: i64,
    /// Failed at least once, waiting for their next attempt.
    pub(crate) retrying: i64,
    /// Dead-lettered.
    pub(crate) dead: i64,
    /// Published within the window.
    pub(crate) published: i64,
    /// When the oldest event still to deliver was created.
    pub(crate) oldest_pending_at: Option<DateTime<Utc>>,
}

impl From<TopicStats> for TopicView {
    fn from(s: TopicStats) -> Self {
        TopicView {
            topic: s.topic,
            pending: s.pending,
            leased: s.leased,
            retrying: s.retrying,
            dead: s.dead,
            published: s.published,
            oldest_pending_at: s.oldest_pending_at,
        }
    }
}

/// One page of topic counts.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct TopicList {
    /// Topics in name order: those with events to deliver, dead letters, or events published
    /// within the window.
    topics: Vec<TopicView>,
    /// The window of `published`, in seconds up to now.
    window_seconds: u64,
    /// The next page; `null` when this one was not full.
    next: Option<PageLink>,
}

/// Counts per topic and state, and the oldest event still to deliver.
#[utoipa::path(
    get,
    path = "/api/topics",
    params(TopicQuery),
    responses(
        (status = 200, description = "One page of topics", body = TopicList),
        (status = 400, description = "A parameter was refused", body = ErrorBody),
    )
)]
pub(crate) async fn topics<B: JournalBackend>(
    State(state): State<AppState<B>>,
    RawQuery(query): RawQuery,
) -> Result<Json<TopicList>, ApiError> {
    let paging = Paging::parse(query.as_deref(), state.options.page_size, true)?;
    let topics = state
        .journal
        .topic_stats(&paging.after, paging.limit, paging.window)
        .await
        .map_err(|e| ApiError::core("after", e))?;
    let next = (topics.len() == paging.limit as usize)
        .then(|| topics.last())
        .flatten()
        .map(|last| {
            link(
                "api/topics",
                &paging,
                &last.topic,
                true,
                state.options.page_size,
            )
        });
    Ok(Json(TopicList {
        topics: topics.into_iter().map(TopicView::from).collect(),
        window_seconds: paging.window.as_secs(),
        next,
    }))
}

/// The leases of one relay.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct RelayView {
    /// The relay's name (`leased_by`).
    pub(crate) leased_by: String,
    /// Events under its live leases: the batch it is delivering.
    pub(crate) live: i64,
    /// Events whose lease ran out while still naming it (a relay that stopped or stalls).
    pub(crate) expired: i64,
    /// The latest lease end.
    pub(crate) lease_until_max: Option<DateTime<Utc>>,
    /// The earliest lease end.
    pub(crate) lease_until_min: Option<DateTime<Utc>>,
}

impl From<RelayLeases> for RelayView {
    fn from(r: RelayLeases) -> Self {
        RelayView {
            leased_by: r.leased_by,
            live: r.live,
            expired: r.expired,
            lease_until_max: r.lease_until_max,
            lease_until_min: r.lease_until_min,
        }
    }
}

/// One page of relays.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct RelayList {
    /// Relays holding leases, in name order.
    relays: Vec<RelayView>,
    /// The next page; `null` when this one was not full.
    next: Option<PageLink>,
}

/// The relays holding leases: live (the batch in flight) and expired.
#[utoipa::path(
    get,
    path = "/api/relays",
    params(PagingQuery),
    responses(
        (status = 200, description = "One page of relays", body = RelayList),
        (status = 400, description = "A parameter was refused", body = ErrorBody),
    )
)]
pub(crate) async fn relays<B: JournalBackend>(
    State(state): State<AppState<B>>,
    RawQuery(query): RawQuery,
) -> Result<Json<RelayList>, ApiError> {
    let paging = Paging::parse(query.as_deref(), state.options.page_size, false)?;
    let relays = state
        .journal
        .relay_leases(&paging.after, paging.limit)
        .await
        .map_err(|e| ApiError::core("after", e))?;
    let next = (relays.len() == paging.limit as usize)
        .then(|| relays.last())
        .flatten()
        .map(|last| {
            link(
                "api/relays",
                &paging,
                &last.leased_by,
                false,
                state.options.page_size,
            )
        });
    Ok(Json(RelayList {
        relays: relays.into_iter().map(RelayView::from).collect(),
        next,
    }))
}

/// The events of the same ordering key around an event.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct Neighbours {
    /// The key (`null` for an event without one).
    ordering_key: Option<String>,
    /// The sequence of the key's previous event, if one was found.
    previous: Option<i64>,
    /// The sequence of the key's next event, if one was found.
    next: Option<i64>,
}

/// The previous and next event of an event's ordering key: undelivered ones however far away,
/// delivered ones within 10,000 events on either side.
#[utoipa::path(
    get,
    path = "/api/events/{id}/neighbours",
    params(("id" = String, Path, description = "The event id (UUID) or its sequence (№)")),
    responses(
        (status = 200, description = "The neighbours", body = Neighbours),
        (status = 400, description = "Neither a UUID nor a sequence", body = ErrorBody),
        (status = 404, description = "No such event", body = ErrorBody),
    )
)]
pub(crate) async fn neighbours<B: JournalBackend>(
    State(state): State<AppState<B>>,
    Path(id): Path<String>,
) -> Result<Json<Neighbours>, ApiError> {
    let event = find_event(&state, &id).await?;
    let around = state
        .journal
        .neighbours(&event)
        .await
        .map_err(|e| ApiError::core("id", e))?;
    Ok(Json(Neighbours {
        ordering_key: event.ordering_key,
        previous: around.previous,
        next: around.next,
    }))
}
