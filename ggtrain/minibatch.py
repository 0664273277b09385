"""Host-side splitting of an iteration's turn batch into mini-batches of static size.

Each real row appears in exactly one mini-batch per epoch; the last mini-batch is filled with padding
rows (``row_mask = False``), so shapes stay static and every loss-mask token is trained exactly once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np


def pad_rows(batch: dict[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
    """Appends padding rows (zeros, ``row_mask`` False) up to ``rows``."""
    have = len(batch["row_mask"])
    if have > rows:
        raise ValueError(f"batch has {have} rows, more than the {rows} to pad to")
    return {k: np.concatenate([v, np.zeros((rows - have, *v.shape[1:]), v.dtype)]) for k, v in batch.items()}


def minibatches(
    batch: dict[str, Any], rows_per_minibatch: int, seed: int, epoch: int = 0
) -> Iterator[dict[str, np.ndarray]]:
    """Shuffled mini-batches of exactly ``rows_per_minibatch`` rows over the real rows of ``batch``."""
    batch = {k: np.asarray(v) for k, v in batch.items()}
    real = np.flatnonzero(batch["row_mask"])
    order = real[np.random.default_rng([seed, epoch]).permutation(len(real))]
    for start in range(0, len(order), rows_per_minibatch):
        take = order[start : start + rows_per_minibatch]
        yield pad_rows({k: v[take] for k, v in batch.items()}, rows_per_minibatch)
