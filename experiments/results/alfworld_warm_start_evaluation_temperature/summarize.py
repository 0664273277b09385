"""The README's figures, from the committed outcome files: the shipped warm start's valid_seen wins of 140
greedy (T = 0) and at T = 0.4, beside its wins at T = 1 under evaluation seeds 0-4 (seed 0 from the 16-row
comparison's warm start, seeds 1-4 from the noise folder), how many of the cooler policies' wins were also
won at T = 1, and their mean turns.

    python experiments/results/alfworld_warm_start_evaluation_temperature/summarize.py   (from the repository root)
"""

import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parent


def outcomes(path: Path) -> dict[str, dict]:
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert len(records) == 140, path
    return {r["game_id"]: r for r in records}


def won(games: dict[str, dict]) -> set[str]:
    return {g for g, r in games.items() if r["won"]}


if __name__ == "__main__":
    t1 = {0: outcomes(RESULTS / "alfworld_comparison_16_row_mini_batches" / "warm_start" / "valid_seen.jsonl")}
    t1 |= {
        k: outcomes(RESULTS / "alfworld_warm_start_evaluation_noise" / f"seed{k}" / "valid_seen.jsonl")
        for k in (1, 2, 3, 4)
    }
    won_at_t1_seed0, won_at_t1_any = won(t1[0]), set().union(*(won(g) for g in t1.values()))
    summary = {
        "T=1, evaluation seeds 0-4": {
            "wins": [len(won(g)) for g in t1.values()],
            "mean": statistics.mean(len(won(g)) for g in t1.values()),
            "mean_turns_seed0": round(statistics.mean(r["turns"] for r in t1[0].values()), 2),
        }
    }
    for name in ("T0", "T0.4"):
        games = outcomes(HERE / name / "valid_seen.jsonl")
        (seed,) = {r["seed"] for r in games.values()}
        summary[name] = {
            "evaluation_seed": seed,
            "wins": len(won(games)),
            "also_won_at_T1_seed0": len(won(games) & won_at_t1_seed0),
            "also_won_at_T1_under_some_seed": len(won(games) & won_at_t1_any),
            "mean_turns": round(statistics.mean(r["turns"] for r in games.values()), 2),
            "episodes_at_the_25_turn_limit": sum(r["turns"] == 25 for r in games.values()),
            "invalid_actions": sum(r["invalid_actions"] for r in games.values()),
        }
    print(json.dumps(summary, indent=1))
