"""The row fields of the turn batch that the estimators read (DESIGN.md, "the turn batch")."""

from __future__ import annotations

from typing import NamedTuple

import jax

GOAL = -1
"""``next_state`` value that marks the goal: the episode was won on this turn."""

ROW_FIELDS = ("group", "traj", "turn", "state", "next_state", "env_reward", "valid", "row_mask")


class TurnRows(NamedTuple):
    """One entry per turn row, all of shape ``[R]``; padding rows have ``row_mask == False``.

    The device-side contract (the host API and the env bridge produce it; nothing checks it in jit):
    ``group`` and ``traj`` are int32 in ``[0, R)``, ``traj`` unique in the batch (a trajectory lies in
    one group); ``turn`` is 0..T-1 inside each trajectory; ``state`` is in ``[0, 2R)`` and
    ``next_state`` in ``[-1, 2R)`` (``-1`` = goal). State ids only mean something inside their group:
    the estimators intern ``(group, state)`` pairs, so equal ids in two groups are two nodes. Fields
    of padding rows are ignored.
    """

    group: jax.Array
    traj: jax.Array
    turn: jax.Array
    state: jax.Array
    next_state: jax.Array
    env_reward: jax.Array
    valid: jax.Array
    row_mask: jax.Array
