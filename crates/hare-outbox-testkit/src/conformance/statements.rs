//! The SQL statements sqlx runs for one piece of work, for scenarios that count INSERTs and
//! SELECTs.
//!
//! sqlx logs every statement (target `sqlx::query`, field `db.statement`, or `summary` alone for
//! a one-line statement) inside the caller's span — on SQLite from its worker thread. One global
//! subscriber keeps the statements logged inside a `count_statements` span, by the span's key,
//! so a thread-local subscriber's blind spot does not matter.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, Once};

use tracing::Instrument;
use tracing::span::{Attributes, Id};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

static INSTALL: Once = Once::new();
static NEXT_KEY: AtomicU64 = AtomicU64::new(1);
static LOGS: LazyLock<Mutex<HashMap<u64, Vec<String>>>> = LazyLock::new(Mutex::default);

/// The key of a `count_statements` span, kept in its extensions.
struct Key(u64);

struct Statements;

impl<S> tracing_subscriber::Layer<S> for Statements
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if attrs.metadata().name() != "count_statements" {
            return;
        }
        struct Visit(Option<u64>);
        impl tracing::field::Visit for Visit {
            fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
                if field.name() == "key" {
                    self.0 = Some(value);
                }
            }
            fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
        }
        let mut key = Visit(None);
        attrs.record(&mut key);
        if let (Some(key), Some(span)) = (key.0, ctx.span(id)) {
            span.extensions_mut().insert(Key(key));
        }
    }

    fn on_event(&self, event: &tracing::Event<'_>, ctx: Context<'_, S>) {
        if event.metadata().target() != "sqlx::query" {
            return;
        }
        let Some(key) = ctx.event_scope(event).and_then(|scope| {
            scope
                .from_root()
                .find_map(|span| span.extensions().get::<Key>().map(|k| k.0))
        }) else {
            return;
        };
        #[derive(Default)]
        struct Visit {
            statement: Option<String>,
            summary: Option<String>,
        }
        impl tracing::field::Visit for Visit {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.record_str(field, &format!("{value:?}"));
            }
            fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                match field.name() {
                    "db.statement" => self.statement = Some(value.to_owned()),
                    "summary" => self.summary = Some(value.to_owned()),
                    _ => {}
                }
            }
        }
        let mut visit = Visit::default();
        event.record(&mut visit);
        let sql = visit
            .statement
            .filter(|s| !s.trim().is_empty())
            .or(visit.summary);
        if let Some(sql) = sql {
            LOGS.lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(key)
                .or_default()
                .push(sql);
        }
    }
}

/// Runs `work` and returns its output with the SQL of every statement sqlx ran for it, in order.
///
/// # Panics
/// When another global tracing subscriber was installed in this test binary first.
pub async fn with_statements<F: Future>(work: F) -> (F::Output, Vec<String>) {
    INSTALL.call_once(|| {
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(Statements))
            .expect("the only global subscriber of this test binary");
    });
    let key = NEXT_KEY.fetch_add(1, Ordering::Relaxed);
    let output = work
        .instrument(tracing::info_span!("count_statements", key))
        .await;
    let statements = LOGS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&key)
        .unwrap_or_default();
    (output, statements)
}

/// The statement without its `--` comment lines and surrounding blanks.
pub fn without_comments(sql: &str) -> String {
    sql.lines()
        .filter(|line| !line.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .to_owned()
}

/// How many of `statements` are INSERTs and how many SELECTs.
pub fn kinds(statements: &[String]) -> (usize, usize) {
    let starting = |word: &str| {
        statements
            .iter()
            .filter(|s| without_comments(s).starts_with(word))
            .count()
    };
    (starting("INSERT INTO"), starting("SELECT"))
}
