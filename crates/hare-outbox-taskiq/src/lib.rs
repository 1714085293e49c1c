//! taskiq task delivery of hare-outbox.
//!
//! Events of the topic [`TASKIQ_TOPIC`] (`"taskiq"`) are tasks: written in the caller's
//! transaction like any event, they reach a Python [taskiq](https://taskiq-python.github.io/)
//! worker only if the transaction commits, and at least once after that. [`TaskiqTask`] builds
//! such an event; [`TaskiqDelivery`] turns each one into a taskiq message on the queue the
//! worker's broker reads.
//!
//! # The event payload
//!
//! ```json
//! {"task_name": "shop.tasks:send_receipt", "args": [42], "kwargs": {"copy": true}, "labels": {"priority": 5}}
//! ```
//!
//! Only `task_name` (a non-empty string: the name the worker registered the task under,
//! `module:function` unless the task was given another) is required; `args` (an array) defaults
//! to `[]`, `kwargs` (an object) and `labels` (an object of strings, numbers and booleans) to
//! `{}`. Any other key, or a value of another type, is refused ([`parse_task`]).
//!
//! # The taskiq message
//!
//! What `task.kiq(...)` of taskiq 0.11–0.13 sends with its JSON formatter: the UTF-8 JSON object
//! `{"task_id", "task_name", "labels", "labels_types", "args", "kwargs"}`, with
//! - `task_id` = the event id (hyphenated UUID), so a redelivered event is recognisable by its
//!   task id (delivery is at least once: make tasks idempotent or check the id);
//! - `labels` as taskiq's kicker writes them: every value as text, its type in `labels_types`
//!   (2 int, 3 str, 4 float, 5 bool), which the worker parses back.
//!
//! # The broker
//!
//! The Redis list broker of `taskiq-redis` (`ListQueueBroker`): the message bytes are pushed with
//! `LPUSH` onto the list named by the task's `queue_name` label, else the delivery's queue
//! ([`DEFAULT_QUEUE`], `"taskiq"`, as `ListQueueBroker(url)`); the worker takes them with `BRPOP`,
//! oldest first. Start the worker on the same Redis, database and queue name:
//!
//! ```python
//! # shop/tasks.py
//! from taskiq_redis import ListQueueBroker
//! broker = ListQueueBroker("redis://127.0.0.1:6379/0")
//!
//! @broker.task
//! async def send_receipt(order_id: int, copy: bool = False) -> None: ...
//! # taskiq worker shop.tasks:broker
//! ```
//!
//! With the crate feature `rabbitmq`, [`TaskiqDelivery`] can instead publish to the RabbitMQ
//! broker of `taskiq-aio-pika` (`AioPikaBroker`): persistent messages through its exchange
//! (`"taskiq"`) with the queue name as routing key, each confirmed by the broker.
//!
//! ```no_run
//! use hare_outbox_core::{Backend, Outbox, RelayConfig};
//! use hare_outbox_taskiq::{TaskiqDelivery, TaskiqTask};
//!
//! # async fn run<B: Backend>(outbox: Outbox<B>, conn: &mut B::Conn) -> hare_outbox_core::Result<()> {
//! // In the transaction that places the order:
//! let task = TaskiqTask::new("shop.tasks:send_receipt")
//!     .with_arg(42)
//!     .with_kwarg("copy", true)
//!     .message()?;
//! outbox.enqueue(conn, task).await?;
//!
//! // One relay for the task events; the other relays leave the topic alone
//! // (`RelayConfig::with_exclude_topics(["taskiq"])`).
//! let relay = TaskiqDelivery::redis("redis://127.0.0.1:6379/0")?
//!     .relay(outbox, RelayConfig::default())?;
//! relay.start()?;
//! # Ok(()) }
//! ```

mod config;

pub use config::TaskiqDeliveryConfig;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use hare_outbox_core::message::encoding::encode;
use hare_outbox_core::{
    Backend, Delivery, DeliveryError, DeliveryErrorKind, Error, Outbox, OutboxEvent, OutboxMessage,
    OutboxRelay, RelayConfig, Result,
};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use serde_json::{Map, Value, json};

/// The topic of task events: [`TaskiqTask::message`] writes it, [`TaskiqDelivery::relay`]
/// leases only it (as `TaskiqDelivery(...).get_relay()` of the original).
pub const TASKIQ_TOPIC: &str = "taskiq";

/// The Redis list tasks go to unless [`TaskiqDelivery::with_queue_name`] or a task's
/// `queue_name` label names another: `"taskiq"`, the default of taskiq-redis'
/// `ListQueueBroker`.
pub const DEFAULT_QUEUE: &str = "taskiq";

/// How long one call to Redis may take unless [`TaskiqDelivery::with_timeout`] sets another:
/// 10 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The keys a task payload may have.
const PAYLOAD_KEYS: &[&str] = &["task_name", "args", "kwargs", "labels"];

/// What a task payload looks like, for error messages.
const PAYLOAD_SHAPE: &str = "{\"task_name\": \"module:function\", \"args\": [...], \"kwargs\": {...}, \"labels\": {...}}; only task_name is required";

/// taskiq's label types (`taskiq.labels.LabelType`).
const LABEL_INT: i64 = 2;
const LABEL_STR: i64 = 3;
const LABEL_FLOAT: i64 = 4;
const LABEL_BOOL: i64 = 5;

/// One taskiq task: the payload of a [`TASKIQ_TOPIC`] event (see the crate docs for its JSON).
///
/// Build one with [`TaskiqTask::new`] and the `with_*` methods, then [`TaskiqTask::message`]
/// gives the [`OutboxMessage`] to enqueue.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskiqTask {
    task_name: String,
    args: Vec<Value>,
    kwargs: Map<String, Value>,
    labels: Map<String, Value>,
    /// The first value that had no JSON form (field, why), reported by [`TaskiqTask::message`].
    refused: Option<(String, String)>,
}

impl TaskiqTask {
    /// A task named `task_name` (as the worker registered it: `module:function` unless the task
    /// was given another name), without arguments or labels.
    pub fn new(task_name: impl Into<String>) -> Self {
        TaskiqTask {
            task_name: task_name.into(),
            args: Vec::new(),
            kwargs: Map::new(),
            labels: Map::new(),
            refused: None,
        }
    }

    /// Appends a positional argument, encoded as the outbox encodes payloads (decimals as text,
    /// dates as ISO 8601, …; a NaN or another value without JSON form is reported by
    /// [`TaskiqTask::message`]).
    pub fn with_arg(mut self, value: impl serde::Serialize) -> Self {
        let at = format!("args[{}]", self.args.len());
        if let Some(value) = self.encoded(&at, &value) {
            self.args.push(value);
        }
        self
    }

    /// Sets the keyword argument `name` (encoded as in [`TaskiqTask::with_arg`]); setting it
    /// again replaces it.
    pub fn with_kwarg(mut self, name: impl Into<String>, value: impl serde::Serialize) -> Self {
        let name = name.into();
        if let Some(value) = self.encoded(&format!("kwargs.{name}"), &value) {
            self.kwargs.insert(name, value);
        }
        self
    }

    /// Sets the label `name` (a string, a number or a boolean; anything else is reported by
    /// [`TaskiqTask::message`]). The label `queue_name` sends the task to that Redis list, as
    /// taskiq's own `kicker().with_labels(queue_name=...)` does.
    pub fn with_label(mut self, name: impl Into<String>, value: impl serde::Serialize) -> Self {
        let name = name.into();
        if let Some(value) = self.encoded(&format!("labels.{name}"), &value) {
            self.labels.insert(name, value);
        }
        self
    }

    fn encoded(&mut self, at: &str, value: &impl serde::Serialize) -> Option<Value> {
        match encode(value) {
            Ok(value) => Some(value),
            Err(e) => {
                self.refused.get_or_insert_with(|| {
                    let inner = e.path().strip_prefix('$').unwrap_or(e.path());
                    (format!("payload.{at}{inner}"), e.message().to_owned())
                });
                None
            }
        }
    }

    /// The task name.
    pub fn task_name(&self) -> &str {
        &self.task_name
    }

    /// The positional arguments.
    pub fn args(&self) -> &[Value] {
        &self.args
    }

    /// The keyword arguments.
    pub fn kwargs(&self) -> &Map<String, Value> {
        &self.kwargs
    }

    /// The labels.
    pub fn labels(&self) -> &Map<String, Value> {
        &self.labels
    }

    /// The event payload: `{"task_name", "args", "kwargs", "labels"}`.
    pub fn to_payload(&self) -> Value {
        json!({
            "task_name": self.task_name,
            "args": self.args,
            "kwargs": self.kwargs,
            "labels": self.labels,
        })
    }

    /// The message to enqueue: topic [`TASKIQ_TOPIC`], this task as the payload. Add an ordering
    /// key, idempotency key or headers to it as to any message.
    ///
    /// # Errors
    /// [`Error::Validation`] naming the field when an argument, keyword argument or label had no
    /// JSON form, when the task name is empty, or when a label is not a string, number or
    /// boolean — checked here, before anything is written.
    pub fn message(&self) -> Result<OutboxMessage> {
        if let Some((field, message)) = &self.refused {
            return Err(Error::validation(field.clone(), message.clone()));
        }
        let payload = self.to_payload();
        parse_task(&payload).map_err(|e| Error::validation("payload", e))?;
        Ok(OutboxMessage::new(TASKIQ_TOPIC, payload))
    }
}

/// Reads a task event's payload (see the crate docs for its shape).
///
/// # Errors
/// A message naming what is wrong and what is allowed: a payload that is not an object, a key
/// other than `task_name`, `args`, `kwargs`, `labels`, a missing or empty `task_name`, `args`
/// that is not an array, `kwargs` or `labels` that is not an object, a label that is not a
/// string, number or boolean.
pub fn parse_task(payload: &Value) -> std::result::Result<TaskiqTask, String> {
    let Value::Object(fields) = payload else {
        return Err(format!(
            "a taskiq task payload is a JSON object, not {}; expected {PAYLOAD_SHAPE}",
            kind(payload)
        ));
    };
    if let Some(unknown) = fields.keys().find(|k| !PAYLOAD_KEYS.contains(&k.as_str())) {
        return Err(format!(
            "a taskiq task payload has no key {unknown:?}; allowed are {}: {PAYLOAD_SHAPE}",
            PAYLOAD_KEYS.join(", ")
        ));
    }
    let task_name = match fields.get("task_name") {
        Some(Value::String(name)) if !name.trim().is_empty() => name.clone(),
        Some(Value::String(_)) => {
            return Err(format!(
                "task_name is empty; give the name the worker registered the task under, e.g. \"module:function\"; expected {PAYLOAD_SHAPE}"
            ));
        }
        Some(other) => {
            return Err(format!(
                "task_name is {}, not a string; expected {PAYLOAD_SHAPE}",
                kind(other)
            ));
        }
        None => return Err(format!("task_name is missing; expected {PAYLOAD_SHAPE}")),
    };
    let args = match fields.get("args") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(args)) => args.clone(),
        Some(other) => {
            return Err(format!(
                "args is {}, not an array of positional arguments; expected {PAYLOAD_SHAPE}",
                kind(other)
            ));
        }
    };
    let object = |key: &str| -> std::result::Result<Map<String, Value>, String> {
        match fields.get(key) {
            None | Some(Value::Null) => Ok(Map::new()),
            Some(Value::Object(map)) => Ok(map.clone()),
            Some(other) => Err(format!(
                "{key} is {}, not an object; expected {PAYLOAD_SHAPE}",
                kind(other)
            )),
        }
    };
    let kwargs = object("kwargs")?;
    let labels = object("labels")?;
    if let Some((name, value)) = labels
        .iter()
        .find(|(_, v)| !matches!(v, Value::String(_) | Value::Number(_) | Value::Bool(_)))
    {
        return Err(format!(
            "label {name:?} is {}; labels are strings, numbers or booleans",
            kind(value)
        ));
    }
    Ok(TaskiqTask {
        task_name,
        args,
        kwargs,
        labels,
        refused: None,
    })
}

/// The taskiq message for `event`, as UTF-8 JSON bytes (see the crate docs), and the task it
/// carries.
///
/// # Errors
/// A [`DeliveryError`] naming the event when its payload is not a task ([`parse_task`]).
pub fn task_message(
    event: &OutboxEvent,
) -> std::result::Result<(TaskiqTask, Vec<u8>), DeliveryError> {
    let (task, message) = task_message_json(event)?;
    Ok((task, message.to_string().into_bytes()))
}

/// [`task_message`] as a JSON value.
fn task_message_json(
    event: &OutboxEvent,
) -> std::result::Result<(TaskiqTask, Value), DeliveryError> {
    let task = parse_task(&event.payload).map_err(|e| {
        DeliveryError::new(format!(
            "event {} (topic {:?}) is not a taskiq task: {e}",
            event.id, event.topic
        ))
    })?;
    let mut labels = Map::new();
    let mut labels_types = Map::new();
    for (name, value) in &task.labels {
        let (text, label_type) = match value {
            Value::String(s) => (s.clone(), LABEL_STR),
            Value::Bool(b) => (if *b { "True" } else { "False" }.to_owned(), LABEL_BOOL),
            Value::Number(n) if n.is_f64() => (n.to_string(), LABEL_FLOAT),
            Value::Number(n) => (n.to_string(), LABEL_INT),
            // parse_task admits nothing else.
            other => (other.to_string(), LABEL_STR),
        };
        labels.insert(name.clone(), Value::String(text));
        labels_types.insert(name.clone(), Value::from(label_type));
    }
    let message = json!({
        "task_id": event.id.to_string(),
        "task_name": task.task_name,
        "labels": labels,
        "labels_types": labels_types,
        "args": task.args,
        "kwargs": task.kwargs,
    });
    Ok((task, message))
}

/// Sends task events to taskiq workers: through the
/// Redis list broker of `taskiq-redis` ([`TaskiqDelivery::redis`]) or, with the crate feature
/// `rabbitmq`, the RabbitMQ broker of `taskiq-aio-pika` (`TaskiqDelivery::rabbitmq`).
///
/// Each event's payload must be a task ([`parse_task`]); its message ([`task_message`]) goes to
/// the task's `queue_name` label or the delivery's queue ([`DEFAULT_QUEUE`] unless
/// [`with_queue_name`](Self::with_queue_name)):
/// - Redis: `LPUSH` of the message bytes onto the list of that name, as `ListQueueBroker.kick`
///   does; a batch goes in one pipeline;
/// - RabbitMQ: one persistent message (body: the message bytes; headers `task_id`, `task_name`)
///   published through the exchange ([`DEFAULT_EXCHANGE`] unless
///   [`with_exchange`](Self::with_exchange)) with the queue name as routing key, as
///   `AioPikaBroker.kick` does for a broker with one queue, with publisher confirms and
///   `mandatory` (published by `hare_outbox_rabbitmq::RabbitMqDelivery`). The worker's broker
///   declares the exchange and the queue when it starts; until a worker has started once,
///   publishing fails (`NOT_FOUND` or `NO_ROUTE`) and the relay retries. The `priority` and
///   `delay` labels are not applied.
///
/// An event fails (the relay retries it and dead-letters it when attempts run out) when its
/// payload is not a task — the message names what is wrong and what is allowed — and when the
/// broker cannot be reached or refuses the message within the timeout. Once the broker took the
/// task it is the worker's: whether it runs or fails is not reported back. Delivery is at least
/// once: a relay that dies between the push and the mark pushes the task again, with the same
/// task id.
///
/// The connection is opened on the first delivery and shared by clones of the delivery.
#[derive(Clone)]
pub struct TaskiqDelivery {
    transport: Transport,
    queue_name: String,
    timeout: Duration,
}

#[derive(Clone)]
enum Transport {
    Redis {
        client: redis::Client,
        /// The server as messages show it, never with a password.
        server: String,
        connection: Arc<Mutex<Option<ConnectionManager>>>,
    },
    #[cfg(feature = "rabbitmq")]
    RabbitMq(hare_outbox_rabbitmq::RabbitMqDelivery),
}

/// The exchange a RabbitMQ delivery (`TaskiqDelivery::rabbitmq`) publishes through unless
/// [`TaskiqDelivery::with_exchange`] names another: `"taskiq"`, the default of
/// taskiq-aio-pika's `AioPikaBroker`.
pub const DEFAULT_EXCHANGE: &str = "taskiq";

impl std::fmt::Debug for TaskiqDelivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out = f.debug_struct("TaskiqDelivery");
        match &self.transport {
            Transport::Redis { server, .. } => out.field("server", server),
            #[cfg(feature = "rabbitmq")]
            Transport::RabbitMq(delivery) => out
                .field("broker", &"rabbitmq")
                .field("exchange", &delivery.exchange()),
        };
        out.field("queue_name", &self.queue_name)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl TaskiqDelivery {
    /// A delivery to the Redis server at `url` (`redis://[[user]:password@]host[:port][/db]`) —
    /// the URL the worker's `ListQueueBroker` is given —, onto the queue [`DEFAULT_QUEUE`], with a
    /// timeout of [`DEFAULT_TIMEOUT`] (10 s). Nothing is connected until the first delivery.
    ///
    /// # Errors
    /// [`Error::Configuration`] when `url` is not a Redis URL (the message hides a password).
    pub fn redis(url: &str) -> Result<Self> {
        let client = redis::Client::open(url).map_err(|e| {
            Error::configuration(format!(
                "taskiq redis url {:?} is not a valid Redis URL ({e}); expected e.g. \"redis://127.0.0.1:6379/0\"",
                redact(url)
            ))
        })?;
        Ok(Self::from_client(client))
    }

    /// Like [`redis`](Self::redis) with a client you built yourself.
    pub fn from_client(client: redis::Client) -> Self {
        let info = client.get_connection_info();
        TaskiqDelivery {
            transport: Transport::Redis {
                server: format!("redis {} db {}", info.addr(), info.redis_settings().db()),
                client,
                connection: Arc::default(),
            },
            queue_name: DEFAULT_QUEUE.to_owned(),
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// A delivery to the RabbitMQ broker at `url`
    /// (`amqp[s]://[user[:password]@]host[:port][/vhost]`, the URL the worker's `AioPikaBroker`
    /// is given), through the exchange [`DEFAULT_EXCHANGE`] with the routing key
    /// [`DEFAULT_QUEUE`], with a timeout of [`DEFAULT_TIMEOUT`] (10 s). Nothing is connected
    /// until the first delivery.
    ///
    /// # Errors
    /// [`Error::Configuration`] when `url` is not an AMQP URL (the message hides a password).
    #[cfg(feature = "rabbitmq")]
    pub fn rabbitmq(url: &str) -> Result<Self> {
        let delivery = hare_outbox_rabbitmq::RabbitMqDelivery::new(url)?
            .with_exchange(DEFAULT_EXCHANGE)?
            .with_connection_name("hare-outbox taskiq delivery")
            .with_timeout(DEFAULT_TIMEOUT);
        Ok(TaskiqDelivery {
            transport: Transport::RabbitMq(delivery),
            queue_name: DEFAULT_QUEUE.to_owned(),
            timeout: DEFAULT_TIMEOUT,
        })
    }

    /// Sends tasks to the queue `name` — the `queue_name` of the worker's `ListQueueBroker`, or
    /// the name (routing key) of the `AioPikaBroker`'s queue — unless a task's `queue_name` label
    /// names another. Defaults to [`DEFAULT_QUEUE`].
    ///
    /// # Errors
    /// [`Error::Configuration`] when `name` is empty.
    pub fn with_queue_name(mut self, name: impl Into<String>) -> Result<Self> {
        let name = name.into();
        if name.is_empty() {
            return Err(Error::configuration(
                "taskiq queue name \"\" is empty; give the queue_name of the worker's broker, \
                 \"taskiq\" by default",
            ));
        }
        self.queue_name = name;
        Ok(self)
    }

    /// Publishes through the RabbitMQ exchange `name` (the `exchange` of the worker's
    /// `AioPikaBroker`) instead of [`DEFAULT_EXCHANGE`].
    ///
    /// # Errors
    /// [`Error::Configuration`] for a Redis delivery (which has no exchange), and when `name` is
    /// empty, longer than 255 bytes or holds control characters.
    pub fn with_exchange(self, name: impl Into<String>) -> Result<Self> {
        let name = name.into();
        match self.transport {
            Transport::Redis { .. } => Err(Error::configuration(format!(
                "taskiq exchange {name:?}: a Redis delivery has no exchange; exchanges belong to TaskiqDelivery::rabbitmq (crate feature `rabbitmq`)"
            ))),
            #[cfg(feature = "rabbitmq")]
            Transport::RabbitMq(delivery) => Ok(TaskiqDelivery {
                transport: Transport::RabbitMq(delivery.with_exchange(name)?),
                ..self
            }),
        }
    }

    /// How long one call to the broker may take (connecting, pushing one event or a whole batch,
    /// and for RabbitMQ waiting for the confirms); a slower call fails its events. In a relay the
    /// shorter of this and the relay's delivery timeout applies. Defaults to [`DEFAULT_TIMEOUT`]
    /// (10 s).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self.transport = match self.transport {
            Transport::Redis { client, server, .. } => Transport::Redis {
                client,
                server,
                connection: Arc::default(),
            },
            #[cfg(feature = "rabbitmq")]
            Transport::RabbitMq(delivery) => Transport::RabbitMq(delivery.with_timeout(timeout)),
        };
        self
    }

    /// The queue `task` is sent to: its `queue_name` label if it is a non-empty string, else
    /// the delivery's queue.
    pub fn queue_for<'a>(&'a self, task: &'a TaskiqTask) -> &'a str {
        match task.labels.get("queue_name") {
            Some(Value::String(name)) if !name.is_empty() => name,
            _ => &self.queue_name,
        }
    }

    /// A relay of `outbox`'s task events through this delivery: `config` with its topics set to
    /// [`TASKIQ_TOPIC`] alone (as `TaskiqDelivery(...).get_relay()`). Give the other
    /// relays of the table `with_exclude_topics(["taskiq"])`.
    ///
    /// # Errors
    /// [`Error::Configuration`] as [`OutboxRelay::new`].
    pub fn relay<B: Backend>(
        self,
        outbox: Outbox<B>,
        config: RelayConfig,
    ) -> Result<OutboxRelay<B>> {
        OutboxRelay::new(outbox, self, config.with_topics([TASKIQ_TOPIC]))
    }

    /// Sends the tasks of `events`; one result per event, in order.
    async fn send(
        &self,
        events: &[OutboxEvent],
        concurrency: usize,
        timeout: Duration,
    ) -> Vec<std::result::Result<(), DeliveryError>> {
        match &self.transport {
            Transport::Redis {
                client,
                server,
                connection,
            } => {
                let _ = concurrency;
                let redis = RedisList {
                    client,
                    server,
                    connection,
                };
                redis.send(self, events, timeout).await
            }
            #[cfg(feature = "rabbitmq")]
            Transport::RabbitMq(delivery) => {
                self.send_amqp(delivery, events, concurrency, timeout).await
            }
        }
    }

    /// Publishes each task as a rewritten event: the taskiq message as payload (so the body is
    /// its JSON), the queue name as topic (so it is the routing key), `task_id` and `task_name`
    /// as headers, as taskiq-aio-pika sends them.
    #[cfg(feature = "rabbitmq")]
    async fn send_amqp(
        &self,
        delivery: &hare_outbox_rabbitmq::RabbitMqDelivery,
        events: &[OutboxEvent],
        concurrency: usize,
        timeout: Duration,
    ) -> Vec<std::result::Result<(), DeliveryError>> {
        let mut results: Vec<Option<std::result::Result<(), DeliveryError>>> =
            Vec::with_capacity(events.len());
        let mut messages = Vec::new();
        let mut indexes = Vec::new();
        for (i, event) in events.iter().enumerate() {
            match task_message_json(event) {
                Ok((task, message)) => {
                    let mut headers = Map::new();
                    headers.insert("task_id".to_owned(), Value::String(event.id.to_string()));
                    headers.insert(
                        "task_name".to_owned(),
                        Value::String(task.task_name.clone()),
                    );
                    messages.push(OutboxEvent {
                        topic: self.queue_for(&task).to_owned(),
                        payload: message,
                        headers,
                        ordering_key: None,
                        ..event.clone()
                    });
                    indexes.push(i);
                    results.push(None);
                }
                Err(error) => results.push(Some(Err(error))),
            }
        }
        if !messages.is_empty() {
            let sent = delivery
                .deliver_batch(&messages, concurrency, timeout)
                .await;
            for (i, result) in indexes.into_iter().zip(sent) {
                results[i] = Some(result);
            }
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(DeliveryError::new("no result for the task"))))
            .collect()
    }
}

/// How a Redis error counts for the relay: an outage when the connection failed or Redis says
/// to retry; otherwise the task's own fault (a queue key of another type, say).
fn redis_error_kind(error: &redis::RedisError) -> DeliveryErrorKind {
    let outage = error.is_io_error()
        || error.is_timeout()
        || error.is_connection_refusal()
        || error.is_connection_dropped()
        || error.is_cluster_error()
        || !matches!(error.retry_method(), redis::RetryMethod::NoRetry);
    if outage {
        DeliveryErrorKind::Outage
    } else {
        DeliveryErrorKind::Event
    }
}

/// The Redis list transport.
struct RedisList<'a> {
    client: &'a redis::Client,
    server: &'a str,
    connection: &'a Mutex<Option<ConnectionManager>>,
}

impl RedisList<'_> {
    fn connection(
        &self,
        timeout: Duration,
    ) -> std::result::Result<ConnectionManager, DeliveryError> {
        let mut slot = self
            .connection
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(connection) = slot.as_ref() {
            return Ok(connection.clone());
        }
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            // Fail fast while Redis is down: the relay retries with its own backoff.
            .set_number_of_retries(0);
        let connection = ConnectionManager::new_lazy_with_config(self.client.clone(), config)
            .map_err(|e| {
                DeliveryError::with_source(format!("connecting to {} failed", self.server), e)
                    .with_kind(DeliveryErrorKind::Outage)
            })?;
        *slot = Some(connection.clone());
        Ok(connection)
    }

    /// Pushes the tasks of `events` in one pipeline; one result per event, in order.
    async fn send(
        &self,
        delivery: &TaskiqDelivery,
        events: &[OutboxEvent],
        timeout: Duration,
    ) -> Vec<std::result::Result<(), DeliveryError>> {
        let server = self.server;
        let mut results: Vec<Option<std::result::Result<(), DeliveryError>>> =
            Vec::with_capacity(events.len());
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        let mut pushed = Vec::new();
        for (i, event) in events.iter().enumerate() {
            match task_message(event) {
                Ok((task, bytes)) => {
                    let queue = delivery.queue_for(&task).to_owned();
                    pipe.cmd("LPUSH").arg(&queue).arg(bytes);
                    pushed.push((i, queue));
                    results.push(None);
                }
                Err(error) => results.push(Some(Err(error))),
            }
        }
        if !pushed.is_empty() {
            let replies = match self.connection(delivery.timeout) {
                Err(error) => Err(error),
                Ok(mut connection) => match tokio::time::timeout(
                    timeout,
                    pipe.query_async::<Vec<redis::RedisResult<redis::Value>>>(&mut connection),
                )
                .await
                {
                    Err(_) => Err(DeliveryError::outage(format!(
                        "LPUSH of {} task(s) to {server} timed out after {:.3} s",
                        pushed.len(),
                        timeout.as_secs_f64()
                    ))),
                    Ok(Err(error)) => {
                        let kind = redis_error_kind(&error);
                        Err(DeliveryError::with_source(
                            format!("LPUSH of {} task(s) to {server} failed", pushed.len()),
                            error,
                        )
                        .with_kind(kind))
                    }
                    Ok(Ok(replies)) if replies.len() != pushed.len() => {
                        Err(DeliveryError::outage(format!(
                            "{server} answered {} replies to a pipeline of {} LPUSH commands",
                            replies.len(),
                            pushed.len()
                        )))
                    }
                    Ok(Ok(replies)) => Ok(replies),
                },
            };
            match replies {
                Ok(replies) => {
                    for ((i, queue), reply) in pushed.into_iter().zip(replies) {
                        results[i] = Some(reply.map(|_length| ()).map_err(|error| {
                            let kind = redis_error_kind(&error);
                            DeliveryError::with_source(
                                format!(
                                    "LPUSH of event {} onto {queue:?} on {server} failed",
                                    events[i].id
                                ),
                                error,
                            )
                            .with_kind(kind)
                        }));
                    }
                }
                Err(error) => {
                    let text = error.chain();
                    let kind = error.kind();
                    for (i, _) in pushed {
                        results[i] = Some(Err(DeliveryError::new(text.clone()).with_kind(kind)));
                    }
                }
            }
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(DeliveryError::new("no reply for the task"))))
            .collect()
    }
}

#[async_trait]
impl Delivery for TaskiqDelivery {
    /// Sends one task, within the timeout ([`DEFAULT_TIMEOUT`] unless set).
    async fn deliver(&self, event: &OutboxEvent) -> std::result::Result<(), DeliveryError> {
        self.send(std::slice::from_ref(event), 1, self.timeout)
            .await
            .pop()
            .unwrap_or_else(|| Err(DeliveryError::new("no reply for the task")))
    }

    /// Sends the batch's tasks — to Redis in one pipeline, to RabbitMQ published whole then
    /// confirmed — within the shorter of `timeout` and the delivery's timeout; events whose
    /// payload is not a task fail alone.
    async fn deliver_batch(
        &self,
        events: &[OutboxEvent],
        concurrency: usize,
        timeout: Duration,
    ) -> Vec<std::result::Result<(), DeliveryError>> {
        if events.is_empty() {
            return Vec::new();
        }
        self.send(events, concurrency, timeout.min(self.timeout))
            .await
    }
}

/// The JSON kind of `value`, for messages.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `url` as messages show it: the shared redaction of connection URLs
/// ([`hare_outbox_core::redact::redact_url`]), password and secret parameters as `***`.
fn redact(url: &str) -> String {
    hare_outbox_core::redact::redact_url(url, hare_outbox_core::redact::UrlKind::Connection)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(payload: Value) -> OutboxEvent {
        OutboxEvent::new(TASKIQ_TOPIC.to_owned(), payload)
    }

    #[test]
    fn message_has_taskiqs_fields_and_the_event_id_as_task_id() {
        let e = event(json!({
            "task_name": "shop.tasks:send_receipt",
            "args": [42, "x"],
            "kwargs": {"copy": true},
            "labels": {"priority": 5, "ratio": 0.5, "urgent": false, "queue_name": "mail"},
        }));
        let (task, bytes) = task_message(&e).unwrap();
        let message: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(
            message,
            json!({
                "task_id": e.id.to_string(),
                "task_name": "shop.tasks:send_receipt",
                "labels": {"priority": "5", "ratio": "0.5", "urgent": "False", "queue_name": "mail"},
                "labels_types": {"priority": 2, "ratio": 4, "urgent": 5, "queue_name": 3},
                "args": [42, "x"],
                "kwargs": {"copy": true},
            })
        );
        let delivery = TaskiqDelivery::redis("redis://127.0.0.1:6379/0").unwrap();
        assert_eq!(delivery.queue_for(&task), "mail");
    }

    #[test]
    fn only_task_name_is_required() {
        let (task, bytes) = task_message(&event(json!({"task_name": "t:f"}))).unwrap();
        assert!(task.args().is_empty());
        let message: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(message["args"], json!([]));
        assert_eq!(message["kwargs"], json!({}));
        assert_eq!(message["labels"], json!({}));
        let delivery = TaskiqDelivery::redis("redis://127.0.0.1:6379/0").unwrap();
        assert_eq!(delivery.queue_for(&task), DEFAULT_QUEUE);
    }

    #[test]
    fn payloads_that_are_not_tasks_are_refused_naming_what_is_allowed() {
        for (payload, words) in [
            (json!([1]), vec!["an array", "task_name"]),
            (json!({"args": []}), vec!["task_name is missing"]),
            (json!({"task_name": ""}), vec!["empty"]),
            (json!({"task_name": 3}), vec!["a number"]),
            (
                json!({"task_name": "t", "args": {}}),
                vec!["args", "an object"],
            ),
            (
                json!({"task_name": "t", "kwargs": []}),
                vec!["kwargs", "an array"],
            ),
            (
                json!({"task_name": "t", "labels": {"a": [1]}}),
                vec!["label \"a\"", "strings"],
            ),
            (
                json!({"task_name": "t", "queue": "x"}),
                vec!["\"queue\"", "allowed are task_name, args, kwargs, labels"],
            ),
        ] {
            let error = task_message(&event(payload.clone()))
                .unwrap_err()
                .to_string();
            assert!(error.contains("is not a taskiq task"), "{error}");
            for word in words {
                assert!(error.contains(word), "{payload}: {error}");
            }
        }
    }

    #[test]
    fn builder_writes_the_taskiq_topic_and_checks_before_writing() {
        let message = TaskiqTask::new("t:f")
            .with_arg(1)
            .with_kwarg("name", "Zoë")
            .with_label("priority", 3)
            .message()
            .unwrap();
        assert_eq!(message.topic_name(), TASKIQ_TOPIC);

        let error = TaskiqTask::new("t:f")
            .with_arg(f64::NAN)
            .message()
            .unwrap_err();
        assert!(matches!(error, Error::Validation { .. }), "{error:?}");
        assert!(error.to_string().contains("args[0]"), "{error}");

        let error = TaskiqTask::new("t:f")
            .with_label("nested", json!({"a": 1}))
            .message()
            .unwrap_err();
        assert!(error.to_string().contains("nested"), "{error}");

        let error = TaskiqTask::new(" ").message().unwrap_err();
        assert!(error.to_string().contains("task_name"), "{error}");
    }

    #[test]
    fn configuration_errors_name_the_value() {
        let error = TaskiqDelivery::redis("http://x").unwrap_err().to_string();
        assert!(error.contains("http://x"), "{error}");
        let error = TaskiqDelivery::redis("redis://u:hunter2@h:1/0")
            .unwrap()
            .with_queue_name("")
            .unwrap_err()
            .to_string();
        assert!(error.contains("empty"), "{error}");
        assert!(!error.contains("hunter2"), "{error}");
        assert_eq!(redact("redis://u:hunter2@h:1/0"), "redis://u:***@h:1/0");
        let error = TaskiqDelivery::redis("redis://127.0.0.1:6379/0")
            .unwrap()
            .with_exchange("taskiq")
            .unwrap_err()
            .to_string();
        assert!(error.contains("no exchange"), "{error}");
    }
}
