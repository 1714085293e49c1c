//! The shared conformance suite (`hare_outbox_testkit::conformance`) on MySQL / MariaDB, each
//! scenario in a fresh database.

use hare_outbox_core::migration::Migration;
use hare_outbox_core::{MigrationStream, OutboxTable};
use hare_outbox_mysql::MySqlBackend;
use hare_outbox_testkit::conformance::harness::{run_update, scalar, try_execute};
use hare_outbox_testkit::conformance::{Cell, Harness, Reshape};
use hare_outbox_testkit::mysql::TestDatabase;
use sqlx::pool::PoolConnection;
use sqlx::{AssertSqlSafe, MySql, MySqlConnection};

/// A database of its own; timestamps bound as `DATETIME(6)` in UTC, JSON as text.
struct My(TestDatabase);

impl Harness for My {
    type Backend = MySqlBackend;
    type Pooled = PoolConnection<MySql>;
    const WRITER_WAIT_LIMIT: std::time::Duration = std::time::Duration::from_millis(500);
    const NAME: &'static str = "mysql";

    async fn open() -> Self {
        My(TestDatabase::new(8).await)
    }

    fn backend(&self) -> MySqlBackend {
        MySqlBackend::new(self.0.pool.clone())
    }

    async fn acquire(&self) -> PoolConnection<MySql> {
        self.0.pool.acquire().await.expect("acquire")
    }

    /// Runs `sql` with its ISO 8601 UTC literals (`'2026-01-01T00:00:00.000000Z'`, which
    /// `DATETIME` refuses) written as MySQL datetime literals.
    async fn try_execute_on(conn: &mut MySqlConnection, sql: &str) -> Result<(), String> {
        try_execute(conn, &datetime_literals(sql)).await
    }

    async fn scalar(&self, sql: &str) -> i64 {
        scalar(&self.0.pool, sql).await
    }

    async fn update(&self, table: &OutboxTable, filter: &str, set: &[(&str, Cell)]) -> u64 {
        run_update(&self.0.pool, table, filter, set, |_, _| "?".to_owned())
            .await
            .rows_affected()
    }

    /// A row MariaDB stores but the reader refuses: a zero date in `created_at` (accepted when
    /// the session's `sql_mode` lacks `NO_ZERO_DATE`).
    async fn insert_unreadable(&self, table: &OutboxTable, key: &str) -> i64 {
        let mut conn = self.acquire().await;
        sqlx::query("SET SESSION sql_mode = ''")
            .execute(&mut *conn)
            .await
            .expect("sql_mode");
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {table} (id, topic, payload, headers, ordering_key, created_at) \
             VALUES (UNHEX(REPLACE(UUID(), '-', '')), 'unreadable', '{{}}', '{{}}', ?, '0000-00-00 00:00:00')"
        )))
        .bind(key)
        .execute(&mut *conn)
        .await
        .expect("insert a hand-written row");
        // Do not hand the loosened session back to the pool.
        conn.close_on_drop();
        1
    }

    async fn reshape_outbox(&self, reshape: Reshape) {
        self.execute(match reshape {
            Reshape::Loosen => {
                {
                    // Room for a UUID's text and a topic past 255 characters (still indexable).
                    "ALTER TABLE outbox MODIFY id VARBINARY(36) NULL, \
                 MODIFY topic VARCHAR(700) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL"
                }
            }
            Reshape::TightenNote => {
                "ALTER TABLE outbox MODIFY note TEXT NOT NULL, \
                 ADD CONSTRAINT note_short CHECK (char_length(note) < 5)"
            }
        })
        .await;
    }

    async fn refuse_bad_loans(&self) {
        self.execute(
            "CREATE TRIGGER zz_refuse AFTER INSERT ON loans FOR EACH ROW \
             BEGIN IF NEW.status = 'bad' THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused'; END IF; END",
        )
        .await;
    }

    async fn triggers(&self) -> i64 {
        self.scalar(
            "SELECT count(*) FROM information_schema.triggers WHERE trigger_schema = DATABASE()",
        )
        .await
    }

    fn unversioned_outbox_ddl() -> Option<&'static str> {
        None
    }

    fn with_migrations(
        backend: MySqlBackend,
        stream: MigrationStream,
        migrations: &'static [Migration],
    ) -> MySqlBackend {
        backend.with_migrations(stream, migrations)
    }

    async fn close(self) {
        self.0.drop_database().await;
    }
}

/// `sql` with each quoted ISO 8601 UTC time (`'YYYY-MM-DDTHH:MM:SS[.ffffff]Z'`) written as
/// `'YYYY-MM-DD HH:MM:SS[.ffffff]'`.
fn datetime_literals(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut rest = sql;
    while let Some(start) = rest.find('\'') {
        out.push_str(&rest[..=start]);
        rest = &rest[start + 1..];
        let Some(end) = rest.find('\'') else {
            break;
        };
        let literal = &rest[..end];
        let bytes = literal.as_bytes();
        let iso = literal.len() >= 20
            && bytes.get(10) == Some(&b'T')
            && literal.ends_with('Z')
            && literal[..10]
                .bytes()
                .all(|b| b.is_ascii_digit() || b == b'-');
        if iso {
            out.push_str(&literal[..literal.len() - 1].replacen('T', " ", 1));
        } else {
            out.push_str(literal);
        }
        out.push('\'');
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

// Every scenario but change capture's, then the capture scenarios that pass on MySQL.
hare_outbox_testkit::suite_except_capture!(My);
hare_outbox_testkit::suite!(@modules My;
    capture: [
        changes_mode_writes_the_journal_with_the_author,
        context_headers_and_tenant_from_the_row,
        envelope_of_insert_update_delete,
        every_touched_row_writes_an_event_by_default,
        events_of_one_row_are_delivered_in_commit_order_under_concurrent_writers,
        install_is_idempotent_replaces_reports_drift_and_uninstalls,
        install_refuses_bad_declarations_and_installs_nothing,
        payload_modes_keys_before_and_after_changes,
        skip_unchanged_writes_nothing_for_rows_that_kept_their_captured_values,
    ],
    capture_context: [
        context_payload_keys_are_merged_into_every_captured_envelope,
        context_payload_keys_of_the_envelopes_own_are_refused,
    ],
    capture_writes: [
        a_statement_failing_after_the_trigger_fired_leaves_no_event,
        another_outbox_shaped_table_is_refused,
        fields_limit_the_rows_and_updates_of_other_columns_write_nothing,
        multi_row_update_and_delete_by_hand_written_sql,
        rollback_to_savepoint_takes_that_parts_events,
        unordered_capture_writes_no_ordering_key,
    ],
);
