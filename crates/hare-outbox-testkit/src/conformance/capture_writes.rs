//! Change capture of every kind of write, on any backend that has triggers: composite keys,
//! capture without ordering keys, rows limited by fields, multi-row statements, cascades and
//! SET NULL done by the database, upserts, link tables, statements failing after the capture
//! trigger fired, savepoints and rollbacks, quoting of names, labels and templates, and tables
//! shaped like an outbox.
//!
//! Tables are created with SQL both databases accept.

// A suite fails its test by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use hare_outbox_core::capture::{ChangeCapture, ChangePayload};
use hare_outbox_core::{Backend, JournalBackend, Outbox};
use serde_json::{Value, json};

use super::capture::{Ev, LOANS, capture_outbox, events};
use super::harness::Harness;

async fn payloads<B: JournalBackend>(outbox: &Outbox<B>) -> Vec<Value> {
    events(outbox)
        .await
        .into_iter()
        .map(|e| e.payload)
        .collect()
}

/// `[operation, pk]` of every event in order.
async fn operations<B: JournalBackend>(outbox: &Outbox<B>) -> Vec<Value> {
    payloads(outbox)
        .await
        .iter()
        .map(|p| json!([p["operation"], p["pk"]]))
        .collect()
}

/// A key of two columns is an object of them, and its values joined by `:` end the ordering
/// key of a template.
pub async fn composite_key_is_an_object_and_joins_the_ordering_key<H: Harness>(h: &H) {
    let outbox = capture_outbox(
        h,
        "CREATE TABLE versions (doc TEXT, version INTEGER, body TEXT, PRIMARY KEY (version, doc))",
    )
    .await;
    ChangeCapture::new("versions")
        .with_label("docs.Version")
        .with_payload(ChangePayload::Keys)
        .with_ordering_key(Some("{app}/{model}/{table}/{pk}"))
        .install(&outbox)
        .await
        .unwrap();
    h.execute("INSERT INTO versions VALUES ('a:b', 2, 'x')")
        .await;
    assert_eq!(
        events(&outbox).await,
        vec![Ev {
            topic: "docs.version.inserted".into(),
            payload: json!({"model": "docs.Version", "table": "versions", "operation": "inserted",
                "pk": {"version": 2, "doc": "a:b"}, "changed": null, "before": null, "after": null}),
            headers: json!({}),
            ordering_key: Some("docs/Version/versions/2:a:b".into()),
        }]
    );
}

/// Without an ordering key template, events have none.
pub async fn unordered_capture_writes_no_ordering_key<H: Harness>(h: &H) {
    let outbox = capture_outbox(h, LOANS).await;
    ChangeCapture::new("loans")
        .with_ordering_key(None::<String>)
        .install(&outbox)
        .await
        .unwrap();
    h.execute("INSERT INTO loans (id, status) VALUES (1, 'x')")
        .await;
    let events = events(&outbox).await;
    assert_eq!(events[0].ordering_key, None);
    assert_eq!(events[0].topic, "loans.inserted");
}

/// With fields and `skip_unchanged`, payloads hold those fields only and an update of other
/// columns, or to the same value, writes nothing.
pub async fn fields_limit_the_rows_and_updates_of_other_columns_write_nothing<H: Harness>(h: &H) {
    let outbox = capture_outbox(h, LOANS).await;
    ChangeCapture::new("loans")
        .with_fields(["status"])
        .with_payload(ChangePayload::BeforeAndAfter)
        .with_skip_unchanged(true)
        .install(&outbox)
        .await
        .unwrap();
    h.execute("INSERT INTO loans (id, status) VALUES (1, 'lent')")
        .await;
    h.execute("UPDATE loans SET note = 'x', fee = 2 WHERE id = 1")
        .await;
    h.execute("UPDATE loans SET status = 'lent' WHERE id = 1")
        .await;
    h.execute("UPDATE loans SET status = 'back' WHERE id = 1")
        .await;
    let payloads = payloads(&outbox).await;
    assert_eq!(payloads.len(), 2, "{payloads:?}");
    assert_eq!(payloads[0]["after"], json!({"status": "lent"}));
    assert_eq!(
        (payloads[1]["before"].clone(), payloads[1]["after"].clone()),
        (json!({"status": "lent"}), json!({"status": "back"}))
    );
}

/// Statements of several rows write one event per row.
pub async fn multi_row_update_and_delete_by_hand_written_sql<H: Harness>(h: &H) {
    let outbox = capture_outbox(h, LOANS).await;
    ChangeCapture::new("loans")
        .with_payload(ChangePayload::Keys)
        .install(&outbox)
        .await
        .unwrap();
    h.execute("INSERT INTO loans (id, status) VALUES (1, 'lent'), (2, 'lent'), (3, 'lent')")
        .await;
    h.execute("UPDATE loans SET status = upper(status) WHERE id >= 2")
        .await;
    h.execute("DELETE FROM loans WHERE id <> 2").await;
    let got = operations(&outbox).await;
    assert_eq!(got.len(), 7, "{got:?}");
    let sorted = |range: std::ops::Range<usize>| {
        let mut part = got[range].to_vec();
        part.sort_by_key(|v| v[1].as_i64());
        part
    };
    assert_eq!(
        got[..3],
        [
            json!(["inserted", 1]),
            json!(["inserted", 2]),
            json!(["inserted", 3])
        ]
    );
    assert_eq!(sorted(3..5), [json!(["updated", 2]), json!(["updated", 3])]);
    assert_eq!(sorted(5..7), [json!(["deleted", 1]), json!(["deleted", 3])]);
}

/// A delete that cascades deletes the child rows and sets another child's reference to NULL:
/// each is captured with its rows before and after.
pub async fn cascades_and_set_null_done_by_the_database_are_captured<H: Harness>(h: &H) {
    let outbox = capture_outbox(
        h,
        "CREATE TABLE readers (id INTEGER PRIMARY KEY, name TEXT);
         CREATE TABLE cards (id INTEGER PRIMARY KEY,
                             reader_id INTEGER REFERENCES readers ON DELETE CASCADE);
         CREATE TABLE notes (id INTEGER PRIMARY KEY,
                             reader_id INTEGER REFERENCES readers ON DELETE SET NULL);
         INSERT INTO readers VALUES (1, 'ann');
         INSERT INTO cards VALUES (10, 1), (11, 1);
         INSERT INTO notes VALUES (20, 1);",
    )
    .await;
    for table in ["cards", "notes"] {
        ChangeCapture::new(table)
            .with_payload(ChangePayload::BeforeAndAfter)
            .install(&outbox)
            .await
            .unwrap();
    }
    h.execute("DELETE FROM readers WHERE id = 1").await;
    let mut got: Vec<(String, Value)> = events(&outbox)
        .await
        .into_iter()
        .map(|e| (e.topic, e.payload))
        .collect();
    got.sort_by_key(|(t, p)| (t.clone(), p["pk"].as_i64()));
    assert_eq!(
        got,
        vec![
            (
                "cards.deleted".into(),
                json!({"model": "cards", "table": "cards", "operation": "deleted", "pk": 10, "changed": null,
                    "before": {"id": 10, "reader_id": 1}, "after": null})
            ),
            (
                "cards.deleted".into(),
                json!({"model": "cards", "table": "cards", "operation": "deleted", "pk": 11, "changed": null,
                    "before": {"id": 11, "reader_id": 1}, "after": null})
            ),
            (
                "notes.updated".into(),
                json!({"model": "notes", "table": "notes", "operation": "updated", "pk": 20, "changed": ["reader_id"],
                    "before": {"id": 20, "reader_id": 1}, "after": {"id": 20, "reader_id": null}})
            ),
        ]
    );
}

/// `ON CONFLICT DO UPDATE` is an update of the existing row or an insert; `DO NOTHING` on a
/// conflict writes nothing.
pub async fn upserts_capture_updated_inserted_or_nothing<H: Harness>(h: &H) {
    let outbox = capture_outbox(
        h,
        "CREATE TABLE stock (sku TEXT PRIMARY KEY, qty INTEGER);
         INSERT INTO stock VALUES ('a', 1);",
    )
    .await;
    ChangeCapture::new("stock")
        .with_payload(ChangePayload::Changes)
        .install(&outbox)
        .await
        .unwrap();
    h.execute(
        "INSERT INTO stock VALUES ('a', 5), ('b', 2)
         ON CONFLICT (sku) DO UPDATE SET qty = stock.qty + excluded.qty",
    )
    .await;
    h.execute("INSERT INTO stock VALUES ('a', 100), ('c', 3) ON CONFLICT DO NOTHING")
        .await;
    let got: Vec<Value> = payloads(&outbox)
        .await
        .into_iter()
        .map(|p| json!([p["operation"], p["pk"], p["before"], p["after"]]))
        .collect();
    assert_eq!(
        got,
        vec![
            json!(["updated", "a", {"qty": 1}, {"qty": 6}]),
            json!(["inserted", "b", null, {"sku": "b", "qty": 2}]),
            json!(["inserted", "c", null, {"sku": "c", "qty": 3}]),
        ]
    );
}

/// A link table of two foreign keys is captured as any table, its deletes by cascade too.
pub async fn a_many_to_many_link_table_is_just_a_table<H: Harness>(h: &H) {
    let outbox = capture_outbox(
        h,
        "CREATE TABLE books (id INTEGER PRIMARY KEY);
         CREATE TABLE tags (id INTEGER PRIMARY KEY);
         CREATE TABLE book_tags (
             book_id INTEGER REFERENCES books ON DELETE CASCADE,
             tag_id INTEGER REFERENCES tags ON DELETE CASCADE,
             PRIMARY KEY (book_id, tag_id));
         INSERT INTO books VALUES (1), (2); INSERT INTO tags VALUES (7);",
    )
    .await;
    ChangeCapture::new("book_tags")
        .with_label("library.BookTag")
        .with_payload(ChangePayload::Keys)
        .install(&outbox)
        .await
        .unwrap();
    h.execute("INSERT INTO book_tags VALUES (1, 7), (2, 7)")
        .await;
    h.execute("DELETE FROM book_tags WHERE book_id = 1").await;
    h.execute("DELETE FROM tags WHERE id = 7").await;
    let got: Vec<(String, Value, Option<String>)> = events(&outbox)
        .await
        .into_iter()
        .map(|e| (e.topic, e.payload["pk"].clone(), e.ordering_key))
        .collect();
    let row = |operation: &str, book: i64| {
        (
            format!("library.booktag.{operation}"),
            json!({"book_id": book, "tag_id": 7}),
            Some(format!("library.BookTag:{book}:7")),
        )
    };
    assert_eq!(
        got,
        vec![
            row("inserted", 1),
            row("inserted", 2),
            row("deleted", 1),
            row("deleted", 2)
        ]
    );
}

/// A statement failed by a later trigger after capture's had written, inside a transaction
/// (undone to a savepoint) or alone, leaves no event; a savepoint rolled back takes its events.
pub async fn a_statement_failing_after_the_trigger_fired_leaves_no_event<H: Harness>(h: &H) {
    let outbox = capture_outbox(h, LOANS).await;
    ChangeCapture::new("loans")
        .with_payload(ChangePayload::Keys)
        .install(&outbox)
        .await
        .unwrap();
    h.refuse_bad_loans().await;
    let backend = outbox.backend();
    let mut tx = backend.begin().await.unwrap();
    H::execute_on(
        &mut tx,
        "INSERT INTO loans (id, status) VALUES (1, 'ok'); SAVEPOINT s1;
         INSERT INTO loans (id, status) VALUES (2, 'ok'); ROLLBACK TO SAVEPOINT s1;
         SAVEPOINT before_bad",
    )
    .await;
    let failed = H::try_execute_on(
        &mut tx,
        "INSERT INTO loans (id, status) VALUES (3, 'ok'), (4, 'bad')",
    )
    .await;
    assert!(failed.is_err());
    H::execute_on(
        &mut tx,
        "ROLLBACK TO SAVEPOINT before_bad; INSERT INTO loans (id, status) VALUES (5, 'ok')",
    )
    .await;
    backend.commit(tx).await.unwrap();
    assert_eq!(
        operations(&outbox).await,
        [json!(["inserted", 1]), json!(["inserted", 5])]
    );
    let mut conn = h.acquire().await;
    let failed = H::try_execute_on(
        &mut conn,
        "INSERT INTO loans (id, status) VALUES (6, 'bad')",
    );
    assert!(failed.await.is_err(), "a failed statement in autocommit");
    drop(conn);
    assert_eq!(events(&outbox).await.len(), 2);
}

/// Rolling back to a savepoint takes the events written since it; a rolled-back transaction
/// leaves none.
pub async fn rollback_to_savepoint_takes_that_parts_events<H: Harness>(h: &H) {
    let outbox = capture_outbox(h, LOANS).await;
    ChangeCapture::new("loans")
        .with_payload(ChangePayload::Keys)
        .install(&outbox)
        .await
        .unwrap();
    let backend = outbox.backend();
    let mut tx = backend.begin().await.unwrap();
    H::execute_on(
        &mut tx,
        "INSERT INTO loans (id, status) VALUES (1, 'a'); SAVEPOINT s1;
         INSERT INTO loans (id, status) VALUES (2, 'a');
         UPDATE loans SET status = 'b' WHERE id = 1;
         ROLLBACK TO SAVEPOINT s1; INSERT INTO loans (id, status) VALUES (3, 'a')",
    )
    .await;
    backend.commit(tx).await.unwrap();
    assert_eq!(
        operations(&outbox).await,
        vec![json!(["inserted", 1]), json!(["inserted", 3])]
    );
    let mut tx = backend.begin().await.unwrap();
    H::execute_on(&mut tx, "DELETE FROM loans").await;
    backend.rollback(tx).await.unwrap();
    assert_eq!(events(&outbox).await.len(), 2);
}

/// Quotes, comment markers, dollar quotes and backslashes in table and column names, labels and
/// topic templates end up as text in the events and break nothing; the status is current.
pub async fn quotes_in_names_labels_and_templates_cannot_break_out<H: Harness>(h: &H) {
    let outbox = capture_outbox(
        h,
        r#"CREATE TABLE "odd ""table"" 'x'" (
            "id'); DROP TABLE hare_outbox; --" INTEGER PRIMARY KEY,
            "a""b'c*/\" TEXT,
            "$hare_outbox$" TEXT)"#,
    )
    .await;
    let label = "app.M'); DROP TABLE hare_outbox; -- */ $hare_outbox$ \\'";
    ChangeCapture::new("odd \"table\" 'x'")
        .with_label(label)
        .with_topic("t'{model}\\{{x}}")
        .with_payload(ChangePayload::BeforeAndAfter)
        .install(&outbox)
        .await
        .unwrap();
    h.execute(r#"INSERT INTO "odd ""table"" 'x'" VALUES (1, 'v''"', '$$')"#)
        .await;
    h.execute(r#"UPDATE "odd ""table"" 'x'" SET "a""b'c*/\" = 'w'"#)
        .await;
    let events = events(&outbox).await;
    assert_eq!(events.len(), 2);
    assert_eq!(
        events[0].topic,
        "t'M'); DROP TABLE hare_outbox; -- */ $hare_outbox$ \\'\\{x}"
    );
    assert_eq!(events[0].payload["model"], json!(label));
    assert_eq!(
        events[0].payload["after"],
        json!({"id'); DROP TABLE hare_outbox; --": 1, "a\"b'c*/\\": "v'\"", "$hare_outbox$": "$$"})
    );
    assert_eq!(events[1].payload["changed"], json!(["a\"b'c*/\\"]));
    assert_eq!(
        events[0].ordering_key.as_deref(),
        Some(format!("{label}:1").as_str())
    );
    let status = outbox.capture_status().await.unwrap();
    assert_eq!(status[0].table, "odd \"table\" 'x'");
    assert!(status[0].is_current(), "{:?}", status[0].drift);
}

/// A table with every outbox column is refused: capturing an outbox would write events about
/// events. Nothing is installed.
pub async fn another_outbox_shaped_table_is_refused<H: Harness>(h: &H) {
    let outbox = capture_outbox(h, "").await;
    h.execute("CREATE TABLE other_outbox AS SELECT * FROM hare_outbox")
        .await;
    let e = ChangeCapture::new("other_outbox")
        .install(&outbox)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("is an outbox table"), "{e}");
    assert_eq!(h.triggers().await, 0);
}
