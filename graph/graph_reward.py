"""Graph rewards from distances to the goal and the graph advantage A_G (ALGORITHMS.md §5.3-5.4)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from graph.config import AdvantageConfig
from graph.distance import fill_unreachable, shortest_distance_to_goal
from graph.indexing import RowIndex
from graph.rows import TurnRows
from graph.segments import segment_normalize


def node_distances(rows: TurnRows, index: RowIndex) -> dict[str, jax.Array]:
    """Distance of every node slot to its group's goal, unreachable ones filled with ``d_max + 1``."""
    raw, rounds = shortest_distance_to_goal(index.source, index.target, rows.row_mask, index.node_is_goal)
    distance, unreachable = fill_unreachable(raw, index.node_group, index.node_used, index.num_rows)
    return {"distance": distance, "unreachable": unreachable, "rounds": rounds}


def graph_rewards(rows: TurnRows, index: RowIndex, distance: jax.Array, config: AdvantageConfig) -> jax.Array:
    """``R_G = r_s * omega^(d(next) + c - 1)``, c = 1 by default; ``paper_cost`` uses ``d(next) + c``,
    ``normalize_distance`` uses ``d(next) - d(state) + 1``. Then ``-p`` on invalid rows."""
    d_next = distance[index.target].astype(jnp.float32)
    if config.normalize_distance:
        exponent = d_next - distance[index.source].astype(jnp.float32) + 1.0
    elif config.paper_cost:
        exponent = d_next + 1.0
    else:
        exponent = d_next
    reward = config.graph_reward_scale * jnp.power(jnp.float32(config.omega), exponent)
    reward = reward - jnp.where(rows.valid, 0.0, config.invalid_penalty)
    return jnp.where(rows.row_mask, reward, 0.0)


def source_state_advantage(values: jax.Array, rows: TurnRows, index: RowIndex, config: AdvantageConfig) -> jax.Array:
    """Normalizes per-row values over the rows that leave the same state node (singleton -> 0)."""
    return segment_normalize(
        values,
        index.source,
        rows.row_mask,
        num_segments=index.num_node_slots,
        mode=config.mode,
        epsilon=config.epsilon,
        singleton_raw=False,
    )
