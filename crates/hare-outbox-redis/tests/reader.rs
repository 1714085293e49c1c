//! Round trip against a real Redis: what `RedisStreamsDelivery` appends, `reader::read_entry`
//! reads back byte for byte, with `sequence` and `created_at`; the id composes with the inbox.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{connect, del, event, pg_outbox, unique, url};
use hare_outbox_core::{Delivery, Inbox};
use hare_outbox_postgres::PgBackend;
use hare_outbox_redis::{RedisStreamsDelivery, reader};
use redis::streams::StreamRangeReply;
use serde_json::json;

#[tokio::test]
async fn what_the_delivery_appends_the_reader_reads_back_exactly() {
    let mut conn = connect(&url()).await;
    let topic = unique("reader");
    let delivery = RedisStreamsDelivery::new(&url()).unwrap();
    let mut keyed = event(
        &topic,
        Some("order:42"),
        json!({"order": 42, "customer": "Zoë Ünal", "qty": 1.5, "note": "✓ \"q\"\n"}),
        json!({"author": "Zoë ✓", "attempt": 3, "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}),
    );
    keyed.sequence = 9_007_199_254_740_993; // beyond an f64's exact integers
    let unkeyed = event(&topic, None, json!([1, null, "x"]), serde_json::Value::Null);
    for result in delivery
        .deliver_batch(
            &[keyed.clone(), unkeyed.clone()],
            2,
            std::time::Duration::from_secs(10),
        )
        .await
    {
        result.unwrap();
    }

    let reply: StreamRangeReply = redis::cmd("XRANGE")
        .arg(&topic)
        .arg("-")
        .arg("+")
        .query_async(&mut conn)
        .await
        .unwrap();
    let read: Vec<_> = reply
        .ids
        .iter()
        .map(|entry| reader::read_entry(entry).unwrap())
        .collect();
    assert_eq!(read.len(), 2);
    for (sent, got) in [&keyed, &unkeyed].into_iter().zip(&read) {
        assert_eq!(got.id, sent.id);
        assert_eq!(got.topic, sent.topic);
        assert_eq!(got.ordering_key, sent.ordering_key);
        // The entry holds the headers as one JSON object: names and values exact, names sorted.
        let mut headers = sent.message_headers();
        headers.sort();
        assert_eq!(got.headers, headers);
        assert_eq!(got.payload, sent.body(), "byte for byte");
        assert_eq!(got.json().unwrap(), sent.payload);
        assert_eq!(got.sequence, Some(sent.sequence));
        assert_eq!(got.created_at, Some(sent.created_at));
    }
    assert_eq!(read[0].header("author"), Some("Zoë ✓"));
    assert_eq!(read[0].header("attempt"), Some("3"));

    // The reader's id is what the inbox records: once per event, however often it is read.
    let (schema, _outbox) = pg_outbox().await;
    let inbox = Inbox::new(PgBackend::new(schema.pool.clone()), "inbox").unwrap();
    inbox.migrate().await.unwrap();
    for (round, expected) in [(1, true), (2, false)] {
        let mut tx = schema.pool.begin().await.unwrap();
        let first = inbox
            .process_once(&mut tx, "billing", read[0].id)
            .await
            .unwrap();
        assert_eq!(first, expected, "round {round}");
        tx.commit().await.unwrap();
    }
    del(&mut conn, &[&topic]).await;
}
