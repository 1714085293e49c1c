//! The shared conformance suite (`hare_outbox_testkit::conformance`) on PostgreSQL, each
//! scenario in a fresh schema.

use hare_outbox_core::migration::Migration;
use hare_outbox_core::{MigrationStream, OutboxTable};
use hare_outbox_postgres::PgBackend;
use hare_outbox_testkit::conformance::harness::{run_update, scalar, try_execute};
use hare_outbox_testkit::conformance::{Cell, Harness, Reshape};
use hare_outbox_testkit::pg::TestSchema;
use sqlx::pool::PoolConnection;
use sqlx::{AssertSqlSafe, PgConnection, Postgres};

/// A schema of its own; timestamps bound as `timestamptz`, JSON cast to `jsonb`.
struct Pg(TestSchema);

impl Harness for Pg {
    type Backend = PgBackend;
    type Pooled = PoolConnection<Postgres>;
    const WRITER_WAIT_LIMIT: std::time::Duration = std::time::Duration::from_millis(500);
    const NAME: &'static str = "postgres";

    async fn open() -> Self {
        Pg(TestSchema::new(8).await)
    }

    fn backend(&self) -> PgBackend {
        PgBackend::new(self.0.pool.clone())
    }

    async fn acquire(&self) -> PoolConnection<Postgres> {
        self.0.pool.acquire().await.expect("acquire")
    }

    async fn try_execute_on(conn: &mut PgConnection, sql: &str) -> Result<(), String> {
        try_execute(conn, sql).await
    }

    async fn scalar(&self, sql: &str) -> i64 {
        scalar(&self.0.pool, sql).await
    }

    async fn update(&self, table: &OutboxTable, filter: &str, set: &[(&str, Cell)]) -> u64 {
        let placeholder = |n, cell: &Cell| match cell {
            Cell::Json(_) => format!("${n}::jsonb"),
            _ => format!("${n}"),
        };
        run_update(&self.0.pool, table, filter, set, placeholder)
            .await
            .rows_affected()
    }

    /// Valid JSON that PostgreSQL stores but the reader refuses: nested past its depth limit.
    async fn insert_unreadable(&self, table: &OutboxTable, key: &str) -> i64 {
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {table} (id, topic, payload, ordering_key, created_at) \
             VALUES (gen_random_uuid(), 'unreadable', $1::jsonb, $2, now())"
        )))
        .bind(deep)
        .bind(key)
        .execute(&self.0.pool)
        .await
        .expect("insert a hand-written row");
        1
    }

    async fn reshape_outbox(&self, reshape: Reshape) {
        self.execute(match reshape {
            Reshape::Loosen => {
                "ALTER TABLE outbox ALTER COLUMN id DROP NOT NULL, ALTER COLUMN topic TYPE text"
            }
            Reshape::TightenNote => {
                "ALTER TABLE outbox ALTER COLUMN note SET NOT NULL, \
                 ADD CONSTRAINT note_short CHECK (length(note) < 5)"
            }
        })
        .await;
    }

    async fn refuse_bad_loans(&self) {
        self.execute(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN IF NEW.status = 'bad' THEN RAISE EXCEPTION 'refused'; END IF; RETURN NULL; END $$;
             CREATE TRIGGER zz_refuse AFTER INSERT ON loans FOR EACH ROW EXECUTE FUNCTION refuse();",
        )
        .await;
    }

    async fn triggers(&self) -> i64 {
        self.scalar(
            "SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = current_schema() AND NOT t.tgisinternal",
        )
        .await
    }

    fn unversioned_outbox_ddl() -> Option<&'static str> {
        Some(include_str!("fixtures/unversioned_outbox.sql"))
    }

    fn with_migrations(
        backend: PgBackend,
        stream: MigrationStream,
        migrations: &'static [Migration],
    ) -> PgBackend {
        backend.with_migrations(stream, migrations)
    }

    async fn close(self) {
        self.0.drop_schema().await;
    }
}

hare_outbox_testkit::suite!(Pg);
