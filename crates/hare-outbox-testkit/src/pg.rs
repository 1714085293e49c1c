//! A PostgreSQL schema of its own per test.

use sqlx::postgres::{PgPool, PgPoolOptions};

/// The server tests use: `HARE_OUTBOX_TEST_PG_URL`, else `postgres://postgres@127.0.0.1:5432/test`.
/// A set URL that is unreachable fails the test; it is never skipped.
pub fn url() -> String {
    std::env::var("HARE_OUTBOX_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A fresh schema, dropped (with everything in it) when [`TestSchema::drop_schema`] runs or, as a
/// fallback, by the next test run's clean-up of schemas older than an hour.
pub struct TestSchema {
    /// A pool whose connections use the schema as `search_path`.
    pub pool: PgPool,
    /// The schema name, `hare_t_<random>`.
    pub name: String,
}

impl TestSchema {
    /// Creates a schema with a random name and a pool of `max_connections` bound to it.
    ///
    /// # Panics
    /// When the server cannot be reached.
    pub async fn new(max_connections: u32) -> TestSchema {
        let name = format!("hare_t_{:016x}", fastrand_u64());
        let admin = PgPoolOptions::new()
            .max_connections(1)
            .connect(&url())
            .await
            .unwrap_or_else(|e| panic!("connecting to PostgreSQL at {} failed: {e}", url()));
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA \"{name}\"")))
            .execute(&admin)
            .await
            .expect("create schema");
        admin.close().await;
        let search_path = name.clone();
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .after_connect(move |conn, _| {
                let sql = format!("SET search_path TO \"{search_path}\"");
                Box::pin(async move {
                    sqlx::query(sqlx::AssertSqlSafe(sql)).execute(conn).await?;
                    Ok(())
                })
            })
            .connect(&url())
            .await
            .expect("connect pool");
        TestSchema { pool, name }
    }

    /// The URL of the server with the schema as `search_path` (for child processes).
    pub fn url_with_search_path(&self) -> String {
        let base = url();
        let sep = if base.contains('?') { '&' } else { '?' };
        format!("{base}{sep}options=-csearch_path%3D{}", self.name)
    }

    /// Drops the schema and closes the pool.
    pub async fn drop_schema(self) {
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA \"{}\" CASCADE",
            self.name
        )))
        .execute(&self.pool)
        .await;
        self.pool.close().await;
    }
}

fn fastrand_u64() -> u64 {
    uuid::Uuid::new_v4().as_u64_pair().0
}

/// Waits (at most 10 s) until the backend `pid` waits for a lock another transaction holds.
///
/// # Panics
/// When it does not within 10 s.
pub async fn wait_until_blocked(pool: &PgPool, pid: i32) {
    crate::wait_for(
        "a lock wait",
        std::time::Duration::from_secs(10),
        || async {
            let waiting: i64 =
                sqlx::query_scalar("SELECT count(*) FROM pg_locks WHERE pid = $1 AND NOT granted")
                    .bind(pid)
                    .fetch_one(pool)
                    .await
                    .ok()?;
            (waiting > 0).then_some(())
        },
    )
    .await;
}
