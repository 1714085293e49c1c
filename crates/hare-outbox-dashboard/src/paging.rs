//! The parameters of the keys, topics and relays views and of their JSON API: a keyset cursor
//! (`after`), a page size (`limit`) and, for topics, the window of published events
//! (`window_seconds`). `lang` (the page's language) is accepted and left to the page.

use std::time::Duration;

use axum::http::StatusCode;
use hare_outbox_core::journal::{MAX_FILTER_LENGTH, MAX_PAGE_SIZE, MAX_PUBLISHED_WINDOW};

use crate::api::ApiError;

/// The published window of the topic counts when the request names none: one hour.
pub(crate) const DEFAULT_TOPIC_WINDOW: Duration = Duration::from_secs(3600);

/// One view's page request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Paging {
    /// Names after this one (`""` = from the first).
    pub(crate) after: String,
    /// The page size.
    pub(crate) limit: u32,
    /// The topic counts' window of published events.
    pub(crate) window: Duration,
}

impl Paging {
    /// Reads `after`, `limit` and, when `with_window`, `window_seconds` from `query`; any other
    /// parameter but `lang` is refused, naming the parameters allowed.
    pub(crate) fn parse(
        query: Option<&str>,
        default_limit: u32,
        with_window: bool,
    ) -> Result<Paging, ApiError> {
        let mut paging = Paging {
            after: String::new(),
            limit: default_limit,
            window: DEFAULT_TOPIC_WINDOW,
        };
        let allowed = if with_window {
            "after, limit, window_seconds"
        } else {
            "after, limit"
        };
        for (key, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            let bad = |message: String| ApiError::new(StatusCode::BAD_REQUEST, &key, message);
            match key.as_ref() {
                "after" => {
                    if value.chars().count() > MAX_FILTER_LENGTH || value.contains('\0') {
                        return Err(bad(format!(
                            "after of {} characters is not allowed; use at most \
                             {MAX_FILTER_LENGTH} characters without NUL",
                            value.chars().count()
                        )));
                    }
                    paging.after = value.into_owned();
                }
                "limit" => {
                    paging.limit = value
                        .trim()
                        .parse()
                        .ok()
                        .filter(|l| (1..=MAX_PAGE_SIZE).contains(l))
                        .ok_or_else(|| {
                            bad(format!(
                                "page size {value:?} is not allowed; use a whole number from 1 \
                                 to {MAX_PAGE_SIZE}"
                            ))
                        })?;
                }
                "window_seconds" if with_window => {
                    paging.window = value
                        .trim()
                        .parse::<u64>()
                        .ok()
                        .map(Duration::from_secs)
                        .filter(|w| !w.is_zero() && *w <= MAX_PUBLISHED_WINDOW)
                        .ok_or_else(|| {
                            bad(format!(
                                "window_seconds {value:?} is not allowed; use a whole number of \
                                 seconds from 1 to {}",
                                MAX_PUBLISHED_WINDOW.as_secs()
                            ))
                        })?;
                }
                "lang" => {}
                other => {
                    return Err(ApiError::new(
                        StatusCode::BAD_REQUEST,
                        other,
                        format!("parameter {other:?} is not known; use {allowed}"),
                    ));
                }
            }
        }
        Ok(paging)
    }

    /// The query string of the page after `after`, keeping the limit and window given.
    pub(crate) fn next_query(&self, after: &str, with_window: bool, default_limit: u32) -> String {
        let mut out = form_urlencoded::Serializer::new(String::new());
        out.append_pair("after", after);
        if self.limit != default_limit {
            out.append_pair("limit", &self.limit.to_string());
        }
        if with_window && self.window != DEFAULT_TOPIC_WINDOW {
            out.append_pair("window_seconds", &self.window.as_secs().to_string());
        }
        out.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_refuses_naming_the_parameter() {
        let p = Paging::parse(
            Some("after=k%201&limit=10&window_seconds=60&lang=ru"),
            50,
            true,
        )
        .unwrap();
        assert_eq!(p.after, "k 1");
        assert_eq!(p.limit, 10);
        assert_eq!(p.window, Duration::from_secs(60));
        assert_eq!(
            p.next_query("k 9", true, 50),
            "after=k+9&limit=10&window_seconds=60"
        );
        let e = Paging::parse(Some("limit=0"), 50, false).unwrap_err();
        assert_eq!(e.field, "limit");
        assert!(e.message.contains("\"0\""), "{}", e.message);
        let e = Paging::parse(Some("window_seconds=60"), 50, false).unwrap_err();
        assert_eq!(e.field, "window_seconds");
        assert!(e.message.contains("after, limit"), "{}", e.message);
        let e = Paging::parse(Some("window_seconds=0"), 50, true).unwrap_err();
        assert_eq!(e.field, "window_seconds");
        let long = format!("after={}", "k".repeat(256));
        assert_eq!(
            Paging::parse(Some(&long), 50, false).unwrap_err().field,
            "after"
        );
    }
}
