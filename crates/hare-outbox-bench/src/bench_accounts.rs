//! The scratch schema the enqueue benchmarks write into, shared by `bin/enqueue.rs` and
//! `bin/strict_order.rs` (each includes this file as a module).

use anyhow::{Context, Result};
use sqlx::postgres::{PgPool, PgPoolOptions};

/// Creates a schema `hare_bench_<random>` on `url` with a table `accounts` of 64 rows (id 0–63,
/// balance 0), and returns a pool of 20 connections whose `search_path` is that schema, with the
/// schema's name (the caller drops it).
///
/// # Errors
/// When the server cannot be reached or a statement fails.
pub async fn scratch(url: &str) -> Result<(PgPool, String)> {
    let schema = format!("hare_bench_{:08x}", uuid::Uuid::new_v4().as_u128() as u32);
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .context("connecting")?;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA \"{schema}\"")))
        .execute(&admin)
        .await?;
    admin.close().await;
    let path = schema.clone();
    let pool = PgPoolOptions::new()
        .max_connections(20)
        .after_connect(move |conn, _| {
            let sql = format!("SET search_path TO \"{path}\"");
            Box::pin(async move {
                sqlx::query(sqlx::AssertSqlSafe(sql)).execute(conn).await?;
                Ok(())
            })
        })
        .connect(url)
        .await?;
    sqlx::query("CREATE TABLE accounts (id bigint PRIMARY KEY, balance bigint NOT NULL)")
        .execute(&pool)
        .await?;
    sqlx::query("INSERT INTO accounts SELECT g, 0 FROM generate_series(0, 63) g")
        .execute(&pool)
        .await?;
    Ok((pool, schema))
}
