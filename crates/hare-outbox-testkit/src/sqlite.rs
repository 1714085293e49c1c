//! A SQLite database file of its own per test.
