"""The figures each run's paragraph in README.md quotes, from the run's committed files: won training
episodes per iteration (train/success_rate x 16 rollouts), the mid-run evaluations' wins, the final wins
on each split against the warm start's (and how many of the games are the same), malformed answers
(invalid_actions) over turns, each iteration's mean KL to the warm start where the loss has one and its
skipped optimizer steps (OptimizerConfig.skip_zero_advantage_steps), the
iterations' minutes (sum of train/iteration_s; and from the first
to the last metrics line, a restart's gap included) and the final
evaluations' minutes (eval_final/manifest.json events). Prints one JSON object per run.

    python run_summary.py runs/grpo-seed0 runs/gigpo-seed0 [--warm-start warm_start]
"""

import argparse
import json
from datetime import datetime
from pathlib import Path

ROLLOUTS_PER_ITERATION = 16  # 4 groups x 4 rollouts (configs/alfworld_comparison.gin)


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def minutes(start: str, end: str) -> float:
    fmt = "%Y-%m-%dT%H:%M:%S%z"
    return round((datetime.strptime(end, fmt) - datetime.strptime(start, fmt)).total_seconds() / 60, 1)


def final_split(run: Path, warm: Path, split: str) -> dict:
    outcomes, warm_outcomes = records(run / "eval_final" / f"{split}.jsonl"), records(warm / f"{split}.jsonl")
    won = {r["game_id"] for r in outcomes if r["won"]}
    warm_won = {r["game_id"] for r in warm_outcomes if r["won"]}
    return {
        "wins": len(won),
        "games": len(outcomes),
        "warm_start_wins": len(warm_won),
        "wins_also_won_by_warm_start": len(won & warm_won),
        "malformed_answers": sum(r["invalid_actions"] for r in outcomes),
        "turns": sum(r["turns"] for r in outcomes),
        "warm_start_malformed_answers": sum(r["invalid_actions"] for r in warm_outcomes),
        "warm_start_turns": sum(r["turns"] for r in warm_outcomes),
    }


def summary(run: Path, warm: Path) -> dict:
    metrics = records(run / "metrics.jsonl")
    train = [m for m in metrics if "train/success_rate" in m]
    wins = [round(m["train/success_rate"] * ROLLOUTS_PER_ITERATION) for m in train]
    events = json.loads((run / "eval_final" / "manifest.json").read_text())["events"]
    evaluations = [e for e in events if e["kind"] == "evaluation"]
    return {
        "run": run.name,
        "training_wins": sum(wins),
        "training_wins_per_iteration": wins,
        "iterations_with_a_win": [m["step"] for m, w in zip(train, wins, strict=True) if w],
        "mid_run_wins": [sum(r["won"] for r in records(p)) for p in sorted((run / "eval").glob("iteration_*.jsonl"))],
        "iteration_minutes": round(sum(m.get("train/iteration_s", 0.0) for m in train) / 60, 1),
        "training_span_minutes": round((metrics[-1]["time"] - metrics[0]["time"]) / 60, 1),  # a restart's gap too
        "final_evaluation_minutes": minutes(evaluations[0]["started"], evaluations[-1]["time"]),
        # KL to the warm start, by iteration; an iteration whose steps were all skipped measured none
        "kl_by_iteration": {m["step"]: round(m["train/kl"], 5) for m in train if "train/kl" in m},
        "skipped_steps_per_iteration": [int(m.get("train/skipped_steps", 0)) for m in train],
        "restarts": sum(e["kind"] == "restart" for e in json.loads((run / "manifest.json").read_text())["events"]),
        **{split: final_split(run, warm, split) for split in ("valid_seen", "valid_unseen")},
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--warm-start", type=Path, default=Path(__file__).parent / "warm_start")
    args = parser.parse_args()
    for run in args.runs:
        print(json.dumps(summary(run, args.warm_start)))
