//! Secrets in webhook URLs never reach messages, result records or headers' Debug output.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hare_outbox_core::{Delivery, Error, OutboxEvent};
use hare_outbox_testkit::http::{Behaviour, Receiver, unused_local_url};
use hare_outbox_webhook::WebhookDelivery;
use proptest::prelude::*;
use serde_json::json;

fn event() -> OutboxEvent {
    OutboxEvent::new("orders.created", json!({"order": 1}))
}

/// Delivers one event and gives the error's chain and the JSON of the result record.
async fn attempt(delivery: &WebhookDelivery) -> (String, String) {
    let reports = delivery
        .deliver_batch_reported(&[event()], 1, std::time::Duration::from_secs(20))
        .await;
    let report = reports.into_iter().next().unwrap();
    let record = report.record.clone().unwrap().to_string();
    let error = report.result.unwrap_err().chain();
    (error, record)
}

#[tokio::test]
async fn path_and_query_tokens_are_never_shown() {
    let echo = "unknown hook /hook/T000/PathSecret?token=QuerySecret";
    let receiver = Receiver::start(Behaviour::status(503).with_body(echo));
    let url = receiver.url("/hook/T000/PathSecret?token=QuerySecret");
    let delivery = WebhookDelivery::new(url.clone()).unwrap();

    let (error, record) = attempt(&delivery).await;

    let expected = format!(
        "webhook http://{}/… answered 503 Service Unavailable",
        receiver.addr()
    );
    assert!(error.starts_with(&expected), "{error}");
    for shown in [&error, &record, &format!("{delivery:?}")] {
        assert!(!shown.contains("PathSecret"), "{shown}");
        assert!(!shown.contains("QuerySecret"), "{shown}");
    }
    // Every path segment and query value of 4 or more characters is cut, `hook` included.
    assert!(
        record.contains("unknown *** /***/***/***?token=***"),
        "{record}"
    );
    assert_eq!(receiver.requests()[0].path, "/hook/T000/PathSecret");
}

#[tokio::test]
async fn a_public_url_shows_its_path_but_no_query_value() {
    let receiver = Receiver::start(Behaviour::status(503).with_body("token QuerySecret"));
    let url = receiver.url("/hook/T000/PathSecret?token=QuerySecret");
    let delivery = WebhookDelivery::builder()
        .with_url(url)
        .with_public_url(true)
        .build()
        .unwrap();

    let (error, record) = attempt(&delivery).await;

    let expected = format!(
        "webhook http://{}/hook/T000/PathSecret?token=*** answered 503",
        receiver.addr()
    );
    assert!(error.starts_with(&expected), "{error}");
    assert!(
        !error.contains("QuerySecret") && !record.contains("QuerySecret"),
        "{record}"
    );
}

#[tokio::test]
async fn redirects_refusals_connect_errors_and_bad_schemes_show_scheme_and_host_only() {
    let receiver = Receiver::start(Behaviour::redirect("/next/LocationSecret?token=Loc123"));
    let delivery = WebhookDelivery::new(receiver.url("/hook/PathSecret")).unwrap();
    let (error, record) = attempt(&delivery).await;
    let location = format!("location: http://{}/…", receiver.addr());
    assert!(error.contains(&location), "{error}");
    for shown in [&error, &record] {
        assert!(
            !shown.contains("LocationSecret") && !shown.contains("Loc123"),
            "{shown}"
        );
        assert!(!shown.contains("PathSecret"), "{shown}");
    }

    let refused = WebhookDelivery::new("https://hooks.example.com/T000/PathSecret?token=Q1234")
        .unwrap()
        .with_allows_url(|_| false);
    let (error, record) = attempt(&refused).await;
    assert!(
        error.starts_with("webhook url https://hooks.example.com/… was refused by allows_url"),
        "{error}"
    );
    assert!(
        !record.contains("PathSecret") && !record.contains("Q1234"),
        "{record}"
    );

    let down = unused_local_url("/hook/PathSecret?token=Q1234");
    let delivery = WebhookDelivery::new(down.clone()).unwrap();
    let (error, record) = attempt(&delivery).await;
    assert!(error.contains("connecting failed"), "{error}");
    for shown in [&error, &record] {
        assert!(
            !shown.contains("PathSecret") && !shown.contains("Q1234"),
            "{shown}"
        );
    }

    let Err(Error::Configuration(message)) =
        WebhookDelivery::new("ftp://user:pw1234@files.example.com/drop/Secret")
    else {
        panic!("ftp is refused");
    };
    assert!(message.contains("ftp://files.example.com/…"), "{message}");
    assert!(
        !message.contains("pw1234") && !message.contains("Secret"),
        "{message}"
    );
}

fn secret() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_-]{6,14}".prop_map(|s| format!("Sx{s}"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Random URLs with secrets in the userinfo, the path and the query, answered 503 with a
    /// body echoing the URL: no secret survives in the error, its chain, the record's JSON or
    /// Debug, public or not (the path of a public URL is shown on purpose, so it is left out
    /// there).
    #[test]
    fn no_secret_survives_a_failed_delivery(
        password in secret(),
        segment in secret(),
        value in secret(),
        name in "[a-z]{1,8}",
        public in any::<bool>(),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let receiver_body = format!("no hook /in/{segment}?{name}={value} for user:{password}");
        let receiver = Receiver::start(Behaviour::status(503).with_body(receiver_body));
        let addr = receiver.addr();
        let url = format!("http://user:{password}@{addr}/in/{segment}?{name}={value}");
        let delivery = WebhookDelivery::builder()
            .with_url(url)
            .with_public_url(public)
            .build()
            .unwrap();
        let (error, record) = runtime.block_on(attempt(&delivery));
        let debug = format!("{delivery:?}");
        for shown in [&error, &record, &debug] {
            prop_assert!(!shown.contains(&password), "{shown}");
            prop_assert!(!shown.contains(&value), "{shown}");
            if !public {
                prop_assert!(!shown.contains(&segment), "{shown}");
            }
        }
    }
}
