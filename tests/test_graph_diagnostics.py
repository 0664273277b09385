"""Per-batch diagnostics on hand-checked batches."""

from __future__ import annotations

import numpy as np

from graph import compute_advantages_with_diagnostics
from tests.graph_cases import case_e1, case_e2, case_e3


def test_e1_graph_diagnostics():
    _, diag = compute_advantages_with_diagnostics("graphgpo", case_e1())
    assert diag["nodes"] == 4 and diag["edges"] == 6
    np.testing.assert_allclose(diag["duplicate_edge_fraction"], 1 / 6)  # s1 -> S twice
    assert diag["self_loops"] == 0
    assert diag["graph_source_states"] == 3
    assert diag["graph_single_edge_sources"] == 1  # s2
    assert diag["graph_states_shared_by_trajectories"] == 2  # s0 (3 trajectories), s1 (2)
    np.testing.assert_allclose(diag["graph_nonzero_advantage_fraction"], 0.5)
    assert diag["all_success_groups"] == 1 and diag["all_fail_groups"] == 0
    assert diag["unreachable_fraction"] == 0
    assert diag["distance_histogram"][:3].tolist() == [1, 2, 1]
    assert diag["distance_histogram"].sum() == 4


def test_e2_unreachable_and_e3_all_fail():
    _, diag = compute_advantages_with_diagnostics("graphgpo", case_e2())
    np.testing.assert_allclose(diag["unreachable_fraction"], 3 / 5)
    assert diag["distance_histogram"][-1] == 3
    _, diag = compute_advantages_with_diagnostics("graphgpo", case_e3())
    assert diag["all_fail_groups"] == 1 and diag["all_success_groups"] == 0
    assert diag["unreachable_fraction"] == 1.0


def test_self_loops_are_counted():
    rows = dict(
        group=[0, 0],
        traj=[0, 0],
        turn=[0, 1],
        state=[4, 4],
        next_state=[4, -1],
        env_reward=[0.0, 10.0],
        valid=[True, True],
    )
    _, diag = compute_advantages_with_diagnostics("graphgpo", rows)
    assert diag["self_loops"] == 1


def test_gigpo_reports_step_groups_and_grpo_group_counts():
    _, diag = compute_advantages_with_diagnostics("gigpo", case_e1())
    assert diag["step_source_states"] == 3 and diag["trajectories"] == 3 and diag["rows"] == 6
    _, diag = compute_advantages_with_diagnostics("grpo", case_e1())
    assert diag["groups"] == 1 and "nodes" not in diag
