"""The figures of a one-method diagnostic study (``experiments/alfworld_comparison.py --methods grpo``): per
finished seed, training success per iteration and the plans' secondary measure (iterations 1-3 against
10-12, with Wilson 95 % intervals), the mid-run evaluation wins, the final wins and the paired per-game
difference to the warm start (bootstrap over games, as ``ggtrain report``'s column for one seed); then the
seeds pooled (both of the report's intervals). Used by the folders' ``summarize.py``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ggtrain.evaluate import wilson_interval
from ggtrain.report.statistics import cluster_bootstrap_interval, seeds_then_games_interval

SPLITS = ("valid_seen", "valid_unseen")


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def training_metric(run: Path, name: str) -> list[float | None]:
    """``train/<name>`` per iteration (None where an iteration logged none, e.g. no update)."""
    return [m.get(f"train/{name}") for m in lines(run / "metrics.jsonl") if "train/success_rate" in m]


def block(success: list[float], episodes_per_iteration: int) -> dict:
    wins = round(sum(success) * episodes_per_iteration)
    episodes = len(success) * episodes_per_iteration
    low, high = wilson_interval(wins, episodes)
    interval = [round(low, 3), round(high, 3)]
    return {"wins": wins, "episodes": episodes, "rate": round(wins / episodes, 3), "wilson_95": interval}


def outcomes(path: Path) -> dict[tuple[str, int], int]:
    return {(r["game_id"], r["seed"]): int(r["won"]) for r in lines(path)}


def wins(path: Path) -> int:
    return sum(outcomes(path).values())


def final_wins(run: Path) -> dict[str, int]:
    return {split: wins(run / "eval_final" / f"{split}.jsonl") for split in SPLITS}


def differences(run: Path, warm_start: Path, split: str) -> tuple[list[tuple[str, int]], np.ndarray]:
    """The run's outcome minus the warm start's, game by game (the same game and game seed)."""
    mine, warm = outcomes(run / "eval_final" / f"{split}.jsonl"), outcomes(warm_start / f"{split}.jsonl")
    assert set(mine) == set(warm), f"{run.name} {split}: not the warm start's games and seeds"
    keys = sorted(mine)
    return keys, np.asarray([mine[k] - warm[k] for k in keys], float)


def interval(low_high: tuple[float, float]) -> list[float]:
    return [round(x, 3) for x in low_high]


def seed_summary(run: Path, warm_start: Path, episodes_per_iteration: int) -> dict:
    success = [float(x or 0.0) for x in training_metric(run, "success_rate")]
    paired = {}
    for split in SPLITS:
        keys, diff = differences(run, warm_start, split)
        bootstrap = interval(cluster_bootstrap_interval(diff, keys))
        paired[split] = {"mean": round(diff.mean(), 3), "bootstrap_95": bootstrap}
        paired[split] |= {"won_not_warm": int((diff > 0).sum()), "warm_not_won": int((diff < 0).sum())}
    return {
        "training_success_per_iteration": [round(x, 3) for x in success],
        "iterations_1_to_3": block(success[:3], episodes_per_iteration),
        "iterations_10_to_12": block(success[-3:], episodes_per_iteration),
        "mid_run_wins_of_24": [wins(p) for p in sorted((run / "eval").glob("iteration_*.jsonl"))],
        "final_wins": final_wins(run),
        "paired_to_warm_start": paired,
    }


def pooled(runs: list[Path], warm_start: Path) -> dict:
    """All seeds' paired differences together, with the report's two intervals."""
    out = {}
    for split in SPLITS:
        seeds, games, values = [], [], []
        for run in runs:
            keys, diff = differences(run, warm_start, split)
            seeds += [run.name] * len(keys)
            games += keys
            values.append(diff)
        diff = np.concatenate(values)
        out[split] = {
            "seeds": len(runs),
            "mean": round(diff.mean(), 3),
            "bootstrap_95_games": interval(cluster_bootstrap_interval(diff, games)),
            "bootstrap_95_seeds_then_games": interval(seeds_then_games_interval(diff, seeds, games)),
        }
    return out


def finished_runs(folder: Path, method: str = "grpo") -> list[Path]:
    """The study's runs of ``method`` with both final evaluations written."""
    runs = (folder / "runs").glob(f"{method}-seed*")
    return sorted(p for p in runs if (p / "eval_final" / "valid_unseen.jsonl").exists())


def study_summary(folder: Path, episodes_per_iteration: int) -> dict:
    """Every finished seed's summary, the seeds pooled, and the warm start's final wins."""
    warm_start = folder / "warm_start"
    runs = finished_runs(folder)
    summary = {run.name: seed_summary(run, warm_start, episodes_per_iteration) for run in runs}
    summary["pooled"] = pooled(runs, warm_start)
    summary["final_wins_warm_start"] = {s: wins(warm_start / f"{s}.jsonl") for s in SPLITS}
    return summary


def summary_with_kl(folder: Path, episodes_per_iteration: int, beside: dict[str, Path]) -> dict:
    """``study_summary`` with each seed's KL to the warm start per iteration, and the final wins of the
    finished GRPO seeds of the studies ``beside`` (name -> study folder) under ``final_wins_<name>``."""
    summary = study_summary(folder, episodes_per_iteration)
    for run in finished_runs(folder):
        kl = training_metric(run, "kl")
        summary[run.name]["kl_per_iteration"] = [None if x is None else round(x, 4) for x in kl]
    for name, other in beside.items():
        summary[f"final_wins_{name}"] = {run.name: final_wins(run) for run in finished_runs(other)}
    return summary
