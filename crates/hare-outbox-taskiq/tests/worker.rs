//! Task events written through the outbox, executed by a real Python taskiq worker
//! (`taskiq worker` with taskiq-redis' `ListQueueBroker`) reading the Redis the relay pushes to.
//!
//! The worker runs from the virtual environment `scripts/test.sh` prepares
//! (`$HOME/.cache/hare-outbox-py/venv`, or the interpreter named by
//! `HARE_OUTBOX_TEST_TASKIQ_PYTHON`); without it these tests fail, saying how to make one.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hare_outbox_core::{Outbox, OutboxMessage, OutboxTable, RelayConfig};
use hare_outbox_sqlite::SqliteBackend;
use hare_outbox_taskiq::{TASKIQ_TOPIC, TaskiqDelivery, TaskiqTask};
use hare_outbox_testkit::sqlite::TestDb;
use hare_outbox_testkit::wait_for;
use serde_json::{Value, json};
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(60);

/// The worker's tasks: each appends one JSON line (task id, arguments, labels) to the file named
/// by `HARE_TASKIQ_OUT`.
const WORKER_MODULE: &str = r#"
import json
import os

from taskiq import Context, TaskiqDepends

QUEUE = os.environ["HARE_TASKIQ_QUEUE"]
if os.environ["HARE_TASKIQ_BROKER"] == "redis":
    from taskiq_redis import ListQueueBroker

    broker = ListQueueBroker(os.environ["HARE_TASKIQ_URL"], queue_name=QUEUE)
else:
    from taskiq_aio_pika import AioPikaBroker, Exchange, Queue, QueueType

    broker = AioPikaBroker(
        os.environ["HARE_TASKIQ_URL"],
        exchange=Exchange(name=os.environ["HARE_TASKIQ_EXCHANGE"], auto_delete=True),
        task_queues=[Queue(name=QUEUE, type=QueueType.CLASSIC, auto_delete=True)],
        dead_letter_queue=Queue(
            name="hare-outbox-test.taskiq.dead_letter", type=QueueType.CLASSIC
        ),
    )


def _record(task, context, args, kwargs):
    line = json.dumps(
        {
            "task": task,
            "task_id": context.message.task_id,
            "args": args,
            "kwargs": kwargs,
            "labels": context.message.labels,
        },
        ensure_ascii=False,
    )
    with open(os.environ["HARE_TASKIQ_OUT"], "a", encoding="utf-8") as out:
        out.write(line + "\n")


@broker.task(task_name="shop.record_order")
async def record_order(
    order_id: int,
    customer: str,
    amount: str = "",
    tags: list = None,
    note: str = "",
    context: Context = TaskiqDepends(),
) -> None:
    _record(
        "shop.record_order",
        context,
        [order_id, customer],
        {"amount": amount, "tags": tags, "note": note},
    )


@broker.task(task_name="shop.sentinel")
async def sentinel(context: Context = TaskiqDepends()) -> None:
    _record("shop.sentinel", context, [], {})
"#;

#[cfg(feature = "rabbitmq")]
fn rabbitmq_url() -> String {
    std::env::var("HARE_OUTBOX_TEST_RABBITMQ_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
}

fn redis_url() -> String {
    std::env::var("HARE_OUTBOX_TEST_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379/0".to_owned())
}

/// The Python interpreter with taskiq and taskiq-redis, or a panic saying how to get one.
fn python() -> PathBuf {
    let python = match std::env::var_os("HARE_OUTBOX_TEST_TASKIQ_PYTHON") {
        Some(path) => PathBuf::from(path),
        None => {
            let home = std::env::var_os("HOME").expect("HOME is set");
            Path::new(&home).join(".cache/hare-outbox-py/venv/bin/python")
        }
    };
    let how = "scripts/test.sh prepares it; by hand: python3 -m venv ~/.cache/hare-outbox-py/venv && \
               ~/.cache/hare-outbox-py/venv/bin/pip install taskiq==0.13.0 taskiq-redis==1.2.4 \
               taskiq-aio-pika==0.6.1 (or set HARE_OUTBOX_TEST_TASKIQ_PYTHON to an interpreter \
               that has them)";
    let check = Command::new(&python)
        .args(["-c", "import taskiq, taskiq_redis, taskiq_aio_pika"])
        .output();
    match check {
        Ok(out) if out.status.success() => python,
        Ok(out) => panic!(
            "{} cannot import taskiq, taskiq_redis and taskiq_aio_pika ({}); {how}",
            python.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) => panic!(
            "no Python for the taskiq worker at {} ({e}); {how}",
            python.display()
        ),
    }
}

/// A running `taskiq worker`, stopped (SIGTERM, then SIGKILL) when dropped.
struct Worker {
    child: Child,
    log: PathBuf,
}

impl Worker {
    /// Starts `taskiq worker` with `env` naming the broker (`HARE_TASKIQ_BROKER`, `_URL`,
    /// `_QUEUE`, `_EXCHANGE`) and `out` the file the tasks append to.
    fn start(dir: &Path, env: &[(&str, String)], out: &Path) -> Worker {
        std::fs::write(dir.join("outbox_tasks.py"), WORKER_MODULE).unwrap();
        let log = dir.join("worker.log");
        let child = Command::new(python())
            .args(["-m", "taskiq", "worker", "--workers", "1", "--app-dir"])
            .arg(dir)
            .arg("outbox_tasks:broker")
            .current_dir(dir)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .env("HARE_TASKIQ_OUT", out)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::create(dir.join("worker.err")).unwrap())
            .spawn()
            .expect("starting the taskiq worker");
        Worker { child, log }
    }

    fn logs(&self) -> String {
        let dir = self.log.parent().unwrap();
        format!(
            "stdout:\n{}\nstderr:\n{}",
            std::fs::read_to_string(&self.log).unwrap_or_default(),
            std::fs::read_to_string(dir.join("worker.err")).unwrap_or_default()
        )
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // SIGTERM lets taskiq's process manager stop its worker process too.
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The lines the worker's tasks wrote so far.
fn executed(out: &Path) -> Vec<Value> {
    std::fs::read_to_string(out)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn config() -> RelayConfig {
    RelayConfig::default()
        .with_poll_interval(Duration::from_millis(20))
        .with_retry_base(Duration::from_millis(20))
        .with_retry_max(Duration::from_millis(200))
        // The RabbitMQ exchange exists once the worker started: tasks fail until then.
        .with_max_delivery_attempts(1000)
}

#[tokio::test]
async fn a_python_worker_executes_each_task_once_with_its_arguments() {
    let queue = format!("hare-outbox-test-{}", Uuid::new_v4().simple());
    let delivery = TaskiqDelivery::redis(&redis_url())
        .unwrap()
        .with_queue_name(&queue)
        .unwrap();
    let env = [
        ("HARE_TASKIQ_BROKER", "redis".to_owned()),
        ("HARE_TASKIQ_URL", redis_url()),
        ("HARE_TASKIQ_QUEUE", queue),
    ];
    exercise(delivery, &env).await;
}

#[cfg(feature = "rabbitmq")]
#[tokio::test]
async fn a_python_worker_on_rabbitmq_executes_each_task_once_with_its_arguments() {
    let name = format!("hare-outbox-test-{}", Uuid::new_v4().simple());
    let delivery = TaskiqDelivery::rabbitmq(&rabbitmq_url())
        .unwrap()
        .with_exchange(&name)
        .unwrap()
        .with_queue_name(&name)
        .unwrap();
    let env = [
        ("HARE_TASKIQ_BROKER", "rabbitmq".to_owned()),
        ("HARE_TASKIQ_URL", rabbitmq_url()),
        ("HARE_TASKIQ_QUEUE", name.clone()),
        ("HARE_TASKIQ_EXCHANGE", name),
    ];
    exercise(delivery, &env).await;
}

/// Writes a task (with an event of another topic and a broken task) through the outbox, runs a
/// relay with `delivery` and a worker started with `env`, and checks the task ran exactly once
/// with its arguments.
async fn exercise(delivery: TaskiqDelivery, env: &[(&str, String)]) {
    let db = TestDb::new(4).await;
    let outbox = Outbox::new(
        SqliteBackend::new(db.pool.clone()),
        OutboxTable::parse("outbox").unwrap(),
    );
    outbox.migrate().await.unwrap();
    let out = db.dir().join("executed.jsonl");

    // The task, an event of another topic and a broken task in one committed transaction; a
    // task in a rolled-back transaction.
    let mut tx = db.pool.begin().await.unwrap();
    let task = outbox
        .enqueue(
            &mut *tx,
            TaskiqTask::new("shop.record_order")
                .with_arg(42)
                .with_arg("Zoë Ünal")
                .with_kwarg("amount", "12.50")
                .with_kwarg("tags", ["gift", "express"])
                .with_kwarg("note", "«quoted» ✓")
                .with_label("priority", 5)
                .message()
                .unwrap()
                .ordering_key("order:42"),
        )
        .await
        .unwrap();
    let other = outbox
        .enqueue(
            &mut *tx,
            OutboxMessage::new("orders.created", json!({"order": 42})),
        )
        .await
        .unwrap();
    let broken = outbox
        .enqueue(
            &mut *tx,
            OutboxMessage::new(TASKIQ_TOPIC, json!({"task": "shop.record_order"})),
        )
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let mut tx = db.pool.begin().await.unwrap();
    outbox
        .enqueue(
            &mut *tx,
            TaskiqTask::new("shop.record_order")
                .with_arg(-1)
                .with_arg("rolled back")
                .message()
                .unwrap(),
        )
        .await
        .unwrap();
    tx.rollback().await.unwrap();

    let worker = Worker::start(db.dir(), env, &out);
    let relay = delivery.relay(outbox.clone(), config()).unwrap();
    relay.start().unwrap();

    let get = |id: Uuid| {
        let outbox = outbox.clone();
        async move { outbox.get(id).await.unwrap().unwrap() }
    };
    let deadline = Instant::now() + WAIT;
    while get(task.id).await.published_at.is_none() || executed(&out).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the worker did not run the task within {WAIT:?}; worker output:\n{}",
            worker.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // A sentinel enqueued after the task was published: the worker takes the queue in order, so
    // once the sentinel ran, every push of the task before it has run too.
    let mut tx = db.pool.begin().await.unwrap();
    let sentinel = outbox
        .enqueue(
            &mut *tx,
            TaskiqTask::new("shop.sentinel").message().unwrap(),
        )
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let lines = wait_for("the sentinel executed", WAIT, || async {
        let lines = executed(&out);
        lines
            .iter()
            .any(|l| l["task"] == "shop.sentinel")
            .then_some(lines)
    })
    .await;
    relay.stop().await.unwrap();

    let runs: Vec<&Value> = lines
        .iter()
        .filter(|l| l["task"] == "shop.record_order")
        .collect();
    assert_eq!(runs.len(), 1, "executed exactly once: {lines:?}");
    let run = runs[0];
    assert_eq!(run["task_id"], task.id.to_string(), "task id = event id");
    assert_eq!(run["args"], json!([42, "Zoë Ünal"]));
    assert_eq!(
        run["kwargs"],
        json!({"amount": "12.50", "tags": ["gift", "express"], "note": "«quoted» ✓"})
    );
    assert_eq!(
        run["labels"]["priority"], 5,
        "the label parsed back to an int"
    );
    let sentinel_run = lines.iter().find(|l| l["task"] == "shop.sentinel").unwrap();
    assert_eq!(sentinel_run["task_id"], sentinel.id.to_string());
    assert_eq!(
        lines.len(),
        2,
        "nothing else ran (rolled back, broken): {lines:?}"
    );

    // The broken task failed with a message naming what a task payload allows; the event of the
    // other topic was left to other relays.
    let broken = get(broken.id).await;
    assert!(broken.published_at.is_none());
    assert!(broken.attempts >= 1);
    assert!(broken.dead_lettered_at.is_none(), "retried, not dead yet");
    let error = broken.last_error.unwrap();
    assert!(error.contains("is not a taskiq task"), "{error}");
    assert!(error.contains("task_name"), "{error}");
    let other = get(other.id).await;
    assert_eq!(other.attempts, 0);
    assert!(other.published_at.is_none() && other.leased_by.is_none());
    drop(worker);
}

#[tokio::test]
async fn queue_name_label_and_batch_order_reach_redis() {
    let client = redis::Client::open(redis_url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let queue = format!("hare-outbox-test-{}", Uuid::new_v4().simple());
    let other_queue = format!("{queue}-mail");
    let delivery = TaskiqDelivery::redis(&redis_url())
        .unwrap()
        .with_queue_name(&queue)
        .unwrap();
    let events: Vec<hare_outbox_core::OutboxEvent> = (0..3)
        .map(|i| {
            let mut task = TaskiqTask::new("t:f").with_arg(i);
            if i == 1 {
                task = task.with_label("queue_name", other_queue.as_str());
            }
            hare_outbox_core::OutboxEvent::new(TASKIQ_TOPIC.to_owned(), task.to_payload())
        })
        .collect();
    let results =
        hare_outbox_core::Delivery::deliver_batch(&delivery, &events, 10, Duration::from_secs(5))
            .await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    // LPUSH puts the newest at the head; the worker's BRPOP takes from the tail: oldest first.
    let main: Vec<Vec<u8>> = redis::cmd("LRANGE")
        .arg(&queue)
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .unwrap();
    let ids: Vec<Value> = main
        .iter()
        .rev()
        .map(|m| serde_json::from_slice::<Value>(m).unwrap()["task_id"].clone())
        .collect();
    assert_eq!(
        ids,
        vec![
            json!(events[0].id.to_string()),
            json!(events[2].id.to_string())
        ]
    );
    let mail: Vec<Vec<u8>> = redis::cmd("LRANGE")
        .arg(&other_queue)
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(mail.len(), 1);
    let _: () = redis::cmd("DEL")
        .arg(&queue)
        .arg(&other_queue)
        .query_async(&mut conn)
        .await
        .unwrap();
}

#[tokio::test]
async fn unreachable_redis_fails_every_task_of_the_batch() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let delivery = TaskiqDelivery::redis(&format!("redis://127.0.0.1:{port}/0"))
        .unwrap()
        .with_timeout(Duration::from_secs(2));
    let events: Vec<hare_outbox_core::OutboxEvent> = (0..2)
        .map(|i| {
            hare_outbox_core::OutboxEvent::new(
                TASKIQ_TOPIC.to_owned(),
                TaskiqTask::new("t:f").with_arg(i).to_payload(),
            )
        })
        .collect();
    let results =
        hare_outbox_core::Delivery::deliver_batch(&delivery, &events, 10, Duration::from_secs(5))
            .await;
    assert_eq!(results.len(), 2);
    for result in results {
        let error = result.unwrap_err().chain();
        assert!(error.contains(&format!("127.0.0.1:{port}")), "{error}");
    }
}
