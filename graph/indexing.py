"""Dense per-batch indexing of the per-group state nodes."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from graph.rows import GOAL, TurnRows
from graph.segments import intern_keys, segment_count


class RowIndex(NamedTuple):
    """Segment ids for the rows; every id array indexes segments of static size.

    ``group_id``/``traj_id`` are the rows' own dense ids in ``[0, R)``; ``source``/``target`` are node
    ids in ``[0, 2R)``. A node is a ``(group, state)`` pair, so equal state ids in two groups are two
    nodes, and each group's nodes are contiguous (sorted by group, the goal first).
    """

    group_id: jax.Array  # [R]
    traj_id: jax.Array  # [R]
    source: jax.Array  # [R] node of `state`
    target: jax.Array  # [R] node of `next_state` (the group's goal node when next_state == GOAL)
    node_group: jax.Array  # [2R] group of each node (0 for unused node slots)
    node_used: jax.Array  # [2R] bool: the node slot is a real node
    node_is_goal: jax.Array  # [2R] bool
    num_groups: jax.Array  # [] int32
    num_nodes: jax.Array  # [] int32

    @property
    def num_rows(self) -> int:
        return int(self.group_id.shape[0])

    @property
    def num_node_slots(self) -> int:
        return int(self.node_group.shape[0])


def index_rows(rows: TurnRows) -> RowIndex:
    mask = rows.row_mask
    n = mask.shape[0]
    group_id = jnp.where(mask, rows.group, 0).astype(jnp.int32)
    traj_id = jnp.where(mask, rows.traj, 0).astype(jnp.int32)
    endpoint_group = jnp.concatenate([group_id, group_id])
    endpoint_state = jnp.concatenate([rows.state, rows.next_state]).astype(jnp.int32)
    endpoint_mask = jnp.concatenate([mask, mask])
    # state + 1 so the goal (-1) is key 0: the first node of its group
    node_of_endpoint, num_nodes = intern_keys(
        (endpoint_group, endpoint_state + 1), endpoint_mask, bounds=(n, 2 * n + 1)
    )
    slots = 2 * n
    node_used = jnp.arange(slots) < num_nodes
    node_group = jax.ops.segment_max(endpoint_group, node_of_endpoint, num_segments=slots)
    node_group = jnp.where(node_used, node_group, 0)
    is_goal_endpoint = (endpoint_state == GOAL) & endpoint_mask
    node_is_goal = jax.ops.segment_max(is_goal_endpoint.astype(jnp.int32), node_of_endpoint, num_segments=slots) > 0
    return RowIndex(
        group_id=group_id,
        traj_id=traj_id,
        source=node_of_endpoint[:n],
        target=node_of_endpoint[n:],
        node_group=node_group,
        node_used=node_used,
        node_is_goal=node_is_goal & node_used,
        num_groups=jnp.sum((segment_count(group_id, mask, n) > 0).astype(jnp.int32)),
        num_nodes=num_nodes,
    )
