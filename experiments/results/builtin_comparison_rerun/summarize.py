"""Recomputes the figures of this folder's README from runs/ (run from the repository root):
training success per block of 5 iterations and evaluation success at iterations 5 / 10 / 15, mean and
sample std over each method's finished seeds; the GGPO β 1 rerun beside it when its runs are there.

    python experiments/results/builtin_comparison_rerun/summarize.py
"""

import json
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
FOLDERS = {"": HERE / "runs", " (β 1)": HERE.parent / "builtin_comparison_ggpo_beta1_rerun" / "runs"}


def curves(run: Path) -> tuple[list[float], list[float]] | None:
    """(training success per iteration, evaluation success per evaluation) of a finished run, else None."""
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    train = [x["train/success_rate"] for x in lines if "train/success_rate" in x]
    if len(train) != json.loads((run / "config.json").read_text())["iterations"]:
        return None
    return train, [x["eval/success_rate"] for x in lines if "eval/success_rate" in x and x["step"] > 0]


for label, runs in FOLDERS.items():
    for method in ("grpo", "gigpo", "graphgpo", "graph_only", "ggpo"):
        found = [c for r in sorted(runs.glob(f"{method}-seed*/")) if (c := curves(r))]
        if not found:
            continue
        train, evals = np.asarray([t for t, _ in found]), np.asarray([e for _, e in found])
        blocks = " / ".join(f"{train[:, a : a + 5].mean():.2f}" for a in (0, 5, 10))
        spread = " / ".join(f"{m:.2f}±{s:.2f}" for m, s in zip(evals.mean(0), evals.std(0, ddof=1), strict=True))
        print(f"{method}{label}: {len(found)} seeds; training {blocks}; eval at 5 / 10 / 15 {spread}")
