"""The row fields of the turn batch that the estimators read (DESIGN.md, "the turn batch")."""

from __future__ import annotations

from typing import NamedTuple

import jax

GOAL = -1
"""``next_state`` value that marks the goal: the episode was won on this turn."""

ROW_FIELDS = ("group", "traj", "turn", "state", "next_state", "env_reward", "valid", "row_mask")


class TurnRows(NamedTuple):
    """One entry per turn row, all of shape ``[R]``; padding rows have ``row_mask == False``.

    ``group``, ``traj``, ``turn``, ``state``, ``next_state`` are int32; ``state``/``next_state`` are ids
    that are only meaningful inside their group (the estimators intern ``(group, state)`` pairs).
    """

    group: jax.Array
    traj: jax.Array
    turn: jax.Array
    state: jax.Array
    next_state: jax.Array
    env_reward: jax.Array
    valid: jax.Array
    row_mask: jax.Array
