//! Ordered runs per key on PostgreSQL: the testkit's runs conformance suite, each scenario in a
//! fresh schema (see `hare_outbox_testkit::conformance::runs`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hare_outbox_core::{Outbox, OutboxTable};
use hare_outbox_postgres::PgBackend;
use hare_outbox_testkit::conformance::runs as suite;
use hare_outbox_testkit::pg::TestSchema;

macro_rules! scenarios {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let schema = TestSchema::new(4).await;
            let outbox = Outbox::new(
                PgBackend::new(schema.pool.clone()),
                OutboxTable::parse("outbox").unwrap(),
            );
            outbox.migrate().await.unwrap();
            suite::$name(&outbox).await;
            schema.drop_schema().await;
        }
    )*};
}

scenarios!(
    a_dead_head_holds_back_only_its_key,
    a_failure_inside_a_run_releases_the_rest_unattempted,
    a_failure_inside_an_ordered_batch_releases_the_rest,
    a_hot_key_drains_in_ordered_runs,
    a_lease_takes_concurrency_keys_whose_runs_fill_the_batch,
    a_poll_that_leased_anything_polls_again_at_once,
    one_event_per_key_when_runs_are_off,
    the_walk_over_keys_serves_every_key_in_turn,
);
