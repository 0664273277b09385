"""The figures README.md quotes that ../alfworld_comparison/run_summary.py does not print, from this folder's
committed files and the comparison's GRPO seed 0 run:

- the reproducibility check: the first 12 iterations' metrics lines (timings left out) and the mid-run
  evaluations at iterations 0, 4, 8 and 12 against the comparison's `grpo-seed0`, line by line;
- per block of 12 iterations: mean training success, the iterations that took an optimizer step and
  their mean KL to the warm start.

    python summarize.py
"""

import json
from pathlib import Path

HERE = Path(__file__).parent
RUN = HERE / "runs" / "grpo-seed0"
COMPARISON_RUN = HERE.parent / "alfworld_comparison_1600_step_warm_start" / "runs" / "grpo-seed0"
COMPARISON_ITERATIONS = 12
BLOCK = 12
TIMING_KEYS = {"time", "train/advantage_ms", "train/rollout_s", "train/update_s", "train/step_time_s"}
TIMING_KEYS |= {"train/tokens_per_s", "train/iteration_s"}


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def without_timings(line: dict) -> dict:
    return {key: value for key, value in line.items() if key not in TIMING_KEYS}


def reproduction() -> dict:
    ours = [m for m in records(RUN / "metrics.jsonl") if m["step"] <= COMPARISON_ITERATIONS]
    theirs = records(COMPARISON_RUN / "metrics.jsonl")
    evaluations = [f"iteration_{step:04d}.jsonl" for step in range(0, COMPARISON_ITERATIONS + 1, 4)]
    return {
        "metrics_lines": [len(ours), len(theirs)],
        "metrics_equal_timings_aside": [without_timings(m) for m in ours] == [without_timings(m) for m in theirs],
        "evaluation_files_equal": {
            name: (RUN / "eval" / name).read_bytes() == (COMPARISON_RUN / "eval" / name).read_bytes()
            for name in evaluations
        },
    }


def blocks() -> list[dict]:
    train = [m for m in records(RUN / "metrics.jsonl") if "train/success_rate" in m]
    summaries = []
    for start in range(0, len(train), BLOCK):
        block = train[start : start + BLOCK]
        stepped = [m for m in block if "train/loss" in m]  # an iteration whose steps were all skipped logs none
        summaries.append(
            {
                "iterations": [block[0]["step"], block[-1]["step"]],
                "mean_training_success": round(sum(m["train/success_rate"] for m in block) / len(block), 3),
                "iterations_with_an_optimizer_step": len(stepped),
                "mean_kl_of_those": round(sum(m["train/kl"] for m in stepped) / len(stepped), 4),
            }
        )
    return summaries


if __name__ == "__main__":
    print(json.dumps({"reproduction": reproduction(), "blocks_of_12_iterations": blocks()}, indent=1))
