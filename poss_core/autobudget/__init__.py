"""`--tree-budget auto`: pick a tree budget (and depth, and dynamic depth stop) per draft and machine.

cost_model (expected tokens/s, pure) <- timing (the measured forward-time curve) <- cache (JSON on disk)
<- calibration (a short decode, the choice, cached per draft). The names below are what callers use."""

from .cache import (
    choice_cache_path,
    curve_cache_path,
    known_budget_choice,
    load_or_measure_curve,
    read_store,
    write_store,
)
from .calibration import CALIBRATION_PROMPTS, auto_tree_budget, cached_budget_choice, calibrate
from .cost_model import (
    CANDIDATE_BUDGETS,
    DEFAULT_MISS,
    DEFAULT_POS_ACC,
    DEFAULT_TAIL,
    DEPTH_STOPS,
    MAX_BUDGET,
    AcceptanceProfile,
    BudgetChoice,
    accept_len_at_budget,
    accepted_ranks,
    best_scores_by_depth,
    choose_budget,
    default_profile,
    draft_ms_at,
    draft_ms_by_depth,
    head_ms,
    head_reads_by_budget,
    max_useful_budget,
    profile_from_events,
)
from .timing import ForwardCurve, curve_key, machine_busy, measure_forward_curve, non_decreasing

__all__ = [
    "AcceptanceProfile",
    "BudgetChoice",
    "CALIBRATION_PROMPTS",
    "CANDIDATE_BUDGETS",
    "DEFAULT_MISS",
    "DEFAULT_POS_ACC",
    "DEFAULT_TAIL",
    "DEPTH_STOPS",
    "ForwardCurve",
    "MAX_BUDGET",
    "accept_len_at_budget",
    "accepted_ranks",
    "auto_tree_budget",
    "best_scores_by_depth",
    "cached_budget_choice",
    "calibrate",
    "choice_cache_path",
    "choose_budget",
    "curve_cache_path",
    "curve_key",
    "default_profile",
    "draft_ms_at",
    "draft_ms_by_depth",
    "head_ms",
    "head_reads_by_budget",
    "known_budget_choice",
    "load_or_measure_curve",
    "machine_busy",
    "max_useful_budget",
    "measure_forward_curve",
    "non_decreasing",
    "profile_from_events",
    "read_store",
    "write_store",
]
