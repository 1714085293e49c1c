//! The conformance suite every database backend runs: each scenario is a public async function
//! generic over [`Harness`], which opens a fresh isolated database of the backend under test and
//! edits rows in its SQL dialect, so no backend's SQL lives here. A backend's
//! `tests/conformance.rs` implements [`Harness`] and invokes [`suite!`](crate::suite), which
//! generates one `#[tokio::test]` per scenario; `docs/architecture.md` describes it as the
//! checklist of a new backend. The journal and runs scenarios take an outbox (and a
//! [`RowEditor`], which every [`Harness`] is) and are called the same way.

use std::future::Future;

use chrono::{DateTime, Utc};
use hare_outbox_core::OutboxTable;

pub mod capture;
pub mod capture_context;
pub mod capture_writes;
pub mod cleanup_backlog;
pub mod dead_letters;
pub mod enqueue;
pub mod extra_columns;
pub mod hand_written;
pub mod harness;
pub mod idempotency;
pub mod inbox;
pub mod journal;
pub mod lease_order;
pub mod marks;
pub mod migrations;
pub mod observers;
pub mod ordering;
pub mod relay;
pub mod runs;
pub mod statements;
pub mod views;

pub use harness::{Cell, EventState, Harness, Reshape};

/// A timestamp column of the outbox table a suite sets directly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeColumn {
    /// `created_at`.
    CreatedAt,
    /// `published_at`.
    PublishedAt,
    /// `dead_lettered_at`.
    DeadLetteredAt,
    /// `lease_until`.
    LeaseUntil,
}

impl TimeColumn {
    /// The column's name in the outbox table.
    pub fn name(self) -> &'static str {
        match self {
            TimeColumn::CreatedAt => "created_at",
            TimeColumn::PublishedAt => "published_at",
            TimeColumn::DeadLetteredAt => "dead_lettered_at",
            TimeColumn::LeaseUntil => "lease_until",
        }
    }
}

/// Direct writes to stored events that the public API does not offer, implemented by a backend's
/// test with its own SQL on its own test database.
///
/// Each call panics when the write fails.
pub trait RowEditor {
    /// Sets `column` of the event at `sequence` in `table` to `time` (`None` = NULL), in the
    /// backend's timestamp format.
    fn set_time(
        &self,
        table: &OutboxTable,
        sequence: i64,
        column: TimeColumn,
        time: Option<DateTime<Utc>>,
    ) -> impl Future<Output = ()>;

    /// Stores `json`, the exact JSON text given, as the payload of the event at `sequence` in
    /// `table` — as a capture trigger would write it (object keys in the order given, not
    /// sorted), in the backend's JSON storage.
    fn set_payload(
        &self,
        table: &OutboxTable,
        sequence: i64,
        json: &str,
    ) -> impl Future<Output = ()>;
}

/// Generates one `#[tokio::test]` per shared scenario for the [`Harness`] type given, each in
/// a fresh database: `hare_outbox_testkit::suite!(MyHarness);` in a backend's `tests/`. The
/// tests are grouped in modules named after the suite's modules (`enqueue::…`, `marks::…`), so
/// `cargo nextest run -E 'test(/^marks::/)'` runs one group.
///
/// The harness type must be defined at the root of the test crate (the generated modules reach
/// it through `use super::*`).
#[macro_export]
macro_rules! suite {
    ($harness:ident) => {
        $crate::suite_except_capture!($harness);
        $crate::suite!(@modules $harness;
            capture: [
                changes_mode_writes_the_journal_with_the_author,
                context_headers_and_tenant_from_the_row,
                a_key_over_255_characters_keeps_its_start_and_ends_with_its_sha256,
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
                a_many_to_many_link_table_is_just_a_table,
                a_statement_failing_after_the_trigger_fired_leaves_no_event,
                another_outbox_shaped_table_is_refused,
                cascades_and_set_null_done_by_the_database_are_captured,
                composite_key_is_an_object_and_joins_the_ordering_key,
                fields_limit_the_rows_and_updates_of_other_columns_write_nothing,
                multi_row_update_and_delete_by_hand_written_sql,
                quotes_in_names_labels_and_templates_cannot_break_out,
                rollback_to_savepoint_takes_that_parts_events,
                unordered_capture_writes_no_ordering_key,
                upserts_capture_updated_inserted_or_nothing,
            ],
        );
    };
    (@rest $harness:ident) => {
        $crate::suite!(@modules $harness;
            enqueue: [
                a_validation_error_writes_nothing,
                a_long_run_keeps_the_given_order,
                a_relay_wakes_on_commit_not_on_the_poll_interval,
                an_event_commits_with_the_transaction_and_vanishes_with_its_rollback,
                enqueue_many_is_all_or_nothing_and_the_callers_transaction_survives,
                enqueue_many_writes_one_insert_per_run_and_keeps_the_order,
                extra_columns_are_typed_checked_and_returned,
                migrate_is_idempotent_and_safe_concurrently,
                signals_are_coalesced_and_sent_only_after_commit,
                the_stored_event_reads_back_as_written,
                two_outbox_tables_in_one_database_do_not_see_each_other,
            ],
            idempotency: [
                a_per_tenant_key_is_one_event_per_tenant,
                a_stored_idempotency_key_returns_the_stored_event_unchanged,
                a_table_wide_key_refuses_another_tenant,
                a_taken_explicit_id_is_an_integrity_error,
                keys_outlive_delivery_and_dead_letters_but_not_rollbacks,
                without_a_scope_a_key_is_a_configuration_error,
            ],
            lease_order: [
                a_lease_is_taken_again_only_after_it_ends_and_a_retry_only_when_due,
                a_lease_takes_one_event_per_key_in_sequence_order_up_to_the_limit,
                lease_and_backlog_take_exactly_the_topics_the_filter_matches,
                relays_on_disjoint_topics_share_one_table,
                two_running_relays_share_one_table_and_keep_per_key_order,
            ],
            marks: [
                a_long_delivery_keeps_its_lease,
                an_expired_lease_is_leased_again_and_the_old_holder_cannot_mark_it,
                mark_delivered_keeps_the_first_published_at,
                mark_failed_by_a_relay_that_no_longer_holds_the_lease_changes_nothing,
                only_the_holder_extends_a_lease_and_never_of_a_published_event,
            ],
            relay: [
                an_unreadable_row_is_dead_lettered_and_the_others_are_delivered,
                an_unrouted_event_is_retried_then_dead_lettered_never_published,
                failures_back_off_then_dead_letter_and_hold_back_only_their_key,
                relay_events_reach_observers_and_metrics,
                with_one_event_per_key_the_relay_delivers_in_order_retries_dead_letters_and_holds_back_the_dead_key,
            ],
            hand_written: [
                a_nul_character_is_refused_before_writing,
                foreign_key_not_null_and_check_violations_are_integrity_errors,
                hand_written_rows_are_dead_lettered_with_the_reason_and_never_delivered,
            ],
            dead_letters: [
                retry_without_ids_takes_every_dead_letter_of_the_topics_and_nothing_published,
                retrying_a_dead_letter_releases_its_key,
            ],
            observers: [
                a_failure_whose_mark_changed_nothing_is_not_reported,
                observer_events_name_table_and_model_and_failures_log_at_their_level,
            ],
            extra_columns: [migrate_adds_missing_extra_columns_to_an_existing_table],
            ordering: [
                a_per_call_wakeup_is_signalled_after_commit_instead_of_the_outbox_one,
                a_poison_event_holds_back_only_its_key,
                a_sequence_is_never_reused_after_cleanup,
                strict_messages_keep_sequence_order_and_need_a_key,
            ],
            migrations: [
                a_failing_version_leaves_the_versions_before_it_applied,
                a_table_made_before_versions_is_adopted_and_later_versions_apply,
                an_edited_record_is_refused_naming_the_version,
                concurrent_migrates_apply_each_version_once,
                migrate_records_each_version_once_and_status_reads_them,
            ],
            inbox: [
                a_duplicate_is_skipped_and_a_rollback_forgotten,
                cleanup_deletes_old_records_in_batches,
            ],
            cleanup_backlog: [
                backlog_reports_pending_oldest_age_and_dead_letters,
                cleanup_deletes_in_batches_without_blocking_writers,
                one_delete_takes_one_batch_oldest_first_and_nothing_younger_than_the_cut_off,
            ],
            views: [
                held_keys_are_the_dead_and_failing_heads_in_key_order,
                neighbours_of_a_key_and_one_event_by_sequence,
                object_filter_by_table_or_label,
                relays_holding_leases_live_and_expired,
                retry_and_release_act_only_on_the_held_head,
                topic_counts_per_state_and_oldest_pending,
            ],
        );
        $crate::suite!(@outbox $harness;
            runs: [
                a_dead_head_holds_back_only_its_key,
                a_failure_inside_a_run_releases_the_rest_unattempted,
                a_failure_inside_an_ordered_batch_releases_the_rest,
                a_hot_key_drains_in_ordered_runs,
                a_lease_takes_concurrency_keys_whose_runs_fill_the_batch,
                a_poll_that_leased_anything_polls_again_at_once,
                one_event_per_key_when_runs_are_off,
                the_walk_over_keys_serves_every_key_in_turn,
            ],
        );
        $crate::suite!(@journal $harness;
            rows: [
                every_filter_alone_and_combined,
                every_status_through_the_backend_calls,
                timeline_counts_backlog_and_latency_on_known_times,
            ],
            outbox: [
                hostile_filter_values_match_nothing_and_break_nothing,
                pages_walk_every_event_once_in_both_directions,
                timeline_refuses_an_impossible_grid,
            ],
            backend: [extra_columns_are_decoded_as_event_get_does],
        );
    };
    (@journal $harness:ident;
        rows: [$($rows:ident),* $(,)?],
        outbox: [$($plain:ident),* $(,)?],
        backend: [$($backend:ident),* $(,)?] $(,)?
    ) => {
        mod journal {
            #[allow(unused_imports)]
            use super::*;
            use $crate::conformance::{Harness, harness::outbox, journal as suite};
            $(
                #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $rows() {
                    let h = <$harness as Harness>::open().await;
                    suite::$rows(&outbox(&h).await, &h).await;
                    h.close().await;
                }
            )*
            $(
                #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $plain() {
                    let h = <$harness as Harness>::open().await;
                    suite::$plain(&outbox(&h).await).await;
                    h.close().await;
                }
            )*
            $(
                #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $backend() {
                    let h = <$harness as Harness>::open().await;
                    suite::$backend(h.backend()).await;
                    h.close().await;
                }
            )*
        }
    };
    (@outbox $harness:ident; $module:ident: [$($name:ident),* $(,)?] $(,)?) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;
            use $crate::conformance::{Harness, harness::outbox};
            $(
                #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let h = <$harness as Harness>::open().await;
                    $crate::conformance::$module::$name(&outbox(&h).await).await;
                    h.close().await;
                }
            )*
        }
    };
    (@modules $harness:ident; $($module:ident: [$($name:ident),* $(,)?]),* $(,)?) => {
        $(
            mod $module {
                #[allow(unused_imports)]
                use super::*;
                $(
                    #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
                    async fn $name() {
                        let h = <$harness as $crate::conformance::Harness>::open().await;
                        $crate::conformance::$module::$name(&h).await;
                        $crate::conformance::Harness::close(h).await;
                    }
                )*
            }
        )*
    };
}

/// Every scenario of [`suite!`](crate::suite) except the change capture groups (`capture::…`,
/// `capture_context::…`, `capture_writes::…`): for a backend whose capture triggers are not
/// written yet, so the rest of the suite runs on it. A backend with change capture calls
/// [`suite!`](crate::suite), or this and `suite!(@modules …)` with the capture scenarios it
/// can pass (MySQL, whose triggers do not fire for cascading foreign-key actions).
#[macro_export]
macro_rules! suite_except_capture {
    ($harness:ident) => {
        $crate::suite!(@rest $harness);
    };
}
