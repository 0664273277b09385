"""``ggtrain report RUN_DIR [RUN_DIR ...]``: markdown plus PNG plots comparing runs (methods × seeds).

Curves with seed bands, final evaluation mean ± std, per-task-type success, paired per-game differences
between methods with a bootstrap interval, area under the success curve, iterations / environment steps /
generated tokens / device-hours to reach a threshold fixed in advance, graph diagnostics over time, and
the overhead of the advantage computation next to the whole iteration time.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np


def load_run(run_dir: Path) -> dict[str, Any]:
    config = json.loads((run_dir / "config.json").read_text())
    manifest = json.loads((run_dir / "manifest.json").read_text()) if (run_dir / "manifest.json").exists() else {}
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    train = {m["step"]: m for m in metrics if "train/success_rate" in m}
    evals = {m["step"]: m["eval/success_rate"] for m in metrics if "eval/success_rate" in m}
    outcomes = sorted((run_dir / "eval").glob("iteration_*.jsonl")) if (run_dir / "eval").exists() else []
    last_outcomes = [json.loads(x) for x in outcomes[-1].read_text().splitlines()] if outcomes else []
    method = config["estimator"] if config["loss"]["name"] == "ppo_clip" else config["loss"]["name"]
    devices = len(manifest.get("jax", {}).get("devices", [])) or 1
    return {
        "dir": run_dir,
        "method": method,
        "seed": config["seed"],
        "train": train,
        "eval": evals,
        "outcomes": last_outcomes,
        "devices": devices,
    }


def bootstrap_interval(values: np.ndarray, rounds: int = 2000, seed: int = 0) -> tuple[float, float]:
    if len(values) == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = rng.choice(values, size=(rounds, len(values)), replace=True).mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def _series(run: dict[str, Any], key: str) -> tuple[np.ndarray, np.ndarray]:
    steps = np.asarray(sorted(run["train"]))
    return steps, np.asarray([run["train"][s].get(key, np.nan) for s in steps], float)


def to_threshold(run: dict[str, Any], threshold: float) -> dict[str, float | None]:
    """Iterations, environment steps, generated tokens and device-hours until the training success rate
    first reaches ``threshold`` (None when it never does)."""
    steps, success = _series(run, "train/success_rate")
    _, turns = _series(run, "train/mean_turns")
    _, trajectories = _series(run, "train/graph/trajectories")
    _, tokens = _series(run, "train/tokens")
    _, seconds = _series(run, "train/iteration_s")
    hit = np.flatnonzero(success >= threshold)
    if not len(hit):
        return {"iterations": None, "env_steps": None, "tokens": None, "device_hours": None}
    k = hit[0] + 1
    return {
        "iterations": float(steps[hit[0]]),
        "env_steps": float(np.nansum(turns[:k] * trajectories[:k])),
        "tokens": float(np.nansum(tokens[:k])),
        "device_hours": float(np.nansum(seconds[:k]) * run["devices"] / 3600),
    }


def make_report(run_dirs: list[Path], out: Path, threshold: float = 0.5) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [load_run(d) for d in run_dirs]
    by_method: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for run in runs:
        by_method[run["method"]].append(run)
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        f"# ggtrain report\n\nRuns: {len(runs)} ({', '.join(f'{m} × {len(r)}' for m, r in by_method.items())}).",
        f"Threshold for the cost-to-reach table (fixed before the runs): training success ≥ {threshold}.\n",
    ]

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for method, group in sorted(by_method.items()):
        for ax, key in zip(axes, ("train/success_rate", "eval"), strict=True):
            curves = []
            for run in group:
                if key == "eval":
                    steps = np.asarray(sorted(run["eval"]))
                    values = np.asarray([run["eval"][s] for s in steps], float)
                else:
                    steps, values = _series(run, key)
                curves.append((steps, values))
            common = sorted(set.intersection(*[set(s.tolist()) for s, _ in curves])) if curves else []
            if not common:
                continue
            stack = np.asarray([[v[list(s).index(c)] for c in common] for s, v in curves])
            mean, std = stack.mean(0), stack.std(0)
            ax.plot(common, mean, "o-", markersize=3, label=f"{method} (n={len(group)})")
            ax.fill_between(common, mean - std, mean + std, alpha=0.2)
    for ax, title in zip(axes, ("training success rate", "evaluation success rate"), strict=True):
        ax.set_title(title)
        ax.set_xlabel("iteration")
        ax.set_ylim(-0.02, 1.02)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "success_curves.png", dpi=120)
    plt.close(fig)
    lines.append("![success curves](success_curves.png)\n")

    lines.append(
        "| method | seeds | final eval success (mean ± std) | AUC of training success | iterations to threshold |"
        " env steps | tokens | device-hours |"
    )
    lines.append("|---|---|---|---|---|---|---|---|")
    for method, group in sorted(by_method.items()):
        finals = [run["eval"][max(run["eval"])] for run in group if run["eval"]]
        aucs = [float(np.nanmean(_series(run, "train/success_rate")[1])) for run in group]
        costs = [to_threshold(run, threshold) for run in group]

        def fmt(key: str, costs: list[dict[str, float | None]] = costs) -> str:
            vals = [float(v) for c in costs if (v := c[key]) is not None]
            return f"{np.mean(vals):.4g} ({len(vals)}/{len(costs)} reached)" if vals else "not reached"

        final = f"{np.mean(finals):.3f} ± {np.std(finals):.3f}" if finals else "n/a"
        lines.append(
            f"| {method} | {len(group)} | {final} | {np.mean(aucs):.3f} | {fmt('iterations')} |"
            f" {fmt('env_steps')} | {fmt('tokens')} | {fmt('device_hours')} |"
        )

    per_type: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for method, group in by_method.items():
        for run in group:
            for r in run["outcomes"]:
                per_type[method][r["task_type"]].append(bool(r["won"]))
    types = sorted({t for m in per_type.values() for t in m})
    if types:
        lines.append("\n## Success by task type (last evaluation)\n")
        lines.append("| method | " + " | ".join(types) + " |")
        lines.append("|---|" + "---|" * len(types))
        for method in sorted(per_type):
            cells = [f"{np.mean(per_type[method][t]):.3f}" if per_type[method][t] else "–" for t in types]
            lines.append(f"| {method} | " + " | ".join(cells) + " |")

    methods = sorted(by_method)
    if len(methods) > 1:
        lines.append("\n## Paired per-game differences (last evaluation, same game and seed)\n")
        lines.append("| A − B | pairs | mean difference | bootstrap 95 % |")
        lines.append("|---|---|---|---|")
        for i, a in enumerate(methods):
            for b in methods[i + 1 :]:
                wins = {
                    m: {
                        (r["game_id"], r["seed"], run["seed"]): float(r["won"])
                        for run in by_method[m]
                        for r in run["outcomes"]
                    }
                    for m in (a, b)
                }
                keys = sorted(set(wins[a]) & set(wins[b]))
                diff = np.asarray([wins[a][k] - wins[b][k] for k in keys])
                lo, hi = bootstrap_interval(diff)
                mean = f"{diff.mean():+.3f}" if len(diff) else "n/a"
                lines.append(f"| {a} − {b} | {len(keys)} | {mean} | [{lo:+.3f}, {hi:+.3f}] |")

    lines.append("\n## Overhead of the advantage computation\n")
    lines.append("| method | advantage ms median | p95 | iteration s median | share of the iteration |")
    lines.append("|---|---|---|---|---|")
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for method, group in sorted(by_method.items()):
        adv = np.concatenate([_series(run, "train/advantage_ms")[1][1:] for run in group])  # the first compiles
        it = np.concatenate([_series(run, "train/iteration_s")[1][1:] for run in group])
        if not len(adv):
            adv = np.concatenate([_series(run, "train/advantage_ms")[1] for run in group])
            it = np.concatenate([_series(run, "train/iteration_s")[1] for run in group])
        share = np.median(adv / 1e3 / it)
        lines.append(
            f"| {method} | {np.median(adv):.3f} | {np.percentile(adv, 95):.3f} | {np.median(it):.2f} |"
            f" {100 * share:.4f} % |"
        )
    lines.append("\n(The first iteration of each run is left out when there are others: it includes the compile.)\n")
    lines.append("## Time per phase (median seconds per iteration)\n")
    lines.append("| method | rollout | advantages | update | whole iteration |")
    lines.append("|---|---|---|---|---|")
    for method, group in sorted(by_method.items()):
        med = {
            k: float(np.nanmedian(np.concatenate([_series(run, f"train/{k}")[1] for run in group])))
            for k in ("rollout_s", "advantage_ms", "update_s", "iteration_s")
        }
        lines.append(
            f"| {method} | {med['rollout_s']:.2f} | {med['advantage_ms'] / 1e3:.5f} | {med['update_s']:.2f} |"
            f" {med['iteration_s']:.2f} |"
        )
    traces = [str(run["dir"] / "profile") for run in runs if (run["dir"] / "profile").exists()]
    if traces:
        lines.append("\nProfiler traces (TensorBoard / Perfetto): " + ", ".join(f"`{t}`" for t in traces) + "\n")
    for method, group in sorted(by_method.items()):
        for run in group:
            steps, frac = _series(run, "train/graph/unreachable_fraction")
            ax.plot(steps, frac, alpha=0.6, label=f"{method} s{run['seed']}")
    ax.set_title("unreachable-node fraction of the state graphs")
    ax.set_xlabel("iteration")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "graph_diagnostics.png", dpi=120)
    plt.close(fig)
    lines.append("![graph diagnostics](graph_diagnostics.png)\n")
    lines.append("Runs: " + ", ".join(f"`{run['dir']}`" for run in runs))
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
