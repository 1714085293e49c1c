//! Tests of the delivery sections: each kind, routes, secrets, environment overrides.

use super::*;
use crate::config::{Overrides, Settings, parse};
use hare_outbox::delivery::DeliveryConfig as _;

fn resolve_with(text: &str, env: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<Settings> {
    let file = parse(text).map_err(|e| usage(e.to_string()))?;
    crate::config::resolve(file, None, Overrides::default(), env)
}

fn no_env(_: &str) -> Option<String> {
    None
}

fn error_text(text: &str, env: &dyn Fn(&str) -> Option<String>) -> String {
    let e = resolve_with(text, env).expect_err("should be refused");
    assert_eq!(
        crate::error::exit_code(&e),
        crate::error::EXIT_USAGE,
        "{e:#}"
    );
    format!("{e:#}")
}

fn router(settings: DeliverySettings) -> RouterSettings {
    match settings {
        DeliverySettings::Routed(router) => router,
        other => panic!("not a router: {other:?}"),
    }
}

#[test]
fn the_readme_routes_example_resolves_into_a_router() {
    let readme = include_str!("../../../../../README.md");
    let block: String = readme
        .split("Several deliveries, chosen by topic")
        .nth(1)
        .expect("README has the routes example")
        .lines()
        .skip_while(|l| l.trim() != "```toml")
        .skip(1)
        .take_while(|l| l.trim() != "```")
        .map(|l| format!("{l}\n"))
        .collect();
    let env =
        |name: &str| (name == "AUDIT_REDIS_URL").then(|| "redis://:pw@127.0.0.1:6379/0".to_owned());
    let s = resolve_with(&block, &env).unwrap();
    let r = router(s.delivery);
    assert_eq!(
        r.routes,
        [
            ("audit.*".to_owned(), "audit".to_owned()),
            ("erp.order.*".to_owned(), "analytics".to_owned())
        ]
    );
    assert_eq!(r.default.as_ref().map(|(n, _)| n.as_str()), Some("hooks"));
    let DeliverySettings::One(crate::config::delivery::BrokerConfig::Redis(audit)) =
        &r.deliveries["audit"]
    else {
        panic!("{:?}", r.deliveries)
    };
    assert_eq!(audit.resolved_url().unwrap().source, "$AUDIT_REDIS_URL");
    assert!(
        !format!("{audit:?}").contains("pw"),
        "Debug hides the password"
    );
    let DeliverySettings::One(crate::config::delivery::BrokerConfig::Kafka(kafka)) =
        &r.deliveries["analytics"]
    else {
        panic!()
    };
    assert_eq!(
        kafka.resolved_properties().unwrap(),
        [("compression.type".to_owned(), "lz4".to_owned())]
    );
}

#[test]
fn routes_build_a_router_that_picks_exact_then_glob_then_default() {
    let text = "[delivery]\nkind = \"stdout\"\n[deliveries.a]\nkind = \"stdout\"\n[deliveries.b]\nkind = \"redis\"\nurl = \"redis://127.0.0.1:6379/0\"\n[[route]]\ntopic = \"x.*\"\ndelivery = \"a\"\n[[route]]\ntopic = \"x.y\"\ndelivery = \"b\"\n[[route]]\ntopic = \"*\"\ndelivery = \"b\"\n";
    let s = resolve_with(text, &no_env).unwrap();
    let described = s.delivery.describe();
    assert!(
        described.contains("x.* -> a") && described.contains("default [delivery]"),
        "{described}"
    );
    s.delivery.build().expect("builds without connecting");
    let r = router(s.delivery);
    assert_eq!(r.routes.len(), 3);
    assert_eq!(
        r.default.as_ref().map(|(n, _)| n.as_str()),
        Some("[delivery]")
    );
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
}

#[test]
fn only_a_default_delivery_needs_no_router() {
    let s = resolve_with(
        "default_delivery = \"a\"\n[deliveries.a]\nkind = \"nats\"\nurl = \"nats://127.0.0.1:4222\"\n",
        &no_env,
    )
    .unwrap();
    assert!(
        matches!(
            s.delivery,
            DeliverySettings::One(crate::config::delivery::BrokerConfig::Nats(_))
        ),
        "{:?}",
        s.delivery
    );
}

#[test]
fn route_mistakes_are_named() {
    let e = error_text(
        "[deliveries.a]\nkind = \"stdout\"\n[[route]]\ntopic = \"x\"\ndelivery = \"b\"\n",
        &no_env,
    );
    assert!(
        e.contains("[[route]] #1") && e.contains("\"b\"") && e.contains("\"a\""),
        "{e}"
    );
    let e = error_text(
        "[deliveries.a]\nkind = \"stdout\"\n[[route]]\ntopic = \"x\"\ndelivery = \"a\"\n[[route]]\ntopic = \"x\"\ndelivery = \"a\"\n",
        &no_env,
    );
    assert!(e.contains("#2") && e.contains("#1"), "{e}");
    let e = error_text("[deliveries.a]\nkind = \"stdout\"\n", &no_env);
    assert!(
        e.contains("[[route]]") && e.contains("default_delivery"),
        "{e}"
    );
    let e = error_text("[[route]]\ntopic = \"x\"\n", &no_env);
    assert!(e.contains("delivery"), "{e}");
    let e = error_text("[deliveries.a]\nurl = \"http://x/\"\n", &no_env);
    assert!(
        e.contains("[deliveries.a]") && e.contains("kind is missing"),
        "{e}"
    );
    let e = error_text(
        "default_delivery = \"a\"\n[delivery]\nkind = \"stdout\"\n[deliveries.a]\nkind = \"stdout\"\n",
        &no_env,
    );
    assert!(
        e.contains("default_delivery") && e.contains("[delivery]"),
        "{e}"
    );
    // A glob the router refuses is a config error too.
    let e = error_text(
        "[deliveries.a]\nkind = \"stdout\"\n[[route]]\ntopic = \"\"\ndelivery = \"a\"\n",
        &no_env,
    );
    assert!(e.contains("topic is empty"), "{e}");
}

#[test]
fn unused_deliveries_and_a_missing_default_are_warned_about() {
    let s = resolve_with(
        "[deliveries.a]\nkind = \"stdout\"\n[deliveries.b]\nkind = \"stdout\"\n[[route]]\ntopic = \"x\"\ndelivery = \"a\"\n",
        &no_env,
    )
    .unwrap();
    assert!(
        s.warnings
            .iter()
            .any(|w| w.contains("[deliveries.b] is not used")),
        "{:?}",
        s.warnings
    );
    assert!(
        s.warnings.iter().any(|w| w.contains("no default delivery")),
        "{:?}",
        s.warnings
    );
}

#[test]
fn passwords_in_file_urls_are_refused_and_env_urls_accepted() {
    for kind in ["rabbitmq", "redis", "nats", "mqtt", "webhook"] {
        let url = match kind {
            "rabbitmq" => "amqp://u:hunter2@h/%2f",
            "redis" => "redis://:hunter2@h:6379/0",
            "nats" => "nats://u:hunter2@h:4222",
            "mqtt" => "mqtt://u:hunter2@h:1883?client_id=x",
            _ => "https://u:hunter2@h/hook",
        };
        let e = error_text(
            &format!("[delivery]\nkind = \"{kind}\"\nurl = \"{url}\"\n"),
            &no_env,
        );
        assert!(
            e.contains("url_env") && !e.contains("hunter2"),
            "{kind}: {e}"
        );
        let env = |name: &str| (name == "U").then(|| url.to_owned());
        let s = resolve_with(
            &format!("[delivery]\nkind = \"{kind}\"\nurl_env = \"U\"\n"),
            &env,
        )
        .unwrap_or_else(|e| panic!("{kind}: {e:#}"));
        let shown = s.delivery.describe();
        assert!(!shown.contains("hunter2"), "{kind}: {shown}");
        assert!(!format!("{:?}", s.delivery).contains("hunter2"), "{kind}");
    }
    // NATS takes a list of servers, and servers without a scheme: a password in any of them
    // is refused too.
    for url in [
        "nats://h1:4222,nats://u:hunter2@h2:4222",
        "nats://h1:4222, u:hunter2@h2:4222",
        "u:hunter2@h:4222",
    ] {
        let e = error_text(
            &format!("[delivery]\nkind = \"nats\"\nurl = \"{url}\"\n"),
            &no_env,
        );
        assert!(
            e.contains("url_env") && !e.contains("hunter2"),
            "{url}: {e}"
        );
    }
    let e = error_text(
        "[delivery]\nkind = \"redis\"\nurl = \"redis://h\"\nurl_env = \"U\"\n",
        &no_env,
    );
    assert!(e.contains("set one"), "{e}");
}

#[test]
fn url_file_is_read_relative_to_the_config_file() {
    let dir = std::env::temp_dir().join(format!("hare-outbox-cli-urlfile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("redis-url"), "redis://:pw@127.0.0.1:6379/3\n").unwrap();
    let file = parse("[delivery]\nkind = \"redis\"\nurl_file = \"redis-url\"\n").unwrap();
    let s = crate::config::resolve(
        file,
        Some(dir.join("x.toml")),
        Overrides::default(),
        &no_env,
    )
    .unwrap();
    let DeliverySettings::One(crate::config::delivery::BrokerConfig::Redis(r)) = s.delivery else {
        panic!()
    };
    assert_eq!(
        r.resolved_url().unwrap().value,
        "redis://:pw@127.0.0.1:6379/3"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn environment_overrides_pick_and_replace_urls() {
    let env =
        |name: &str| (name == ENV_DELIVERY_URL).then(|| "redis://127.0.0.1:6379/1".to_owned());
    // Without [delivery], the scheme picks the kind.
    let s = resolve_with("", &env).unwrap();
    let DeliverySettings::One(crate::config::delivery::BrokerConfig::Redis(r)) = s.delivery else {
        panic!()
    };
    assert_eq!(
        r.resolved_url().unwrap().source,
        "$HARE_OUTBOX_DELIVERY_URL"
    );
    // With one, it replaces the file's url.
    let s = resolve_with(
        "[delivery]\nkind = \"redis\"\nurl = \"redis://other/0\"\nstream = \"s\"\n",
        &env,
    )
    .unwrap();
    let DeliverySettings::One(crate::config::delivery::BrokerConfig::Redis(r)) = s.delivery else {
        panic!()
    };
    assert_eq!(r.resolved_url().unwrap().value, "redis://127.0.0.1:6379/1");
    // Kafka: bootstrap servers.
    let env = |name: &str| (name == ENV_DELIVERY_URL).then(|| "k1:9092,k2:9092".to_owned());
    let s = resolve_with("[delivery]\nkind = \"kafka\"\n", &env).unwrap();
    let DeliverySettings::One(crate::config::delivery::BrokerConfig::Kafka(k)) = s.delivery else {
        panic!()
    };
    assert_eq!(k.bootstrap_servers.as_deref(), Some("k1:9092,k2:9092"));
    let e = error_text("", &env);
    assert!(e.contains(ENV_DELIVERY_URL) && e.contains("kafka"), "{e}");
}

#[test]
fn broker_keys_are_checked() {
    let e = error_text("[delivery]\nkind = \"stdout\"\nstream = \"s\"\n", &no_env);
    assert!(
        e.contains("stream") && e.contains("none besides kind"),
        "{e}"
    );
    let e = error_text(
        "[delivery]\nkind = \"redis\"\nurl = \"redis://h/0\"\nmax_length = 0\n",
        &no_env,
    );
    assert!(e.contains("max_length = 0"), "{e}");
    let e = error_text(
        "[delivery]\nkind = \"nats\"\nurl = \"nats://h:4222\"\nstream = \"S\"\n",
        &no_env,
    );
    assert!(e.contains("stream_subjects"), "{e}");
    let e = error_text(
        "[delivery]\nkind = \"kafka\"\nbootstrap_servers = \"h:9092\"\ntopic = \"a b\"\n",
        &no_env,
    );
    assert!(e.contains("a b") && e.contains("Kafka topic"), "{e}");
    let e = error_text(
        "[delivery]\nkind = \"kafka\"\nbootstrap_servers = \"h:9092\"\nproperties = { \"bootstrap.servers\" = \"x\" }\n",
        &no_env,
    );
    assert!(e.contains("bootstrap_servers"), "{e}");
    let e = error_text(
        "[delivery]\nkind = \"mqtt\"\nurl = \"mqtt://h:1883?client_id=x\"\nhost = \"h\"\n",
        &no_env,
    );
    assert!(e.contains("host") && e.contains("url"), "{e}");
    let e = error_text(
        "[delivery]\nkind = \"mqtt\"\nhost = \"h\"\nport = 70000\n",
        &no_env,
    );
    assert!(e.contains("port = 70000"), "{e}");
    let e = error_text(
        "[delivery]\nkind = \"mqtt\"\nhost = \"h\"\npassword = \"x\"\n",
        &no_env,
    );
    assert!(e.contains("password_env"), "{e}");
    let e = error_text(
        "[delivery]\nkind = \"mqtt\"\nhost = \"h\"\npassword_env = \"P\"\n",
        &|n: &str| (n == "P").then(|| "x".to_owned()),
    );
    assert!(e.contains("username"), "{e}");
    let e = error_text(
        "[delivery]\nkind = \"rabbitmq\"\nurl = \"http://h/\"\n",
        &no_env,
    );
    assert!(e.contains("AMQP"), "{e}");
    let s = resolve_with(
        "[delivery]\nkind = \"mqtt\"\nhost = \"127.0.0.1\"\nusername = \"u\"\npassword_env = \"P\"\ntopic_prefix = \"site\"\n",
        &|n: &str| (n == "P").then(|| "secret-pw".to_owned()),
    )
    .unwrap();
    assert!(!format!("{:?}", s.delivery).contains("secret-pw"));
    let DeliverySettings::One(crate::config::delivery::BrokerConfig::Mqtt(m)) = &s.delivery else {
        panic!()
    };
    // Key by key: port 1883 and a random client id unless given.
    let described = m.describe();
    assert!(
        described.starts_with("mqtt 127.0.0.1:1883 client hare-outbox-"),
        "{described}"
    );
    let e = error_text(
        "[delivery]\nkind = \"kafka\"\nbootstrap_servers = \"h:9092\"\nproperties_env = { \"sasl.password\" = \"KP\" }\n",
        &no_env,
    );
    assert!(e.contains("KP") && e.contains("not set"), "{e}");
    let s = resolve_with(
        "[delivery]\nkind = \"kafka\"\nbootstrap_servers = \"h:9092\"\nproperties_env = { \"sasl.password\" = \"KP\" }\n",
        &|n: &str| (n == "KP").then(|| "kafka-pw".to_owned()),
    )
    .unwrap();
    assert!(!format!("{:?}", s.delivery).contains("kafka-pw"));
    // Inline key material is a secret too; the refusal does not echo it.
    for name in ["ssl.key.pem", "ssl.key.password", "ssl.keystore.password"] {
        let e = error_text(
            &format!(
                "[delivery]\nkind = \"kafka\"\nbootstrap_servers = \"h:9092\"\nproperties = {{ \"{name}\" = \"-----BEGIN PRIVATE KEY-----\" }}\n"
            ),
            &no_env,
        );
        assert!(e.contains(name) && e.contains("properties_env"), "{e}");
        assert!(!e.contains("BEGIN PRIVATE KEY"), "{e}");
    }
}
