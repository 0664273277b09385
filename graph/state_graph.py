"""The per-group state graphs as a ``jraph.GraphsTuple``, so they can feed jraph GNNs directly."""

from __future__ import annotations

import jax.numpy as jnp
import jraph

from graph.graph_reward import node_distances
from graph.indexing import index_rows
from graph.rows import TurnRows
from graph.segments import segment_count


def build_state_graph(rows: TurnRows) -> jraph.GraphsTuple:
    """One graph per task group in a batched ``GraphsTuple`` with static shapes.

    ``n_node``/``n_edge`` have ``R + 1`` entries: one per dense group slot (unused slots are empty
    graphs) and a last padding graph that holds the padding nodes and edges, as jraph's padding
    utilities expect. Nodes are ``(group, state)`` pairs in group order with features ``distance``
    (to the goal, unreachable filled with ``d_max + 1``), ``unreachable``, ``is_goal`` and ``group``;
    edges are the rows (duplicates kept) ordered by group, with features ``row`` and ``valid``.
    """
    index = index_rows(rows)
    nodes = node_distances(rows, index)
    n = index.num_rows
    slots = index.num_node_slots
    edge_order = jnp.lexsort((index.group_id, ~rows.row_mask))
    num_edges = jnp.sum(rows.row_mask.astype(jnp.int32))
    n_node = jnp.concatenate([segment_count(index.node_group, index.node_used, n), (slots - index.num_nodes)[None]])
    n_edge = jnp.concatenate([segment_count(index.group_id, rows.row_mask, n), (n - num_edges)[None]])
    return jraph.GraphsTuple(
        nodes={
            "distance": nodes["distance"],
            "unreachable": nodes["unreachable"],
            "is_goal": index.node_is_goal,
            "group": index.node_group,
        },
        edges={"row": edge_order.astype(jnp.int32), "valid": rows.valid[edge_order]},
        senders=index.source[edge_order],
        receivers=index.target[edge_order],
        n_node=n_node.astype(jnp.int32),
        n_edge=n_edge.astype(jnp.int32),
        globals=None,
    )
