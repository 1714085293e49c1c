//! [`NatsWakeupConfig`]: the NATS wake-up as a config file describes it.

hare_outbox_core::url_wakeup_config! {
    /// The NATS wake-up ([`NatsWakeup`](crate::NatsWakeup)) as a config file describes it (`kind = "nats"` in the
    /// `hare-outbox` command's `[wakeup]`): writers publish on a core NATS subject after their commit, and a relay subscribed to it polls at once.
    ///
    /// The URL (`nats://[user:password@]host:port`) is given by exactly one of `url` (no password allowed in it), `url_env`
    /// or `url_file`; see [`hare_outbox_core::secrets`]. Writers and the relay must use the same
    /// subject.
    ///
    /// # Example
    ///
    /// ```
    /// use hare_outbox_nats::NatsWakeupConfig;
    ///
    /// let config: NatsWakeupConfig = toml::from_str(
    ///     r#"
    ///     url = "nats://127.0.0.1:4222"
    ///     subject = "erp"
    ///     "#,
    /// )?;
    /// let wakeup = config.build()?;
    /// # let _ = wakeup;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    NatsWakeupConfig {
        kind: "nats",
        key: subject,
        key_doc: "The core NATS subject. Defaults to [`DEFAULT_SUBJECT`](crate::DEFAULT_SUBJECT) (`hare_outbox`).",
        default: crate::DEFAULT_SUBJECT,
        what: "core NATS subject NATS",
        wakeup: crate::NatsWakeup,
        with: with_subject,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hare_outbox_core::secrets::Secrets;

    fn config(text: &str) -> NatsWakeupConfig {
        toml::from_str(text).expect("valid TOML of the config")
    }

    #[test]
    fn mistakes_name_the_key() {
        let e = config("subject = \"x\"").build().expect_err("no url");
        assert!(e.is_missing_endpoint(), "{e}");
        assert!(e.message().contains("url_env"), "{e}");
        let e =
            toml::from_str::<NatsWakeupConfig>("url = \"nats://127.0.0.1:4222\"\nchanel = \"x\"")
                .expect_err("unknown key");
        assert!(e.to_string().contains("unknown field `chanel`"), "{e}");
        let e = config("url = \"nats://u:pw@127.0.0.1:4222\"")
            .build()
            .expect_err("a password in the file");
        assert!(
            e.message().contains("url_env") && !e.message().contains("pw@"),
            "{e}"
        );
    }

    #[test]
    fn the_url_comes_from_the_environment_and_is_never_shown() {
        let env = |name: &str| (name == "U").then(|| "nats://u:pw@127.0.0.1:4222".to_owned());
        let mut config = config("url_env = \"U\"\nsubject = \"erp\"");
        config
            .resolve(&Secrets::new(&env, "."))
            .expect("the variable is set");
        let described = config.describe();
        assert!(
            described.contains("(from $U) subject \"erp\""),
            "{described}"
        );
        assert!(!described.contains("pw") && !format!("{config:?}").contains("pw"));
        config.build().expect("built from the resolved URL");
        let mut overridden = NatsWakeupConfig {
            url: Some("nats://127.0.0.1:4222".to_owned()),
            ..NatsWakeupConfig::default()
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
