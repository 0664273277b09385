"""The README's training-success table: per run and as the mean over the three seeds, the training success of
each block of 12 iterations (from each run's metrics.jsonl), and each run's mid-run evaluation wins.

    python summarize.py
"""

import json
from pathlib import Path

RUNS = [Path(__file__).parent / "runs" / f"grpo-seed{seed}" for seed in (0, 1, 2)]
BLOCK = 12


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def block_success(run: Path) -> list[float]:
    success = [m["train/success_rate"] for m in lines(run / "metrics.jsonl") if "train/success_rate" in m]
    return [sum(success[i : i + BLOCK]) / len(success[i : i + BLOCK]) for i in range(0, len(success), BLOCK)]


def mid_run_wins(run: Path) -> list[int]:
    return [sum(r["won"] for r in lines(p)) for p in sorted((run / "eval").glob("iteration_*.jsonl"))]


if __name__ == "__main__":
    blocks = {run.name: block_success(run) for run in RUNS}
    mean = [sum(column) / len(column) for column in zip(*blocks.values(), strict=True)]
    summary = {
        "training_success_per_block_of_12": {name: [round(x, 3) for x in b] for name, b in blocks.items()},
        "mean_over_seeds": [round(x, 3) for x in mean],
        "mid_run_wins_of_24": {run.name: mid_run_wins(run) for run in RUNS},
    }
    print(json.dumps(summary, indent=1))
