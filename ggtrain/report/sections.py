"""One function per section of ``report.md``: each takes the runs grouped by method and returns its
markdown lines; the plotting ones also write their PNG into the report folder."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ggtrain.metrics import (
    ADVANTAGE_MS,
    ITERATION_S,
    ROLLOUT_S,
    TRAIN_SUCCESS,
    UNREACHABLE_FRACTION,
    UPDATE_S,
)
from ggtrain.report.loading import Run
from ggtrain.report.statistics import sample_std, success_auc, to_threshold

Groups = dict[str, list[Run]]
TOKENS_NOTE = (
    "\nCosts are summed over the iterations up to the first that reaches the threshold. Env steps: turns of"
    " the rollout episodes. Tokens: trained response tokens (those under the loss mask), counted in every"
    " optimizer step that trains them (so once per epoch), i.e. the sum of the iterations' `train/tokens`"
    " totals. Device-hours: iteration seconds × devices."
)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def header(runs: list[Run], groups: Groups, threshold: float) -> list[str]:
    counts = ", ".join(f"{m} × {len(r)}" for m, r in groups.items())
    lines = [
        f"# ggtrain report\n\nRuns: {len(runs)} ({counts}).",
        f"Threshold for the cost-to-reach table (fixed before the runs): training success ≥ {threshold}.\n",
    ]
    unfinished = [f"`{r.dir.name}` ({max(r.train, default=0)} of {r.iterations})" for r in runs if _unfinished(r)]
    if unfinished:
        lines.append(f"**Unfinished runs** (iterations logged of those configured): {', '.join(unfinished)}.\n")
    return lines


def _unfinished(run: Run) -> bool:
    return bool(run.iterations) and max(run.train, default=0) < run.iterations


def _mean_band(curves: list[tuple[np.ndarray, np.ndarray]]) -> tuple[list[Any], np.ndarray, np.ndarray]:
    """The iterations every curve has, with the mean and the sample std over the curves there (as the
    tables'; 0, no band, for one curve)."""
    common = sorted(set.intersection(*[set(s.tolist()) for s, _ in curves])) if curves else []
    if not common:
        return [], np.zeros(0), np.zeros(0)
    stack = np.asarray([[v[list(s).index(c)] for c in common] for s, v in curves])
    return common, stack.mean(0), stack.std(0, ddof=1) if len(stack) > 1 else np.zeros(len(common))


def success_curves(groups: Groups, out: Path) -> list[str]:
    """Training and evaluation success per iteration: the mean over seeds with a ± sample std band."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for method, group in sorted(groups.items()):
        train_curves = [run.series(TRAIN_SUCCESS) for run in group]
        eval_curves = [run.eval_series() for run in group]
        for ax, curves in zip(axes, (train_curves, eval_curves), strict=True):
            common, mean, std = _mean_band(curves)
            if not common:
                continue
            ax.plot(common, mean, "o-", markersize=3, label=f"{method} (n={len(group)})")
            ax.fill_between(common, mean - std, mean + std, alpha=0.2)
    for ax, title in zip(axes, ("training success rate", "evaluation success rate"), strict=True):
        ax.set_title(title)
        ax.set_xlabel("iteration")
        ax.set_ylim(-0.02, 1.02)
        if ax.lines:
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "no run has these", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    fig.savefig(out / "success_curves.png", dpi=120)
    plt.close(fig)
    return ["![success curves](success_curves.png)\n"]


def final_table(groups: Groups, threshold: float) -> list[str]:
    """Final evaluation mean ± std, AUC of training success, and the mean cost to reach the threshold
    over the seeds that reach it."""
    lines = [
        "| method | seeds | last in-run eval success (mean ± sample std) | AUC of training success |"
        " iterations to threshold | env steps | tokens | device-hours |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for method, group in sorted(groups.items()):
        finals = [run.eval[max(run.eval)] for run in group if run.eval]
        costs = [to_threshold(run, threshold) for run in group]

        def fmt(key: str, costs: list[dict[str, float | None]] = costs) -> str:
            vals = [float(v) for c in costs if (v := c[key]) is not None]
            return f"{np.mean(vals):.4g} ({len(vals)}/{len(costs)} reached)" if vals else "not reached"

        final = f"{np.mean(finals):.3f} ± {sample_std(finals)}" if finals else "n/a"
        lines.append(
            f"| {method} | {len(group)} | {final} | {np.mean([success_auc(run) for run in group]):.3f} |"
            f" {fmt('iterations')} | {fmt('env_steps')} | {fmt('tokens')} | {fmt('device_hours')} |"
        )
    return [*lines, TOKENS_NOTE]


def overhead(groups: Groups) -> list[str]:
    """The advantage computation's median / p95 time next to the iteration time (the first iteration,
    which compiles, left out when there are others)."""
    lines = [
        "\n## Overhead of the advantage computation\n",
        "| method | advantage ms median | p95 | iteration s median | share of the iteration |",
        "|---|---|---|---|---|",
    ]
    for method, group in sorted(groups.items()):
        adv = np.concatenate([run.series(ADVANTAGE_MS)[1][1:] for run in group])
        it = np.concatenate([run.series(ITERATION_S)[1][1:] for run in group])
        if not len(adv):
            adv = np.concatenate([run.series(ADVANTAGE_MS)[1] for run in group])
            it = np.concatenate([run.series(ITERATION_S)[1] for run in group])
        share = np.median(adv / 1e3 / it)
        lines.append(
            f"| {method} | {np.median(adv):.3f} | {np.percentile(adv, 95):.3f} | {np.median(it):.2f} |"
            f" {100 * share:.4f} % |"
        )
    lines.append("\n(The first iteration of each run is left out when there are others: it includes the compile.)\n")
    return lines


def phase_times(groups: Groups) -> list[str]:
    """Median seconds per iteration of rollout, advantages, update and the whole iteration."""
    lines = [
        "## Time per phase (median seconds per iteration)\n",
        "| method | rollout | advantages | update | whole iteration |",
        "|---|---|---|---|---|",
    ]
    for method, group in sorted(groups.items()):
        med = {
            k: float(np.nanmedian(np.concatenate([run.series(k)[1] for run in group])))
            for k in (ROLLOUT_S, ADVANTAGE_MS, UPDATE_S, ITERATION_S)
        }
        lines.append(
            f"| {method} | {med[ROLLOUT_S]:.2f} | {med[ADVANTAGE_MS] / 1e3:.5f} | {med[UPDATE_S]:.2f} |"
            f" {med[ITERATION_S]:.2f} |"
        )
    return lines


def profile_traces(runs: list[Run]) -> list[str]:
    traces = [str(run.dir / "profile") for run in runs if (run.dir / "profile").exists()]
    if not traces:
        return []
    return ["\nProfiler traces (TensorBoard / Perfetto): " + ", ".join(f"`{t}`" for t in traces) + "\n"]


def graph_diagnostics(groups: Groups, out: Path) -> list[str]:
    """The unreachable-node fraction of each run's state graphs per iteration."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for method, group in sorted(groups.items()):
        for run in group:
            steps, frac = run.series(UNREACHABLE_FRACTION)
            ax.plot(steps, frac, alpha=0.6, label=f"{method} s{run.seed}")
    ax.set_title("unreachable-node fraction of the state graphs")
    ax.set_xlabel("iteration")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "graph_diagnostics.png", dpi=120)
    plt.close(fig)
    return ["![graph diagnostics](graph_diagnostics.png)\n"]


def run_list(runs: list[Run], out: Path) -> list[str]:
    """Each run's folder relative to the report's, so a committed report names paths that exist in any clone."""
    return ["Runs: " + ", ".join(f"`{os.path.relpath(run.dir.resolve(), out.resolve())}`" for run in runs)]
