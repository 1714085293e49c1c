//! The operator's pages in a real headless Chromium (see `common/browser.rs`): the journal in
//! seed 000's form on a 1400 × 900 screen (20+ rows, `table #pk` objects, Russian texts and
//! dates in the viewer's zone), the event page with its key's neighbours and copy as JSON, the
//! held keys with retry and skip-and-release behind a confirmation, topics and relays, the
//! language switch, a phone's width, and the accessibility basics of every page in both
//! languages. Each test keeps screenshots in `$CARGO_TARGET_DIR/test-artifacts/dashboard/`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use chrono::{DateTime, Utc};
use common::browser::{
    Browser, Setup, WAIT, accessibility_problems, contents, open, screenshot, texts, widths,
};
use common::{TOKEN, client, enqueue, get_json, relay_once, serve, sqlite_outbox};
use fantoccini::{Client, Locator};
use hare_outbox_core::capture::RowOperation;
use hare_outbox_core::{ChangeCapture, ChangePayload, Outbox, OutboxMessage};
use hare_outbox_dashboard::DashboardOptions;
use hare_outbox_sqlite::SqliteBackend;
use hare_outbox_testkit::sqlite::TestDb;
use hare_outbox_testkit::wait_for;
use serde_json::{Value, json};

/// The ERP of seed 000 on a SQLite file: sales orders and production orders captured in the
/// journal form (label ≠ table, so the object column tells them apart), twelve of each updated
/// by the administrator, then the sales orders paid; 36 events, all delivered.
async fn erp_journal(db: &TestDb, outbox: &Outbox<SqliteBackend>) {
    for sql in [
        "CREATE TABLE sales_orders (id INTEGER PRIMARY KEY, status TEXT, eta_date TEXT, \
         prepaid TEXT, paid_at TEXT)",
        "CREATE TABLE plan_prod_orders (id INTEGER PRIMARY KEY, status TEXT, launch_plan TEXT, \
         launched_at TEXT)",
    ] {
        sqlx::query(sql).execute(&db.pool).await.unwrap();
    }
    for id in 1..=12 {
        sqlx::query("INSERT INTO sales_orders VALUES (?, 'confirmed', NULL, '0.00', NULL)")
            .bind(id)
            .execute(&db.pool)
            .await
            .unwrap();
        sqlx::query("INSERT INTO plan_prod_orders VALUES (?, 'confirmed', NULL, NULL)")
            .bind(id)
            .execute(&db.pool)
            .await
            .unwrap();
    }
    for (table, label) in [
        ("sales_orders", "sales_order"),
        ("plan_prod_orders", "prod_order"),
    ] {
        ChangeCapture::new(table)
            .with_label(label)
            .with_topic("doc.{operation}")
            .with_operations([RowOperation::Update])
            .with_payload(ChangePayload::Changes)
            .install(outbox)
            .await
            .unwrap();
    }
    for id in 1..=12 {
        let mut tx = outbox.begin().await.unwrap();
        outbox
            .set_context(&mut tx, json!({"author": "Администратор"}))
            .await
            .unwrap();
        for sql in [
            "UPDATE sales_orders SET status = 'shipped', eta_date = '2026-12-01' WHERE id = ?",
            "UPDATE plan_prod_orders SET status = 'launched', launch_plan = 'A', \
             launched_at = '2026-11-13 17:20' WHERE id = ?",
        ] {
            sqlx::query(sql).bind(id).execute(&mut *tx).await.unwrap();
        }
        tx.commit().await.unwrap();
    }
    for id in 1..=12 {
        let mut tx = outbox.begin().await.unwrap();
        outbox
            .set_context(&mut tx, json!({"author": "Администратор"}))
            .await
            .unwrap();
        sqlx::query(
            "UPDATE sales_orders SET prepaid = '1200.00', paid_at = '2026-11-13 17:20' WHERE id = ?",
        )
        .bind(id)
        .execute(&mut *tx)
        .await
        .unwrap();
        tx.commit().await.unwrap();
    }
    relay_once(outbox).await;
}

/// `time` in the dotted style, shifted by `offset_hours` (a zone without summer time).
fn dotted(time: DateTime<Utc>, offset_hours: i64) -> String {
    (time + chrono::Duration::hours(offset_hours))
        .format("%d.%m.%Y %H:%M")
        .to_string()
}

async fn js(client: &Client, script: &str) -> Value {
    client.execute(script, vec![]).await.unwrap()
}

#[tokio::test]
async fn journal_in_seed_form_fits_twenty_rows_in_russian_and_local_time() {
    let (db, outbox) = sqlite_outbox().await;
    erp_journal(&db, &outbox).await;
    let served = serve(&outbox, DashboardOptions::new()).await;
    let base = served.base.clone();
    let (_, newest) = get_json(&served.url("/api/events?limit=1")).await;
    let created: DateTime<Utc> =
        serde_json::from_value(newest["events"][0]["created_at"].clone()).unwrap();
    let setup = Setup {
        size: (1400, 900),
        accept_language: Some("ru-RU,ru"),
        // UTC+5 the whole year: the page must show 5 hours later than the stored UTC time.
        time_zone: Some("Asia/Yekaterinburg"),
        ..Setup::default()
    };
    Browser::run_with(setup, |client| async move {
        open(&client, &format!("{base}/"), "#journal tbody tr").await;
        assert_eq!(
            js(&client, "return document.documentElement.lang").await,
            "ru"
        );
        let heads = texts(&client, "#journal thead th").await;
        for head in [
            "№",
            "Событие",
            "Объект",
            "Данные",
            "Создано",
            "Обработано",
            "Кто",
        ] {
            assert!(
                heads.iter().any(|h| h == head),
                "{head} missing in {heads:?}"
            );
        }
        // The object column is the captured table and key, as seed 000 shows it.
        let objects = contents(&client, "#journal tbody .c-object").await;
        assert_eq!(objects.len(), 36);
        assert!(objects.iter().all(|o| {
            let (table, pk) = o.split_once(" #").unwrap();
            ["sales_orders", "plan_prod_orders"].contains(&table) && pk.parse::<u32>().is_ok()
        }));
        assert!(
            objects.contains(&"plan_prod_orders #12".to_owned()),
            "{objects:?}"
        );
        // Times: dotted, in the viewer's zone (UTC+5), UTC on hover.
        let first_created = contents(&client, "#journal tbody tr:first-child .c-created").await;
        assert_eq!(first_created[0], dotted(created, 5));
        let title = client
            .find(Locator::Css(
                "#journal tbody tr:first-child .c-created time",
            ))
            .await
            .unwrap()
            .attr("title")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            title,
            format!("{} UTC", created.format("%Y-%m-%d %H:%M:%S"))
        );
        let statuses = texts(&client, "#journal tbody tr:first-child .c-status").await;
        assert_eq!(statuses, ["доставлено"]);
        // 20+ whole rows on the first screen, each one line high.
        let fit = js(
            &client,
            "const rows = Array.from(document.querySelectorAll('#journal tbody tr'));
             const h = window.innerHeight;
             return [h, rows.filter(r => r.getBoundingClientRect().bottom <= h).length,
                     Math.max(...rows.map(r => r.getBoundingClientRect().height))];",
        )
        .await;
        println!("viewport height, whole rows on screen, tallest row: {fit}");
        assert!(fit[1].as_u64().unwrap() >= 20, "{fit}");
        assert!(fit[2].as_f64().unwrap() < 40.0, "rows are one line: {fit}");
        screenshot(&client, "journal_seed_form_ru").await;

        // The object filter takes what the column shows.
        let field = client.find(Locator::Id("f-object")).await.unwrap();
        field.send_keys("plan_prod_orders #12").await.unwrap();
        client
            .find(Locator::Id("f-submit"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        wait_for("the object's events", WAIT, || {
            let client = client.clone();
            async move {
                let objects = contents(&client, "#journal tbody .c-object").await;
                (objects == ["plan_prod_orders #12"]).then_some(())
            }
        })
        .await;
        screenshot(&client, "journal_object_filter").await;
    })
    .await;
    served.stop().await;
}

#[tokio::test]
async fn event_page_shows_everything_links_the_keys_neighbours_and_copies_json() {
    let (db, outbox) = sqlite_outbox().await;
    erp_journal(&db, &outbox).await;
    let served = serve(&outbox, DashboardOptions::new()).await;
    let base = served.base.clone();
    let (_, of_five) = get_json(&served.url("/api/events?object=sales_orders%20%235")).await;
    let events = of_five["events"].as_array().unwrap().clone();
    assert_eq!(events.len(), 2);
    let (paid, shipped) = (events[0].clone(), events[1].clone());
    let paid_seq = paid["sequence"].as_i64().unwrap();
    let shipped_seq = shipped["sequence"].as_i64().unwrap();
    // No such event: a page saying so, 404.
    let missing = client()
        .get(served.url("/events/999999"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);

    Browser::run(|client| async move {
        // From the journal's №.
        open(
            &client,
            &format!("{base}/?object=sales_orders+%235"),
            "#journal tbody tr",
        )
        .await;
        client
            .find(Locator::Css(&format!(
                "tr[data-sequence='{paid_seq}'] .c-seq a"
            )))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        client
            .wait()
            .at_most(WAIT)
            .for_element(Locator::Id("event-title"))
            .await
            .unwrap();
        let url = client.current_url().await.unwrap();
        assert!(
            url.path().ends_with(&format!("/events/{paid_seq}")),
            "{url}"
        );
        let title = texts(&client, "#event-title").await;
        assert!(title[0].contains(&format!("№ {paid_seq}")), "{title:?}");
        assert_eq!(texts(&client, "#f-object-value").await, ["sales_orders #5"]);
        assert_eq!(texts(&client, "#f-key").await, ["sales_order:5"]);
        assert_eq!(texts(&client, "#event-status").await, ["published"]);
        let columns = texts(&client, "#changes tbody th").await;
        assert_eq!(columns, ["prepaid", "paid_at"]);
        let from = texts(&client, "#changes tbody td.from").await;
        assert_eq!(from, ["\"0.00\"", "null"]);
        let payload = texts(&client, "#payload").await;
        assert!(
            payload[0].contains("\"table\": \"sales_orders\""),
            "{payload:?}"
        );
        let headers = texts(&client, "#headers").await;
        assert!(headers[0].contains("Администратор"), "{headers:?}");
        // The key's previous event, and back.
        assert!(texts(&client, "#key-next").await.is_empty());
        client
            .find(Locator::Id("key-previous"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        wait_for("the previous event of the key", WAIT, || {
            let client = client.clone();
            async move {
                let title = texts(&client, "#event-title").await;
                title
                    .first()
                    .is_some_and(|t| t.contains(&format!("№ {shipped_seq}")))
                    .then_some(())
            }
        })
        .await;
        let next = client
            .find(Locator::Id("key-next"))
            .await
            .unwrap()
            .attr("href")
            .await
            .unwrap();
        assert_eq!(
            next.as_deref(),
            Some(format!("/events/{paid_seq}").as_str())
        );
        // Copy as JSON: the whole event as the API gives it.
        client
            .find(Locator::Id("copy-json"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        let copied = wait_for("the copied JSON", WAIT, || {
            let client = client.clone();
            async move {
                let value = client
                    .execute(
                        "const a = document.getElementById('copy-area'); return a ? a.value : '';",
                        vec![],
                    )
                    .await
                    .ok()?;
                serde_json::from_str::<Value>(value.as_str()?).ok()
            }
        })
        .await;
        assert_eq!(copied["sequence"], shipped_seq);
        assert_eq!(copied["object"], "sales_orders #5");
        let said = texts(&client, "#action-status").await;
        assert!(
            said[0] == "Copied." || said[0].starts_with("Copying failed"),
            "{said:?}"
        );
        screenshot(&client, "event_page").await;
    })
    .await;
    served.stop().await;
}

#[tokio::test]
async fn held_keys_are_retried_or_released_after_a_confirmation() {
    let (db, outbox) = sqlite_outbox().await;
    // order:1 is held by a dead letter with one event behind it; order:2 by a failing head.
    for (topic, key) in [
        ("fail.webhook", "order:1"),
        ("orders.paid", "order:1"),
        ("orders.created", "order:2"),
    ] {
        let message = OutboxMessage::new(topic, json!({"order": key})).ordering_key(key);
        let mut tx = outbox.begin().await.unwrap();
        tx.enqueue(message).await.unwrap();
        tx.commit().await.unwrap();
    }
    relay_once(&outbox).await;
    sqlx::query(
        "UPDATE hare_outbox SET attempts = 2, last_error = 'timeout after 10 s', \
         published_at = NULL, next_attempt_at = '2099-01-01T00:00:00.000000Z' \
         WHERE ordering_key = 'order:2'",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let options = DashboardOptions::new()
        .with_token(Some(TOKEN.to_owned()))
        .unwrap();
    let served = serve(&outbox, options).await;
    let base = served.base.clone();

    Browser::run(|client| async move {
        let base = base.as_str();
        open(&client, &format!("{base}/keys"), "#keys tbody tr").await;
        let keys = texts(&client, "#keys tbody .c-key").await;
        assert_eq!(keys, ["order:1", "order:2"]);
        let errors = texts(&client, "#keys tbody .c-error").await;
        assert_eq!(
            errors,
            ["receiver refused fail.webhook", "timeout after 10 s"]
        );
        assert_eq!(texts(&client, "#keys tbody .c-waiting").await, ["2", "1"]);
        screenshot(&client, "held_keys").await;
        client
            .find(Locator::Id("token"))
            .await
            .unwrap()
            .send_keys(TOKEN)
            .await
            .unwrap();
        let release = "tr[data-key='order:1'] button[data-action=key-release]";
        // Dismissed: nothing changes.
        client
            .find(Locator::Css(release))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        let question = client.get_alert_text().await.unwrap();
        assert!(question.contains("order:1"), "{question}");
        client.dismiss_alert().await.unwrap();
        assert_eq!(texts(&client, "#keys tbody .c-key").await.len(), 2);
        // Accepted: the dead head leaves its key; the key's next event is not held.
        client
            .find(Locator::Css(release))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        client.accept_alert().await.unwrap();
        wait_for("order:1 to be released", WAIT, || {
            let client = client.clone();
            async move { (texts(&client, "#keys tbody .c-key").await == ["order:2"]).then_some(()) }
        })
        .await;
        // Retry of the failing head: due now.
        client
            .find(Locator::Css(
                "tr[data-key='order:2'] button[data-action=key-retry]",
            ))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        client.accept_alert().await.unwrap();
        let retried = wait_for("the retried head to be due", WAIT, || {
            let url = format!("{base}/api/events?topic=orders.created");
            async move {
                let (_, page) = get_json(&url).await;
                let event = page["events"][0].clone();
                event["next_attempt_at"].is_null().then_some(event)
            }
        })
        .await;
        assert_eq!(retried["attempts"], 2, "a failing head keeps its attempts");
        screenshot(&client, "held_keys_released").await;
    })
    .await;
    let (_, events) = get_json(&served.url("/api/events?limit=10")).await;
    let by_topic = |topic: &str| {
        events["events"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["topic"] == topic)
            .unwrap()
            .clone()
    };
    let released = by_topic("fail.webhook");
    assert_eq!(released["ordering_key"], Value::Null);
    assert_eq!(released["headers"]["released_ordering_key"], "order:1");
    assert_eq!(released["status"], "dead");
    served.stop().await;
}

#[tokio::test]
async fn topics_and_relays_show_counts_and_leases() {
    let (db, outbox) = sqlite_outbox().await;
    common::standard_journal(&outbox).await;
    enqueue(&outbox, "orders.created", json!({"order": 3}), None).await;
    enqueue(&outbox, "orders.created", json!({"order": 4}), None).await;
    sqlx::query(
        "UPDATE hare_outbox SET leased_by = 'relay-7', \
         lease_until = '2099-01-01T00:00:00.000000Z' WHERE sequence = \
         (SELECT max(sequence) FROM hare_outbox)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let served = serve(&outbox, DashboardOptions::new()).await;
    let base = served.base.clone();
    Browser::run(|client| async move {
        open(&client, &format!("{base}/topics"), "#topics tbody tr").await;
        let topics = texts(&client, "#topics tbody .c-topic").await;
        assert_eq!(topics, ["doc.updated", "fail.webhook", "orders.created"]);
        let row = |topic: &'static str| {
            let client = client.clone();
            async move {
                let css = format!("tr[data-topic='{topic}'] .c-num");
                texts(&client, &css).await
            }
        };
        // pending, leased, retrying, dead, published in the window
        assert_eq!(row("orders.created").await, ["1", "1", "0", "0", "2"]);
        assert_eq!(row("fail.webhook").await, ["0", "0", "0", "2", "0"]);
        screenshot(&client, "topics").await;
        client
            .find(Locator::Css("tr[data-topic='fail.webhook'] .c-dead a"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        wait_for("the dead letters of the topic", WAIT, || {
            let client = client.clone();
            async move {
                let statuses = texts(&client, "#journal tbody .c-status").await;
                (statuses == ["dead", "dead"]).then_some(())
            }
        })
        .await;
        open(&client, &format!("{base}/relays"), "#relays tbody tr").await;
        assert_eq!(texts(&client, "#relays tbody .c-relay").await, ["relay-7"]);
        assert_eq!(texts(&client, "#relays tbody .c-live").await, ["1"]);
        assert_eq!(texts(&client, "#relays tbody .c-expired").await, ["0"]);
        screenshot(&client, "relays").await;
    })
    .await;
    served.stop().await;
}

#[tokio::test]
async fn the_language_switch_is_remembered_across_pages() {
    let (_db, outbox) = sqlite_outbox().await;
    enqueue(&outbox, "doc.updated", json!({"n": 1}), None).await;
    let served = serve(&outbox, DashboardOptions::new()).await;
    let base = served.base.clone();
    Browser::run(|client| async move {
        open(&client, &format!("{base}/"), "#journal tbody tr").await;
        assert_eq!(texts(&client, "#nav-keys").await, ["Held keys"]);
        client
            .find(Locator::Id("lang-ru"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        wait_for("Russian texts", WAIT, || {
            let client = client.clone();
            async move {
                (texts(&client, "#nav-keys").await == ["Задержанные ключи"]).then_some(())
            }
        })
        .await;
        // Another page without `lang`: the cookie keeps Russian, and its dates.
        open(&client, &format!("{base}/keys"), "#empty").await;
        assert_eq!(texts(&client, "h1").await, ["Задержанные ключи порядка"]);
        assert_eq!(
            js(&client, "return document.documentElement.dataset.dates").await,
            "dotted"
        );
        client
            .find(Locator::Id("lang-en"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        wait_for("English texts", WAIT, || {
            let client = client.clone();
            async move { (texts(&client, "h1").await == ["Held ordering keys"]).then_some(()) }
        })
        .await;
    })
    .await;
    served.stop().await;
}

/// Every page on a phone's width: no page is wider than the screen (tables become cards).
#[tokio::test]
async fn every_page_fits_a_phone_width() {
    let (db, outbox) = sqlite_outbox().await;
    erp_journal(&db, &outbox).await;
    enqueue(&outbox, "fail.webhook", json!({"hook": 1}), None).await;
    let key = OutboxMessage::new("fail.webhook", json!({"hook": 2})).ordering_key("hook:2");
    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue(key).await.unwrap();
    tx.commit().await.unwrap();
    relay_once(&outbox).await;
    let served = serve(
        &outbox,
        DashboardOptions::new()
            .with_token(Some(TOKEN.to_owned()))
            .unwrap(),
    )
    .await;
    let base = served.base.clone();
    let setup = Setup {
        size: (390, 844),
        phone: true,
        ..Setup::default()
    };
    Browser::run_with(setup, |client| async move {
        for (path, ready, name) in [
            ("/", "#journal tbody tr", "phone_journal"),
            ("/events/5", "#event-title", "phone_event"),
            ("/keys", "#keys tbody tr", "phone_keys"),
            ("/topics", "#topics tbody tr", "phone_topics"),
            ("/relays", "#empty", "phone_relays"),
        ] {
            open(&client, &format!("{base}{path}"), ready).await;
            let (page, window) = widths(&client).await;
            assert!(window <= 400, "the emulated phone is {window} px wide");
            assert!(
                page <= window,
                "{path} is {page} px wide on a {window} px screen"
            );
            screenshot(&client, name).await;
        }
    })
    .await;
    served.stop().await;
}

/// Labels, alt texts, header scopes and contrast on every page, in both languages.
#[tokio::test]
async fn every_page_passes_the_accessibility_basics_in_both_languages() {
    let (db, outbox) = sqlite_outbox().await;
    erp_journal(&db, &outbox).await;
    let key = OutboxMessage::new("fail.webhook", json!({"hook": 2})).ordering_key("hook:2");
    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue(key).await.unwrap();
    tx.commit().await.unwrap();
    enqueue(&outbox, "orders.created", json!({"n": 1}), None).await;
    relay_once(&outbox).await;
    enqueue(&outbox, "orders.created", json!({"n": 2}), None).await;
    sqlx::query(
        "UPDATE hare_outbox SET leased_by = 'relay-7', \
         lease_until = '2099-01-01T00:00:00.000000Z' WHERE sequence = \
         (SELECT max(sequence) FROM hare_outbox)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let served = serve(
        &outbox,
        DashboardOptions::new()
            .with_token(Some(TOKEN.to_owned()))
            .unwrap(),
    )
    .await;
    let base = served.base.clone();
    Browser::run(|client| async move {
        for lang in ["en", "ru"] {
            for (path, ready) in [
                ("/", "#journal tbody tr"),
                ("/events/37", "#event-title"),
                ("/events/1", "#changes"),
                ("/keys", "#keys tbody tr"),
                ("/topics", "#topics tbody tr"),
                ("/relays", "#relays tbody tr"),
                ("/events/424242", "#error"),
            ] {
                open(&client, &format!("{base}{path}?lang={lang}"), ready).await;
                let problems = accessibility_problems(&client).await;
                assert!(problems.is_empty(), "{path} ({lang}): {problems:#?}");
            }
            screenshot(&client, &format!("missing_event_{lang}")).await;
        }
        // The skip link is the first stop of the keyboard and leads to the content.
        let first = js(
            &client,
            "const a = document.querySelector('a.skip'); a.focus();
             return [document.activeElement === a, a.getAttribute('href')];",
        )
        .await;
        assert_eq!(first, json!([true, "#main"]));
    })
    .await;
    served.stop().await;
}
