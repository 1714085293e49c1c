//! Per-event targets, `allows_url`, attempt records and the builder's configuration errors,
//! against real HTTP receivers on loopback (hare_outbox_testkit::http).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hare_outbox_core::{Delivery, DeliveryError, Error, OutboxEvent};
use hare_outbox_testkit::http::{Behaviour, Receiver, unused_local_url};
use hare_outbox_webhook::{
    RESULT_TEXT_CHARS, WebhookDelivery, WebhookResult, WebhookTarget, verify_signature,
};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(10);

/// An event whose payload names the URL it goes to (`"to"`) and its subscriber's secret.
fn event_to(url: &str, secret: &str) -> OutboxEvent {
    OutboxEvent {
        sequence: 1,
        ..OutboxEvent::new(
            "subscriber.notified".to_owned(),
            json!({"to": url, "secret": secret}),
        )
    }
}

/// A target function reading the URL and secret from the payload, with one target header.
fn payload_target(event: &OutboxEvent) -> Result<WebhookTarget, DeliveryError> {
    let url = event.payload["to"]
        .as_str()
        .ok_or_else(|| DeliveryError::new("payload has no \"to\""))?;
    let mut target = WebhookTarget::new(url).with_header("x-subscriber", "Zoë ✓");
    if let Some(secret) = event.payload["secret"].as_str().filter(|s| !s.is_empty()) {
        target = target.with_secret(secret);
    }
    Ok(target)
}

fn configuration_message(result: hare_outbox_core::Result<WebhookDelivery>) -> String {
    match result {
        Err(Error::Configuration(message)) => message,
        Err(other) => panic!("expected a configuration error, got {other:?}"),
        Ok(delivery) => panic!("expected a configuration error, got {delivery:?}"),
    }
}

#[tokio::test]
async fn each_event_goes_to_its_target_signed_with_its_secret() {
    let alice = Receiver::start(Behaviour::ok());
    let bob = Receiver::start(Behaviour::ok());
    let looked_up = Arc::new(AtomicUsize::new(0));
    let counter = looked_up.clone();
    let delivery = WebhookDelivery::builder()
        .with_target(move |event: OutboxEvent| {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                payload_target(&event)
            }
        })
        .with_header("x-subscriber", "replaced by the target")
        .with_header("x-configured", "kept")
        .build()
        .unwrap();
    let to_alice = event_to(&alice.url("/alice"), "alice-secret");
    let to_bob = event_to(&bob.url("/bob"), "bob-secret");

    let results = delivery
        .deliver_batch(&[to_alice.clone(), to_bob.clone()], 2, WAIT)
        .await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(looked_up.load(Ordering::SeqCst), 2);

    let at_alice = alice.wait_for_requests(1, WAIT).await;
    let at_bob = bob.wait_for_requests(1, WAIT).await;
    assert_eq!(at_alice.len(), 1);
    assert_eq!(at_bob.len(), 1);
    for (request, event, secret, other) in [
        (&at_alice[0], &to_alice, "alice-secret", "bob-secret"),
        (&at_bob[0], &to_bob, "bob-secret", "alice-secret"),
    ] {
        assert_eq!(request.body, event.body());
        let signature = request.header_str("hare-outbox-signature").unwrap();
        assert!(verify_signature(
            secret.as_bytes(),
            &request.body,
            signature
        ));
        assert!(!verify_signature(
            other.as_bytes(),
            &request.body,
            signature
        ));
        assert_eq!(
            request.header("x-subscriber"),
            Some("Zoë ✓".as_bytes()),
            "the target's header replaces the configured one, as UTF-8 bytes"
        );
        assert_eq!(request.header_str("x-configured"), Some("kept"));
        assert_eq!(
            request.header_str("hare-outbox-event-id"),
            Some(event.id.to_string().as_str())
        );
    }
    assert_eq!(at_alice[0].path, "/alice");
    assert_eq!(at_bob[0].path, "/bob");
}

#[tokio::test]
async fn a_target_without_secret_sends_no_signature_and_custom_header_name_applies() {
    let receiver = Receiver::start(Behaviour::ok());
    let delivery = WebhookDelivery::builder()
        .with_sync_target(payload_target)
        .with_signature_header("X-Webhook-Signature")
        .build()
        .unwrap();
    delivery
        .deliver(&event_to(&receiver.url("/plain"), ""))
        .await
        .unwrap();
    delivery
        .deliver(&event_to(&receiver.url("/signed"), "k"))
        .await
        .unwrap();
    let requests = receiver.wait_for_requests(2, WAIT).await;
    let plain = requests.iter().find(|r| r.path == "/plain").unwrap();
    let signed = requests.iter().find(|r| r.path == "/signed").unwrap();
    assert_eq!(plain.header("x-webhook-signature"), None);
    assert_eq!(plain.header("hare-outbox-signature"), None);
    assert!(verify_signature(
        b"k",
        &signed.body,
        signed.header_str("x-webhook-signature").unwrap()
    ));
    assert_eq!(signed.header("hare-outbox-signature"), None);
}

#[tokio::test]
async fn failing_target_function_and_bad_target_url_fail_the_event() {
    let delivery = WebhookDelivery::builder()
        .with_target(|_event: OutboxEvent| async {
            Err::<WebhookTarget, _>(DeliveryError::new("subscription 7 not found"))
        })
        .build()
        .unwrap();
    let error = delivery
        .deliver(&event_to("http://127.0.0.1:1/", ""))
        .await
        .unwrap_err();
    assert!(
        error.chain().contains("subscription 7 not found"),
        "{}",
        error.chain()
    );

    let delivery = WebhookDelivery::builder()
        .with_sync_target(payload_target)
        .build()
        .unwrap();
    // Shown as messages show URLs: scheme and host only.
    for (bad, shown) in [
        ("ftp://example.com/x", "ftp://example.com/…"),
        ("not a url", "not a url"),
    ] {
        let error = delivery.deliver(&event_to(bad, "")).await.unwrap_err();
        assert!(error.to_string().contains(shown), "{error}");
        assert!(error.to_string().contains("http"), "{error}");
    }
}

#[tokio::test]
async fn refused_url_is_a_failure_and_nothing_is_sent() {
    let receiver = Receiver::start(Behaviour::ok());
    let asked = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let log = asked.clone();
    let delivery = WebhookDelivery::builder()
        .with_sync_target(payload_target)
        .with_allows_url(move |url| {
            log.lock().unwrap().push(url.to_string());
            url.path() != "/internal"
        })
        .build()
        .unwrap();
    let refused = event_to(&receiver.url("/internal"), "k");
    let error = delivery.deliver(&refused).await.unwrap_err();
    assert!(error.to_string().contains("allows_url"), "{error}");
    let shown = format!("http://{}/…", receiver.addr());
    assert!(error.to_string().contains(&shown), "{error}");
    assert!(!error.to_string().contains("/internal"), "{error}");
    assert_eq!(
        receiver.request_count(),
        0,
        "a refused URL is never requested"
    );

    delivery
        .deliver(&event_to(&receiver.url("/public"), "k"))
        .await
        .unwrap();
    assert_eq!(receiver.wait_for_requests(1, WAIT).await[0].path, "/public");
    assert_eq!(
        *asked.lock().unwrap(),
        vec![receiver.url("/internal"), receiver.url("/public")],
        "called before every request with the URL requested"
    );

    // The async form, on a delivery to one URL.
    let delivery = WebhookDelivery::builder()
        .with_url(receiver.url("/fixed"))
        .with_allows_url_async(|url| async move { url.host_str() != Some("127.0.0.1") })
        .build()
        .unwrap();
    let error = delivery
        .deliver(&event_to("ignored", ""))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("allows_url"), "{error}");
    assert_eq!(receiver.request_count(), 1);
}

#[tokio::test]
async fn redirect_from_a_target_is_a_failure_and_not_followed() {
    let receiver = Receiver::start(Behaviour::redirect("/elsewhere"));
    let delivery = WebhookDelivery::builder()
        .with_sync_target(payload_target)
        .build()
        .unwrap();
    let error = delivery
        .deliver(&event_to(&receiver.url("/moved"), ""))
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("redirects are not followed"),
        "{error}"
    );
    let requests = receiver.wait_for_requests(1, WAIT).await;
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].path, "/moved");
    assert!(receiver.requests_to("/elsewhere").is_empty());
}

#[tokio::test]
async fn batch_reports_carry_each_attempts_record() {
    let ok = Receiver::start(Behaviour::ok().with_body("thanks"));
    let failing = Receiver::start(Behaviour::status(500).with_body("boom\0!"));
    let long = Receiver::start(Behaviour::ok().with_body("é".repeat(10_000)));
    let slow = Receiver::start(Behaviour::delayed(Duration::from_secs(5)));
    let delivery = WebhookDelivery::builder()
        .with_sync_target(payload_target)
        .with_timeout(Duration::from_millis(300))
        .with_allows_url(|url| url.path() != "/refused")
        .build()
        .unwrap();
    let events = [
        event_to(&ok.url("/ok"), ""),
        event_to(&failing.url("/fail"), ""),
        event_to(&long.url("/long"), ""),
        event_to(&ok.url("/refused"), ""),
        event_to(&unused_local_url("/gone"), ""),
        event_to(&slow.url("/slow"), ""),
    ];
    let reports = delivery.deliver_batch_reported(&events, 6, WAIT).await;
    assert_eq!(reports.len(), events.len());
    let records: Vec<Value> = reports.iter().map(|r| r.record.clone().unwrap()).collect();

    assert!(reports[0].result.is_ok());
    assert_eq!(
        records[0],
        json!({"status_code": 200, "body": "thanks", "error": null})
    );

    assert!(reports[1].result.is_err());
    assert_eq!(records[1]["status_code"], 500);
    assert_eq!(records[1]["body"], "boom\u{FFFD}!", "NUL becomes U+FFFD");
    let error = records[1]["error"].as_str().unwrap();
    assert!(error.contains("500 Internal Server Error"), "{error}");

    assert!(reports[2].result.is_ok());
    let body = records[2]["body"].as_str().unwrap();
    assert_eq!(body.chars().count(), RESULT_TEXT_CHARS);
    assert!(body.chars().all(|c| c == 'é'));

    for (i, word) in [
        (3, "allows_url"),
        (4, "connecting failed"),
        (5, "timed out"),
    ] {
        assert!(reports[i].result.is_err(), "{i}");
        assert_eq!(records[i]["status_code"], Value::Null, "{i}");
        assert_eq!(records[i]["body"], Value::Null, "{i}");
        let error = records[i]["error"].as_str().unwrap();
        assert!(error.contains(word), "{i}: {error}");
    }
    assert_eq!(ok.requests_to("/refused").len(), 0);
}

#[tokio::test]
async fn relay_timeout_still_reports_a_record() {
    let slow = Receiver::start(Behaviour::delayed(Duration::from_secs(5)));
    let delivery = WebhookDelivery::new(slow.url("/slow")).unwrap();
    let reports = delivery
        .deliver_batch_reported(&[event_to("", "")], 1, Duration::from_millis(200))
        .await;
    assert!(reports[0].result.is_err());
    let record = reports[0].record.clone().unwrap();
    assert_eq!(record["status_code"], Value::Null);
    assert!(
        record["error"].as_str().unwrap().contains("timed out"),
        "{record}"
    );
}

#[test]
fn url_and_target_are_exclusive_and_a_target_owns_its_secret() {
    let neither = configuration_message(WebhookDelivery::builder().build());
    assert!(neither.contains("url or a target"), "{neither}");

    let both = configuration_message(
        WebhookDelivery::builder()
            .with_url("https://example.com/hook")
            .with_sync_target(payload_target)
            .build(),
    );
    assert!(both.contains("both a url"), "{both}");
    assert!(both.contains("https://example.com/…"), "{both}");

    let secret = configuration_message(
        WebhookDelivery::builder()
            .with_sync_target(payload_target)
            .with_secret("s")
            .build(),
    );
    assert!(secret.contains("WebhookTarget::with_secret"), "{secret}");

    let header = configuration_message(
        WebhookDelivery::builder()
            .with_url("https://example.com/hook")
            .with_header("bad header", "x")
            .build(),
    );
    assert!(header.contains("bad header"), "{header}");

    let url = configuration_message(WebhookDelivery::builder().with_url("ftp://x/").build());
    assert!(url.contains("ftp"), "{url}");

    WebhookDelivery::builder()
        .with_url("https://example.com/hook")
        .with_secret("s")
        .build()
        .unwrap();
}

#[test]
fn a_secret_added_to_a_built_target_delivery_is_refused_at_configuration() {
    let delivery = WebhookDelivery::builder()
        .with_sync_target(payload_target)
        .build()
        .unwrap();
    let message = configuration_message(delivery.with_secret("misplaced"));
    assert!(message.contains("WebhookTarget::with_secret"), "{message}");

    // In the builder the order does not matter: a secret before the target is refused too.
    let message = configuration_message(
        WebhookDelivery::builder()
            .with_secret("s")
            .with_target(|event| async move { payload_target(&event) })
            .build(),
    );
    assert!(message.contains("WebhookTarget::with_secret"), "{message}");

    let message = configuration_message(
        WebhookDelivery::builder()
            .with_url("https://example.com/hook")
            .with_timeout(std::time::Duration::ZERO)
            .build(),
    );
    assert!(message.contains("timeout is 0"), "{message}");
}

#[test]
fn debug_of_a_target_hides_its_secret_and_header_values() {
    let target = WebhookTarget::new("https://example.com/in")
        .with_secret("top-secret")
        .with_header("authorization", "Bearer tok");
    let text = format!("{target:?}");
    assert!(!text.contains("top-secret"), "{text}");
    assert!(!text.contains("Bearer tok"), "{text}");
    assert!(text.contains("authorization"), "{text}");
    let record = WebhookResult::default();
    assert_eq!(
        record.to_json(),
        json!({"status_code": null, "body": null, "error": null})
    );
}
