"""``OptimizerConfig.skip_zero_advantage_steps``: an iteration whose advantages are all 0 takes no optimizer
step, though a KL term would have given it a gradient; without the option the same iteration takes its
steps. Built-in ring world, tiny random model, one turn per episode: no episode can win, and with no
invalid-action penalty every advantage is 0."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.test_end_to_end_builtin import _run

BINDINGS = [
    "ModelSpec.path='tiny-random'",
    "ModelSpec.remat=False",
    "RolloutConfig.env='builtin'",
    "RolloutConfig.groups_per_iteration=4",
    "RolloutConfig.group_size=4",
    "RolloutConfig.max_turns=1",
    "RolloutConfig.max_new_tokens=8",
    "RolloutConfig.max_prompt_tokens=512",
    "BatchConfig.mini_batch_rows=8",
    "BatchConfig.micro_batch_rows=8",
    "AdvantageConfig.invalid_penalty=0.0",
    "LossConfig.kl_coef=0.01",
    "OptimizerConfig.learning_rate=3e-4",
    "OptimizerConfig.b1=0.0",
    "TrainConfig.iterations=1",
    "EvalConfig.every=0",
    "EvalConfig.at_start=False",
    "EvalConfig.games=1",  # the run's final evaluation
    "EvalConfig.max_turns=1",
    "CheckpointConfig.async_save=False",
]


def _iteration_metrics(run_dir: Path, skip: bool) -> dict:
    """One iteration through the command line, on one device as a user's run (the test session's eight
    host devices would shard this tiny model eight ways)."""
    sets = [*BINDINGS, f"OptimizerConfig.skip_zero_advantage_steps={skip}"]
    cmd = [sys.executable, "-m", "ggtrain.cli", "train", "--config", "grpo", "--run-dir", str(run_dir)]
    done = _run(cmd + [x for b in sets for x in ("--set", b)], timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    (line,) = [x for x in lines if "train/success_rate" in x]
    return line


@pytest.mark.slow
def test_an_iteration_without_advantages_takes_no_step_only_when_asked(tmp_path: Path) -> None:
    skipped = _iteration_metrics(tmp_path / "skip", skip=True)
    assert skipped["train/success_rate"] == 0.0
    assert skipped["train/skipped_steps"] == 2  # 16 one-turn rows in mini-batches of 8
    assert "train/loss" not in skipped and "train/kl" not in skipped  # no step ran
    stepped = _iteration_metrics(tmp_path / "step", skip=False)
    assert stepped["train/success_rate"] == 0.0
    assert "train/skipped_steps" not in stepped and stepped["train/kl"] >= 0.0
