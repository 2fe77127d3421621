//! One suite of behaviour tests that every backend passes: each test takes
//! a [`Fixture`] (a fresh, empty store of one backend) and sees the store
//! only through the [`Store`] trait, plus SQL run as someone with access
//! to the database (to tamper, and to count rows). Each backend's tests
//! instantiate the whole suite with [`backend_suite!`].

pub mod batch;
pub mod children;
pub mod events;
pub mod group;
pub mod journal;
pub mod mail;
pub mod poison;
pub mod questions;

use super::Store;

/// A fresh store of one backend, and raw access to its database.
pub trait Fixture {
    /// A new connection to the store, as a supervisor (re)starting on it
    /// opens one.
    fn open(&self) -> Box<dyn Store>;
    /// Runs `sql` (one or more statements) on a connection of its own.
    fn exec(&self, sql: &str);
    /// The one integer `sql` returns.
    fn count(&self, sql: &str) -> i64;
    /// A SQL literal for the bytes `hex` spells.
    fn blob(&self, hex: &str) -> String;
}

/// Instantiates every suite test as a `#[test]` on the fixture `$fixture`
/// (an expression giving a `Box<dyn Fixture>`, evaluated per test).
macro_rules! backend_suite {
    ($fixture:expr) => {
        backend_suite!(@each $fixture;
            children::children_are_remembered_until_forgotten,
            journal::appended_records_chain_verify_and_survive_a_reopen,
            journal::the_journal_filters_by_deployment_and_pages_by_seq,
            journal::a_global_record_has_no_deployment,
            journal::editing_one_byte_of_a_body_is_detected,
            journal::deleting_a_middle_record_is_detected,
            journal::swapping_two_records_is_detected,
            journal::a_forged_record_is_detected,
            journal::a_mangled_blob_is_reported_as_corruption_naming_the_record,
            journal::a_negative_number_is_reported_as_corruption,
            journal::appends_from_two_connections_stay_one_chain,
            journal::a_cut_tail_never_gets_its_seqs_reused_and_verify_names_it,
            journal::a_row_written_beside_wfhost_at_the_next_seq_is_refused,
            journal::the_verified_head_is_kept_across_reopens,
            journal::the_guard_checks_from_the_last_verified_head,
            journal::the_guard_refuses_a_forged_record_and_an_edited_anchor,
            mail::acceptance_and_completion_write_their_events_with_the_mail,
            mail::mail_is_taken_in_fifo_order_and_moves_to_processing,
            mail::an_unsent_item_goes_back_to_the_head_with_its_take_undone,
            mail::an_ack_counts_once_and_a_duplicate_or_unknown_ack_changes_nothing,
            mail::replay_puts_processing_back_at_the_head_in_original_order,
            mail::replay_after_a_partial_retake_keeps_order,
            mail::an_idempotency_key_accepts_once_per_deployment,
            mail::pruning_deletes_only_done_mail_older_than_the_cut_and_frees_its_key,
            mail::a_full_inbox_refuses_and_writes_nothing,
            mail::ids_increase_across_deployments_and_are_never_reused,
            mail::replay_all_covers_every_deployment,
            mail::mail_in_flight_survives_a_supervisor_crash,
            mail::random_histories_end_with_every_accepted_id_done_exactly_once,
            batch::offers_in_one_write_are_each_admitted_on_their_own,
            group::a_group_commits_together_and_a_failed_write_rolls_back_alone,
            group::a_group_that_never_commits_leaves_nothing,
            batch::acks_in_one_write_each_land_or_not,
            batch::a_result_lands_with_its_ack_byte_for_byte,
            batch::attempts_count_starts_and_an_unstarted_item_is_never_charged,
            batch::a_cancel_ends_a_queued_item_and_outlives_a_held_ones_holder,
            batch::a_held_deployment_keeps_a_started_item_for_an_operator,
            poison::a_child_acknowledges_and_gets_back_only_what_it_holds,
            poison::a_counted_end_charges_each_held_item_and_keeps_its_last_failure,
            poison::the_supervisors_own_stop_charges_nothing,
            poison::a_suspect_is_taken_alone_and_nothing_follows_it,
            poison::a_poison_item_among_32_in_flight_dies_alone_and_the_rest_are_done_once,
            poison::dead_mail_is_retried_from_attempt_one_and_only_dead_mail_is,
            poison::purging_deletes_only_dead_mail_older_than_the_cut_with_its_history,
            poison::pruning_done_mail_deletes_its_history_too,
            poison::a_list_filters_pages_and_says_how_many_more,
            poison::a_payload_reads_back_in_pieces,
            poison::random_poison_histories_quarantine_only_the_poison,
            questions::a_question_is_asked_once_answered_once_and_outlives_its_child,
            questions::an_item_waiting_for_an_answer_holds_no_child_and_is_charged_nothing,
            events::events_are_numbered_from_one_and_read_back_whole,
            events::a_cursor_and_a_limit_page_through_the_log_without_gaps,
            events::pruning_keeps_the_newest_and_seqs_are_never_reused,
            events::the_log_survives_a_reopen,
            events::two_connections_share_one_sequence,
            events::a_mangled_body_is_reported_as_corruption_naming_the_event,
            events::a_follower_misses_nothing_while_connections_append_at_once,
        );
    };
    (@each $fixture:expr; $($module:ident :: $name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                let fixture = $fixture;
                $crate::store::suite::$module::$name(&*fixture);
            }
        )*
    };
}
pub(crate) use backend_suite;
