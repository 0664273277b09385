"""Bad input to `compute_advantages` raises ValueError naming the field and the offending row."""

from __future__ import annotations

import numpy as np
import pytest

from graph import compute_advantages
from tests.graph_cases import case_e2


def test_unknown_method():
    with pytest.raises(ValueError, match="unknown advantage estimator 'ppo'"):
        compute_advantages("ppo", case_e2())


def test_unknown_option():
    with pytest.raises(ValueError, match=r"unknown option.*omgea"):
        compute_advantages("graphgpo", case_e2(), omgea=0.2)


def test_bad_option_value():
    with pytest.raises(ValueError, match="episode_weighting='turns'"):
        compute_advantages("grpo", case_e2(), episode_weighting="turns")


def test_mismatched_lengths():
    rows = case_e2()
    rows["valid"] = [True] * 3
    with pytest.raises(ValueError, match=r"rows\['valid'\] has 3 entries but rows\['group'\] has 4"):
        compute_advantages("grpo", rows)


def test_missing_and_unknown_fields():
    rows = case_e2()
    del rows["state"]
    with pytest.raises(ValueError, match=r"missing row field\(s\) \['state'\]"):
        compute_advantages("grpo", rows)
    rows = case_e2()
    rows["rowmask"] = [True] * 4
    with pytest.raises(ValueError, match=r"unknown row field.*rowmask"):
        compute_advantages("grpo", rows)


def test_turn_gap_names_the_row():
    rows = case_e2()
    rows["turn"] = [0, 0, 1, 3]
    with pytest.raises(ValueError, match=r"rows\['turn'\]\[3\] = 3: gap .* trajectory 1"):
        compute_advantages("grpo", rows)


def test_turn_duplicate_names_the_row():
    rows = case_e2()
    rows["turn"] = [0, 0, 1, 1]
    with pytest.raises(ValueError, match=r"rows\['turn'\]\[3\] = 1: duplicate .* trajectory 1"):
        compute_advantages("grpo", rows)


def test_turns_must_start_at_zero():
    rows = case_e2()
    rows["turn"] = [1, 0, 1, 2]
    with pytest.raises(ValueError, match=r"rows\['turn'\]\[0\] = 1: gap"):
        compute_advantages("grpo", rows)


def test_nan_reward_names_the_row():
    rows = case_e2()
    rows["env_reward"] = [10.0, 0.0, np.nan, 0.0]
    with pytest.raises(ValueError, match=r"rows\['env_reward'\]\[2\] = nan"):
        compute_advantages("grpo", rows)


def test_trajectory_in_two_groups():
    rows = case_e2()
    rows["group"] = [0, 0, 1, 1]
    with pytest.raises(ValueError, match=r"rows\['traj'\]\[\d\] = 1: trajectory appears in more than one group"):
        compute_advantages("grpo", rows)


def test_negative_state_names_the_row():
    rows = case_e2()
    rows["state"] = [0, 0, -3, 2]
    with pytest.raises(ValueError, match=r"rows\['state'\]\[2\] = -3"):
        compute_advantages("grpo", rows)


def test_padding_rows_are_not_validated_and_get_zero():
    rows = case_e2()
    padded = {k: [*list(v), v[0]] for k, v in rows.items()}
    padded["env_reward"][-1] = float("nan")
    padded["turn"][-1] = 7
    padded["row_mask"] = [True] * 4 + [False]
    out = compute_advantages("graphgpo", padded)
    np.testing.assert_array_equal(out[:4], compute_advantages("graphgpo", rows))
    assert out[4] == 0.0


def test_large_arbitrary_ids_are_interned():
    rows = case_e2()
    rows["state"] = [2**40, 2**40, 5, 2**33]
    rows["next_state"] = [-1, 5, 2**33, 9]
    rows["group"] = [2**35] * 4
    np.testing.assert_allclose(compute_advantages("graphgpo", rows), compute_advantages("graphgpo", case_e2()))
