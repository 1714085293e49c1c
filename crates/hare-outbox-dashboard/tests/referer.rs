//! Mutations from a foreign page without Origin or Sec-Fetch-Site are refused by their
//! Referer; a request with none of the three needs the token alone. Errors shown never carry a
//! URL's secret parts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{TOKEN, client, enqueue, get_json, relay_once, serve, sqlite_outbox};
use hare_outbox_dashboard::DashboardOptions;
use serde_json::{Value, json};

#[tokio::test]
async fn a_foreign_referer_is_cross_site_and_no_browser_headers_need_the_token_only() {
    let (_db, outbox) = sqlite_outbox().await;
    enqueue(&outbox, "fail.a", json!({"n": 1}), None).await;
    relay_once(&outbox).await;
    let options = DashboardOptions::new()
        .with_token(Some(TOKEN.to_owned()))
        .unwrap();
    let served = serve(&outbox, options).await;
    let retry = served.url("/api/dead-letters/retry");
    let http = client();

    let r = http
        .post(&retry)
        .bearer_auth(TOKEN)
        .header("Referer", "https://evil.example/attack?session=Leak777")
        .json(&json!({"topics": ["*"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["field"], "origin", "{body}");
    assert!(!body.to_string().contains("Leak777"), "{body}");
    let (_, backlog) = get_json(&served.url("/api/backlog")).await;
    assert_eq!(backlog["dead_lettered"], 1, "nothing was retried");

    // The dashboard's own page as Referer: allowed with the token.
    let r = http
        .post(&retry)
        .bearer_auth(TOKEN)
        .header("Referer", served.url("/?status=dead"))
        .json(&json!({"topics": ["nothing.*"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);

    // None of Origin, Sec-Fetch-Site and Referer (curl, a script): the token alone decides.
    let r = http
        .post(&retry)
        .bearer_auth(TOKEN)
        .json(&json!({"topics": ["*"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["retried"], 1);
    served.stop().await;
}

#[tokio::test]
async fn a_stored_error_with_a_secret_url_is_shown_redacted() {
    let (db, outbox) = sqlite_outbox().await;
    enqueue(&outbox, "fail.a", json!({"n": 1}), None).await;
    relay_once(&outbox).await;
    // As an older version or another program may have stored it.
    sqlx::query("UPDATE hare_outbox SET last_error = ?")
        .bind("webhook https://u:Pw0rd99@hooks.example.com/x?token=Leak888 answered 503")
        .execute(&db.pool)
        .await
        .unwrap();
    let served = serve(&outbox, DashboardOptions::new()).await;
    let (_, dead) = get_json(&served.url("/api/events?status=dead")).await;
    let shown = dead["events"][0]["last_error"].as_str().unwrap().to_owned();
    assert!(
        shown.starts_with("webhook https://u:***@hooks.example.com/x?token=*** answered 503"),
        "{shown}"
    );
    let page = client()
        .get(served.url("/?status=dead_lettered"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        !page.contains("Leak888") && !page.contains("Pw0rd99"),
        "{page}"
    );
    served.stop().await;
}
