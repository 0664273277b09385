"""Shortest distance to the goal on the per-group state multigraphs (ALGORITHMS.md §5.2)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

UNREACHED = jnp.iinfo(jnp.int32).max // 2


def shortest_distance_to_goal(
    source: jax.Array,
    target: jax.Array,
    edge_mask: jax.Array,
    node_is_goal: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """Fewest edges from every node to a goal node, unit costs, by repeated relaxation.

    ``d(v) = min(d(v), 1 + min over edges v->w of d(w))`` with ``segment_min`` over the edge list,
    iterated until nothing changes (at most ``num_nodes`` rounds). Duplicate edges and self-loops do
    not change the result. Returns ``(distance [N] int32 with UNREACHED where no path, rounds)``.
    """
    num_nodes = node_is_goal.shape[0]
    initial = jnp.where(node_is_goal, 0, UNREACHED).astype(jnp.int32)

    def relax(distance: jax.Array) -> jax.Array:
        via_target = jnp.where(edge_mask, distance[target] + 1, UNREACHED)
        best = jax.ops.segment_min(via_target, source, num_segments=num_nodes)
        return jnp.minimum(distance, best)

    def cond(carry: tuple[jax.Array, jax.Array, jax.Array]) -> jax.Array:
        _, changed, rounds = carry
        return changed & (rounds < num_nodes)

    def body(carry: tuple[jax.Array, jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array, jax.Array]:
        distance, _, rounds = carry
        updated = relax(distance)
        return updated, jnp.any(updated != distance), rounds + 1

    distance, _, rounds = jax.lax.while_loop(cond, body, (initial, jnp.asarray(True), jnp.asarray(0)))
    return distance, rounds


def fill_unreachable(
    distance: jax.Array, node_group: jax.Array, node_used: jax.Array, num_groups: int
) -> tuple[jax.Array, jax.Array]:
    """Replaces UNREACHED by ``d_max + 1`` of the node's group, ``d_max`` the largest finite distance
    there (0 when no node of the group reaches a goal, so an all-fail group has ``d = 1`` everywhere).
    Returns ``(distance, unreachable_mask)``."""
    reached = (distance < UNREACHED) & node_used
    finite = jnp.where(reached, distance, 0)
    d_max = jax.ops.segment_max(finite, node_group, num_segments=num_groups)
    d_max = jnp.maximum(d_max, 0)
    filled = jnp.where(reached, distance, d_max[node_group] + 1)
    return jnp.where(node_used, filled, 0), node_used & ~reached
