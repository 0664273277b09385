"""The numerical oracles of ALGORITHMS.md §6, to 1e-5."""

from __future__ import annotations

import numpy as np
import pytest

from graph import compute_advantages
from tests.graph_cases import case_e1, case_e2, case_e3, case_e5

TOL = 1e-5


def check(actual, expected):
    np.testing.assert_allclose(actual, expected, atol=TOL, rtol=0)


def test_e1_graphgpo_equals_graph_advantage_when_all_succeed():
    check(compute_advantages("graphgpo", case_e1()), [1.150793, -0.493197, 0, -0.657596, 0, 0])


def test_e1_graph_only_matches_graph_advantage():
    check(compute_advantages("graph_only", case_e1()), [1.150793, -0.493197, 0, -0.657596, 0, 0])


def test_e1_gigpo():
    check(compute_advantages("gigpo", case_e1()), [1.008434, -0.017092, 0, -0.991342, 0, 0])


def test_e1_mean_mode():
    check(compute_advantages("graph_only", case_e1(), mode="mean"), [6.3, -2.7, 0, -3.6, 0, 0])


def test_e1_sample_std_not_population_std():
    actual = compute_advantages("graph_only", case_e1())
    assert abs(actual[0] - 1.4094) > 0.1


def test_e2_graph_advantage():
    check(compute_advantages("graph_only", case_e2()), [0.707107, -0.707107, 0, 0])


@pytest.mark.parametrize(
    ("weighting", "episode", "graphgpo"),
    [
        ("turn", [1.5, -0.5, -0.5, -0.5], [2.207107, -1.207107, -0.5, -0.5]),
        ("trajectory", [0.707107, -0.707107, -0.707107, -0.707107], [1.414214, -1.414214, -0.707107, -0.707107]),
    ],
)
def test_e2_both_weightings(weighting, episode, graphgpo):
    check(compute_advantages("grpo", case_e2(), episode_weighting=weighting), episode)
    check(compute_advantages("graphgpo", case_e2(), episode_weighting=weighting), graphgpo)


def test_trajectory_weighting_is_the_default():
    check(compute_advantages("grpo", case_e2()), compute_advantages("grpo", case_e2(), episode_weighting="trajectory"))


def test_e3_graph_advantage_with_invalid_row():
    check(compute_advantages("graph_only", case_e3()), [0.707097, 0, -0.707097, 0])


def test_e3_turn_weighting_blows_up_penalty():
    check(compute_advantages("grpo", case_e3(), episode_weighting="turn"), [0.499990, 0.499990, -1.499970, 0.499990])


def test_e3_trajectory_weighting_keeps_penalty_as_offset():
    check(compute_advantages("grpo", case_e3()), [0, 0, -0.1, 0])


@pytest.mark.parametrize("method", ["grpo", "gigpo", "graphgpo", "graph_only"])
@pytest.mark.parametrize("weighting", ["trajectory", "turn"])
def test_e3_without_penalty_a_group_nobody_won_has_exactly_zero_advantage(method, weighting):
    # the comparison's attempt 4 rests on this: an iteration without a win gives the update nothing
    advantages = compute_advantages(method, case_e3(), invalid_penalty=0.0, episode_weighting=weighting)
    assert np.all(advantages == 0.0), advantages
    assert np.any(compute_advantages(method, case_e3(), episode_weighting=weighting) != 0.0)


@pytest.mark.parametrize("method", ["grpo", "gigpo", "graphgpo"])
def test_turn_weighting_sums_to_zero_over_a_groups_turns_and_trajectory_weighting_does_not(method):
    # E2: the win takes 1 turn, the loss 3; under `trajectory` the turns' sum is negative, so a token-mean
    # loss pushes down what every answer shares (the comparison's attempt 5 changes to `turn` for this)
    assert abs(float(np.sum(compute_advantages(method, case_e2(), episode_weighting="turn")))) < TOL
    assert float(np.sum(compute_advantages(method, case_e2(), episode_weighting="trajectory"))) < -0.5


def test_e5_grpo_mean_std_and_mean():
    check(compute_advantages("grpo", case_e5()), [1.5, -0.5, -0.5, -0.5])
    check(compute_advantages("grpo", case_e5(), mode="mean"), [7.5, -2.5, -2.5, -2.5])


def test_paper_cost_is_identical_under_mean_std_without_invalid_rows():
    default = compute_advantages("graph_only", case_e1())
    paper = compute_advantages("graph_only", case_e1(), paper_cost=True)
    check(paper, default)


def test_paper_cost_scales_by_omega_under_mean_mode():
    paper = compute_advantages("graph_only", case_e1(), mode="mean", paper_cost=True)
    check(paper, [0.63, -0.27, 0, -0.36, 0, 0])


def test_normalize_distance_uses_distance_difference():
    # E1 s0 rows: d(s0)=1; next nodes S(0), s1(1), s2(2) -> exponents 0, 1, 2 -> same rewards as default
    check(
        compute_advantages("graph_only", case_e1(), normalize_distance=True),
        compute_advantages("graph_only", case_e1()),
    )
    # E2 lost trajectory: s1 -> s2 with d(s1)=d(s2)=2 -> 10*omega^1 = 1, singleton source -> 0
    check(compute_advantages("graph_only", case_e2(), normalize_distance=True), [0.707107, -0.707107, 0, 0])


def test_identical_values_give_exactly_zero():
    rows = dict(
        group=[0] * 7,
        traj=list(range(7)),
        turn=[0] * 7,
        state=[0] * 7,
        next_state=[1] * 7,
        env_reward=[0.9] * 7,
        valid=[True] * 7,
    )
    assert np.all(compute_advantages("grpo", rows) == 0.0)
    assert np.all(compute_advantages("grpo", rows, episode_weighting="turn") == 0.0)
    assert np.all(compute_advantages("gigpo", rows) == 0.0)
