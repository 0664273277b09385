"""A deterministic, checkpointable iterator of synthetic turn batches with advantages (for update tests)."""

from __future__ import annotations

from typing import Any

import numpy as np

from graph import compute_advantages
from tests.train_batches import synthetic_turn_batch

ROW_FIELDS = ("group", "traj", "turn", "state", "next_state", "env_reward", "valid", "row_mask")


class SyntheticBatches:
    def __init__(self, seed: int, rows: int, estimator: str = "graphgpo"):
        self.seed, self.rows, self.estimator, self.index = seed, rows, estimator, 0

    def __iter__(self) -> SyntheticBatches:
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        batch = synthetic_turn_batch(seed=self.seed * 1000 + self.index, rows=self.rows)
        batch["advantages"] = compute_advantages(self.estimator, {k: batch[k] for k in ROW_FIELDS})
        self.index += 1
        return batch

    def get_state(self) -> dict[str, Any]:
        return {"index": self.index, "seed": self.seed}

    def set_state(self, state: dict[str, Any]) -> None:
        if state["seed"] != self.seed:
            raise ValueError(f"data iterator state is for seed {state['seed']}, not {self.seed}")
        self.index = int(state["index"])
