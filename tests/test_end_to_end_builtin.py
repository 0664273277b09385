"""End to end on the built-in environment with a tiny random model: train -> checkpoint -> SIGTERM ->
resume -> eval -> report, through the real command line in child processes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.child_env import child_env
from tests.test_report import C0, pixels_of, png_pixels

ROOT = Path(__file__).resolve().parents[1]
# Wilson 95 % intervals (z = 1.96) of k wins in 4 episodes, from the closed form
WILSON95_OF_4 = {0: (0.0, 0.4899), 1: (0.0456, 0.6994), 2: (0.1500, 0.8500), 3: (0.3006, 0.9544), 4: (0.5101, 1.0)}
BINDINGS = [
    "ModelSpec.path='tiny-random'",
    "ModelSpec.remat=False",
    "RolloutConfig.env='builtin'",
    "RolloutConfig.groups_per_iteration=2",
    "RolloutConfig.group_size=4",
    "RolloutConfig.max_turns=3",
    "RolloutConfig.max_new_tokens=16",
    "RolloutConfig.max_prompt_tokens=512",
    "BatchConfig.mini_batch_rows=8",
    "BatchConfig.micro_batch_rows=4",
    "EvalConfig.games=2",
    "EvalConfig.every=0",
    "EvalConfig.max_turns=2",
    "CheckpointConfig.async_save=False",
]


def _cmd(*args: str, iterations: int) -> list[str]:
    sets = [x for b in [*BINDINGS, f"TrainConfig.iterations={iterations}"] for x in ("--set", b)]
    return [sys.executable, "-m", "ggtrain.cli", *args, "--config", "graphgpo", *sets]


def _run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_train_sigterm_resume_eval(tmp_path):
    from models.zoo import tiny_random_dir

    tiny_random_dir()  # build the cached model once, outside the timed child
    run = tmp_path / "run"
    child = subprocess.Popen(
        _cmd("train", "--run-dir", str(run), iterations=50),
        cwd=ROOT,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 240
    while time.time() < deadline and not (run / "checkpoints" / "1").exists():
        time.sleep(0.5)
    assert (run / "checkpoints" / "1").exists(), child.stderr.read() if child.poll() is not None else "no checkpoint"
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=240)
    assert child.returncode == 143, err  # 128 + SIGTERM: not finished, so a scheduler requeues it
    assert "SIGTERM" in err and "--resume" in err
    done = sorted(int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit())
    assert done and done[-1] < 50
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["events"][-1]["kind"] == "interrupted" and manifest["events"][-1]["iteration"] == done[-1]
    assert manifest["ended"] is None

    resumed = _run(
        _cmd("train", "--resume", str(run), iterations=done[-1] + 1),
        400,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed {run} at iteration {done[-1]}" in resumed.stderr
    steps = [
        json.loads(line)["step"]
        for line in (run / "metrics.jsonl").read_text().splitlines()
        if "train/success_rate" in line
    ]
    assert steps == list(range(1, done[-1] + 2))  # each iteration logged once, none repeated or skipped
    manifest = json.loads((run / "manifest.json").read_text())
    restarts = [e for e in manifest["events"] if e["kind"] == "restart"]
    assert len(restarts) == 1 and restarts[0]["git"] == manifest["git"]  # the code each start ran
    for key in ("packages", "jax", "git", "model_files", "game_lists", "config", "seeds", "command", "started"):
        assert manifest[key], key
    assert manifest["ended"]
    # the seeds the run used, by name, with their rules (ggtrain.seeds)
    assert manifest["seeds"]["base"] == 0 and "100003" in manifest["seeds"]["environment"]
    assert manifest["seeds"]["evaluation"]["seeds"] == [0]

    evaluated = _run(
        [
            sys.executable,
            "-m",
            "ggtrain.cli",
            "eval",
            "--run",
            str(run),  # the run's own config.json: a built-in-world run is evaluated on the built-in world
            "--set",
            "EvalConfig.max_turns=2",
            "--games",
            "2",
            "--seeds",
            "0",
            "1",
        ],
        400,
    )
    assert evaluated.returncode == 0, evaluated.stderr
    summary = json.loads(evaluated.stdout.strip().splitlines()[-1])
    assert summary["episodes"] == 4 and list(summary["per_task_type"]) == ["builtin"]
    (written,) = (run / "eval").glob("valid_seen-step*.jsonl")  # beside, not over, the training outcomes
    outcomes = [json.loads(x) for x in written.read_text().splitlines()]
    wins = sum(o["won"] for o in outcomes)
    assert summary["success_rate"] == wins / 4
    np.testing.assert_allclose(summary["wilson95"], WILSON95_OF_4[wins], atol=1e-4)
    assert len(outcomes) == 4 and {"game_id", "seed", "won", "turns", "invalid_actions"} <= set(outcomes[0])
    assert {o["split"] for o in outcomes} == {"valid_seen"} and {o["step"] for o in outcomes} == {done[-1] + 1}
    assert max(o["turns"] for o in outcomes) <= 2
    refused = _run([sys.executable, "-m", "ggtrain.cli", "eval", "--run", str(run), "--config", "grpo"], 120)
    assert refused.returncode == 2 and "own config.json" in refused.stderr

    reported = _run(
        [sys.executable, "-m", "ggtrain.cli", "report", str(run), "--out", str(tmp_path / "report")],
        120,
    )
    assert reported.returncode == 0, reported.stderr
    report = (tmp_path / "report" / "report.md").read_text()
    assert "| graphgpo | 1 |" in report and "![success curves](success_curves.png)" in report
    curves = png_pixels(tmp_path / "report" / "success_curves.png", (4 * 120, 11 * 120))
    assert pixels_of(curves[:, : curves.shape[1] // 2], C0) > 100  # the training success curve is drawn


def test_configuration_errors_exit_nonzero_with_one_line_and_write_nothing(tmp_path):
    cases = [
        (["--set", "RolloutConfig.max_turn=3"], "max_turn"),
        (["--set", "RolloutConfig.max_turns='three'"], "RolloutConfig.max_turns"),
        (["--set", "ModelSpec.path='/no/such/model'"], "/no/such/model"),
        (["--set", "TrainConfig.data_dir='/no/such/data'"], "/no/such/data"),
    ]
    for extra, expected in cases:
        run = tmp_path / expected.replace("/", "_")
        proc = _run(
            [sys.executable, "-m", "ggtrain.cli", "train", "--config", "quickstart", "--run-dir", str(run), *extra],
            120,
        )
        assert proc.returncode == 2, (extra, proc.stderr)
        lines = [x for x in proc.stderr.splitlines() if x.strip()]
        assert len(lines) == 1 and expected in lines[0], (extra, proc.stderr)
        assert not run.exists()


def test_resume_refuses_a_changed_configuration_before_writing(tmp_path):
    """A run directory's config.json is the truth: --resume with another estimator or learning rate is
    refused by name (exit 2) and leaves config.json untouched; another --run-dir is refused too."""
    run = tmp_path / "run"
    run.mkdir()
    from ggtrain.config import config_file, config_to_dict, resolve_config

    config = resolve_config([config_file("graphgpo"), config_file("builtin_ring")])
    (run / "config.json").write_text(json.dumps(config_to_dict(config), indent=2, sort_keys=True) + "\n")
    before = (run / "config.json").read_text()
    base = ["--config", "graphgpo", "--config", "builtin_ring", "--resume", str(run)]
    for extra, expected in [
        (["--config", "grpo"], "estimator: 'graphgpo' -> 'grpo'"),
        (["--set", "OptimizerConfig.learning_rate=0.1"], "optimizer.learning_rate: 0.003 -> 0.1"),
        (["--run-dir", str(tmp_path / "other")], "a run continues in its own directory"),
    ]:
        proc = _run([sys.executable, "-m", "ggtrain.cli", "train", *base, *extra], 120)
        assert proc.returncode == 2 and expected in proc.stderr, proc.stderr
    assert (run / "config.json").read_text() == before and sorted(p.name for p in run.iterdir()) == ["config.json"]
