//! The shared conformance suite (`hare_outbox_testkit::conformance`) on SQLite, each scenario
//! on a fresh database file.

use hare_outbox_core::migration::Migration;
use hare_outbox_core::{MigrationStream, OutboxTable};
use hare_outbox_sqlite::SqliteBackend;
use hare_outbox_testkit::conformance::harness::{run_update, scalar, try_execute};
use hare_outbox_testkit::conformance::{Cell, Harness, Reshape};
use hare_outbox_testkit::sqlite::TestDb;
use sqlx::pool::PoolConnection;
use sqlx::{AssertSqlSafe, Sqlite, SqliteConnection};

/// A database file of its own; timestamps stored as the backend stores them (RFC 3339 text in
/// UTC with microseconds), JSON as its text.
struct Lite(TestDb);

impl Harness for Lite {
    type Backend = SqliteBackend;
    type Pooled = PoolConnection<Sqlite>;
    const WRITER_WAIT_LIMIT: std::time::Duration = hare_outbox_sqlite::BUSY_TIMEOUT;
    const NAME: &'static str = "sqlite";

    async fn open() -> Self {
        Lite(TestDb::new(4).await)
    }

    fn backend(&self) -> SqliteBackend {
        SqliteBackend::new(self.0.pool.clone())
    }

    async fn acquire(&self) -> PoolConnection<Sqlite> {
        self.0.pool.acquire().await.expect("acquire")
    }

    async fn try_execute_on(conn: &mut SqliteConnection, sql: &str) -> Result<(), String> {
        try_execute(conn, sql).await
    }

    async fn scalar(&self, sql: &str) -> i64 {
        scalar(&self.0.pool, sql).await
    }

    /// Times as the backend's fixed-width UTC text.
    async fn update(&self, table: &OutboxTable, filter: &str, set: &[(&str, Cell)]) -> u64 {
        let as_text = |cell: &Cell| match cell {
            Cell::Time(time) => {
                Cell::Text(time.map(|t| t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()))
            }
            other => other.clone(),
        };
        let set: Vec<(&str, Cell)> = set.iter().map(|(c, v)| (*c, as_text(v))).collect();
        run_update(&self.0.pool, table, filter, &set, |n, _| format!("?{n}"))
            .await
            .rows_affected()
    }

    /// A payload that is not JSON, and a creation time that is not a time.
    async fn insert_unreadable(&self, table: &OutboxTable, key: &str) -> i64 {
        for (payload, created) in [
            ("not json {", "2026-11-30T11:00:00.000000Z"),
            ("{}", "yesterday"),
        ] {
            sqlx::query(AssertSqlSafe(format!(
                "INSERT INTO {table} (id, topic, payload, ordering_key, created_at) \
                 VALUES (?1, 'unreadable', ?2, ?3, ?4)"
            )))
            .bind(uuid::Uuid::now_v7().to_string())
            .bind(payload)
            .bind(key)
            .bind(created)
            .execute(&self.0.pool)
            .await
            .expect("insert a hand-written row");
        }
        2
    }

    /// SQLite alters no column: the empty table is made again from its own DDL, edited, with
    /// its indexes, in one transaction on one connection. (A connection's cached schema is only
    /// checked against the file when a statement runs: a `CREATE INDEX` prepared on another
    /// pooled connection after the `DROP TABLE` could still see the dropped index.)
    async fn reshape_outbox(&self, reshape: Reshape) {
        let (from, to) = match reshape {
            Reshape::Loosen => ("id TEXT NOT NULL UNIQUE", "id TEXT UNIQUE"),
            Reshape::TightenNote => (
                "\"note\" TEXT",
                "\"note\" TEXT NOT NULL CONSTRAINT note_short CHECK (length(\"note\") < 5)",
            ),
        };
        let mut tx = self
            .0
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .expect("begin the reshape");
        let schema: Vec<(String, String)> = sqlx::query_as(
            "SELECT type, sql FROM sqlite_master WHERE tbl_name = 'outbox' AND sql IS NOT NULL \
             ORDER BY type = 'index'",
        )
        .fetch_all(&mut *tx)
        .await
        .expect("read the schema of outbox");
        assert_eq!(schema[0].0, "table", "{schema:?}");
        let table = schema[0].1.replacen(from, to, 1);
        assert_ne!(table, schema[0].1, "{from} is not in {table}");
        Self::execute_on(&mut tx, "DROP TABLE outbox").await;
        Self::execute_on(&mut tx, &table).await;
        for (_, index) in &schema[1..] {
            Self::execute_on(&mut tx, index).await;
        }
        tx.commit().await.expect("commit the reshape");
    }

    async fn refuse_bad_loans(&self) {
        self.execute(
            "CREATE TRIGGER zz_refuse AFTER INSERT ON loans WHEN NEW.status = 'bad'
             BEGIN SELECT RAISE(ABORT, 'refused'); END",
        )
        .await;
    }

    async fn triggers(&self) -> i64 {
        self.scalar("SELECT count(*) FROM sqlite_master WHERE type = 'trigger'")
            .await
    }

    fn unversioned_outbox_ddl() -> Option<&'static str> {
        Some(include_str!("fixtures/unversioned_outbox.sql"))
    }

    fn with_migrations(
        backend: SqliteBackend,
        stream: MigrationStream,
        migrations: &'static [Migration],
    ) -> SqliteBackend {
        backend.with_migrations(stream, migrations)
    }

    async fn close(self) {
        self.0.close().await;
    }
}

hare_outbox_testkit::suite!(Lite);
