//! A SQLite database file of its own per test.

use std::path::{Path, PathBuf};
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};

/// A fresh database file `db.sqlite` in a directory of its own under the system temp dir
/// (`hare-outbox-test-<random>`), removed with everything in it when the value is dropped.
///
/// Connections open it as `hare_outbox_sqlite::connect` does: WAL journal, busy timeout 5 s,
/// foreign keys on.
pub struct TestDb {
    /// A pool on the file.
    pub pool: SqlitePool,
    /// The database file.
    pub path: PathBuf,
    dir: PathBuf,
}

impl TestDb {
    /// Creates the directory and the database file, and a pool of `max_connections` on it.
    ///
    /// # Panics
    /// When the directory or the file cannot be created.
    pub async fn new(max_connections: u32) -> TestDb {
        let dir = std::env::temp_dir().join(format!(
            "hare-outbox-test-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("creating {} failed: {e}", dir.display()));
        let path = dir.join("db.sqlite");
        let pool = pool_on(&path, max_connections).await;
        TestDb { pool, path, dir }
    }

    /// The URL of the file, `sqlite://<path>` (for `hare_outbox_sqlite::connect` and child
    /// processes).
    pub fn url(&self) -> String {
        format!("sqlite://{}", self.path.display())
    }

    /// The directory that holds the file; other files put there (an attached database) are removed
    /// with it.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Another pool of `max_connections` on the same file, as a second process would open it.
    ///
    /// # Panics
    /// When the file cannot be opened.
    pub async fn connect(&self, max_connections: u32) -> SqlitePool {
        pool_on(&self.path, max_connections).await
    }

    /// The options every pool of the test database uses, for building one of your own (with
    /// `after_connect`, say).
    pub fn connect_options(&self) -> SqliteConnectOptions {
        options(&self.path)
    }

    /// Closes the pool and removes the directory.
    pub async fn close(self) {
        self.pool.close().await;
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn options(path: &Path) -> SqliteConnectOptions {
    SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(5))
        .foreign_keys(true)
}

async fn pool_on(path: &Path, max_connections: u32) -> SqlitePool {
    SqlitePoolOptions::new()
        .max_connections(max_connections)
        .connect_with(options(path))
        .await
        .unwrap_or_else(|e| panic!("opening {} failed: {e}", path.display()))
}
