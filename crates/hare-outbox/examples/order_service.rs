//! An order service on axum + sqlx + PostgreSQL with the outbox, as a service would wire it:
//!
//! - `POST /orders` writes the order and enqueues `orders.created` in the handler's transaction,
//!   wrapped so the relays are woken after COMMIT;
//! - `PATCH /orders/{id}` changes the row; a capture trigger writes `orders.updated` with the
//!   caller (`x-user`) as author, and notifies the relay at COMMIT;
//! - an in-process relay delivers both, in order per order, to the Redis stream `orders`;
//! - the dashboard is mounted at `/outbox` (`/outbox/healthz` included);
//! - `/metrics` (and the dashboard's `/outbox/metrics`) serves the relay's `hare_outbox_*`
//!   metrics in the Prometheus text format, from the recorder `main` installs;
//! - Ctrl-C stops the server, then the relay after its batch in flight.
//!
//! ```sh
//! HARE_EXAMPLE_PG_URL=postgres://postgres@127.0.0.1:5432/test HARE_EXAMPLE_REDIS_URL=redis://127.0.0.1:6379/0 \
//!   cargo run -p hare-outbox --example order_service --features postgres,redis,dashboard
//! curl -X POST localhost:3000/orders -H 'content-type: application/json' -d '{"customer":"ann","total":"99.90"}'
//! curl -X PATCH localhost:3000/orders/1 -H 'x-user: bob' -H 'content-type: application/json' -d '{"status":"paid"}'
//! ```
//!
//! `examples/order_consumer.rs` reads the stream.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post};
use axum::{Json, Router};
use hare_outbox::dashboard::{Dashboard, DashboardOptions};
use hare_outbox::postgres::{ListenNotifyWakeup, PgBackend};
use hare_outbox::redis::RedisStreamsDelivery;
use hare_outbox::{
    ChangeCapture, Journal, Outbox, OutboxMessage, OutboxRelay, OutboxTable, RelayConfig,
    RowOperation,
};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use serde_json::{Value, json};
use sqlx::PgPool;

#[derive(Clone)]
struct App {
    pool: PgPool,
    outbox: Outbox<PgBackend>,
}

/// Any failure answers 500 with its text (a real service maps validation errors to 400).
struct Failure(String);

impl<E: std::fmt::Display> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure(e.to_string())
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        (StatusCode::INTERNAL_SERVER_ERROR, self.0).into_response()
    }
}

async fn create_order(
    State(app): State<App>,
    Json(order): Json<Value>,
) -> Result<(StatusCode, Json<Value>), Failure> {
    let mut tx = app.outbox.wrap(app.pool.begin().await?);
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO orders (customer, total) VALUES ($1, $2::numeric) RETURNING id",
    )
    .bind(order["customer"].as_str().unwrap_or_default())
    .bind(order["total"].as_str().unwrap_or("0"))
    .fetch_one(&mut *tx)
    .await?;
    tx.enqueue(
        OutboxMessage::new("orders.created", json!({"id": id, "order": order}))
            .ordering_key(format!("order:{id}")),
    )
    .await?;
    tx.commit().await?;
    Ok((StatusCode::CREATED, Json(json!({"id": id}))))
}

async fn update_order(
    State(app): State<App>,
    Path(id): Path<i64>,
    headers: HeaderMap,
    Json(change): Json<Value>,
) -> Result<StatusCode, Failure> {
    let author = headers
        .get("x-user")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("anonymous");
    let mut tx = app.pool.begin().await?;
    app.outbox
        .set_context(&mut tx, json!({"author": author}))
        .await?;
    let changed = sqlx::query("UPDATE orders SET status = $1 WHERE id = $2")
        .bind(change["status"].as_str().unwrap_or("new"))
        .bind(id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    tx.commit().await?;
    Ok(if changed == 1 {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::NOT_FOUND
    })
}

/// `GET /metrics`: what the process's Prometheus recorder holds, in its text format.
async fn metrics(State(handle): State<PrometheusHandle>) -> Response {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        handle.render(),
    )
        .into_response()
}

/// Installs the process-wide Prometheus recorder the relay's metrics go to, and a task that runs
/// its upkeep (draining histograms) every 5 s. Call it once per process.
pub fn install_metrics() -> Result<PrometheusHandle, Box<dyn std::error::Error>> {
    let handle = PrometheusBuilder::new().install_recorder()?;
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(std::time::Duration::from_secs(5));
        loop {
            every.tick().await;
            upkeep.run_upkeep();
        }
    });
    Ok(handle)
}

/// The outbox, the table, the capture and the relay delivering to Redis stream `stream`;
/// returns the app's router (serving `metrics` at `/metrics`) and the relay (not started).
pub async fn setup(
    pool: PgPool,
    redis_url: &str,
    stream: &str,
    metrics_handle: PrometheusHandle,
) -> Result<(Router, OutboxRelay<PgBackend>), Box<dyn std::error::Error>> {
    let wakeup = ListenNotifyWakeup::new(pool.clone());
    let table = OutboxTable::parse("hare_outbox")?;
    let outbox = Outbox::new(PgBackend::new(pool.clone()), table.clone()).with_wakeup(wakeup)?;
    outbox.migrate().await?;
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS orders (id BIGSERIAL PRIMARY KEY, customer TEXT NOT NULL, \
         total NUMERIC(12, 2) NOT NULL, status TEXT NOT NULL DEFAULT 'new')",
    )
    .execute(&pool)
    .await?;
    // Same key and stream as the explicit events (docs/mixing_explicit_and_captured_events.md).
    ChangeCapture::new("orders")
        .with_operations([RowOperation::Update])
        .with_topic("orders.{operation}")
        .with_ordering_key(Some("order:{pk}"))
        .with_notify(Some("hare_outbox"))
        .install(&outbox)
        .await?;
    let relay = OutboxRelay::new(
        outbox.clone(),
        RedisStreamsDelivery::new(redis_url)?.with_stream(stream)?,
        RelayConfig::default(),
    )?;
    let dashboard = Dashboard::new(
        Journal::new(PgBackend::new(pool.clone()), table),
        DashboardOptions::new()
            .with_destinations(Some(relay.destinations()))
            .with_metrics(Some(metrics_handle.clone())),
    )?;
    let app = Router::new()
        .route("/orders", post(create_order))
        .route("/orders/{id}", patch(update_order))
        .nest("/outbox", dashboard.router())
        .with_state(App { pool, outbox })
        .merge(
            Router::new()
                .route("/metrics", get(metrics))
                .with_state(metrics_handle),
        );
    Ok((app, relay))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let pg_url = std::env::var("HARE_EXAMPLE_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let redis_url = std::env::var("HARE_EXAMPLE_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379/0".to_owned());
    let addr = std::env::var("HARE_EXAMPLE_ADDR").unwrap_or_else(|_| "127.0.0.1:3000".to_owned());
    let pool = PgPool::connect(&pg_url).await?;
    let (app, relay) = setup(pool, &redis_url, "orders", install_metrics()?).await?;
    relay.start()?;
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on {}", listener.local_addr()?);
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    relay.stop().await?;
    Ok(())
}
