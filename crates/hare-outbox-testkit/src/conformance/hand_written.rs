//! Rows and tables another program made: rows holding what the library never writes are
//! dead-lettered at lease time with the reason, never delivered, and hold back their key; a table
//! a user's own migration tightened (a foreign key, NOT NULL, CHECK) refuses the enqueue with
//! `Error::Integrity` and nothing is written; a value no database can store (NUL) is refused
//! before writing.

// A suite fails its test by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use hare_outbox_core::{ColumnType, Error, ExtraColumn, Outbox, OutboxMessage, OutboxRelay};
use serde_json::json;
use uuid::Uuid;

use super::harness::{Harness, Reshape, config, drain, enqueue, outbox, plain, recording};

/// One hand-written row: `id` (`None` = NULL), topic, headers as JSON text, attempts, ordering
/// key, and the reason the relay dead-letters it with.
struct Row {
    id: Option<Uuid>,
    topic: String,
    headers: &'static str,
    attempts: i64,
    key: &'static str,
    reason: String,
}

impl Row {
    fn new(topic: &str, headers: &'static str, key: &'static str, reason: &str) -> Row {
        Row {
            id: Some(Uuid::now_v7()),
            topic: topic.to_owned(),
            headers,
            attempts: 0,
            key,
            reason: reason.to_owned(),
        }
    }
}

/// Headers that are not an object or name a header with nothing, negative attempts, a nil or NULL
/// id and a topic past 255 characters are dead-lettered with the reason; the well-formed event
/// behind each stays pending, and only the event of no key is delivered.
pub async fn hand_written_rows_are_dead_lettered_with_the_reason_and_never_delivered<H: Harness>(
    h: &H,
) {
    let outbox = outbox(h).await;
    h.reshape_outbox(Reshape::Loosen).await;
    let rows = [
        Row::new(
            "h.list",
            "[1,2]",
            "k-list",
            "invalid headers: [1,2] is not a JSON object",
        ),
        Row::new(
            "h.text",
            "\"text\"",
            "k-text",
            "invalid headers: \"text\" is not a JSON object",
        ),
        Row::new(
            "h.empty",
            "{\"\": \"x\"}",
            "k-empty",
            "invalid headers: a header name is empty",
        ),
        Row {
            attempts: -20,
            ..Row::new("attempts", "{}", "k-attempts", "attempts -20 is negative")
        },
        Row {
            id: Some(Uuid::nil()),
            ..Row::new(
                "nil.id",
                "{}",
                "k-nil",
                "id is the nil UUID 00000000-0000-0000-0000-000000000000",
            )
        },
        Row {
            id: None,
            ..Row::new("null.id", "{}", "k-null", "id is NULL")
        },
        Row::new(
            &"t".repeat(300),
            "{}",
            "k-topic",
            "topic of 300 characters is longer than 255",
        ),
    ];
    for row in &rows {
        let id = row
            .id
            .map_or_else(|| "NULL".to_owned(), |id| format!("'{id}'"));
        h.execute(&format!(
            "INSERT INTO outbox (id, topic, payload, headers, attempts, ordering_key, created_at) \
             VALUES ({id}, '{}', '{{}}', '{}', {}, '{}', '2026-01-01T00:00:00.000000Z')",
            row.topic, row.headers, row.attempts, row.key
        ))
        .await;
    }
    // Behind each hand-written row, a well-formed event of the same key; and one of no key.
    let mut conn = h.acquire().await;
    let messages = rows
        .iter()
        .map(|row| OutboxMessage::new("behind", json!({"key": row.key})).ordering_key(row.key))
        .chain([OutboxMessage::new("fine", json!({}))]);
    outbox.enqueue_many(&mut conn, messages).await.unwrap();
    drop(conn);

    let (seen, delivery) = recording();
    let relay = OutboxRelay::new(
        outbox.clone(),
        delivery,
        config("relay").with_max_delivery_attempts(3),
    )
    .unwrap();
    for _ in 0..3 {
        relay
            .poll_once()
            .await
            .expect("a hand-written row does not fail the poll");
    }
    let topics: Vec<String> = drain(&seen).into_iter().map(|e| e.topic).collect();
    assert_eq!(
        topics,
        ["fine"],
        "only the well-formed event of no held-back key goes out"
    );
    for row in &rows {
        let dead = h
            .scalar(&format!(
                "SELECT count(*) FROM outbox WHERE topic = '{}' \
                 AND dead_lettered_at IS NOT NULL AND last_error = '{}'",
                row.topic, row.reason
            ))
            .await;
        assert_eq!(dead, 1, "dead-lettered with the reason {:?}", row.reason);
        let pending = h
            .scalar(&format!(
                "SELECT count(*) FROM outbox WHERE ordering_key = '{}' AND topic = 'behind' \
                 AND published_at IS NULL AND dead_lettered_at IS NULL",
                row.key
            ))
            .await;
        assert_eq!(pending, 1, "the event behind {:?} is held back", row.reason);
    }
}

fn integrity(e: Error) -> String {
    match e {
        Error::Integrity { message, .. } => message.to_lowercase(),
        other => panic!("expected an integrity error, got {other:?}"),
    }
}

/// With a `tenant_id` referencing `tenants` and a `note` a user's migration made NOT NULL and
/// shorter than 5 characters (`note_short`): each violation is `Error::Integrity` with the
/// database's message (a foreign key; the column of a NOT NULL; the name of a CHECK), in
/// `enqueue` and `enqueue_many`, and nothing is written; a valid row is.
pub async fn foreign_key_not_null_and_check_violations_are_integrity_errors<H: Harness>(h: &H) {
    h.execute("CREATE TABLE tenants (id BIGINT PRIMARY KEY); INSERT INTO tenants VALUES (1)")
        .await;
    let table = plain("outbox")
        .with_column(
            ExtraColumn::new("tenant_id", ColumnType::BigInt)
                .unwrap()
                .references("tenants", "id")
                .unwrap(),
        )
        .unwrap()
        .with_column(ExtraColumn::new("note", ColumnType::Text).unwrap())
        .unwrap();
    let outbox = Outbox::new(h.backend(), table);
    outbox.migrate().await.unwrap();
    h.reshape_outbox(Reshape::TightenNote).await;
    let mut conn = h.acquire().await;

    let message = integrity(
        outbox
            .enqueue(
                &mut conn,
                OutboxMessage::new("a", json!(1))
                    .extra("tenant_id", 99i64)
                    .extra("note", "n"),
            )
            .await
            .unwrap_err(),
    );
    assert!(message.contains("foreign key"), "{message}");
    let message = integrity(
        outbox
            .enqueue(
                &mut conn,
                OutboxMessage::new("a", json!(1)).extra("tenant_id", 1i64),
            )
            .await
            .unwrap_err(),
    );
    assert!(
        message.contains("null") && message.contains("note"),
        "{message}"
    );
    let message = integrity(
        outbox
            .enqueue_many(
                &mut conn,
                [OutboxMessage::new("a", json!(1)).extra("note", "too long")],
            )
            .await
            .unwrap_err(),
    );
    assert!(message.contains("note_short"), "{message}");
    drop(conn);
    assert_eq!(
        h.scalar("SELECT count(*) FROM outbox").await,
        0,
        "nothing written"
    );
    enqueue(
        h,
        &outbox,
        OutboxMessage::new("a", json!(1))
            .extra("tenant_id", 1i64)
            .extra("note", "n"),
    )
    .await;
    assert_eq!(h.scalar("SELECT count(*) FROM outbox").await, 1);
}

/// A payload string holding NUL (U+0000), which PostgreSQL cannot store, is refused on every
/// backend before anything is written, naming the path of the value.
pub async fn a_nul_character_is_refused_before_writing<H: Harness>(h: &H) {
    let outbox = outbox(h).await;
    let mut conn = h.acquire().await;
    let e = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("t", json!({"note": "a\u{0}b"})),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Validation { field, message } if field == "payload" && message.contains("$.note")),
        "{e}"
    );
    drop(conn);
    assert_eq!(h.scalar("SELECT count(*) FROM outbox").await, 0);
}
