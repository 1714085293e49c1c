//! W3C trace context end to end: a span around an enqueue (SQLite) writes `traceparent`, the
//! relay's delivery span is its child, and the Redis reader restores it; without the `otel`
//! feature, or without a span, nothing is written.
#![cfg(all(feature = "sqlite", feature = "redis", feature = "testing"))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use hare_outbox::sqlite::SqliteBackend;
use hare_outbox::testing::RecordingDelivery;
use hare_outbox::{Outbox, OutboxMessage, OutboxRelay, OutboxTable, RelayConfig};
use hare_outbox_testkit::sqlite::TestDb;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde_json::json;
use tracing::subscriber::DefaultGuard;
use tracing_subscriber::layer::SubscriberExt;

/// A subscriber with an OpenTelemetry layer exporting to memory, the default of this thread
/// (the tests run on a current-thread runtime, so the relay's work sees it too).
fn traced() -> (InMemorySpanExporter, SdkTracerProvider, DefaultGuard) {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("trace-context-test")));
    let guard = tracing::subscriber::set_default(subscriber);
    (exporter, provider, guard)
}

async fn outbox() -> (TestDb, Outbox<SqliteBackend>) {
    let db = TestDb::new(2).await;
    let outbox = Outbox::new(
        SqliteBackend::new(db.pool.clone()),
        OutboxTable::parse("outbox").unwrap(),
    );
    outbox.migrate().await.unwrap();
    (db, outbox)
}

fn finished(exporter: &InMemorySpanExporter, name: &str) -> Vec<SpanData> {
    exporter
        .get_finished_spans()
        .unwrap()
        .into_iter()
        .filter(|s| s.name == name)
        .collect()
}

#[cfg(feature = "otel")]
mod with_feature {
    use super::*;
    use hare_outbox::redis::{RedisStreamsDelivery, reader};
    use opentelemetry::trace::{SpanId, TraceContextExt, TraceId};
    use redis::streams::StreamRangeReply;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    fn header<'a>(event: &'a hare_outbox::OutboxEvent, name: &str) -> Option<&'a str> {
        event.headers.get(name).and_then(|v| v.as_str())
    }

    fn redis_url() -> String {
        std::env::var("HARE_OUTBOX_TEST_REDIS_URL")
            .unwrap_or_else(|_| "redis://127.0.0.1:6379/0".to_owned())
    }

    #[tokio::test]
    async fn the_enqueuing_span_is_the_parent_of_the_delivery_and_of_the_consumer() {
        let (exporter, provider, _guard) = traced();
        let (db, outbox) = outbox().await;

        // A request span around the enqueue, in the handler's transaction.
        let request = tracing::info_span!("POST /orders");
        let (trace_id, span_id) = {
            let cx = request.context();
            let sc = cx.span().span_context().clone();
            (sc.trace_id(), sc.span_id())
        };
        assert_ne!(trace_id, TraceId::INVALID);
        let events = {
            let _entered = request.enter();
            let mut tx = outbox.begin().await.unwrap();
            let one = tx
                .enqueue(OutboxMessage::new("orders.created", json!({"id": 1})))
                .await
                .unwrap();
            let many = tx
                .enqueue_many([
                    OutboxMessage::new("orders.created", json!({"id": 2})),
                    OutboxMessage::new("orders.created", json!({"id": 3})),
                ])
                .await
                .unwrap();
            tx.commit().await.unwrap();
            let mut events = vec![one];
            events.extend(many);
            events
        };
        drop(request);
        let expected = format!("00-{trace_id}-{span_id}-01");
        for event in &events {
            assert_eq!(header(event, "traceparent"), Some(expected.as_str()));
            // An empty trace state is not written.
            assert_eq!(header(event, "tracestate"), None);
        }
        // What is stored is what was returned.
        let stored = outbox.get(events[0].id).await.unwrap().unwrap();
        assert_eq!(header(&stored, "traceparent"), Some(expected.as_str()));

        let stream = format!("hare-trace-{}", events[0].id);
        // The relay delivers to a Redis stream; each event's delivery span is a child of the
        // request span, in the same trace.
        let delivery = RedisStreamsDelivery::new(&redis_url())
            .unwrap()
            .with_stream(stream.clone())
            .unwrap();
        let relay = OutboxRelay::new(outbox.clone(), delivery, RelayConfig::default()).unwrap();
        assert_eq!(relay.drain_for_test().await.unwrap().delivered, 3);
        provider.force_flush().unwrap();
        let deliveries = finished(&exporter, "hare_outbox.deliver");
        assert_eq!(deliveries.len(), 3, "one span per delivered event");
        for span in &deliveries {
            assert_eq!(span.span_context.trace_id(), trace_id);
            assert_eq!(span.parent_span_id, span_id);
            assert_ne!(span.span_context.span_id(), span_id);
            let outcome = span
                .attributes
                .iter()
                .find(|kv| kv.key.as_str() == "outcome")
                .map(|kv| kv.value.to_string());
            assert_eq!(outcome.as_deref(), Some("delivered"));
        }

        // The consumer reads the entries back and restores the same parent.
        let mut conn = redis::Client::open(redis_url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let reply: StreamRangeReply = redis::cmd("XRANGE")
            .arg(&stream)
            .arg("-")
            .arg("+")
            .query_async(&mut conn)
            .await
            .unwrap();
        let _: i64 = redis::cmd("DEL")
            .arg(&stream)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(reply.ids.len(), 3);
        for entry in &reply.ids {
            let received = reader::read_entry(entry).unwrap();
            assert_eq!(received.header("traceparent"), Some(expected.as_str()));
            let cx = received.trace_context();
            let sc = cx.span().span_context().clone();
            assert!(sc.is_remote());
            assert_eq!(sc.trace_id(), trace_id);
            assert_eq!(sc.span_id(), span_id);

            // A consumer span under it joins the trace.
            let handle = tracing::info_span!("handle");
            handle.set_parent(cx).unwrap();
            drop(handle);
        }
        provider.force_flush().unwrap();
        let handled = finished(&exporter, "handle");
        assert_eq!(handled.len(), 3);
        assert!(
            handled
                .iter()
                .all(|s| s.span_context.trace_id() == trace_id && s.parent_span_id == span_id)
        );
        drop(db);
    }

    #[tokio::test]
    async fn an_explicit_header_wins_and_trace_state_travels() {
        let (_exporter, _provider, _guard) = traced();
        let (_db, outbox) = outbox().await;
        let own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let request = tracing::info_span!("request");
        let _entered = request.enter();
        let mut conn = outbox.backend().pool().acquire().await.unwrap();
        let explicit = outbox
            .enqueue(
                &mut conn,
                OutboxMessage::new("t", json!({})).header("TraceParent", own),
            )
            .await
            .unwrap();
        assert_eq!(header(&explicit, "TraceParent"), Some(own));
        assert_eq!(header(&explicit, "traceparent"), None, "not written twice");
        // A trace state of its own keeps the span's pair out too: never mixed.
        let state_only = outbox
            .enqueue(
                &mut conn,
                OutboxMessage::new("t", json!({})).header("tracestate", "mine=1"),
            )
            .await
            .unwrap();
        assert_eq!(header(&state_only, "traceparent"), None);
        assert_eq!(header(&state_only, "tracestate"), Some("mine=1"));

        // A context with a trace state: both headers, restored as they were.
        let parent = hare_outbox::trace_context::extract([
            ("traceparent", own),
            ("tracestate", "vendor=abc,other=1"),
        ]);
        let child = tracing::info_span!("child");
        child.set_parent(parent).unwrap();
        let event = {
            let _entered = child.enter();
            outbox
                .enqueue(&mut conn, OutboxMessage::new("t", json!({})))
                .await
                .unwrap()
        };
        let traceparent = header(&event, "traceparent").unwrap();
        assert!(
            traceparent.starts_with("00-0af7651916cd43dd8448eb211c80319c-"),
            "{traceparent}"
        );
        assert_ne!(traceparent, own, "the child span's own id");
        assert_eq!(header(&event, "tracestate"), Some("vendor=abc,other=1"));
    }

    #[tokio::test]
    async fn without_a_span_nothing_is_written_and_the_delivery_span_starts_a_trace() {
        let (exporter, provider, _guard) = traced();
        let (_db, outbox) = outbox().await;
        let mut conn = outbox.backend().pool().acquire().await.unwrap();
        let event = outbox
            .enqueue(&mut conn, OutboxMessage::new("t", json!({})))
            .await
            .unwrap();
        drop(conn);
        assert_eq!(event.headers.get("traceparent"), None);
        assert!(
            hare_outbox::ReceivedEvent::new(event.id, "t", None, Vec::new(), Vec::new())
                .trace_context()
                .span()
                .span_context()
                .trace_id()
                == TraceId::INVALID
        );

        let delivery = RecordingDelivery::new();
        let relay = OutboxRelay::new(outbox, delivery.clone(), RelayConfig::default()).unwrap();
        assert_eq!(relay.drain_for_test().await.unwrap().delivered, 1);
        provider.force_flush().unwrap();
        let spans = finished(&exporter, "hare_outbox.deliver");
        assert_eq!(spans.len(), 1);
        assert_eq!(spans[0].parent_span_id, SpanId::INVALID, "a root span");
    }
}

/// The same trace through a webhook: the HTTP request carries `traceparent`, and the receiver's
/// `read_request` gives the consumer the request span's context back.
#[cfg(all(feature = "otel", feature = "webhook"))]
#[tokio::test]
async fn a_webhook_request_carries_the_trace_to_the_receiver() {
    use hare_outbox::webhook::WebhookDelivery;
    use hare_outbox::webhook::receiver::read_request;
    use hare_outbox::webhook::reqwest::header::{HeaderMap, HeaderName, HeaderValue};
    use hare_outbox_testkit::http::{Behaviour, Receiver};
    use opentelemetry::trace::TraceContextExt;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    let (_exporter, _provider, _guard) = traced();
    let (_db, outbox) = outbox().await;
    let request = tracing::info_span!("POST /orders");
    let sc = request.context().span().span_context().clone();
    {
        let _entered = request.enter();
        let mut tx = outbox.begin().await.unwrap();
        tx.enqueue(OutboxMessage::new("orders.created", json!({"id": 1})))
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }
    let receiver = Receiver::start(Behaviour::ok());
    let secret = b"trace-secret".to_vec();
    let delivery = WebhookDelivery::new(receiver.url("/hooks"))
        .unwrap()
        .with_secret(secret.clone())
        .unwrap();
    let relay = OutboxRelay::new(outbox, delivery, RelayConfig::default()).unwrap();
    assert_eq!(relay.drain_for_test().await.unwrap().delivered, 1);
    let requests = receiver.requests();
    assert_eq!(requests.len(), 1);
    let mut headers = HeaderMap::new();
    for (name, value) in &requests[0].headers {
        headers.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_bytes(value).unwrap(),
        );
    }
    let received = read_request(&secret, &headers, &requests[0].body).unwrap();
    let restored = received.trace_context().span().span_context().clone();
    assert!(restored.is_remote());
    assert_eq!(restored.trace_id(), sc.trace_id());
    assert_eq!(restored.span_id(), sc.span_id());
}

/// Without the feature a span with an OpenTelemetry layer writes nothing and the relay opens no
/// delivery span.
#[cfg(not(feature = "otel"))]
#[tokio::test]
async fn without_the_feature_nothing_is_written() {
    let (exporter, provider, _guard) = traced();
    let (_db, outbox) = outbox().await;
    let request = tracing::info_span!("request");
    let event = {
        let _entered = request.enter();
        let mut tx = outbox.begin().await.unwrap();
        let event = tx
            .enqueue(OutboxMessage::new("t", json!({})))
            .await
            .unwrap();
        tx.commit().await.unwrap();
        event
    };
    drop(request);
    assert!(event.headers.is_empty(), "{:?}", event.headers);
    let relay = OutboxRelay::new(outbox, RecordingDelivery::new(), RelayConfig::default()).unwrap();
    assert_eq!(relay.drain_for_test().await.unwrap().delivered, 1);
    provider.force_flush().unwrap();
    assert!(finished(&exporter, "hare_outbox.deliver").is_empty());
    assert_eq!(finished(&exporter, "request").len(), 1, "the layer works");
}
