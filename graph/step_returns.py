"""Discounted step returns inside each trajectory (GiGPO, ALGORITHMS.md §4)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from graph.indexing import RowIndex
from graph.rows import TurnRows


def discounted_step_returns(rows: TurnRows, index: RowIndex, gamma: float) -> jax.Array:
    """``G_t = r_t + gamma * G_{t+1}`` in turn order within each trajectory.

    The rows must be in canonical order (sorted by trajectory then turn, padding last; the estimator
    registry guarantees it). Every row runs the recurrence itself, from its trajectory's last turn back
    to its own, one step per turn of the longest trajectory. Each row's float operations are then the
    same wherever its trajectory sits in the batch and whatever else the batch holds, so a task group's
    returns are bit for bit those it gets alone (a parallel scan's tree would depend on the position).
    """
    mask = rows.row_mask
    n = mask.shape[0]
    reward = jnp.where(mask, rows.env_reward.astype(jnp.float32), 0.0)
    position = jnp.arange(n)
    last_row = jax.ops.segment_max(jnp.where(mask, position, -1), index.traj_id, num_segments=n)[index.traj_id]
    ahead = jnp.where(mask, last_row - position, -1)  # rows after this one in its trajectory
    gamma32 = jnp.float32(gamma)

    def step(offset: jax.Array, later: jax.Array) -> jax.Array:
        here = reward[jnp.minimum(position + offset, n - 1)] + gamma32 * later
        return jnp.where(offset <= ahead, here, 0.0)

    def body(carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        offset, later = carry
        return offset - 1, step(offset, later)

    start = jnp.max(ahead)
    _, returns = jax.lax.while_loop(lambda c: c[0] >= 0, body, (start, jnp.zeros((n,), jnp.float32)))
    return jnp.where(mask, returns, 0.0)
