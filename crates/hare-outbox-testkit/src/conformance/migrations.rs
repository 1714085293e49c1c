//! Versioned schema migrations on any backend: the record of applied versions, adopting a table
//! made before versions were recorded, later versions on a table with rows, concurrent migrates,
//! a failing version, and a record that disagrees with the build.
//!
//! Versions after the backend's own are test versions in SQL both backends accept, with `{table}`
//! (the quoted table) as their only placeholder: [`V2`] adds a column — `ADD COLUMN` fails when
//! run twice, so a version applied twice shows — and [`V3`] fills it from each row's topic.

// A suite fails its test by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use chrono::{Duration, Utc};
use hare_outbox_core::migration::{MIGRATIONS_TABLE, Migration};
use hare_outbox_core::{Backend, Error, Inbox, MigrationStream, Outbox, OutboxEvent};

use super::harness::{EventState, Harness, enqueue, message, now, plain, put, stored};

/// A test version 2: adds the column `v2_note`.
pub const V2: Migration = Migration::new(
    2,
    "add_note",
    "ALTER TABLE {table} ADD COLUMN v2_note TEXT;",
);

/// A test version 3: sets `v2_note` of every row to its topic.
pub const V3: Migration = Migration::new(3, "fill_note", "UPDATE {table} SET v2_note = topic;");

/// The backend's own outbox versions followed by `after` (renumbered after them).
fn with_versions<H: Harness>(h: &H, after: &[Migration]) -> H::Backend {
    let backend = h.backend();
    let mut list = backend.migrations(MigrationStream::Outbox).to_vec();
    for m in after {
        let version = i64::try_from(list.len()).unwrap() + 1;
        list.push(Migration::new(version, m.name, m.template));
    }
    H::with_migrations(
        backend,
        MigrationStream::Outbox,
        Box::leak(list.into_boxed_slice()),
    )
}

/// How many versions the record holds for `table_name`.
async fn recorded<H: Harness>(h: &H, table_name: &str) -> i64 {
    h.scalar(&format!(
        "SELECT count(*) FROM {MIGRATIONS_TABLE} WHERE table_name = '{table_name}'"
    ))
    .await
}

/// The message of an [`Error::Migration`].
fn migration_error(result: hare_outbox_core::Result<impl std::fmt::Debug>) -> String {
    match result {
        Err(Error::Migration(message)) => message,
        other => panic!("expected a migration error, got {other:?}"),
    }
}

/// `sql` without its comment lines and blank lines.
fn code(sql: &str) -> String {
    sql.lines()
        .filter(|l| !l.trim_start().starts_with("--") && !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Before `migrate` every version is pending and nothing is created by asking; `migrate` records
/// each version once with the time it ran; a second `migrate` runs nothing; the inbox has a stream
/// of its own in the same record; the record's own name is refused as a table name.
pub async fn migrate_records_each_version_once_and_status_reads_them<H: Harness>(h: &H) {
    let outbox = Outbox::new(h.backend(), plain("outbox"));
    let versions = outbox.backend().migrations(MigrationStream::Outbox).len();
    assert!(versions >= 1);
    let before = outbox.migration_status().await.unwrap();
    assert_eq!(before.len(), versions);
    assert!(before.iter().all(|s| s.is_pending()), "{before:?}");
    assert_eq!(before[0].version, 1);
    assert_eq!(before[0].name, "create_outbox");
    assert_eq!(outbox.schema_sql_after(0), outbox.schema_sql());
    // Asking created nothing: the second ask still finds no record.
    assert_eq!(outbox.migration_status().await.unwrap(), before);

    let start = now() - Duration::minutes(1);
    outbox.migrate().await.unwrap();
    let end = Utc::now() + Duration::minutes(1);
    let after = outbox.migration_status().await.unwrap();
    assert_eq!(after.len(), versions);
    for status in &after {
        let at = status.applied_at.expect("applied");
        assert!(start <= at && at <= end, "{status:?}");
    }
    assert_eq!(
        recorded(h, "outbox").await,
        i64::try_from(versions).unwrap()
    );
    let newest = after.last().unwrap().version;
    assert!(
        !outbox.schema_sql_after(newest).contains("CREATE TABLE"),
        "{}",
        outbox.schema_sql_after(newest)
    );

    let event = enqueue(h, &outbox, message("t", None, 1)).await;
    outbox.migrate().await.unwrap();
    assert_eq!(
        outbox.migration_status().await.unwrap(),
        after,
        "nothing ran again"
    );
    assert_eq!(stored(&outbox, &event).await, event);

    let inbox = Inbox::new(h.backend(), "hare_outbox_inbox").unwrap();
    assert!(inbox.migration_status().await.unwrap()[0].is_pending());
    inbox.migrate().await.unwrap();
    inbox.migrate().await.unwrap();
    let inbox_status = inbox.migration_status().await.unwrap();
    assert_eq!(inbox_status[0].name, "create_inbox");
    assert!(inbox_status.iter().all(|s| !s.is_pending()));
    assert_eq!(
        recorded(h, "hare_outbox_inbox").await,
        i64::try_from(inbox_status.len()).unwrap()
    );
    assert_eq!(outbox.migration_status().await.unwrap(), after);

    let reserved = Outbox::new(h.backend(), plain(MIGRATIONS_TABLE));
    let e = reserved.migrate().await.unwrap_err();
    assert!(
        matches!(&e, Error::Configuration(m) if m.contains("reserved")),
        "{e}"
    );
}

/// A table made by the `migrate` of before versions (its exact DDL, no record), holding events in
/// several states, is adopted as version 1 — recorded, its rows untouched — and the later
/// versions then run over its rows; enqueue and reads work as before.
pub async fn a_table_made_before_versions_is_adopted_and_later_versions_apply<H: Harness>(h: &H) {
    let Some(ddl) = H::unversioned_outbox_ddl() else {
        return;
    };
    let table = plain("outbox");
    // Version 1 is that DDL, statement for statement.
    let v1 = code(h.backend().migrations(MigrationStream::Outbox)[0].template);
    let schema = code(&Outbox::new(h.backend(), table.clone()).schema_sql());
    assert!(
        schema.contains(&code(ddl)),
        "version 1 must be the DDL of before versions:\n{schema}"
    );
    assert!(!v1.is_empty());

    h.execute(ddl).await;
    let old = Outbox::new(h.backend(), table.clone());
    let pending = enqueue(h, &old, message("a.pending", Some("k"), 1)).await;
    let dead = enqueue(h, &old, message("a.dead", Some("k"), 2)).await;
    put(h, &table, dead.sequence, EventState::Dead(now())).await;
    let published = enqueue(h, &old, message("a.published", None, 3)).await;
    put(h, &table, published.sequence, EventState::Published(now())).await;
    let before: Vec<OutboxEvent> = vec![
        stored(&old, &pending).await,
        stored(&old, &dead).await,
        stored(&old, &published).await,
    ];

    let outbox = Outbox::new(with_versions(h, &[V2, V3]), table.clone());
    let status = outbox.migration_status().await.unwrap();
    assert!(status.iter().all(|s| s.is_pending()), "{status:?}");
    outbox.migrate().await.unwrap();
    let status = outbox.migration_status().await.unwrap();
    assert_eq!(
        (status[0].version, status[0].name.as_str()),
        (1, "create_outbox")
    );
    assert!(status.iter().all(|s| !s.is_pending()), "{status:?}");
    assert_eq!(
        recorded(h, "outbox").await,
        i64::try_from(status.len()).unwrap()
    );
    for event in &before {
        assert_eq!(
            &stored(&outbox, event).await,
            event,
            "the adopted rows are intact"
        );
    }
    assert_eq!(h.scalar("SELECT count(*) FROM outbox").await, 3);
    assert_eq!(
        h.scalar("SELECT count(*) FROM outbox WHERE v2_note = topic")
            .await,
        3,
        "the later versions ran over the adopted rows"
    );
    let after = enqueue(h, &outbox, message("a.after", Some("k"), 4)).await;
    assert!(after.sequence > published.sequence);
    outbox.migrate().await.unwrap();
}

/// Four migrates of one table at once, and two of another table of the same schema: every call
/// succeeds and every version is applied and recorded once (version 2's `ADD COLUMN` would fail
/// a second time).
pub async fn concurrent_migrates_apply_each_version_once<H: Harness>(h: &H) {
    let backend = with_versions(h, &[V2, V3]);
    let mut tasks = Vec::new();
    for name in ["outbox", "outbox", "outbox", "outbox", "other", "other"] {
        let outbox = Outbox::new(backend.clone(), plain(name));
        tasks.push(tokio::spawn(async move { outbox.migrate().await }));
    }
    for task in tasks {
        task.await.expect("the task ran").expect("migrate");
    }
    let versions = i64::try_from(backend.migrations(MigrationStream::Outbox).len()).unwrap();
    assert_eq!(recorded(h, "outbox").await, versions);
    assert_eq!(recorded(h, "other").await, versions);
    assert_eq!(h.scalar("SELECT count(v2_note) FROM outbox").await, 0);
    assert_eq!(h.scalar("SELECT count(v2_note) FROM other").await, 0);
}

/// A version that fails rolls back with its record; the versions before it stay applied and the
/// rows are as they were. Once fixed, the next `migrate` applies it.
pub async fn a_failing_version_leaves_the_versions_before_it_applied<H: Harness>(h: &H) {
    let table = plain("outbox");
    let outbox = Outbox::new(with_versions(h, &[V2]), table.clone());
    outbox.migrate().await.unwrap();
    enqueue(h, &outbox, message("t", None, 1)).await;
    enqueue(h, &outbox, message("t", None, 2)).await;

    let broken = Migration::new(
        3,
        "broken",
        "UPDATE {table} SET v2_note = 'v3';\nSELECT no_such_column FROM {table};",
    );
    let failing = Outbox::new(with_versions(h, &[V2, broken]), table.clone());
    let e = failing.migrate().await.unwrap_err();
    assert!(matches!(e, Error::Database { .. }), "{e}");
    let status = failing.migration_status().await.unwrap();
    let (applied, pending): (Vec<_>, Vec<_>) = status.iter().partition(|s| !s.is_pending());
    assert_eq!(pending.len(), 1, "{status:?}");
    assert_eq!(pending[0].name, "broken");
    assert_eq!(applied.len(), status.len() - 1);
    assert_eq!(
        h.scalar("SELECT count(*) FROM outbox WHERE v2_note = 'v3'")
            .await,
        0,
        "the failed version's update was rolled back"
    );

    let fixed = Outbox::new(with_versions(h, &[V2, V3]), table);
    fixed.migrate().await.unwrap();
    assert!(
        fixed
            .migration_status()
            .await
            .unwrap()
            .iter()
            .all(|s| !s.is_pending())
    );
    assert_eq!(
        h.scalar("SELECT count(*) FROM outbox WHERE v2_note = 't'")
            .await,
        2
    );
}

/// A recorded checksum edited by hand, and a recorded version this build does not know, make
/// `migrate` and `migration_status` fail with an error naming the version and the table, and
/// change nothing; restoring the record lets `migrate` run again.
pub async fn an_edited_record_is_refused_naming_the_version<H: Harness>(h: &H) {
    let outbox = Outbox::new(h.backend(), plain("outbox"));
    outbox.migrate().await.unwrap();
    let event = enqueue(h, &outbox, message("t", None, 1)).await;
    let checksum = outbox.backend().migrations(MigrationStream::Outbox)[0].checksum();

    h.execute(&format!(
        "UPDATE {MIGRATIONS_TABLE} SET checksum = 'edited' WHERE table_name = 'outbox' AND version = 1"
    ))
    .await;
    let e = migration_error(outbox.migrate().await);
    assert!(
        e.contains("outbox table outbox: migration version 1 (\"create_outbox\")")
            && e.contains("checksum edited")
            && e.contains(&checksum)
            && e.contains("0001_create_outbox.sql"),
        "{e}"
    );
    assert_eq!(migration_error(outbox.migration_status().await), e);
    let extended = Outbox::new(with_versions(h, &[V2]), plain("outbox"));
    assert!(matches!(extended.migrate().await, Err(Error::Migration(_))));
    assert_eq!(
        stored(&outbox, &event).await,
        event,
        "nothing was changed, and no later version ran"
    );

    h.execute(&format!(
        "UPDATE {MIGRATIONS_TABLE} SET checksum = '{checksum}' WHERE table_name = 'outbox' AND version = 1"
    ))
    .await;
    outbox.migrate().await.unwrap();

    h.execute(&format!(
        "INSERT INTO {MIGRATIONS_TABLE} (table_name, version, name, checksum, applied_at) \
         VALUES ('outbox', 99, 'from_a_newer_build', 'x', '2026-01-01T00:00:00.000000Z')"
    ))
    .await;
    let e = migration_error(outbox.migrate().await);
    assert!(
        e.contains("version 99 (\"from_a_newer_build\")") && e.contains("newer hare-outbox"),
        "{e}"
    );
    let versions = outbox.backend().migrations(MigrationStream::Outbox).len();
    assert_eq!(
        recorded(h, "outbox").await,
        i64::try_from(versions).unwrap() + 1
    );
}
