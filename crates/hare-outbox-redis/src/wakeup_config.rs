//! [`RedisWakeupConfig`]: the Redis wake-up as a config file describes it.

hare_outbox_core::url_wakeup_config! {
    /// The Redis wake-up ([`RedisWakeup`](crate::RedisWakeup)) as a config file describes it (`kind = "redis"` in the
    /// `hare-outbox` command's `[wakeup]`): writers `PUBLISH` on a channel after their commit, and a relay subscribed to it polls at once.
    ///
    /// The URL (`redis://[:password@]host:port/db`) is given by exactly one of `url` (no password allowed in it), `url_env`
    /// or `url_file`; see [`hare_outbox_core::secrets`]. Writers and the relay must use the same
    /// channel.
    ///
    /// # Example
    ///
    /// ```
    /// use hare_outbox_redis::RedisWakeupConfig;
    ///
    /// let config: RedisWakeupConfig = toml::from_str(
    ///     r#"
    ///     url = "redis://127.0.0.1:6379/0"
    ///     channel = "erp"
    ///     "#,
    /// )?;
    /// let wakeup = config.build()?;
    /// # let _ = wakeup;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    RedisWakeupConfig {
        kind: "redis",
        key: channel,
        key_doc: "The pub/sub channel. Defaults to [`DEFAULT_CHANNEL`](crate::DEFAULT_CHANNEL) (`hare_outbox`).",
        default: crate::DEFAULT_CHANNEL,
        what: "pub/sub channel Redis",
        wakeup: crate::RedisWakeup,
        with: with_channel,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hare_outbox_core::secrets::Secrets;

    fn config(text: &str) -> RedisWakeupConfig {
        toml::from_str(text).expect("valid TOML of the config")
    }

    #[test]
    fn mistakes_name_the_key() {
        let e = config("channel = \"x\"").build().expect_err("no url");
        assert!(e.is_missing_endpoint(), "{e}");
        assert!(e.message().contains("url_env"), "{e}");
        let e = toml::from_str::<RedisWakeupConfig>(
            "url = \"redis://127.0.0.1:6379/0\"\nchanel = \"x\"",
        )
        .expect_err("unknown key");
        assert!(e.to_string().contains("unknown field `chanel`"), "{e}");
        let e = config("url = \"redis://:pw@127.0.0.1:6379/0\"")
            .build()
            .expect_err("a password in the file");
        assert!(
            e.message().contains("url_env") && !e.message().contains("pw@"),
            "{e}"
        );
    }

    #[test]
    fn the_url_comes_from_the_environment_and_is_never_shown() {
        let env = |name: &str| (name == "U").then(|| "redis://:pw@127.0.0.1:6379/0".to_owned());
        let mut config = config("url_env = \"U\"\nchannel = \"erp\"");
        config
            .resolve(&Secrets::new(&env, "."))
            .expect("the variable is set");
        let described = config.describe();
        assert!(
            described.contains("(from $U) channel \"erp\""),
            "{described}"
        );
        assert!(!described.contains("pw") && !format!("{config:?}").contains("pw"));
        config.build().expect("built from the resolved URL");
        let mut overridden = RedisWakeupConfig {
            url: Some("redis://127.0.0.1:6379/0".to_owned()),
            ..RedisWakeupConfig::default()
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
