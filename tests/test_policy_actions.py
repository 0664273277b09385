"""experiments/policy_actions.py: the per-verb profile of a policy's turns."""

from __future__ import annotations

import numpy as np

from env_bridge.rollout import Turn
from experiments.policy_actions import action_profile, malformed_answers


def _turn(traj: int, turn: int, action: str, valid: bool, text: str = "", tokens: int = 1) -> Turn:
    return Turn(
        group=0,
        traj=traj,
        turn=turn,
        prompt_ids=[1],
        response_ids=[2] * tokens,
        logprobs=np.zeros(1, np.float32),
        env_reward=0.0,
        valid=valid,
        state=0,
        next_state=0,
        policy_version=0,
        action=action,
        response_text=text or action,
    )


def test_the_profile_counts_verbs_invalid_commands_and_repeats_within_a_trajectory():
    turns = [
        _turn(0, 0, "go to desk 1", True),
        _turn(0, 1, "take apple 1 from desk 1", False),
        _turn(0, 2, "take apple 1 from desk 1", False),  # a repeat
        _turn(1, 0, "take apple 1 from desk 1", True),  # another trajectory: not a repeat
        _turn(1, 1, "", False),  # no command
    ]
    profile = action_profile(turns)
    assert (profile["turns"], profile["invalid_share"], profile["repeat_share"]) == (5, 0.6, 0.2)
    assert profile["by_verb"]["take"] == {"turns": 3, "invalid": 2, "invalid_share": 0.667}
    assert profile["by_verb"]["(none)"] == {"turns": 1, "invalid": 1, "invalid_share": 1.0}
    assert list(profile["by_verb"]) == ["take", "go", "(none)"]  # most chosen first


def test_malformed_answers_are_counted_with_those_cut_at_the_token_limit_and_shown():
    turns = [
        _turn(0, 0, "go to desk 1", True, "<think>go</think><action>go to desk 1</action>"),
        _turn(0, 1, "take apple 2 from desk 1", False, "<think>x</think><action>take apple 2 from desk 1</action>"),
        _turn(0, 2, "from", False, "<think>take apple</think><action>take apple 1 from", tokens=24),  # cut short
        _turn(0, 3, "apple 1", False, "<think>take apple</think>take apple 1", tokens=9),  # written wrong
    ]
    found = malformed_answers(turns, max_new_tokens=24)  # turn 1: inadmissible (strict), not malformed
    assert (found["malformed"], found["malformed_at_token_limit"]) == (2, 1)
    assert found["malformed_reasons"] == {"missing <action></action>": 2}
    assert found["malformed_examples"] == [turns[2].response_text, turns[3].response_text]
