//! The token and CSRF checks of mutating actions, and the security headers of every response.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hare_outbox_core::JournalBackend;
use hare_outbox_core::redact::{self, UrlKind};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::AppState;
use crate::api::ApiError;

/// The page may load scripts, styles and data only from itself; no inline script, no framing.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// Adds the security headers to every response.
pub(crate) async fn headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

/// Answers 421 to a request whose `Host` is not a loopback name (`localhost`, `*.localhost`,
/// 127.0.0.0/8, `::1`). [`Dashboard::router`](crate::Dashboard::router) has it unless remote
/// access is allowed: a web page whose own name was re-pointed at 127.0.0.1 (DNS rebinding) would
/// otherwise be same-origin with the dashboard and read the journal.
pub(crate) async fn loopback_host(request: Request, next: Next) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .map(|h| String::from_utf8_lossy(h.as_bytes()).into_owned())
        .or_else(|| request.uri().authority().map(|a| a.as_str().to_owned()));
    match host {
        Some(host) if !is_loopback_host(&host) => ApiError::new(
            StatusCode::MISDIRECTED_REQUEST,
            "host",
            format!(
                "host {host:?} is not a loopback name; this dashboard answers only to localhost, \
                 127.0.0.1 or [::1] (serve it with allow_remote behind a proxy for other names)"
            ),
        )
        .into_response(),
        _ => next.run(request).await,
    }
}

/// Answers 401 to a request the configured [`ReadAuth`](crate::ReadAuth) refuses.
pub(crate) async fn read_auth<B: JournalBackend>(
    State(state): State<AppState<B>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(check) = &state.options.read_auth else {
        return next.run(request).await;
    };
    let (parts, body) = request.into_parts();
    if !check(&parts) {
        return ApiError::new(
            StatusCode::UNAUTHORIZED,
            "auth",
            "this dashboard needs the access its application grants; the request was refused",
        )
        .into_response();
    }
    next.run(Request::from_parts(parts, body)).await
}

/// Where the dashboard is, as the browser sees it: an absolute path ending in `/`; every link
/// of its pages starts with it.
#[derive(Debug, Clone)]
pub(crate) struct Base(pub(crate) String);

impl Base {
    /// The journal page's path: the base without its trailing `/` (`/outbox`), since
    /// `Router::nest("/outbox", …)` matches `/outbox` and not `/outbox/`; `/` at the root.
    pub(crate) fn home(&self) -> String {
        match self.0.trim_end_matches('/') {
            "" => "/".to_owned(),
            home => home.to_owned(),
        }
    }
}

/// Puts the request's [`Base`] into its extensions: the configured base path, else the prefix
/// the dashboard was nested under (the request's original path minus the path inside the
/// dashboard), else `/`.
pub(crate) async fn base<B: JournalBackend>(
    State(state): State<AppState<B>>,
    mut request: Request,
    next: Next,
) -> Response {
    let base = match &state.options.base_path {
        Some(path) => path.clone(),
        None => base_of(
            request
                .extensions()
                .get::<axum::extract::OriginalUri>()
                .map(|o| o.path()),
            request.uri().path(),
        ),
    };
    request.extensions_mut().insert(Base(base));
    next.run(request).await
}

/// The base of a request whose original path is `outer` and whose path inside the dashboard is
/// `inner`.
pub(crate) fn base_of(outer: Option<&str>, inner: &str) -> String {
    let Some(outer) = outer else {
        return "/".to_owned();
    };
    let prefix = if inner == "/" {
        outer.trim_end_matches('/')
    } else {
        outer.strip_suffix(inner).unwrap_or("")
    };
    // Never a scheme-relative `//host`: at most one leading slash.
    let prefix = prefix.trim_start_matches('/');
    if prefix.is_empty() {
        "/".to_owned()
    } else {
        format!("/{prefix}/")
    }
}

/// Whether `host` (a `Host` header: a name or address, and maybe a port) names this machine.
pub(crate) fn is_loopback_host(host: &str) -> bool {
    let host = host.trim();
    let name = match host.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((name, _)) => name,
            None => return false,
        },
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost"
        || name.ends_with(".localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Lets a mutating request through only when it is same-origin and carries the configured token.
pub(crate) async fn guard_mutation<B: JournalBackend>(
    State(state): State<AppState<B>>,
    request: Request,
    next: Next,
) -> Response {
    // Another method is answered by the route itself (405 with `Allow: POST`): nothing to guard.
    if request.method() != axum::http::Method::POST {
        return next.run(request).await;
    }
    match check(state.options.token.as_deref(), request.headers()) {
        Ok(()) => next.run(request).await,
        Err(error) => error.into_response(),
    }
}

/// The checks, in order: the request comes from the dashboard's own origin, a token is
/// configured, and the request carries it.
///
/// The origin is judged by `Sec-Fetch-Site` (`cross-site` is refused), then by `Origin` (its
/// host must be the `Host` the request was sent to), and — when a browser sent neither — by
/// `Referer` (the page's host must be the `Host`; a Referer that is no URL is refused). A
/// request with none of the three headers did not come from a browser page (curl, a script)
/// and is allowed with the token alone.
pub(crate) fn check(token: Option<&str>, headers: &HeaderMap) -> Result<(), ApiError> {
    if headers
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"cross-site"))
    {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "origin",
            "cross-site request refused (Sec-Fetch-Site: cross-site); act from the dashboard's \
             own page or without a browser",
        ));
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
        let origin_host = origin
            .to_str()
            .ok()
            .and_then(|o| o.split_once("://"))
            .map(|(_, authority)| authority.trim_end_matches('/'));
        let same = matches!((origin_host, host), (Some(o), Some(h)) if o.eq_ignore_ascii_case(h));
        if !same {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "origin",
                format!(
                    "request from origin {:?} refused: it is not this dashboard's origin (host \
                     {:?}); act from the dashboard's own page",
                    String::from_utf8_lossy(origin.as_bytes()),
                    host.unwrap_or("")
                ),
            ));
        }
    }
    // Neither Origin nor Sec-Fetch-Site (an old browser, or a request some browsers send
    // without Origin): a Referer from another host is cross-site. A request with none of the
    // three is not from a browser page and needs the token alone.
    if headers.get(header::ORIGIN).is_none()
        && headers.get("sec-fetch-site").is_none()
        && let Some(referer) = headers.get(header::REFERER)
    {
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
        let referer = String::from_utf8_lossy(referer.as_bytes());
        let authority = url::Url::parse(&referer).ok().and_then(|u| {
            let host = u.host_str()?.to_owned();
            Some(match u.port() {
                Some(port) => format!("{host}:{port}"),
                None => host,
            })
        });
        let same =
            matches!((authority.as_deref(), host), (Some(r), Some(h)) if r.eq_ignore_ascii_case(h));
        if !same {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "origin",
                format!(
                    "request from page {} refused: it is not this dashboard's origin (host \
                     {:?}); act from the dashboard's own page",
                    redact::redact_url(&referer, UrlKind::Endpoint),
                    host.unwrap_or("")
                ),
            ));
        }
    }
    let Some(token) = token else {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "token",
            "mutating actions are disabled because no dashboard token is configured; start the \
             dashboard with a token (DashboardOptions::with_token; for the hare-outbox command \
             the HARE_OUTBOX_DASHBOARD_TOKEN variable or [dashboard] token_file) and send it as \
             `Authorization: Bearer <token>`",
        ));
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim);
    let Some(given) = given else {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "token",
            "this action needs the dashboard token as `Authorization: Bearer <token>`",
        ));
    };
    // Hashing first makes the comparison constant-time in the length too.
    let equal: bool = Sha256::digest(given.as_bytes())
        .ct_eq(&Sha256::digest(token.as_bytes()))
        .into();
    if equal {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "token",
            "the dashboard token is wrong",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn loopback_hosts_are_told_apart_from_other_names() {
        for host in [
            "127.0.0.1:8080",
            "127.0.0.2",
            "localhost:8080",
            "LOCALHOST.",
            "app.localhost:80",
            "[::1]:8080",
            "[::1]",
        ] {
            assert!(is_loopback_host(host), "{host}");
        }
        for host in [
            "attacker.example:8080",
            "127.0.0.1.attacker.example",
            "localhost.attacker.example",
            "10.0.0.1:8080",
            "[::ffff:7f00:1",
            "",
        ] {
            assert!(!is_loopback_host(host), "{host}");
        }
    }

    #[test]
    fn checks_origin_then_token() {
        let token = Some("0123456789abcdef");
        let ok = headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:8080"),
            ("authorization", "Bearer 0123456789abcdef"),
        ]);
        assert!(check(token, &ok).is_ok());
        assert_eq!(check(None, &ok).unwrap_err().status, StatusCode::FORBIDDEN);
        let wrong = headers(&[("authorization", "Bearer 0123456789abcdeX")]);
        assert_eq!(
            check(token, &wrong).unwrap_err().status,
            StatusCode::UNAUTHORIZED
        );
        let cross = headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://evil.example"),
            ("authorization", "Bearer 0123456789abcdef"),
        ]);
        assert_eq!(check(token, &cross).unwrap_err().field, "origin");
        let fetch = headers(&[
            ("sec-fetch-site", "cross-site"),
            ("authorization", "Bearer 0123456789abcdef"),
        ]);
        assert_eq!(check(token, &fetch).unwrap_err().field, "origin");
        let null = headers(&[("host", "127.0.0.1:8080"), ("origin", "null")]);
        assert_eq!(check(token, &null).unwrap_err().field, "origin");
    }

    #[test]
    fn a_foreign_referer_without_origin_is_cross_site() {
        let token = Some("0123456789abcdef");
        let foreign = headers(&[
            ("host", "127.0.0.1:8080"),
            ("referer", "https://evil.example/page?token=Leak123"),
            ("authorization", "Bearer 0123456789abcdef"),
        ]);
        let error = check(token, &foreign).unwrap_err();
        assert_eq!(error.status, StatusCode::FORBIDDEN);
        assert_eq!(error.field, "origin");
        assert!(!format!("{error:?}").contains("Leak123"), "{error:?}");
        let own = headers(&[
            ("host", "127.0.0.1:8080"),
            (
                "referer",
                "http://127.0.0.1:8080/events?status=dead_lettered",
            ),
            ("authorization", "Bearer 0123456789abcdef"),
        ]);
        assert!(check(token, &own).is_ok());
        // None of Origin, Sec-Fetch-Site and Referer: not a browser page; the token decides.
        let bare = headers(&[
            ("host", "127.0.0.1:8080"),
            ("authorization", "Bearer 0123456789abcdef"),
        ]);
        assert!(check(token, &bare).is_ok());
        let unparsable = headers(&[
            ("host", "127.0.0.1:8080"),
            ("referer", "not a url"),
            ("authorization", "Bearer 0123456789abcdef"),
        ]);
        assert_eq!(check(token, &unparsable).unwrap_err().field, "origin");
        // Origin, when present, decides; the Referer is not looked at then.
        let with_origin = headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:8080"),
            ("referer", "https://evil.example/"),
            ("authorization", "Bearer 0123456789abcdef"),
        ]);
        assert!(check(token, &with_origin).is_ok());
    }
}
