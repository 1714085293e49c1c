//! Tests of the SQLite backend on real database files, one file per test.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod enqueue;
mod enqueue_spec;
mod schema;
