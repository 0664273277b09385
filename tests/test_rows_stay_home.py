"""Rows stay home: each host keeps its own turns, computes their advantages, and contributes its rows to
every global mini-batch; only small values cross hosts. Several hosts are simulated here by threads
sharing a pickling exchange (the real two-process runs are in test_multihost.py)."""

from __future__ import annotations

import dataclasses
import pickle
import threading
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from env_bridge.collate import collate_plan, collate_turns
from env_bridge.packing import Packing
from env_bridge.rollout import Episode, Turn
from ggtrain.config import BatchConfig, LossConfig, MeshConfig, OptimizerConfig, TrainConfig
from ggtrain.host_batches import Epoch, host_epochs, host_rows
from ggtrain.host_exchange import HostExchange
from ggtrain.optim import make_optimizer
from ggtrain.packing import packing_of
from ggtrain.rollout_summary import HostSummary, merge_diagnostics, scalar_diagnostics
from ggtrain.sharding import check_rows_stay_home, make_mesh, process_row_blocks, rows_stay_home_problem
from ggtrain.train_loop import RolloutShare, summarize
from ggtrain.train_state import create_train_state
from ggtrain.train_step import make_gradient_fn, metric_means
from graph import compute_advantages_with_diagnostics
from models import load_pretrained
from tests.train_batches import batch_turns, synthetic_turn_batch

ROW_FIELDS = ("group", "traj", "turn", "state", "next_state", "env_reward", "valid")
ESTIMATOR_OPTIONS = [{}, {"episode_weighting": "turn"}, {"mode": "mean"}, {"normalize_distance": True}]


@dataclasses.dataclass
class ThreadHost(HostExchange):
    """One simulated host: its values go through pickle to every other thread, bytes counted as the real
    exchange counts them (each value out once, every peer's value in)."""

    shared: Any = None

    def exchange(self, tag: str, value: Any, timeout_s: float | None = None) -> list[Any]:
        blob = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        self.shared["values"][self.process_index] = blob
        self.shared["barrier"].wait()
        blobs = list(self.shared["values"])
        self.shared["barrier"].wait()  # every host has read this round before the next one overwrites it
        self.rounds[tag] = self.rounds.get(tag, 0) + 1
        self._count(self.sent, tag, len(blob))
        for p, b in enumerate(blobs):
            if p != self.process_index:
                self._count(self.received, tag, len(b))
        return [pickle.loads(b) for b in blobs]


def on_hosts(processes: int, fn: Callable[[HostExchange], Any]) -> list[Any]:
    """``fn(host)`` on ``processes`` simulated hosts at once; their results by process index."""
    shared = {"values": [None] * processes, "barrier": threading.Barrier(processes, timeout=60)}
    hosts = [ThreadHost(p, processes, shared=shared) for p in range(processes)]
    results: list[Any] = [None] * processes
    errors: list[BaseException] = []

    def run(p: int) -> None:
        try:
            results[p] = fn(hosts[p])
        except BaseException as error:  # handed to the test below
            errors.append(error)
            shared["barrier"].abort()

    threads = [threading.Thread(target=run, args=(p,)) for p in range(processes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def deal(turns: list[Turn], processes: int) -> list[list[Turn]]:
    """Each host's turns: group i on host i mod processes (``train_loop.host_share``), in trajectory order."""
    return [[t for t in turns if t.group % processes == p] for p in range(processes)]


def _rows(turns: list[Turn]) -> dict[str, np.ndarray]:
    return {k: np.asarray([getattr(t, k) for t in turns]) for k in ROW_FIELDS}


def _advantages(turns: list[Turn]) -> np.ndarray:
    return compute_advantages_with_diagnostics("graphgpo", _rows(turns))[0] if turns else np.zeros(0, np.float32)


def _epochs(host: HostExchange, turns: list[Turn], rows: int, packing: Packing | None, whole: bool) -> list[Epoch]:
    return host_epochs(host, turns, host_rows(rows, host.process_count), [11, 12], whole, packing)


def _batches(turns: list[Turn], epoch: Epoch) -> list[dict[str, np.ndarray]]:
    return list(collate_plan(turns, epoch.plan, epoch.shape, 0, {"advantages": _advantages(turns)}, epoch.batches))


def _real(batch: dict[str, np.ndarray]) -> list[tuple[int, int]]:
    return list(zip(batch["traj"][batch["row_mask"]].tolist(), batch["turn"][batch["row_mask"]].tolist(), strict=True))


@pytest.fixture(scope="module")
def turns() -> list[Turn]:
    return batch_turns(synthetic_turn_batch(groups=4, trajs_per_group=4, max_turns=5, length=40, seed=3))


@pytest.mark.parametrize("processes", [1, 2, 3, 5])
@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("whole_groups", [False, True])
def test_hosts_agree_on_count_and_shape_and_together_train_every_turn_once(turns, processes, packed, whole_groups):
    """Every host gets the same mini-batch count and shape for each epoch; the k-th mini-batches of all
    hosts together hold every turn exactly once per epoch, each turn with its own group's advantage; a host
    whose own mini-batches run out (or that has no turns at all: 5 hosts, 4 groups) adds padding rows only.
    With one host the batches are ``collate_turns``' own, array for array."""
    # multiples of every host count here; whole groups need a host's share to hold a group's 20 turns
    rows = 120 if whole_groups else 30
    packing = Packing(64, 256, 1) if packed else None
    shares = deal(turns, processes)
    epochs = on_hosts(processes, lambda host: _epochs(host, shares[host.process_index], rows, packing, whole_groups))
    for e in range(2):
        assert len({(mine[e].batches, mine[e].shape) for mine in epochs}) == 1
        per_host = [_batches(share, mine[e]) for share, mine in zip(shares, epochs, strict=True)]
        seen = [key for batches in per_host for batch in batches for key in _real(batch)]
        assert sorted(seen) == sorted((t.traj, t.turn) for t in turns)
        for share, mine, batches in zip(shares, epochs, per_host, strict=True):
            assert len(batches) == mine[e].batches
            assert not any(b["row_mask"].any() for b in batches[len(mine[e].plan) :])  # padding only
            assert sum(len(_real(b)) for b in batches) == len(share)
            if whole_groups:  # a group never spans two of a host's mini-batches
                homes = {g: {i for i, b in enumerate(batches) if g in b["group"][b["row_mask"]]} for g in {0, 1, 2, 3}}
                assert all(len(h) <= 1 for h in homes.values())
        if processes == 1:
            (alone,) = per_host
            expected = collate_turns(
                turns, rows, 11 + e, 0, {"advantages": _advantages(turns)}, whole_groups=whole_groups, packing=packing
            )
            for a, b in zip(alone, expected, strict=True):
                assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("estimator", ["grpo", "gigpo", "graphgpo", "graph_only"])
@pytest.mark.parametrize("options", ESTIMATOR_OPTIONS)
def test_each_groups_advantages_and_the_merged_diagnostics_are_one_hosts_bit_for_bit(estimator, options):
    """Whatever the host count, a group's advantages computed on its host are bit for bit the one-host
    values, and the hosts' scalar graph diagnostics merge into exactly the one-host diagnostics (counts
    add up, relaxation rounds take the most, fractions are rebuilt from numerators and denominators)."""
    turns = batch_turns(synthetic_turn_batch(groups=12, trajs_per_group=8, max_turns=12, length=12, seed=5))
    rng = np.random.default_rng(0)
    turns = [dataclasses.replace(t, env_reward=float(rng.uniform(-1, 10))) for t in turns]  # many significant bits
    whole, whole_diagnostics = compute_advantages_with_diagnostics(estimator, _rows(turns), **options)
    by_key = {(t.traj, t.turn): a for t, a in zip(turns, whole, strict=True)}
    for processes in (2, 3, 4):
        diagnostics = []
        for share in deal(turns, processes):
            mine, own = compute_advantages_with_diagnostics(estimator, _rows(share), **options)
            expected = np.asarray([by_key[t.traj, t.turn] for t in share], np.float32)
            np.testing.assert_array_equal(mine.view(np.uint32), expected.view(np.uint32), err_msg=str(processes))
            diagnostics.append(scalar_diagnostics(own))
        assert merge_diagnostics(diagnostics) == scalar_diagnostics(whole_diagnostics)


def test_a_diagnostic_without_a_merge_rule_is_refused_by_name():
    with pytest.raises(ValueError, match="'mean_distance'"):
        merge_diagnostics([{"nodes": 3, "mean_distance": 1.5}])


def _turn(traj: int, tokens: int) -> Turn:
    return Turn(
        group=traj // 4,
        traj=traj,
        turn=0,
        prompt_ids=list(range(100, 100 + tokens)),
        response_ids=[7] * 8,
        logprobs=np.full(8, -0.5, np.float32),
        env_reward=float(traj % 2),
        valid=True,
        state=0,
        next_state=-1 if traj % 2 else 1,
        policy_version=0,
        action="look",
        response_text="look around the room " * 4,
    )


def iteration(host: HostExchange, summary: HostSummary, turns: list[Turn], packing: Packing | None) -> HostExchange:
    """An iteration's exchanges before the update: the rollout summary, then the mini-batch layout."""
    host.exchange("rollout_summary", summary)
    _epochs(host, turns, 32, packing, whole=False)
    return host


@pytest.mark.parametrize("packed", [False, True])
def test_what_crosses_hosts_does_not_grow_with_the_turns_tokens(packed):
    """The summary and the layout integers are all a host sends about its rollout: 16 turns of 12 or of
    1,500 prompt tokens each send the same bytes (within a few for larger integers), far fewer than one
    byte per token, and far below what sending the turns themselves took (the old exchange's pickle)."""
    sent = {}
    for tokens in (12, 1500):
        share = [_turn(traj, tokens) for traj in range(16)]
        played = RolloutShare(share, [Episode(t.group, t.traj, "g", bool(t.env_reward), 1, 0) for t in share], [], 0)
        summary = summarize(played, compute_advantages_with_diagnostics("graphgpo", _rows(share))[1])
        packing = Packing(2048, 4096, 1) if packed else None
        host, _ = on_hosts(2, lambda h, s=summary, t=share, p=packing: iteration(h, s, t, p))
        sent[tokens] = sum(host.sent.values())
        old = len(pickle.dumps(played, protocol=pickle.HIGHEST_PROTOCOL))  # what the turns' exchange sent
        assert old > 50 * sent[tokens] if tokens > 1000 else old > sent[tokens]
    assert abs(sent[1500] - sent[12]) <= 16
    assert sent[1500] < 16 * 1500 / 20  # under a byte per 20 tokens


@pytest.fixture(scope="module")
def tiny(tiny_qwen2_dir):
    return load_pretrained(tiny_qwen2_dir)


def _config(loss: str, rows: int, packed: bool) -> TrainConfig:
    return TrainConfig(
        loss=LossConfig(name=loss, kl_coef=0.01),
        optimizer=OptimizerConfig(learning_rate=1e-3),
        batch=BatchConfig(mini_batch_rows=rows, micro_batch_rows=rows // 4, packing=packed, pack_length=64),
    )


@pytest.mark.parametrize("loss", ["ppo_clip", "ggpo"])
@pytest.mark.parametrize("packed", [False, True])
def test_one_mini_batch_made_of_two_hosts_rows_updates_like_one_host(tiny, turns, loss, packed):
    """With one mini-batch per epoch, the global batch assembled from two hosts' shares (each host's block
    of rows, padding included, as ``shard_batch`` places them) gives the one-host gradient, loss and
    token count: the padding trains nothing because every normalizer is a sum over the global batch."""
    rows = 96  # all 4 groups' turns fit one mini-batch, each host's 2 groups its 48 rows
    assert len(turns) <= rows and max(len(s) for s in deal(turns, 2)) <= rows // 2
    config = _config(loss, rows, packed)
    whole = loss == "ggpo"
    shares = deal(turns, 2)

    def share_of(host: HostExchange) -> dict[str, np.ndarray]:
        packing = packing_of(config.batch, 4, host.process_count)  # 4 row shards, 2 on each host
        (epoch,) = host_epochs(host, shares[host.process_index], host_rows(rows, 2), [7], whole, packing)
        (batch,) = _batches(shares[host.process_index], epoch)
        return batch

    blocks = on_hosts(2, share_of)
    global_batch = {k: np.concatenate([b[k] for b in blocks]) for k in blocks[0]}
    (alone,) = on_hosts(
        1,
        lambda host: _batches(
            turns,
            host_epochs(host, turns, rows, [7], whole, packing_of(config.batch, 4))[0],
        )[0],
    )
    gradients = jax.jit(make_gradient_fn(tiny.config, config))
    params = jax.tree_util.tree_map(jnp.copy, tiny.params)
    state = create_train_state(params, make_optimizer(config.optimizer), jax.random.PRNGKey(0))
    results = []
    for batch in (alone, global_batch):
        batch = {k: jnp.asarray(v) for k, v in batch.items() if k not in ("positions", "policy_version")}
        results.append(gradients(state, batch))
    (g1, m1, _), (g2, m2, _) = results
    diff = optax.tree.norm(jax.tree_util.tree_map(jnp.subtract, g2, g1)) / optax.tree.norm(g1)
    assert float(diff) <= 1e-5 and float(optax.tree.norm(g1)) > 0
    one, two = metric_means(m1), metric_means(m2)
    assert one["tokens"] == two["tokens"] and one["rows"] == two["rows"] == len(turns)
    name = "ggpo_loss" if loss == "ggpo" else "loss"
    assert two[name] == pytest.approx(one[name], rel=1e-5, abs=1e-7)


def test_each_host_must_hold_its_own_block_of_rows():
    """Two hosts x 2 devices: data 4 gives each host its own 2 row shards; tensor 4 (data 1) gives both
    hosts the same (only) row, and a device order that interleaves hosts gives neither a block."""
    assert rows_stay_home_problem({0: [0, 1], 1: [2, 3]}, 4) == ""
    assert rows_stay_home_problem({0: [2, 3], 1: [0, 1]}, 4) == ""  # any order of blocks
    assert "process 0 holds row shards [0] of 1, not its own" in rows_stay_home_problem({0: [0], 1: [0]}, 1)
    assert "process 0 holds row shards [0, 2] of 4" in rows_stay_home_problem({0: [0, 2], 1: [1, 3]}, 4)
    mesh = make_mesh(MeshConfig(data=2, fsdp=2, tensor=2))  # one process: every shard is its own
    assert process_row_blocks(mesh) == {0: [0, 1, 2, 3]}
    check_rows_stay_home(mesh)
