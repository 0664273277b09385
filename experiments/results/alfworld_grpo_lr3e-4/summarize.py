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

from experiments.grpo_diagnostic import summary_with_kl  # noqa: E402

if __name__ == "__main__":
    beside = {"grpo_at_1e-4": HERE.parent / "alfworld_comparison_1600_step_warm_start"}
    print(json.dumps(summary_with_kl(HERE, 4 * 4, beside), indent=1))
