"""Multi-host runs on one machine: 2 processes x 2 CPU devices joined by jax.distributed (gloo collectives)
against 1 process x 4 devices, a restore onto 1 process, and a hung or dead peer stopping the others.
Each host keeps its own turns (``ggtrain.host_batches``): only small values cross, counted in bytes.

Every run goes through the real command line (``ggtrain train``) on the built-in world with ``tiny-ring``.
"""

from __future__ import annotations

import json
import pickle
import socket
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from ggtrain.metrics import LOSS
from ggtrain.policies.tiny_ring import tiny_ring_dir
from models import load_pretrained
from tests.child_env import child_env

ROOT = Path(__file__).resolve().parents[1]
LEARNING_RATE = 3e-3
BINDINGS = [
    "RolloutConfig.groups_per_iteration=4",
    "RolloutConfig.group_size=4",
    "RolloutConfig.max_turns=8",
    "TrainConfig.iterations=2",
    "BatchConfig.mini_batch_rows=16",
    "BatchConfig.micro_batch_rows=8",
    "EvalConfig.games=4",
    "EvalConfig.every=0",
    "EvalConfig.max_turns=4",
    "CheckpointConfig.async_save=False",
    "CheckpointConfig.keep_last=3",
    f"OptimizerConfig.learning_rate={LEARNING_RATE}",
]


# one mini-batch per epoch (every turn of an iteration fits: 4 groups x 4 x 8 turns; each host's 2 groups
# its 64 rows), two epochs: then the two-process update is the one-process update
ONE_MINI_BATCH = ("--set", "BatchConfig.mini_batch_rows=128", "--set", "BatchConfig.epochs=2")
# process 0's bytes per iteration (sent + received) when every host's turns crossed (commit f21f614, the
# exchange of every turn, these bindings and ONE_MINI_BATCH): 37,871 in iteration 1, 38,189 in iteration 2
TURNS_EXCHANGED_BYTES = (37_871, 38_189)
SMALL_TAGS = {"run_dir", "rollout_summary", "batch_needs", "packing_bins", "eval", "stop"}


@pytest.fixture(scope="module", autouse=True)
def _tiny_ring() -> None:
    tiny_ring_dir()  # built once into the cache, outside the launched processes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return int(s.getsockname()[1])


def _launch(
    run: Path, processes: int, devices: int, *extra: str, env: dict[str, str] | None = None
) -> list[subprocess.Popen]:
    sets = [x for b in BINDINGS for x in ("--set", b)]
    cmd = [sys.executable, "-m", "ggtrain.cli", "train", "--config", "graphgpo", "--config", "builtin_ring", *sets]
    cmd += list(extra) if "--resume" in extra else ["--run-dir", str(run), *extra]
    base = child_env(devices, **(env or {}))
    if processes == 1:
        return [subprocess.Popen(cmd, cwd=ROOT, env=base, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)]
    port = _free_port()
    return [
        subprocess.Popen(
            [*cmd, "--coordinator", f"localhost:{port}", "--num-processes", str(processes), "--process-id", str(i)],
            cwd=ROOT,
            env=base,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(processes)
    ]


def _finish(children: list[subprocess.Popen], timeout: float) -> list[tuple[int, str]]:
    out = []
    deadline = time.time() + timeout
    for child in children:
        try:
            _, err = child.communicate(timeout=max(deadline - time.time(), 1))
        except subprocess.TimeoutExpired:
            child.kill()
            _, err = child.communicate()
            out.append((None, err))
            continue
        out.append((child.returncode, err))
    return out


def _state(run: Path, step: int) -> dict:
    import orbax.checkpoint as ocp

    path = run / "checkpoints" / str(step) / "state"
    checkpointer = ocp.StandardCheckpointer()
    tree = checkpointer.metadata(path).item_metadata.tree
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    abstract = jax.tree_util.tree_map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=device), tree)
    return checkpointer.restore(path, abstract)


def _metrics(run: Path) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [m for m in map(json.loads, lines) if LOSS in m]


@pytest.mark.slow
def test_two_hosts_train_like_one_and_restore_on_one(tmp_path):
    single, multi = tmp_path / "one_process", tmp_path / "two_processes"
    ((code, err),) = _finish(_launch(single, 1, 4, *ONE_MINI_BATCH), 300)
    assert code == 0, err[-3000:]
    results = _finish(_launch(multi, 2, 2, *ONE_MINI_BATCH), 300)
    for i, (code, err) in enumerate(results):
        assert code == 0, f"process {i}: {err[-3000:]}"

    # same rollouts (success, turns, advantages) and the same updates, step by step
    one, two = _metrics(single), _metrics(multi)
    assert [m["step"] for m in one] == [m["step"] for m in two] == [1, 2]
    for a, b in zip(one, two, strict=True):
        for key in ("train/success_rate", "train/mean_turns", "train/invalid_action_rate", "train/graph/nodes"):
            assert a[key] == b[key], key
        for key in (LOSS, "train/grad_norm", "train/advantage_abs_mean"):
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-7), key
    assert sum(m["train/advantage_abs_mean"] for m in one) > 0  # the updates were not empty
    a, b = _state(single, 2), _state(multi, 2)
    assert int(a["step"]) == int(b["step"]) == 4  # 2 iterations x 2 epochs x one mini-batch
    moved = []
    for x, y, x0 in zip(
        jax.tree_util.tree_leaves(a["params"]),
        jax.tree_util.tree_leaves(b["params"]),
        jax.tree_util.tree_leaves(_state(single, 1)["params"]),
        strict=True,
    ):
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        # the all-reduce runs in a different order over gloo; Adam turns that fp32 noise on near-zero
        # gradients into at most a small fraction of one step's move (lr)
        assert np.max(np.abs(x - y)) <= 0.1 * LEARNING_RATE
        moved.append(np.max(np.abs(x - np.asarray(x0, np.float64))))
    assert max(moved) > LEARNING_RATE  # training moved the parameters far more than the tolerance
    manifest = json.loads((multi / "manifest.json").read_text())
    assert manifest["jax"]["process_count"] == 2
    # only small values crossed: a few hundred bytes per iteration, where every host's turns took ~38 kB
    moved = [m["train/exchange_sent_bytes"] + m["train/exchange_received_bytes"] for m in two]
    print(f"process 0's bytes per iteration: turns exchanged {TURNS_EXCHANGED_BYTES}, rows at home {moved}")
    assert all(m < before / 20 for m, before in zip(moved, TURNS_EXCHANGED_BYTES, strict=True)), moved
    traffic = manifest["host_exchange"]
    assert set(traffic) <= SMALL_TAGS and traffic["rollout_summary"]["rounds"] == 2, traffic
    assert all(m["train/exchange_sent_bytes"] == 0 for m in one)  # one process exchanges with itself only
    # evaluation: each host plays its share, process 0 writes all of them, in order, as one host would
    (outcomes,) = (multi / "eval").glob("*.jsonl")
    assert outcomes.read_text().splitlines() == (single / "eval" / outcomes.name).read_text().splitlines()
    assert len(outcomes.read_text().splitlines()) == 4

    # the 2-process checkpoint restores onto 1 process (another mesh) and training continues
    resume = ("--resume", str(multi), "--set", "TrainConfig.iterations=3", *ONE_MINI_BATCH)
    ((code, err),) = _finish(_launch(multi, 1, 2, *resume), 300)
    assert code == 0, err[-3000:]
    assert f"resumed {multi} at iteration 2" in err
    assert [m["step"] for m in _metrics(multi)] == [1, 2, 3]


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["hang", "exit"])
def test_a_hung_or_dead_peer_stops_the_others_by_name(tmp_path, fault):
    run = tmp_path / "run"
    started = time.time()
    children = _launch(run, 2, 2, "--peer-timeout", "20", env={"GGTRAIN_FAULT_INJECT": f"{fault}@1:2"})
    (code0, err0), (code1, err1) = _finish(children, 240)
    assert time.time() - started < 200
    assert f"injected fault {fault!r} at iteration 2" in err1
    assert code0 not in (0, None), err0[-3000:]
    # our exchange names the peer; a peer that died may instead be reported first by the runtime's heartbeat
    named = "process 1 did not reach 'rollout" in err0 or "stopped sending heartbeats):\n1\n" in err0
    assert named, err0[-3000:]
    assert code1 not in (0, None)  # the hung process is ended too (the coordination service is gone with process 0)
    # the last completed iteration's checkpoint is intact: the only one, it restores whole, holds every
    # optimizer step iteration 1 took and trained parameters. Each host's 8 rows of a 16-row mini-batch:
    # as many steps as the host with more turns needs (at least ceil(turns / 16), at most ceil(turns / 8)),
    # the other host's share of the extra steps padding, so every turn is trained once and no more
    assert sorted(int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit()) == [1]
    state = _state(run, 1)
    (first,) = _metrics(run)
    turns = round(first["train/mean_turns"] * 16)  # 4 groups x 4 episodes
    steps = int(state["step"])
    assert -(-turns // 16) <= steps <= -(-turns // 8) and first["step"] == 1
    assert round(first["train/rows"] * steps) == turns
    leaves = jax.tree_util.tree_leaves(state)
    assert all(np.all(np.isfinite(np.asarray(x))) for x in leaves if np.issubdtype(x.dtype, np.floating))
    start = jax.tree_util.tree_leaves(load_pretrained(tiny_ring_dir()).params)
    trained = jax.tree_util.tree_leaves(state["params"])
    moved = [np.max(np.abs(np.asarray(a) - np.asarray(b))) for a, b in zip(trained, start, strict=True)]
    assert max(moved) > 0.5 * LEARNING_RATE


def test_exchange_gathers_large_values_and_drops_earlier_rounds():
    port = _free_port()
    env = child_env()
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.multihost_exchange_worker", str(port), str(i)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    for i, child in enumerate(children):
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err[-2000:]
        report = json.loads(out.strip().splitlines()[-1])
        keys = report["keys"]
        # only the last round is kept (3 MB in 1 MB pieces plus a count, per process)
        assert {k.split("/")[2] for k in keys} == {"2"}, (i, keys)
        assert len(keys) == 2 * 5
        # every round's value (3 MB and its pickle framing) counted once going out and once per peer coming in
        t = report["traffic"]["t"]
        assert t["rounds"] == 3 and t["sent_bytes"] == t["received_bytes"]
        assert 3 * (3 << 20) < t["sent_bytes"] < 3 * ((3 << 20) + 200)
        assert report["traffic"]["sync"]["sent_bytes"] == len(pickle.dumps(None, protocol=pickle.HIGHEST_PROTOCOL))


def test_advantages_of_whole_groups_do_not_depend_on_which_host_holds_them():
    from graph import compute_advantages
    from tests.synthetic_data import ROW_FIELDS
    from tests.train_batches import synthetic_turn_batch

    batch = synthetic_turn_batch(groups=4, trajs_per_group=4, max_turns=5, seed=3)
    rows = {k: batch[k] for k in ROW_FIELDS if k != "row_mask"}
    for estimator in ("grpo", "gigpo", "graphgpo", "graph_only"):
        whole = compute_advantages(estimator, rows)
        for host_groups in ([0, 2], [1, 3]):
            keep = np.isin(rows["group"], host_groups)
            part = compute_advantages(estimator, {k: v[keep] for k, v in rows.items()})
            np.testing.assert_array_equal(part, whole[keep], err_msg=estimator)  # bit for bit
