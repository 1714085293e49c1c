//! The journal page in a real headless Chromium, driven through chromedriver (WebDriver) on
//! loopback: a captured update shows its author and its `from` values, a topic filter narrows
//! the list, and retrying a dead letter from the page returns it to pending. Each test keeps a
//! screenshot in `$CARGO_TARGET_DIR/test-artifacts/dashboard/`.
//!
//! Needs Debian's `chromium` and `chromium-driver` (see `common/browser.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::browser::{Browser, WAIT, contents, screenshot, texts};
use common::{TOKEN, enqueue, get_json, relay_once, serve, sqlite_outbox};
use fantoccini::Locator;
use hare_outbox_core::capture::RowOperation;
use hare_outbox_core::{ChangeCapture, ChangePayload};
use hare_outbox_dashboard::DashboardOptions;
use hare_outbox_testkit::wait_for;
use serde_json::json;

#[tokio::test]
async fn journal_shows_a_captured_update_with_its_author_and_from_values() {
    let (db, outbox) = sqlite_outbox().await;
    sqlx::query("CREATE TABLE sales_orders (id INTEGER PRIMARY KEY, status TEXT, eta_date TEXT)")
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query("INSERT INTO sales_orders VALUES (22, 'confirmed', NULL)")
        .execute(&db.pool)
        .await
        .unwrap();
    ChangeCapture::new("sales_orders")
        .with_topic("doc.{operation}")
        .with_operations([RowOperation::Update])
        .with_payload(ChangePayload::Changes)
        .install(&outbox)
        .await
        .unwrap();
    let mut tx = outbox.begin().await.unwrap();
    outbox
        .set_context(&mut tx, json!({"author": "Администратор"}))
        .await
        .unwrap();
    sqlx::query(
        "UPDATE sales_orders SET status = 'shipped', eta_date = '2026-12-01' WHERE id = 22",
    )
    .execute(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let served = serve(&outbox, DashboardOptions::new()).await;
    let base = served.base.clone();

    Browser::run(|client| async move {
        client.goto(&format!("{base}/")).await.unwrap();
        let row = client
            .wait()
            .at_most(WAIT)
            .for_element(Locator::Css("#journal tbody tr"))
            .await
            .unwrap();
        let cell = |css: &'static str| {
            let row = row.clone();
            async move {
                row.find(Locator::Css(css))
                    .await
                    .unwrap()
                    .text()
                    .await
                    .unwrap()
            }
        };
        assert_eq!(cell(".c-topic").await, "doc.updated");
        assert_eq!(cell(".c-object").await, "sales_orders #22");
        assert_eq!(cell(".c-who").await, "Администратор");
        assert_eq!(cell(".c-status").await, "pending");
        // One line: each changed column, from → to (clipped to the column; all of it on hover).
        let from = contents(&client, "#journal tbody tr .c-data .from").await;
        assert_eq!(from, vec!["\"confirmed\"", "null"], "{from:?}");
        let to = contents(&client, "#journal tbody tr .c-data .to").await;
        assert_eq!(to, vec!["\"shipped\"", "\"2026-12-01\""], "{to:?}");
        let columns = contents(&client, "#journal tbody tr .c-data .column").await;
        assert_eq!(columns, vec!["status", "eta_date"]);
        // The full payload opens as pretty JSON, read when asked for.
        row.find(Locator::Css(".c-data summary"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        let pretty = wait_for("the row's JSON", WAIT, || {
            let row = row.clone();
            async move {
                let text = row
                    .find(Locator::Css(".c-data pre.pretty"))
                    .await
                    .ok()?
                    .text()
                    .await
                    .ok()?;
                text.contains("\"operation\": \"updated\"").then_some(text)
            }
        })
        .await;
        assert!(pretty.contains("\"table\": \"sales_orders\""), "{pretty}");
        // The backlog line and the charts load beside the table.
        wait_for("the backlog line", WAIT, || {
            let client = client.clone();
            async move {
                let line = texts(&client, "#backlog").await;
                (line.first().map(String::as_str)
                    == Some("Backlog: 1 to deliver (oldest 0 s), 0 dead letters")
                    || line
                        .first()
                        .is_some_and(|l| l.starts_with("Backlog: 1 to deliver")))
                .then_some(())
            }
        })
        .await;
        let width = wait_for("the charts image", WAIT, || {
            let client = client.clone();
            async move {
                let w = client
                    .execute(
                        "const i = document.getElementById('charts'); \
                         return i.complete ? i.naturalWidth : 0;",
                        vec![],
                    )
                    .await
                    .ok()?;
                w.as_u64().filter(|w| *w > 0)
            }
        })
        .await;
        assert_eq!(width, 1112);
        screenshot(&client, "captured_update").await;
    })
    .await;
    served.stop().await;
}

#[tokio::test]
async fn topic_filter_narrows_the_list() {
    let (_db, outbox) = sqlite_outbox().await;
    enqueue(
        &outbox,
        "billing.invoice.sent",
        json!({"invoice": 1}),
        Some("ann"),
    )
    .await;
    enqueue(&outbox, "doc.updated", json!({"n": 1}), Some("bob")).await;
    enqueue(&outbox, "doc.inserted", json!({"n": 2}), Some("bob")).await;
    let served = serve(&outbox, DashboardOptions::new()).await;
    let base = served.base.clone();

    Browser::run(|client| async move {
        client.goto(&format!("{base}/")).await.unwrap();
        let all = wait_for("three rows", WAIT, || {
            let client = client.clone();
            async move {
                let t = texts(&client, "#journal tbody .c-topic").await;
                (t.len() == 3).then_some(t)
            }
        })
        .await;
        assert_eq!(
            all,
            vec!["doc.inserted", "doc.updated", "billing.invoice.sent"]
        );
        let field = client.find(Locator::Id("f-topic")).await.unwrap();
        field.send_keys("billing.*").await.unwrap();
        client
            .find(Locator::Id("f-submit"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        wait_for("the filtered list", WAIT, || {
            let client = client.clone();
            async move {
                (texts(&client, "#journal tbody .c-topic").await == ["billing.invoice.sent"])
                    .then_some(())
            }
        })
        .await;
        let url = client.current_url().await.unwrap();
        assert!(
            url.query().unwrap_or("").contains("topic=billing.*"),
            "{url}"
        );
        let value = client
            .find(Locator::Id("f-topic"))
            .await
            .unwrap()
            .prop("value")
            .await
            .unwrap();
        assert_eq!(value.as_deref(), Some("billing.*"));
        screenshot(&client, "topic_filter").await;
    })
    .await;
    served.stop().await;
}

#[tokio::test]
async fn live_tail_prepends_new_events_of_the_filtered_topics() {
    let (_db, outbox) = sqlite_outbox().await;
    enqueue(&outbox, "doc.updated", json!({"n": 1}), Some("ann")).await;
    let served = serve(&outbox, DashboardOptions::new()).await;
    let base = served.base.clone();
    let writer = outbox.clone();

    Browser::run(|client| async move {
        client.goto(&format!("{base}/?topic=doc.*")).await.unwrap();
        client
            .wait()
            .at_most(WAIT)
            .for_element(Locator::Css("#journal tbody tr"))
            .await
            .unwrap();
        client
            .find(Locator::Id("live"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        // One of the filtered topics and one outside them arrive after the page was read.
        enqueue(&writer, "billing.invoice.sent", json!({"n": 2}), None).await;
        enqueue(
            &writer,
            "doc.inserted",
            json!({"note": "<script>x</script>"}),
            Some("bob"),
        )
        .await;
        let topics = wait_for("the tailed row", WAIT, || {
            let client = client.clone();
            async move {
                let t = texts(&client, "#journal tbody .c-topic").await;
                (t.len() == 2).then_some(t)
            }
        })
        .await;
        assert_eq!(topics, vec!["doc.inserted", "doc.updated"]);
        assert_eq!(
            texts(&client, "#journal tbody tr:first-child .c-who").await,
            ["bob"]
        );
        // Built with textContent: the markup is text, not an element.
        let data = texts(&client, "#journal tbody tr:first-child .c-data code").await;
        assert!(data[0].contains("<script>x</script>"), "{data:?}");
        assert!(
            client
                .find_all(Locator::Css("#journal script"))
                .await
                .unwrap()
                .is_empty()
        );
        screenshot(&client, "live_tail").await;
    })
    .await;
    served.stop().await;
}

#[tokio::test]
async fn retrying_a_dead_letter_from_the_page_makes_it_pending() {
    let (_db, outbox) = sqlite_outbox().await;
    enqueue(&outbox, "fail.webhook", json!({"hook": 1}), None).await;
    relay_once(&outbox).await;
    let options = DashboardOptions::new()
        .with_token(Some(TOKEN.to_owned()))
        .unwrap();
    let served = serve(&outbox, options).await;
    let base = served.base.clone();

    Browser::run(|client| async move {
        client.goto(&format!("{base}/?status=dead")).await.unwrap();
        let row = client
            .wait()
            .at_most(WAIT)
            .for_element(Locator::Css("#journal tbody tr"))
            .await
            .unwrap();
        let status = row.find(Locator::Css(".c-status")).await.unwrap();
        assert_eq!(status.text().await.unwrap(), "dead");
        let error = row.find(Locator::Css(".c-error")).await.unwrap();
        assert_eq!(error.text().await.unwrap(), "receiver refused fail.webhook");
        // Without the token the page says what is missing and nothing changes.
        row.find(Locator::Css("button[data-action=retry]"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        let said = client
            .find(Locator::Id("action-status"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(said.contains("token"), "{said}");
        // Type the token, go to every status, and retry.
        client
            .find(Locator::Id("token"))
            .await
            .unwrap()
            .send_keys(TOKEN)
            .await
            .unwrap();
        client.goto(&format!("{base}/")).await.unwrap();
        client
            .wait()
            .at_most(WAIT)
            .for_element(Locator::Css("button[data-action=retry]"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        wait_for("the row to turn pending", WAIT, || {
            let client = client.clone();
            async move {
                (texts(&client, "#journal tbody .c-status").await == ["pending"]).then_some(())
            }
        })
        .await;
        assert!(texts(&client, "button[data-action=retry]").await.is_empty());
        screenshot(&client, "dead_letter_retried").await;
    })
    .await;
    let (_, events) = get_json(&served.url("/api/events")).await;
    assert_eq!(events["events"][0]["status"], "pending");
    assert_eq!(events["events"][0]["attempts"], 0);
    served.stop().await;
}
