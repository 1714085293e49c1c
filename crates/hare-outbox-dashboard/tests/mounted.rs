//! The dashboard mounted in an application of its own state: nested under a prefix with plain
//! `Router::nest` and at the root, every link of every page followed over real HTTP; the read
//! check and the Host check of a mounted dashboard.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use hare_outbox_core::{Journal, Outbox, OutboxMessage};
use hare_outbox_dashboard::{Dashboard, DashboardOptions};
use hare_outbox_sqlite::SqliteBackend;
use serde_json::json;

use common::{client, sqlite_outbox, standard_journal};

/// The state of the application the dashboard is mounted in.
#[derive(Clone)]
struct AppState {
    greeting: &'static str,
}

async fn hello(State(state): State<AppState>) -> &'static str {
    state.greeting
}

/// An application with a route of its own and the dashboard at `prefix` (`""` = the root),
/// served on 127.0.0.1; returns its origin and the server task.
async fn app(
    outbox: &Outbox<SqliteBackend>,
    options: DashboardOptions,
    prefix: &str,
) -> (String, tokio::task::JoinHandle<()>) {
    let journal = Journal::new(outbox.backend().clone(), outbox.table().clone());
    let dashboard = Dashboard::new(journal, options).unwrap();
    let router: Router<AppState> = Router::new().route("/hello", get(hello));
    let router = if prefix.is_empty() {
        router.merge(dashboard.router())
    } else {
        router.nest(prefix, dashboard.router())
    };
    let router: Router = router.with_state(AppState { greeting: "hello" });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        axum::serve(listener, router).await.unwrap();
    });
    (origin, task)
}

/// The links (`href`, `src`, `data-src`) and the script root (`data-root`) of an HTML page.
fn links(html: &str) -> (Vec<String>, String) {
    let attribute = regex::Regex::new(r#"\s(href|src|data-src|data-root)="([^"]*)""#).unwrap();
    let mut links = Vec::new();
    let mut root = String::new();
    for c in attribute.captures_iter(html) {
        let value = c[2].replace("&amp;", "&").replace("&#x2f;", "/");
        match &c[1] {
            "data-root" => root = value,
            _ if value.starts_with('#') => {}
            _ => links.push(value),
        }
    }
    (links, root)
}

/// Opens each page under `origin` + `base`, checks that every link it holds stays under `base`
/// and answers (not 404), and that the script's root is `base`. Returns how many links were
/// followed.
async fn crawl(origin: &str, base: &str) -> usize {
    let http = client();
    let home = match base.trim_end_matches('/') {
        "" => "/".to_owned(),
        home => home.to_owned(),
    };
    let pages =
        ["keys", "topics", "relays", "events/1", "events/2"].map(|page| format!("{base}{page}"));
    let mut followed = BTreeSet::new();
    for page in std::iter::once(home).chain(pages) {
        let url = url::Url::parse(&format!("{origin}{page}")).unwrap();
        let response = http.get(url.clone()).send().await.unwrap();
        assert_eq!(response.status(), 200, "{url}");
        let html = response.text().await.unwrap();
        let (links, root) = links(&html);
        assert_eq!(root, base, "data-root of {url}");
        assert!(links.len() > 8, "{url} has only {links:?}");
        for link in links {
            let target = url.join(&link).unwrap();
            assert!(
                target.path().starts_with(base) || target.path() == base.trim_end_matches('/'),
                "{url} links to {link:?}, outside {base}"
            );
            followed.insert(target.to_string());
        }
    }
    for target in &followed {
        let response = http.get(target).send().await.unwrap();
        assert!(
            response.status().is_success(),
            "{target} answered {}",
            response.status()
        );
    }
    followed.len()
}

async fn journal_with_a_key(outbox: &Outbox<SqliteBackend>) {
    standard_journal(outbox).await;
    // Two events of one key, so the event pages link to their neighbours.
    let mut tx = outbox.begin().await.unwrap();
    for n in 1..=2 {
        tx.enqueue(OutboxMessage::new("orders.paid", json!({"n": n})).ordering_key("order:1"))
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
}

fn options() -> DashboardOptions {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    DashboardOptions::new().with_metrics(Some(recorder.handle()))
}

#[tokio::test]
async fn nested_under_a_prefix_every_link_stays_under_it() {
    let (_db, outbox) = sqlite_outbox().await;
    journal_with_a_key(&outbox).await;
    let (origin, task) = app(&outbox, options(), "/ops/outbox").await;
    let followed = crawl(&origin, "/ops/outbox/").await;
    assert!(followed > 20, "only {followed} links");
    // The journal is where `nest` puts it, and every page links back to it there.
    let page = client()
        .get(format!("{origin}/ops/outbox"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let (links, root) = links(&page.text().await.unwrap());
    assert_eq!(root, "/ops/outbox/");
    assert!(links.iter().any(|l| l == "/ops/outbox/keys"), "{links:?}");
    assert!(links.iter().any(|l| l == "/ops/outbox"), "{links:?}");
    // The application's own route shares the server.
    let hello = client()
        .get(format!("{origin}/hello"))
        .send()
        .await
        .unwrap();
    assert_eq!(hello.text().await.unwrap(), "hello");
    task.abort();
}

#[tokio::test]
async fn at_the_root_every_link_stays_at_the_root() {
    let (_db, outbox) = sqlite_outbox().await;
    journal_with_a_key(&outbox).await;
    let (origin, task) = app(&outbox, options(), "").await;
    let followed = crawl(&origin, "/").await;
    assert!(followed > 20, "only {followed} links");
    task.abort();
}

#[tokio::test]
async fn a_configured_base_path_wins_over_the_request() {
    let (_db, outbox) = sqlite_outbox().await;
    journal_with_a_key(&outbox).await;
    // A proxy serves `/outbox/…` and strips `/outbox` before the application sees it.
    let (origin, task) = app(&outbox, options().with_base_path("/outbox").unwrap(), "").await;
    let page = client().get(format!("{origin}/keys")).send().await.unwrap();
    let (links, root) = links(&page.text().await.unwrap());
    assert_eq!(root, "/outbox/");
    assert!(links.iter().any(|l| l == "/outbox/topics"), "{links:?}");
    task.abort();
}

#[tokio::test]
async fn a_mounted_dashboard_asks_the_read_check_and_keeps_the_host_check() {
    let (_db, outbox) = sqlite_outbox().await;
    journal_with_a_key(&outbox).await;
    let guarded = options().with_read_auth(|request| {
        request
            .headers
            .get("x-operator")
            .is_some_and(|v| v == "on-call")
    });
    let (origin, task) = app(&outbox, guarded, "/outbox").await;
    let http = client();
    for path in ["/outbox", "/outbox/api/events", "/outbox/healthz"] {
        let refused = http.get(format!("{origin}{path}")).send().await.unwrap();
        assert_eq!(refused.status(), 401, "{path}");
        let allowed = http
            .get(format!("{origin}{path}"))
            .header("x-operator", "on-call")
            .send()
            .await
            .unwrap();
        assert_eq!(allowed.status(), 200, "{path}");
    }
    // The application's own routes are not the dashboard's to guard.
    let hello = http.get(format!("{origin}/hello")).send().await.unwrap();
    assert_eq!(hello.status(), 200);
    // A page re-pointing its own name at this server (DNS rebinding) is refused when mounted,
    // unless remote access is allowed.
    let rebound = http
        .get(format!("{origin}/outbox/api/events"))
        .header("host", "evil.example")
        .header("x-operator", "on-call")
        .send()
        .await
        .unwrap();
    assert_eq!(rebound.status(), 421);
    let hello = http
        .get(format!("{origin}/hello"))
        .header("host", "evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(
        hello.status(),
        200,
        "the host check is the dashboard's only"
    );
    task.abort();

    let (origin, task) = app(&outbox, options().with_allow_remote(true), "/outbox").await;
    let remote = client()
        .get(format!("{origin}/outbox/api/events"))
        .header("host", "outbox.example")
        .send()
        .await
        .unwrap();
    assert_eq!(remote.status(), 200);
    task.abort();
}
