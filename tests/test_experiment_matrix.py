"""The experiment matrix: 5 methods x 3 seeds at the reference settings, and its CPU scale."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _dry(*args: str) -> list[dict]:
    out = subprocess.run(
        [sys.executable, "experiments/alfworld_matrix.py", "--dry-run", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [json.loads(line) for line in out.splitlines()]


def test_reference_matrix_is_the_papers_settings():
    runs = _dry()
    assert sorted(r["run"] for r in runs) == sorted(
        f"{m}-seed{s}" for m in ("grpo", "gigpo", "graphgpo", "graph_only", "ggpo") for s in (0, 1, 2)
    )
    for r in runs:
        c = r["config"]
        assert (
            c["iterations"],
            c["rollout"]["groups_per_iteration"],
            c["rollout"]["group_size"],
            c["rollout"]["max_turns"],
            c["eval"]["games"],
            c["eval"]["every"],
        ) == (150, 16, 8, 50, 128, 5)
        assert r["estimate"]["rows_per_iteration"] == 16 * 8 * 50
    ggpo = [r for r in runs if r["run"].startswith("ggpo")]
    assert all(r["config"]["loss"]["name"] == "ggpo" for r in ggpo)
    graph_only = next(r for r in runs if r["run"].startswith("graph_only"))
    assert graph_only["config"]["estimator"] == "graph_only"


def test_cpu_scale_uses_smollm_and_small_sizes():
    runs = _dry("--scale", "cpu")
    assert len(runs) == 15
    assert all(r["config"]["model"]["path"] == "smollm2-135m-instruct" for r in runs)
    assert all(r["estimate"]["tokens_per_iteration"] <= 12 * 560 for r in runs)
