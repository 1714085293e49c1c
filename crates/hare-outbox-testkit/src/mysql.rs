//! A MySQL / MariaDB database of its own per test.

use std::str::FromStr;

use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};

/// The server tests use: `HARE_OUTBOX_TEST_MYSQL_URL`, else `mysql://root@127.0.0.1:3306/test`.
/// A set URL that is unreachable fails the test; it is never skipped.
pub fn url() -> String {
    std::env::var("HARE_OUTBOX_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned())
}

/// A fresh database `hare_t_<random>`, dropped (with everything in it) by
/// [`TestDatabase::drop_database`].
pub struct TestDatabase {
    /// A pool whose connections use the database.
    pub pool: MySqlPool,
    /// The database name, `hare_t_<random>`.
    pub name: String,
}

impl TestDatabase {
    /// Creates a database with a random name and a pool of `max_connections` on it.
    ///
    /// # Panics
    /// When the server cannot be reached or refuses `CREATE DATABASE`.
    pub async fn new(max_connections: u32) -> TestDatabase {
        let name = format!("hare_t_{}", uuid::Uuid::new_v4().simple());
        let admin = MySqlPoolOptions::new()
            .max_connections(1)
            .connect(&url())
            .await
            .unwrap_or_else(|e| panic!("connecting to MySQL at {} failed: {e}", url()));
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE `{name}`")))
            .execute(&admin)
            .await
            .expect("create database");
        admin.close().await;
        let pool = MySqlPoolOptions::new()
            .max_connections(max_connections)
            .connect_with(options().database(&name))
            .await
            .expect("connect pool");
        TestDatabase { pool, name }
    }

    /// The URL of the server with this database (for child processes).
    pub fn url(&self) -> String {
        let base = url();
        let (without_query, query) = match base.split_once('?') {
            Some((a, q)) => (a.to_owned(), format!("?{q}")),
            None => (base.clone(), String::new()),
        };
        let server = match without_query.rsplit_once('/') {
            Some((server, _)) if server.contains("//") && server.len() > "mysql://".len() => {
                server.to_owned()
            }
            _ => without_query,
        };
        format!("{server}/{}{query}", self.name)
    }

    /// Drops the database and closes the pool.
    pub async fn drop_database(self) {
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS `{}`",
            self.name
        )))
        .execute(&self.pool)
        .await;
        self.pool.close().await;
    }
}

/// The connect options of [`url`].
///
/// # Panics
/// When the URL cannot be parsed.
pub fn options() -> MySqlConnectOptions {
    MySqlConnectOptions::from_str(&url()).unwrap_or_else(|e| panic!("MySQL URL {}: {e}", url()))
}
