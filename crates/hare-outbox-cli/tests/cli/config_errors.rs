//! A bad config file, URL or option: exit code 2 and a message naming the problem, before any
//! connection is tried.

use std::time::Duration;

use crate::support::{TempDir, hare_outbox, run};

/// Runs `relay --config <file with text>` and returns (exit code, stderr).
async fn relay_with(text: &str) -> (i32, String) {
    let dir = TempDir::new("bad-config");
    let file = dir.write("hare-outbox.toml", text);
    let (code, _, stderr) = run(
        hare_outbox(dir.path())
            .args(["relay", "--config"])
            .arg(&file),
        Duration::from_secs(30),
    )
    .await;
    (code, stderr)
}

fn assert_names(stderr: &str, words: &[&str]) {
    for word in words {
        assert!(stderr.contains(word), "{word:?} not in:\n{stderr}");
    }
}

#[tokio::test]
async fn unknown_key_names_the_key_and_the_allowed_ones() {
    let (code, stderr) =
        relay_with("database_url = \"sqlite:x.db\"\n[relay]\npoll_interval = 5\n").await;
    assert_eq!(code, 2, "{stderr}");
    assert_names(
        &stderr,
        &["hare-outbox.toml", "poll_interval", "poll_interval_seconds"],
    );
}

#[tokio::test]
async fn unsupported_url_scheme_names_the_url_and_the_schemes() {
    let (code, stderr) = relay_with("database_url = \"mongodb://app@db/erp\"\n").await;
    assert_eq!(code, 2, "{stderr}");
    assert_names(
        &stderr,
        &[
            "mongodb://app@db/erp",
            "postgres://",
            "mysql://",
            "mariadb://",
            "sqlite:",
        ],
    );
}

#[tokio::test]
async fn batch_size_zero_names_the_option_and_its_range() {
    let (code, stderr) =
        relay_with("database_url = \"sqlite:x.db\"\n[relay]\nbatch_size = 0\n").await;
    assert_eq!(code, 2, "{stderr}");
    assert_names(&stderr, &["batch_size", "1 to 10000"]);
}

#[tokio::test]
async fn unknown_delivery_kind_names_the_kinds() {
    let (code, stderr) =
        relay_with("database_url = \"sqlite:x.db\"\n[delivery]\nkind = \"pigeon\"\n").await;
    assert_eq!(code, 2, "{stderr}");
    assert_names(
        &stderr,
        &[
            "pigeon", "stdout", "webhook", "kafka", "rabbitmq", "redis", "nats", "mqtt",
        ],
    );
}

#[tokio::test]
async fn a_secret_in_the_file_is_refused_without_echoing_it() {
    let (code, stderr) = relay_with(
        "database_url = \"sqlite:x.db\"\n[delivery]\nkind = \"webhook\"\nurl = \"http://127.0.0.1:9/\"\nsecret = \"hunter2\"\n",
    )
    .await;
    assert_eq!(code, 2, "{stderr}");
    assert_names(&stderr, &["secret_env", "secret_file"]);
    assert!(!stderr.contains("hunter2"), "{stderr}");
}

#[tokio::test]
async fn missing_file_url_and_bad_flags_are_usage_errors() {
    let dir = TempDir::new("usage");
    let (code, _, stderr) = run(
        hare_outbox(dir.path()).args(["relay", "--config", "nope.toml"]),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(code, 2, "{stderr}");
    assert_names(&stderr, &["nope.toml"]);

    let (code, _, stderr) = run(
        hare_outbox(dir.path()).arg("migrate"),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(code, 2, "{stderr}");
    assert_names(&stderr, &["HARE_OUTBOX_DATABASE_URL", "--database-url"]);

    let (code, _, stderr) = run(
        hare_outbox(dir.path())
            .arg("migrate")
            .env("HARE_OUTBOX_DATABASE_URL", "redis://127.0.0.1/0"),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(code, 2, "{stderr}");
    assert_names(&stderr, &["redis://127.0.0.1/0"]);

    let (code, _, stderr) = run(
        hare_outbox(dir.path()).args(["relay", "--no-such-flag"]),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(code, 2, "{stderr}");

    let (code, _, stderr) = run(
        hare_outbox(dir.path()).args([
            "migrate",
            "--database-url",
            "sqlite:x.db",
            "--table",
            "a b",
        ]),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(code, 2, "{stderr}");
    assert_names(&stderr, &["a b"]);
}

#[tokio::test]
async fn unreachable_database_is_a_runtime_failure() {
    let dir = TempDir::new("unreachable");
    // A directory that does not exist: SQLite cannot create the file.
    let (code, _, stderr) = run(
        hare_outbox(dir.path()).args(["migrate", "--database-url", "sqlite:no/such/dir/x.db"]),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(code, 1, "{stderr}");
    assert_names(&stderr, &["no/such/dir/x.db"]);
}
