//! End-to-end tests of the `hare-outbox` binary: the real process, a real PostgreSQL schema per
//! test, SQLite files in temp dirs and a real HTTP receiver on loopback.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod breaker;
mod brokers;
mod capture;
mod clock_skew;
mod config_errors;
mod delivery_config;
mod demo;
mod docs;
mod journal;
mod kill_loop;
mod migrations;
mod relay_pg;
mod safe_input;
mod serve;
mod sqlite;
mod support;
mod views;
mod wakeup;
