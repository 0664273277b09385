"""End to end on real ALFWorld games (slow; run in CI): the quickstart's path (its config, the tiny-alfworld
tokenizer and architecture, the step-0 evaluation) and the SmolLM2 path with the reference tag format."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.child_env import child_env

ROOT = Path(__file__).resolve().parents[1]
SMALL = [
    "TrainConfig.iterations=1",
    "RolloutConfig.groups_per_iteration=1",
    "RolloutConfig.group_size=2",
    "RolloutConfig.max_turns=2",
    "EvalConfig.games=2",
    "EvalConfig.max_turns=2",
    "BatchConfig.mini_batch_rows=4",
    "BatchConfig.micro_batch_rows=2",
]


def _train(run: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "ggtrain.cli", "train", "--run-dir", str(run), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env=child_env(**(env or {})),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _sets(*bindings: str) -> list[str]:
    return [x for b in bindings for x in ("--set", b)]


@pytest.mark.slow
def test_quickstart_path_on_two_real_games(tmp_path):
    """The quickstart config from an empty cache, as on a fresh clone: the shipped warm start installed by
    its alias, evaluated, updated and evaluated again (the build itself is tested in
    test_tiny_alfworld_build.py)."""
    from env_bridge.games import TASK_TYPES, discover_games
    from ggtrain.policies.tiny_alfworld import recipe_hash, shipped_dir

    run, cache = tmp_path / "run", tmp_path / "cache"
    proc = _train(run, *_sets(*SMALL, "RolloutConfig.log_turns=True"), env={"GGTRAIN_CACHE": str(cache)})
    assert "eval at step 0" in proc.stderr and "iter 1/1" in proc.stderr
    installed = cache / "models" / f"tiny-alfworld-{recipe_hash()}"
    assert (installed / "model.safetensors").read_bytes() == (shipped_dir() / "model.safetensors").read_bytes()
    assert not (installed / "sft_run").exists()  # copied, not built
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if "eval/success_rate" in m] == [0, 1]
    for name in ("iteration_0000.jsonl", "iteration_0001.jsonl"):
        outcomes = [json.loads(x) for x in (run / "eval" / name).read_text().splitlines()]
        assert [o["step"] for o in outcomes] == [int(name[10:14])] * 2
        assert {o["split"] for o in outcomes} == {"valid_seen"}
        assert len({o["task_type"] for o in outcomes}) == 2  # the evaluation games interleave task types
    turns = [json.loads(x) for x in (run / "turns" / "iteration_0001.jsonl").read_text().splitlines()]
    train_games = {g.game_id for g in discover_games("train")}
    (trained,) = [m for m in metrics if "train/graph/rows" in m]
    assert len(turns) == trained["train/graph/rows"] and {t["traj"] for t in turns} == {0, 1}
    for t in turns:  # each turn names its real game and task type
        assert t["task_type"] in TASK_TYPES and t["game_id"].startswith(t["task_type"] + "-"), t
        assert t["game_id"] in train_games, t["game_id"]
    config = json.loads((run / "config.json").read_text())
    assert {"estimator", "seed", "iterations", "data_dir", "model", "rollout", "eval", "loss"} <= set(config)
    assert config["rollout"]["action_format"] == "tags"


@pytest.mark.slow
def test_smollm2_path_on_real_games(tmp_path, smollm_dir):
    run = tmp_path / "run"
    proc = _train(run, "--config", "smollm2_alfworld", *_sets(*SMALL, "RolloutConfig.max_new_tokens=24"))
    assert "iter 1/1" in proc.stderr
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["model_files"]["sha256"]["model.safetensors"]
    assert set(manifest["game_lists"]) == {"train", "eval:valid_seen"}
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    train = [m for m in metrics if "train/success_rate" in m]
    assert len(train) == 1 and train[0]["train/graph/trajectories"] == 2.0
    assert len((run / "eval" / "iteration_0001.jsonl").read_text().splitlines()) == 2
