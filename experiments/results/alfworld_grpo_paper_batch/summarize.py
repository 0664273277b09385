"""The README's training figures, from the committed run files: training success per iteration (128 episodes
each), the plan's secondary measure (iterations 1-3 against 10-12, 384 episodes each, with Wilson 95 %
intervals), the mid-run evaluation wins, and the final wins beside the 96-iteration run's (the same 1,536
episodes in batches of 4 groups x 4 rollouts).

    python experiments/results/alfworld_grpo_paper_batch/summarize.py   (from the repository root)
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from ggtrain.evaluate import wilson_interval  # noqa: E402

RUN = HERE / "runs" / "grpo-seed0"
SMALL_BATCH_RUN = HERE.parent / "alfworld_grpo_96_iterations" / "runs" / "grpo-seed0"
EPISODES_PER_ITERATION = 16 * 8


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


def wins(path: Path) -> int:
    return sum(r["won"] for r in lines(path))


def final_wins(run: Path) -> dict[str, int]:
    return {split: wins(run / "eval_final" / f"{split}.jsonl") for split in ("valid_seen", "valid_unseen")}


if __name__ == "__main__":
    success = training_success(RUN)
    summary = {
        "training_success_per_iteration": [round(x, 3) for x in success],
        "iterations_1_to_3": block(success[:3]),
        "iterations_10_to_12": block(success[-3:]),
        "mid_run_wins_of_24": [wins(p) for p in sorted((RUN / "eval").glob("iteration_*.jsonl"))],
        "final_wins": final_wins(RUN),
        "final_wins_96_iterations_4x4": final_wins(SMALL_BATCH_RUN),
        "final_wins_warm_start": {s: wins(HERE / "warm_start" / f"{s}.jsonl") for s in ("valid_seen", "valid_unseen")},
    }
    print(json.dumps(summary, indent=1))
