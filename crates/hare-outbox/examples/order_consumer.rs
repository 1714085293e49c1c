//! The consumer of `examples/order_service.rs`: reads the Redis stream `orders` in a consumer
//! group, decodes each entry with `hare_outbox::redis::reader`, and applies it once per event
//! (`Inbox::process_once` in the transaction that writes the effect: a row of `order_log`),
//! then acknowledges the entry. A redelivered entry is acknowledged without a second effect.
//!
//! ```sh
//! HARE_EXAMPLE_PG_URL=postgres://postgres@127.0.0.1:5432/test HARE_EXAMPLE_REDIS_URL=redis://127.0.0.1:6379/0 \
//!   cargo run -p hare-outbox --example order_consumer --features postgres,redis
//! ```

use hare_outbox::postgres::PgBackend;
use hare_outbox::redis::reader;
use hare_outbox::redis::redis::AsyncCommands;
use hare_outbox::redis::redis::streams::{StreamReadOptions, StreamReadReply};
use hare_outbox::{CancellationToken, Inbox};
use sqlx::PgPool;

/// The consumer group, and the consumer's name in the inbox.
pub const GROUP: &str = "order-log";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let pg_url = std::env::var("HARE_EXAMPLE_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let redis_url = std::env::var("HARE_EXAMPLE_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379/0".to_owned());
    let pool = PgPool::connect(&pg_url).await?;
    let shutdown = CancellationToken::new();
    tokio::spawn({
        let shutdown = shutdown.clone();
        async move {
            let _ = tokio::signal::ctrl_c().await;
            shutdown.cancel();
        }
    });
    run(pool, &redis_url, "orders", shutdown).await
}

/// Reads `stream` until `shutdown` is cancelled, writing one `order_log` row per event.
pub async fn run(
    pool: PgPool,
    redis_url: &str,
    stream: &str,
    shutdown: CancellationToken,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let inbox = Inbox::new(PgBackend::new(pool.clone()), "order_log_inbox")?;
    inbox.migrate().await?;
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS order_log (event_id UUID PRIMARY KEY, topic TEXT NOT NULL, \
         ordering_key TEXT, author TEXT, payload JSONB NOT NULL)",
    )
    .execute(&pool)
    .await?;
    let mut redis = hare_outbox::redis::redis::Client::open(redis_url)?
        .get_multiplexed_async_connection()
        .await?;
    // The group reads the stream from its start; an existing group is fine.
    let _: Result<(), _> = redis.xgroup_create_mkstream(stream, GROUP, "0").await;
    let options = StreamReadOptions::default()
        .group(GROUP, "consumer-1")
        .count(100)
        .block(200);
    while !shutdown.is_cancelled() {
        let reply: StreamReadReply = redis.xread_options(&[stream], &[">"], &options).await?;
        for entry in reply.keys.into_iter().flat_map(|k| k.ids) {
            let event = reader::read_entry(&entry)?;
            let mut tx = pool.begin().await?;
            if inbox.process_once(&mut tx, GROUP, event.id).await? {
                sqlx::query(
                    "INSERT INTO order_log (event_id, topic, ordering_key, author, payload) \
                     VALUES ($1, $2, $3, $4, $5)",
                )
                .bind(event.id)
                .bind(&event.topic)
                .bind(&event.ordering_key)
                .bind(event.header("author"))
                .bind(event.json()?)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            let _: i64 = redis.xack(stream, GROUP, &[&entry.id]).await?;
        }
    }
    Ok(())
}
