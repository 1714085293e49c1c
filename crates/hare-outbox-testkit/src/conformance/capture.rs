//! Change capture by triggers on any backend that has them: the envelope of inserts, updates and
//! deletes, the four payload modes, long keys cut and hashed, per-row order under concurrent
//! writers, declarations refused before anything is installed, and install, replace, status and
//! uninstall.
//!
//! Tables are created with SQL both databases accept (`INTEGER`, `TEXT`, `DECIMAL(10,2)`).

// A suite fails its test by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use hare_outbox_core::capture::{CaptureDrift, ChangeCapture, ChangePayload, RowOperation};
use hare_outbox_core::journal::{EventQuery, Journal};
use hare_outbox_core::{
    Backend, Error, FnDelivery, JournalBackend, Outbox, OutboxEvent, OutboxRelay, OutboxTable,
    RelayConfig,
};
use serde_json::{Value, json};
use sha2::Digest;

use super::harness::{Harness, outbox_in};

/// A loan table of the library example: an integer key, text, an exact decimal with a default.
pub const LOANS: &str = "CREATE TABLE loans (
    id INTEGER PRIMARY KEY,
    status TEXT NOT NULL,
    fee DECIMAL(10,2) NOT NULL DEFAULT 0,
    reader_id INTEGER,
    note TEXT
)";

/// One stored event: `occurred_at` checked for its form (ISO 8601 in UTC) and removed from
/// the payload.
#[derive(Debug, Clone, PartialEq)]
pub struct Ev {
    /// The topic.
    pub topic: String,
    /// The payload without `occurred_at`.
    pub payload: Value,
    /// The headers.
    pub headers: Value,
    /// The ordering key.
    pub ordering_key: Option<String>,
}

/// The default outbox table `hare_outbox`, migrated, after running `ddl` (when not empty).
pub async fn capture_outbox<H: Harness>(h: &H, ddl: &str) -> Outbox<H::Backend> {
    let outbox = outbox_in(h, OutboxTable::default()).await;
    if !ddl.is_empty() {
        h.execute(ddl).await;
    }
    outbox
}

/// Every event of the outbox in sequence order, as [`Ev`].
///
/// # Panics
/// When the read fails or an event's id is not a UUID v7 or its `occurred_at` not a UTC time.
pub async fn events<B: JournalBackend>(outbox: &Outbox<B>) -> Vec<Ev> {
    let journal = Journal::new(outbox.backend().clone(), outbox.table().clone());
    let mut all: Vec<OutboxEvent> = Vec::new();
    let mut query = EventQuery::new().with_limit(500).unwrap();
    loop {
        let page = journal.list(&query).await.unwrap();
        all.extend(page.events.iter().cloned());
        match page.next_query(&query) {
            Some(next) => query = next,
            None => break,
        }
    }
    all.sort_by_key(|e| e.sequence);
    all.into_iter()
        .map(|e| {
            assert_eq!(
                e.id.get_version_num(),
                7,
                "event id {} is not a UUID v7",
                e.id
            );
            let mut payload = e.payload;
            let occurred = payload
                .as_object_mut()
                .and_then(|p| p.remove("occurred_at"))
                .expect("occurred_at");
            let text = occurred.as_str().expect("occurred_at is text");
            assert!(
                text.ends_with("+00:00") && (text.len() == 25 || text.len() == 32),
                "{text}"
            );
            chrono::DateTime::parse_from_rfc3339(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            Ev {
                topic: e.topic,
                payload,
                headers: Value::Object(e.headers.into_iter().collect()),
                ordering_key: e.ordering_key,
            }
        })
        .collect()
}

async fn payloads<B: JournalBackend>(outbox: &Outbox<B>) -> Vec<Value> {
    events(outbox)
        .await
        .into_iter()
        .map(|e| e.payload)
        .collect()
}

/// An insert, an update and a delete of one row: topics from the label, the envelope (model,
/// table, operation, key, changed columns, before, after), no headers, the key as ordering key.
pub async fn envelope_of_insert_update_delete<H: Harness>(h: &H) {
    let outbox = capture_outbox(h, LOANS).await;
    ChangeCapture::new("loans")
        .with_label("library.Loan")
        .install(&outbox)
        .await
        .unwrap();
    h.execute("INSERT INTO loans (id, status, reader_id) VALUES (7, 'lent', 3)")
        .await;
    h.execute("UPDATE loans SET status = 'returned' WHERE id = 7")
        .await;
    h.execute("DELETE FROM loans WHERE id = 7").await;
    let row = json!({"id": 7, "status": "lent", "fee": "0.00", "reader_id": 3, "note": null});
    let returned =
        json!({"id": 7, "status": "returned", "fee": "0.00", "reader_id": 3, "note": null});
    let key = Some("library.Loan:7".to_owned());
    let ev = |operation: &str, changed: Value, before: &Value, after: &Value| Ev {
        topic: format!("library.loan.{operation}"),
        payload: json!({"model": "library.Loan", "table": "loans", "operation": operation, "pk": 7,
            "changed": changed, "before": before, "after": after}),
        headers: json!({}),
        ordering_key: key.clone(),
    };
    assert_eq!(
        events(&outbox).await,
        vec![
            ev("inserted", json!(null), &json!(null), &row),
            ev("updated", json!(["status"]), &json!(null), &returned),
            ev("deleted", json!(null), &returned, &json!(null)),
        ]
    );
}

/// The same insert, update and delete under each payload mode: keys only, after, before and
/// after, changes (before holds the old values of the changed columns only); `changed` always
/// lists the changed columns.
pub async fn payload_modes_keys_before_and_after_changes<H: Harness>(h: &H) {
    let outbox = capture_outbox(h, LOANS).await;
    let capture = ChangeCapture::new("loans");
    let script = "INSERT INTO loans (id, status, reader_id) VALUES (1, 'lent', 3);
        UPDATE loans SET status = 'returned', fee = 1.5 WHERE id = 1;
        DELETE FROM loans WHERE id = 1;";
    let full = json!({"id": 1, "status": "lent", "fee": "0.00", "reader_id": 3, "note": null});
    let after = json!({"id": 1, "status": "returned", "fee": "1.50", "reader_id": 3, "note": null});
    let null = json!(null);
    let expected = [
        (
            ChangePayload::Keys,
            [
                (null.clone(), null.clone()),
                (null.clone(), null.clone()),
                (null.clone(), null.clone()),
            ],
        ),
        (
            ChangePayload::After,
            [
                (null.clone(), full.clone()),
                (null.clone(), after.clone()),
                (after.clone(), null.clone()),
            ],
        ),
        (
            ChangePayload::BeforeAndAfter,
            [
                (null.clone(), full.clone()),
                (full.clone(), after.clone()),
                (after.clone(), null.clone()),
            ],
        ),
        (
            ChangePayload::Changes,
            [
                (null.clone(), full.clone()),
                (
                    json!({"status": "lent", "fee": "0.00"}),
                    json!({"status": "returned", "fee": "1.50"}),
                ),
                (after.clone(), null.clone()),
            ],
        ),
    ];
    for (mode, rows) in expected {
        h.execute("DELETE FROM hare_outbox").await;
        capture
            .clone()
            .with_payload(mode)
            .install(&outbox)
            .await
            .unwrap();
        h.execute(script).await;
        let payloads = payloads(&outbox).await;
        let got: Vec<(Value, Value)> = payloads
            .iter()
            .map(|p| (p["before"].clone(), p["after"].clone()))
            .collect();
        assert_eq!(got, rows.to_vec(), "{mode:?}");
        assert_eq!(payloads[1]["changed"], json!(["status", "fee"]), "{mode:?}");
    }
}

/// A model-and-key ordering key of up to 255 characters is kept as is; a longer one keeps its
/// first 190 characters and ends with `#` and the SHA-256 of the whole key (255 characters).
pub async fn a_key_over_255_characters_keeps_its_start_and_ends_with_its_sha256<H: Harness>(h: &H) {
    let outbox = capture_outbox(h, "CREATE TABLE docs (path TEXT PRIMARY KEY)").await;
    ChangeCapture::new("docs")
        .with_label("app.Doc")
        .with_payload(ChangePayload::Keys)
        .install(&outbox)
        .await
        .unwrap();
    // "app.Doc:" + 247 characters = 255: kept as is.
    let paths = [
        "é".repeat(247),
        "ключ/".repeat(60),
        "x".repeat(248),
        "y".repeat(1000),
    ];
    for path in &paths {
        h.execute(&format!("INSERT INTO docs VALUES ('{path}')"))
            .await;
    }
    let keys: Vec<String> = events(&outbox)
        .await
        .into_iter()
        .map(|e| e.ordering_key.unwrap())
        .collect();
    assert_eq!(keys.len(), paths.len());
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

/// Writers updating one row concurrently, each in transactions of its own: the relay delivers
/// the row's events in commit order, every value once.
pub async fn events_of_one_row_are_delivered_in_commit_order_under_concurrent_writers<
    H: Harness,
>(
    h: &H,
) {
    let outbox = capture_outbox(
        h,
        "CREATE TABLE counters (id INTEGER PRIMARY KEY, n INTEGER NOT NULL);
         INSERT INTO counters VALUES (1, 0);",
    )
    .await;
    ChangeCapture::new("counters")
        .with_payload(ChangePayload::After)
        .install(&outbox)
        .await
        .unwrap();
    const WRITERS: i64 = 4;
    const EACH: i64 = 10;
    let mut tasks = Vec::new();
    for _ in 0..WRITERS {
        let backend = h.backend();
        tasks.push(tokio::spawn(async move {
            for _ in 0..EACH {
                let mut tx = backend.begin().await.unwrap();
                H::execute_on(&mut tx, "UPDATE counters SET n = n + 1 WHERE id = 1").await;
                tokio::task::yield_now().await;
                backend.commit(tx).await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let delivered = Arc::new(Mutex::new(Vec::new()));
    let sink = delivered.clone();
    let relay = OutboxRelay::new(
        outbox.clone(),
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
    assert_eq!(
        *delivered.lock().unwrap(),
        (1..=WRITERS * EACH).collect::<Vec<_>>()
    );
}

/// Every bad declaration is a configuration error naming what is wrong, checked against the
/// database before anything is installed: unknown fields, excluded or source columns, an outbox
/// column that does not exist, an unknown placeholder, the outbox itself, a table without a
/// primary key or that does not exist, fields and exclude together, nothing left to capture.
pub async fn install_refuses_bad_declarations_and_installs_nothing<H: Harness>(h: &H) {
    let outbox = capture_outbox(
        h,
        &format!("{LOANS}; CREATE TABLE nokey (a INTEGER); ALTER TABLE hare_outbox ADD COLUMN tenant TEXT;"),
    )
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
        match capture.install(&outbox).await {
            Err(Error::Configuration(message)) => {
                assert!(
                    message.contains(expected),
                    "{message} should contain {expected}"
                )
            }
            other => panic!("{capture:?}: expected a configuration error, got {other:?}"),
        }
    }
    assert_eq!(h.triggers().await, 0);
    assert!(outbox.capture_status().await.unwrap().is_empty());
}

/// Installing twice still writes one event per row; a new column is reported as drift; a
/// narrower declaration replaces the triggers (and makes the old one's status "declaration
/// changed"); uninstalling removes every trigger, once, and the status with them.
pub async fn install_is_idempotent_replaces_reports_drift_and_uninstalls<H: Harness>(h: &H) {
    let outbox = capture_outbox(h, LOANS).await;
    let capture = ChangeCapture::new("loans").with_payload(ChangePayload::Keys);
    capture.install(&outbox).await.unwrap();
    capture.install(&outbox).await.unwrap();
    let installed = h.triggers().await;
    assert!(installed > 0);
    h.execute("INSERT INTO loans (id, status) VALUES (1, 'a')")
        .await;
    assert_eq!(
        events(&outbox).await.len(),
        1,
        "installed twice, still one event per row"
    );
    let status = capture.status(&outbox).await.unwrap().unwrap();
    assert!(status.is_current(), "{:?}", status.drift);
    assert_eq!(status.columns.len(), 5);

    h.execute("ALTER TABLE loans ADD COLUMN due TEXT").await;
    assert_eq!(
        capture.status(&outbox).await.unwrap().unwrap().drift,
        vec![CaptureDrift::ColumnAdded {
            column: "due".into()
        }]
    );

    let only_deletes = capture.clone().with_operations([RowOperation::Delete]);
    only_deletes.install(&outbox).await.unwrap();
    assert!(h.triggers().await <= installed);
    h.execute("INSERT INTO loans (id, status) VALUES (2, 'a'); DELETE FROM loans WHERE id = 2")
        .await;
    let topics: Vec<String> = events(&outbox).await.into_iter().map(|e| e.topic).collect();
    assert_eq!(topics, vec!["loans.inserted", "loans.deleted"]);
    let status = only_deletes.status(&outbox).await.unwrap().unwrap();
    assert!(status.is_current(), "{:?}", status.drift);
    assert_eq!(
        capture.status(&outbox).await.unwrap().unwrap().drift,
        vec![CaptureDrift::DeclarationChanged]
    );

    assert!(capture.uninstall(&outbox).await.unwrap());
    assert!(!capture.uninstall(&outbox).await.unwrap());
    assert_eq!(h.triggers().await, 0);
    h.execute("INSERT INTO loans (id, status) VALUES (3, 'a')")
        .await;
    assert_eq!(events(&outbox).await.len(), 2);
    assert!(capture.status(&outbox).await.unwrap().is_none());
}

/// The journal of the library example in changes mode, updates only, `updated_at` excluded:
/// each update writes the changed columns' old and new values under the transaction's context
/// (the author); an update of the excluded column alone writes nothing; the context ends with
/// the transaction.
pub async fn changes_mode_writes_the_journal_with_the_author<H: Harness>(h: &H) {
    let outbox = capture_outbox(
        h,
        "CREATE TABLE sales_orders (id INTEGER PRIMARY KEY, status TEXT,
            prepaid DECIMAL(12,2) NOT NULL DEFAULT 0, paid_at TEXT, eta_date TEXT, updated_at TEXT)",
    )
    .await;
    ChangeCapture::new("sales_orders")
        .with_label("erp.sales_order")
        .with_topic("doc.{operation}")
        .with_payload(ChangePayload::Changes)
        .with_exclude(["updated_at"])
        .with_operations([RowOperation::Update])
        .with_skip_unchanged(true)
        .install(&outbox)
        .await
        .unwrap();
    h.execute("INSERT INTO sales_orders (id, status) VALUES (22, 'confirmed')")
        .await;
    let backend = outbox.backend();
    let mut tx = backend.begin().await.unwrap();
    outbox
        .set_context(&mut tx, json!({"author": "Администратор"}))
        .await
        .unwrap();
    H::execute_on(
        &mut tx,
        "UPDATE sales_orders SET prepaid = 1200, paid_at = '2026-11-13 17:20:00', updated_at = 'x' WHERE id = 22;
         UPDATE sales_orders SET status = 'in_production', eta_date = '2026-12-01' WHERE id = 22;
         UPDATE sales_orders SET updated_at = 'y' WHERE id = 22;",
    )
    .await;
    backend.commit(tx).await.unwrap();
    h.execute("UPDATE sales_orders SET status = 'shipped' WHERE id = 22")
        .await;
    let events = events(&outbox).await;
    let updated = |changed: Value, before: Value, after: Value| Ev {
        topic: "doc.updated".into(),
        payload: json!({"model": "erp.sales_order", "table": "sales_orders", "operation": "updated", "pk": 22,
            "changed": changed, "before": before, "after": after}),
        headers: json!({"author": "Администратор"}),
        ordering_key: Some("erp.sales_order:22".into()),
    };
    assert_eq!(
        events[..2],
        [
            updated(
                json!(["prepaid", "paid_at"]),
                json!({"prepaid": "0.00", "paid_at": null}),
                json!({"prepaid": "1200.00", "paid_at": "2026-11-13 17:20:00"}),
            ),
            updated(
                json!(["status", "eta_date"]),
                json!({"status": "confirmed", "eta_date": null}),
                json!({"status": "in_production", "eta_date": "2026-12-01"}),
            ),
        ]
    );
    assert_eq!(events.len(), 3, "no event for the excluded column alone");
    assert_eq!(
        events[2].headers,
        json!({}),
        "the context ended with the transaction"
    );
}

/// The transaction's context becomes every captured event's headers: a rolled-back context
/// leaves nothing, a savepoint's context is undone with it, `clear_context` and the end of the
/// transaction end it; the tenant comes from the row (`extra_from_row`); a context that is not
/// an object of named headers is a validation error.
pub async fn context_headers_and_tenant_from_the_row<H: Harness>(h: &H) {
    let outbox = capture_outbox(
        h,
        "CREATE TABLE invoices (id INTEGER PRIMARY KEY, tenant_id TEXT NOT NULL, total INTEGER);
         ALTER TABLE hare_outbox ADD COLUMN tenant TEXT;",
    )
    .await;
    ChangeCapture::new("invoices")
        .with_payload(ChangePayload::Keys)
        .with_extra_from_row("tenant", "tenant_id")
        .install(&outbox)
        .await
        .unwrap();
    let backend = outbox.backend();
    let mut tx = backend.begin().await.unwrap();
    outbox
        .set_context(&mut tx, json!({"author": "eve"}))
        .await
        .unwrap();
    backend.rollback(tx).await.unwrap();

    let mut tx = backend.begin().await.unwrap();
    let ann = json!({"author": "ann", "traceparent": "00-ab-cd-01"});
    outbox.set_context(&mut tx, ann.clone()).await.unwrap();
    H::execute_on(
        &mut tx,
        "INSERT INTO invoices VALUES (1, 'acme', 10), (2, 'globex', 20); SAVEPOINT s",
    )
    .await;
    outbox
        .set_context(&mut tx, json!({"author": "bob"}))
        .await
        .unwrap();
    H::execute_on(
        &mut tx,
        "ROLLBACK TO SAVEPOINT s; DELETE FROM invoices WHERE id = 2",
    )
    .await;
    outbox.clear_context(&mut tx).await.unwrap();
    H::execute_on(&mut tx, "UPDATE invoices SET total = 11 WHERE id = 1").await;
    backend.commit(tx).await.unwrap();
    h.execute("UPDATE invoices SET total = 12 WHERE id = 1")
        .await;

    let headers: Vec<Value> = events(&outbox)
        .await
        .into_iter()
        .map(|e| e.headers)
        .collect();
    assert_eq!(
        headers,
        [ann.clone(), ann.clone(), ann, json!({}), json!({})]
    );
    let tenant = |name: &str| format!("SELECT count(*) FROM hare_outbox WHERE tenant = '{name}'");
    assert_eq!(h.scalar(&tenant("acme")).await, 3);
    assert_eq!(h.scalar(&tenant("globex")).await, 2);
    for bad in [json!(["x"]), json!({"": 1})] {
        let e = outbox
            .set_context(&mut *h.acquire().await, bad)
            .await
            .unwrap_err();
        assert!(matches!(e, Error::Validation { .. }), "{e}");
    }
}

/// The table of the every-row scenarios: three orders, `updated_at` to be excluded.
const ORDERS_DDL: &str =
    "CREATE TABLE orders (id INTEGER PRIMARY KEY, status TEXT NOT NULL, note TEXT,
    updated_at TEXT NOT NULL DEFAULT 'a');
    INSERT INTO orders (id, status) VALUES (1, 'new'), (2, 'new'), (3, 'paid')";

/// (pk, changed, after) of every update event, in sequence order.
async fn updates<B: JournalBackend>(outbox: &Outbox<B>) -> Vec<(Value, Value, Value)> {
    payloads(outbox)
        .await
        .into_iter()
        .map(|p| {
            assert_eq!(p["operation"], "updated", "{p}");
            (p["pk"].clone(), p["changed"].clone(), p["after"].clone())
        })
        .collect()
}

/// By default capture writes an event for every row a statement touches: one UPDATE over three
/// rows writes three events — `changed` empty for the row set to its own value — and an UPDATE
/// of only an excluded column writes one too (`exclude` narrows what the event holds, not which
/// rows count).
pub async fn every_touched_row_writes_an_event_by_default<H: Harness>(h: &H) {
    let outbox = capture_outbox(h, ORDERS_DDL).await;
    let declaration = ChangeCapture::new("orders")
        .with_exclude(["updated_at"])
        .with_operations([RowOperation::Update]);
    assert!(!declaration.skip_unchanged, "off by default");
    declaration.install(&outbox).await.unwrap();
    h.execute("UPDATE orders SET status = 'paid'").await;
    h.execute("UPDATE orders SET updated_at = 'b' WHERE id = 1")
        .await;

    let events = updates(&outbox).await;
    assert_eq!(events.len(), 4, "{events:?}");
    assert_eq!(
        (&events[0].0, &events[0].1),
        (&json!(1), &json!(["status"]))
    );
    assert_eq!(
        (&events[1].0, &events[1].1),
        (&json!(2), &json!(["status"]))
    );
    assert_eq!((&events[2].0, &events[2].1), (&json!(3), &json!([])));
    assert_eq!(events[2].2["status"], "paid");
    assert_eq!((&events[3].0, &events[3].1), (&json!(1), &json!([])));
    assert!(
        events[3].2.get("updated_at").is_none(),
        "exclude still narrows the event"
    );
}

/// With `skip_unchanged` an UPDATE writes events only for rows whose captured columns changed:
/// the row already `paid` and the update of only `updated_at` write nothing.
pub async fn skip_unchanged_writes_nothing_for_rows_that_kept_their_captured_values<H: Harness>(
    h: &H,
) {
    let outbox = capture_outbox(h, ORDERS_DDL).await;
    ChangeCapture::new("orders")
        .with_exclude(["updated_at"])
        .with_operations([RowOperation::Update])
        .with_payload(ChangePayload::Changes)
        .with_skip_unchanged(true)
        .install(&outbox)
        .await
        .unwrap();
    h.execute("UPDATE orders SET status = 'paid'").await;
    h.execute("UPDATE orders SET updated_at = 'b'").await;
    assert_eq!(
        updates(&outbox).await,
        vec![
            (json!(1), json!(["status"]), json!({"status": "paid"})),
            (json!(2), json!(["status"]), json!({"status": "paid"})),
        ]
    );
}
