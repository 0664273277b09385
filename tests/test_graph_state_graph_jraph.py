"""The state graphs as jraph.GraphsTuple, and the parts of jraph 0.0.6.dev0 we rely on on current JAX."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jraph
import numpy as np

from graph import build_state_graph
from graph.host_api import to_turn_rows, validate_rows
from tests.graph_cases import case_e1, case_e2


def _graph(*cases):
    rows = {}
    for g, case in enumerate(cases):
        case = dict(case, group=[g] * len(case["group"]), traj=[t + 100 * g for t in case["traj"]])
        for k, v in case.items():
            rows.setdefault(k, []).extend(v)
    turn_rows = to_turn_rows(validate_rows(rows), 16)
    return jax.jit(build_state_graph)(turn_rows)


def test_one_graph_per_group_with_padding_graph_last():
    graph = _graph(case_e1(), case_e2())
    n_node = np.asarray(graph.n_node)
    n_edge = np.asarray(graph.n_edge)
    # E1 nodes: s0, s1, s2, S; E2 nodes: s0..s3, S (state ids equal across groups, nodes separate)
    assert n_node[:2].tolist() == [4, 5]
    assert n_edge[:2].tolist() == [6, 4]
    assert n_node.sum() == graph.nodes["distance"].shape[0]
    assert n_edge.sum() == graph.senders.shape[0]
    assert np.all(n_node[2:-1] == 0)
    assert n_edge[-1] == 16 - 10


def test_distances_on_nodes():
    graph = _graph(case_e1(), case_e2())
    dist = np.asarray(graph.nodes["distance"])
    goal = np.asarray(graph.nodes["is_goal"])
    group = np.asarray(graph.nodes["group"])
    # nodes are sorted by (group, state) with the goal (-1) first in each group
    assert dist[:4].tolist() == [0, 1, 1, 2]  # E1: S, s0, s1, s2
    assert dist[4:9].tolist() == [0, 1, 2, 2, 2]  # E2: S, s0, s1..s3 unreachable -> d_max + 1
    assert goal[:9].tolist() == [True, False, False, False, True, False, False, False, False]
    assert group[:9].tolist() == [0] * 4 + [1] * 5
    assert np.asarray(graph.nodes["unreachable"])[:9].tolist() == [False] * 6 + [True] * 3


def test_edges_keep_duplicates_and_point_into_their_group():
    graph = _graph(case_e1(), case_e1())
    n_edge = np.asarray(graph.n_edge)
    senders, receivers = np.asarray(graph.senders), np.asarray(graph.receivers)
    group = np.asarray(graph.nodes["group"])
    real = int(n_edge[:-1].sum())
    assert real == 12
    assert np.all(group[senders[:real]] == group[receivers[:real]])
    assert np.all(np.diff(group[senders[:real]]) >= 0)  # edges contiguous per graph, as jraph expects


def test_jraph_pieces_we_use_work_on_current_jax():
    graph = _graph(case_e1(), case_e2())
    graph = graph._replace(nodes=graph.nodes["distance"].astype(jnp.float32)[:, None], edges=None)
    # a jraph GNN layer and jraph's padding helpers run on our GraphsTuple
    conv = jraph.GraphConvolution(update_node_fn=lambda n: n, add_self_edges=False, symmetric_normalization=False)
    out = jax.jit(conv)(graph)
    # identity update, no self edges, no normalization: each node receives the sum of its senders' values
    nodes, senders, receivers = np.asarray(graph.nodes), np.asarray(graph.senders), np.asarray(graph.receivers)
    expected = np.zeros_like(nodes)
    np.add.at(expected, receivers, nodes[senders])
    np.testing.assert_allclose(np.asarray(out.nodes), expected, rtol=1e-6)
    assert np.abs(expected).max() > 0  # the distances are not all zero: the sum shows
    # every graph but the last (padding) one is real
    mask = np.asarray(jraph.get_graph_padding_mask(graph))
    assert mask.tolist() == [True] * (len(mask) - 1) + [False]
    # segment_sum of ones over senders is each node's out-degree
    summed = jraph.segment_sum(jnp.ones(senders.shape[0]), graph.senders, nodes.shape[0])
    np.testing.assert_array_equal(np.asarray(summed), np.bincount(senders, minlength=nodes.shape[0]))
