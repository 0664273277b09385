"""End to end on 2 real ALFWorld games with SmolLM2-135M-Instruct (slow; runs in CI)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_quickstart_path_on_real_games(tmp_path, smollm_dir):
    run = tmp_path / "run"
    sets = [
        "TrainConfig.iterations=1",
        "RolloutConfig.group_size=2",
        "RolloutConfig.max_turns=2",
        "RolloutConfig.max_new_tokens=24",
        "EvalConfig.games=2",
        "EvalConfig.max_turns=2",
        "BatchConfig.mini_batch_rows=4",
        "BatchConfig.micro_batch_rows=2",
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "ggtrain.cli", "train", "--run-dir", str(run), *[x for s in sets for x in ("--set", s)]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env=os.environ | {"XLA_FLAGS": "--xla_force_host_platform_device_count=1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "iter 1/1" in proc.stderr
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["model_files"]["sha256"]["model.safetensors"]
    assert set(manifest["game_lists"]) == {"train", "eval:valid_seen"}
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    train = [m for m in metrics if "train/success_rate" in m]
    assert len(train) == 1 and train[0]["train/graph/trajectories"] == 2.0
    assert len((run / "eval" / "iteration_0001.jsonl").read_text().splitlines()) == 2
