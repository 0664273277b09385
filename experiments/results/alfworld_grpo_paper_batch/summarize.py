"""The README's figures, from the committed run files, for every finished seed under ``runs/``: training
success per iteration (128 episodes each), the plan's secondary measure (iterations 1-3 against 10-12, 384
episodes each, with Wilson 95 % intervals), the mid-run evaluation wins, the final wins and each seed's
paired per-game difference to the warm start (bootstrap over games, as ``ggtrain report``'s column for one
seed); then the seeds pooled (both of the report's intervals) and the 96-iteration run's final wins (the
same 1,536 episodes in batches of 4 groups x 4 rollouts).

    python experiments/results/alfworld_grpo_paper_batch/summarize.py   (from the repository root)
"""

import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from ggtrain.evaluate import wilson_interval  # noqa: E402
from ggtrain.report.statistics import cluster_bootstrap_interval, seeds_then_games_interval  # noqa: E402

SMALL_BATCH_RUN = HERE.parent / "alfworld_grpo_96_iterations" / "runs" / "grpo-seed0"
EPISODES_PER_ITERATION = 16 * 8
SPLITS = ("valid_seen", "valid_unseen")


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def training_success(run: Path) -> list[float]:
    return [m["train/success_rate"] for m in lines(run / "metrics.jsonl") if "train/success_rate" in m]


def block(success: list[float]) -> dict:
    wins = round(sum(success) * EPISODES_PER_ITERATION)
    episodes = len(success) * EPISODES_PER_ITERATION
    low, high = wilson_interval(wins, episodes)
    interval = [round(low, 3), round(high, 3)]
    return {"wins": wins, "episodes": episodes, "rate": round(wins / episodes, 3), "wilson_95": interval}


def outcomes(path: Path) -> dict[tuple[str, int], int]:
    return {(r["game_id"], r["seed"]): int(r["won"]) for r in lines(path)}


def wins(path: Path) -> int:
    return sum(outcomes(path).values())


def final_wins(run: Path) -> dict[str, int]:
    return {split: wins(run / "eval_final" / f"{split}.jsonl") for split in SPLITS}


def differences(run: Path, split: str) -> tuple[list[tuple[str, int]], np.ndarray]:
    """The run's outcome minus the warm start's, game by game (the same game and game seed)."""
    mine, warm = outcomes(run / "eval_final" / f"{split}.jsonl"), outcomes(HERE / "warm_start" / f"{split}.jsonl")
    assert set(mine) == set(warm), f"{run.name} {split}: not the warm start's games and seeds"
    keys = sorted(mine)
    return keys, np.asarray([mine[k] - warm[k] for k in keys], float)


def interval(low_high: tuple[float, float]) -> list[float]:
    return [round(x, 3) for x in low_high]


def seed_summary(run: Path) -> dict:
    success = training_success(run)
    paired = {}
    for split in SPLITS:
        keys, diff = differences(run, split)
        bootstrap = interval(cluster_bootstrap_interval(diff, keys))
        paired[split] = {"mean": round(diff.mean(), 3), "bootstrap_95": bootstrap}
        paired[split] |= {"won_not_warm": int((diff > 0).sum()), "warm_not_won": int((diff < 0).sum())}
    return {
        "training_success_per_iteration": [round(x, 3) for x in success],
        "iterations_1_to_3": block(success[:3]),
        "iterations_10_to_12": block(success[-3:]),
        "mid_run_wins_of_24": [wins(p) for p in sorted((run / "eval").glob("iteration_*.jsonl"))],
        "final_wins": final_wins(run),
        "paired_to_warm_start": paired,
    }


def pooled(runs: list[Path]) -> dict:
    """All seeds' paired differences together, with the report's two intervals."""
    out = {}
    for split in SPLITS:
        seeds, games, values = [], [], []
        for run in runs:
            keys, diff = differences(run, split)
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


if __name__ == "__main__":
    runs = sorted(p for p in (HERE / "runs").glob("grpo-seed*") if (p / "eval_final" / "valid_unseen.jsonl").exists())
    summary = {run.name: seed_summary(run) for run in runs}
    summary["pooled"] = pooled(runs)
    summary["final_wins_96_iterations_4x4"] = final_wins(SMALL_BATCH_RUN)
    summary["final_wins_warm_start"] = {s: wins(HERE / "warm_start" / f"{s}.jsonl") for s in SPLITS}
    print(json.dumps(summary, indent=1))
