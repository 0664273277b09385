"""The README's figures, from the committed outcome files: the shipped warm start's valid_seen wins of 140
under each evaluation seed (seed 0 is the comparisons' own evaluation, the others are this folder's), their
spread, how many games change outcome between seed 0 and each other seed, and where the final wins of the
16-row comparison's 15 runs (all evaluated under seed 0) fall against that spread.

    python experiments/results/alfworld_warm_start_evaluation_noise/summarize.py   (from the repository root)
"""

import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from experiments.alfworld_comparison import METHODS  # noqa: E402
from experiments.grpo_diagnostic import final_wins, finished_runs, lines  # noqa: E402

COMPARISON = HERE.parent / "alfworld_comparison_16_row_mini_batches"


def outcomes_by_game(records: list[dict]) -> dict[str, int]:
    return {r["game_id"]: int(r["won"]) for r in records}


def evaluation_seeds() -> dict[int, dict[str, int]]:
    """Evaluation seed -> game -> won, for seed 0 (the comparison's warm start) and every finished seed here."""
    seeds = {0: outcomes_by_game(lines(COMPARISON / "warm_start" / "valid_seen.jsonl"))}
    for path in sorted(HERE.glob("seed*/valid_seen.jsonl")):
        records = lines(path)
        if len(records) == 140:
            (seed,) = {r["seed"] for r in records}
            seeds[seed] = outcomes_by_game(records)
    return seeds


def spread(counts: list[int]) -> dict:
    sd = statistics.stdev(counts)
    return {
        "wins": counts,
        "range": [min(counts), max(counts)],
        "mean": round(statistics.mean(counts), 2),
        "sample_sd": round(sd, 2),
        "sd_of_a_mean_of_3": round(sd / 3**0.5, 2),
    }


def flips(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {"won_only_under_seed_0": sum(a[g] > b[g] for g in a), "won_only_under_other": sum(b[g] > a[g] for g in a)}


if __name__ == "__main__":
    seeds = evaluation_seeds()
    counts = [sum(games.values()) for games in seeds.values()]
    games = seeds[0].keys()
    low, high = min(counts), max(counts)
    runs = {run.name: final_wins(run)["valid_seen"] for method in METHODS for run in finished_runs(COMPARISON, method)}
    summary = {
        "warm_start_valid_seen_by_evaluation_seed": dict(zip(seeds, counts, strict=True)),
        "spread": spread(counts),
        "outcome_changes_from_seed_0": {k: flips(seeds[0], v) for k, v in seeds.items() if k != 0},
        "games_won_under_any_seed": sum(any(s[g] for s in seeds.values()) for g in games),
        "games_won_under_every_seed": sum(all(s[g] for s in seeds.values()) for g in games),
        "comparison_runs_valid_seen": runs,
        "comparison_runs_inside_the_warm_start_range": sum(low <= w <= high for w in runs.values()),
        "comparison_runs": len(runs),
    }
    print(json.dumps(summary, indent=1))
