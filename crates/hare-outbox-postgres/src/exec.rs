//! How the backend's statements reach the server: straight through the pool, or — behind a
//! transaction pooler such as PgBouncer in `pool_mode = transaction` — as unnamed statements
//! inside a transaction of their own.
//!
//! A transaction pooler hands each transaction to whichever server connection is free, so two
//! things that sqlx does by default break behind it: named prepared statements (`sqlx_s_1` is
//! prepared on one server connection and executed, or prepared again, on another), and the
//! extended protocol's two round trips of an unnamed statement outside a transaction (the Parse
//! may reach one server connection and the Bind another). In pooler mode every statement of this
//! crate is therefore unnamed (sqlx `persistent(false)`) and runs inside a transaction, which the
//! pooler keeps on one server connection from `BEGIN` to `COMMIT`; statements on a connection the
//! caller already holds in a transaction are only made unnamed.

use futures::future::BoxFuture;
use sqlx::postgres::{PgArguments, PgPool, PgQueryResult, PgRow};
use sqlx::query::Query;
use sqlx::{Postgres, Transaction};

/// The pool and whether it goes through a transaction pooler.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Db<'a> {
    pub(crate) pool: &'a PgPool,
    pub(crate) pooler: bool,
}

impl Db<'_> {
    /// Whether statements may be prepared under a name and cached: not behind a pooler.
    pub(crate) fn persistent(self) -> bool {
        !self.pooler
    }
}

/// A statement run on a connection of the pool the way [`Db`] says: as it is, or unnamed in a
/// transaction of its own.
pub(crate) trait RunIn<'q>: Sized + Send {
    /// Runs it; returns what the server reports (rows affected).
    fn execute_in<'a>(self, db: Db<'a>) -> BoxFuture<'a, Result<PgQueryResult, sqlx::Error>>
    where
        'q: 'a;

    /// Runs it; returns every row.
    fn fetch_all_in<'a>(self, db: Db<'a>) -> BoxFuture<'a, Result<Vec<PgRow>, sqlx::Error>>
    where
        'q: 'a;

    /// Runs it; returns the first row, if any.
    fn fetch_optional_in<'a>(self, db: Db<'a>) -> BoxFuture<'a, Result<Option<PgRow>, sqlx::Error>>
    where
        'q: 'a;

    /// Runs it; returns the first row, or [`sqlx::Error::RowNotFound`].
    fn fetch_one_in<'a>(self, db: Db<'a>) -> BoxFuture<'a, Result<PgRow, sqlx::Error>>
    where
        'q: 'a,
        Self: 'a,
    {
        Box::pin(async move {
            self.fetch_optional_in(db)
                .await?
                .ok_or(sqlx::Error::RowNotFound)
        })
    }
}

async fn begin(pool: &PgPool) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
    pool.begin().await
}

impl<'q> RunIn<'q> for Query<'q, Postgres, PgArguments> {
    fn execute_in<'a>(self, db: Db<'a>) -> BoxFuture<'a, Result<PgQueryResult, sqlx::Error>>
    where
        'q: 'a,
    {
        Box::pin(async move {
            if !db.pooler {
                return self.execute(db.pool).await;
            }
            let mut tx = begin(db.pool).await?;
            let done = self.persistent(false).execute(&mut *tx).await?;
            tx.commit().await?;
            Ok(done)
        })
    }

    fn fetch_all_in<'a>(self, db: Db<'a>) -> BoxFuture<'a, Result<Vec<PgRow>, sqlx::Error>>
    where
        'q: 'a,
    {
        Box::pin(async move {
            if !db.pooler {
                return self.fetch_all(db.pool).await;
            }
            let mut tx = begin(db.pool).await?;
            let rows = self.persistent(false).fetch_all(&mut *tx).await?;
            tx.commit().await?;
            Ok(rows)
        })
    }

    fn fetch_optional_in<'a>(self, db: Db<'a>) -> BoxFuture<'a, Result<Option<PgRow>, sqlx::Error>>
    where
        'q: 'a,
    {
        Box::pin(async move {
            if !db.pooler {
                return self.fetch_optional(db.pool).await;
            }
            let mut tx = begin(db.pool).await?;
            let row = self.persistent(false).fetch_optional(&mut *tx).await?;
            tx.commit().await?;
            Ok(row)
        })
    }
}
