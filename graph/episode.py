"""Episode advantage A_E (GRPO, ALGORITHMS.md §3) with `trajectory` or `turn` weighting."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from graph.config import AdvantageConfig
from graph.indexing import RowIndex
from graph.rows import TurnRows
from graph.segments import segment_normalize


def trajectory_returns(rows: TurnRows, index: RowIndex) -> jax.Array:
    """``R(tau)`` per row: the sum of ``env_reward`` over the row's trajectory."""
    n = index.num_rows
    reward = jnp.where(rows.row_mask, rows.env_reward.astype(jnp.float32), 0.0)
    per_traj = jax.ops.segment_sum(reward, index.traj_id, num_segments=n)
    return per_traj[index.traj_id]


def episode_advantage(rows: TurnRows, index: RowIndex, config: AdvantageConfig) -> jax.Array:
    n = index.num_rows
    mask = rows.row_mask
    penalty = jnp.where(rows.valid, 0.0, config.invalid_penalty).astype(jnp.float32)
    returns = trajectory_returns(rows, index)
    if config.episode_weighting == "turn":
        return segment_normalize(
            returns - penalty,
            index.group_id,
            mask,
            num_segments=n,
            mode=config.mode,
            epsilon=config.epsilon,
            singleton_raw=True,
        )
    # `trajectory`: one sample per trajectory, keyed at the trajectory's slot, penalty as an offset.
    traj_used = jax.ops.segment_max(mask.astype(jnp.int32), index.traj_id, num_segments=n) > 0
    traj_return = jax.ops.segment_sum(
        jnp.where(mask, rows.env_reward.astype(jnp.float32), 0.0), index.traj_id, num_segments=n
    )
    traj_group = jax.ops.segment_max(jnp.where(mask, index.group_id, 0), index.traj_id, num_segments=n)
    traj_group = jnp.where(traj_used, traj_group, 0)
    traj_advantage = segment_normalize(
        traj_return,
        traj_group,
        traj_used,
        num_segments=n,
        mode=config.mode,
        epsilon=config.epsilon,
        singleton_raw=True,
    )
    return jnp.where(mask, traj_advantage[index.traj_id] - penalty, 0.0)
