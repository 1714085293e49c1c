//! `hare-outbox relay` on PostgreSQL delivering to every broker kind of `[delivery]`, routes
//! splitting topics between Redis Streams and a webhook (an unrouted topic failing), and a relay
//! woken through `[wakeup] kind = "redis"`. Every broker is the real one on loopback; every test
//! uses streams, queues, topics and channels of its own.

use std::time::{Duration, Instant};

use hare_outbox::kafka::rdkafka;
use hare_outbox::postgres::PgBackend;
use hare_outbox::redis::redis;
use hare_outbox::{EVENT_ID_HEADER, Outbox, OutboxMessage, OutboxTable};
use hare_outbox_testkit::http::{Behaviour, Receiver};
use hare_outbox_testkit::pg::TestSchema;
use hare_outbox_testkit::wait_for;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::{Proc, TempDir, hare_outbox};

/// Every wait of these tests is bounded by this unless it says otherwise.
const WAIT: Duration = Duration::from_secs(30);

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

fn redis_url() -> String {
    env_or("HARE_OUTBOX_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
}

fn nats_url() -> String {
    env_or("HARE_OUTBOX_TEST_NATS_URL", "nats://127.0.0.1:4222")
}

fn rabbitmq_url() -> String {
    env_or(
        "HARE_OUTBOX_TEST_RABBITMQ_URL",
        "amqp://guest:guest@127.0.0.1:5672/%2f",
    )
}

fn kafka_bootstrap() -> String {
    env_or("HARE_OUTBOX_TEST_KAFKA_BOOTSTRAP", "127.0.0.1:19092")
}

fn mqtt_port() -> u16 {
    env_or("HARE_OUTBOX_TEST_MQTT_PORT", "1883")
        .parse()
        .expect("HARE_OUTBOX_TEST_MQTT_PORT is a port")
}

/// A name no other test uses: `hare_t_<prefix>_<random>`.
fn unique(prefix: &str) -> String {
    format!(
        "hare_t_{prefix}_{:012x}",
        Uuid::now_v7().as_u128() & 0xffff_ffff_ffff
    )
}

/// A PostgreSQL outbox in a schema of its own.
async fn pg_outbox() -> (TestSchema, Outbox<PgBackend>) {
    let schema = TestSchema::new(4).await;
    let outbox = Outbox::new(PgBackend::new(schema.pool.clone()), OutboxTable::default());
    outbox.migrate().await.expect("migrate");
    (schema, outbox)
}

/// Writes one event per `(topic, n)` in one transaction and returns their ids.
async fn write(
    schema: &TestSchema,
    outbox: &Outbox<PgBackend>,
    events: &[(&str, i64)],
) -> Vec<Uuid> {
    let mut tx = schema.pool.begin().await.expect("begin");
    let mut ids = Vec::new();
    for (topic, n) in events {
        let message = OutboxMessage::new(*topic, json!({"n": n}))
            .ordering_key(format!("key-{n}"))
            .header("author", "test");
        ids.push(outbox.enqueue(&mut tx, message).await.expect("enqueue").id);
    }
    tx.commit().await.expect("commit");
    ids
}

/// Starts `relay --config <text>` on the schema, with `env` set.
fn start_relay(dir: &TempDir, schema: &TestSchema, text: &str, env: &[(&str, String)]) -> Proc {
    let config = dir.write(
        "hare-outbox.toml",
        &format!(
            "[relay]\npoll_interval_seconds = 0.1\nretry_base_seconds = 0.1\nretry_max_seconds = 0.2\nmax_delivery_attempts = 100\n\n{text}"
        ),
    );
    let mut command = hare_outbox(dir.path());
    command
        .args(["relay", "--config"])
        .arg(&config)
        .env("HARE_OUTBOX_DATABASE_URL", schema.url_with_search_path());
    for (name, value) in env {
        command.env(name, value);
    }
    Proc::spawn(&mut command)
}

/// Stops the relay with SIGTERM and checks it exits 0.
async fn stop(mut relay: Proc) -> String {
    relay.signal("TERM");
    let status = relay.wait(WAIT).await;
    assert_eq!(status.code(), Some(0), "stderr:\n{}", relay.stderr());
    relay.stderr()
}

/// Waits until every event of `ids` is marked published.
async fn wait_published(outbox: &Outbox<PgBackend>, ids: &[Uuid]) {
    wait_for("every event marked published", WAIT, || async {
        for id in ids {
            outbox.get(*id).await.ok()??.published_at?;
        }
        Some(())
    })
    .await;
}

/// Every entry of Redis stream `stream` as a map of its fields.
async fn xrange(
    conn: &mut redis::aio::MultiplexedConnection,
    stream: &str,
) -> Vec<std::collections::HashMap<String, String>> {
    let raw: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg(stream)
        .arg("-")
        .arg("+")
        .query_async(conn)
        .await
        .expect("XRANGE");
    raw.into_iter()
        .map(|(_, fields)| fields.into_iter().collect())
        .collect()
}

async fn redis_conn() -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis_url().as_str())
        .expect("redis url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect to redis")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_send_topics_to_redis_and_a_webhook_and_an_unrouted_topic_fails() {
    let (schema, outbox) = pg_outbox().await;
    let receiver = Receiver::start(Behaviour::ok());
    let stream = unique("routes");
    let dir = TempDir::new("routes");
    let text = format!(
        r#"
[deliveries.streams]
kind = "redis"
url_env = "H4_REDIS_URL"
stream = "{stream}"

[deliveries.hooks]
kind = "webhook"
url = "{hook}"

[[route]]
topic = "billing.paid"
delivery = "hooks"

[[route]]
topic = "orders.*"
delivery = "streams"

[[route]]
topic = "billing.*"
delivery = "streams"
"#,
        hook = receiver.url("/hook")
    );
    let ids = write(
        &schema,
        &outbox,
        &[
            ("orders.created", 1),
            ("orders.paid", 2),
            ("billing.paid", 3),
            ("billing.refunded", 4),
            ("debug.trace", 5),
        ],
    )
    .await;
    let relay = start_relay(&dir, &schema, &text, &[("H4_REDIS_URL", redis_url())]);

    // The exact route wins over the later glob: billing.paid goes to the webhook only.
    let requests = receiver.wait_for_requests(1, WAIT).await;
    let mut conn = redis_conn().await;
    let entries = wait_for("3 stream entries", WAIT, || {
        let mut conn = conn.clone();
        let stream = stream.clone();
        async move {
            let entries = xrange(&mut conn, &stream).await;
            (entries.len() >= 3).then_some(entries)
        }
    })
    .await;
    let topics: Vec<&str> = entries.iter().map(|e| e["topic"].as_str()).collect();
    let mut sorted = topics.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        ["billing.refunded", "orders.created", "orders.paid"],
        "{entries:?}"
    );
    assert_eq!(
        requests[0].header_str("hare-outbox-topic"),
        Some("billing.paid")
    );
    assert_eq!(requests[0].body_json(), json!({"n": 3}));
    wait_published(&outbox, &ids[..4]).await;

    // The unrouted event fails again and again (attempts grow) and is never published.
    let unrouted = ids[4];
    let event = wait_for("the unrouted event failing three times", WAIT, || async {
        let event = outbox.get(unrouted).await.ok()??;
        (event.attempts >= 3).then_some(event)
    })
    .await;
    assert!(event.published_at.is_none(), "{event:?}");
    assert!(
        event
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("no route") && e.contains("debug.trace")),
        "{event:?}"
    );
    let stderr = stop(relay).await;
    assert_eq!(
        receiver.request_count(),
        1,
        "nothing else reached the webhook"
    );
    assert_eq!(xrange(&mut conn, &stream).await.len(), 3);
    assert!(stderr.contains("router"), "{stderr}");
    assert!(stderr.contains("no default delivery"), "{stderr}");
    let _: i64 = redis::cmd("DEL")
        .arg(&stream)
        .query_async(&mut conn)
        .await
        .expect("DEL");
    schema.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_delivers_to_nats_jetstream() {
    use hare_outbox::nats::async_nats;
    let (schema, outbox) = pg_outbox().await;
    let root = unique("nats");
    let stream = root.to_uppercase();
    let dir = TempDir::new("nats");
    let text = format!(
        "[delivery]\nkind = \"nats\"\nurl = \"{}\"\nsubject_prefix = \"{root}.\"\nstream = \"{stream}\"\nstream_subjects = [\"{root}.>\"]\n",
        nats_url()
    );
    let ids = write(
        &schema,
        &outbox,
        &[
            ("orders.created", 1),
            ("orders.paid", 2),
            ("orders.shipped", 3),
        ],
    )
    .await;
    let relay = start_relay(&dir, &schema, &text, &[]);
    wait_published(&outbox, &ids).await;
    stop(relay).await;

    let client = async_nats::connect(nats_url()).await.expect("connect nats");
    let js = async_nats::jetstream::new(client);
    let mut handle = js
        .get_stream(&stream)
        .await
        .expect("the stream was created");
    let state = handle.info().await.expect("info").state.clone();
    assert_eq!(state.messages, 3);
    let mut seen = Vec::new();
    for seq in state.first_sequence..=state.last_sequence {
        let message = handle.get_raw_message(seq).await.expect("message");
        let id = message
            .headers
            .get("Nats-Msg-Id")
            .expect("Nats-Msg-Id")
            .as_str()
            .to_owned();
        seen.push((message.subject.to_string(), id));
    }
    seen.sort();
    let mut expected: Vec<(String, String)> = ["orders.created", "orders.paid", "orders.shipped"]
        .iter()
        .zip(&ids)
        .map(|(topic, id)| (format!("{root}.{topic}"), id.to_string()))
        .collect();
    expected.sort();
    assert_eq!(seen, expected);
    js.delete_stream(&stream).await.expect("delete stream");
    schema.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_delivers_to_rabbitmq_with_the_url_from_the_environment() {
    use hare_outbox::rabbitmq::lapin::options::{
        BasicGetOptions, QueueDeclareOptions, QueueDeleteOptions,
    };
    use hare_outbox::rabbitmq::lapin::types::{AMQPValue, FieldTable};
    use hare_outbox::rabbitmq::lapin::{Connection, ConnectionProperties};
    let (schema, outbox) = pg_outbox().await;
    let queue = unique("amqp");
    let connection = Connection::connect(&rabbitmq_url(), ConnectionProperties::default())
        .await
        .expect("connect rabbitmq");
    let channel = connection.create_channel().await.expect("channel");
    channel
        .queue_declare(
            queue.as_str().into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("declare queue");
    let dir = TempDir::new("rabbitmq");
    // The URL carries guest's password, so it comes from the environment.
    let text = format!(
        "[delivery]\nkind = \"rabbitmq\"\nurl_env = \"H4_AMQP_URL\"\nrouting_key = \"{queue}\"\ntimeout_seconds = 5\n"
    );
    let ids = write(
        &schema,
        &outbox,
        &[
            ("orders.created", 1),
            ("orders.paid", 2),
            ("orders.shipped", 3),
        ],
    )
    .await;
    let relay = start_relay(&dir, &schema, &text, &[("H4_AMQP_URL", rabbitmq_url())]);
    wait_published(&outbox, &ids).await;
    let stderr = stop(relay).await;
    assert!(!stderr.contains("guest:guest"), "{stderr}");

    let mut seen = Vec::new();
    for _ in 0..3 {
        let message = channel
            .basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true })
            .await
            .expect("basic_get")
            .expect("a message is waiting");
        let headers = message.properties.headers().clone().expect("headers");
        let id = match headers.inner().get(EVENT_ID_HEADER) {
            Some(AMQPValue::LongString(s)) => s.to_string(),
            other => panic!("event id header: {other:?}"),
        };
        let body: Value = serde_json::from_slice(&message.data).expect("JSON body");
        seen.push((id, body["n"].as_i64().expect("n")));
    }
    seen.sort();
    let mut expected: Vec<(String, i64)> = ids
        .iter()
        .zip(1..)
        .map(|(id, n)| (id.to_string(), n))
        .collect();
    expected.sort();
    assert_eq!(seen, expected);
    channel
        .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await
        .expect("delete queue");
    schema.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_delivers_to_kafka() {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    use rdkafka::consumer::{Consumer, StreamConsumer};
    use rdkafka::message::Headers as _;
    use rdkafka::{ClientConfig, Message as _, Offset, TopicPartitionList};
    let (schema, outbox) = pg_outbox().await;
    let topic = unique("kafka");
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", kafka_bootstrap());
    let admin: AdminClient<DefaultClientContext> = config.create().expect("admin");
    let results = admin
        .create_topics(
            [&NewTopic::new(&topic, 1, TopicReplication::Fixed(1))],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .expect("create topic");
    for result in results {
        result.expect("topic created");
    }
    let dir = TempDir::new("kafka");
    let text = format!(
        "[delivery]\nkind = \"kafka\"\nbootstrap_servers = \"{}\"\ntopic = \"{topic}\"\nproperties = {{ \"linger.ms\" = 5, \"compression.type\" = \"lz4\" }}\n",
        kafka_bootstrap()
    );
    let ids = write(
        &schema,
        &outbox,
        &[
            ("orders.created", 1),
            ("orders.paid", 2),
            ("orders.shipped", 3),
        ],
    )
    .await;
    let relay = start_relay(&dir, &schema, &text, &[]);
    wait_published(&outbox, &ids).await;
    stop(relay).await;

    let consumer: StreamConsumer = config
        .clone()
        .set("group.id", unique("reader"))
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(&topic, 0, Offset::Beginning)
        .expect("assign");
    consumer.assign(&assignment).expect("assign");
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let message = tokio::time::timeout(WAIT, consumer.recv())
            .await
            .expect("a message within the wait")
            .expect("recv");
        let id = message
            .headers()
            .and_then(|h| {
                h.iter()
                    .find(|h| h.key == EVENT_ID_HEADER)
                    .and_then(|h| h.value.map(<[u8]>::to_vec))
            })
            .expect("event id header");
        let key = message.key().map(<[u8]>::to_vec);
        seen.push((
            String::from_utf8(id).expect("UTF-8"),
            key.map(|k| String::from_utf8(k).expect("UTF-8")),
        ));
    }
    seen.sort();
    let mut expected: Vec<(String, Option<String>)> = ids
        .iter()
        .zip(1..)
        .map(|(id, n)| (id.to_string(), Some(format!("key-{n}"))))
        .collect();
    expected.sort();
    assert_eq!(seen, expected);
    schema.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_delivers_to_mqtt() {
    use hare_outbox::mqtt::rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
    let (schema, outbox) = pg_outbox().await;
    let prefix = unique("mqtt");
    // A QoS 1 subscriber to <prefix>/#, recording (topic, payload).
    let mut options = MqttOptions::new(unique("sub"), "127.0.0.1", mqtt_port());
    options.set_keep_alive(Duration::from_secs(5));
    let (client, mut event_loop) = AsyncClient::new(options, 64);
    client
        .subscribe(format!("{prefix}/#"), QoS::AtLeastOnce)
        .await
        .expect("subscribe");
    let messages = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(String, Value)>::new()));
    let (subscribed_tx, subscribed_rx) = tokio::sync::oneshot::channel();
    let task = {
        let messages = messages.clone();
        tokio::spawn(async move {
            let mut subscribed_tx = Some(subscribed_tx);
            loop {
                match event_loop.poll().await {
                    Ok(Event::Incoming(Packet::SubAck(_))) => {
                        if let Some(tx) = subscribed_tx.take() {
                            let _ = tx.send(());
                        }
                    }
                    Ok(Event::Incoming(Packet::Publish(p))) => {
                        let body = serde_json::from_slice(&p.payload).expect("JSON payload");
                        messages.lock().expect("lock").push((p.topic, body));
                    }
                    Ok(_) => {}
                    Err(e) => panic!("the MQTT subscriber failed: {e}"),
                }
            }
        })
    };
    tokio::time::timeout(WAIT, subscribed_rx)
        .await
        .expect("subscribed in time")
        .expect("subscribed");

    let dir = TempDir::new("mqtt");
    let text = format!(
        "[delivery]\nkind = \"mqtt\"\nhost = \"127.0.0.1\"\nport = {}\nclient_id = \"{}\"\ntopic_prefix = \"{prefix}\"\n",
        mqtt_port(),
        unique("relay")
    );
    let ids = write(
        &schema,
        &outbox,
        &[
            ("orders.created", 1),
            ("orders.paid", 2),
            ("orders.shipped", 3),
        ],
    )
    .await;
    let relay = start_relay(&dir, &schema, &text, &[]);
    wait_published(&outbox, &ids).await;
    stop(relay).await;
    let mut seen = wait_for("3 MQTT messages", WAIT, || {
        let messages = messages.clone();
        async move {
            let seen = messages.lock().expect("lock").clone();
            (seen.len() >= 3).then_some(seen)
        }
    })
    .await;
    task.abort();
    seen.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        seen,
        vec![
            (format!("{prefix}/orders/created"), json!({"n": 1})),
            (format!("{prefix}/orders/paid"), json!({"n": 2})),
            (format!("{prefix}/orders/shipped"), json!({"n": 3})),
        ]
    );
    schema.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_wakeup_wakes_a_relay_polling_every_30_seconds() {
    let schema = TestSchema::new(4).await;
    let channel = unique("wake");
    let wakeup = hare_outbox::redis::RedisWakeup::new(&redis_url())
        .expect("redis url")
        .with_channel(&channel)
        .expect("channel");
    let outbox = Outbox::new(PgBackend::new(schema.pool.clone()), OutboxTable::default())
        .with_wakeup(wakeup)
        .expect("wakeup");
    outbox.migrate().await.expect("migrate");
    let write = |n: i64| {
        let outbox = outbox.clone();
        async move {
            // An outbox transaction: the signal goes out after its commit.
            let mut tx = outbox.begin().await.expect("begin");
            tx.enqueue(OutboxMessage::new("doc.updated", json!({"n": n})))
                .await
                .expect("enqueue");
            tx.commit().await.expect("commit");
        }
    };
    write(1).await;
    let dir = TempDir::new("wakeup-redis");
    let config = dir.write(
        "hare-outbox.toml",
        &format!(
            "[relay]\npoll_interval_seconds = 30\n\n[delivery]\nkind = \"stdout\"\n\n[wakeup]\nkind = \"redis\"\nurl_env = \"H4_REDIS_URL\"\nchannel = \"{channel}\"\n"
        ),
    );
    let mut relay = Proc::spawn(
        hare_outbox(dir.path())
            .args(["relay", "--config"])
            .arg(&config)
            .env("HARE_OUTBOX_DATABASE_URL", schema.url_with_search_path())
            .env("H4_REDIS_URL", redis_url()),
    );
    relay
        .wait_for_stdout("the first event", WAIT, |out| out.lines().count() >= 1)
        .await;
    // The relay's subscription is live once Redis counts a subscriber on the channel.
    let mut conn = redis_conn().await;
    wait_for("the relay subscribed", WAIT, || {
        let mut conn = conn.clone();
        let channel = channel.clone();
        async move {
            let counts: Vec<(String, i64)> = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(&channel)
                .query_async(&mut conn)
                .await
                .ok()?;
            (counts.first()?.1 >= 1).then_some(())
        }
    })
    .await;

    write(2).await;
    let committed = Instant::now();
    relay
        .wait_for_stdout("the second event", WAIT, |out| out.lines().count() >= 2)
        .await;
    let took = committed.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "delivered {took:?} after commit; the poll interval is 30 s"
    );
    let second: Value =
        serde_json::from_str(relay.stdout().lines().nth(1).expect("line")).expect("JSON");
    assert_eq!(second["payload"]["n"], 2, "{second}");
    let stderr = stop(relay).await;
    assert!(stderr.contains("redis"), "{stderr}");
    let _ = &mut conn;
    schema.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taskiq_route_pushes_task_messages_a_worker_reads() {
    use hare_outbox::taskiq::TaskiqTask;
    let (schema, outbox) = pg_outbox().await;
    let queue = unique("taskiq");
    let dir = TempDir::new("taskiq");
    let text = format!(
        "[deliveries.tasks]\nkind = \"taskiq\"\nurl = \"{}\"\nqueue = \"{queue}\"\n\n[deliveries.rest]\nkind = \"stdout\"\n\n[[route]]\ntopic = \"taskiq\"\ndelivery = \"tasks\"\n\n[[route]]\ntopic = \"*\"\ndelivery = \"rest\"\n",
        redis_url()
    );
    let mut tx = schema.pool.begin().await.expect("begin");
    let task = TaskiqTask::new("billing.tasks:send_invoice")
        .with_arg(42)
        .with_kwarg("copy", true)
        .message()
        .expect("a valid task");
    let task_id = outbox.enqueue(&mut tx, task).await.expect("enqueue").id;
    // A payload that is not a task fails, naming what a task payload allows.
    let broken = outbox
        .enqueue(&mut tx, OutboxMessage::new("taskiq", json!({"args": [1]})))
        .await
        .expect("enqueue")
        .id;
    tx.commit().await.expect("commit");
    let relay = start_relay(&dir, &schema, &text, &[]);
    wait_published(&outbox, &[task_id]).await;
    wait_for("the broken task failed", WAIT, || async {
        let event = outbox.get(broken).await.ok()??;
        (event.attempts > 0).then_some(event)
    })
    .await;
    stop(relay).await;

    let broken = outbox.get(broken).await.unwrap().unwrap();
    assert!(broken.published_at.is_none());
    assert!(
        broken
            .last_error
            .as_deref()
            .unwrap_or("")
            .contains("task_name"),
        "{:?}",
        broken.last_error
    );
    let mut conn = redis_conn().await;
    let messages: Vec<String> = redis::cmd("LRANGE")
        .arg(&queue)
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .expect("LRANGE");
    assert_eq!(messages.len(), 1, "{messages:?}");
    let message: serde_json::Value = serde_json::from_str(&messages[0]).expect("JSON");
    assert_eq!(message["task_id"], task_id.to_string());
    assert_eq!(message["task_name"], "billing.tasks:send_invoice");
    assert_eq!(message["args"], json!([42]));
    assert_eq!(message["kwargs"], json!({"copy": true}));
    let _: i64 = redis::cmd("DEL")
        .arg(&queue)
        .query_async(&mut conn)
        .await
        .expect("DEL");
    schema.drop_schema().await;
}
