"""The tests the quick tier (`python -m pytest -q -m "not slow"`) leaves to the full one, each with the quick test that
covers the same behaviour, so every behaviour is checked in the quick tier at least once. conftest.py marks each of
them slow; `tests/test_quick_tier.py` checks that every entry names collected tests and every cover is a quick test.

Keys and covers are node-id prefixes (a parametrized test's id up to and including its bracket, or the whole test)."""

from __future__ import annotations

# left to the full tier -> the quick test that covers the same behaviour
LEFT_TO_FULL: dict[str, str] = {
    # The twin checks write a report and refuse the 8B twin without CUDA; a released layout's round trip is quick
    # with the other spec.
    "tests/test_twin.py::test_twin_check_writes_its_report_on_the_tiny_twin": (
        "tests/test_twin.py::test_the_tiny_twin_runs_through_the_apps_compare_api"
    ),
    "tests/test_twin.py::test_twin_check_on_the_8b_twin_without_cuda_exits_2_saying_why": (
        "tests/test_twin.py::test_the_8b_twin_has_llama3_8b_instructs_configuration_and_is_never_built_on_a_cpu"
    ),
    "tests/test_twin.py::test_a_draft_in_a_released_layout_round_trips_and_decodes_as_plain[spec1]": (
        "tests/test_twin.py::test_a_draft_in_a_released_layout_round_trips_and_decodes_as_plain[spec0]"
    ),
    "tests/test_bench_autobudget.py::test_the_decoders_lm_head_rows_are_what_the_profile_counts": (
        "tests/test_bench_autobudget.py::test_auto_tree_budget_calibrates_on_a_real_decode"
    ),
    "tests/test_class.py::test_a_waiting_run_shows_its_place_and_stop_leaves_the_line": (
        "tests/test_class.py::test_a_waiting_run_starts_when_the_slot_frees_and_its_cap_starts_then"
    ),
    "tests/test_evidence.py::test_folder_handler_shows_a_fresh_run": (
        "tests/test_evidence.py::test_folder_handler_reads_only_the_allowed_folders"
    ),
    "tests/test_bench_stall.py::test_progress_inside_generate_keeps_a_slow_decode_alive": (
        "tests/test_bench_stall.py::test_the_watch_ends_any_lane_that_stops_making_rounds"
    ),
    "tests/test_bench_stall.py::test_the_watch_ends_generate_stuck_in_the_benchmarks_own_thread": (
        "tests/test_bench_stall.py::test_a_generate_whose_streamer_never_yields_ends_with_the_stall_error"
    ),
    "tests/test_session_memory.py::test_reading_does_not_postpone_the_idle_reaping_and_every_path_frees_caches": (
        "tests/test_sessions.py::test_an_idle_paused_step_session_releases_its_decoders_and_says_so"
    ),
    "tests/test_saved_runs.py::test_a_bad_saved_run_changes_nothing_and_names_the_field[a node at depth 100,000]": (
        "tests/test_saved_runs.py::test_a_bad_saved_run_changes_nothing_and_names_the_field[settings.depth = 1e6]"
    ),
    "tests/test_saved_runs.py::test_a_bad_saved_run_changes_nothing_and_names_the_field[a huge prompt]": (
        "tests/test_saved_runs.py::test_size_and_line_limits"
    ),
    "tests/test_saved_runs.py::test_a_first_line_that_is_not_a_run_object[5-": (
        "tests/test_saved_runs.py::test_a_first_line_that_is_not_a_run_object[[1,2,3]-"
    ),
    'tests/test_saved_runs.py::test_a_first_line_that_is_not_a_run_object["run"-': (
        "tests/test_saved_runs.py::test_a_first_line_that_is_not_a_run_object[[1,2,3]-"
    ),
    "tests/test_saved_runs.py::test_a_first_line_that_is_not_a_run_object[first4-": (
        "tests/test_saved_runs.py::test_a_first_line_that_is_not_a_run_object[{not json-"
    ),
    "tests/test_app_e2e.py::test_client_compare_api_and_two_sessions": (
        "tests/test_app_handlers.py::test_sessions_do_not_mix"
    ),
    "tests/test_app_e2e.py::test_the_served_app_runs_the_training_free_lanes_identical_to_plain": (
        "tests/test_app_handlers.py::test_prompt_lookup_and_assisted_lanes_get_the_identity_badge"
    ),
    "tests/test_app_pooled.py::test_step_runs_count_as_they_go_once_and_replays_never": (
        "tests/test_class.py::test_replays_loaded_runs_and_unfinished_steps_stay_out_until_they_end"
    ),
    "tests/test_app_pooled.py::test_varied_settings_are_said_and_forget_clears_the_pool": (
        "tests/test_app_pooled.py::test_all_my_runs_pools_every_round_of_three_runs"
    ),
    "tests/test_app_handlers.py::test_auto_budget_fits_each_draft_lane_once_then_reads_the_cache": (
        "tests/test_bench_autobudget.py::test_the_apps_budget_choice_is_calibrated_once_per_draft_and_cached"
    ),
    "tests/test_training.py::test_bf16_mixed_precision_trains_and_keeps_fp32_weights": (
        "tests/test_training.py::test_training_with_the_decoding_unroll_lowers_its_loss_and_keeps_steps_apart"
    ),
    "tests/test_requirements.py::test_dropping_a_requirement_line_is_caught_naming_the_module": (
        "tests/test_requirements.py::test_every_imported_package_is_pinned_in_requirements"
    ),
    "tests/test_bench.py::test_cli_reports_a_broken_decoder_loudly": (
        "tests/test_bench.py::test_identity_check_catches_a_broken_decoder"
    ),
    "tests/test_bench.py::test_tree_budget_auto_on_tiny_random": (
        "tests/test_bench_autobudget.py::test_auto_tree_budget_calibrates_on_a_real_decode"
    ),
    "tests/test_hf_generate.py::test_bench_runs_prompt_lookup_beside_plain_with_its_speedup_and_identity": (
        "tests/test_hf_generate.py::test_in_the_calling_thread_the_rounds_are_the_same_and_no_worker_starts"
    ),
    # The verifier's check against peaked targets: one mutant per tree shape stays quick.
    "tests/test_sampling_peaked.py::test_the_check_catches_each_mutant[two-children-bonus": (
        "tests/test_sampling_peaked.py::test_the_check_catches_each_mutant[two-children-no renormalisation"
    ),
    "tests/test_sampling_peaked.py::test_the_check_catches_each_mutant[two-children-draft-ratio": (
        "tests/test_sampling_peaked.py::test_the_check_catches_each_mutant[two-children-no renormalisation"
    ),
    "tests/test_sampling_peaked.py::test_the_check_catches_each_mutant[top-choice-first-bonus": (
        "tests/test_sampling_peaked.py::test_the_check_catches_each_mutant[top-choice-first-no renormalisation"
    ),
    "tests/test_sampling_peaked.py::test_the_check_catches_each_mutant[top-choice-first-draft-ratio": (
        "tests/test_sampling_peaked.py::test_the_check_catches_each_mutant[top-choice-first-no renormalisation"
    ),
    # Greedy identity: every draft kind and tree shape stays quick once.
    "tests/test_greedy_identity.py::test_random_drafts_match_generate[poss1]": (
        "tests/test_greedy_identity.py::test_random_drafts_match_generate[poss2]"
    ),
    "tests/test_greedy_identity.py::test_random_drafts_match_generate[poss3]": (
        "tests/test_greedy_identity.py::test_random_drafts_match_generate[poss2]"
    ),
    "tests/test_greedy_identity.py::test_random_drafts_match_generate[matched]": (
        "tests/test_greedy_identity.py::test_random_drafts_match_generate[poss2]"
    ),
    "tests/test_greedy_identity.py::test_trained_drafts_match_generate[eagle-6-10-60]": (
        "tests/test_greedy_identity.py::test_trained_drafts_match_generate[poss2-6-10-60]"
    ),
    "tests/test_greedy_identity.py::test_trained_drafts_match_generate[eagle-3-4-8]": (
        "tests/test_greedy_identity.py::test_trained_drafts_match_generate[poss2-3-4-8]"
    ),
    "tests/test_greedy_identity.py::test_trained_drafts_match_generate[eagle-8-2-16]": (
        "tests/test_greedy_identity.py::test_trained_drafts_match_generate[poss2-8-2-16]"
    ),
    "tests/test_greedy_identity.py::test_trained_drafts_match_generate[poss2-5-1-6]": (
        "tests/test_greedy_identity.py::test_trained_drafts_match_generate[eagle-5-1-6]"
    ),
    "tests/test_greedy_identity.py::test_trained_drafts_match_generate[poss2-1-3-2]": (
        "tests/test_greedy_identity.py::test_trained_drafts_match_generate[eagle-1-3-2]"
    ),
    "tests/test_greedy_identity.py::test_every_slot_through_the_lm_head_gives_the_same_output[60]": (
        "tests/test_greedy_identity.py::test_every_slot_through_the_lm_head_gives_the_same_output[8]"
    ),
    "tests/test_greedy_identity.py::test_a_dynamic_depth_stop_drafts_shallower_where_unsure_and_stays_lossless"
    "[eagle]": (
        "tests/test_greedy_identity.py::test_a_dynamic_depth_stop_drafts_shallower_where_unsure_and_stays_lossless[poss2]"
    ),
    "tests/test_oracle.py::test_oracle_output_is_plain_decoding_and_accepts_the_whole_depth[6-24]": (
        "tests/test_oracle.py::test_oracle_output_is_plain_decoding_and_accepts_the_whole_depth[6-7]"
    ),
    "tests/test_oracle.py::test_oracle_output_is_plain_decoding_and_accepts_the_whole_depth[3-16]": (
        "tests/test_oracle.py::test_oracle_output_is_plain_decoding_and_accepts_the_whole_depth[1-2]"
    ),
    "tests/test_oracle.py::test_oracle_output_is_plain_decoding_and_accepts_the_whole_depth[4-60]": (
        "tests/test_oracle.py::test_oracle_output_is_plain_decoding_and_accepts_the_whole_depth[6-7]"
    ),
    "tests/test_sampling.py::test_next_token_distribution_is_the_targets[trained-0.7-0.8]": (
        "tests/test_sampling.py::test_next_token_distribution_is_the_targets[trained-1.0-1.0]"
    ),
    "tests/test_sampling.py::test_next_token_distribution_is_the_targets[bad-0.7-0.8]": (
        "tests/test_sampling.py::test_top_p_never_emits_outside_the_nucleus"
    ),
    # Row invariance: bf16 (the demo's precision) and fp32 stay quick; fp16 rounds like bf16 does.
    "tests/test_row_invariant.py::test_a_row_is_the_same_bits_alone_in_chunks_and_among_tree_siblings[float16]": (
        "tests/test_row_invariant.py::test_a_row_is_the_same_bits_alone_in_chunks_and_among_tree_siblings[bfloat16]"
    ),
    "tests/test_row_invariant.py::test_every_greedy_lane_is_plain_decoding_token_for_token[float16]": (
        "tests/test_row_invariant.py::test_every_greedy_lane_is_plain_decoding_token_for_token[bfloat16]"
    ),
}


def left_to_full(nodeid: str) -> bool:
    """Whether the quick tier leaves this test to the full one."""
    return any(nodeid.startswith(key) for key in LEFT_TO_FULL)
