//! Change capture by triggers on a real PostgreSQL server (DESIGN §6; seed 001 § ChangeCapture):
//! the envelope and payload modes, transaction context, every kind of write the database does,
//! per-row order under concurrent writers, install checks, status and drift.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hare_outbox_core::capture::{CaptureDrift, ChangeCapture, ChangePayload, RowOperation};
use hare_outbox_core::{
    Error, FnDelivery, Outbox, OutboxEvent, OutboxRelay, OutboxTable, RelayConfig,
};
use hare_outbox_postgres::PgBackend;
use hare_outbox_testkit::pg::TestSchema;
use serde_json::{Value, json};
use sha2::Digest;
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
async fn envelope_of_insert_update_delete() {
    let db = Db::new(LOANS).await;
    ChangeCapture::new("loans")
        .with_label("library.Loan")
        .install(&db.outbox)
        .await
        .unwrap();
    db.exec("INSERT INTO loans (id, status, reader_id) VALUES (7, 'lent', 3)")
        .await;
    db.exec("UPDATE loans SET status = 'returned' WHERE id = 7")
        .await;
    db.exec("DELETE FROM loans WHERE id = 7").await;
    let row = json!({"id": 7, "status": "lent", "fee": "0.00", "reader_id": 3, "note": null});
    let returned =
        json!({"id": 7, "status": "returned", "fee": "0.00", "reader_id": 3, "note": null});
    assert_eq!(
        db.events().await,
        vec![
            Ev {
                topic: "library.loan.inserted".into(),
                payload: json!({"model": "library.Loan", "operation": "inserted", "pk": 7,
                    "changed": null, "before": null, "after": row}),
                headers: json!({}),
                ordering_key: Some("library.Loan:7".into()),
            },
            Ev {
                topic: "library.loan.updated".into(),
                payload: json!({"model": "library.Loan", "operation": "updated", "pk": 7,
                    "changed": ["status"], "before": null, "after": returned}),
                headers: json!({}),
                ordering_key: Some("library.Loan:7".into()),
            },
            Ev {
                topic: "library.loan.deleted".into(),
                payload: json!({"model": "library.Loan", "operation": "deleted", "pk": 7,
                    "changed": null, "before": returned, "after": null}),
                headers: json!({}),
                ordering_key: Some("library.Loan:7".into()),
            },
        ]
    );
    db.drop().await;
}

#[tokio::test]
async fn payload_modes_keys_before_and_after_changes() {
    let db = Db::new(LOANS).await;
    let capture = ChangeCapture::new("loans").with_label("library.Loan");
    let script = "INSERT INTO loans (id, status, reader_id) VALUES (1, 'lent', 3);
        UPDATE loans SET status = 'returned', fee = 1.5 WHERE id = 1;
        DELETE FROM loans WHERE id = 1;";
    let full = json!({"id": 1, "status": "lent", "fee": "0.00", "reader_id": 3, "note": null});
    let after = json!({"id": 1, "status": "returned", "fee": "1.50", "reader_id": 3, "note": null});
    let expected = [
        (
            ChangePayload::Keys,
            [
                (json!(null), json!(null)),
                (json!(null), json!(null)),
                (json!(null), json!(null)),
            ],
        ),
        (
            ChangePayload::BeforeAndAfter,
            [
                (json!(null), full.clone()),
                (full.clone(), after.clone()),
                (after.clone(), json!(null)),
            ],
        ),
        (
            ChangePayload::Changes,
            [
                (json!(null), full.clone()),
                (
                    json!({"status": "lent", "fee": "0.00"}),
                    json!({"status": "returned", "fee": "1.50"}),
                ),
                (after.clone(), json!(null)),
            ],
        ),
    ];
    for (mode, rows) in expected {
        db.exec("TRUNCATE hare_outbox").await;
        capture
            .clone()
            .with_payload(mode)
            .install(&db.outbox)
            .await
            .unwrap();
        db.exec(script).await;
        let payloads = db.payloads().await;
        let got: Vec<(Value, Value)> = payloads
            .iter()
            .map(|p| (p["before"].clone(), p["after"].clone()))
            .collect();
        assert_eq!(got, rows.to_vec(), "{mode:?}");
        assert_eq!(payloads[1]["changed"], json!(["status", "fee"]), "{mode:?}");
        assert_eq!(payloads[0]["changed"], json!(null));
    }
    db.drop().await;
}

#[tokio::test]
async fn changes_mode_writes_the_journal_of_seed_000() {
    let db = Db::new(
        "CREATE TABLE sales_orders (
            id int PRIMARY KEY, status text, prepaid numeric(12,2) DEFAULT 0, paid_at timestamptz,
            eta_date date, updated_at timestamptz DEFAULT now())",
    )
    .await;
    ChangeCapture::new("sales_orders")
        .with_label("erp.sales_order")
        .with_topic("doc.{operation}")
        .with_payload(ChangePayload::Changes)
        .with_exclude(["updated_at"])
        .with_operations([RowOperation::Update])
        .with_skip_unchanged(true)
        .install(&db.outbox)
        .await
        .unwrap();
    db.exec("INSERT INTO sales_orders (id, status) VALUES (22, 'confirmed')")
        .await;
    let mut tx = db.pool().begin().await.unwrap();
    db.outbox
        .set_context(&mut tx, json!({"author": "Администратор"}))
        .await
        .unwrap();
    sqlx::query(
        "UPDATE sales_orders SET prepaid = 1200, paid_at = '2026-11-13 17:20:00+03', updated_at = now() WHERE id = 22",
    )
    .execute(&mut *tx)
    .await
    .unwrap();
    sqlx::query(
        "UPDATE sales_orders SET status = 'in_production', eta_date = '2026-12-01' WHERE id = 22",
    )
    .execute(&mut *tx)
    .await
    .unwrap();
    // Only the excluded column changes: no event.
    sqlx::query("UPDATE sales_orders SET updated_at = now() + interval '1 s' WHERE id = 22")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let events = db.events().await;
    assert_eq!(
        events,
        vec![
            Ev {
                topic: "doc.updated".into(),
                payload: json!({"model": "erp.sales_order", "operation": "updated", "pk": 22,
                    "changed": ["prepaid", "paid_at"],
                    "before": {"prepaid": "0.00", "paid_at": null},
                    "after": {"prepaid": "1200.00", "paid_at": "2026-11-13T14:20:00+00:00"}}),
                headers: json!({"author": "Администратор"}),
                ordering_key: Some("erp.sales_order:22".into()),
            },
            Ev {
                topic: "doc.updated".into(),
                payload: json!({"model": "erp.sales_order", "operation": "updated", "pk": 22,
                    "changed": ["status", "eta_date"],
                    "before": {"status": "confirmed", "eta_date": null},
                    "after": {"status": "in_production", "eta_date": "2026-12-01"}}),
                headers: json!({"author": "Администратор"}),
                ordering_key: Some("erp.sales_order:22".into()),
            },
        ]
    );
    db.drop().await;
}

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
            payload: json!({"model": "docs.Version", "operation": "inserted",
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
async fn a_key_over_255_characters_keeps_its_start_and_ends_with_its_sha256() {
    let db = Db::new("CREATE TABLE docs (path text PRIMARY KEY)").await;
    ChangeCapture::new("docs")
        .with_label("app.Doc")
        .with_payload(ChangePayload::Keys)
        .install(&db.outbox)
        .await
        .unwrap();
    let short = "é".repeat(247); // "app.Doc:" + 247 = 255 characters: kept as is
    let long = "ключ/".repeat(60);
    for path in [&short, &long] {
        sqlx::query("INSERT INTO docs VALUES ($1)")
            .bind(path)
            .execute(db.pool())
            .await
            .unwrap();
    }
    let keys: Vec<String> = db
        .events()
        .await
        .into_iter()
        .map(|e| e.ordering_key.unwrap())
        .collect();
    assert_eq!(keys[0], format!("app.Doc:{short}"));
    let whole = format!("app.Doc:{long}");
    let expected = format!(
        "{}#{}",
        whole.chars().take(190).collect::<String>(),
        hex::encode(sha2::Sha256::digest(whole.as_bytes()))
    );
    assert_eq!(keys[1], expected);
    assert_eq!(keys[1].chars().count(), 255);
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
async fn context_headers_and_tenant_from_the_row() {
    let db = Db::new(
        "CREATE TABLE invoices (id int PRIMARY KEY, tenant_id text NOT NULL, total int);
         ALTER TABLE hare_outbox ADD COLUMN tenant text;",
    )
    .await;
    ChangeCapture::new("invoices")
        .with_payload(ChangePayload::Keys)
        .with_extra_from_row("tenant", "tenant_id")
        .install(&db.outbox)
        .await
        .unwrap();
    let mut tx = db.pool().begin().await.unwrap();
    db.outbox
        .set_context(
            &mut tx,
            json!({"author": "ann", "traceparent": "00-ab-cd-01"}),
        )
        .await
        .unwrap();
    sqlx::query("INSERT INTO invoices VALUES (1, 'acme', 10), (2, 'globex', 20)")
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query("SAVEPOINT s").execute(&mut *tx).await.unwrap();
    db.outbox
        .set_context(&mut tx, json!({"author": "bob"}))
        .await
        .unwrap();
    sqlx::query("ROLLBACK TO SAVEPOINT s")
        .execute(&mut *tx)
        .await
        .unwrap();
    // The savepoint's context is undone with it: ann again.
    sqlx::query("DELETE FROM invoices WHERE id = 2")
        .execute(&mut *tx)
        .await
        .unwrap();
    db.outbox.clear_context(&mut tx).await.unwrap();
    sqlx::query("UPDATE invoices SET total = 11 WHERE id = 1")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    // The context ended with the transaction.
    db.exec("UPDATE invoices SET total = 12 WHERE id = 1").await;

    let rows = sqlx::query("SELECT headers, tenant FROM hare_outbox ORDER BY sequence")
        .fetch_all(db.pool())
        .await
        .unwrap();
    let got: Vec<(Value, Option<String>)> = rows
        .iter()
        .map(|r| (r.get("headers"), r.get("tenant")))
        .collect();
    let ann = json!({"author": "ann", "traceparent": "00-ab-cd-01"});
    assert_eq!(
        got,
        vec![
            (ann.clone(), Some("acme".into())),
            (ann.clone(), Some("globex".into())),
            (ann, Some("globex".into())),
            (json!({}), Some("acme".into())),
            (json!({}), Some("acme".into())),
        ]
    );
    let e = db
        .outbox
        .set_context(&mut *db.pool().acquire().await.unwrap(), json!(["x"]))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Validation { .. }), "{e}");
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
                json!({"model": "cards", "operation": "deleted", "pk": 10, "changed": null,
                    "before": {"id": 10, "reader_id": 1}, "after": null})
            ),
            (
                "cards.deleted".into(),
                json!({"model": "cards", "operation": "deleted", "pk": 11, "changed": null,
                    "before": {"id": 11, "reader_id": 1}, "after": null})
            ),
            (
                "notes.updated".into(),
                json!({"model": "notes", "operation": "updated", "pk": 20, "changed": ["reader_id"],
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
async fn events_of_one_row_are_delivered_in_commit_order_under_concurrent_writers() {
    let db = Db::new(
        "CREATE TABLE counters (id int PRIMARY KEY, n int NOT NULL);
                      INSERT INTO counters VALUES (1, 0);",
    )
    .await;
    ChangeCapture::new("counters")
        .with_payload(ChangePayload::After)
        .install(&db.outbox)
        .await
        .unwrap();
    const WRITERS: i64 = 6;
    const EACH: i64 = 10;
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let pool = db.pool().clone();
        tasks.push(tokio::spawn(async move {
            let mut committed = Vec::new();
            for i in 0..EACH {
                let mut tx = pool.begin().await.unwrap();
                let n: i32 =
                    sqlx::query_scalar("UPDATE counters SET n = n + 1 WHERE id = 1 RETURNING n")
                        .fetch_one(&mut *tx)
                        .await
                        .unwrap();
                // Hold the row lock a little while, so the others queue behind it.
                if (w + i) % 3 == 0 {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                tx.commit().await.unwrap();
                committed.push(n);
            }
            committed
        }));
    }
    for task in tasks {
        let committed = task.await.unwrap();
        assert!(committed.windows(2).all(|w| w[0] < w[1]));
    }
    let delivered = Arc::new(Mutex::new(Vec::new()));
    let sink = delivered.clone();
    let relay = OutboxRelay::new(
        db.outbox.clone(),
        FnDelivery::new(move |event: OutboxEvent| {
            let sink = sink.clone();
            async move {
                sink.lock()
                    .unwrap()
                    .push(event.payload["after"]["n"].as_i64().unwrap());
                Ok(())
            }
        }),
        RelayConfig::default().with_concurrency(4),
    )
    .unwrap();
    for _ in 0..(WRITERS * EACH * 2) {
        if relay.poll_once().await.unwrap().leased == 0 {
            break;
        }
    }
    let delivered = delivered.lock().unwrap().clone();
    assert_eq!(delivered, (1..=WRITERS * EACH).collect::<Vec<_>>());
    db.drop().await;
}

#[tokio::test]
async fn install_refuses_bad_declarations_and_installs_nothing() {
    let db = Db::new(&format!(
        "{LOANS}; CREATE TABLE nokey (a int); ALTER TABLE hare_outbox ADD COLUMN tenant text;"
    ))
    .await;
    let cases: Vec<(ChangeCapture, &str)> = vec![
        (
            ChangeCapture::new("loans").with_fields(["status", "colour"]),
            "\"colour\", which the table does not have",
        ),
        (
            ChangeCapture::new("loans").with_exclude(["colour"]),
            "exclude names column \"colour\"",
        ),
        (
            ChangeCapture::new("loans").with_extra_from_row("tenant", "tenant_id"),
            "extra_from_row names column \"tenant_id\"",
        ),
        (
            ChangeCapture::new("loans").with_extra_from_row("shard", "status"),
            "outbox column \"shard\"",
        ),
        (
            ChangeCapture::new("loans").with_topic("{app}.{tenant}"),
            "unknown placeholder {tenant}",
        ),
        (
            ChangeCapture::new("hare_outbox"),
            "outbox cannot capture itself",
        ),
        (ChangeCapture::new("nokey"), "has no primary key"),
        (ChangeCapture::new("missing"), "does not exist"),
        (
            {
                let mut both = ChangeCapture::new("loans").with_fields(["status"]);
                both.exclude = vec!["note".into()];
                both
            },
            "fields and exclude are both set",
        ),
        (
            ChangeCapture::new("loans").with_exclude(["id", "status", "fee", "reader_id", "note"]),
            "leaves no column",
        ),
    ];
    for (capture, expected) in cases {
        match capture.install(&db.outbox).await {
            Err(Error::Configuration(message)) => {
                assert!(
                    message.contains(expected),
                    "{message} should contain {expected}"
                )
            }
            other => panic!("{capture:?}: expected a configuration error, got {other:?}"),
        }
    }
    assert_eq!(db.triggers().await, 0);
    assert!(db.outbox.capture_status().await.unwrap().is_empty());
    // Another outbox-shaped table is refused too.
    db.exec("CREATE TABLE other_outbox (LIKE hare_outbox INCLUDING ALL)")
        .await;
    let e = ChangeCapture::new("other_outbox")
        .install(&db.outbox)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("is an outbox table"), "{e}");
    db.drop().await;
}

#[tokio::test]
async fn install_is_idempotent_replaces_and_uninstalls() {
    let db = Db::new(LOANS).await;
    let capture = ChangeCapture::new("loans").with_payload(ChangePayload::Keys);
    capture.install(&db.outbox).await.unwrap();
    capture.install(&db.outbox).await.unwrap();
    assert_eq!(db.triggers().await, 1);
    db.exec("INSERT INTO loans (id, status) VALUES (1, 'a')")
        .await;
    assert_eq!(
        db.events().await.len(),
        1,
        "installed twice, still one event per row"
    );

    let only_deletes = capture.clone().with_operations([RowOperation::Delete]);
    only_deletes.install(&db.outbox).await.unwrap();
    db.exec("INSERT INTO loans (id, status) VALUES (2, 'a'); DELETE FROM loans WHERE id = 2")
        .await;
    let topics: Vec<String> = db.events().await.into_iter().map(|e| e.topic).collect();
    assert_eq!(topics, vec!["loans.inserted", "loans.deleted"]);
    let status = only_deletes.status(&db.outbox).await.unwrap().unwrap();
    assert!(status.is_current(), "{:?}", status.drift);
    assert_eq!(
        capture.status(&db.outbox).await.unwrap().unwrap().drift,
        vec![CaptureDrift::DeclarationChanged]
    );

    assert!(capture.uninstall(&db.outbox).await.unwrap());
    assert!(!capture.uninstall(&db.outbox).await.unwrap());
    assert_eq!(db.triggers().await, 0);
    db.exec("INSERT INTO loans (id, status) VALUES (3, 'a')")
        .await;
    assert_eq!(db.events().await.len(), 2);
    assert!(capture.status(&db.outbox).await.unwrap().is_none());
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
