"""The README's figures, from the committed outcome files: valid_seen wins of 140 under each evaluation seed
for the warm start and for each re-evaluated run of the 16-row comparison (seed 0 in the folder itself, seed
K in ``seed<K>/``, as ``ggtrain report`` reads them), their means and sample standard deviations, the
games whose outcome changed between seeds, and each run's paired difference to the warm start over the
(game, evaluation seed) pairs both played, with the report's interval that resamples games.

    python experiments/results/alfworld_16_row_runs_five_evaluation_seeds/summarize.py   (from the repository root)
"""

import json
import statistics
import sys
from collections import Counter
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from ggtrain.report.final import load_outcomes  # noqa: E402
from ggtrain.report.statistics import cluster_bootstrap_interval  # noqa: E402

RUNS = ("gigpo-seed2", "graphgpo-seed2", "graph_only-seed2")


def records_by_seed(folder: Path) -> dict[int, list[dict]]:
    """Evaluation seed -> its outcome records, for every complete (140-game) valid_seen evaluation."""
    by_seed: dict[int, list[dict]] = {}
    for r in load_outcomes(folder).get("valid_seen", []):
        by_seed.setdefault(r["seed"], []).append(r)
    return {seed: records for seed, records in sorted(by_seed.items()) if len(records) == 140}


def wins_by_seed(records: dict[int, list[dict]]) -> dict[int, dict[str, int]]:
    """Evaluation seed -> game -> won."""
    return {seed: {r["game_id"]: int(r["won"]) for r in rs} for seed, rs in records.items()}


def by_task_type(records: dict[int, list[dict]]) -> dict:
    """Wins over all the seeds' episodes per task type (episodes in brackets), and invalid actions in all."""
    wins: Counter = Counter()
    episodes: Counter = Counter()
    for r in (r for rs in records.values() for r in rs):
        wins[r["task_type"]] += int(r["won"])
        episodes[r["task_type"]] += 1
    invalid = sum(r["invalid_actions"] for rs in records.values() for r in rs)
    return {
        "wins_by_task_type": {t: f"{wins[t]} ({episodes[t]})" for t in sorted(episodes)},
        "invalid_actions": invalid,
    }


def describe(by_seed: dict[int, dict[str, int]]) -> dict:
    counts = [sum(games.values()) for games in by_seed.values()]
    return {
        "wins_by_evaluation_seed": dict(zip(by_seed, counts, strict=True)),
        "mean": round(statistics.mean(counts), 2),
        "sample_sd": round(statistics.stdev(counts), 2) if len(counts) > 1 else None,
        "games_won_under_some_seed": len({g for games in by_seed.values() for g, w in games.items() if w}),
    }


def paired(run: dict[int, dict[str, int]], warm: dict[int, dict[str, int]]) -> dict:
    keys = [(seed, game) for seed in run if seed in warm for game in run[seed]]
    diff = np.asarray([run[s][g] - warm[s][g] for s, g in keys], dtype=float)
    lo, hi = cluster_bootstrap_interval(diff, [g for _, g in keys])
    return {
        "pairs": len(keys),
        "mean_difference": f"{diff.mean():+.3f}",
        "resampling_games": f"[{lo:+.3f}, {hi:+.3f}]",
    }


def training_task_types(run: Path) -> dict[str, int]:
    """Task types of the task groups the run's iterations drew (``ggtrain.train_loop.choose_games`` with the
    run's own seeds and config; needs ``ALFWORLD_DATA``, no model)."""
    from ggtrain.config import config_from_dict
    from ggtrain.run import training_games
    from ggtrain.seeds import RunSeeds
    from ggtrain.train_loop import choose_games

    config = config_from_dict(json.loads((run / "config.json").read_text()))
    games, seeds = training_games(config), RunSeeds(config.seed)
    drawn = Counter()
    for iteration in range(config.iterations):
        for game in choose_games(games, config.rollout.groups_per_iteration, seeds.group_choice(iteration)):
            drawn[Path(game).parts[-3].split("-")[0]] += 1
    return dict(sorted(drawn.items()))


if __name__ == "__main__":
    warm_records = records_by_seed(HERE / "warm_start")
    warm = wins_by_seed(warm_records)
    summary = {"warm_start": describe(warm) | by_task_type(warm_records)}
    for name in RUNS:
        records = records_by_seed(HERE / "runs" / name / "eval_final")
        run = wins_by_seed(records)
        summary[name] = describe(run) | {"paired_to_the_warm_start": paired(run, warm)} | by_task_type(records)
    comparison = HERE.parent / "alfworld_comparison_16_row_mini_batches" / "runs"
    summary["training_task_groups_by_type"] = {
        s: training_task_types(comparison / s) for s in ("gigpo-seed0", "gigpo-seed2")
    }
    print(json.dumps(summary, indent=1))
