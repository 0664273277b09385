"""Per-batch diagnostics of the grouping and of the state graphs (all jittable, fixed shapes)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from graph.indexing import RowIndex
from graph.rows import TurnRows
from graph.segments import intern_keys, segment_count

DISTANCE_BINS = 16
"""Histogram bins ``d = 0 .. 15``, then ``d >= 16`` (reachable) and a last bin for unreachable nodes."""


def _fraction(numerator: jax.Array, denominator: jax.Array) -> jax.Array:
    return numerator.astype(jnp.float32) / jnp.maximum(denominator, 1).astype(jnp.float32)


def group_diagnostics(rows: TurnRows, index: RowIndex) -> dict[str, jax.Array]:
    """Rows, groups, trajectories, and the groups where every trajectory failed / succeeded.

    A trajectory succeeded when its return ``R(tau)`` is positive.
    """
    n = index.num_rows
    mask = rows.row_mask
    reward = jnp.where(mask, rows.env_reward.astype(jnp.float32), 0.0)
    traj_rows = segment_count(index.traj_id, mask, n)
    traj_used = traj_rows > 0
    traj_won = jax.ops.segment_sum(reward, index.traj_id, num_segments=n) > 0
    traj_group = jax.ops.segment_max(jnp.where(mask, index.group_id, 0), index.traj_id, num_segments=n)
    traj_group = jnp.where(traj_used, traj_group, 0)
    group_trajs = segment_count(traj_group, traj_used, n)
    group_wins = segment_count(traj_group, traj_used & traj_won, n)
    group_used = group_trajs > 0
    return {
        "rows": jnp.sum(mask.astype(jnp.int32)),
        "groups": index.num_groups,
        "trajectories": jnp.sum(traj_used.astype(jnp.int32)),
        "all_fail_groups": jnp.sum((group_used & (group_wins == 0)).astype(jnp.int32)),
        "all_success_groups": jnp.sum((group_used & (group_wins == group_trajs)).astype(jnp.int32)),
    }


def source_state_diagnostics(
    rows: TurnRows, index: RowIndex, advantage: jax.Array, prefix: str
) -> dict[str, jax.Array]:
    """Statistics of the rows grouped by source state (GiGPO's step groups, GraphGPO's A_G groups)."""
    mask = rows.row_mask
    slots = index.num_node_slots
    out_edges = segment_count(index.source, mask, slots)
    states = jnp.sum((out_edges > 0).astype(jnp.int32))
    # states visited by >= 2 trajectories: count distinct (source, trajectory) pairs per source
    pair_id, pairs = intern_keys((index.source, index.traj_id), mask, bounds=(slots, index.num_rows))
    pair_source = jnp.zeros((index.num_rows,), jnp.int32).at[pair_id].set(index.source)
    pair_used = jnp.arange(index.num_rows) < pairs
    trajs_per_state = segment_count(pair_source, pair_used, slots)
    rows_count = jnp.sum(mask.astype(jnp.int32))
    return {
        f"{prefix}source_states": states,
        f"{prefix}single_edge_sources": jnp.sum((out_edges == 1).astype(jnp.int32)),
        f"{prefix}states_shared_by_trajectories": jnp.sum((trajs_per_state >= 2).astype(jnp.int32)),
        f"{prefix}nonzero_advantage_fraction": _fraction(
            jnp.sum((mask & (advantage != 0)).astype(jnp.int32)), rows_count
        ),
    }


def graph_diagnostics(
    rows: TurnRows, index: RowIndex, distance: jax.Array, unreachable: jax.Array, rounds: jax.Array
) -> dict[str, jax.Array]:
    mask = rows.row_mask
    edges = jnp.sum(mask.astype(jnp.int32))
    slots = index.num_node_slots
    _, unique_edges = intern_keys((index.source, index.target), mask, bounds=(slots, slots))
    reachable = index.node_used & ~unreachable
    clipped = jnp.minimum(distance, DISTANCE_BINS)
    histogram = jnp.zeros((DISTANCE_BINS + 2,), jnp.int32).at[clipped].add(reachable.astype(jnp.int32))
    histogram = histogram.at[DISTANCE_BINS + 1].set(jnp.sum(unreachable.astype(jnp.int32)))
    return {
        "nodes": index.num_nodes,
        "edges": edges,
        "duplicate_edge_fraction": _fraction(edges - unique_edges, edges),
        "self_loops": jnp.sum((mask & (index.source == index.target)).astype(jnp.int32)),
        "unreachable_fraction": _fraction(jnp.sum(unreachable.astype(jnp.int32)), index.num_nodes),
        "distance_histogram": histogram,
        "relaxation_rounds": rounds,
    }
