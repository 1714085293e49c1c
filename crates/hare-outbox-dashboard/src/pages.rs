//! The pages besides the journal: one event (`/events/{sequence or id}`), the held keys
//! (`/keys`), the counts per topic (`/topics`) and the relays holding leases (`/relays`); and
//! what every page shares: the header with its views, language links and token field
//! ([`Chrome`]).

use askama::Template;
use axum::Extension;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use chrono::{DateTime, Utc};
use hare_outbox_core::journal::ObjectRef;
use hare_outbox_core::redact::{self, UrlKind};
use hare_outbox_core::{EventStatus, JournalBackend, OutboxEvent};

use crate::AppState;
use crate::api::{ApiError, find_event};
use crate::i18n::{Locale, Texts, TimeText};
use crate::paging::Paging;
use crate::security::Base;
use crate::view::{Change, changes};

/// What every page shows around its content.
pub(crate) struct Chrome {
    pub(crate) title: String,
    pub(crate) table: String,
    pub(crate) lang: &'static str,
    pub(crate) dates: &'static str,
    pub(crate) t: &'static Texts,
    /// The dashboard's absolute path, ending in `/` (`/`, `/outbox/`): every link starts with it.
    pub(crate) root: String,
    /// The journal's address: the base without its trailing `/` (`/outbox`; `/` at the root),
    /// which is the path `Router::nest` matches.
    pub(crate) home: String,
    /// Which view the page is: `journal`, `keys`, `topics`, `relays`, `event`.
    pub(crate) current: &'static str,
    pub(crate) en_href: String,
    pub(crate) ru_href: String,
    pub(crate) token_configured: bool,
}

impl Chrome {
    /// The chrome of a page of `state`'s dashboard served under `base`.
    pub(crate) fn new<B: JournalBackend>(
        state: &AppState<B>,
        locale: &Locale,
        base: &Base,
        current: &'static str,
        query: Option<&str>,
    ) -> Chrome {
        let keep: Vec<(String, String)> = form_urlencoded::parse(query.unwrap_or("").as_bytes())
            .filter(|(k, _)| k != "lang")
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        let lang_href = |lang: &str| {
            let mut out = form_urlencoded::Serializer::new(String::new());
            for (k, v) in &keep {
                out.append_pair(k, v);
            }
            out.append_pair("lang", lang);
            format!("?{}", out.finish())
        };
        Chrome {
            title: state.options.title.clone(),
            table: state.journal.table().to_string(),
            lang: locale.lang.tag(),
            dates: locale.dates.name(),
            t: locale.t(),
            root: base.0.clone(),
            home: base.home(),
            current,
            en_href: lang_href("en"),
            ru_href: lang_href("ru"),
            token_configured: state.options.token.is_some(),
        }
    }
}

/// Renders `page` with `status`, remembering a chosen language in a cookie.
pub(crate) fn render(status: StatusCode, page: &impl Template, locale: &Locale) -> Response {
    match page.render() {
        Ok(html) => {
            let mut response = (status, Html(html)).into_response();
            if let Some(cookie) = locale.cookie() {
                response.headers_mut().insert(header::SET_COOKIE, cookie);
            }
            response
        }
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the page could not be rendered: {e}"),
        )
            .into_response(),
    }
}

/// An age as a short text: `42 s`, `17 min`, `5 h 3 min`, `3 d 4 h`.
pub(crate) fn age(since: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let s = (now - since).num_seconds().max(0);
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min", s / 60),
        3600..86_400 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        _ => format!("{} d {} h", s / 86_400, s % 86_400 / 3600),
    }
}

/// An error text as stored, redacted again (rows an older version or another program wrote).
pub(crate) fn error_text(error: Option<&str>) -> String {
    error
        .map(|e| redact::in_text(e, UrlKind::Connection))
        .unwrap_or_default()
}

/// The most of a JSON value the event page shows, in bytes; the API has the rest.
pub(crate) const PRETTY_LIMIT: usize = 256 * 1024;

/// `value` as indented JSON, cut at [`PRETTY_LIMIT`] bytes with a pointer to the whole event.
pub(crate) fn pretty(value: &serde_json::Value, reference: &str) -> String {
    let mut text = serde_json::to_string_pretty(value).unwrap_or_default();
    if text.len() > PRETTY_LIMIT {
        let mut cut = PRETTY_LIMIT;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str(&format!(
            "\n… cut at {} KiB; the whole event is at api/events/{reference}",
            PRETTY_LIMIT / 1024
        ));
    }
    text
}

// ---------------------------------------------------------------------------------------------
// One event

#[derive(Template)]
#[template(path = "event.html")]
struct EventPage {
    c: Chrome,
    e: OutboxEvent,
    id: String,
    status: &'static str,
    status_text: &'static str,
    dead: bool,
    object: String,
    object_href: String,
    who: String,
    created: TimeText,
    processed: Option<TimeText>,
    next_attempt: Option<TimeText>,
    dead_lettered: Option<TimeText>,
    lease_until: Option<TimeText>,
    leased_by: String,
    key: String,
    idempotency_key: String,
    previous: Option<i64>,
    next: Option<i64>,
    last_error: String,
    changes: Vec<Change>,
    payload: String,
    headers: String,
    extra: Vec<(String, String)>,
}

#[derive(Template)]
#[template(path = "missing.html")]
struct MissingPage {
    c: Chrome,
    field: String,
    message: String,
}

/// `GET /events/{sequence or id}`: one event in full, with the neighbours of its key.
pub(crate) async fn event<B: JournalBackend>(
    State(state): State<AppState<B>>,
    Extension(base): Extension<Base>,
    Path(reference): Path<String>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let locale = Locale::of(&headers, query.as_deref());
    let chrome = Chrome::new(&state, &locale, &base, "event", query.as_deref());
    let found = match find_event(&state, &reference).await {
        Ok(event) => event,
        Err(error) => return missing(chrome, &locale, error),
    };
    let neighbours = match state.journal.neighbours(&found).await {
        Ok(n) => n,
        Err(e) => return missing(chrome, &locale, ApiError::core("ordering_key", e)),
    };
    let now = Utc::now();
    let status = found.status(now);
    let object = ObjectRef::named(&found, state.options.object_name).unwrap_or_default();
    let object_href = format!(
        "{}?{}",
        base.home(),
        form_urlencoded::Serializer::new(String::new())
            .append_pair("object", &object)
            .finish()
    );
    let id = found.id.to_string();
    let page = EventPage {
        id: id.clone(),
        status: status.name(),
        status_text: chrome.t.status(status.name()),
        dead: status == EventStatus::Dead,
        object_href,
        object,
        who: hare_outbox_core::journal::author_of(&found)
            .unwrap_or_default()
            .to_owned(),
        created: locale.time(found.created_at),
        processed: found.published_at.map(|t| locale.time(t)),
        next_attempt: found.next_attempt_at.map(|t| locale.time(t)),
        dead_lettered: found.dead_lettered_at.map(|t| locale.time(t)),
        lease_until: found.lease_until.map(|t| locale.time(t)),
        leased_by: found.leased_by.clone().unwrap_or_default(),
        key: found.ordering_key.clone().unwrap_or_default(),
        idempotency_key: found.idempotency_key.clone().unwrap_or_default(),
        previous: neighbours.previous,
        next: neighbours.next,
        last_error: error_text(found.last_error.as_deref()),
        changes: changes(&found.payload),
        payload: pretty(&found.payload, &id),
        headers: pretty(&serde_json::Value::Object(found.headers.clone()), &id),
        extra: found
            .extra
            .iter()
            .map(|(k, v)| (k.clone(), pretty(v, &id)))
            .collect(),
        e: found,
        c: chrome,
    };
    render(StatusCode::OK, &page, &locale)
}

fn missing(c: Chrome, locale: &Locale, error: ApiError) -> Response {
    let status = error.status;
    let page = MissingPage {
        c,
        field: error.field,
        message: error.message,
    };
    render(status, &page, locale)
}

// ---------------------------------------------------------------------------------------------
// Held keys

struct KeyRow {
    key: String,
    sequence: i64,
    topic: String,
    object: String,
    status: &'static str,
    status_text: &'static str,
    last_error: String,
    attempts: i32,
    waiting: String,
    since: TimeText,
    age: String,
}

#[derive(Template)]
#[template(path = "keys.html")]
struct KeysPage {
    c: Chrome,
    keys: Vec<KeyRow>,
    walked: i64,
    first_href: String,
    next_href: String,
    error_field: String,
    error_message: String,
}

/// `GET /keys`: the held ordering keys, with retry and skip-and-release of their head.
pub(crate) async fn keys<B: JournalBackend>(
    State(state): State<AppState<B>>,
    Extension(base): Extension<Base>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let locale = Locale::of(&headers, query.as_deref());
    let c = Chrome::new(&state, &locale, &base, "keys", query.as_deref());
    let mut page = KeysPage {
        c,
        keys: Vec::new(),
        walked: 0,
        first_href: String::new(),
        next_href: String::new(),
        error_field: String::new(),
        error_message: String::new(),
    };
    let result = async {
        let paging = Paging::parse(query.as_deref(), state.options.page_size, false)?;
        let held = state
            .journal
            .held_keys(&paging.after, paging.limit)
            .await
            .map_err(|e| ApiError::core("after", e))?;
        Ok::<_, ApiError>((paging, held))
    }
    .await;
    let status = match result {
        Ok((paging, held)) => {
            let now = Utc::now();
            if !paging.after.is_empty() {
                page.first_href = format!("{}keys", base.0);
            }
            if let Some(after) = &held.next_after {
                page.next_href = format!(
                    "{}keys?{}",
                    base.0,
                    paging.next_query(after, false, state.options.page_size)
                );
            }
            page.walked = held.walked;
            page.keys = held
                .keys
                .into_iter()
                .map(|k| {
                    let head = k.head;
                    let status = head.status(now);
                    let since = head.created_at;
                    KeyRow {
                        object: ObjectRef::named(&head, state.options.object_name)
                            .unwrap_or_default(),
                        status: status.name(),
                        status_text: page.c.t.status(status.name()),
                        last_error: error_text(head.last_error.as_deref()),
                        attempts: head.attempts,
                        waiting: if k.waiting >= hare_outbox_core::journal::WAITING_COUNT_CAP {
                            format!("{}+", k.waiting)
                        } else {
                            k.waiting.to_string()
                        },
                        since: locale.time(since),
                        age: age(since, now),
                        sequence: head.sequence,
                        topic: head.topic,
                        key: k.ordering_key,
                    }
                })
                .collect();
            StatusCode::OK
        }
        Err(error) => {
            page.error_field = error.field;
            page.error_message = error.message;
            error.status
        }
    };
    render(status, &page, &locale)
}

// ---------------------------------------------------------------------------------------------
// Topics

struct TopicRow {
    topic: String,
    href: String,
    dead_href: String,
    pending: i64,
    leased: i64,
    retrying: i64,
    dead: i64,
    published: i64,
    oldest: Option<TimeText>,
    age: String,
}

#[derive(Template)]
#[template(path = "topics.html")]
struct TopicsPage {
    c: Chrome,
    topics: Vec<TopicRow>,
    window_seconds: u64,
    window_text: String,
    first_href: String,
    next_href: String,
    error_field: String,
    error_message: String,
}

/// `GET /topics`: counts per topic and state, the oldest event still to deliver.
pub(crate) async fn topics<B: JournalBackend>(
    State(state): State<AppState<B>>,
    Extension(base): Extension<Base>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let locale = Locale::of(&headers, query.as_deref());
    let c = Chrome::new(&state, &locale, &base, "topics", query.as_deref());
    let mut page = TopicsPage {
        c,
        topics: Vec::new(),
        window_seconds: crate::paging::DEFAULT_TOPIC_WINDOW.as_secs(),
        window_text: String::new(),
        first_href: String::new(),
        next_href: String::new(),
        error_field: String::new(),
        error_message: String::new(),
    };
    let result = async {
        let paging = Paging::parse(query.as_deref(), state.options.page_size, true)?;
        let stats = state
            .journal
            .topic_stats(&paging.after, paging.limit, paging.window)
            .await
            .map_err(|e| ApiError::core("after", e))?;
        Ok::<_, ApiError>((paging, stats))
    }
    .await;
    let journal_href = |topic: &str, status: Option<&str>| {
        let mut out = form_urlencoded::Serializer::new(String::new());
        out.append_pair("topic", topic);
        if let Some(status) = status {
            out.append_pair("status", status);
        }
        format!("{}?{}", base.home(), out.finish())
    };
    let status = match result {
        Ok((paging, stats)) => {
            let now = Utc::now();
            page.window_seconds = paging.window.as_secs();
            page.window_text = humantime_short(paging.window.as_secs());
            if !paging.after.is_empty() {
                page.first_href = format!("{}topics", base.0);
            }
            if stats.len() == paging.limit as usize
                && let Some(last) = stats.last()
            {
                page.next_href = format!(
                    "{}topics?{}",
                    base.0,
                    paging.next_query(&last.topic, true, state.options.page_size)
                );
            }
            page.topics = stats
                .into_iter()
                .map(|s| TopicRow {
                    href: journal_href(&s.topic, None),
                    dead_href: journal_href(&s.topic, Some("dead")),
                    oldest: s.oldest_pending_at.map(|t| locale.time(t)),
                    age: s.oldest_pending_at.map(|t| age(t, now)).unwrap_or_default(),
                    pending: s.pending,
                    leased: s.leased,
                    retrying: s.retrying,
                    dead: s.dead,
                    published: s.published,
                    topic: s.topic,
                })
                .collect();
            StatusCode::OK
        }
        Err(error) => {
            page.error_field = error.field;
            page.error_message = error.message;
            error.status
        }
    };
    render(status, &page, &locale)
}

/// A window in seconds as `1 h`, `90 min`, `2 d`, `45 s`.
fn humantime_short(seconds: u64) -> String {
    match seconds {
        s if s % 86_400 == 0 => format!("{} d", s / 86_400),
        s if s % 3600 == 0 => format!("{} h", s / 3600),
        s if s % 60 == 0 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

// ---------------------------------------------------------------------------------------------
// Relays

struct RelayRow {
    name: String,
    live: i64,
    expired: i64,
    min: Option<TimeText>,
    max: Option<TimeText>,
}

#[derive(Template)]
#[template(path = "relays.html")]
struct RelaysPage {
    c: Chrome,
    relays: Vec<RelayRow>,
    first_href: String,
    next_href: String,
    error_field: String,
    error_message: String,
}

/// `GET /relays`: the relays holding leases.
pub(crate) async fn relays<B: JournalBackend>(
    State(state): State<AppState<B>>,
    Extension(base): Extension<Base>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let locale = Locale::of(&headers, query.as_deref());
    let c = Chrome::new(&state, &locale, &base, "relays", query.as_deref());
    let mut page = RelaysPage {
        c,
        relays: Vec::new(),
        first_href: String::new(),
        next_href: String::new(),
        error_field: String::new(),
        error_message: String::new(),
    };
    let result = async {
        let paging = Paging::parse(query.as_deref(), state.options.page_size, false)?;
        let relays = state
            .journal
            .relay_leases(&paging.after, paging.limit)
            .await
            .map_err(|e| ApiError::core("after", e))?;
        Ok::<_, ApiError>((paging, relays))
    }
    .await;
    let status = match result {
        Ok((paging, relays)) => {
            if !paging.after.is_empty() {
                page.first_href = format!("{}relays", base.0);
            }
            if relays.len() == paging.limit as usize
                && let Some(last) = relays.last()
            {
                page.next_href = format!(
                    "{}relays?{}",
                    base.0,
                    paging.next_query(&last.leased_by, false, state.options.page_size)
                );
            }
            page.relays = relays
                .into_iter()
                .map(|r| RelayRow {
                    min: r.lease_until_min.map(|t| locale.time(t)),
                    max: r.lease_until_max.map(|t| locale.time(t)),
                    live: r.live,
                    expired: r.expired,
                    name: r.leased_by,
                })
                .collect();
            StatusCode::OK
        }
        Err(error) => {
            page.error_field = error.field;
            page.error_message = error.message;
            error.status
        }
    };
    render(status, &page, &locale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_and_windows_read_short() {
        let now = Utc::now();
        assert_eq!(age(now - chrono::Duration::seconds(42), now), "42 s");
        assert_eq!(age(now - chrono::Duration::minutes(17), now), "17 min");
        assert_eq!(age(now - chrono::Duration::minutes(303), now), "5 h 3 min");
        assert_eq!(age(now - chrono::Duration::hours(76), now), "3 d 4 h");
        assert_eq!(age(now + chrono::Duration::hours(1), now), "0 s");
        assert_eq!(humantime_short(3600), "1 h");
        assert_eq!(humantime_short(5400), "90 min");
        assert_eq!(humantime_short(172_800), "2 d");
        assert_eq!(humantime_short(61), "61 s");
    }

    #[test]
    fn pretty_values_are_cut_on_a_character_boundary() {
        let small = serde_json::json!({"a": 1});
        assert_eq!(pretty(&small, "7"), "{\n  \"a\": 1\n}");
        let big = serde_json::json!({"text": "ж".repeat(PRETTY_LIMIT)});
        let text = pretty(&big, "7");
        assert!(text.len() < PRETTY_LIMIT + 200);
        assert!(
            text.ends_with("api/events/7"),
            "{}",
            &text[text.len() - 80..]
        );
    }
}
