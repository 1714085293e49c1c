//! W3C trace context across the outbox (feature `otel`).
//!
//! - **Enqueue.** [`Outbox::enqueue`](crate::Outbox::enqueue), `enqueue_many` and the
//!   [`OutboxTransaction`](crate::OutboxTransaction) methods write the `traceparent` header (and
//!   `tracestate` when the context has one) of the current [`tracing`] span, as the
//!   [`tracing_opentelemetry`] layer sees it. Nothing is written when there is no such span (no
//!   span, or no OpenTelemetry layer in the subscriber), and nothing when the message already has
//!   a `traceparent` or `tracestate` header of its own (any case): an explicit header wins, and
//!   the two are never mixed from different contexts. Reading the context starts the
//!   OpenTelemetry span of the current `tracing` span, so set that span's own parent
//!   (`set_parent`) before enqueueing under it, as usual.
//! - **Relay.** For each event of a batch the relay opens a span `hare_outbox.deliver`
//!   (fields `event_id`, `topic`, `batch_size`, `outcome`) whose OpenTelemetry parent is the
//!   context of the event's `traceparent`/`tracestate` headers. The span lasts as long as the
//!   delivery of the batch the event went out in (one span per event, not per batch, so each
//!   trace gets its own); `outcome` is `delivered`, `failed` or `not_attempted`. Events without
//!   the headers get a span of a new trace.
//! - **Transport.** The headers are event headers, so every built-in delivery that carries
//!   headers carries them (Kafka and NATS headers, AMQP header table, the Redis entry's `headers`
//!   field, webhook HTTP headers, the JSON lines' `headers`). MQTT 3.1.1 messages and taskiq
//!   task messages have no event headers: the context does not reach those consumers.
//! - **Consumer.** [`ReceivedEvent::trace_context`](crate::ReceivedEvent::trace_context) (what
//!   every `reader` returns) restores the context; set it as the parent of the consumer's span
//!   with `OpenTelemetrySpanExt::set_parent`.
//!
//! The propagation format is always W3C Trace Context ([`TraceContextPropagator`]), whatever
//! global propagator the application installed.

use opentelemetry::Context;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use serde_json::{Map, Value};
use std::collections::HashMap;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::event::OutboxEvent;

/// The W3C `traceparent` header name.
pub const TRACEPARENT_HEADER: &str = "traceparent";
/// The W3C `tracestate` header name.
pub const TRACESTATE_HEADER: &str = "tracestate";

/// The `traceparent` (and `tracestate`, when not empty) headers of OpenTelemetry context `cx`,
/// name → value; empty when `cx` has no valid span context.
pub fn headers_of(cx: &Context) -> Vec<(String, String)> {
    if !cx.span().span_context().is_valid() {
        return Vec::new();
    }
    let mut carrier: HashMap<String, String> = HashMap::new();
    TraceContextPropagator::new().inject_context(cx, &mut carrier);
    [TRACEPARENT_HEADER, TRACESTATE_HEADER]
        .into_iter()
        .filter_map(|name| {
            carrier
                .remove(name)
                .filter(|v| !v.is_empty())
                .map(|v| (name.to_owned(), v))
        })
        .collect()
}

/// The headers of [`headers_of`] for the current [`tracing`] span's OpenTelemetry context.
pub fn current_headers() -> Vec<(String, String)> {
    headers_of(&tracing::Span::current().context())
}

/// The OpenTelemetry context carried by `headers` (`traceparent`, `tracestate`; names compared
/// without case). A context without a valid span when there is none or it does not parse.
pub fn extract<'a>(headers: impl IntoIterator<Item = (&'a str, &'a str)>) -> Context {
    let carrier: HashMap<String, String> = headers
        .into_iter()
        .filter_map(|(name, value)| {
            let name = name.to_ascii_lowercase();
            (name == TRACEPARENT_HEADER || name == TRACESTATE_HEADER)
                .then(|| (name, value.to_owned()))
        })
        .collect();
    if carrier.is_empty() {
        return Context::new();
    }
    TraceContextPropagator::new().extract_with_context(&Context::new(), &carrier)
}

/// Adds the current span's trace headers to `headers` unless it has either of its own.
pub(crate) fn inject_current(headers: &mut Map<String, Value>) {
    let own = headers.keys().any(|name| {
        name.eq_ignore_ascii_case(TRACEPARENT_HEADER)
            || name.eq_ignore_ascii_case(TRACESTATE_HEADER)
    });
    if own {
        return;
    }
    for (name, value) in current_headers() {
        headers.insert(name, Value::String(value));
    }
}

/// The context of an event's stored trace headers (string values only).
fn event_context(event: &OutboxEvent) -> Context {
    extract(
        event
            .headers
            .iter()
            .filter_map(|(name, value)| value.as_str().map(|v| (name.as_str(), v))),
    )
}

/// The relay's span for delivering `event` in a batch of `batch_size`, its parent the event's
/// trace context (see the [module docs](self)).
pub(crate) fn delivery_span(event: &OutboxEvent, batch_size: usize) -> tracing::Span {
    let span = tracing::info_span!(
        "hare_outbox.deliver",
        otel.kind = "producer",
        event_id = %event.id,
        topic = %event.topic,
        batch_size,
        outcome = tracing::field::Empty,
    );
    let cx = event_context(event);
    if cx.span().span_context().is_valid() {
        // No OpenTelemetry layer, or the span filtered out: nothing to link, nothing to report.
        let _ = span.set_parent(cx);
    }
    span
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn extract_reads_names_without_case_and_headers_of_writes_them_back() {
        let cx = extract([
            ("TraceParent", PARENT),
            ("TRACESTATE", "a=1,b=2"),
            ("x", "y"),
        ]);
        let sc = cx.span().span_context().clone();
        assert!(sc.is_valid() && sc.is_remote());
        assert_eq!(
            sc.trace_id().to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
        assert_eq!(
            headers_of(&cx),
            [
                ("traceparent".to_owned(), PARENT.to_owned()),
                ("tracestate".to_owned(), "a=1,b=2".to_owned())
            ]
        );
    }

    #[test]
    fn a_missing_or_malformed_traceparent_gives_no_context() {
        for headers in [
            vec![],
            vec![("traceparent", "00-zz-b7ad6b7169203331-01")],
            vec![(
                "traceparent",
                "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            )],
            vec![("tracestate", "a=1")],
        ] {
            let cx = extract(headers.clone());
            assert!(!cx.span().span_context().is_valid(), "{headers:?}");
            assert!(headers_of(&cx).is_empty(), "{headers:?}");
        }
    }
}
