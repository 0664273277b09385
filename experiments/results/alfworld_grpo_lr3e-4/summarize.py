"""The README's figures, from the committed run files, for every finished seed under ``runs/``
(``experiments/grpo_diagnostic.py``: training success per iteration, 16 episodes each, iterations 1-3
against 10-12, the mid-run and final wins, each seed's paired difference to the warm start, the seeds
pooled), each seed's KL to the warm start per iteration, and the 1,600-step study's GRPO seeds at 1e-4
(the same runs but for the learning rate).

    python experiments/results/alfworld_grpo_lr3e-4/summarize.py   (from the repository root)
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from experiments.grpo_diagnostic import final_wins, finished_runs, study_summary, training_metric  # noqa: E402

AT_1E4 = HERE.parent / "alfworld_comparison_1600_step_warm_start"

if __name__ == "__main__":
    summary = study_summary(HERE, episodes_per_iteration=4 * 4)
    for run in finished_runs(HERE):
        summary[run.name]["kl_per_iteration"] = [None if x is None else round(x, 4) for x in training_metric(run, "kl")]
    summary["final_wins_grpo_at_1e-4"] = {run.name: final_wins(run) for run in finished_runs(AT_1E4)}
    print(json.dumps(summary, indent=1))
