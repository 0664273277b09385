"""The README's figures, from the committed run files, for every finished seed under ``runs/``
(``experiments/grpo_diagnostic.py``: training success per iteration, 128 episodes each, iterations 1-3
against 10-12, the mid-run and final wins, each seed's paired difference to the warm start, the seeds
pooled), and the 96-iteration run's final wins (the same 1,536 episodes in batches of 4 groups x 4 rollouts).

    python experiments/results/alfworld_grpo_paper_batch/summarize.py   (from the repository root)
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from experiments.grpo_diagnostic import final_wins, study_summary  # noqa: E402

SMALL_BATCH_RUN = HERE.parent / "alfworld_grpo_96_iterations" / "runs" / "grpo-seed0"

if __name__ == "__main__":
    summary = study_summary(HERE, episodes_per_iteration=16 * 8)
    warm = summary.pop("final_wins_warm_start")
    summary["final_wins_96_iterations_4x4"] = final_wins(SMALL_BATCH_RUN)
    summary["final_wins_warm_start"] = warm
    print(json.dumps(summary, indent=1))
