//! Round trip over real HTTP: what `WebhookDelivery` sends, the `VerifiedEvent` extractor of an
//! axum app checks and reads back, payload byte for byte; a wrong secret is answered 401.
#![cfg(feature = "axum")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use hare_outbox_core::{Delivery, OutboxEvent, ReceivedEvent};
use hare_outbox_webhook::WebhookDelivery;
use hare_outbox_webhook::receiver::{VerifiedEvent, WebhookSecret};
use serde_json::json;

#[derive(Clone)]
struct App {
    secret: WebhookSecret,
    received: Arc<Mutex<Vec<ReceivedEvent>>>,
}

impl axum::extract::FromRef<App> for WebhookSecret {
    fn from_ref(app: &App) -> WebhookSecret {
        app.secret.clone()
    }
}

async fn hook(State(app): State<App>, VerifiedEvent(event): VerifiedEvent) -> &'static str {
    app.received.lock().unwrap().push(event);
    "ok"
}

async fn serve(secret: &str) -> (String, Arc<Mutex<Vec<ReceivedEvent>>>) {
    let received = Arc::new(Mutex::new(Vec::new()));
    let app = Router::new().route("/hook", post(hook)).with_state(App {
        secret: WebhookSecret::new(secret),
        received: Arc::clone(&received),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, received)
}

fn event() -> OutboxEvent {
    let mut event = OutboxEvent::new(
        "orders.created".to_owned(),
        json!({"order": 42, "customer": "Zoë Ünal", "qty": 1.5, "note": "✓ \"q\"\n"}),
    );
    event.sequence = 1;
    event.headers = json!({"author": "ann", "attempt": 3, "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})
        .as_object()
        .unwrap()
        .clone();
    event
}

#[tokio::test]
async fn a_signed_delivery_is_read_back_exactly_and_a_wrong_secret_is_refused() {
    let (url, received) = serve("s3cret-0123456789").await;
    let sent = event();
    WebhookDelivery::new(&url)
        .unwrap()
        .with_secret("s3cret-0123456789")
        .unwrap()
        .deliver(&sent)
        .await
        .unwrap();
    let got = received
        .lock()
        .unwrap()
        .pop()
        .expect("the hook got the event");
    assert_eq!(got.id, sent.id);
    assert_eq!(got.topic, sent.topic);
    assert_eq!(got.payload, sent.body(), "byte for byte");
    assert_eq!(
        got.headers,
        sent.message_headers(),
        "the event's headers, in order"
    );
    assert_eq!(got.ordering_key, None);

    let refused = WebhookDelivery::new(&url)
        .unwrap()
        .with_secret("another-secret-0123")
        .unwrap()
        .deliver(&sent)
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("401"), "{refused}");
    assert!(received.lock().unwrap().is_empty());
}
