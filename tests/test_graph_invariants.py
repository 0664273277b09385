"""Invariants of ALGORITHMS.md §8 on the estimators."""

from __future__ import annotations

import jax
import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from graph import build_state_graph, compute_advantages
from graph.host_api import to_turn_rows, validate_rows
from tests.graph_cases import case_e2
from tests.graph_strategies import configs, turn_batches

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
METHODS = st.sampled_from(["grpo", "gigpo", "graphgpo", "graph_only"])


@SETTINGS
@given(turn_batches(), METHODS, configs, st.randoms(use_true_random=False))
def test_row_permutation_only_permutes_the_output(rows, method, options, rnd):
    perm = list(range(len(rows["group"])))
    rnd.shuffle(perm)
    shuffled = {k: v[perm] for k, v in rows.items()}
    np.testing.assert_array_equal(
        compute_advantages(method, shuffled, **options), compute_advantages(method, rows, **options)[perm]
    )


@SETTINGS
@given(turn_batches(max_groups=1, padding=False), METHODS, configs)
def test_equal_state_ids_in_two_groups_never_share_a_node(rows, method, options):
    """A copy of a group under a new group id (same state ids) must not change either group's values."""
    n = len(rows["group"])
    other = dict(rows)
    other["group"] = rows["group"] + 1
    other["traj"] = rows["traj"] + 10_000
    other["env_reward"] = np.where(rows["next_state"] == -1, 10.0, 0.0)  # a different reward pattern
    both = {k: np.concatenate([rows[k], other[k]]) for k in rows}
    together = compute_advantages(method, both, **options)
    # only examples where a merge of the two groups would show: the same rows under one group id differ
    merged = compute_advantages(method, dict(both, group=np.concatenate([rows["group"], rows["group"]])), **options)
    assume(not np.allclose(merged, together, atol=1e-5))
    np.testing.assert_allclose(together[:n], compute_advantages(method, rows, **options), atol=1e-6)
    np.testing.assert_allclose(together[n:], compute_advantages(method, other, **options), atol=1e-6)


@SETTINGS
@given(turn_batches(padding=False), st.integers(1, 5), st.data())
def test_trajectory_length_never_changes_the_episode_term(rows, repeats, data):
    """Repeating a failed trajectory's turns leaves every row's beta_graph=0 value unchanged."""
    returns = {}
    for t, r in zip(rows["traj"], rows["env_reward"], strict=False):
        returns[t] = returns.get(t, 0.0) + r
    failed = [t for t, r in returns.items() if r == 0.0]
    assume(failed)
    traj = data.draw(st.sampled_from(sorted(failed)))
    sel = np.flatnonzero(rows["traj"] == traj)
    length = len(sel)
    extra = {k: np.concatenate([rows[k][sel]] * repeats) for k in rows}
    extra["turn"] = np.concatenate([rows["turn"][sel] + length * (k + 1) for k in range(repeats)])
    longer = {k: np.concatenate([rows[k], extra[k]]) for k in rows}
    options = {"beta_graph": 0.0}
    base = compute_advantages("graphgpo", rows, **options)
    after = compute_advantages("graphgpo", longer, **options)
    np.testing.assert_allclose(after[: len(base)], base, atol=1e-6)
    expected_extra = np.concatenate([base[sel]] * repeats)
    np.testing.assert_allclose(after[len(base) :], expected_extra, atol=1e-6)


def test_trajectory_length_changes_episode_term_under_turn_weighting():
    """The control for the test above: `turn` weighting does depend on length (E2: 1.5 vs 0.707)."""
    rows = case_e2()
    turn = compute_advantages("grpo", rows, episode_weighting="turn")
    traj = compute_advantages("grpo", rows)
    assert abs(turn[0] - traj[0]) > 0.5


@SETTINGS
@given(turn_batches(max_groups=5, max_turns=12, padding=False), METHODS, configs, st.integers(2, 4), st.integers(0, 99))
def test_a_groups_advantages_are_bit_for_bit_the_same_whichever_groups_share_its_batch(
    rows, method, options, hosts, seed
):
    """What lets every host compute its own groups' advantages: split the groups over ``hosts`` batches
    (group i in batch i mod hosts, as ``train_loop.host_share`` deals them) and each batch's values are
    exactly the whole batch's (no estimator normalizes across groups, and no float sum depends on where a
    group's rows sit: GiGPO's step returns once did, through a parallel scan's tree). Rewards with many
    significant bits, so that any difference in the order of float operations shows."""
    rows = dict(rows, env_reward=np.random.default_rng(seed).uniform(-1.0, 10.0, len(rows["group"])))
    whole = compute_advantages(method, rows, **options)
    groups = np.unique(rows["group"])
    for host in range(hosts):
        keep = np.isin(rows["group"], groups[host::hosts])
        if keep.any():
            part = compute_advantages(method, {k: v[keep] for k, v in rows.items()}, **options)
            np.testing.assert_array_equal(part.view(np.uint32), whole[keep].view(np.uint32))


@SETTINGS
@given(turn_batches(), configs)
def test_beta_graph_zero_equals_grpo_bit_for_bit(rows, options):
    options = dict(options, beta_graph=0.0, beta_episode=1.0)
    np.testing.assert_array_equal(
        compute_advantages("graphgpo", rows, **options), compute_advantages("grpo", rows, **options)
    )


@SETTINGS
@given(turn_batches(), METHODS, configs)
def test_no_nan_or_inf(rows, method, options):
    assert np.all(np.isfinite(compute_advantages(method, rows, **options)))


def test_one_row_batch_is_finite():
    rows = dict(group=[3], traj=[5], turn=[0], state=[7], next_state=[-1], env_reward=[10.0], valid=[False])
    for method in ("grpo", "gigpo", "graphgpo", "graph_only"):
        values = compute_advantages(method, rows)
        assert np.all(np.isfinite(values))
    # episode singleton: raw score minus penalty; graph singleton: 0
    np.testing.assert_allclose(compute_advantages("grpo", rows), [9.9], atol=1e-6)
    np.testing.assert_allclose(compute_advantages("graph_only", rows), [0.0], atol=0)


S = -1
# group 4: t0 s0 -> S (won); t1 s0 -> s1 -> s2 (lost). group 9, the same state ids, nobody wins:
# t2 s0 -> s1 -> s2; t3 s0 -> s2
MISGROUPING = dict(
    group=[4, 4, 4, 9, 9, 9],
    traj=[0, 1, 1, 2, 2, 3],
    turn=[0, 0, 1, 0, 1, 0],
    state=[0, 0, 1, 0, 1, 0],
    next_state=[S, 1, 2, 1, 2, 2],
    env_reward=[10.0, 0, 0, 0, 0, 0],
    valid=[True] * 6,
)


def _states_of(rows, group):
    sel = np.asarray(rows["group"]) == group
    return set(np.asarray(rows["state"])[sel]) | set(np.asarray(rows["next_state"])[sel])


def test_two_groups_sharing_state_ids_get_disjoint_graphs():
    rows = MISGROUPING
    shared = _states_of(rows, 4) & _states_of(rows, 9) - {S}
    assert shared == {0, 1, 2}  # the precondition: the groups really use the same state ids
    graph = jax.jit(build_state_graph)(to_turn_rows(validate_rows(rows), 16))
    node_group = np.asarray(graph.nodes["group"])
    senders, receivers = np.asarray(graph.senders), np.asarray(graph.receivers)
    edge_row = np.asarray(graph.edges["row"])
    real = int(np.asarray(graph.n_edge)[:-1].sum())
    assert real == 6
    # every edge starts and ends at a node of its own row's group (dense ids: 4 -> 0, 9 -> 1); a graph
    # keyed on the state id alone would send group 9's edges into group 4's nodes
    row_group = np.unique(rows["group"], return_inverse=True)[1]
    for e in range(real):
        g = row_group[edge_row[e]]
        assert node_group[senders[e]] == g and node_group[receivers[e]] == g, e
    # node counts: group 4 has S, s0, s1, s2; group 9 has s0, s1, s2 (no goal: nobody won there)
    assert np.asarray(graph.n_node)[:2].tolist() == [4, 3]
    # distances: group 9 cannot reach a goal, so every node has d = d_max + 1 = 1 there; in group 4
    # s0 is 1 step from S and s1, s2 are unreachable (d_max + 1 = 2)
    dist = np.asarray(graph.nodes["distance"])
    assert sorted(dist[:4].tolist()) == [0, 1, 2, 2]
    assert dist[4:7].tolist() == [1, 1, 1]


def test_two_groups_sharing_state_ids_keep_their_own_graph_advantages():
    rows = MISGROUPING
    separate = compute_advantages("graph_only", rows)
    # group 9: every row leads to a node at d = 1, R_G = 10 * 0.1 = 1 for all, so A_G = 0
    np.testing.assert_allclose(separate[3:], 0.0, atol=0)
    # group 4, state s0: R_G = [10 (to S), 10 * 0.1^2 = 0.1 (to s1 at d = 2)] -> +-0.707107; s1 singleton
    np.testing.assert_allclose(separate[:3], [0.707107, -0.707107, 0.0], atol=1e-5)
    # the control: the same rows in one group are a different answer (the checks above can fail)
    merged = compute_advantages("graph_only", dict(rows, group=[4] * 6))
    assert np.max(np.abs(merged[3:])) > 0.1
