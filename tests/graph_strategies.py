"""Hypothesis strategies for random turn batches: groups, unequal lengths, recurring states,
self-loops, cycles, all-fail / all-success groups, invalid rows, singleton groups, padding rows."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

GOAL = -1


@st.composite
def turn_batches(draw, max_groups: int = 3, max_trajs: int = 4, max_turns: int = 6, padding: bool = True) -> dict:
    rows = {k: [] for k in ("group", "traj", "turn", "state", "next_state", "env_reward", "valid", "row_mask")}
    num_groups = draw(st.integers(1, max_groups))
    group_ids = draw(st.lists(st.integers(0, 1000), min_size=num_groups, max_size=num_groups, unique=True))
    traj_counter = draw(st.integers(0, 50))
    for group in group_ids:
        num_states = draw(st.integers(1, 5))  # few states -> recurring states, self-loops, cycles
        outcome = draw(st.sampled_from(["mixed", "all_fail", "all_success"]))
        for _ in range(draw(st.integers(1, max_trajs))):
            length = draw(st.integers(1, max_turns))
            won = outcome == "all_success" or (outcome == "mixed" and draw(st.booleans()))
            state = draw(st.integers(0, num_states - 1))
            for turn in range(length):
                last = turn == length - 1
                next_state = GOAL if (won and last) else draw(st.integers(0, num_states - 1))
                reward = 10.0 if (won and last) else draw(st.sampled_from([0.0, 0.0, 0.0, 1.0]))
                rows["group"].append(group)
                rows["traj"].append(traj_counter)
                rows["turn"].append(turn)
                rows["state"].append(state)
                rows["next_state"].append(next_state)
                rows["env_reward"].append(reward)
                rows["valid"].append(draw(st.booleans()) or draw(st.booleans()))
                rows["row_mask"].append(True)
                state = next_state
            traj_counter += draw(st.integers(1, 3))
    if padding:
        for _ in range(draw(st.integers(0, 3))):
            for key, value in (
                ("group", draw(st.integers(0, 1000))),
                ("traj", 9999),
                ("turn", 0),
                ("state", 0),
                ("next_state", 0),
                ("env_reward", 0.0),
                ("valid", True),
                ("row_mask", False),
            ):
                rows[key].append(value)
    order = draw(st.permutations(range(len(rows["group"]))))
    return {k: np.asarray(v)[list(order)] for k, v in rows.items()}


configs = st.sampled_from(
    [
        {},
        {"episode_weighting": "turn"},
        {"mode": "mean"},
        {"paper_cost": True},
        {"normalize_distance": True, "episode_weighting": "turn"},
    ]
)
