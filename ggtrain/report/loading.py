"""Runs read back from their directories: ``config.json``, ``manifest.json``, ``metrics.jsonl`` and the
last evaluation's per-game outcomes (``eval/iteration_*.jsonl``)."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ggtrain.metrics import EVAL_SUCCESS, TRAIN_SUCCESS, read_metrics


@dataclass
class Run:
    dir: Path
    method: str  # the estimator under PPO-clip, else the loss (``ggpo``)
    seed: int
    train: dict[int, dict[str, Any]]  # iteration -> its ``train/`` record
    eval: dict[int, float]  # iteration -> evaluation success rate
    outcomes: list[dict[str, Any]]  # the last evaluation's per-game records
    devices: int
    iterations: int = 0  # as configured (config.json); 0: not recorded

    def series(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """(iterations, values) of one ``train/`` metric, NaN where an iteration lacks it."""
        steps = np.asarray(sorted(self.train))
        return steps, np.asarray([self.train[s].get(key, np.nan) for s in steps], float)

    def eval_series(self) -> tuple[np.ndarray, np.ndarray]:
        steps = np.asarray(sorted(self.eval))
        return steps, np.asarray([self.eval[s] for s in steps], float)


def load_run(run_dir: Path) -> Run:
    config = json.loads((run_dir / "config.json").read_text())
    manifest = json.loads((run_dir / "manifest.json").read_text()) if (run_dir / "manifest.json").exists() else {}
    metrics = [record for _, record in read_metrics(run_dir / "metrics.jsonl")]
    outcomes = sorted((run_dir / "eval").glob("iteration_*.jsonl")) if (run_dir / "eval").exists() else []
    return Run(
        dir=run_dir,
        method=config["estimator"] if config["loss"]["name"] == "ppo_clip" else config["loss"]["name"],
        seed=config["seed"],
        train={m["step"]: m for m in metrics if TRAIN_SUCCESS in m},
        eval={m["step"]: m[EVAL_SUCCESS] for m in metrics if EVAL_SUCCESS in m},
        outcomes=[json.loads(x) for x in outcomes[-1].read_text().splitlines()] if outcomes else [],
        devices=len(manifest.get("jax", {}).get("devices", [])) or 1,
        iterations=int(config.get("iterations", 0)),
    )


def by_method(runs: list[Run]) -> dict[str, list[Run]]:
    """The runs grouped by method, in the order first seen."""
    groups: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        groups[run.method].append(run)
    return dict(groups)
