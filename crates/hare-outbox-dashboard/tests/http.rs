//! The dashboard over HTTP, served on 127.0.0.1:0 and read with reqwest: the journal's filters
//! and pages, the JSON API and its OpenAPI document, the token and CSRF checks, HTML escaping,
//! `/healthz` and `/metrics`. The listing scenarios run on SQLite and on PostgreSQL.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{
    TOKEN, client, enqueue, get_json, pg_outbox, relay_once, serve, sqlite_outbox, standard_journal,
};
use hare_outbox_core::{Journal, JournalBackend, Outbox};
use hare_outbox_dashboard::{Dashboard, DashboardOptions, Error, HealthThresholds};
use serde_json::{Value, json};

fn topics(body: &Value) -> Vec<String> {
    body["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["topic"].as_str().unwrap().to_owned())
        .collect()
}

fn sequences(body: &Value) -> Vec<i64> {
    body["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["sequence"].as_i64().unwrap())
        .collect()
}

/// Filters, pagination, one event, backlog and timeline over the standard journal.
async fn listing<B: JournalBackend>(outbox: Outbox<B>) {
    standard_journal(&outbox).await;
    let served = serve(&outbox, DashboardOptions::new()).await;

    // Everything, newest first, with status, object and author.
    let (status, all) = get_json(&served.url("/api/events")).await;
    assert_eq!(status, 200, "{all}");
    let seqs = sequences(&all);
    assert_eq!(seqs.len(), 7);
    assert!(seqs.windows(2).all(|w| w[0] > w[1]), "{seqs:?}");
    assert!(all["next"].is_null());
    let newest_doc = all["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["topic"] == "doc.updated")
        .unwrap();
    assert_eq!(newest_doc["object"], "sales_orders #3");
    assert_eq!(newest_doc["author"], "ann");
    assert_eq!(newest_doc["status"], "published");
    assert!(newest_doc["published_at"].is_string());
    let dead = &all["events"][0];
    assert_eq!(dead["topic"], "fail.webhook");
    assert_eq!(dead["status"], "dead");
    assert_eq!(dead["attempts"], 1);
    assert_eq!(dead["last_error"], "receiver refused fail.webhook");

    // Filters narrow.
    let (_, body) = get_json(&served.url("/api/events?topic=doc.*")).await;
    assert_eq!(topics(&body), vec!["doc.updated"; 3]);
    let (_, body) = get_json(&served.url("/api/events?topic=orders.created,fail.webhook")).await;
    assert_eq!(sequences(&body).len(), 4);
    let (_, body) = get_json(&served.url("/api/events?status=dead")).await;
    assert_eq!(topics(&body), vec!["fail.webhook"; 2]);
    let (_, body) = get_json(&served.url("/api/events?status=dead&status=published")).await;
    assert_eq!(sequences(&body).len(), 7);
    let (_, body) = get_json(&served.url("/api/events?author=bob")).await;
    assert_eq!(topics(&body), vec!["orders.created"; 2]);
    let (_, body) = get_json(&served.url("/api/events?object=sales_orders%20%232")).await;
    assert_eq!(body["events"].as_array().unwrap().len(), 1, "{body}");
    assert_eq!(body["events"][0]["object"], "sales_orders #2");
    let (_, body) = get_json(&served.url("/api/events?object=sales_orders")).await;
    assert_eq!(sequences(&body).len(), 3);
    let (_, body) = get_json(&served.url("/api/events?created_from=2000-01-01")).await;
    assert_eq!(sequences(&body).len(), 7);
    let (_, body) = get_json(&served.url("/api/events?created_until=2000-01-01T00:00")).await;
    assert_eq!(sequences(&body).len(), 0);

    // Keyset pages of 3 follow `next` to the end without gaps or overlaps.
    let mut url = served.url("/api/events?limit=3");
    let mut seen = Vec::new();
    let mut pages = 0;
    loop {
        let (status, page) = get_json(&url).await;
        assert_eq!(status, 200, "{page}");
        seen.extend(sequences(&page));
        pages += 1;
        match page["next"]["href"].as_str() {
            Some(href) => {
                assert_eq!(page["next"]["cursor"], "before");
                url = format!("{}/{href}", served.base);
            }
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(seen, seqs);
    // A page keeps its filters.
    let (_, page) = get_json(&served.url("/api/events?topic=doc.*&limit=2")).await;
    let href = page["next"]["href"].as_str().unwrap();
    assert!(href.contains("topic=doc.*"), "{href}");
    let (_, page) = get_json(&format!("{}/{href}", served.base)).await;
    assert_eq!(topics(&page), vec!["doc.updated"]);

    // The tail: what arrived after a sequence, oldest first.
    let third_oldest = seqs[seqs.len() - 3];
    let (_, tail) = get_json(&served.url(&format!("/api/events?after={third_oldest}"))).await;
    let tail_seqs = sequences(&tail);
    assert_eq!(tail_seqs.len(), 4);
    assert!(tail_seqs.windows(2).all(|w| w[0] < w[1]));

    // One event; a bad id and an unknown one.
    let id = newest_doc["id"].as_str().unwrap();
    let (status, one) = get_json(&served.url(&format!("/api/events/{id}"))).await;
    assert_eq!(status, 200);
    assert_eq!(one["object"], "sales_orders #3");
    let (status, body) = get_json(&served.url("/api/events/not-a-uuid")).await;
    assert_eq!(status, 400);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not-a-uuid")
    );
    let (status, _) = get_json(&served.url(&format!("/api/events/{}", uuid::Uuid::now_v7()))).await;
    assert_eq!(status, 404);

    // Backlog and timeline.
    let (status, backlog) = get_json(&served.url("/api/backlog")).await;
    assert_eq!(status, 200);
    assert_eq!(backlog["pending"], 0);
    assert_eq!(backlog["dead_lettered"], 2);
    let (status, timeline) =
        get_json(&served.url("/api/timeline?window_seconds=600&buckets=10")).await;
    assert_eq!(status, 200, "{timeline}");
    let buckets = timeline["buckets"].as_array().unwrap();
    assert_eq!(buckets.len(), 10);
    let created: i64 = buckets.iter().map(|b| b["created"].as_i64().unwrap()).sum();
    let published: i64 = buckets
        .iter()
        .map(|b| b["published"].as_i64().unwrap())
        .sum();
    assert_eq!((created, published), (7, 5));

    // The charts, as one SVG image.
    let response = client()
        .get(served.url("/charts.svg?window_seconds=600&buckets=10"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.headers()["content-type"], "image/svg+xml");
    let svg = response.text().await.unwrap();
    assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"), "{svg}");
    for title in ["Backlog", "Delivery rate", "Delivery latency"] {
        assert!(svg.contains(title), "{title} missing: {svg}");
    }
    assert!(svg.contains("<polyline"), "{svg}");
    let (status, body) = get_json(&served.url("/charts.svg?buckets=0")).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["field"], "buckets");

    // The page shows the same rows and an "older" link that keeps the filters.
    let html = client()
        .get(served.url("/?topic=doc.*&limit=2"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(html.matches("<tr data-sequence=").count(), 2, "{html}");
    assert!(html.contains("sales_orders #3"));
    assert!(
        html.contains(r#"href="?topic=doc.*&#38;limit=2&#38;before="#),
        "{html}"
    );
    assert!(
        html.contains(r#"<span class="from">&#34;confirmed&#34;</span> → <span class="to">&#34;shipped&#34;</span>"#),
        "{html}"
    );
    served.stop().await;
}

/// Bad filter values answer 400 naming the value and what is allowed, as JSON and as a page.
async fn refusals<B: JournalBackend>(outbox: Outbox<B>) {
    let served = serve(&outbox, DashboardOptions::new()).await;
    for (query, field, needle) in [
        ("status=lost", "status", "\"lost\""),
        ("topic=a*b", "topic", "a*b"),
        ("limit=0", "limit", "1 to 1000"),
        ("limit=ten", "limit", "\"ten\""),
        ("before=-4", "before", "\"-4\""),
        ("created_from=yesterday", "created_from", "\"yesterday\""),
        (
            "created_from=2026-02-01&created_until=2026-01-01",
            "created",
            "not before",
        ),
        ("object=%23", "object", "no model"),
        ("colour=red", "colour", "not known"),
    ] {
        let (status, body) = get_json(&served.url(&format!("/api/events?{query}"))).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert_eq!(body["error"]["field"], field, "{query}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{query}: {message}");
        let page = client()
            .get(served.url(&format!("/?{query}")))
            .send()
            .await
            .unwrap();
        assert_eq!(page.status().as_u16(), 400, "{query}");
        let html = page.text().await.unwrap();
        assert!(html.contains(r#"id="error""#), "{query}: {html}");
    }
    let (status, _) = get_json(&served.url("/api/timeline?window_seconds=0")).await;
    assert_eq!(status, 400);
    let (status, body) = get_json(&served.url("/api/timeline?buckets=5000")).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["field"], "buckets");
    served.stop().await;
}

/// A payload and an author holding markup show as text; the security headers are set.
async fn escaping<B: JournalBackend>(outbox: Outbox<B>) {
    enqueue(
        &outbox,
        "evil.payload",
        json!({"note": "<script>alert('x')</script>", "model": "<b>m</b>", "pk": 1}),
        Some("<img src=x onerror=alert(1)>"),
    )
    .await;
    let served = serve(&outbox, DashboardOptions::new()).await;
    let response = client().get(served.url("/")).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let headers = response.headers().clone();
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("script-src 'self'"), "{csp}");
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(headers["x-content-type-options"], "nosniff");
    let html = response.text().await.unwrap();
    assert!(!html.contains("<script>alert"), "{html}");
    assert!(!html.contains("<img src=x"), "{html}");
    assert!(!html.contains("<b>m</b>"), "{html}");
    assert!(html.contains("&#60;script&#62;"), "{html}");
    assert!(
        html.contains("&#60;img src=x onerror=alert(1)&#62;"),
        "{html}"
    );
    // The only script is the bundled file.
    assert_eq!(html.matches("<script").count(), 1);
    let js = client()
        .get(served.url("/assets/dashboard.js"))
        .send()
        .await
        .unwrap();
    assert!(
        js.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/javascript")
    );
    served.stop().await;
}

#[tokio::test]
async fn sqlite_listing_filters_and_pages() {
    let (_db, outbox) = sqlite_outbox().await;
    listing(outbox).await;
}

#[tokio::test]
async fn postgres_listing_filters_and_pages() {
    let (schema, outbox) = pg_outbox().await;
    listing(outbox).await;
    schema.drop_schema().await;
}

#[tokio::test]
async fn sqlite_bad_filters_are_refused_naming_the_value() {
    let (_db, outbox) = sqlite_outbox().await;
    refusals(outbox).await;
}

#[tokio::test]
async fn postgres_bad_filters_are_refused_naming_the_value() {
    let (schema, outbox) = pg_outbox().await;
    refusals(outbox).await;
    schema.drop_schema().await;
}

#[tokio::test]
async fn sqlite_payloads_are_html_escaped() {
    let (_db, outbox) = sqlite_outbox().await;
    escaping(outbox).await;
}

#[tokio::test]
async fn postgres_payloads_are_html_escaped() {
    let (schema, outbox) = pg_outbox().await;
    escaping(outbox).await;
    schema.drop_schema().await;
}

#[tokio::test]
async fn openapi_document_lists_the_paths() {
    let (_db, outbox) = sqlite_outbox().await;
    let served = serve(&outbox, DashboardOptions::new()).await;
    let (status, doc) = get_json(&served.url("/api/openapi.json")).await;
    assert_eq!(status, 200);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."), "{doc}");
    let paths: BTreeSet<&str> = doc["paths"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    for path in [
        "/api/events",
        "/api/events/{id}",
        "/api/timeline",
        "/api/backlog",
        "/api/dead-letters/retry",
        "/api/dead-letters/cleanup",
        "/healthz",
        "/metrics",
    ] {
        assert!(paths.contains(path), "{path} missing from {paths:?}");
    }
    assert!(doc["paths"]["/api/dead-letters/retry"]["post"].is_object());
    assert!(doc["components"]["schemas"]["EventView"].is_object());
    assert!(doc["components"]["securitySchemes"]["token"].is_object());
    // Unknown paths answer 404 as JSON.
    let (status, body) = get_json(&served.url("/nope")).await;
    assert_eq!(status, 404);
    assert!(body["error"]["message"].as_str().unwrap().contains("/nope"));
    served.stop().await;
}

#[tokio::test]
async fn mutations_need_a_configured_token() {
    let (_db, outbox) = sqlite_outbox().await;
    enqueue(&outbox, "fail.x", json!({}), None).await;
    relay_once(&outbox).await;
    let served = serve(&outbox, DashboardOptions::new()).await;
    let response = client()
        .post(served.url("/api/dead-letters/retry"))
        .bearer_auth(TOKEN)
        .json(&json!({"topics": ["*"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 403);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["field"], "token");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no dashboard token is configured"),
        "{body}"
    );
    // The page says so and disables its buttons.
    let html = client()
        .get(served.url("/"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(html.contains(r#"id="token-off""#));
    let (_, backlog) = get_json(&served.url("/api/backlog")).await;
    assert_eq!(backlog["dead_lettered"], 1);
    served.stop().await;
}

#[tokio::test]
async fn mutations_check_token_origin_and_method() {
    let (_db, outbox) = sqlite_outbox().await;
    enqueue(&outbox, "fail.a", json!({"n": 1}), None).await;
    enqueue(&outbox, "fail.b", json!({"n": 2}), None).await;
    enqueue(&outbox, "fail.b", json!({"n": 3}), None).await;
    relay_once(&outbox).await;
    let options = DashboardOptions::new()
        .with_token(Some(TOKEN.to_owned()))
        .unwrap();
    let served = serve(&outbox, options).await;
    let retry = served.url("/api/dead-letters/retry");
    let http = client();

    // No token, a wrong one, a cross-site request, another origin: refused, nothing changed.
    let r = http
        .post(&retry)
        .json(&json!({"topics": ["*"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    assert_eq!(r.headers()["www-authenticate"], "Bearer");
    let r = http
        .post(&retry)
        .bearer_auth("test-token-wrong")
        .json(&json!({"topics": ["*"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let r = http
        .post(&retry)
        .bearer_auth(TOKEN)
        .header("Origin", "http://evil.example")
        .json(&json!({"topics": ["*"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["field"], "origin");
    let r = http
        .post(&retry)
        .bearer_auth(TOKEN)
        .header("Sec-Fetch-Site", "cross-site")
        .json(&json!({"topics": ["*"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    let r = http.get(&retry).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 405);
    // Without a token too: the method is wrong whoever asks.
    let r = http.get(&retry).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 405);
    let r = http.delete(&retry).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 405);
    let (_, backlog) = get_json(&served.url("/api/backlog")).await;
    assert_eq!(backlog["dead_lettered"], 3);

    // Bad bodies are refused naming what is wrong.
    for (body, needle) in [
        ("{}", "name the dead letters"),
        ("not json", "not a JSON object"),
        (r#"{"ids": ["x"]}"#, "not a JSON object"),
        (r#"{"topics": ["a*b"]}"#, "a*b"),
    ] {
        let r = http
            .post(&retry)
            .bearer_auth(TOKEN)
            .header("Content-Type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 400, "{body}");
        let answer: Value = r.json().await.unwrap();
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains(needle),
            "{body}: {answer}"
        );
    }

    // The right token from the same origin: one by id, then by topic.
    let (_, dead) = get_json(&served.url("/api/events?status=dead&topic=fail.a")).await;
    let id = dead["events"][0]["id"].as_str().unwrap().to_owned();
    let r = http
        .post(&retry)
        .bearer_auth(TOKEN)
        .header("Origin", served.base.clone())
        .json(&json!({"ids": [id]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["retried"], 1);
    let (_, event) = get_json(&served.url(&format!("/api/events/{id}"))).await;
    assert_eq!(event["status"], "pending");
    assert_eq!(event["attempts"], 0);

    // Clean-up of dead letters: a negative age is refused; 0 s deletes the two left.
    let cleanup = served.url("/api/dead-letters/cleanup");
    let r = http
        .post(&cleanup)
        .bearer_auth(TOKEN)
        .json(&json!({"older_than_seconds": -1}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let r = http
        .post(&cleanup)
        .bearer_auth(TOKEN)
        .json(&json!({"older_than_seconds": 0, "state": "gone"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let r = http
        .post(&cleanup)
        .bearer_auth(TOKEN)
        .json(&json!({"older_than_seconds": 3600, "topics": ["fail.*"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.json::<Value>().await.unwrap()["deleted"], 0);
    let r = http
        .post(&cleanup)
        .bearer_auth(TOKEN)
        .json(&json!({"older_than_seconds": 0, "topics": ["fail.b"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["deleted"], 2);
    let (_, all) = get_json(&served.url("/api/events")).await;
    assert_eq!(topics(&all), vec!["fail.a"]);
    served.stop().await;
}

#[tokio::test]
async fn healthz_turns_503_past_a_threshold() {
    let (_db, outbox) = sqlite_outbox().await;
    enqueue(&outbox, "a", json!({}), None).await;
    enqueue(&outbox, "a", json!({}), None).await;
    let options =
        DashboardOptions::new().with_thresholds(HealthThresholds::new().with_max_pending(Some(2)));
    let served = serve(&outbox, options).await;
    let (status, body) = get_json(&served.url("/healthz")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "ok");
    assert_eq!(body["backlog"]["pending"], 2);
    enqueue(&outbox, "a", json!({}), None).await;
    let (status, body) = get_json(&served.url("/healthz")).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["status"], "failing");
    assert!(
        body["failing"][0]
            .as_str()
            .unwrap()
            .contains("max_pending 2"),
        "{body}"
    );
    served.stop().await;
}

#[tokio::test]
async fn healthz_fails_when_the_database_does_not_answer() {
    let (db, outbox) = sqlite_outbox().await;
    let served = serve(&outbox, DashboardOptions::new()).await;
    let (status, _) = get_json(&served.url("/healthz")).await;
    assert_eq!(status, 200);
    db.pool.close().await;
    let (status, body) = get_json(&served.url("/healthz")).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["status"], "error");
    assert!(body["failing"][0].as_str().unwrap().starts_with("database"));
    served.stop().await;
}

#[tokio::test]
async fn healthz_checks_age_and_dead_letters() {
    let (_db, outbox) = sqlite_outbox().await;
    enqueue(&outbox, "fail.z", json!({}), None).await;
    relay_once(&outbox).await;
    let options = DashboardOptions::new().with_thresholds(
        HealthThresholds::new()
            .with_max_dead_lettered(Some(0))
            .with_max_oldest_pending_age(Some(Duration::from_secs(3600))),
    );
    let served = serve(&outbox, options).await;
    let (status, body) = get_json(&served.url("/healthz")).await;
    assert_eq!(status, 503);
    let failing = body["failing"].as_array().unwrap();
    assert_eq!(failing.len(), 1, "{body}");
    assert!(failing[0].as_str().unwrap().contains("max_dead_lettered 0"));
    served.stop().await;
}

#[tokio::test]
async fn metrics_render_the_configured_exporter() {
    let (_db, outbox) = sqlite_outbox().await;
    let served = serve(&outbox, DashboardOptions::new()).await;
    let (status, body) = get_json(&served.url("/metrics")).await;
    assert_eq!(status, 404);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("with_metrics")
    );
    served.stop().await;

    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        metrics::counter!("hare_outbox_delivered_total", "topic" => "doc.updated").increment(3);
    });
    let served = serve(&outbox, DashboardOptions::new().with_metrics(Some(handle))).await;
    let response = client().get(served.url("/metrics")).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    let text = response.text().await.unwrap();
    assert!(
        text.contains(r#"hare_outbox_delivered_total{topic="doc.updated"} 3"#),
        "{text}"
    );
    served.stop().await;
}

#[tokio::test]
async fn binding_refuses_a_remote_address_unless_allowed() {
    let (_db, outbox) = sqlite_outbox().await;
    let journal = Journal::new(outbox.backend().clone(), outbox.table().clone());
    let dashboard = Dashboard::new(journal.clone(), DashboardOptions::new()).unwrap();
    let err = dashboard
        .bind("0.0.0.0:0".parse().unwrap())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Remote { .. }), "{err}");
    assert!(err.to_string().contains("0.0.0.0:0"), "{err}");
    // A listener bound by the caller is checked too.
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let err = dashboard.serve(listener, async {}).await.unwrap_err();
    assert!(matches!(err, Error::Remote { .. }), "{err}");
    let dashboard =
        Dashboard::new(journal, DashboardOptions::new().with_allow_remote(true)).unwrap();
    let listener = dashboard.bind("0.0.0.0:0".parse().unwrap()).await.unwrap();
    assert!(listener.local_addr().unwrap().ip().is_unspecified());
}

#[tokio::test]
async fn a_loopback_dashboard_refuses_other_host_names() {
    let (_db, outbox) = sqlite_outbox().await;
    standard_journal(&outbox).await;
    let served = serve(&outbox, DashboardOptions::new()).await;
    let port = served.addr.port();
    // A page re-pointing its own name at 127.0.0.1 (DNS rebinding) sends its name as Host.
    for path in ["/", "/api/events", "/healthz"] {
        let response = client()
            .get(served.url(path))
            .header("host", format!("attacker.example:{port}"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 421, "{path}");
        assert!(
            response.headers().contains_key("content-security-policy"),
            "{path}"
        );
        let body = response.text().await.unwrap();
        assert!(body.contains("not a loopback name"), "{path}: {body}");
    }
    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}")] {
        let response = client()
            .get(served.url("/api/events"))
            .header("host", host.as_str())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200, "{host}");
    }
    served.stop().await;
    // allow_remote serves any name (behind a proxy that checks it).
    let served = serve(&outbox, DashboardOptions::new().with_allow_remote(true)).await;
    let response = client()
        .get(served.url("/api/events"))
        .header("host", "dashboard.example.com")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    served.stop().await;
}

/// A PostgreSQL behind a cut line: the pool would wait 30 s for a connection, `/healthz` answers
/// 503 within its 3 s, and 200 again once the line is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_reports_an_unreachable_postgres_within_seconds() {
    use std::str::FromStr;
    let (schema, direct) = pg_outbox().await;
    let server =
        sqlx::postgres::PgConnectOptions::from_str(&hare_outbox_testkit::pg::url()).unwrap();
    let proxy =
        hare_outbox_testkit::net::DelayProxy::start(server.get_port(), Duration::ZERO).await;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(30))
        .connect_with(server.host("127.0.0.1").port(proxy.port))
        .await
        .unwrap();
    let table =
        hare_outbox_core::OutboxTable::parse(&format!("{}.hare_outbox", schema.name)).unwrap();
    let outbox = Outbox::new(hare_outbox_postgres::PgBackend::new(pool), table);
    let served = serve(&outbox, DashboardOptions::new()).await;
    let (status, _) = get_json(&served.url("/healthz")).await;
    assert_eq!(status, 200);
    proxy.sever();
    let asked = std::time::Instant::now();
    let (status, body) = get_json(&served.url("/healthz")).await;
    assert_eq!(status, 503, "{body}");
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "{:?}",
        asked.elapsed()
    );
    assert!(
        body["failing"][0].as_str().unwrap().starts_with("database"),
        "{body}"
    );
    proxy.restore();
    hare_outbox_testkit::wait_for("healthy again", Duration::from_secs(20), || async {
        (get_json(&served.url("/healthz")).await.0 == 200).then_some(())
    })
    .await;
    served.stop().await;
    drop(direct);
    schema.drop_schema().await;
}
