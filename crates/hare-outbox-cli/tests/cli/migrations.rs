//! `migrate --status` and `schema` on the real binary, on SQLite and on PostgreSQL: pending and
//! applied versions, the SQL of pending versions (which `migrate` then finds applied), nothing
//! pending, a record edited by hand, and `schema --all` without a database.

use std::time::Duration;

use hare_outbox::MigrationStream;
use hare_outbox::backend::Backend;
use hare_outbox::migration::Migration;
use hare_outbox::sqlite::SqliteBackend;
use hare_outbox_testkit::pg::TestSchema;
use sqlx::AssertSqlSafe;

use crate::support::{TempDir, hare_outbox, run};

const TIMEOUT: Duration = Duration::from_secs(60);

/// The outbox versions of this build (the same on both backends).
fn versions() -> Vec<Migration> {
    let pool = sqlx::SqlitePool::connect_lazy("sqlite::memory:").expect("lazy pool");
    SqliteBackend::new(pool)
        .migrations(MigrationStream::Outbox)
        .to_vec()
}

/// `hare-outbox ARGS… --database-url URL` in `dir`: (exit code, stdout, stderr).
async fn cli(dir: &TempDir, url: &str, args: &[&str]) -> (i32, String, String) {
    run(
        hare_outbox(dir.path())
            .args(args)
            .args(["--database-url", url]),
        TIMEOUT,
    )
    .await
}

/// The lines of `migrate --status` after its header, for every version in `state`.
fn assert_every_version(stdout: &str, state: &str) {
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[1].split_whitespace().collect::<Vec<_>>(),
        ["version", "name", "state", "applied_at"]
    );
    let versions = versions();
    assert_eq!(lines.len(), 2 + versions.len(), "{stdout}");
    for (line, m) in lines[2..].iter().zip(&versions) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            fields[..3],
            [m.version.to_string().as_str(), m.name, state],
            "{stdout}"
        );
        if state == "pending" {
            assert_eq!(fields[3], "-");
        } else {
            let at = chrono::DateTime::parse_from_rfc3339(fields[3]).expect("an RFC 3339 time");
            let age = chrono::Utc::now().signed_duration_since(at);
            assert!(age.num_seconds().abs() < 600, "{line}");
        }
    }
}

#[tokio::test]
async fn status_and_schema_on_sqlite_before_and_after_migrate() {
    let dir = TempDir::new("migrations");
    let url = "sqlite:erp.db";
    let file = dir.path().join("erp.db");
    let n = versions().len();

    let (code, stdout, stderr) = cli(&dir, url, &["migrate", "--status"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.starts_with(&format!(
            "outbox table hare_outbox (sqlite): 0 of {n} schema versions applied (the database file does not exist yet)\n"
        )),
        "{stdout}"
    );
    assert_every_version(&stdout, "pending");
    assert!(!file.exists(), "--status must not create the database");

    let (code, schema, stderr) = cli(&dir, url, &["schema"]).await;
    assert_eq!(code, 0, "{stderr}");
    let names: Vec<String> = versions()
        .iter()
        .map(|m| format!("{} {}", m.version, m.name))
        .collect();
    assert_eq!(
        schema.lines().next(),
        Some(
            format!(
                "-- hare-outbox: outbox table hare_outbox (sqlite), pending schema versions: {} (the database file does not exist yet)",
                names.join(", ")
            )
            .as_str()
        )
    );
    assert!(
        schema.contains("CREATE TABLE IF NOT EXISTS \"hare_outbox\" ("),
        "{schema}"
    );
    assert!(!file.exists(), "schema must not create the database");

    // The printed SQL, run by another tool, leaves the database as `migrate` would.
    let by_hand = dir.path().join("by_hand.db");
    let pool = hare_outbox::sqlite::connect(&format!("sqlite:{}", by_hand.display()))
        .await
        .expect("open");
    sqlx::raw_sql(AssertSqlSafe(schema.clone()))
        .execute(&pool)
        .await
        .expect("the printed SQL runs");
    pool.close().await;
    let (code, stdout, stderr) = cli(&dir, "sqlite:by_hand.db", &["migrate", "--status"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert_every_version(&stdout, "applied");
    let (code, _, stderr) = cli(&dir, "sqlite:by_hand.db", &["migrate"]).await;
    assert_eq!(code, 0, "{stderr}");

    let (code, _, stderr) = cli(&dir, url, &["migrate"]).await;
    assert_eq!(code, 0, "{stderr}");
    let (code, stdout, stderr) = cli(&dir, url, &["migrate", "--status"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.starts_with(&format!(
            "outbox table hare_outbox (sqlite): {n} of {n} schema versions applied\n"
        )),
        "{stdout}"
    );
    assert_every_version(&stdout, "applied");

    let (code, stdout, stderr) = cli(&dir, url, &["schema"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stdout,
        format!(
            "-- hare-outbox: outbox table hare_outbox (sqlite) is at schema version {n}, the newest; no migration is pending\n"
        )
    );
    // --all still prints every version, for an empty database.
    let (code, stdout, stderr) = cli(&dir, url, &["schema", "--all"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("(--all: every version, as for an empty database)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("CREATE TABLE IF NOT EXISTS \"hare_outbox\" ("),
        "{stdout}"
    );
}

#[tokio::test]
async fn status_schema_and_a_drifted_record_on_postgres() {
    let schema = TestSchema::new(2).await;
    let url = schema.url_with_search_path();
    let dir = TempDir::new("migrations-pg");
    let n = versions().len();

    let (code, stdout, stderr) = cli(&dir, &url, &["migrate", "--status", "--table", "erp"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.starts_with(&format!(
            "outbox table erp (postgres): 0 of {n} schema versions applied\n"
        )),
        "{stdout}"
    );
    assert_every_version(&stdout, "pending");
    let (code, stdout, stderr) = cli(&dir, &url, &["schema", "--table", "erp"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.starts_with(
            "-- hare-outbox: outbox table erp (postgres), pending schema versions: 1 create_outbox"
        ) && stdout
            .lines()
            .next()
            .unwrap_or_default()
            .ends_with("(the database has none of them)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("CREATE TABLE IF NOT EXISTS \"erp\" ("),
        "{stdout}"
    );

    let (code, _, stderr) = cli(&dir, &url, &["migrate", "--table", "erp"]).await;
    assert_eq!(code, 0, "{stderr}");
    let (code, stdout, stderr) = cli(&dir, &url, &["migrate", "--status", "--table", "erp"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert_every_version(&stdout, "applied");
    let (code, stdout, stderr) = cli(&dir, &url, &["schema", "--table", "erp"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("no migration is pending"), "{stdout}");

    sqlx::query("UPDATE hare_outbox_migrations SET checksum = 'edited' WHERE table_name = 'erp' AND version = 1")
        .execute(&schema.pool)
        .await
        .expect("edit the record");
    for args in [
        &["migrate", "--status", "--table", "erp"][..],
        &["migrate", "--table", "erp"],
        &["schema", "--table", "erp"],
    ] {
        let (code, stdout, stderr) = cli(&dir, &url, args).await;
        assert_eq!(code, 1, "{args:?}: {stdout}{stderr}");
        assert!(
            stderr.contains(
                "migration version 1 (\"create_outbox\") was applied with checksum edited"
            ) && stderr.contains("0001_create_outbox.sql"),
            "{args:?}: {stderr}"
        );
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
    }
    schema.drop_schema().await;
}

#[tokio::test]
async fn schema_all_needs_no_database_and_schema_without_it_points_there() {
    let dir = TempDir::new("migrations-offline");
    // Nothing listens on port 1.
    let url = "postgres://postgres@127.0.0.1:1/nowhere";
    let (code, stdout, stderr) =
        cli(&dir, url, &["schema", "--all", "--table", "billing.events"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("-- hare-outbox: outbox table billing.events (postgres), pending schema versions: 1 create_outbox"), "{stdout}");
    assert!(
        stdout.contains("CREATE SCHEMA IF NOT EXISTS \"billing\";"),
        "{stdout}"
    );
    assert!(
        stdout.contains("CREATE TABLE IF NOT EXISTS \"billing\".\"hare_outbox_migrations\""),
        "{stdout}"
    );

    let (code, stdout, stderr) = cli(&dir, url, &["schema"]).await;
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stderr.contains("`hare-outbox schema --all` prints every version without connecting"),
        "{stderr}"
    );
}
