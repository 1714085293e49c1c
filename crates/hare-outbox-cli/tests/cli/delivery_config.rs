//! Mistakes in `[delivery]`, `[deliveries.NAME]`, `[[route]]`, `default_delivery` and `[wakeup]`:
//! exit code 2 and a message naming the key and what is allowed, before anything connects (the
//! SQLite database file is never even created).

use std::time::Duration;

use crate::support::{TempDir, hare_outbox, run};

/// Runs `relay --config <file>` on a SQLite file of the directory, with `env` set, and returns
/// (exit code, stderr); asserts the database file was not created.
async fn relay_with(text: &str, env: &[(&str, &str)]) -> (i32, String) {
    let dir = TempDir::new("delivery-config");
    let file = dir.write(
        "hare-outbox.toml",
        &format!("database_url = \"sqlite:outbox.db\"\n{text}"),
    );
    let mut command = hare_outbox(dir.path());
    command.args(["relay", "--migrate", "--config"]).arg(&file);
    for (name, value) in env {
        command.env(name, value);
    }
    let (code, _, stderr) = run(&mut command, Duration::from_secs(30)).await;
    assert!(
        !dir.path().join("outbox.db").exists(),
        "the database was opened before the config was checked\n{stderr}"
    );
    (code, stderr)
}

fn assert_names(stderr: &str, words: &[&str]) {
    for word in words {
        assert!(stderr.contains(word), "{word:?} not in:\n{stderr}");
    }
}

#[tokio::test]
async fn unknown_wakeup_kind_names_the_kinds() {
    let (code, stderr) = relay_with("[wakeup]\nkind = \"pigeon\"\n", &[]).await;
    assert_eq!(code, 2, "{stderr}");
    assert_names(
        &stderr,
        &[
            "pigeon",
            "none",
            "listen_notify",
            "redis",
            "nats",
            "rabbitmq",
            "kafka",
        ],
    );
}

#[tokio::test]
async fn missing_required_keys_are_named() {
    let (code, stderr) = relay_with("[delivery]\nkind = \"redis\"\n", &[]).await;
    assert_eq!(code, 2, "{stderr}");
    assert_names(
        &stderr,
        &["[delivery]", "redis", "url_env", "HARE_OUTBOX_DELIVERY_URL"],
    );

    let (code, stderr) = relay_with("[deliveries.events]\nkind = \"kafka\"\n", &[]).await;
    assert_eq!(code, 2, "{stderr}");
    assert_names(&stderr, &["[deliveries.events]", "bootstrap_servers"]);

    let (code, stderr) = relay_with("[wakeup]\nkind = \"nats\"\n", &[]).await;
    assert_eq!(code, 2, "{stderr}");
    assert_names(&stderr, &["[wakeup]", "url", "HARE_OUTBOX_WAKEUP_URL"]);

    let (code, stderr) = relay_with(
        "[delivery]\nkind = \"redis\"\nurl_env = \"NO_SUCH_VARIABLE_H4\"\n",
        &[],
    )
    .await;
    assert_eq!(code, 2, "{stderr}");
    assert_names(&stderr, &["url_env", "NO_SUCH_VARIABLE_H4", "not set"]);
}

#[tokio::test]
async fn a_key_of_another_kind_names_the_keys_of_the_kind() {
    let (code, stderr) = relay_with(
        "[delivery]\nkind = \"redis\"\nurl = \"redis://127.0.0.1:6379/0\"\nexchange = \"x\"\n",
        &[],
    )
    .await;
    assert_eq!(code, 2, "{stderr}");
    assert_names(&stderr, &["exchange", "redis", "stream", "max_length"]);

    let (code, stderr) = relay_with(
        "[wakeup]\nkind = \"redis\"\nurl = \"redis://127.0.0.1:6379/0\"\nsubject = \"x\"\n",
        &[],
    )
    .await;
    assert_eq!(code, 2, "{stderr}");
    assert_names(&stderr, &["subject", "redis", "channel"]);

    // taskiq: the URL's scheme picks the broker; an AMQP-only key with Redis is refused.
    let (code, stderr) = relay_with(
        "[delivery]\nkind = \"taskiq\"\nurl = \"redis://127.0.0.1:6379/0\"\nexchange = \"x\"\n",
        &[],
    )
    .await;
    assert_eq!(code, 2, "{stderr}");
    assert_names(&stderr, &["exchange", "AMQP", "queue"]);
    let (code, stderr) = relay_with(
        "[delivery]\nkind = \"taskiq\"\nurl = \"http://127.0.0.1:1/\"\n",
        &[],
    )
    .await;
    assert_eq!(code, 2, "{stderr}");
    assert_names(&stderr, &["http://127.0.0.1:1/", "redis://", "amqp://"]);
}

#[tokio::test]
async fn a_route_to_an_unknown_delivery_names_the_route_and_the_defined_ones() {
    let (code, stderr) = relay_with(
        "[deliveries.audit]\nkind = \"stdout\"\n\n[[route]]\ntopic = \"audit.*\"\ndelivery = \"audit\"\n\n[[route]]\ntopic = \"billing.*\"\ndelivery = \"billing\"\n",
        &[],
    )
    .await;
    assert_eq!(code, 2, "{stderr}");
    assert_names(
        &stderr,
        &["[[route]] #2", "billing.*", "\"billing\"", "\"audit\""],
    );

    let (code, stderr) = relay_with(
        "default_delivery = \"nowhere\"\n[deliveries.audit]\nkind = \"stdout\"\n",
        &[],
    )
    .await;
    assert_eq!(code, 2, "{stderr}");
    assert_names(&stderr, &["default_delivery", "nowhere", "\"audit\""]);
}

#[tokio::test]
async fn delivery_section_and_default_delivery_together_are_refused() {
    let (code, stderr) = relay_with(
        "default_delivery = \"audit\"\n[delivery]\nkind = \"stdout\"\n[deliveries.audit]\nkind = \"stdout\"\n[[route]]\ntopic = \"a.*\"\ndelivery = \"audit\"\n",
        &[],
    )
    .await;
    assert_eq!(code, 2, "{stderr}");
    assert_names(&stderr, &["default_delivery", "[delivery]", "remove"]);
}

#[tokio::test]
async fn a_password_in_a_url_is_refused_without_echoing_it() {
    let (code, stderr) = relay_with(
        "[deliveries.queue]\nkind = \"rabbitmq\"\nurl = \"amqp://guest:hunter2@127.0.0.1:5672/%2f\"\n[[route]]\ntopic = \"*\"\ndelivery = \"queue\"\n",
        &[],
    )
    .await;
    assert_eq!(code, 2, "{stderr}");
    assert_names(
        &stderr,
        &["[deliveries.queue]", "password", "url_env", "url_file"],
    );
    assert!(!stderr.contains("hunter2"), "{stderr}");

    let (code, stderr) = relay_with(
        "[wakeup]\nkind = \"redis\"\nurl = \"redis://:hunter2@127.0.0.1:6379/0\"\n",
        &[],
    )
    .await;
    assert_eq!(code, 2, "{stderr}");
    assert_names(&stderr, &["[wakeup]", "password", "url_env"]);
    assert!(!stderr.contains("hunter2"), "{stderr}");

    // A secret Kafka property is refused too; properties_env is the way.
    let (code, stderr) = relay_with(
        "[delivery]\nkind = \"kafka\"\nbootstrap_servers = \"127.0.0.1:9\"\nproperties = { \"sasl.password\" = \"hunter2\" }\n",
        &[],
    )
    .await;
    assert_eq!(code, 2, "{stderr}");
    assert_names(&stderr, &["sasl.password", "properties_env"]);
    assert!(!stderr.contains("hunter2"), "{stderr}");
}

#[tokio::test]
async fn listen_notify_on_sqlite_is_refused() {
    let (code, stderr) = relay_with("[wakeup]\nkind = \"listen_notify\"\n", &[]).await;
    assert_eq!(code, 2, "{stderr}");
    assert_names(&stderr, &["listen_notify", "sqlite", "postgres://"]);
}

#[tokio::test]
async fn a_url_from_the_environment_may_carry_a_password() {
    // The same URL through url_env passes the config check; the relay then fails to connect to
    // nothing only at run time — here the database is a directory that does not exist, so the
    // run fails with exit 1 after the config was accepted.
    let dir = TempDir::new("url-env");
    let file = dir.write(
        "hare-outbox.toml",
        "database_url = \"sqlite:no/such/dir/outbox.db\"\n[delivery]\nkind = \"rabbitmq\"\nurl_env = \"H4_AMQP_URL\"\n",
    );
    let (code, _, stderr) = run(
        hare_outbox(dir.path())
            .args(["relay", "--config"])
            .arg(&file)
            .env("H4_AMQP_URL", "amqp://guest:hunter2@127.0.0.1:5672/%2f"),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(code, 1, "{stderr}");
    assert_names(&stderr, &["no/such/dir/outbox.db"]);
    assert!(!stderr.contains("hunter2"), "{stderr}");
}
