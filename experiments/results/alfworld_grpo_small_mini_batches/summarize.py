"""The README's figures, from the committed run files, for every finished seed under ``runs/``
(``experiments/grpo_diagnostic.py``: training success per iteration, 16 episodes each, iterations 1-3
against 10-12, the mid-run and final wins, each seed's paired difference to the warm start, the seeds
pooled), each seed's KL to the warm start per iteration, and the final wins of GRPO with 128-row
mini-batches at 4 x 4 (the 1,600-step study) and with the paper's 16 x 8 batch.

    python experiments/results/alfworld_grpo_small_mini_batches/summarize.py   (from the repository root)
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from experiments.grpo_diagnostic import summary_with_kl  # noqa: E402

if __name__ == "__main__":
    beside = {
        "128_row_mini_batches_4x4": HERE.parent / "alfworld_comparison_1600_step_warm_start",
        "paper_batch_16x8": HERE.parent / "alfworld_grpo_paper_batch",
    }
    print(json.dumps(summary_with_kl(HERE, 4 * 4, beside), indent=1))
