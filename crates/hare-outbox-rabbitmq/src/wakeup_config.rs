//! [`RabbitMqWakeupConfig`]: the RabbitMQ wake-up as a config file describes it.

hare_outbox_core::url_wakeup_config! {
    /// The RabbitMQ wake-up ([`RabbitMqWakeup`](crate::RabbitMqWakeup)) as a config file describes it (`kind = "rabbitmq"` in the
    /// `hare-outbox` command's `[wakeup]`): writers publish to a fanout exchange after their commit, and a relay with a queue bound to it polls at once.
    ///
    /// The URL (`amqp://user:password@host:port/vhost`) is given by exactly one of `url` (no password allowed in it), `url_env`
    /// or `url_file`; see [`hare_outbox_core::secrets`]. Writers and the relay must use the same
    /// exchange.
    ///
    /// # Example
    ///
    /// ```
    /// use hare_outbox_rabbitmq::RabbitMqWakeupConfig;
    ///
    /// let config: RabbitMqWakeupConfig = toml::from_str(
    ///     r#"
    ///     url = "amqp://127.0.0.1:5672/%2f"
    ///     exchange = "erp"
    ///     "#,
    /// )?;
    /// let wakeup = config.build()?;
    /// # let _ = wakeup;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    RabbitMqWakeupConfig {
        kind: "rabbitmq",
        key: exchange,
        key_doc: "The fanout exchange. Defaults to [`DEFAULT_EXCHANGE`](crate::DEFAULT_EXCHANGE) (`hare_outbox`).",
        default: crate::DEFAULT_EXCHANGE,
        what: "fanout exchange RabbitMQ",
        wakeup: crate::RabbitMqWakeup,
        with: with_exchange,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hare_outbox_core::secrets::Secrets;

    fn config(text: &str) -> RabbitMqWakeupConfig {
        toml::from_str(text).expect("valid TOML of the config")
    }

    #[test]
    fn mistakes_name_the_key() {
        let e = config("exchange = \"x\"").build().expect_err("no url");
        assert!(e.is_missing_endpoint(), "{e}");
        assert!(e.message().contains("url_env"), "{e}");
        let e = toml::from_str::<RabbitMqWakeupConfig>(
            "url = \"amqp://127.0.0.1:5672/%2f\"\nchanel = \"x\"",
        )
        .expect_err("unknown key");
        assert!(e.to_string().contains("unknown field `chanel`"), "{e}");
        let e = config("url = \"amqp://guest:pw@127.0.0.1:5672/%2f\"")
            .build()
            .expect_err("a password in the file");
        assert!(
            e.message().contains("url_env") && !e.message().contains("pw@"),
            "{e}"
        );
    }

    #[test]
    fn the_url_comes_from_the_environment_and_is_never_shown() {
        let env =
            |name: &str| (name == "U").then(|| "amqp://guest:pw@127.0.0.1:5672/%2f".to_owned());
        let mut config = config("url_env = \"U\"\nexchange = \"erp\"");
        config
            .resolve(&Secrets::new(&env, "."))
            .expect("the variable is set");
        let described = config.describe();
        assert!(
            described.contains("(from $U) exchange \"erp\""),
            "{described}"
        );
        assert!(!described.contains("pw") && !format!("{config:?}").contains("pw"));
        config.build().expect("built from the resolved URL");
        let mut overridden = RabbitMqWakeupConfig {
            url: Some("amqp://127.0.0.1:5672/%2f".to_owned()),
            ..RabbitMqWakeupConfig::default()
        };
        overridden
            .use_url_from_env("U")
            .expect("one URL source before the override");
        overridden
            .resolve(&Secrets::new(&env, "."))
            .expect("the override's variable is set");
        assert_eq!(
            overridden.resolved_url().map(|u| u.source.as_str()),
            Some("$U")
        );
    }
}
