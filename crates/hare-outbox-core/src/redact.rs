//! Hiding secrets in everything shown: URLs, error messages and header values.
//!
//! Every URL the library, the command or the dashboard prints, logs or stores (`last_error`,
//! result records) goes through [`redact_url`] or [`in_text`] first:
//!
//! - [`UrlKind::Connection`] (database, broker and wake-up URLs): the password in the userinfo
//!   becomes `***`, a user name alone too for NATS-style schemes (where it is a token), and the
//!   values of query parameters whose name suggests a secret (`password`, `sslpassword`,
//!   `passfile`, `token`, `secret`, `key`, `auth`, …) become `***`. The host, port, user name and
//!   database stay, since they are what an operator needs to find the server.
//! - [`UrlKind::Endpoint`] (webhook URLs, `Location` headers): only the scheme, host and port,
//!   followed by `/…` when the URL has a path or query — tokens often live there
//!   (`https://hooks.example.com/T000/B000/XXXX`).
//! - [`UrlKind::PublicEndpoint`] (a webhook marked `url_public = true`): the whole URL, but with
//!   the userinfo password and every query value as `***`.
//!
//! A URL that does not parse is shown as its scheme and `…` (or `<unparsable URL>`), never raw.
//!
//! ```
//! use hare_outbox_core::redact::{UrlKind, redact_url};
//!
//! assert_eq!(
//!     redact_url("postgres://app:hunter2@db:5432/erp?sslpassword=x&sslmode=require", UrlKind::Connection),
//!     "postgres://app:***@db:5432/erp?sslpassword=***&sslmode=require"
//! );
//! assert_eq!(
//!     redact_url("https://hooks.example.com/T000/Secret?token=abc", UrlKind::Endpoint),
//!     "https://hooks.example.com/…"
//! );
//! assert_eq!(
//!     redact_url("https://hooks.example.com/T000/Secret?token=abc", UrlKind::PublicEndpoint),
//!     "https://hooks.example.com/T000/Secret?token=***"
//! );
//! ```

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::Regex;
use url::Url;

/// What is placed where a secret was.
pub const HIDDEN: &str = "***";

/// How much of a URL may be shown; see the [module documentation](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UrlKind {
    /// A database, broker or wake-up URL: everything but the userinfo password (or a NATS
    /// token) and the values of secret-looking query parameters.
    Connection,
    /// An HTTP endpoint whose path and query may carry tokens: scheme, host and port only.
    Endpoint,
    /// An HTTP endpoint marked public: the path is shown, the userinfo password and every query
    /// value are hidden.
    PublicEndpoint,
}

/// Schemes whose user name alone is a token (`nats://s3cr3t@host`).
const TOKEN_USER_SCHEMES: &[&str] = &["nats", "tls", "ws", "wss"];

/// Whether a query parameter (or header, or option) called `name` carries a secret: its name,
/// compared without case, contains `pass`, `pwd`, `secret`, `token`, `key`, `auth`, `cred`,
/// `sig` or `session`.
pub fn is_secret_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    [
        "pass", "pwd", "secret", "token", "key", "auth", "cred", "sig", "session",
    ]
    .iter()
    .any(|word| lower.contains(word))
}

/// `url` as it may be shown for its `kind`; see the [module documentation](self).
///
/// A comma-separated list of URLs (NATS takes several servers in one URL) has each of them
/// redacted; a URL without a scheme (`user:password@host:4222`) is read as an authority;
/// `sqlite:` URLs, which hold a file name, are shown as they are.
pub fn redact_url(url: &str, kind: UrlKind) -> String {
    if kind == UrlKind::Connection && url.contains(',') {
        return url
            .split(',')
            .map(|one| redact_one(one, kind))
            .collect::<Vec<_>>()
            .join(",");
    }
    redact_one(url, kind)
}

fn redact_one(text: &str, kind: UrlKind) -> String {
    let trimmed = text.trim_start();
    let lead = &text[..text.len() - trimmed.len()];
    if trimmed.to_ascii_lowercase().starts_with("sqlite:") {
        return text.to_owned();
    }
    let has_scheme = trimmed.contains("://");
    let parsed = if has_scheme {
        Url::parse(trimmed)
    } else {
        Url::parse(&format!("authority://{trimmed}"))
    };
    let Ok(url) = parsed else {
        return format!("{lead}{}", unparsable(trimmed));
    };
    // `http://host` parses with the path `/`; a connection URL is shown as it was written.
    let added_slash = kind == UrlKind::Connection
        && url.path() == "/"
        && !trimmed
            .split_once("://")
            .map_or(trimmed, |(_, rest)| rest)
            .contains('/');
    let shown = match kind {
        UrlKind::Connection if added_slash => {
            let shown = connection(url);
            match shown.split_once("://") {
                Some((scheme, rest)) => format!("{scheme}://{}", rest.replacen('/', "", 1)),
                None => shown,
            }
        }
        UrlKind::Connection => connection(url),
        UrlKind::Endpoint => endpoint(&url),
        UrlKind::PublicEndpoint => public_endpoint(url),
    };
    let shown = if has_scheme {
        shown
    } else {
        shown
            .strip_prefix("authority://")
            .map(str::to_owned)
            .unwrap_or(shown)
    };
    format!("{lead}{shown}")
}

/// What is shown of a URL that does not parse: its scheme when it has a plain one.
fn unparsable(text: &str) -> String {
    match text.split_once("://") {
        Some((scheme, _))
            if !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')) =>
        {
            format!("{scheme}://…")
        }
        _ if !text.contains(['@', '?', '=', '/', ':']) => text.to_owned(),
        _ => "<unparsable URL>".to_owned(),
    }
}

fn connection(mut url: Url) -> String {
    if url.password().is_some() {
        let _ = url.set_password(Some(HIDDEN));
    } else if !url.username().is_empty() && TOKEN_USER_SCHEMES.contains(&url.scheme()) {
        let _ = url.set_username(HIDDEN);
    }
    if let Some(query) = url.query() {
        let hidden = hide_query(query, is_secret_name);
        url.set_query(Some(&hidden));
    }
    url.set_fragment(None);
    url.to_string()
}

fn endpoint(url: &Url) -> String {
    let mut shown = format!("{}://", url.scheme());
    if let Some(host) = url.host_str() {
        shown.push_str(host);
    }
    if let Some(port) = url.port() {
        shown.push(':');
        shown.push_str(&port.to_string());
    }
    let path = url.path();
    if (!path.is_empty() && path != "/") || url.query().is_some() {
        shown.push_str("/…");
    } else if url.has_host() {
        shown.push('/');
    }
    shown
}

fn public_endpoint(mut url: Url) -> String {
    if url.password().is_some() {
        let _ = url.set_password(Some(HIDDEN));
    }
    if let Some(query) = url.query() {
        let hidden = hide_query(query, |_| true);
        url.set_query(Some(&hidden));
    }
    url.set_fragment(None);
    url.to_string()
}

/// `query` (`a=1&b=2`, raw) with the values of the parameters `hide` picks as [`HIDDEN`].
fn hide_query(query: &str, hide: impl Fn(&str) -> bool) -> String {
    query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if hide(&decode(name)) => format!("{name}={HIDDEN}"),
            Some(_) => pair.to_owned(),
            // A bare `?token` is all value.
            None if pair.is_empty() => String::new(),
            None => HIDDEN.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

fn decode(text: &str) -> String {
    form_urlencoded_decode(text)
}

/// Percent-decoding of one query component, `+` as a space.
fn form_urlencoded_decode(text: &str) -> String {
    url::form_urlencoded::parse(format!("x={text}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

/// Query parameters whose name looks secret but which name a file, not a secret.
const NOT_SECRET_PARAMETERS: &[&str] = &["sslkey", "sslcert", "sslrootcert", "sslcrl"];

/// What in `url` is a secret, for refusing it where secrets must not be written (a config
/// file): `"a password in the user info"`, `"a token in the user info"` (NATS-style schemes),
/// or `"the parameter NAME"` for a query parameter whose name looks secret (`password`,
/// `sslpassword`, `passfile`, `token`, `api_key`, …; not the file names `sslkey`, `sslcert`,
/// `sslrootcert`, `sslcrl`). Never the value itself. `None` when nothing looks secret (a token
/// in a path cannot be told apart from a plain path).
pub fn secret_in_url(url: &str) -> Option<String> {
    for one in url.split(',') {
        let one = one.trim();
        if one.to_ascii_lowercase().starts_with("sqlite:") {
            continue;
        }
        let parsed = if one.contains("://") {
            Url::parse(one)
        } else {
            Url::parse(&format!("authority://{one}"))
        };
        let Ok(parsed) = parsed else {
            // Not parsable: a password cannot be ruled out when userinfo seems present.
            if one.contains('@') {
                return Some("what looks like user info (`…@`)".to_owned());
            }
            continue;
        };
        if parsed.password().is_some() {
            return Some("a password in the user info".to_owned());
        }
        if !parsed.username().is_empty() && TOKEN_USER_SCHEMES.contains(&parsed.scheme()) {
            return Some("a token in the user info".to_owned());
        }
        for (name, _) in parsed.query_pairs() {
            let lower = name.to_ascii_lowercase();
            if is_secret_name(&name) && !NOT_SECRET_PARAMETERS.contains(&lower.as_str()) {
                return Some(format!("the parameter {name}"));
            }
        }
    }
    None
}

static URL_IN_TEXT: LazyLock<Regex> = LazyLock::new(|| {
    // A scheme, `://`, and everything up to white space, a quote or `…` (which ends an
    // already redacted URL).
    Regex::new(r#"(?i)\b[a-z][a-z0-9+.\-]*://[^\s"'<>`…]+"#).unwrap_or_else(|_| unreachable!())
});

static SECRET_ASSIGNMENT: LazyLock<Regex> = LazyLock::new(|| {
    // `password=…` and the like outside URLs (driver messages quoting connection options).
    Regex::new(
        r#"(?i)\b((?:ssl)?password|passfile|token|secret|api[_-]?key)(\s*=\s*)([^\s&"',;)]+)"#,
    )
    .unwrap_or_else(|_| unreachable!())
});

/// `text` (an error message, a log line) with every URL in it redacted for `kind` and every
/// `password=…`, `sslpassword=…`, `passfile=…`, `token=…`, `secret=…` or `api_key=…` value
/// outside URLs replaced by `***`. Trailing punctuation after a URL (`.`, `,`, `;`, `:`, `)`)
/// stays as it was.
pub fn in_text(text: &str, kind: UrlKind) -> String {
    let urls = URL_IN_TEXT.replace_all(text, |caps: &regex::Captures<'_>| {
        let found = &caps[0];
        let body = found.trim_end_matches(['.', ',', ';', ':', ')', ']', '}']);
        format!("{}{}", redact_url(body, kind), &found[body.len()..])
    });
    // The assignments outside URLs; a URL already shows `***` there.
    SECRET_ASSIGNMENT
        .replace_all(&urls, |caps: &regex::Captures<'_>| {
            format!("{}{}{HIDDEN}", &caps[1], &caps[2])
        })
        .into_owned()
}

/// Whether a header called `name` carries a credential: `authorization`,
/// `proxy-authorization`, `cookie`, `set-cookie`, and any name containing `token`, `key`,
/// `secret`, `password` or `signature` (`x-api-key`, `x-auth-token`, …). Case does not matter.
pub fn is_secret_header(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    matches!(
        lower.as_str(),
        "authorization" | "proxy-authorization" | "cookie" | "set-cookie"
    ) || ["token", "key", "secret", "password", "signature"]
        .iter()
        .any(|word| lower.contains(word))
}

/// The value of header `name` as it may be shown: [`HIDDEN`] for a credential header (see
/// [`is_secret_header`]), the value itself otherwise.
pub fn header_value<'a>(name: &str, value: &'a str) -> Cow<'a, str> {
    if is_secret_header(name) {
        Cow::Borrowed(HIDDEN)
    } else {
        Cow::Borrowed(value)
    }
}

/// The parts of `url` that may be secret and could be echoed in an answer: the user name and
/// password, every path segment and every query value, each of at least 4 characters, raw and
/// percent-decoded. Longest first, so a longer part is cut before a part of it.
pub fn secret_parts(url: &str) -> Vec<String> {
    let Ok(url) = Url::parse(url) else {
        return Vec::new();
    };
    let mut parts: Vec<String> = Vec::new();
    let mut add = |raw: &str| {
        for part in [raw.to_owned(), decode(raw)] {
            if part.chars().count() >= 4 && !parts.contains(&part) {
                parts.push(part);
            }
        }
    };
    add(url.username());
    if let Some(password) = url.password() {
        add(password);
    }
    for segment in url.path().split('/') {
        add(segment);
    }
    if let Some(query) = url.query() {
        for pair in query.split('&') {
            add(pair.split_once('=').map_or(pair, |(_, value)| value));
        }
    }
    parts.sort_by_key(|p| std::cmp::Reverse(p.len()));
    parts
}

/// `text` with every occurrence of each of `parts` replaced by [`HIDDEN`].
pub fn without_parts(text: &str, parts: &[String]) -> String {
    let mut out = text.to_owned();
    for part in parts {
        if !part.is_empty() && out.contains(part.as_str()) {
            out = out.replace(part.as_str(), HIDDEN);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn connection_urls_hide_passwords_and_secret_parameters() {
        let c = |u: &str| redact_url(u, UrlKind::Connection);
        assert_eq!(
            c("postgres://app:s3cret@db:5432/erp?sslmode=require"),
            "postgres://app:***@db:5432/erp?sslmode=require"
        );
        assert_eq!(
            c("postgres://app@127.0.0.1:1/erp?sslpassword=abc&bogus_param=1"),
            "postgres://app@127.0.0.1:1/erp?sslpassword=***&bogus_param=1"
        );
        assert_eq!(
            c("postgres://db/erp?password=x&passfile=/p"),
            "postgres://db/erp?password=***&passfile=***"
        );
        assert_eq!(c("postgres://app@db/erp"), "postgres://app@db/erp");
        assert_eq!(c("sqlite:erp.db"), "sqlite:erp.db");
        assert_eq!(c("sqlite://a.db?mode=rwc"), "sqlite://a.db?mode=rwc");
        assert_eq!(
            c("redis://:s3cret@host/0"),
            "redis://:***@host/0",
            "an empty user name stays empty"
        );
        assert_eq!(c("redis://host:6379/0"), "redis://host:6379/0");
        assert_eq!(
            c("nats://h1:4222,nats://u:hunter2@h2:4222"),
            "nats://h1:4222,nats://u:***@h2:4222"
        );
        assert_eq!(c("nats://tok3n@h:4222"), "nats://***@h:4222");
        assert_eq!(
            c("nats://h1:4222, u:hunter2@h2:4222"),
            "nats://h1:4222, u:***@h2:4222"
        );
        assert_eq!(c("u:hunter2@h:4222"), "u:***@h:4222");
        assert_eq!(c("127.0.0.1:4222"), "127.0.0.1:4222");
        assert_eq!(c("not a url"), "not a url");
        assert_eq!(c("http://host:1883"), "http://host:1883");
        assert_eq!(c("http://u:pw@host:1883?a=1"), "http://u:***@host:1883?a=1");
        assert_eq!(
            c("mqtt://u:pw@host:1883?client_id=a"),
            "mqtt://u:***@host:1883?client_id=a"
        );
    }

    #[test]
    fn endpoints_show_scheme_and_host_only_unless_public() {
        let url = "http://127.0.0.1:8080/hook/T000/PathSecret?token=QuerySecret";
        assert_eq!(
            redact_url(url, UrlKind::Endpoint),
            "http://127.0.0.1:8080/…"
        );
        assert_eq!(
            redact_url(url, UrlKind::PublicEndpoint),
            "http://127.0.0.1:8080/hook/T000/PathSecret?token=***"
        );
        assert_eq!(
            redact_url("https://u:pw@h.example/x?a=1#frag", UrlKind::PublicEndpoint),
            "https://u:***@h.example/x?a=***"
        );
        assert_eq!(
            redact_url("https://h.example", UrlKind::Endpoint),
            "https://h.example/"
        );
        assert_eq!(
            redact_url("ftp://user:pw@files.example/x", UrlKind::Endpoint),
            "ftp://files.example/…"
        );
        assert_eq!(redact_url("http://[::1", UrlKind::Endpoint), "http://…");
    }

    #[test]
    fn urls_inside_messages_are_redacted() {
        let shown = "webhook http://127.0.0.1:8080/… answered 503";
        assert_eq!(
            in_text(shown, UrlKind::Connection),
            shown,
            "redacted stays as it is"
        );
        assert_eq!(
            in_text(
                "connecting to postgres://app:pw@127.0.0.1:1/erp?sslpassword=abc failed.",
                UrlKind::Connection
            ),
            "connecting to postgres://app:***@127.0.0.1:1/erp?sslpassword=*** failed."
        );
        assert_eq!(
            in_text(
                "webhook \"https://h.example/T/Secret\" refused (see https://h.example/a?b=c)",
                UrlKind::Endpoint
            ),
            "webhook \"https://h.example/…\" refused (see https://h.example/…)"
        );
        assert_eq!(
            in_text(
                "bad option password = hunter2, sslpassword=x",
                UrlKind::Connection
            ),
            "bad option password = ***, sslpassword=***"
        );
    }

    #[test]
    fn secrets_in_urls_are_named_without_their_value() {
        let found = |u: &str| secret_in_url(u);
        assert_eq!(
            found("postgres://app:pw@db/erp").as_deref(),
            Some("a password in the user info")
        );
        for name in ["password", "sslpassword", "passfile"] {
            let got = found(&format!("postgres://db/erp?sslmode=require&{name}=hunter2"));
            assert_eq!(got, Some(format!("the parameter {name}")));
        }
        assert_eq!(
            found("https://h/in?token=x").as_deref(),
            Some("the parameter token")
        );
        assert_eq!(
            found("nats://tok@h:4222").as_deref(),
            Some("a token in the user info")
        );
        assert_eq!(
            found("postgres://app@db/erp?sslkey=/k&sslmode=verify-full"),
            None
        );
        assert_eq!(found("sqlite:a@b.db"), None);
        assert_eq!(found("https://h/in/T000"), None);
    }

    #[test]
    fn credential_headers_are_hidden() {
        for name in [
            "Authorization",
            "x-api-key",
            "X-Auth-Token",
            "stripe-key",
            "Cookie",
        ] {
            assert_eq!(header_value(name, "v4lue"), HIDDEN, "{name}");
        }
        assert_eq!(header_value("content-type", "text/plain"), "text/plain");
    }

    #[test]
    fn secret_parts_are_cut_from_answers() {
        let parts =
            secret_parts("https://u:pa%24%24word@h/hook/T000/PathSecret?token=QuerySecret&x=ab");
        let body = "no route for /hook/T000/PathSecret?token=QuerySecret (pa$$word) x=ab";
        let cut = without_parts(body, &parts);
        assert!(
            !cut.contains("PathSecret") && !cut.contains("QuerySecret"),
            "{cut}"
        );
        assert!(!cut.contains("pa$$word") && !cut.contains("hook"), "{cut}");
        assert!(cut.contains("x=ab"), "short values stay: {cut}");
    }

    fn secret() -> impl Strategy<Value = String> {
        "[A-Za-z0-9]{8,16}".prop_map(|s| format!("Sx{s}"))
    }

    proptest! {
        #[test]
        fn no_secret_survives_redaction(
            user in "[a-z]{1,8}",
            password in secret(),
            segment in secret(),
            value in secret(),
            name in "[a-z_]{1,10}",
            host in "[a-z]{1,10}\\.example",
            port in proptest::option::of(1u16..65535),
        ) {
            let port = port.map(|p| format!(":{p}")).unwrap_or_default();
            let url = format!("https://{user}:{password}@{host}{port}/in/{segment}?{name}={value}");
            for kind in [UrlKind::Endpoint, UrlKind::PublicEndpoint] {
                let shown = redact_url(&url, kind);
                prop_assert!(!shown.contains(&password), "{shown}");
                prop_assert!(!shown.contains(&value), "{shown}");
                let message = format!("webhook {url} answered 503: {{\"url\":\"{url}\"}}");
                let text = in_text(&message, kind);
                prop_assert!(!text.contains(&password) && !text.contains(&value), "{text}");
                let json = serde_json::json!({"error": text}).to_string();
                prop_assert!(!json.contains(&password) && !json.contains(&value), "{json}");
            }
            let shown = redact_url(&url, UrlKind::Endpoint);
            prop_assert!(!shown.contains(&segment), "{shown}");
            let body = format!("echo {url} and {segment} {value} {password}");
            let cut = without_parts(&body, &secret_parts(&url));
            prop_assert!(!cut.contains(&segment) && !cut.contains(&value) && !cut.contains(&password), "{cut}");
            let db = format!("postgres://{user}:{password}@{host}{port}/erp?sslpassword={value}&password={segment}");
            let shown = in_text(&format!("connecting to {db} failed"), UrlKind::Connection);
            prop_assert!(!shown.contains(&password) && !shown.contains(&value) && !shown.contains(&segment), "{shown}");
        }
    }
}
