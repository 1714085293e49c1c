//! Change capture by triggers on real SQLite files (DESIGN §6; seed 001 § ChangeCapture): the
//! envelope, the JSON form of each storage class and declared type, transaction context, every
//! kind of write, per-row order, install checks, status and drift.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use hare_outbox_core::capture::{CaptureDrift, ChangeCapture, ChangePayload, RowOperation};
use hare_outbox_core::{
    Error, FnDelivery, Outbox, OutboxEvent, OutboxRelay, OutboxTable, RelayConfig,
};
use hare_outbox_sqlite::SqliteBackend;
use hare_outbox_testkit::sqlite::TestDb;
use serde_json::{Value, json};
use sha2::Digest;
use sqlx::{AssertSqlSafe, Row, SqlitePool};

struct Db {
    db: TestDb,
    outbox: Outbox<SqliteBackend>,
}

impl Db {
    async fn new(ddl: &str) -> Db {
        let db = TestDb::new(4).await;
        let outbox = Outbox::new(SqliteBackend::new(db.pool.clone()), OutboxTable::default());
        outbox.migrate().await.unwrap();
        exec(&db.pool, ddl).await;
        Db { db, outbox }
    }

    fn pool(&self) -> &SqlitePool {
        &self.db.pool
    }

    async fn exec(&self, sql: &str) {
        exec(self.pool(), sql).await;
    }

    async fn events(&self) -> Vec<Ev> {
        let rows = sqlx::query(
            "SELECT id, topic, payload, headers, ordering_key, created_at FROM hare_outbox ORDER BY sequence",
        )
        .fetch_all(self.pool())
        .await
        .unwrap();
        rows.iter()
            .map(|row| {
                let id: String = row.get("id");
                let uuid = uuid::Uuid::parse_str(&id).unwrap();
                assert_eq!(uuid.get_version_num(), 7, "{id}");
                assert_eq!(uuid.get_variant(), uuid::Variant::RFC4122, "{id}");
                let created: String = row.get("created_at");
                assert_eq!(created.len(), 27, "{created}");
                assert!(created.ends_with('Z'), "{created}");
                let mut payload: Value = serde_json::from_str(row.get("payload")).unwrap();
                let occurred = payload
                    .as_object_mut()
                    .and_then(|p| p.remove("occurred_at"))
                    .expect("occurred_at");
                let occurred = occurred.as_str().unwrap().to_owned();
                assert!(
                    occurred.ends_with("+00:00") && (occurred.len() == 25 || occurred.len() == 32),
                    "{occurred}"
                );
                chrono::DateTime::parse_from_rfc3339(&occurred).unwrap();
                Ev {
                    topic: row.get("topic"),
                    payload,
                    headers: serde_json::from_str(row.get("headers")).unwrap(),
                    ordering_key: row.get("ordering_key"),
                }
            })
            .collect()
    }

    async fn payloads(&self) -> Vec<Value> {
        self.events().await.into_iter().map(|e| e.payload).collect()
    }

    async fn triggers(&self) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM sqlite_master WHERE type = 'trigger'")
            .fetch_one(self.pool())
            .await
            .unwrap()
    }
}

async fn exec(pool: &SqlitePool, sql: &str) {
    if sql.is_empty() {
        return;
    }
    sqlx::raw_sql(AssertSqlSafe(sql.to_owned()))
        .execute(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

#[derive(Debug, Clone, PartialEq)]
struct Ev {
    topic: String,
    payload: Value,
    headers: Value,
    ordering_key: Option<String>,
}

const LOANS: &str = "CREATE TABLE loans (
    id INTEGER PRIMARY KEY,
    status TEXT NOT NULL,
    fee DECIMAL(10,2) NOT NULL DEFAULT 0,
    reader_id INTEGER,
    note TEXT
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
    let key = Some("library.Loan:7".to_owned());
    assert_eq!(
        db.events().await,
        vec![
            Ev {
                topic: "library.loan.inserted".into(),
                payload: json!({"model": "library.Loan", "operation": "inserted", "pk": 7,
                    "changed": null, "before": null, "after": row}),
                headers: json!({}),
                ordering_key: key.clone(),
            },
            Ev {
                topic: "library.loan.updated".into(),
                payload: json!({"model": "library.Loan", "operation": "updated", "pk": 7,
                    "changed": ["status"], "before": null, "after": returned}),
                headers: json!({}),
                ordering_key: key.clone(),
            },
            Ev {
                topic: "library.loan.deleted".into(),
                payload: json!({"model": "library.Loan", "operation": "deleted", "pk": 7,
                    "changed": null, "before": returned, "after": null}),
                headers: json!({}),
                ordering_key: key,
            },
        ]
    );
}

#[tokio::test]
async fn payload_modes_keys_before_and_after_changes() {
    let db = Db::new(LOANS).await;
    let capture = ChangeCapture::new("loans");
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
            ChangePayload::After,
            [
                (json!(null), full.clone()),
                (json!(null), after.clone()),
                (after.clone(), json!(null)),
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
        db.exec("DELETE FROM hare_outbox").await;
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
    }
}

/// Creates `t (id INTEGER PRIMARY KEY, v <declared>)`, captures it, inserts each literal and
/// returns each `after.v`.
async fn forms(declared: &str, literals: &[&str]) -> Vec<Value> {
    let db = Db::new(&format!(
        "CREATE TABLE t (id INTEGER PRIMARY KEY, v {declared})"
    ))
    .await;
    ChangeCapture::new("t").install(&db.outbox).await.unwrap();
    for (i, literal) in literals.iter().enumerate() {
        db.exec(&format!("INSERT INTO t VALUES ({i}, {literal})"))
            .await;
    }
    db.payloads()
        .await
        .into_iter()
        .map(|p| p["after"]["v"].clone())
        .collect()
}

#[tokio::test]
async fn integer_storage_is_a_number() {
    assert_eq!(
        forms("INTEGER", &["9223372036854775807", "-1", "NULL"]).await,
        vec![json!(9223372036854775807_i64), json!(-1), json!(null)]
    );
}

#[tokio::test]
async fn real_storage_is_a_number_and_infinity_is_text() {
    assert_eq!(
        forms("REAL", &["1.5", "0.1", "9e999", "-9e999", "0.0/0"]).await,
        vec![
            json!(1.5),
            json!(0.1),
            json!("Infinity"),
            json!("-Infinity"),
            json!(null)
        ]
    );
}

#[tokio::test]
async fn text_storage_is_a_string() {
    assert_eq!(
        forms(
            "TEXT",
            &["'Ромашка \"ООО\" it''s'", "'2026-11-13 17:20:00'", "''"]
        )
        .await,
        vec![
            json!("Ромашка \"ООО\" it's"),
            json!("2026-11-13 17:20:00"),
            json!("")
        ]
    );
}

#[tokio::test]
async fn blob_storage_is_base64() {
    let long = format!("x'{}'", "ff".repeat(100));
    assert_eq!(
        forms("BLOB", &["x'48617265'", "x'4861'", "x'48'", "x''", &long]).await,
        vec![
            json!("SGFyZQ=="),
            json!("SGE="),
            json!("SA=="),
            json!(""),
            json!("/".repeat(132) + "/w==")
        ]
    );
}

#[tokio::test]
async fn untyped_columns_follow_their_storage_class() {
    assert_eq!(
        forms("", &["1", "'1'", "1.25", "x'00'"]).await,
        vec![json!(1), json!("1"), json!(1.25), json!("AA==")]
    );
}

#[tokio::test]
async fn declared_decimal_is_exact_text() {
    assert_eq!(
        forms("DECIMAL(10,2)", &["12.5", "3", "'1200.00'", "NULL"]).await,
        vec![json!("12.50"), json!("3.00"), json!("1200.00"), json!(null)]
    );
    assert_eq!(
        forms("NUMERIC", &["12.5", "3"]).await,
        vec![json!("12.5"), json!("3")]
    );
}

#[tokio::test]
async fn declared_boolean_is_true_or_false() {
    assert_eq!(
        forms("BOOLEAN", &["1", "0", "TRUE", "NULL"]).await,
        vec![json!(true), json!(false), json!(true), json!(null)]
    );
}

#[tokio::test]
async fn declared_json_is_as_is() {
    assert_eq!(
        forms(
            "JSON",
            &["'{\"a\": [1, \"x\", null]}'", "'not json'", "'12.50'"]
        )
        .await,
        vec![
            json!({"a": [1, "x", null]}),
            json!("not json"),
            json!(12.50)
        ]
    );
}

#[tokio::test]
async fn declared_uuid_is_its_text() {
    assert_eq!(
        forms(
            "UUID",
            &[
                "x'0190B5C67E1D7A2B8C3D4E5F60718293'",
                "'0190b5c6-7e1d-7a2b-8c3d-4e5f60718293'"
            ]
        )
        .await,
        vec![
            json!("0190b5c6-7e1d-7a2b-8c3d-4e5f60718293"),
            json!("0190b5c6-7e1d-7a2b-8c3d-4e5f60718293")
        ]
    );
}

#[tokio::test]
async fn declared_dates_and_times_stay_as_written() {
    assert_eq!(
        forms("DATETIME", &["'2026-11-13T17:20:00+00:00'", "'2026-11-13'"]).await,
        vec![json!("2026-11-13T17:20:00+00:00"), json!("2026-11-13")]
    );
}

#[tokio::test]
async fn changes_mode_writes_the_journal_of_seed_000_with_the_author() {
    let db = Db::new(
        "CREATE TABLE sales_orders (id INTEGER PRIMARY KEY, status TEXT, prepaid TEXT NOT NULL DEFAULT '0.00',
            paid_at TEXT, eta_date TEXT, updated_at TEXT)",
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
    for sql in [
        "UPDATE sales_orders SET prepaid = '1200.00', paid_at = '2026-11-13 17:20:00', updated_at = 'x' WHERE id = 22",
        "UPDATE sales_orders SET status = 'in_production', eta_date = '2026-12-01' WHERE id = 22",
        "UPDATE sales_orders SET updated_at = 'y' WHERE id = 22",
    ] {
        sqlx::query(sql).execute(&mut *tx).await.unwrap();
    }
    tx.commit().await.unwrap();
    // The context ended with the transaction (on a pooled connection too).
    db.exec("UPDATE sales_orders SET status = 'shipped' WHERE id = 22")
        .await;
    let events = db.events().await;
    assert_eq!(
        events[..2],
        [
            Ev {
                topic: "doc.updated".into(),
                payload: json!({"model": "erp.sales_order", "operation": "updated", "pk": 22,
                    "changed": ["prepaid", "paid_at"],
                    "before": {"prepaid": "0.00", "paid_at": null},
                    "after": {"prepaid": "1200.00", "paid_at": "2026-11-13 17:20:00"}}),
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
    assert_eq!(events.len(), 3);
    assert_eq!(events[2].headers, json!({}));
}

#[tokio::test]
async fn context_rolls_back_clears_and_tenant_comes_from_the_row() {
    let db = Db::new(
        "CREATE TABLE invoices (id INTEGER PRIMARY KEY, tenant_id TEXT NOT NULL, total INTEGER);
         ALTER TABLE hare_outbox ADD COLUMN tenant TEXT;",
    )
    .await;
    ChangeCapture::new("invoices")
        .with_payload(ChangePayload::Keys)
        .with_extra_from_row("tenant", "tenant_id")
        .install(&db.outbox)
        .await
        .unwrap();
    // A rolled-back context leaves nothing behind.
    let mut tx = db.pool().begin().await.unwrap();
    db.outbox
        .set_context(&mut tx, json!({"author": "eve"}))
        .await
        .unwrap();
    tx.rollback().await.unwrap();

    let mut tx = db.pool().begin().await.unwrap();
    db.outbox
        .set_context(&mut tx, json!({"author": "ann"}))
        .await
        .unwrap();
    sqlx::query("INSERT INTO invoices VALUES (1, 'acme', 10)")
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
    sqlx::query("DELETE FROM invoices WHERE id = 1")
        .execute(&mut *tx)
        .await
        .unwrap();
    db.outbox.clear_context(&mut tx).await.unwrap();
    sqlx::query("INSERT INTO invoices VALUES (2, 'globex', 1)")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    db.exec("UPDATE invoices SET total = 2").await;
    let rows = sqlx::query("SELECT headers, tenant FROM hare_outbox ORDER BY sequence")
        .fetch_all(db.pool())
        .await
        .unwrap();
    let got: Vec<(String, Option<String>)> = rows
        .iter()
        .map(|r| (r.get("headers"), r.get("tenant")))
        .collect();
    assert_eq!(
        got,
        vec![
            (r#"{"author":"ann"}"#.into(), Some("acme".into())),
            (r#"{"author":"ann"}"#.into(), Some("acme".into())),
            ("{}".into(), Some("globex".into())),
            ("{}".into(), Some("globex".into())),
        ]
    );
    let e = db
        .outbox
        .set_context(&mut *db.pool().acquire().await.unwrap(), json!({"": 1}))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Validation { .. }), "{e}");
}

#[tokio::test]
async fn writes_of_every_kind_are_captured() {
    let db = Db::new(
        "CREATE TABLE readers (id INTEGER PRIMARY KEY, name TEXT);
         CREATE TABLE cards (id INTEGER PRIMARY KEY, reader_id INTEGER REFERENCES readers ON DELETE CASCADE);
         CREATE TABLE notes (id INTEGER PRIMARY KEY, reader_id INTEGER REFERENCES readers ON DELETE SET NULL);
         CREATE TABLE tags (id INTEGER PRIMARY KEY);
         CREATE TABLE reader_tags (reader_id INTEGER REFERENCES readers ON DELETE CASCADE,
                                   tag_id INTEGER REFERENCES tags, PRIMARY KEY (reader_id, tag_id));
         INSERT INTO readers VALUES (1, 'ann'), (2, 'bob');
         INSERT INTO tags VALUES (7);",
    )
    .await;
    for table in ["readers", "cards", "notes", "reader_tags"] {
        ChangeCapture::new(table)
            .with_payload(ChangePayload::Keys)
            .install(&db.outbox)
            .await
            .unwrap();
    }
    db.exec(
        "INSERT INTO cards VALUES (10, 1), (11, 1);
         INSERT INTO notes VALUES (20, 1);
         INSERT INTO reader_tags VALUES (1, 7), (2, 7);
         UPDATE readers SET name = upper(name);
         INSERT INTO readers VALUES (2, 'x') ON CONFLICT (id) DO UPDATE SET name = excluded.name;
         INSERT INTO readers VALUES (3, 'cy') ON CONFLICT (id) DO UPDATE SET name = excluded.name;
         INSERT INTO readers VALUES (1, 'no') ON CONFLICT DO NOTHING;
         DELETE FROM readers WHERE id = 1;",
    )
    .await;
    let got: Vec<String> = db
        .events()
        .await
        .into_iter()
        .map(|e| format!("{} {}", e.topic, e.payload["pk"]))
        .collect();
    let mut tail = got[9..].to_vec();
    tail.sort();
    assert_eq!(
        got[..9],
        [
            "cards.inserted 10",
            "cards.inserted 11",
            "notes.inserted 20",
            "reader_tags.inserted {\"reader_id\":1,\"tag_id\":7}",
            "reader_tags.inserted {\"reader_id\":2,\"tag_id\":7}",
            "readers.updated 1",
            "readers.updated 2",
            "readers.updated 2",
            "readers.inserted 3",
        ]
    );
    assert_eq!(
        tail,
        [
            "cards.deleted 10",
            "cards.deleted 11",
            "notes.updated 20",
            "reader_tags.deleted {\"reader_id\":1,\"tag_id\":7}",
            "readers.deleted 1",
        ]
    );
}

#[tokio::test]
async fn failed_statements_and_rolled_back_savepoints_leave_no_event() {
    let db = Db::new(&format!(
        "{LOANS}; CREATE TRIGGER zz_refuse AFTER INSERT ON loans WHEN NEW.status = 'bad'
         BEGIN SELECT RAISE(ABORT, 'refused'); END;"
    ))
    .await;
    ChangeCapture::new("loans")
        .with_payload(ChangePayload::Keys)
        .install(&db.outbox)
        .await
        .unwrap();
    let mut tx = db.pool().begin().await.unwrap();
    for sql in [
        "INSERT INTO loans (id, status) VALUES (1, 'ok')",
        "SAVEPOINT s1",
        "INSERT INTO loans (id, status) VALUES (2, 'ok')",
        "ROLLBACK TO SAVEPOINT s1",
    ] {
        sqlx::query(AssertSqlSafe(sql))
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    // Row 3 is written (and captured) before row 4 fails the statement: both go.
    assert!(
        sqlx::query("INSERT INTO loans (id, status) VALUES (3, 'ok'), (4, 'bad')")
            .execute(&mut *tx)
            .await
            .is_err()
    );
    sqlx::query("INSERT INTO loans (id, status) VALUES (5, 'ok')")
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
    assert_eq!(pks, vec![json!(1), json!(5)]);
}

#[tokio::test]
async fn a_key_over_255_characters_keeps_its_start_and_ends_with_its_sha256() {
    let db = Db::new("CREATE TABLE docs (path TEXT PRIMARY KEY)").await;
    ChangeCapture::new("docs")
        .with_label("app.Doc")
        .with_payload(ChangePayload::Keys)
        .install(&db.outbox)
        .await
        .unwrap();
    let paths = [
        "é".repeat(247),
        "ключ/".repeat(60),
        "x".repeat(248),
        "y".repeat(1000),
    ];
    for path in &paths {
        sqlx::query("INSERT INTO docs VALUES (?1)")
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
    for (path, key) in paths.iter().zip(&keys) {
        let whole = format!("app.Doc:{path}");
        if whole.chars().count() <= 255 {
            assert_eq!(key, &whole);
        } else {
            let expected = format!(
                "{}#{}",
                whole.chars().take(190).collect::<String>(),
                hex::encode(sha2::Sha256::digest(whole.as_bytes()))
            );
            assert_eq!(key, &expected);
            assert_eq!(key.chars().count(), 255);
        }
    }
}

#[tokio::test]
async fn events_of_one_row_are_delivered_in_commit_order_under_concurrent_writers() {
    let db = Db::new(
        "CREATE TABLE counters (id INTEGER PRIMARY KEY, n INTEGER NOT NULL);
                      INSERT INTO counters VALUES (1, 0);",
    )
    .await;
    ChangeCapture::new("counters")
        .install(&db.outbox)
        .await
        .unwrap();
    const WRITERS: i64 = 4;
    const EACH: i64 = 10;
    let mut tasks = Vec::new();
    for _ in 0..WRITERS {
        let pool = db.pool().clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..EACH {
                let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.unwrap();
                sqlx::query("UPDATE counters SET n = n + 1 WHERE id = 1")
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                tokio::task::yield_now().await;
                tx.commit().await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
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
        RelayConfig::default(),
    )
    .unwrap();
    for _ in 0..(WRITERS * EACH * 2) {
        if relay.poll_once().await.unwrap().leased == 0 {
            break;
        }
    }
    assert_eq!(
        *delivered.lock().unwrap(),
        (1..=WRITERS * EACH).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn install_refuses_bad_declarations_and_installs_nothing() {
    let db = Db::new(&format!(
        "{LOANS}; CREATE TABLE nokey (a INTEGER); ALTER TABLE hare_outbox ADD COLUMN tenant TEXT;"
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
            ChangeCapture::new("loans").with_ordering_key(Some("{pk}/{tenant}")),
            "unknown placeholder {tenant}",
        ),
        (
            ChangeCapture::new("hare_outbox"),
            "outbox cannot capture itself",
        ),
        (ChangeCapture::new("nokey"), "has no primary key"),
        (ChangeCapture::new("missing"), "does not exist"),
        (
            ChangeCapture::new("loans").with_schema("other"),
            "SQLite triggers can only write to their own database",
        ),
        (
            {
                let mut both = ChangeCapture::new("loans").with_fields(["status"]);
                both.exclude = vec!["note".into()];
                both
            },
            "fields and exclude are both set",
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
}

#[tokio::test]
async fn install_is_idempotent_and_status_reports_drift() {
    let db = Db::new(LOANS).await;
    let capture = ChangeCapture::new("loans").with_payload(ChangePayload::Keys);
    capture.install(&db.outbox).await.unwrap();
    capture.install(&db.outbox).await.unwrap();
    assert_eq!(db.triggers().await, 3);
    db.exec("INSERT INTO loans (id, status) VALUES (1, 'a')")
        .await;
    assert_eq!(db.events().await.len(), 1);
    let status = capture.status(&db.outbox).await.unwrap().unwrap();
    assert!(status.is_current(), "{:?}", status.drift);
    assert_eq!(status.columns[2].type_name, "DECIMAL(10,2)");

    db.exec("ALTER TABLE loans ADD COLUMN due TEXT").await;
    assert_eq!(
        capture.status(&db.outbox).await.unwrap().unwrap().drift,
        vec![CaptureDrift::ColumnAdded {
            column: "due".into()
        }]
    );
    // SQLite itself refuses to drop a column a trigger reads.
    assert!(
        sqlx::query("ALTER TABLE loans DROP COLUMN note")
            .execute(db.pool())
            .await
            .is_err()
    );
    let deletes = capture.clone().with_operations([RowOperation::Delete]);
    deletes.install(&db.outbox).await.unwrap();
    assert_eq!(db.triggers().await, 1);
    assert!(
        deletes
            .status(&db.outbox)
            .await
            .unwrap()
            .unwrap()
            .is_current()
    );
    assert_eq!(
        capture.status(&db.outbox).await.unwrap().unwrap().drift,
        vec![CaptureDrift::DeclarationChanged]
    );
    assert!(capture.uninstall(&db.outbox).await.unwrap());
    assert!(!capture.uninstall(&db.outbox).await.unwrap());
    assert_eq!(db.triggers().await, 0);
}

#[tokio::test]
async fn quotes_in_names_and_labels_cannot_break_out() {
    let db = Db::new(
        r#"CREATE TABLE "odd ""t"" 'x'" ("id'); DROP TABLE hare_outbox; --" INTEGER PRIMARY KEY, "a""b'c*/" TEXT)"#,
    )
    .await;
    let label = "app.M'); DROP TABLE hare_outbox; -- */ \\'";
    ChangeCapture::new("odd \"t\" 'x'")
        .with_label(label)
        .with_payload(ChangePayload::BeforeAndAfter)
        .install(&db.outbox)
        .await
        .unwrap();
    db.exec(r#"INSERT INTO "odd ""t"" 'x'" VALUES (1, 'v''"'); UPDATE "odd ""t"" 'x'" SET "a""b'c*/" = 'w'"#)
        .await;
    let events = db.events().await;
    assert_eq!(events[0].payload["model"], json!(label));
    assert_eq!(
        events[0].payload["after"],
        json!({"id'); DROP TABLE hare_outbox; --": 1, "a\"b'c*/": "v'\""})
    );
    assert_eq!(events[1].payload["changed"], json!(["a\"b'c*/"]));
    assert_eq!(
        events[0].ordering_key.as_deref(),
        Some(format!("{label}:1").as_str())
    );
    let status = db.outbox.capture_status().await.unwrap();
    assert_eq!(status.len(), 1);
    assert!(status[0].is_current(), "{:?}", status[0].drift);
}

#[tokio::test]
async fn notify_is_refused_on_sqlite() {
    let db = Db::new("CREATE TABLE items (id INTEGER PRIMARY KEY, qty INTEGER)").await;
    let e = ChangeCapture::new("items")
        .with_notify(Some("hare_outbox"))
        .install(&db.outbox)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Configuration(_)), "{e}");
    assert!(
        e.to_string().contains("notify") && e.to_string().contains("SQLite"),
        "{e}"
    );
    assert_eq!(db.triggers().await, 0, "nothing installed");
}
