"""Recomputes the figures of this folder's README from runs/ (run from the repository root):
training success per block of 5 iterations and evaluation success at iterations 5 / 10 / 15, mean and
sample std over each method's finished seeds; the GGPO β 1 rerun beside it when its runs are there.

    python experiments/results/builtin_comparison_rerun/summarize.py
"""

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from experiments.builtin_comparison import METHODS, finished  # noqa: E402
from ggtrain.metrics import EVAL_SUCCESS, TRAIN_SUCCESS, read_metrics  # noqa: E402

FOLDERS = {"": HERE / "runs", " (β 1)": HERE.parent / "builtin_comparison_ggpo_beta1_rerun" / "runs"}


def curves(run: Path) -> tuple[list[float], list[float]]:
    """(training success per iteration, evaluation success per evaluation after the first update)."""
    records = [m for _, m in read_metrics(run / "metrics.jsonl")]
    train = [m[TRAIN_SUCCESS] for m in records if TRAIN_SUCCESS in m]
    return train, [m[EVAL_SUCCESS] for m in records if EVAL_SUCCESS in m and m["step"] > 0]


for label, runs in FOLDERS.items():
    for method in METHODS:
        found = [curves(r) for r in sorted(runs.glob(f"{method}-seed*/")) if finished(r)]
        if not found:
            continue
        train, evals = np.asarray([t for t, _ in found]), np.asarray([e for _, e in found])
        blocks = " / ".join(f"{train[:, a : a + 5].mean():.2f}" for a in (0, 5, 10))
        spread = " / ".join(f"{m:.2f}±{s:.2f}" for m, s in zip(evals.mean(0), evals.std(0, ddof=1), strict=True))
        print(f"{method}{label}: {len(found)} seeds; training {blocks}; eval at 5 / 10 / 15 {spread}")
