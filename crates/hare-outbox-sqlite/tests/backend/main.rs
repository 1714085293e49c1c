//! Tests of the SQLite backend on real database files, one file per test.

mod common;
mod enqueue;
mod marks;
mod relay;
mod relay_ops;
mod schema;
