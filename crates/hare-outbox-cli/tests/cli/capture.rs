//! `hare-outbox capture install|uninstall|status` on PostgreSQL and SQLite: installed triggers
//! capture raw SQL (delivered by `relay` with the transaction's author), status reports drift
//! (exit 3), uninstall removes them, and a bad `[[capture]]` entry installs nothing (exit 2).

use std::path::{Path, PathBuf};
use std::time::Duration;

use hare_outbox::postgres::PgBackend;
use hare_outbox::sqlite::SqliteBackend;
use hare_outbox::{Outbox, OutboxTable};
use hare_outbox_testkit::pg::TestSchema;
use serde_json::{Value, json};

use crate::support::{Proc, TempDir, hare_outbox, run};

/// The capture of the test's `sales_orders` table, as the config file declares it.
const CAPTURE: &str = r#"
[[capture]]
table = "sales_orders"
label = "erp.sales_order"
payload = "changes"
exclude = ["updated_at"]
topic = "doc.{operation}"
ordering_key = "{table}:{pk}"
"#;

const RELAY: &str = "[relay]\npoll_interval_seconds = 0.1\n\n[delivery]\nkind = \"stdout\"\n";

/// Runs `hare-outbox --config <config> <args…>` with `url` as the database; returns (exit code,
/// stdout, stderr).
async fn cli(dir: &TempDir, config: &Path, url: &str, args: &[&str]) -> (i32, String, String) {
    run(
        hare_outbox(dir.path())
            .arg("--config")
            .arg(config)
            .args(args)
            .env("HARE_OUTBOX_DATABASE_URL", url),
        Duration::from_secs(60),
    )
    .await
}

async fn pg_setup() -> (TestSchema, Outbox<PgBackend>) {
    let schema = TestSchema::new(4).await;
    let outbox = Outbox::new(PgBackend::new(schema.pool.clone()), OutboxTable::default());
    outbox.migrate().await.expect("migrate");
    sqlx::raw_sql(
        "CREATE TABLE sales_orders (id integer PRIMARY KEY, status text NOT NULL, updated_at timestamptz);
         INSERT INTO sales_orders VALUES (22, 'confirmed', now());",
    )
    .execute(&schema.pool)
    .await
    .expect("create sales_orders");
    (schema, outbox)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_install_captures_raw_sql_that_relay_delivers_with_its_author() {
    let (schema, outbox) = pg_setup().await;
    let url = schema.url_with_search_path();
    let dir = TempDir::new("capture-pg");
    let config = dir.write("hare-outbox.toml", &format!("{CAPTURE}\n{RELAY}"));

    let (code, stdout, stderr) = cli(&dir, &config, &url, &["capture", "install"]).await;
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stdout.contains("capture sales_orders: installed") && stdout.contains("doc.updated"),
        "{stdout}"
    );
    let (code, stdout, stderr) = cli(&dir, &config, &url, &["capture", "status"]).await;
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stdout.contains("capture sales_orders: installed, up to date"),
        "{stdout}"
    );

    // Raw SQL, in a plain transaction that names its author first.
    let mut tx = schema.pool.begin().await.expect("begin");
    outbox
        .set_context(&mut tx, json!({"author": "Администратор"}))
        .await
        .expect("set context");
    sqlx::query(
        "UPDATE sales_orders SET status = 'in_production', updated_at = now() WHERE id = 22",
    )
    .execute(&mut *tx)
    .await
    .expect("update");
    tx.commit().await.expect("commit");

    let mut relay = Proc::spawn(
        hare_outbox(dir.path())
            .args(["relay", "--config"])
            .arg(&config)
            .env("HARE_OUTBOX_DATABASE_URL", &url),
    );
    relay
        .wait_for_stdout("the captured event", Duration::from_secs(30), |out| {
            out.lines().count() >= 1
        })
        .await;
    relay.signal("TERM");
    let status = relay.wait(Duration::from_secs(30)).await;
    assert_eq!(status.code(), Some(0), "stderr:\n{}", relay.stderr());
    let events: Vec<Value> = relay
        .stdout()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect();
    assert_eq!(events.len(), 1, "{events:?}");
    let event = &events[0];
    assert_eq!(event["topic"], "doc.updated", "{event}");
    assert_eq!(event["ordering_key"], "sales_orders:22", "{event}");
    assert_eq!(event["headers"]["author"], "Администратор", "{event}");
    let payload = &event["payload"];
    assert_eq!(payload["model"], "erp.sales_order", "{payload}");
    assert_eq!(payload["changed"], json!(["status"]), "{payload}");
    assert_eq!(
        payload["before"],
        json!({"status": "confirmed"}),
        "{payload}"
    );
    assert_eq!(
        payload["after"],
        json!({"status": "in_production"}),
        "{payload}"
    );
    schema.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_status_reports_drift_and_uninstall_removes_the_capture() {
    let (schema, outbox) = pg_setup().await;
    let url = schema.url_with_search_path();
    let dir = TempDir::new("capture-pg-drift");
    let config = dir.write("hare-outbox.toml", CAPTURE);

    // Nothing installed yet: missing is exit 3.
    let (code, stdout, stderr) = cli(&dir, &config, &url, &["capture", "status"]).await;
    assert_eq!(code, 3, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stdout.contains("capture sales_orders: not installed"),
        "{stdout}"
    );

    let (code, _, stderr) = cli(&dir, &config, &url, &["capture", "install"]).await;
    assert_eq!(code, 0, "{stderr}");
    sqlx::query("ALTER TABLE sales_orders ADD COLUMN eta_date date")
        .execute(&schema.pool)
        .await
        .expect("alter");
    let (code, stdout, stderr) = cli(&dir, &config, &url, &["capture", "status"]).await;
    assert_eq!(code, 3, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stdout.contains("capture sales_orders: installed, drifted")
            && stdout.contains("column \"eta_date\" was added after install"),
        "{stdout}"
    );
    assert!(stderr.contains("capture install"), "{stderr}");

    // Installing again brings it in line.
    let (code, stdout, stderr) = cli(&dir, &config, &url, &["capture", "install"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("capture sales_orders: reinstalled"),
        "{stdout}"
    );
    let (code, stdout, _) = cli(&dir, &config, &url, &["capture", "status"]).await;
    assert_eq!(code, 0, "{stdout}");

    // A capture the config does not list is reported too.
    let empty = dir.write("empty.toml", "");
    let (code, stdout, _) = cli(&dir, &empty, &url, &["capture", "status"]).await;
    assert_eq!(code, 3, "{stdout}");
    assert!(stdout.contains("installed, not in the config"), "{stdout}");

    let (code, stdout, stderr) = cli(&dir, &config, &url, &["capture", "uninstall"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("capture sales_orders: uninstalled"),
        "{stdout}"
    );
    assert!(outbox.capture_status().await.expect("status").is_empty());
    let (code, stdout, stderr) = cli(
        &dir,
        &empty,
        &url,
        &["capture", "uninstall", "--only", "sales_orders"],
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("capture sales_orders: was not installed"),
        "{stdout}"
    );

    // Writes no longer produce events.
    sqlx::query("UPDATE sales_orders SET status = 'shipped'")
        .execute(&schema.pool)
        .await
        .expect("update");
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM hare_outbox")
        .fetch_one(&schema.pool)
        .await
        .expect("count");
    assert_eq!(count, 0);
    schema.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_a_bad_entry_is_exit_2_and_installs_nothing() {
    let (schema, outbox) = pg_setup().await;
    sqlx::query("CREATE TABLE customers (id integer PRIMARY KEY, name text)")
        .execute(&schema.pool)
        .await
        .expect("create customers");
    let url = schema.url_with_search_path();
    let dir = TempDir::new("capture-pg-bad");

    // The first entry is fine; the second names a column the table does not have, which only the
    // catalog can tell: the first must not stay installed.
    let unknown_column = dir.write(
        "unknown.toml",
        &format!("{CAPTURE}\n[[capture]]\ntable = \"customers\"\nfields = [\"name\", \"no_such_column\"]\n"),
    );
    let (code, stdout, stderr) = cli(&dir, &unknown_column, &url, &["capture", "install"]).await;
    assert_eq!(code, 2, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stderr.contains("no_such_column") && stderr.contains("customers"),
        "{stderr}"
    );
    assert!(!stdout.contains("installed"), "{stdout}");
    assert!(
        outbox.capture_status().await.expect("status").is_empty(),
        "nothing installed"
    );

    // fields with exclude: refused before connecting to anything.
    let both = dir.write(
        "both.toml",
        "[[capture]]\ntable = \"customers\"\nfields = [\"name\"]\nexclude = [\"id\"]\n",
    );
    let (code, _, stderr) = cli(&dir, &both, &url, &["capture", "install"]).await;
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("fields") && stderr.contains("exclude"),
        "{stderr}"
    );
    assert!(outbox.capture_status().await.expect("status").is_empty());

    // An unknown option names the option.
    let typo = dir.write(
        "typo.toml",
        "[[capture]]\ntable = \"customers\"\npayload_mode = \"after\"\n",
    );
    let (code, _, stderr) = cli(&dir, &typo, &url, &["capture", "install"]).await;
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("payload_mode") && stderr.contains("[[capture]] #1"),
        "{stderr}"
    );

    // A previously installed capture stays as it was when a later entry is refused.
    let (code, _, stderr) = cli(
        &dir,
        &dir.write("ok.toml", CAPTURE),
        &url,
        &["capture", "install"],
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    let before = outbox.capture_status().await.expect("status");
    let changed = dir.write(
        "changed.toml",
        &format!(
            "{}\n[[capture]]\ntable = \"customers\"\nexclude = [\"nope\"]\n",
            CAPTURE.replace("\"changes\"", "\"after\"")
        ),
    );
    let (code, _, stderr) = cli(&dir, &changed, &url, &["capture", "install"]).await;
    assert_eq!(code, 2, "{stderr}");
    let after = outbox.capture_status().await.expect("status");
    assert_eq!(after.len(), 1, "{after:?}");
    assert_eq!(after[0].declaration, before[0].declaration);
    schema.drop_schema().await;
}

/// A SQLite file with the outbox table and a `sales_orders` table; returns its URL.
async fn sqlite_setup(dir: &TempDir) -> (String, PathBuf, Outbox<SqliteBackend>) {
    let path = dir.path().join("erp.db");
    let url = format!("sqlite:{}", path.display());
    let pool = hare_outbox::sqlite::connect(&url).await.expect("open");
    let outbox = Outbox::new(SqliteBackend::new(pool.clone()), OutboxTable::default());
    outbox.migrate().await.expect("migrate");
    sqlx::raw_sql(
        "CREATE TABLE sales_orders (id INTEGER PRIMARY KEY, status TEXT NOT NULL, updated_at TEXT);
         INSERT INTO sales_orders VALUES (22, 'confirmed', '2026-11-13 17:20:00');",
    )
    .execute(&pool)
    .await
    .expect("create sales_orders");
    (url, path, outbox)
}

#[tokio::test]
async fn sqlite_install_status_drift_and_uninstall() {
    let dir = TempDir::new("capture-sqlite");
    let (url, _path, outbox) = sqlite_setup(&dir).await;
    let config = dir.write("hare-outbox.toml", &format!("{CAPTURE}\n{RELAY}"));

    let (code, stdout, stderr) = cli(&dir, &config, &url, &["capture", "install"]).await;
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stdout.contains("capture sales_orders: installed"),
        "{stdout}"
    );

    let pool = outbox.backend().pool().clone();
    let mut tx = pool.begin().await.expect("begin");
    outbox
        .set_context(&mut tx, json!({"author": "Соколова А. (склад)"}))
        .await
        .expect("context");
    sqlx::query("UPDATE sales_orders SET status = 'shipped', updated_at = 'x' WHERE id = 22")
        .execute(&mut *tx)
        .await
        .expect("update");
    tx.commit().await.expect("commit");

    let mut relay = Proc::spawn(
        hare_outbox(dir.path())
            .args(["relay", "--config"])
            .arg(&config)
            .env("HARE_OUTBOX_DATABASE_URL", &url),
    );
    relay
        .wait_for_stdout("the captured event", Duration::from_secs(30), |out| {
            out.lines().count() >= 1
        })
        .await;
    relay.signal("INT");
    let status = relay.wait(Duration::from_secs(30)).await;
    assert_eq!(status.code(), Some(0), "stderr:\n{}", relay.stderr());
    let event: Value =
        serde_json::from_str(relay.stdout().lines().next().expect("a line")).expect("JSON line");
    assert_eq!(event["topic"], "doc.updated", "{event}");
    assert_eq!(event["headers"]["author"], "Соколова А. (склад)", "{event}");
    assert_eq!(event["payload"]["changed"], json!(["status"]), "{event}");

    sqlx::query("ALTER TABLE sales_orders ADD COLUMN note TEXT")
        .execute(&pool)
        .await
        .expect("alter");
    let (code, stdout, _) = cli(&dir, &config, &url, &["capture", "status"]).await;
    assert_eq!(code, 3, "{stdout}");
    assert!(stdout.contains("column \"note\" was added"), "{stdout}");

    let (code, stdout, stderr) = cli(&dir, &config, &url, &["capture", "uninstall"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("capture sales_orders: uninstalled"),
        "{stdout}"
    );
    assert!(outbox.capture_status().await.expect("status").is_empty());
    pool.close().await;
}

#[tokio::test]
async fn capture_defaults_are_merged_into_each_entry() {
    let dir = TempDir::new("capture-defaults");
    let (url, _path, outbox) = sqlite_setup(&dir).await;
    let pool = outbox.backend().pool().clone();
    sqlx::query("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, updated_at TEXT)")
        .execute(&pool)
        .await
        .expect("create customers");
    let config = dir.write(
        "hare-outbox.toml",
        r#"
[capture_defaults]
payload = "changes"
exclude = ["updated_at"]
topic = "erp.{table}.{operation}"
operations = ["update"]

[[capture]]
table = "sales_orders"

[[capture]]
table = "customers"
fields = ["name"]
operations = ["insert", "update"]
"#,
    );
    let (code, stdout, stderr) = cli(&dir, &config, &url, &["capture", "install"]).await;
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stdout.contains("erp.sales_orders.updated")
            && !stdout.contains("erp.sales_orders.inserted"),
        "{stdout}"
    );
    assert!(stdout.contains("erp.customers.inserted"), "{stdout}");
    let installed = outbox.capture_status().await.expect("status");
    let customers = installed
        .iter()
        .find(|s| s.table == "customers")
        .and_then(|s| s.declaration.clone())
        .expect("customers installed");
    assert_eq!(customers.fields, Some(vec!["name".to_owned()]));
    assert!(
        customers.exclude.is_empty(),
        "fields replaces the default exclude"
    );
    assert_eq!(customers.payload, hare_outbox::ChangePayload::Changes);
    pool.close().await;
}

#[tokio::test]
async fn listen_notify_on_sqlite_is_a_config_error() {
    let dir = TempDir::new("wakeup-sqlite");
    let config = dir.write(
        "hare-outbox.toml",
        "database_url = \"sqlite:erp.db\"\n\n[wakeup]\nkind = \"listen_notify\"\n",
    );
    let (code, _, stderr) = run(
        hare_outbox(dir.path())
            .args(["relay", "--config"])
            .arg(&config),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("listen_notify") && stderr.contains("sqlite"),
        "{stderr}"
    );
    assert!(
        !dir.path().join("erp.db").exists(),
        "refused before opening the database"
    );
}

#[tokio::test]
async fn install_needs_the_outbox_table_or_migrate() {
    let dir = TempDir::new("capture-migrate");
    let path = dir.path().join("erp.db");
    let url = format!("sqlite:{}", path.display());
    let pool = hare_outbox::sqlite::connect(&url).await.expect("open");
    sqlx::query("CREATE TABLE sales_orders (id INTEGER PRIMARY KEY, status TEXT, updated_at TEXT)")
        .execute(&pool)
        .await
        .expect("create");
    pool.close().await;
    let config = dir.write("hare-outbox.toml", CAPTURE);
    let (code, _, stderr) = cli(&dir, &config, &url, &["capture", "install"]).await;
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("hare-outbox migrate") && stderr.contains("--migrate"),
        "{stderr}"
    );
    let (code, stdout, stderr) =
        cli(&dir, &config, &url, &["capture", "install", "--migrate"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("capture sales_orders: installed"),
        "{stdout}"
    );
}
