//! The operator's views over HTTP (reqwest on 127.0.0.1:0): held keys, topics and relays as JSON
//! with keyset pages, the key-head action behind the token (409 when the head moved on), one
//! event by sequence and its neighbours, the object column by table or label, the pages'
//! language by `Accept-Language`, `lang` and the cookie, and the OpenAPI document listing it all.
//! The listing scenarios run on SQLite and on PostgreSQL.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{TOKEN, client, enqueue, get_json, pg_outbox, relay_once, serve, sqlite_outbox};
use hare_outbox_core::journal::ObjectName;
use hare_outbox_core::{JournalBackend, Outbox, OutboxMessage};
use hare_outbox_dashboard::DashboardOptions;
use serde_json::{Value, json};

/// Keys k1..k4: k1 held by a dead head (fail.*), k2 and k4 by dead heads too, k3 delivered.
async fn held_journal<B: JournalBackend>(outbox: &Outbox<B>) {
    for (topic, key) in [
        ("fail.webhook", "k1"),
        ("orders.paid", "k1"),
        ("fail.webhook", "k2"),
        ("orders.created", "k3"),
        ("fail.webhook", "k4"),
    ] {
        let message = OutboxMessage::new(
            topic,
            json!({"model": "order", "table": "sales_orders", "pk": 22}),
        )
        .ordering_key(key);
        let mut tx = outbox.begin().await.unwrap();
        tx.enqueue(message).await.unwrap();
        tx.commit().await.unwrap();
    }
    relay_once(outbox).await;
}

async fn views_over_http<B: JournalBackend>(outbox: Outbox<B>) {
    held_journal(&outbox).await;
    let served = serve(
        &outbox,
        DashboardOptions::new()
            .with_token(Some(TOKEN.to_owned()))
            .unwrap(),
    )
    .await;

    // Held keys, one per page, the cursor walking on.
    let (status, page) = get_json(&served.url("/api/keys/held?limit=2")).await;
    assert_eq!(status, 200, "{page}");
    let keys: Vec<&str> = page["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["ordering_key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["k1", "k2"]);
    assert_eq!(page["keys"][0]["head"]["status"], "dead");
    assert_eq!(page["keys"][0]["head"]["object"], "sales_orders #22");
    assert_eq!(page["keys"][0]["waiting"], 2);
    assert_eq!(page["keys"][0]["waiting_capped"], false);
    assert_eq!(page["next"]["after"], "k2");
    let (_, rest) =
        get_json(&served.url(&format!("/{}", page["next"]["href"].as_str().unwrap()))).await;
    assert_eq!(rest["keys"][0]["ordering_key"], "k4");
    assert_eq!(rest["next"], Value::Null);
    let (status, bad) = get_json(&served.url("/api/keys/held?limit=0")).await;
    assert_eq!(status, 400);
    assert_eq!(bad["error"]["field"], "limit");
    let (status, bad) = get_json(&served.url("/api/keys/held?colour=red")).await;
    assert_eq!(status, 400);
    assert!(
        bad["error"]["message"]
            .as_str()
            .unwrap()
            .contains("after, limit")
    );

    // The head action: token needed; a head that is not one answers 409 and changes nothing.
    let head = page["keys"][0]["head"]["sequence"].as_i64().unwrap();
    let act = |body: Value, token: Option<&'static str>| {
        let url = served.url("/api/keys/head");
        async move {
            let mut request = client().post(url).json(&body);
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap())
        }
    };
    let release = json!({"sequence": head, "ordering_key": "k1", "action": "release"});
    assert_eq!(act(release.clone(), None).await.0, 401);
    let (status, body) = act(
        json!({"sequence": head + 1, "ordering_key": "k1", "action": "retry"}),
        Some(TOKEN),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("k1"));
    let (status, body) = act(
        json!({"sequence": head, "ordering_key": "k1", "action": "skip"}),
        Some(TOKEN),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "body");
    let (status, body) = act(release.clone(), Some(TOKEN)).await;
    assert_eq!((status, body), (200, json!({"changed": true})));
    assert_eq!(act(release, Some(TOKEN)).await.0, 409, "released already");
    let (_, event) = get_json(&served.url(&format!("/api/events/{head}"))).await;
    assert_eq!(event["ordering_key"], Value::Null);
    assert_eq!(event["headers"]["released_ordering_key"], "k1");

    // One event by sequence, and the neighbours of its key.
    let (_, k1_second) = get_json(&served.url(&format!("/api/events/{}", head + 1))).await;
    assert_eq!(k1_second["ordering_key"], "k1");
    let (_, around) = get_json(&served.url(&format!(
        "/api/events/{}/neighbours",
        k1_second["id"].as_str().unwrap()
    )))
    .await;
    assert_eq!(
        around,
        json!({"ordering_key": "k1", "previous": null, "next": null})
    );
    let (status, _) = get_json(&served.url("/api/events/0")).await;
    assert_eq!(status, 400);
    let (status, body) = get_json(&served.url("/api/events/999999")).await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = get_json(&served.url("/api/events/abc")).await;
    assert_eq!(status, 400);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("\"abc\"")
    );

    // Topics: counts per state, pages by name.
    let (status, topics) = get_json(&served.url("/api/topics?limit=2&window_seconds=600")).await;
    assert_eq!(status, 200, "{topics}");
    assert_eq!(topics["window_seconds"], 600);
    assert_eq!(topics["topics"][0]["topic"], "fail.webhook");
    assert_eq!(topics["topics"][0]["dead"], 3);
    assert_eq!(topics["topics"][1]["topic"], "orders.created");
    assert_eq!(topics["topics"][1]["published"], 1);
    assert_eq!(topics["next"]["after"], "orders.created");
    let (_, more) =
        get_json(&served.url(&format!("/{}", topics["next"]["href"].as_str().unwrap()))).await;
    assert_eq!(more["topics"][0]["topic"], "orders.paid");
    assert_eq!(more["topics"][0]["pending"], 1);
    let (status, _) = get_json(&served.url("/api/topics?window_seconds=0")).await;
    assert_eq!(status, 400);

    // Relays: none holds a lease after the relay finished.
    let (status, relays) = get_json(&served.url("/api/relays")).await;
    assert_eq!((status, relays), (200, json!({"relays": [], "next": null})));
    served.stop().await;
}

#[tokio::test]
async fn sqlite_views_over_http() {
    let (_db, outbox) = sqlite_outbox().await;
    views_over_http(outbox).await;
}

#[tokio::test]
async fn postgres_views_over_http() {
    let (schema, outbox) = pg_outbox().await;
    views_over_http(outbox).await;
    schema.drop_schema().await;
}

#[tokio::test]
async fn the_object_column_shows_the_label_when_configured() {
    let (_db, outbox) = sqlite_outbox().await;
    enqueue(
        &outbox,
        "doc.updated",
        json!({"model": "prod_order", "table": "plan_prod_orders", "pk": 18}),
        None,
    )
    .await;
    let served = serve(&outbox, DashboardOptions::new()).await;
    let (_, page) = get_json(&served.url("/api/events?object=plan_prod_orders%20%2318")).await;
    assert_eq!(page["events"][0]["object"], "plan_prod_orders #18");
    let html = client()
        .get(served.url("/"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(html.contains(">plan_prod_orders #18</td>"), "{html}");
    served.stop().await;
    let labels = serve(
        &outbox,
        DashboardOptions::new().with_object_name(ObjectName::Label),
    )
    .await;
    let (_, page) = get_json(&labels.url("/api/events?object=prod_order%20%2318")).await;
    assert_eq!(page["events"][0]["object"], "prod_order #18");
    let (_, none) = get_json(&labels.url("/api/events?object=plan_prod_orders%20%2318")).await;
    assert_eq!(none["events"], json!([]));
    labels.stop().await;
}

#[tokio::test]
async fn pages_speak_the_language_of_the_request() {
    let (_db, outbox) = sqlite_outbox().await;
    enqueue(&outbox, "doc.updated", json!({"n": 1}), None).await;
    let served = serve(&outbox, DashboardOptions::new()).await;
    let get = |path: &'static str, headers: &'static [(&'static str, &'static str)]| {
        let url = served.url(path);
        async move {
            let mut request = client().get(url);
            for (name, value) in headers {
                request = request.header(*name, *value);
            }
            let response = request.send().await.unwrap();
            let cookie = response
                .headers()
                .get("set-cookie")
                .map(|v| v.to_str().unwrap().to_owned());
            (
                response.status().as_u16(),
                cookie,
                response.text().await.unwrap(),
            )
        }
    };
    let (_, cookie, html) = get("/", &[("accept-language", "ru-RU,ru;q=0.9,en;q=0.5")]).await;
    assert!(
        html.contains(r#"<html lang="ru" data-dates="dotted">"#),
        "{html}"
    );
    assert!(html.contains("<th scope=\"col\">Событие</th>"), "{html}");
    assert_eq!(cookie, None, "nothing chosen, nothing remembered");
    let (_, _, html) = get("/keys", &[("accept-language", "en-GB,en")]).await;
    assert!(html.contains(r#"<html lang="en" data-dates="iso">"#));
    assert!(html.contains("Held ordering keys"));
    let (_, cookie, html) = get("/topics?lang=ru", &[("accept-language", "en")]).await;
    assert!(html.contains("<h1>Топики</h1>"), "{html}");
    assert!(cookie.unwrap().starts_with("hare_outbox_lang=ru;"));
    let (_, _, html) = get("/relays", &[("cookie", "hare_outbox_lang=ru")]).await;
    assert!(html.contains("Релеи, держащие аренды"));
    // The language links keep the page's query.
    let (_, _, html) = get("/?topic=doc.*", &[]).await;
    assert!(
        html.contains(r#"href="?topic=doc.*&#38;lang=ru""#),
        "{html}"
    );
    // Times carry UTC for the script and the hover.
    assert!(html.contains("<time datetime=\""), "{html}");
    assert!(html.contains(" UTC\">"), "{html}");
    // A refused parameter of a view: 400, the page saying which.
    let (status, _, html) = get("/keys?limit=5000", &[]).await;
    assert_eq!(status, 400);
    assert!(html.contains("<b>limit</b>"), "{html}");
    let (status, _, html) = get("/events/424242", &[("accept-language", "ru")]).await;
    assert_eq!(status, 404);
    assert!(html.contains("Такого события нет"), "{html}");
    served.stop().await;
}

#[tokio::test]
async fn the_openapi_document_lists_the_views() {
    let (_db, outbox) = sqlite_outbox().await;
    let served = serve(&outbox, DashboardOptions::new()).await;
    let (status, doc) = get_json(&served.url("/api/openapi.json")).await;
    assert_eq!(status, 200);
    for path in [
        "/api/keys/held",
        "/api/keys/head",
        "/api/topics",
        "/api/relays",
        "/api/events/{id}/neighbours",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} missing");
    }
    assert!(doc["paths"]["/api/keys/head"]["post"]["responses"]["409"].is_object());
    for schema in [
        "HeldKeyList",
        "TopicList",
        "RelayList",
        "KeyHeadRequest",
        "Neighbours",
    ] {
        assert!(
            doc["components"]["schemas"][schema].is_object(),
            "{schema} missing"
        );
    }
    served.stop().await;
}
