//! A small ERP on SQLite: sales orders, production orders, purchase orders and purchase requests,
//! and the document changes the simulated users make. Each change is one transaction that sets
//! its author as the transaction's context, reads the document and writes the new values; the
//! change-capture triggers of the four tables write the `doc.updated` (or `doc.inserted`) event,
//! carrying the author, in the same transaction. No event is enqueued by hand.

use anyhow::Context as _;
use chrono::{Local, NaiveDate};
use hare_outbox::sqlite::SqliteBackend;
use hare_outbox::{ChangeCapture, ChangePayload, Outbox};
use serde_json::{Map, Value, json};
use sqlx::{AssertSqlSafe, Row as _, SqliteConnection, SqlitePool};

/// The topic template of the captures: `doc.inserted`, `doc.updated`, `doc.deleted`.
pub const TOPIC: &str = "doc.{operation}";

/// Bookkeeping columns the captures leave out: touching only them is no change worth an event.
const BOOKKEEPING: &[&str] = &["created_at", "updated_at"];

/// The change captures of the four ERP tables: label = the entity (`sales_order`), the journal
/// payload ([`ChangePayload::Changes`]), ordering key `<table>:<id>` (the journal's object), and
/// no event for an update that touched only bookkeeping columns (`skip_unchanged`).
pub fn captures() -> Vec<ChangeCapture> {
    ENTITIES
        .iter()
        .map(|entity| {
            ChangeCapture::new(entity.table)
                .with_label(entity.entity)
                .with_topic(TOPIC)
                .with_payload(ChangePayload::Changes)
                .with_exclude(BOOKKEEPING.iter().copied())
                .with_ordering_key(Some("{table}:{pk}"))
                .with_skip_unchanged(true)
        })
        .collect()
}

/// The ERP tables. Amounts are decimal text ("0.00"), times `YYYY-MM-DD HH:MM:SS`, dates
/// `YYYY-MM-DD`.
const SCHEMA: &str = r#"
CREATE TABLE sales_orders (
    id          INTEGER PRIMARY KEY,
    number      TEXT NOT NULL UNIQUE,
    customer    TEXT NOT NULL,
    status      TEXT NOT NULL,
    amount      TEXT NOT NULL,
    prepaid     TEXT NOT NULL DEFAULT '0.00',
    paid_at     TEXT,
    eta_date    TEXT,
    shipped_at  TEXT,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);
CREATE TABLE plan_prod_orders (
    id              INTEGER PRIMARY KEY,
    number          TEXT NOT NULL UNIQUE,
    sales_order_id  INTEGER REFERENCES sales_orders (id),
    product         TEXT NOT NULL,
    quantity        INTEGER NOT NULL,
    status          TEXT NOT NULL,
    launch_plan     TEXT,
    launched_at     TEXT,
    finished_at     TEXT,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL
);
CREATE TABLE wh_purchase_orders (
    id          INTEGER PRIMARY KEY,
    number      TEXT NOT NULL UNIQUE,
    supplier    TEXT NOT NULL,
    status      TEXT NOT NULL,
    sum         TEXT NOT NULL DEFAULT '0.00',
    sent_at     TEXT,
    closed_at   TEXT,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);
CREATE TABLE wh_purchase_requests (
    id                 INTEGER PRIMARY KEY,
    number             TEXT NOT NULL UNIQUE,
    item               TEXT NOT NULL,
    quantity           INTEGER NOT NULL,
    status             TEXT NOT NULL,
    purchase_order_id  INTEGER REFERENCES wh_purchase_orders (id),
    needed_by          TEXT,
    created_at         TEXT NOT NULL,
    updated_at         TEXT NOT NULL
);
"#;

/// The people whose changes the journal shows in its "who" column (sent as the `author` header).
const AUTHORS: &[&str] = &[
    "Администратор",
    "Иванова М. (продажи)",
    "Петров С. (производство)",
    "Соколова А. (склад)",
    "Robot: MRP",
];
const CUSTOMERS: &[&str] = &[
    "ООО «Ромашка»",
    "АО «Северсталь-Сервис»",
    "ИП Белов",
    "Acme Industrial Ltd",
    "ООО «ТехноСтрой»",
];
const PRODUCTS: &[&str] = &[
    "Насос НЦ-40",
    "Клапан ДУ-50",
    "Рама сварная Р-12",
    "Pump housing PH-7",
];
const SUPPLIERS: &[&str] = &[
    "ООО «МеталлТорг»",
    "АО «Подшипник»",
    "Global Fasteners GmbH",
];
const ITEMS: &[&str] = &[
    "Подшипник 6204",
    "Лист стальной 2 мм",
    "Краска RAL 7035",
    "Болт М10×40",
];
const PLANS: &[&str] = &["Цех 2, смена 1", "Цех 2, смена 2", "Цех 1, смена 1"];

#[derive(Clone, Copy)]
enum Kind {
    Text,
    Int,
}

type Row = Map<String, Value>;
type Changes = Vec<(&'static str, Value)>;

/// What the workload needs to know about one kind of document.
struct Entity {
    table: &'static str,
    entity: &'static str,
    prefix: &'static str,
    columns: &'static [(&'static str, Kind)],
    terminal: &'static [&'static str],
    weight: u32,
    next: fn(&Row, &mut Ctx) -> Changes,
    new: fn(&mut Ctx) -> Changes,
}

const ENTITIES: &[Entity] = &[
    Entity {
        table: "sales_orders",
        entity: "sales_order",
        prefix: "SO",
        columns: &[
            ("number", Kind::Text),
            ("customer", Kind::Text),
            ("status", Kind::Text),
            ("amount", Kind::Text),
            ("prepaid", Kind::Text),
            ("paid_at", Kind::Text),
            ("eta_date", Kind::Text),
            ("shipped_at", Kind::Text),
        ],
        terminal: &["closed"],
        weight: 40,
        next: sales_order_next,
        new: sales_order_new,
    },
    Entity {
        table: "plan_prod_orders",
        entity: "prod_order",
        prefix: "PP",
        columns: &[
            ("number", Kind::Text),
            ("sales_order_id", Kind::Int),
            ("product", Kind::Text),
            ("quantity", Kind::Int),
            ("status", Kind::Text),
            ("launch_plan", Kind::Text),
            ("launched_at", Kind::Text),
            ("finished_at", Kind::Text),
        ],
        terminal: &["finished"],
        weight: 25,
        next: prod_order_next,
        new: prod_order_new,
    },
    Entity {
        table: "wh_purchase_orders",
        entity: "purchase_order",
        prefix: "PO",
        columns: &[
            ("number", Kind::Text),
            ("supplier", Kind::Text),
            ("status", Kind::Text),
            ("sum", Kind::Text),
            ("sent_at", Kind::Text),
            ("closed_at", Kind::Text),
        ],
        terminal: &["closed"],
        weight: 15,
        next: purchase_order_next,
        new: purchase_order_new,
    },
    Entity {
        table: "wh_purchase_requests",
        entity: "purchase_request",
        prefix: "PR",
        columns: &[
            ("number", Kind::Text),
            ("item", Kind::Text),
            ("quantity", Kind::Int),
            ("status", Kind::Text),
            ("purchase_order_id", Kind::Int),
            ("needed_by", Kind::Text),
        ],
        terminal: &["received"],
        weight: 20,
        next: purchase_request_next,
        new: purchase_request_new,
    },
];

/// The clock, the dice and the links a change may need.
pub struct Ctx {
    rng: fastrand::Rng,
    now: String,
    today: NaiveDate,
    sales_order_id: Option<i64>,
    purchase_order_id: Option<i64>,
}

impl Ctx {
    fn new(rng: fastrand::Rng) -> Ctx {
        let now = Local::now();
        Ctx {
            rng,
            now: now.format("%Y-%m-%d %H:%M:%S").to_string(),
            today: now.date_naive(),
            sales_order_id: None,
            purchase_order_id: None,
        }
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.rng.usize(..items.len())]
    }

    fn date_in(&mut self, days: std::ops::Range<i64>) -> String {
        let date = self.today + chrono::Duration::days(self.rng.i64(days));
        date.format("%Y-%m-%d").to_string()
    }
}

/// `1234.50` from 123450 cents.
fn money(cents: i64) -> String {
    format!("{}.{:02}", cents / 100, cents % 100)
}

/// Cents from decimal text; anything unreadable counts as zero.
fn cents(text: &str) -> i64 {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, "0"));
    let fraction = format!("{fraction:0<2}");
    whole.parse::<i64>().unwrap_or(0) * 100 + fraction[..2].parse::<i64>().unwrap_or(0)
}

fn text<'a>(row: &'a Row, column: &str) -> &'a str {
    row.get(column).and_then(Value::as_str).unwrap_or("")
}

fn s(value: impl Into<String>) -> Value {
    Value::String(value.into())
}

fn sales_order_next(row: &Row, ctx: &mut Ctx) -> Changes {
    match text(row, "status") {
        "draft" => vec![("status", s("confirmed"))],
        "confirmed" if text(row, "prepaid") == "0.00" => {
            let prepaid = cents(text(row, "amount")) * 3 / 10;
            vec![("prepaid", s(money(prepaid))), ("paid_at", s(&ctx.now))]
        }
        "confirmed" => vec![
            ("status", s("in_production")),
            ("eta_date", s(ctx.date_in(3..21))),
        ],
        "in_production" => vec![("status", s("shipped")), ("shipped_at", s(&ctx.now))],
        "shipped" => vec![("status", s("closed")), ("prepaid", s(text(row, "amount")))],
        _ => Vec::new(),
    }
}

fn sales_order_new(ctx: &mut Ctx) -> Changes {
    vec![
        ("customer", s(ctx.pick(CUSTOMERS))),
        ("status", s("draft")),
        ("amount", s(money(ctx.rng.i64(5_000_000..90_000_000)))),
        ("prepaid", s("0.00")),
    ]
}

fn prod_order_next(row: &Row, ctx: &mut Ctx) -> Changes {
    match text(row, "status") {
        "planned" => vec![("status", s("confirmed"))],
        "confirmed" => vec![
            ("status", s("launched")),
            ("launched_at", s(&ctx.now)),
            ("launch_plan", s(ctx.pick(PLANS))),
        ],
        "launched" => vec![("status", s("finished")), ("finished_at", s(&ctx.now))],
        _ => Vec::new(),
    }
}

fn prod_order_new(ctx: &mut Ctx) -> Changes {
    vec![
        (
            "sales_order_id",
            ctx.sales_order_id.map_or(Value::Null, Value::from),
        ),
        ("product", s(ctx.pick(PRODUCTS))),
        ("quantity", Value::from(ctx.rng.i64(1..50))),
        ("status", s("planned")),
    ]
}

fn purchase_order_next(row: &Row, ctx: &mut Ctx) -> Changes {
    match text(row, "status") {
        "draft" if text(row, "sum") == "0.00" => {
            vec![("sum", s(money(ctx.rng.i64(1_000_000..30_000_000))))]
        }
        "draft" => vec![("status", s("sent")), ("sent_at", s(&ctx.now))],
        "sent" => vec![("status", s("closed")), ("closed_at", s(&ctx.now))],
        _ => Vec::new(),
    }
}

fn purchase_order_new(ctx: &mut Ctx) -> Changes {
    vec![
        ("supplier", s(ctx.pick(SUPPLIERS))),
        ("status", s("draft")),
        ("sum", s("0.00")),
    ]
}

fn purchase_request_next(row: &Row, ctx: &mut Ctx) -> Changes {
    let linked = row.get("purchase_order_id").is_some_and(|v| !v.is_null());
    match (text(row, "status"), ctx.purchase_order_id) {
        ("draft", Some(po)) if !linked => vec![("purchase_order_id", Value::from(po))],
        ("draft", _) => vec![("status", s("sent"))],
        ("sent", _) => vec![("status", s("ordered"))],
        ("ordered", _) => vec![("status", s("received"))],
        _ => Vec::new(),
    }
}

fn purchase_request_new(ctx: &mut Ctx) -> Changes {
    vec![
        ("item", s(ctx.pick(ITEMS))),
        ("quantity", Value::from(ctx.rng.i64(1..500))),
        ("status", s("draft")),
        ("needed_by", s(ctx.date_in(5..30))),
    ]
}

fn bind(
    query: sqlx::query::Query<'static, sqlx::Sqlite, sqlx::sqlite::SqliteArguments>,
    value: &Value,
) -> sqlx::query::Query<'static, sqlx::Sqlite, sqlx::sqlite::SqliteArguments> {
    match value {
        Value::Null => query.bind(None::<String>),
        Value::Bool(b) => query.bind(i64::from(*b)),
        Value::Number(n) => match n.as_i64() {
            Some(i) => query.bind(i),
            None => query.bind(n.as_f64().unwrap_or_default()),
        },
        Value::String(text) => query.bind(text.clone()),
        other => query.bind(other.to_string()),
    }
}

/// Creates the ERP tables and a first set of documents (no events: the journal starts with the
/// first change).
///
/// # Errors
/// When SQLite refuses a statement.
pub async fn create(pool: &SqlitePool, rng: &mut fastrand::Rng) -> anyhow::Result<()> {
    sqlx::raw_sql(SCHEMA)
        .execute(pool)
        .await
        .context("creating the ERP tables")?;
    let mut tx = pool.begin().await?;
    let mut ctx = Ctx::new(rng.fork());
    for (entity, count) in ENTITIES.iter().zip([10, 6, 4, 8]) {
        for _ in 0..count {
            insert(&mut tx, entity, &mut ctx).await?;
        }
    }
    tx.commit().await?;
    Ok(())
}

async fn random_id(
    conn: &mut SqliteConnection,
    table: &str,
    open_only: &[&str],
) -> anyhow::Result<Option<i64>> {
    let filter = if open_only.is_empty() {
        String::new()
    } else {
        let list: Vec<String> = open_only.iter().map(|s| format!("'{s}'")).collect();
        format!("WHERE status NOT IN ({})", list.join(", "))
    };
    let sql = format!("SELECT id FROM {table} {filter} ORDER BY random() LIMIT 1");
    Ok(sqlx::query_scalar(AssertSqlSafe(sql))
        .fetch_optional(&mut *conn)
        .await?)
}

async fn insert(
    conn: &mut SqliteConnection,
    entity: &Entity,
    ctx: &mut Ctx,
) -> anyhow::Result<i64> {
    if entity.table == "plan_prod_orders" {
        ctx.sales_order_id = random_id(conn, "sales_orders", &[]).await?;
    }
    let id: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT COALESCE(MAX(id), 0) + 1 FROM {}",
        entity.table
    )))
    .fetch_one(&mut *conn)
    .await?;
    let mut values = (entity.new)(ctx);
    values.push(("id", Value::from(id)));
    values.push(("number", s(format!("{}-{id:05}", entity.prefix))));
    values.push(("created_at", s(&ctx.now)));
    values.push(("updated_at", s(&ctx.now)));
    let names: Vec<&str> = values.iter().map(|(name, _)| *name).collect();
    let marks = vec!["?"; values.len()].join(", ");
    let sql = format!(
        "INSERT INTO {} ({}) VALUES ({marks})",
        entity.table,
        names.join(", ")
    );
    let mut query = sqlx::query(AssertSqlSafe(sql));
    for (_, value) in &values {
        query = bind(query, value);
    }
    query
        .execute(&mut *conn)
        .await
        .with_context(|| format!("inserting into {}", entity.table))?;
    Ok(id)
}

async fn read(conn: &mut SqliteConnection, entity: &Entity, id: i64) -> anyhow::Result<Row> {
    let names: Vec<&str> = entity.columns.iter().map(|(name, _)| *name).collect();
    let sql = format!(
        "SELECT {} FROM {} WHERE id = ?",
        names.join(", "),
        entity.table
    );
    let row = sqlx::query(AssertSqlSafe(sql))
        .bind(id)
        .fetch_one(&mut *conn)
        .await
        .with_context(|| format!("reading {} #{id}", entity.table))?;
    let mut out = Row::new();
    for (i, (name, kind)) in entity.columns.iter().enumerate() {
        let value = match kind {
            Kind::Text => row
                .try_get::<Option<String>, _>(i)?
                .map_or(Value::Null, Value::String),
            Kind::Int => row
                .try_get::<Option<i64>, _>(i)?
                .map_or(Value::Null, Value::from),
        };
        out.insert((*name).to_owned(), value);
    }
    Ok(out)
}

/// Makes one document change in one transaction: sets a random author as the transaction's
/// context, picks an open document (or opens a new one), reads it and writes the next step of its
/// life. The capture triggers write the events; returns their topics (`doc.updated`, and
/// `doc.inserted` when a document was opened), for the wake-up after commit.
///
/// # Errors
/// When SQLite refuses a statement; nothing of the change is kept then.
pub async fn change_one(
    outbox: &Outbox<SqliteBackend>,
    rng: &mut fastrand::Rng,
) -> anyhow::Result<Vec<String>> {
    let mut ctx = Ctx::new(rng.fork());
    let entity = pick_entity(&mut ctx);
    // The backend begins with BEGIN IMMEDIATE: the write lock up front, so the read and the write
    // see the same row even while the relay marks events.
    let mut tx = outbox.begin().await?;
    // First, so every event the triggers write in this transaction carries the author.
    let author = ctx.pick(AUTHORS);
    outbox
        .set_context(&mut tx, json!({ "author": author }))
        .await?;
    let mut topics = vec!["doc.updated".to_owned()];
    if entity.table == "wh_purchase_requests" {
        ctx.purchase_order_id = match random_id(&mut tx, "wh_purchase_orders", &["closed"]).await? {
            Some(id) => Some(id),
            None => random_id(&mut tx, "wh_purchase_orders", &[]).await?,
        };
    }
    let id = match random_id(&mut tx, entity.table, entity.terminal).await? {
        Some(id) => id,
        // Every document of this kind reached its last step: a new one arrives.
        None => {
            topics.insert(0, "doc.inserted".to_owned());
            insert(&mut tx, entity, &mut ctx).await?
        }
    };
    let row = read(&mut tx, entity, id).await?;
    let changes: Changes = (entity.next)(&row, &mut ctx)
        .into_iter()
        .filter(|(name, value)| row.get(*name) != Some(value))
        .collect();
    anyhow::ensure!(
        !changes.is_empty(),
        "{} #{id} in status {:?} has no next step",
        entity.table,
        text(&row, "status")
    );

    let sets: Vec<String> = changes
        .iter()
        .map(|(name, _)| format!("{name} = ?"))
        .collect();
    let sql = format!(
        "UPDATE {} SET {}, updated_at = ? WHERE id = ?",
        entity.table,
        sets.join(", ")
    );
    let mut query = sqlx::query(AssertSqlSafe(sql));
    for (_, value) in &changes {
        query = bind(query, value);
    }
    query
        .bind(ctx.now.clone())
        .bind(id)
        .execute(&mut *tx)
        .await
        .with_context(|| format!("updating {} #{id}", entity.table))?;
    tx.commit().await?;
    Ok(topics)
}

fn pick_entity(ctx: &mut Ctx) -> &'static Entity {
    let total: u32 = ENTITIES.iter().map(|e| e.weight).sum();
    let mut roll = ctx.rng.u32(..total);
    for entity in ENTITIES {
        if roll < entity.weight {
            return entity;
        }
        roll -= entity.weight;
    }
    &ENTITIES[0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn money_round_trips() {
        assert_eq!(money(0), "0.00");
        assert_eq!(money(123_450), "1234.50");
        assert_eq!(cents("1234.50"), 123_450);
        assert_eq!(cents("7.5"), 750);
        assert_eq!(cents("12"), 1200);
    }

    #[test]
    fn every_document_walks_to_its_last_step() {
        let mut ctx = Ctx::new(fastrand::Rng::with_seed(7));
        ctx.purchase_order_id = Some(3);
        for entity in ENTITIES {
            let mut row: Row = entity
                .columns
                .iter()
                .map(|(name, _)| ((*name).to_owned(), Value::Null))
                .collect();
            for (name, value) in (entity.new)(&mut ctx) {
                row.insert(name.to_owned(), value);
            }
            let mut steps = 0;
            loop {
                let changes = (entity.next)(&row, &mut ctx);
                if changes.is_empty() {
                    break;
                }
                for (name, value) in changes {
                    assert!(
                        row.contains_key(name),
                        "{}: unknown column {name}",
                        entity.table
                    );
                    row.insert(name.to_owned(), value);
                }
                steps += 1;
                assert!(steps < 10, "{} never ends", entity.table);
            }
            assert!(steps >= 3, "{}: {steps} steps", entity.table);
            assert!(
                entity.terminal.contains(&text(&row, "status")),
                "{}",
                entity.table
            );
        }
    }
}
