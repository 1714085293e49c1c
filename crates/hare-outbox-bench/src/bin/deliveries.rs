//! Relay throughput per delivery against each broker's own client, in one run.
//!
//! For every delivery — Kafka (tansu), RabbitMQ, Redis Streams, NATS JetStream, MQTT and a webhook
//! to a loopback HTTP server — and every batch size:
//!
//! - **relay**: `--events` events are written beforehand into a PostgreSQL outbox (one
//!   `INSERT … SELECT`, not timed); a relay with that batch size drains them into the broker. The
//!   time runs from the relay's first poll until every event is marked published.
//! - **direct**: the same number of messages — same body, headers and key, built from events
//!   like the relay's — published straight with the broker's client, in chunks of the batch
//!   size, each chunk sent whole and then awaited with the same confirmation the delivery waits
//!   for: `acks=all` on an idempotent producer (Kafka), publisher confirms on persistent messages
//!   (RabbitMQ), one pipeline of `XADD` (Redis), every JetStream publish acknowledgement (NATS),
//!   every `PUBACK` of QoS 1 (MQTT), every 2xx answer with 10 requests at a time (webhook, the
//!   relay's default concurrency).
//!
//! The ratio relay/direct is what the outbox costs on top of the broker: leasing, marking and
//! the relay's own work. A first row per batch size drains the same backlog with a delivery that
//! does nothing: the ceiling PostgreSQL sets for every relay row.
//!
//! ```text
//! cargo run --release -p hare-outbox-bench --bin deliveries
//! ```
//!
//! Defaults: 10,000 events per run over 1,000 ordering keys, ~217-byte JSON payloads, batches 100
//! and 1000, 3 rounds per cell (best kept); about two minutes on a 2-core machine.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use clap::{Parser, ValueEnum};
use futures::StreamExt;
use hare_outbox::kafka::KafkaDelivery;
use hare_outbox::mqtt::MqttDelivery;
use hare_outbox::nats::NatsDelivery;
use hare_outbox::postgres::PgBackend;
use hare_outbox::rabbitmq::RabbitMqDelivery;
use hare_outbox::redis::RedisStreamsDelivery;
use hare_outbox::webhook::WebhookDelivery;
use hare_outbox::{
    Delivery, FnDelivery, Outbox, OutboxEvent, OutboxRelay, OutboxTable, RelayConfig,
};
use serde_json::{Map, Value, json};
use sqlx::postgres::{PgPool, PgPoolOptions};

#[derive(Parser)]
#[command(about = "Relay throughput per delivery against each broker's own client")]
struct Cli {
    /// PostgreSQL server of the outbox; a scratch schema is created and dropped.
    #[arg(
        long,
        env = "HARE_OUTBOX_BENCH_PG_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/test"
    )]
    database_url: String,
    /// Events per timed run (each relay run and each direct run).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..))]
    events: u32,
    /// Distinct ordering keys, assigned round-robin. A lease takes only the oldest pending event
    /// of each key, so a relay batch holds at most this many events: keep it at or above the
    /// largest batch.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u32).range(1..))]
    keys: u32,
    /// Characters of filler text in each payload (`{"n": …, "text": "xxx…"}`).
    #[arg(long, default_value_t = 200)]
    payload_bytes: usize,
    /// Relay batch sizes (and direct chunk sizes), comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [100, 1000])]
    batches: Vec<usize>,
    /// Rounds per cell, relay and direct interleaved; the best rate of each is kept.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
    /// Deliveries to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = Kind::all())]
    deliveries: Vec<Kind>,
    /// Kafka bootstrap servers.
    #[arg(
        long,
        env = "HARE_OUTBOX_BENCH_KAFKA_BOOTSTRAP",
        default_value = "127.0.0.1:19092"
    )]
    kafka_bootstrap: String,
    /// RabbitMQ URL.
    #[arg(
        long,
        env = "HARE_OUTBOX_BENCH_RABBITMQ_URL",
        default_value = "amqp://guest:guest@127.0.0.1:5672/%2f"
    )]
    rabbitmq_url: String,
    /// Redis URL.
    #[arg(
        long,
        env = "HARE_OUTBOX_BENCH_REDIS_URL",
        default_value = "redis://127.0.0.1:6379/0"
    )]
    redis_url: String,
    /// NATS URL (JetStream enabled).
    #[arg(
        long,
        env = "HARE_OUTBOX_BENCH_NATS_URL",
        default_value = "nats://127.0.0.1:4222"
    )]
    nats_url: String,
    /// MQTT broker URL, without `client_id` (each side gets its own).
    #[arg(
        long,
        env = "HARE_OUTBOX_BENCH_MQTT_URL",
        default_value = "mqtt://127.0.0.1:1883"
    )]
    mqtt_url: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Kind {
    Kafka,
    Rabbitmq,
    Redis,
    Nats,
    Mqtt,
    Webhook,
}

impl Kind {
    fn all() -> Vec<Kind> {
        vec![
            Kind::Kafka,
            Kind::Rabbitmq,
            Kind::Redis,
            Kind::Nats,
            Kind::Mqtt,
            Kind::Webhook,
        ]
    }

    fn label(self) -> &'static str {
        match self {
            Kind::Kafka => "Kafka (tansu)",
            Kind::Rabbitmq => "RabbitMQ",
            Kind::Redis => "Redis Streams",
            Kind::Nats => "NATS JetStream",
            Kind::Mqtt => "MQTT (Mosquitto)",
            Kind::Webhook => "webhook (loopback)",
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = self
            .to_possible_value()
            .map(|v| v.get_name().to_owned())
            .unwrap_or_default();
        f.write_str(&name)
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    ensure!(
        cli.batches
            .iter()
            .all(|&b| u32::try_from(b)
                .is_ok_and(|b| hare_outbox::relay::BATCH_SIZE_RANGE.contains(&b))),
        "--batches {:?}: every batch size must be within {:?}",
        cli.batches,
        hare_outbox::relay::BATCH_SIZE_RANGE
    );
    let scratch = Scratch::new(&cli.database_url).await?;
    let result = run(&cli, &scratch).await;
    scratch.drop().await;
    result
}

async fn run(cli: &Cli, scratch: &Scratch) -> Result<()> {
    println!(
        "deliveries: {} events per run over {} ordering keys, payload {} bytes of JSON, \
         PostgreSQL outbox at {}",
        cli.events,
        cli.keys,
        sample_event("t", 0, cli).body().len(),
        cli.database_url
    );
    println!();
    println!(
        "{:<20} {:>6} {:>12} {:>12} {:>13}",
        "delivery", "batch", "relay ev/s", "direct ev/s", "relay/direct"
    );
    let started = Instant::now();
    // The ceiling the outbox sets: the same relay with a delivery that does nothing.
    for (j, &batch) in cli.batches.iter().enumerate() {
        let mut best = 0f64;
        for round in 0..cli.rounds {
            let table = format!("noop_{j}_{round}");
            let outbox = scratch.backlog(&table, "noop", cli).await?;
            let warm = sample_event("noop", -1, cli);
            let (n, took) = drain(
                &outbox,
                FnDelivery::new(|_e: OutboxEvent| async { Ok(()) }),
                &warm,
                batch,
            )
            .await?;
            ensure!(n == u64::from(cli.events), "the relay delivered {n} events");
            scratch.drop_table(&table).await?;
            best = best.max(n as f64 / took.as_secs_f64());
        }
        println!(
            "{:<20} {:>6} {:>12.0} {:>12} {:>13}",
            "no-op (outbox only)", batch, best, "-", "-"
        );
    }
    for (i, &kind) in cli.deliveries.iter().enumerate() {
        let name = format!("hare_bench_{kind}_{:08x}", rand_u32());
        let target = Target::open(kind, cli, &name)
            .await
            .with_context(|| format!("setting up {}", kind.label()))?;
        for (j, &batch) in cli.batches.iter().enumerate() {
            let (mut relay, mut direct) = (0f64, 0f64);
            // Relay and direct runs interleaved; the best of each is kept.
            for round in 0..cli.rounds {
                let table = format!("o_{i}_{j}_{round}");
                let rate = relay_rate(cli, scratch, &target, &table, &name, batch)
                    .await
                    .with_context(|| format!("relay → {} at batch {batch}", kind.label()))?;
                relay = relay.max(rate);
                let rate = direct_rate(cli, &target, &name, batch)
                    .await
                    .with_context(|| format!("direct {} at batch {batch}", kind.label()))?;
                direct = direct.max(rate);
            }
            println!(
                "{:<20} {:>6} {:>12.0} {:>12.0} {:>13.2}",
                kind.label(),
                batch,
                relay,
                direct,
                relay / direct
            );
        }
        target.clean_up(&name).await;
    }
    println!();
    println!("(took {:.0} s)", started.elapsed().as_secs_f64());
    Ok(())
}

fn rand_u32() -> u32 {
    uuid::Uuid::new_v4().as_u128() as u32
}

/// The payload every event carries, relay and direct alike: `{"n": n, "text": "xxx…"}`.
fn payload(n: i64, cli: &Cli) -> Value {
    json!({"n": n, "text": "x".repeat(cli.payload_bytes)})
}

/// An event like those the relay leases from the backlog (topic `topic`, header `author`, key
/// `k<n mod keys>`), for the direct runs.
fn sample_event(topic: &str, n: i64, cli: &Cli) -> OutboxEvent {
    let mut headers = Map::new();
    headers.insert("author".to_owned(), json!("bench"));
    OutboxEvent {
        sequence: n + 1,
        headers,
        ordering_key: Some(format!("k{}", n % i64::from(cli.keys))),
        ..OutboxEvent::new(topic.to_owned(), payload(n, cli))
    }
}

/// A scratch PostgreSQL schema holding the outbox tables.
struct Scratch {
    pool: PgPool,
    schema: String,
}

impl Scratch {
    async fn new(url: &str) -> Result<Scratch> {
        let schema = format!("hare_bench_{:08x}", rand_u32());
        let admin = PgPoolOptions::new()
            .max_connections(1)
            .connect(url)
            .await
            .with_context(|| format!("connecting to PostgreSQL at {url}"))?;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA \"{schema}\"")))
            .execute(&admin)
            .await?;
        admin.close().await;
        let path = schema.clone();
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .after_connect(move |conn, _| {
                let sql = format!("SET search_path TO \"{path}\"");
                Box::pin(async move {
                    sqlx::query(sqlx::AssertSqlSafe(sql)).execute(conn).await?;
                    Ok(())
                })
            })
            .connect(url)
            .await?;
        Ok(Scratch { pool, schema })
    }

    /// A fresh outbox table `name` with `cli.events` pending events on `topic`, written with one
    /// INSERT … SELECT (setup, not timed); the payload has the same shape as [`payload`].
    async fn backlog(&self, name: &str, topic: &str, cli: &Cli) -> Result<Outbox<PgBackend>> {
        let outbox = Outbox::new(PgBackend::new(self.pool.clone()), OutboxTable::parse(name)?);
        outbox.migrate().await?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO \"{name}\" (id, topic, payload, headers, ordering_key) \
             SELECT gen_random_uuid(), $1, jsonb_build_object('n', g, 'text', repeat('x', $2)), \
                    '{{\"author\": \"bench\"}}'::jsonb, 'k' || (g % $3) \
             FROM generate_series(0, $4 - 1) g"
        )))
        .bind(topic)
        .bind(cli.payload_bytes as i32)
        .bind(cli.keys as i32)
        .bind(cli.events as i32)
        .execute(&self.pool)
        .await?;
        sqlx::query(sqlx::AssertSqlSafe(format!("VACUUM ANALYZE \"{name}\"")))
            .execute(&self.pool)
            .await?;
        Ok(outbox)
    }

    async fn drop_table(&self, name: &str) -> Result<()> {
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP TABLE \"{name}\"")))
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn drop(&self) {
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA \"{}\" CASCADE",
            self.schema
        )))
        .execute(&self.pool)
        .await;
        self.pool.close().await;
    }
}

/// Where one delivery's events go, with the broker client of the direct runs.
enum Target {
    Kafka {
        delivery: KafkaDelivery,
        producer: rdkafka::producer::FutureProducer,
        admin: rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext>,
    },
    Rabbitmq {
        delivery: RabbitMqDelivery,
        connection: lapin::Connection,
        channel: lapin::Channel,
    },
    Redis {
        delivery: RedisStreamsDelivery,
        connection: redis::aio::MultiplexedConnection,
    },
    Nats {
        delivery: NatsDelivery,
        context: async_nats::jetstream::Context,
    },
    Mqtt {
        delivery: MqttDelivery,
        direct: MqttDirect,
    },
    Webhook {
        delivery: WebhookDelivery,
        url: String,
        client: reqwest::Client,
        hits: Arc<AtomicU64>,
        server: tokio::task::JoinHandle<()>,
    },
}

impl Target {
    /// Connects both sides and makes the destination `name` (topic, queue, stream…).
    async fn open(kind: Kind, cli: &Cli, name: &str) -> Result<Target> {
        Ok(match kind {
            Kind::Kafka => {
                use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
                let mut config = rdkafka::ClientConfig::new();
                config.set("bootstrap.servers", &cli.kafka_bootstrap);
                let admin: AdminClient<_> = config.create()?;
                let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
                let topic = NewTopic::new(name, 3, TopicReplication::Fixed(1));
                for result in admin.create_topics([&topic], &options).await? {
                    result.map_err(|(topic, code)| anyhow!("creating topic {topic}: {code}"))?;
                }
                // The settings KafkaDelivery::new uses.
                let producer = config
                    .clone()
                    .set("acks", "all")
                    .set("enable.idempotence", "true")
                    .set("partitioner", "murmur2_random")
                    .set("message.timeout.ms", "10000")
                    .set("request.timeout.ms", "10000")
                    .create()?;
                Target::Kafka {
                    delivery: KafkaDelivery::new(&cli.kafka_bootstrap)?,
                    producer,
                    admin,
                }
            }
            Kind::Rabbitmq => {
                use lapin::options::{ConfirmSelectOptions, QueueDeclareOptions};
                let connection =
                    lapin::Connection::connect(&cli.rabbitmq_url, Default::default()).await?;
                let channel = connection.create_channel().await?;
                // The default exchange routes each message to the queue named like its routing
                // key, the event's topic.
                channel
                    .queue_declare(
                        name.into(),
                        QueueDeclareOptions {
                            durable: true,
                            ..QueueDeclareOptions::default()
                        },
                        Default::default(),
                    )
                    .await?;
                channel
                    .confirm_select(ConfirmSelectOptions::default())
                    .await?;
                Target::Rabbitmq {
                    delivery: RabbitMqDelivery::new(&cli.rabbitmq_url)?,
                    connection,
                    channel,
                }
            }
            Kind::Redis => Target::Redis {
                delivery: RedisStreamsDelivery::new(&cli.redis_url)?,
                connection: redis::Client::open(cli.redis_url.as_str())?
                    .get_multiplexed_async_connection()
                    .await?,
            },
            Kind::Nats => {
                let client = async_nats::connect(&cli.nats_url).await?;
                let context = async_nats::jetstream::new(client);
                context
                    .get_or_create_stream(async_nats::jetstream::stream::Config {
                        name: name.to_owned(),
                        subjects: vec![name.to_owned()],
                        ..Default::default()
                    })
                    .await
                    .map_err(|e| anyhow!("creating stream {name}: {e}"))?;
                Target::Nats {
                    delivery: NatsDelivery::new(&cli.nats_url)?,
                    context,
                }
            }
            Kind::Mqtt => {
                let relay_url = format!("{}?client_id={name}_relay", cli.mqtt_url);
                let direct_url = format!("{}?client_id={name}_direct", cli.mqtt_url);
                Target::Mqtt {
                    delivery: MqttDelivery::new(&relay_url)?,
                    direct: MqttDirect::connect(&direct_url)?,
                }
            }
            Kind::Webhook => {
                let (url, hits, server) = receiver().await?;
                Target::Webhook {
                    delivery: WebhookDelivery::new(url.clone())?,
                    url,
                    client: reqwest::Client::new(),
                    hits,
                    server,
                }
            }
        })
    }

    /// Publishes `events` with the broker's own client and waits for every confirmation.
    async fn direct(&self, events: &[OutboxEvent]) -> Result<()> {
        match self {
            Target::Kafka { producer, .. } => {
                use rdkafka::message::{Header, OwnedHeaders};
                use rdkafka::producer::FutureRecord;
                let mut waits = Vec::with_capacity(events.len());
                for event in events {
                    let message_headers = event.message_headers();
                    let mut headers = OwnedHeaders::new_with_capacity(message_headers.len());
                    for (name, value) in &message_headers {
                        headers = headers.insert(Header {
                            key: name,
                            value: Some(value.as_bytes()),
                        });
                    }
                    let body = event.body();
                    let mut record = FutureRecord::<str, [u8]>::to(&event.topic)
                        .payload(&body)
                        .headers(headers);
                    if let Some(key) = event.message_key() {
                        record = record.key(key);
                    }
                    waits.push(producer.send_result(record).map_err(|(e, _)| e)?);
                }
                for wait in futures::future::join_all(waits).await {
                    wait?.map_err(|(e, _)| e)?;
                }
            }
            Target::Rabbitmq { channel, .. } => {
                use lapin::options::BasicPublishOptions;
                use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
                let options = BasicPublishOptions {
                    mandatory: true,
                    immediate: false,
                };
                let mut confirms = Vec::with_capacity(events.len());
                for event in events {
                    let mut headers = FieldTable::default();
                    for (name, value) in event.message_headers() {
                        headers.insert(
                            ShortString::from(name),
                            AMQPValue::LongString(LongString::from(value)),
                        );
                    }
                    if let Some(key) = event.message_key() {
                        headers.insert(
                            ShortString::from("hare-outbox-ordering-key"),
                            AMQPValue::LongString(LongString::from(key)),
                        );
                    }
                    let properties = lapin::BasicProperties::default()
                        .with_content_type(ShortString::from("application/json"))
                        .with_delivery_mode(2)
                        .with_message_id(ShortString::from(event.id.to_string()))
                        .with_headers(headers);
                    confirms.push(
                        channel
                            .basic_publish(
                                ShortString::default(),
                                ShortString::from(event.topic.as_str()),
                                options,
                                &event.body(),
                                properties,
                            )
                            .await?,
                    );
                }
                for confirm in confirms {
                    let confirmation = confirm.await?;
                    ensure!(
                        confirmation.is_ack() && confirmation.take_message().is_none(),
                        "the broker refused or returned a message"
                    );
                }
            }
            Target::Redis { connection, .. } => {
                let mut pipe = redis::pipe();
                for event in events {
                    let headers: Map<String, Value> = event
                        .message_headers()
                        .into_iter()
                        .map(|(n, v)| (n, Value::String(v)))
                        .collect();
                    pipe.cmd("XADD")
                        .arg(&event.topic)
                        .arg("*")
                        .arg("id")
                        .arg(event.id.to_string())
                        .arg("topic")
                        .arg(&event.topic)
                        .arg("ordering_key")
                        .arg(event.ordering_key.as_deref().unwrap_or(""))
                        .arg("headers")
                        .arg(Value::Object(headers).to_string())
                        .arg("payload")
                        .arg(event.body());
                }
                let ids: Vec<String> = pipe.query_async(&mut connection.clone()).await?;
                ensure!(ids.len() == events.len(), "{} replies", ids.len());
            }
            Target::Nats { context, .. } => {
                let mut acks = Vec::with_capacity(events.len());
                for event in events {
                    let mut headers = async_nats::HeaderMap::new();
                    for (name, value) in event.message_headers() {
                        headers.insert(name.as_str(), value.as_str());
                    }
                    if let Some(key) = event.message_key() {
                        headers.insert("hare-outbox-ordering-key", key);
                    }
                    headers.insert("Nats-Msg-Id", event.id.to_string().as_str());
                    acks.push(
                        context
                            .publish_with_headers(event.topic.clone(), headers, event.body().into())
                            .await?,
                    );
                }
                let acks = acks.into_iter().map(std::future::IntoFuture::into_future);
                for ack in futures::future::join_all(acks).await {
                    ack?;
                }
            }
            Target::Mqtt { direct, .. } => direct.publish(events).await?,
            Target::Webhook { url, client, .. } => {
                let results: Vec<Result<()>> = futures::stream::iter(events)
                    .map(|event| async move {
                        let mut request = client
                            .post(url)
                            .header("content-type", "application/json")
                            .body(event.body());
                        for (name, value) in event.message_headers() {
                            request = request.header(name, value);
                        }
                        let response = request.send().await?;
                        ensure!(
                            response.status().is_success(),
                            "webhook answered {}",
                            response.status()
                        );
                        Ok(())
                    })
                    .buffer_unordered(10)
                    .collect()
                    .await;
                for result in results {
                    result?;
                }
            }
        }
        Ok(())
    }

    /// Deletes the destination and closes the clients; failures are only reported.
    async fn clean_up(self, name: &str) {
        match self {
            Target::Kafka {
                delivery,
                admin,
                producer,
            } => {
                let _ = delivery.close().await;
                let options = rdkafka::admin::AdminOptions::new();
                let _ = admin.delete_topics(&[name], &options).await;
                let _ = tokio::task::spawn_blocking(move || drop(producer)).await;
            }
            Target::Rabbitmq {
                delivery,
                connection,
                channel,
            } => {
                let _ = delivery.close().await;
                let _ = channel.queue_delete(name.into(), Default::default()).await;
                let _ = connection.close(200, "done".into()).await;
            }
            Target::Redis {
                delivery,
                mut connection,
            } => {
                let _ = delivery.close().await;
                let _: redis::RedisResult<i64> = redis::cmd("DEL")
                    .arg(name)
                    .query_async(&mut connection)
                    .await;
            }
            Target::Nats { delivery, context } => {
                let _ = delivery.close().await;
                let _ = context.delete_stream(name).await;
            }
            Target::Mqtt { delivery, direct } => {
                let _ = delivery.close().await;
                direct.close().await;
            }
            Target::Webhook { server, .. } => server.abort(),
        }
    }
}

/// A relay with batch size `batch` drains a fresh backlog of `cli.events` events into `target`;
/// events per second from the first poll to the last mark.
async fn relay_rate(
    cli: &Cli,
    scratch: &Scratch,
    target: &Target,
    table: &str,
    topic: &str,
    batch: usize,
) -> Result<f64> {
    let outbox = scratch.backlog(table, topic, cli).await?;
    // One warm-up call opens the delivery's connection, as the direct side's is open already.
    let warm = sample_event(topic, -1, cli);
    let (n, took) = match target {
        Target::Kafka { delivery, .. } => drain(&outbox, delivery.clone(), &warm, batch).await?,
        Target::Rabbitmq { delivery, .. } => drain(&outbox, delivery.clone(), &warm, batch).await?,
        Target::Redis { delivery, .. } => drain(&outbox, delivery.clone(), &warm, batch).await?,
        Target::Nats { delivery, .. } => drain(&outbox, delivery.clone(), &warm, batch).await?,
        Target::Mqtt { delivery, .. } => drain(&outbox, delivery.clone(), &warm, batch).await?,
        Target::Webhook { delivery, hits, .. } => {
            let before = hits.load(Ordering::Relaxed);
            let result = drain(&outbox, delivery.clone(), &warm, batch).await?;
            let seen = hits.load(Ordering::Relaxed) - before;
            ensure!(seen >= result.0, "the receiver saw {seen} of {}", result.0);
            result
        }
    };
    ensure!(
        n == u64::from(cli.events),
        "the relay delivered {n} of {} events",
        cli.events
    );
    scratch.drop_table(table).await?;
    Ok(n as f64 / took.as_secs_f64())
}

/// Runs a relay until the backlog is empty; events delivered and the time it took.
async fn drain(
    outbox: &Outbox<PgBackend>,
    delivery: impl Delivery,
    warm: &OutboxEvent,
    batch: usize,
) -> Result<(u64, Duration)> {
    delivery
        .deliver(warm)
        .await
        .map_err(|e| anyhow!("warm-up delivery failed: {}", e.chain()))?;
    let relay = OutboxRelay::new(
        outbox.clone(),
        delivery,
        RelayConfig::default().with_batch_size(u32::try_from(batch)?),
    )?;
    let start = Instant::now();
    let mut done = 0u64;
    loop {
        let outcome = relay.poll_once().await?;
        if outcome.leased == 0 {
            return Ok((done, start.elapsed()));
        }
        if outcome.failed > 0 {
            bail!(
                "{} deliveries failed; see the outbox's last_error",
                outcome.failed
            );
        }
        done += outcome.delivered as u64;
    }
}

/// The direct side: `cli.events` messages in chunks of `batch`, each chunk confirmed before the
/// next; events per second.
async fn direct_rate(cli: &Cli, target: &Target, topic: &str, batch: usize) -> Result<f64> {
    let events: Vec<OutboxEvent> = (0..i64::from(cli.events))
        .map(|n| sample_event(topic, n, cli))
        .collect();
    // Warm-up, as on the relay side.
    target.direct(&[sample_event(topic, -1, cli)]).await?;
    let start = Instant::now();
    for chunk in events.chunks(batch) {
        target.direct(chunk).await?;
    }
    Ok(events.len() as f64 / start.elapsed().as_secs_f64())
}

/// An MQTT session of the direct side: rumqttc's client, and its event loop polled by a task that
/// counts `PUBACK`s.
struct MqttDirect {
    client: rumqttc::AsyncClient,
    acks: Arc<AtomicU64>,
    sent: AtomicU64,
    changed: Arc<tokio::sync::Notify>,
    failed: Arc<std::sync::Mutex<Option<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl MqttDirect {
    fn connect(url: &str) -> Result<MqttDirect> {
        let mut options = rumqttc::MqttOptions::parse_url(url)?;
        options.set_clean_session(true);
        let (client, mut event_loop) = rumqttc::AsyncClient::new(options, 128);
        let acks = Arc::new(AtomicU64::new(0));
        let changed = Arc::new(tokio::sync::Notify::new());
        let failed = Arc::new(std::sync::Mutex::new(None));
        let task = {
            let (acks, changed, failed) = (acks.clone(), changed.clone(), failed.clone());
            tokio::spawn(async move {
                loop {
                    match event_loop.poll().await {
                        Ok(rumqttc::Event::Incoming(rumqttc::Packet::PubAck(_))) => {
                            acks.fetch_add(1, Ordering::Relaxed);
                            changed.notify_waiters();
                        }
                        Ok(_) => {}
                        Err(e) => {
                            if let Ok(mut failed) = failed.lock() {
                                *failed = Some(e.to_string());
                            }
                            changed.notify_waiters();
                            return;
                        }
                    }
                }
            })
        };
        Ok(MqttDirect {
            client,
            acks,
            sent: AtomicU64::new(0),
            changed,
            failed,
            task,
        })
    }

    /// Publishes every event with QoS 1, then waits for all their `PUBACK`s.
    async fn publish(&self, events: &[OutboxEvent]) -> Result<()> {
        for event in events {
            self.client
                .publish(
                    event.topic.replace('.', "/"),
                    rumqttc::QoS::AtLeastOnce,
                    false,
                    event.body(),
                )
                .await?;
        }
        let target =
            self.sent.fetch_add(events.len() as u64, Ordering::Relaxed) + events.len() as u64;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let changed = self.changed.notified();
            if self.acks.load(Ordering::Relaxed) >= target {
                return Ok(());
            }
            if let Some(error) = self.failed.lock().ok().and_then(|f| f.clone()) {
                bail!("the MQTT session failed: {error}");
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                bail!("PUBACKs missing after 30 s");
            }
        }
    }

    async fn close(self) {
        let _ = self.client.disconnect().await;
        self.task.abort();
    }
}

/// A loopback HTTP server answering 204 to every POST on `/hook`, counting them.
async fn receiver() -> Result<(String, Arc<AtomicU64>, tokio::task::JoinHandle<()>)> {
    let hits = Arc::new(AtomicU64::new(0));
    let counter = hits.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |_body: axum::body::Bytes| {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::Relaxed);
                axum::http::StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hook", listener.local_addr()?);
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((url, hits, server))
}
