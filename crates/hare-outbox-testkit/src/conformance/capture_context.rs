//! The transaction's context on captured events (seed 001 § ChangeExtension): payload keys
//! merged into every envelope of the transaction next to its headers, values kept as given,
//! and keys of the envelope's own refused before anything is stored.

// A suite fails its test by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use hare_outbox_core::capture::{CaptureContext, ChangeCapture, ChangePayload, ENVELOPE_KEYS};
use hare_outbox_core::{Backend, Error};
use serde_json::{Value, json};

use super::capture::{Ev, capture_outbox, events};
use super::harness::Harness;

/// A context with headers and payload keys (a list, an object holding a null, a null): every
/// insert, update and delete the transaction captures carries the keys next to the envelope's
/// own, exactly as given, and the headers; the next transaction's events carry neither. A
/// headers-only context (a JSON value) adds no key.
pub async fn context_payload_keys_are_merged_into_every_captured_envelope<H: Harness>(h: &H) {
    let outbox = capture_outbox(
        h,
        "CREATE TABLE tickets (id INTEGER PRIMARY KEY, state TEXT NOT NULL)",
    )
    .await;
    ChangeCapture::new("tickets")
        .with_label("desk.Ticket")
        .with_topic("ticket.{operation}")
        .with_payload(ChangePayload::BeforeAndAfter)
        .install(&outbox)
        .await
        .unwrap();
    let added = json!({
        "recipients": ["ann@example.com", "bob@example.com"],
        "scope": {"team": null, "region": "eu"},
        "reason": null,
    });
    let backend = outbox.backend();
    let mut tx = backend.begin().await.unwrap();
    outbox
        .set_context(
            &mut tx,
            CaptureContext::new()
                .with_headers(json!({"author": "ann"}))
                .with_payload(added.clone()),
        )
        .await
        .unwrap();
    H::execute_on(
        &mut tx,
        "INSERT INTO tickets VALUES (1, 'open');
         UPDATE tickets SET state = 'closed' WHERE id = 1;
         DELETE FROM tickets WHERE id = 1;",
    )
    .await;
    backend.commit(tx).await.unwrap();

    let mut tx = backend.begin().await.unwrap();
    outbox
        .set_context(&mut tx, json!({"author": "bob"}))
        .await
        .unwrap();
    H::execute_on(&mut tx, "INSERT INTO tickets VALUES (2, 'open')").await;
    backend.commit(tx).await.unwrap();
    h.execute("INSERT INTO tickets VALUES (3, 'open')").await;

    let envelope = |operation: &str, pk: i64, changed: Value, before: Value, after: Value| {
        json!({"model": "desk.Ticket", "table": "tickets", "operation": operation, "pk": pk,
            "changed": changed, "before": before, "after": after})
    };
    let with_added = |mut envelope: Value| {
        for (key, value) in added.as_object().unwrap() {
            envelope[key] = value.clone();
        }
        envelope
    };
    let ev = |topic: &str, payload: Value, author: Option<&str>, pk: i64| Ev {
        topic: topic.into(),
        payload,
        headers: author.map_or(json!({}), |a| json!({"author": a})),
        ordering_key: Some(format!("desk.Ticket:{pk}")),
    };
    let open = json!({"id": 1, "state": "open"});
    let closed = json!({"id": 1, "state": "closed"});
    assert_eq!(
        events(&outbox).await,
        [
            ev(
                "ticket.inserted",
                with_added(envelope(
                    "inserted",
                    1,
                    Value::Null,
                    Value::Null,
                    open.clone()
                )),
                Some("ann"),
                1
            ),
            ev(
                "ticket.updated",
                with_added(envelope(
                    "updated",
                    1,
                    json!(["state"]),
                    open,
                    closed.clone()
                )),
                Some("ann"),
                1
            ),
            ev(
                "ticket.deleted",
                with_added(envelope("deleted", 1, Value::Null, closed, Value::Null)),
                Some("ann"),
                1
            ),
            ev(
                "ticket.inserted",
                envelope(
                    "inserted",
                    2,
                    Value::Null,
                    Value::Null,
                    json!({"id": 2, "state": "open"})
                ),
                Some("bob"),
                2
            ),
            ev(
                "ticket.inserted",
                envelope(
                    "inserted",
                    3,
                    Value::Null,
                    Value::Null,
                    json!({"id": 3, "state": "open"})
                ),
                None,
                3
            ),
        ]
    );
}

/// Payload keys of the envelope's own (each of them), an empty key, and a payload that is not
/// an object are refused as `Validation` on field `payload` naming the key; the refused call
/// stores nothing, so the context set before it still applies to the transaction's events.
pub async fn context_payload_keys_of_the_envelopes_own_are_refused<H: Harness>(h: &H) {
    let outbox = capture_outbox(h, "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)").await;
    ChangeCapture::new("notes")
        .with_payload(ChangePayload::Keys)
        .install(&outbox)
        .await
        .unwrap();
    let backend = outbox.backend();
    let mut tx = backend.begin().await.unwrap();
    let first = CaptureContext::new()
        .with_headers(json!({"author": "ann"}))
        .with_payload(json!({"recipients": ["ann@example.com"]}));
    outbox.set_context(&mut tx, first).await.unwrap();
    for key in ENVELOPE_KEYS {
        let bad = CaptureContext::new()
            .with_headers(json!({"author": "mallory"}))
            .with_payload(json!({"extra": 1, *key: "forged"}));
        match outbox.set_context(&mut tx, bad).await {
            Err(Error::Validation { field, message }) => {
                assert_eq!(field, "payload");
                assert!(message.contains(&format!("{key:?}")), "{key}: {message}");
            }
            other => panic!("{key}: expected a validation error, got {other:?}"),
        }
    }
    for (bad, expected) in [
        (json!({"": 1}), "empty"),
        (json!(["recipients"]), "not a JSON object"),
    ] {
        match outbox
            .set_context(&mut tx, CaptureContext::new().with_payload(bad))
            .await
        {
            Err(Error::Validation { field, message }) => {
                assert_eq!(field, "payload");
                assert!(message.contains(expected), "{message}");
            }
            other => panic!("expected a validation error, got {other:?}"),
        }
    }
    H::execute_on(&mut tx, "INSERT INTO notes VALUES (1, 'hello')").await;
    backend.commit(tx).await.unwrap();
    let events = events(&outbox).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].headers, json!({"author": "ann"}));
    assert_eq!(events[0].payload["recipients"], json!(["ann@example.com"]));
    assert_eq!(events[0].payload["operation"], "inserted");
    assert_eq!(events[0].payload["model"], "notes");
}
