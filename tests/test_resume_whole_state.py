"""Resume restores the whole state: GGPO on the built-in ring world through the real command line, a run
killed at the start of iteration 3 (after a reference refresh and a behavior sync) and resumed in a new
process ends bit for bit where an uninterrupted run ends: learner, reference, behavior, Adam moments,
step, PRNG key, and the iteration (the rollout position) with its metrics and evaluation outcomes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from ggtrain.metrics import LOSS
from tests.child_env import child_env

ROOT = Path(__file__).resolve().parents[1]
STEPS_PER_ITERATION = 6  # 6 task groups of 4 trajectories, one whole group per 48-row mini-batch
BINDINGS = [
    "RolloutConfig.groups_per_iteration=6",
    "RolloutConfig.group_size=4",
    "RolloutConfig.max_turns=12",
    "BatchConfig.mini_batch_rows=48",
    "BatchConfig.micro_batch_rows=24",
    "OptimizerConfig.learning_rate=1e-4",
    # over 18 steps, killed after 12: the reference is refreshed at step 10 and the behavior policy synced
    # at 11, and neither again, so the final state holds the very reference and behavior the resume restored
    "PolicyConfig.reference_refresh_every=10",
    "PolicyConfig.behavior_sync_every=11",
    "TrainConfig.iterations=3",
    "EvalConfig.games=2",
    "EvalConfig.max_turns=2",
    "CheckpointConfig.async_save=False",
    "CheckpointConfig.keep_last=3",
    "RolloutConfig.log_turns=True",
]
TIMINGS = {"time", "train/rollout_s", "train/update_s", "train/iteration_s", "train/advantage_ms"}
TIMINGS |= {"train/step_time_s", "train/tokens_per_s"}


def _train(*args: str, fault: str = "") -> subprocess.Popen:
    sets = [x for b in BINDINGS for x in ("--set", b)]
    cmd = [sys.executable, "-m", "ggtrain.cli", "train", "--config", "ggpo", "--config", "builtin_ring", *sets, *args]
    env = child_env()  # one device; the session's compilation cache: the three processes compile the same programs
    env.pop("GGTRAIN_FAULT_INJECT", None)
    if fault:
        env["GGTRAIN_FAULT_INJECT"] = fault
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(child: subprocess.Popen) -> tuple[int, str]:
    _, err = child.communicate(timeout=400)
    return child.returncode, err


def _checkpoint(run: Path, step: int) -> tuple[dict[str, np.ndarray], dict]:
    """Every leaf of the saved train state by path, and the checkpoint's JSON record."""
    import orbax.checkpoint as ocp

    path = run / "checkpoints" / str(step)
    checkpointer = ocp.StandardCheckpointer()
    tree = checkpointer.metadata(path / "state").item_metadata.tree
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    abstract = jax.tree_util.tree_map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=device), tree)
    state = checkpointer.restore(path / "state", abstract)
    return _keyed(state), json.loads((path / "record" / "metadata").read_text())


def _keyed(tree: object) -> dict[str, np.ndarray]:
    return {jax.tree_util.keystr(k): np.asarray(v) for k, v in jax.tree_util.tree_leaves_with_path(tree)}


def _policy(leaves: dict[str, np.ndarray], name: str) -> list[np.ndarray]:
    return [v for k, v in sorted(leaves.items()) if k.startswith(f"['{name}']")]


def _differ(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return any(not np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def _metrics(run: Path) -> list[dict]:
    return [
        {k: v for k, v in m.items() if k not in TIMINGS}
        for m in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
    ]


@pytest.mark.slow
def test_a_killed_ggpo_run_resumed_in_a_new_process_ends_bit_for_bit_like_an_uninterrupted_one(tmp_path):
    from ggtrain.policies.tiny_ring import tiny_ring_dir
    from models import load_pretrained

    tiny_ring_dir()  # built once into the cache, outside the launched processes
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    children = [_train("--run-dir", str(straight)), _train("--run-dir", str(killed), fault="exit@0:3")]
    (code_straight, err_straight), (code_killed, err_killed) = map(_finish, children)
    assert code_straight == 0, err_straight[-3000:]
    assert code_killed == 7 and "injected fault 'exit' at iteration 3" in err_killed, err_killed[-3000:]
    assert sorted(int(p.name) for p in (killed / "checkpoints").iterdir() if p.name.isdigit()) == [1, 2]

    # what the killed run left: four distinct parameter sets, so each must come back from the checkpoint
    at_kill, _ = _checkpoint(killed, 2)
    assert int(at_kill["['step']"]) == 2 * STEPS_PER_ITERATION
    learner, reference, behavior = (_policy(at_kill, n) for n in ("params", "ref_params", "behavior_params"))
    start = [v for _, v in sorted(_keyed(load_pretrained(tiny_ring_dir()).params).items())]
    assert _differ(learner, start) and _differ(reference, start) and _differ(behavior, start)
    assert _differ(reference, learner) and _differ(behavior, learner) and _differ(behavior, reference)

    assert sorted(p.name for p in (killed / "turns").iterdir()) == ["iteration_0001.jsonl", "iteration_0002.jsonl"]
    # as a crash after logging an iteration but before its checkpoint would leave them
    for stale in ("iteration_0003.jsonl", "iteration_0004.jsonl", "iteration_0002.jsonl.tmp"):
        (killed / "turns" / stale).write_text("stale\n")

    (code, err) = _finish(_train("--resume", str(killed)))
    assert code == 0, err[-3000:]
    assert f"resumed {killed} at iteration 2" in err
    logged = sorted(p.name for p in (straight / "turns").iterdir())
    assert logged == [f"iteration_000{i}.jsonl" for i in (1, 2, 3)]
    assert sorted(p.name for p in (killed / "turns").iterdir()) == logged
    for name in logged:
        assert (killed / "turns" / name).read_bytes() == (straight / "turns" / name).read_bytes(), name

    final_straight, record_straight = _checkpoint(straight, 3)
    final_resumed, record_resumed = _checkpoint(killed, 3)
    assert int(final_straight["['step']"]) == 3 * STEPS_PER_ITERATION
    assert sorted(final_resumed) == sorted(final_straight)
    assert any("['opt_state']" in k for k in final_straight) and "['rng']" in final_straight
    for name, value in final_straight.items():
        np.testing.assert_array_equal(final_resumed[name], value, err_msg=name)
    assert record_resumed == record_straight and record_straight["iteration"] == 3
    # no refresh or sync after the kill: the final reference and behavior are those the resume restored
    assert not _differ(_policy(final_resumed, "ref_params"), reference)
    assert not _differ(_policy(final_resumed, "behavior_params"), behavior)
    assert _differ(_policy(final_resumed, "params"), learner)
    # the resumed iteration played the same rollout (games, seeds, behavior policy) and trained on it
    assert _metrics(killed) == _metrics(straight)
    resumed_iteration = [m for m in _metrics(killed) if LOSS in m][-1]
    assert resumed_iteration["train/ggpo_kept_groups"] > 0 and resumed_iteration["train/ggpo_abs_log_ratio"] > 0
    outcomes = "eval/iteration_0003.jsonl"
    assert (killed / outcomes).read_text() == (straight / outcomes).read_text()
    _assert_turn_log_is_what_the_estimator_saw_and_gave(straight)


def _assert_turn_log_is_what_the_estimator_saw_and_gave(run: Path) -> None:
    """Each iteration's turn log holds the iteration's rows and outcomes (as its metrics count them) and
    the advantages the estimator gives those rows."""
    from graph import compute_advantages_with_diagnostics

    config = json.loads((run / "config.json").read_text())
    metrics = {m["step"]: m for m in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())}
    nonzero = 0
    for step in (1, 2, 3):
        records = [json.loads(x) for x in (run / "turns" / f"iteration_{step:04d}.jsonl").read_text().splitlines()]
        assert {r["iteration"] for r in records} == {step} and len(records) == metrics[step]["train/graph/rows"]
        won = {r["traj"]: r["won"] for r in records}
        assert sum(won.values()) / len(won) == metrics[step]["train/success_rate"]
        assert all(r["game_id"].startswith("builtin:") and r["task_type"] == "" for r in records)
        rows = {k: np.asarray([r[k] for r in records]) for k in ("group", "traj", "turn", "state", "next_state")}
        rows |= {"env_reward": np.asarray([r["env_reward"] for r in records], np.float32)}
        rows |= {"valid": np.asarray([r["valid"] for r in records])}
        expected, _ = compute_advantages_with_diagnostics(config["estimator"], rows, **config["advantage"])
        np.testing.assert_array_equal(np.float32([r["advantage"] for r in records]), np.asarray(expected))
        nonzero += int(np.count_nonzero(expected))
    assert nonzero > 0  # the comparison above compared real credit, not zeros
