"""Credit assignment for multi-turn agents as jitted pure JAX functions over turn-row tensors."""

from graph.config import OPTION_NAMES, AdvantageConfig, make_config
from graph.estimators import ESTIMATORS, get_estimator, jitted_estimator, register_estimator
from graph.host_api import compute_advantages, compute_advantages_with_diagnostics, row_bucket
from graph.rows import GOAL, ROW_FIELDS, TurnRows
from graph.state_graph import build_state_graph

__all__ = [
    "ESTIMATORS",
    "GOAL",
    "OPTION_NAMES",
    "ROW_FIELDS",
    "AdvantageConfig",
    "TurnRows",
    "build_state_graph",
    "compute_advantages",
    "compute_advantages_with_diagnostics",
    "get_estimator",
    "jitted_estimator",
    "make_config",
    "register_estimator",
    "row_bucket",
]
