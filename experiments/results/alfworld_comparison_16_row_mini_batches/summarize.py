"""The README's figures, from the committed run files: per method, each finished seed's final wins on both
splits, their mean against the warm start's (the issue's target: every PPO method's valid_seen mean above
it), each seed's paired per-game difference on valid_seen, mid-run wins and largest KL to the warm start
(GGPO logs none), the seeds' paired per-game differences pooled (resampling games; seeds, then games), and the same
method's final wins in the 1,600-step study (128-row mini-batches, otherwise the same settings).

    python experiments/results/alfworld_comparison_16_row_mini_batches/summarize.py   (from the repository root)
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from experiments.alfworld_comparison import METHODS  # noqa: E402
from experiments.grpo_diagnostic import (  # noqa: E402
    SPLITS,
    final_wins,
    finished_runs,
    pooled,
    seed_summary,
    training_metric,
    wins,
)

BEFORE = HERE.parent / "alfworld_comparison_1600_step_warm_start"


def method_summary(method: str, warm: dict[str, int]) -> dict:
    runs = finished_runs(HERE, method)
    per_seed = {run.name: seed_summary(run, HERE / "warm_start", 4 * 4) for run in runs}
    seeds = {name: summary["final_wins"] for name, summary in per_seed.items()}
    kl = {run.name: [x for x in training_metric(run, "kl") if x is not None] for run in runs}
    means = {s: round(sum(w[s] for w in seeds.values()) / len(runs), 2) for s in SPLITS} if runs else {}
    before = [final_wins(run) for run in finished_runs(BEFORE, method)]
    return {
        "final_wins": seeds,
        "mean": means,
        "valid_seen_mean_above_warm_start": means["valid_seen"] > warm["valid_seen"] if runs else None,
        "paired_to_warm_start_per_seed": {n: v["paired_to_warm_start"]["valid_seen"] for n, v in per_seed.items()},
        "mid_run_wins_of_24": {n: v["mid_run_wins_of_24"] for n, v in per_seed.items()},
        "largest_kl_to_warm_start": {n: round(max(k), 3) if k else None for n, k in kl.items()},
        "paired_to_warm_start_pooled": pooled(runs, HERE / "warm_start") if runs else {},
        "mean_128_row_mini_batches": {s: round(sum(w[s] for w in before) / len(before), 2) for s in SPLITS},
    }


if __name__ == "__main__":
    warm = {split: wins(HERE / "warm_start" / f"{split}.jsonl") for split in SPLITS}
    summary = {"warm_start": warm} | {method: method_summary(method, warm) for method in METHODS}
    print(json.dumps(summary, indent=1))
