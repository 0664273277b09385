"""Discounted step returns inside each trajectory (GiGPO, ALGORITHMS.md §4)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from graph.indexing import RowIndex
from graph.rows import TurnRows


def discounted_step_returns(rows: TurnRows, index: RowIndex, gamma: float) -> jax.Array:
    """``G_t = r_t + gamma * G_{t+1}`` in turn order within each trajectory.

    The rows must be in canonical order (sorted by trajectory then turn, padding last; the estimator
    registry guarantees it). A reverse associative scan composes the affine maps ``G -> r_t + g_t * G``
    where ``g_t = gamma`` except on a trajectory's last row (``g_t = 0``).
    """
    mask = rows.row_mask
    traj = index.traj_id
    reward = jnp.where(mask, rows.env_reward.astype(jnp.float32), 0.0)
    last = jnp.zeros((1,), bool)
    same_traj_next = jnp.concatenate([traj[1:] == traj[:-1], last]) & mask & jnp.concatenate([mask[1:], last])
    decay = jnp.where(same_traj_next, jnp.float32(gamma), 0.0)

    def compose(
        later: tuple[jax.Array, jax.Array], earlier: tuple[jax.Array, jax.Array]
    ) -> tuple[jax.Array, jax.Array]:
        # with reverse=True the scan passes (accumulated later elements, current element);
        # maps are G -> b + a*G; applying `later` first then `earlier`.
        a_later, b_later = later
        a_earlier, b_earlier = earlier
        return a_earlier * a_later, b_earlier + a_earlier * b_later

    _, returns = jax.lax.associative_scan(compose, (decay, reward), reverse=True)
    return jnp.where(mask, returns, 0.0)
