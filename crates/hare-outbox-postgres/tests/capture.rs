//! Change capture by triggers on a real PostgreSQL server, beyond the shared suite
//! (`hare_outbox_testkit::conformance::capture`): composite keys, every kind of write the
//! database does (cascades, upserts, multi-row statements), failed statements and savepoints,
//! drift of types and disabled triggers, quoting, other schemas, outbox-shaped tables.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hare_outbox_core::capture::{CaptureDrift, ChangeCapture, ChangePayload};
use hare_outbox_core::{Outbox, OutboxTable};
use hare_outbox_postgres::PgBackend;
use hare_outbox_testkit::pg::TestSchema;
use serde_json::{Value, json};
use sqlx::{AssertSqlSafe, PgPool, Row};

struct Db {
    schema: TestSchema,
    outbox: Outbox<PgBackend>,
}

impl Db {
    async fn new(ddl: &str) -> Db {
        let schema = TestSchema::new(10).await;
        let outbox = Outbox::new(PgBackend::new(schema.pool.clone()), OutboxTable::default());
        outbox.migrate().await.unwrap();
        exec(&schema.pool, ddl).await;
        Db { schema, outbox }
    }

    fn pool(&self) -> &PgPool {
        &self.schema.pool
    }

    async fn exec(&self, sql: &str) {
        exec(self.pool(), sql).await;
    }

    async fn events(&self) -> Vec<Ev> {
        events(self.pool()).await
    }

    async fn payloads(&self) -> Vec<Value> {
        self.events().await.into_iter().map(|e| e.payload).collect()
    }

    async fn triggers(&self) -> i64 {
        sqlx::query_scalar(
            "SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = current_schema() AND NOT t.tgisinternal",
        )
        .fetch_one(self.pool())
        .await
        .unwrap()
    }

    async fn drop(self) {
        self.schema.drop_schema().await;
    }
}

async fn exec(pool: &PgPool, sql: &str) {
    if sql.is_empty() {
        return;
    }
    sqlx::raw_sql(AssertSqlSafe(sql.to_owned()))
        .execute(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// One stored event, `occurred_at` checked for its form and removed from the payload.
#[derive(Debug, Clone, PartialEq)]
struct Ev {
    topic: String,
    payload: Value,
    headers: Value,
    ordering_key: Option<String>,
}

async fn events(pool: &PgPool) -> Vec<Ev> {
    let rows = sqlx::query(
        "SELECT id, topic, payload, headers, ordering_key, created_at FROM hare_outbox ORDER BY sequence",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    rows.iter()
        .map(|row| {
            let id: uuid::Uuid = row.get("id");
            assert_eq!(id.get_version_num(), 7, "event id {id} is not a UUID v7");
            let mut payload: Value = row.get("payload");
            let occurred = payload
                .as_object_mut()
                .and_then(|p| p.remove("occurred_at"))
                .expect("occurred_at");
            check_iso_utc(occurred.as_str().expect("occurred_at is text"));
            Ev {
                topic: row.get("topic"),
                payload,
                headers: row.get("headers"),
                ordering_key: row.get("ordering_key"),
            }
        })
        .collect()
}

/// `2026-10-06T12:00:00+00:00` or `2026-10-06T12:00:00.123456+00:00`.
fn check_iso_utc(text: &str) {
    assert!(
        text.ends_with("+00:00") && (text.len() == 25 || text.len() == 32),
        "{text}"
    );
    chrono::DateTime::parse_from_rfc3339(text).unwrap_or_else(|e| panic!("{text}: {e}"));
}

const LOANS: &str = "CREATE TABLE loans (
    id int PRIMARY KEY,
    status text NOT NULL,
    fee numeric(10,2) NOT NULL DEFAULT 0,
    reader_id int,
    note text
)";

#[tokio::test]
async fn composite_key_is_an_object_and_joins_the_ordering_key() {
    let db = Db::new(
        "CREATE TABLE versions (doc text, version int, body text, PRIMARY KEY (version, doc))",
    )
    .await;
    ChangeCapture::new("versions")
        .with_label("docs.Version")
        .with_payload(ChangePayload::Keys)
        .with_ordering_key(Some("{app}/{model}/{table}/{pk}"))
        .install(&db.outbox)
        .await
        .unwrap();
    db.exec("INSERT INTO versions VALUES ('a:b', 2, 'x')").await;
    assert_eq!(
        db.events().await,
        vec![Ev {
            topic: "docs.version.inserted".into(),
            payload: json!({"model": "docs.Version", "table": "versions", "operation": "inserted",
                "pk": {"version": 2, "doc": "a:b"}, "changed": null, "before": null, "after": null}),
            headers: json!({}),
            ordering_key: Some("docs/Version/versions/2:a:b".into()),
        }]
    );
    db.drop().await;
}

#[tokio::test]
async fn unordered_capture_writes_no_ordering_key() {
    let db = Db::new(LOANS).await;
    ChangeCapture::new("loans")
        .with_ordering_key(None::<String>)
        .install(&db.outbox)
        .await
        .unwrap();
    db.exec("INSERT INTO loans (id, status) VALUES (1, 'x')")
        .await;
    let events = db.events().await;
    assert_eq!(events[0].ordering_key, None);
    assert_eq!(events[0].topic, "loans.inserted");
    db.drop().await;
}

#[tokio::test]
async fn fields_limit_the_rows_and_updates_of_other_columns_write_nothing() {
    let db = Db::new(LOANS).await;
    ChangeCapture::new("loans")
        .with_fields(["status"])
        .with_payload(ChangePayload::BeforeAndAfter)
        .with_skip_unchanged(true)
        .install(&db.outbox)
        .await
        .unwrap();
    db.exec("INSERT INTO loans (id, status) VALUES (1, 'lent')")
        .await;
    db.exec("UPDATE loans SET note = 'x', fee = 2 WHERE id = 1")
        .await;
    db.exec("UPDATE loans SET status = 'lent' WHERE id = 1")
        .await; // same value: no change
    db.exec("UPDATE loans SET status = 'back' WHERE id = 1")
        .await;
    let payloads = db.payloads().await;
    assert_eq!(payloads.len(), 2, "{payloads:?}");
    assert_eq!(payloads[0]["after"], json!({"status": "lent"}));
    assert_eq!(
        (payloads[1]["before"].clone(), payloads[1]["after"].clone()),
        (json!({"status": "lent"}), json!({"status": "back"}))
    );
    db.drop().await;
}

#[tokio::test]
async fn multi_row_update_and_delete_by_hand_written_sql() {
    let db = Db::new(LOANS).await;
    ChangeCapture::new("loans")
        .with_payload(ChangePayload::Keys)
        .install(&db.outbox)
        .await
        .unwrap();
    db.exec("INSERT INTO loans (id, status) SELECT g, 'lent' FROM generate_series(1, 3) g")
        .await;
    db.exec("UPDATE loans SET status = 'late' WHERE id >= 2")
        .await;
    db.exec("DELETE FROM loans WHERE id <> 2").await;
    let got: Vec<(String, Value)> = db
        .events()
        .await
        .into_iter()
        .map(|e| (e.topic, e.payload["pk"].clone()))
        .collect();
    let mut updates: Vec<Value> = got[3..5].iter().map(|(_, pk)| pk.clone()).collect();
    updates.sort_by_key(|v| v.as_i64());
    let mut deletes: Vec<Value> = got[5..].iter().map(|(_, pk)| pk.clone()).collect();
    deletes.sort_by_key(|v| v.as_i64());
    assert_eq!(got.len(), 7);
    assert!(got[..3].iter().all(|(t, _)| t == "loans.inserted"));
    assert!(got[3..5].iter().all(|(t, _)| t == "loans.updated"));
    assert!(got[5..].iter().all(|(t, _)| t == "loans.deleted"));
    assert_eq!(updates, vec![json!(2), json!(3)]);
    assert_eq!(deletes, vec![json!(1), json!(3)]);
    db.drop().await;
}

#[tokio::test]
async fn cascades_and_set_null_done_by_the_database_are_captured() {
    let db = Db::new(
        "CREATE TABLE readers (id int PRIMARY KEY, name text);
         CREATE TABLE cards (id int PRIMARY KEY, reader_id int REFERENCES readers ON DELETE CASCADE);
         CREATE TABLE notes (id int PRIMARY KEY, reader_id int REFERENCES readers ON DELETE SET NULL);
         INSERT INTO readers VALUES (1, 'ann');
         INSERT INTO cards VALUES (10, 1), (11, 1);
         INSERT INTO notes VALUES (20, 1);",
    )
    .await;
    for table in ["cards", "notes"] {
        ChangeCapture::new(table)
            .with_payload(ChangePayload::BeforeAndAfter)
            .install(&db.outbox)
            .await
            .unwrap();
    }
    db.exec("DELETE FROM readers WHERE id = 1").await;
    let mut got: Vec<(String, Value)> = db
        .events()
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
    db.drop().await;
}

#[tokio::test]
async fn upserts_capture_updated_inserted_or_nothing() {
    let db = Db::new(
        "CREATE TABLE stock (sku text PRIMARY KEY, qty int);
         INSERT INTO stock VALUES ('a', 1);",
    )
    .await;
    ChangeCapture::new("stock")
        .with_payload(ChangePayload::Changes)
        .install(&db.outbox)
        .await
        .unwrap();
    db.exec(
        "INSERT INTO stock VALUES ('a', 5), ('b', 2)
         ON CONFLICT (sku) DO UPDATE SET qty = stock.qty + excluded.qty",
    )
    .await;
    db.exec("INSERT INTO stock VALUES ('a', 100), ('c', 3) ON CONFLICT DO NOTHING")
        .await;
    let got: Vec<Value> = db
        .payloads()
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
    db.drop().await;
}

#[tokio::test]
async fn a_many_to_many_link_table_is_just_a_table() {
    let db = Db::new(
        "CREATE TABLE books (id int PRIMARY KEY);
         CREATE TABLE tags (id int PRIMARY KEY);
         CREATE TABLE book_tags (
             book_id int REFERENCES books ON DELETE CASCADE,
             tag_id int REFERENCES tags ON DELETE CASCADE,
             PRIMARY KEY (book_id, tag_id));
         INSERT INTO books VALUES (1), (2); INSERT INTO tags VALUES (7);",
    )
    .await;
    ChangeCapture::new("book_tags")
        .with_label("library.BookTag")
        .with_payload(ChangePayload::Keys)
        .install(&db.outbox)
        .await
        .unwrap();
    db.exec("INSERT INTO book_tags VALUES (1, 7), (2, 7)").await;
    db.exec("DELETE FROM book_tags WHERE book_id = 1").await;
    db.exec("DELETE FROM tags WHERE id = 7").await;
    let got: Vec<(String, Value, Option<String>)> = db
        .events()
        .await
        .into_iter()
        .map(|e| (e.topic, e.payload["pk"].clone(), e.ordering_key))
        .collect();
    assert_eq!(
        got,
        vec![
            (
                "library.booktag.inserted".into(),
                json!({"book_id": 1, "tag_id": 7}),
                Some("library.BookTag:1:7".into())
            ),
            (
                "library.booktag.inserted".into(),
                json!({"book_id": 2, "tag_id": 7}),
                Some("library.BookTag:2:7".into())
            ),
            (
                "library.booktag.deleted".into(),
                json!({"book_id": 1, "tag_id": 7}),
                Some("library.BookTag:1:7".into())
            ),
            (
                "library.booktag.deleted".into(),
                json!({"book_id": 2, "tag_id": 7}),
                Some("library.BookTag:2:7".into())
            ),
        ]
    );
    db.drop().await;
}

#[tokio::test]
async fn a_statement_failing_after_the_trigger_fired_leaves_no_event() {
    let db = Db::new(LOANS).await;
    ChangeCapture::new("loans")
        .install(&db.outbox)
        .await
        .unwrap();
    // A later AFTER trigger (names sort after ours) fails the statement once ours has written.
    db.exec(
        "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN IF NEW.status = 'bad' THEN RAISE EXCEPTION 'refused'; END IF; RETURN NULL; END $$;
         CREATE TRIGGER zz_refuse AFTER INSERT ON loans FOR EACH ROW EXECUTE FUNCTION refuse();",
    )
    .await;
    let mut tx = db.pool().begin().await.unwrap();
    sqlx::query("INSERT INTO loans (id, status) VALUES (1, 'ok')")
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query("SAVEPOINT before_bad")
        .execute(&mut *tx)
        .await
        .unwrap();
    let failed = sqlx::query("INSERT INTO loans (id, status) VALUES (2, 'ok'), (3, 'bad')")
        .execute(&mut *tx)
        .await;
    assert!(failed.is_err());
    sqlx::query("ROLLBACK TO SAVEPOINT before_bad")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let pks: Vec<Value> = db
        .payloads()
        .await
        .iter()
        .map(|p| p["pk"].clone())
        .collect();
    assert_eq!(pks, vec![json!(1)]);
    // A failed statement in autocommit leaves nothing either.
    assert!(
        sqlx::query("INSERT INTO loans (id, status) VALUES (4, 'bad')")
            .execute(db.pool())
            .await
            .is_err()
    );
    assert_eq!(db.events().await.len(), 1);
    db.drop().await;
}

#[tokio::test]
async fn rollback_to_savepoint_takes_that_parts_events() {
    let db = Db::new(LOANS).await;
    ChangeCapture::new("loans")
        .with_payload(ChangePayload::Keys)
        .install(&db.outbox)
        .await
        .unwrap();
    let mut tx = db.pool().begin().await.unwrap();
    for sql in [
        "INSERT INTO loans (id, status) VALUES (1, 'a')",
        "SAVEPOINT s1",
        "INSERT INTO loans (id, status) VALUES (2, 'a')",
        "UPDATE loans SET status = 'b' WHERE id = 1",
        "ROLLBACK TO SAVEPOINT s1",
        "INSERT INTO loans (id, status) VALUES (3, 'a')",
    ] {
        sqlx::query(AssertSqlSafe(sql))
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    let got: Vec<Value> = db
        .payloads()
        .await
        .iter()
        .map(|p| json!([p["operation"], p["pk"]]))
        .collect();
    assert_eq!(got, vec![json!(["inserted", 1]), json!(["inserted", 3])]);
    // A rolled-back transaction leaves nothing.
    let mut tx = db.pool().begin().await.unwrap();
    sqlx::query("DELETE FROM loans")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(db.events().await.len(), 2);
    db.drop().await;
}

#[tokio::test]
async fn status_reports_drift() {
    let db = Db::new(&format!(
        "{LOANS}; CREATE TABLE other (id int PRIMARY KEY);"
    ))
    .await;
    ChangeCapture::new("loans")
        .install(&db.outbox)
        .await
        .unwrap();
    ChangeCapture::new("other")
        .install(&db.outbox)
        .await
        .unwrap();
    let all = db.outbox.capture_status().await.unwrap();
    assert_eq!(
        all.iter().map(|s| s.table.as_str()).collect::<Vec<_>>(),
        vec!["loans", "other"]
    );
    assert!(all.iter().all(|s| s.is_current()));
    assert_eq!(all[0].columns.len(), 5);
    assert_eq!(all[0].columns[2].type_name, "numeric(10,2)");

    db.exec(
        "ALTER TABLE loans ADD COLUMN due date;
         ALTER TABLE loans DROP COLUMN note;
         ALTER TABLE loans ALTER COLUMN reader_id TYPE bigint;
         ALTER TABLE other DISABLE TRIGGER ALL;",
    )
    .await;
    let all = db.outbox.capture_status().await.unwrap();
    assert_eq!(
        all[0].drift,
        vec![
            CaptureDrift::ColumnTypeChanged {
                column: "reader_id".into(),
                installed: "integer".into(),
                current: "bigint".into()
            },
            CaptureDrift::ColumnDropped {
                column: "note".into()
            },
            CaptureDrift::ColumnAdded {
                column: "due".into()
            },
        ]
    );
    assert_eq!(all[1].drift, vec![CaptureDrift::TriggerDisabled]);
    // Installing again brings it up to date.
    ChangeCapture::new("loans")
        .install(&db.outbox)
        .await
        .unwrap();
    db.exec("DROP TABLE other").await;
    let all = db.outbox.capture_status().await.unwrap();
    assert!(all[0].is_current(), "{:?}", all[0].drift);
    assert_eq!(all[1].drift, vec![CaptureDrift::TableMissing]);
    assert!(
        ChangeCapture::new("other")
            .uninstall(&db.outbox)
            .await
            .unwrap()
    );
    assert_eq!(db.outbox.capture_status().await.unwrap().len(), 1);
    db.drop().await;
}

#[tokio::test]
async fn quotes_in_names_labels_and_templates_cannot_break_out() {
    let db = Db::new(
        r#"CREATE TABLE "odd ""table"" 'x'" (
            "id'); DROP TABLE hare_outbox; --" int PRIMARY KEY,
            "a""b'c\" text,
            "$hare_outbox$" text)"#,
    )
    .await;
    let label = "app.M'); DROP TABLE hare_outbox; -- $hare_outbox$ \\'";
    ChangeCapture::new("odd \"table\" 'x'")
        .with_label(label)
        .with_topic("t'{model}\\{{x}}")
        .with_payload(ChangePayload::BeforeAndAfter)
        .install(&db.outbox)
        .await
        .unwrap();
    db.exec(r#"INSERT INTO "odd ""table"" 'x'" VALUES (1, 'v''"', '$$')"#)
        .await;
    db.exec(r#"UPDATE "odd ""table"" 'x'" SET "a""b'c\" = 'w'"#)
        .await;
    let events = db.events().await;
    assert_eq!(events.len(), 2);
    assert_eq!(
        events[0].topic,
        "t'M'); DROP TABLE hare_outbox; -- $hare_outbox$ \\'\\{x}"
    );
    assert_eq!(events[0].payload["model"], json!(label));
    assert_eq!(
        events[0].payload["after"],
        json!({"id'); DROP TABLE hare_outbox; --": 1, "a\"b'c\\": "v'\"", "$hare_outbox$": "$$"})
    );
    assert_eq!(events[1].payload["changed"], json!(["a\"b'c\\"]));
    assert_eq!(
        events[0].ordering_key.as_deref(),
        Some(format!("{label}:1").as_str())
    );
    let status = db.outbox.capture_status().await.unwrap();
    assert_eq!(status[0].table, "odd \"table\" 'x'");
    assert!(status[0].is_current());
    db.drop().await;
}

#[tokio::test]
async fn a_capture_in_another_schema_writes_to_the_qualified_outbox() {
    let db = Db::new("").await;
    let other = format!("{}_b", db.schema.name);
    db.exec(&format!(
        "CREATE SCHEMA \"{other}\"; CREATE TABLE \"{other}\".items (id int PRIMARY KEY, v text)"
    ))
    .await;
    ChangeCapture::new("items")
        .with_schema(other.clone())
        .with_payload(ChangePayload::Keys)
        .install(&db.outbox)
        .await
        .unwrap();
    // Written from a session whose search path does not hold the outbox.
    let mut conn = db.pool().acquire().await.unwrap();
    sqlx::query(AssertSqlSafe(format!("SET search_path TO \"{other}\"")))
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::query("INSERT INTO items VALUES (1, 'x')")
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::query(AssertSqlSafe(format!(
        "SET search_path TO \"{}\"",
        db.schema.name
    )))
    .execute(&mut *conn)
    .await
    .unwrap();
    drop(conn);
    assert_eq!(db.events().await[0].topic, "items.inserted");
    let status = db.outbox.capture_status().await.unwrap();
    assert_eq!(status[0].schema.as_deref(), Some(other.as_str()));
    assert!(
        ChangeCapture::new("items")
            .with_schema(other.clone())
            .uninstall(&db.outbox)
            .await
            .unwrap()
    );
    db.exec(&format!("DROP SCHEMA \"{other}\" CASCADE")).await;
    db.drop().await;
}

#[tokio::test]
async fn another_outbox_shaped_table_is_refused() {
    let db = Db::new("").await;
    db.exec("CREATE TABLE other_outbox (LIKE hare_outbox INCLUDING ALL)")
        .await;
    let e = ChangeCapture::new("other_outbox")
        .install(&db.outbox)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("is an outbox table"), "{e}");
    assert_eq!(db.triggers().await, 0);
    db.drop().await;
}

#[tokio::test]
async fn one_trigger_per_capture_and_postgres_type_names() {
    let db = Db::new(LOANS).await;
    let capture = ChangeCapture::new("loans");
    capture.install(&db.outbox).await.unwrap();
    capture.install(&db.outbox).await.unwrap();
    assert_eq!(db.triggers().await, 1);
    let status = capture.status(&db.outbox).await.unwrap().unwrap();
    assert_eq!(status.columns[2].type_name, "numeric(10,2)");
    db.drop().await;
}
