//! WebhookDelivery against a real HTTP receiver on loopback (hare_outbox_testkit::http).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::error::Error as _;
use std::time::{Duration, Instant};

use hare_outbox_core::{Delivery, EVENT_ID_HEADER, Error, OutboxEvent, TOPIC_HEADER};
use hare_outbox_testkit::http::{Behaviour, Receiver, unused_local_url};
use hare_outbox_webhook::{DEFAULT_SIGNATURE_HEADER, WebhookDelivery, sign, verify_signature};
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Map, Value, json};
use sha2::Sha256;

const WAIT: Duration = Duration::from_secs(10);

fn event(topic: &str, payload: Value, headers: Value) -> OutboxEvent {
    let headers: Map<String, Value> = match headers {
        Value::Object(map) => map,
        Value::Null => Map::new(),
        other => panic!("headers must be an object, not {other}"),
    };
    OutboxEvent {
        sequence: 1,
        headers,
        ..OutboxEvent::new(topic.to_owned(), payload)
    }
}

fn simple_event() -> OutboxEvent {
    event("orders.created", json!({"order": 42}), Value::Null)
}

#[tokio::test]
async fn body_and_headers_arrive_byte_exact() {
    let receiver = Receiver::start(Behaviour::ok());
    let delivery = WebhookDelivery::new(receiver.url("/hooks/orders"))
        .unwrap()
        .with_header("x-configured", "yes")
        .unwrap()
        .with_header("x-region", "Zürich")
        .unwrap()
        .with_header("author", "replaced by the event")
        .unwrap();
    let e = event(
        "orders.created",
        json!({"order": 42, "customer": "Zoë Ünal", "lines": [{"sku": "A-1", "qty": 1.5}], "note": "✓ \"quoted\""}),
        json!({"author": "Zoë Ünal ✓", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "attempt": 3}),
    );

    delivery.deliver(&e).await.unwrap();

    let requests = receiver.wait_for_requests(1, WAIT).await;
    assert_eq!(requests.len(), 1);
    let r = &requests[0];
    assert_eq!(r.method, "POST");
    assert_eq!(r.path, "/hooks/orders");
    assert_eq!(r.body, e.body());
    assert_eq!(r.body_json(), e.payload);
    assert_eq!(r.header("content-type"), Some(&b"application/json"[..]));
    assert_eq!(r.header(EVENT_ID_HEADER), Some(e.id.to_string().as_bytes()));
    assert_eq!(r.header(TOPIC_HEADER), Some(&b"orders.created"[..]));
    assert_eq!(r.header("author"), Some("Zoë Ünal ✓".as_bytes()));
    assert_eq!(
        r.header_all("author").len(),
        1,
        "the event header replaces the configured one"
    );
    assert_eq!(
        r.header_str("traceparent"),
        Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    );
    assert_eq!(r.header_str("attempt"), Some("3"));
    assert_eq!(r.header_str("x-configured"), Some("yes"));
    assert_eq!(r.header("x-region"), Some("Zürich".as_bytes()));
    assert_eq!(
        r.header(DEFAULT_SIGNATURE_HEADER),
        None,
        "no secret, no signature"
    );
}

#[tokio::test]
async fn signature_verifies_with_an_independent_hmac() {
    let receiver = Receiver::start(Behaviour::ok());
    let secret = b"whsec_4f1c9e".to_vec();
    let delivery = WebhookDelivery::new(receiver.url("/signed"))
        .unwrap()
        .with_secret(secret.clone())
        .unwrap();
    let e = event(
        "billing.paid",
        json!({"invoice": "INV-7", "amount": "12.50", "ok": true}),
        Value::Null,
    );

    delivery.deliver(&e).await.unwrap();

    let r = &receiver.wait_for_requests(1, WAIT).await[0];
    let header = r
        .header_str(DEFAULT_SIGNATURE_HEADER)
        .expect("signature header");

    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&secret).unwrap();
    mac.update(&r.body);
    let expected = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
    assert_eq!(header, expected);
    assert_eq!(header, sign(&secret, &e.body()));

    assert!(verify_signature(&secret, &r.body, header));
    let mut tampered = r.body.clone();
    tampered[2] ^= 0x01;
    assert!(!verify_signature(&secret, &tampered, header));
    assert!(!verify_signature(b"another secret", &r.body, header));
}

#[tokio::test]
async fn custom_signature_header_name() {
    let receiver = Receiver::start(Behaviour::ok());
    let delivery = WebhookDelivery::new(receiver.url("/custom"))
        .unwrap()
        .with_signature_header("X-Webhook-Signature")
        .unwrap()
        .with_secret("k")
        .unwrap();
    let e = simple_event();

    delivery.deliver(&e).await.unwrap();

    let r = &receiver.wait_for_requests(1, WAIT).await[0];
    assert_eq!(
        r.header_str("x-webhook-signature"),
        Some(sign(b"k", &e.body()).as_str())
    );
    assert_eq!(r.header(DEFAULT_SIGNATURE_HEADER), None);
}

#[tokio::test]
async fn signature_header_wins_over_an_event_header_of_that_name() {
    let receiver = Receiver::start(Behaviour::ok());
    let delivery = WebhookDelivery::new(receiver.url("/h"))
        .unwrap()
        .with_secret("k")
        .unwrap();
    let e = event(
        "t",
        json!(1),
        json!({"hare-outbox-signature": "sha256=forged"}),
    );

    delivery.deliver(&e).await.unwrap();

    let r = &receiver.wait_for_requests(1, WAIT).await[0];
    assert_eq!(r.header_all(DEFAULT_SIGNATURE_HEADER).len(), 1);
    assert!(verify_signature(
        b"k",
        &r.body,
        r.header_str(DEFAULT_SIGNATURE_HEADER).unwrap()
    ));
}

#[tokio::test]
async fn server_error_fails_naming_url_status_and_body() {
    let long_body = "x".repeat(1000);
    let receiver = Receiver::start(Behaviour::status(500).with_body(long_body));
    let url = receiver.url("/hook");
    let delivery = WebhookDelivery::new(url.clone()).unwrap();

    let err = delivery.deliver(&simple_event()).await.unwrap_err();

    let message = err.to_string();
    let shown = format!("webhook http://{}/… answered 500", receiver.addr());
    assert!(message.contains(&shown), "{message}");
    assert!(message.contains(&"x".repeat(200)), "{message}");
    assert!(!message.contains(&"x".repeat(201)), "{message}");
    assert_eq!(receiver.request_count(), 1);
}

#[tokio::test]
async fn any_2xx_succeeds_and_a_scripted_failure_recovers() {
    let receiver = Receiver::start(Behaviour::statuses([503, 204]));
    let delivery = WebhookDelivery::new(receiver.url("/hook")).unwrap();
    let e = simple_event();

    let err = delivery.deliver(&e).await.unwrap_err();
    assert!(err.to_string().contains("503 Service Unavailable"), "{err}");
    delivery.deliver(&e).await.unwrap();
    delivery.deliver(&e).await.unwrap(); // the last scripted status repeats

    receiver.set_behaviour(Behaviour::status(404).with_body("no such hook"));
    let err = delivery.deliver(&e).await.unwrap_err();
    assert!(
        // `hook`, a segment of the URL's path, is cut from the echoed body.
        err.to_string().ends_with("404 Not Found: no such ***"),
        "{err}"
    );
    assert_eq!(receiver.request_count(), 4);
}

#[tokio::test]
async fn redirect_is_a_failure_and_never_followed() {
    let receiver = Receiver::start(Behaviour::redirect("/elsewhere"));
    let delivery = WebhookDelivery::new(receiver.url("/hook")).unwrap();

    let err = delivery.deliver(&simple_event()).await.unwrap_err();

    let message = err.to_string();
    assert!(message.contains("302"), "{message}");
    let location = format!("location: http://{}/…", receiver.addr());
    assert!(message.contains(&location), "{message}");
    let requests = receiver.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].path, "/hook");
    assert!(receiver.requests_to("/elsewhere").is_empty());
}

#[tokio::test]
async fn slower_answer_than_the_timeout_fails() {
    let receiver = Receiver::start(Behaviour::delayed(Duration::from_secs(5)));
    let delivery = WebhookDelivery::new(receiver.url("/slow"))
        .unwrap()
        .with_timeout(Duration::from_millis(200));

    let started = Instant::now();
    let err = delivery.deliver(&simple_event()).await.unwrap_err();

    assert!(
        started.elapsed() < Duration::from_secs(4),
        "took {:?}",
        started.elapsed()
    );
    assert!(err.to_string().contains("timed out"), "{err}");
    assert!(
        err.source().is_some(),
        "the reqwest error is kept as the source"
    );
    assert_eq!(receiver.request_count(), 1);
}

#[tokio::test]
async fn connection_refused_fails_with_source() {
    let url = unused_local_url("/hook");
    let delivery = WebhookDelivery::new(url.clone()).unwrap();

    let err = delivery.deliver(&simple_event()).await.unwrap_err();

    let shown = url.trim_end_matches("/hook").to_owned() + "/…";
    assert!(err.to_string().contains(&shown), "{err}");
    assert!(!err.chain().contains("/hook"), "{}", err.chain());
    assert!(
        err.source().is_some(),
        "the reqwest error is kept as the source"
    );
    assert!(err.chain().len() > err.to_string().len(), "{}", err.chain());
}

#[tokio::test]
async fn batch_keeps_order_and_concurrency_limit() {
    let receiver = Receiver::start(Behaviour::delayed(Duration::from_millis(100)));
    let delivery = WebhookDelivery::new(receiver.url("/batch")).unwrap();
    // Events 3 and 17 carry a header HTTP cannot send: their results must be errors, in place.
    let events: Vec<OutboxEvent> = (0..20)
        .map(|i| {
            let headers = if i == 3 || i == 17 {
                json!({"x-bad": "line\nbreak"})
            } else {
                json!({"x-index": i})
            };
            event("batch.item", json!({"i": i}), headers)
        })
        .collect();

    let results = delivery
        .deliver_batch(&events, 4, Duration::from_secs(10))
        .await;

    assert_eq!(results.len(), 20);
    for (i, (result, e)) in results.iter().zip(&events).enumerate() {
        if i == 3 || i == 17 {
            let err = result.as_ref().unwrap_err();
            assert!(err.to_string().contains(&e.id.to_string()), "{err}");
            assert!(err.to_string().contains("x-bad"), "{err}");
        } else {
            assert!(result.is_ok(), "event {i}: {result:?}");
        }
    }
    let requests = receiver.wait_for_requests(18, WAIT).await;
    assert_eq!(requests.len(), 18);
    let mut indices: Vec<i64> = requests
        .iter()
        .map(|r| r.header_str("x-index").unwrap().parse().unwrap())
        .collect();
    indices.sort_unstable();
    let expected: Vec<i64> = (0..20).filter(|i| *i != 3 && *i != 17).collect();
    assert_eq!(indices, expected);
    let max = receiver.max_in_flight();
    assert!((2..=4).contains(&max), "max in flight {max}");
}

#[tokio::test]
async fn unsendable_event_header_is_a_delivery_error_without_a_request() {
    let receiver = Receiver::start(Behaviour::ok());
    let delivery = WebhookDelivery::new(receiver.url("/h")).unwrap();

    for headers in [
        json!({"x-bad": "a\r\nx-injected: 1"}),
        json!({"bad name": "v"}),
        json!({"content-length": "1"}),
    ] {
        let e = event("t", json!(1), headers.clone());
        let err = delivery.deliver(&e).await.unwrap_err();
        assert!(
            err.to_string().contains(&e.id.to_string()),
            "{headers}: {err}"
        );
    }
    assert_eq!(receiver.request_count(), 0);
}

fn configuration_message(result: hare_outbox_core::Result<WebhookDelivery>) -> String {
    match result {
        Err(Error::Configuration(message)) => message,
        other => panic!("expected a configuration error, got {other:?}"),
    }
}

#[test]
fn invalid_configuration_is_refused_naming_the_value() {
    let message = configuration_message(WebhookDelivery::new("not a url"));
    assert!(message.contains("not a url"), "{message}");
    let message = configuration_message(WebhookDelivery::new("ftp://example.com/x"));
    assert!(message.contains("ftp"), "{message}");
    let message = configuration_message(WebhookDelivery::new("/relative/path"));
    assert!(
        message.contains("/…") && message.contains("relative URL"),
        "{message}"
    );

    let ok = || WebhookDelivery::new("https://example.com/hook").unwrap();
    let message = configuration_message(ok().with_header("bad name", "v"));
    assert!(message.contains("bad name"), "{message}");
    let message = configuration_message(ok().with_header("", "v"));
    assert!(message.contains("\"\""), "{message}");
    let message = configuration_message(ok().with_header("x-a", "line\nbreak"));
    assert!(message.contains("x-a"), "{message}");
    let message = configuration_message(ok().with_header("Content-Length", "3"));
    assert!(message.contains("Content-Length"), "{message}");
    let message = configuration_message(ok().with_signature_header("sig nature"));
    assert!(message.contains("sig nature"), "{message}");

    assert!(ok().with_header("x-ünïcode-value", "v").is_err());
    assert!(ok().with_header("x-a", "ünïcode ✓").is_ok());
    assert!(WebhookDelivery::new("http://127.0.0.1:8080/").is_ok());
}
