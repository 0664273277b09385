"""Metrics: (sum, count) accumulation, a TensorBoard writer on process 0 only, and a JSONL file."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import jax


class MetricAccumulator:
    """Adds (sum, count) pairs exactly over micro-batches, steps, hosts and padding."""

    def __init__(self) -> None:
        self.pairs: dict[str, list[float]] = {}

    def add(self, pairs: dict[str, tuple[Any, Any]]) -> None:
        for name, (total, count) in pairs.items():
            acc = self.pairs.setdefault(name, [0.0, 0.0])
            acc[0] += float(total)
            acc[1] += float(count)

    def means(self) -> dict[str, float]:
        """A count of 0 marks a total: its sum is reported."""
        return {k: (s / c if c else s) for k, (s, c) in self.pairs.items()}


class MetricsWriter:
    def __init__(self, run_dir: str | Path, process_index: int | None = None):
        self.run_dir = Path(run_dir)
        self.active = (jax.process_index() if process_index is None else process_index) == 0
        self.tb: Any = None
        self.jsonl: Any = None
        if self.active:
            from tensorboardX import SummaryWriter

            self.run_dir.mkdir(parents=True, exist_ok=True)
            self.tb = SummaryWriter(str(self.run_dir / "tensorboard"))
            self.jsonl = (self.run_dir / "metrics.jsonl").open("a")

    def write(self, step: int, metrics: dict[str, float], prefix: str = "train/") -> None:
        if not self.active:
            return
        record = {"step": int(step), "time": time.time()} | {prefix + k: float(v) for k, v in metrics.items()}
        self.jsonl.write(json.dumps(record) + "\n")
        self.jsonl.flush()
        for k, v in metrics.items():
            self.tb.add_scalar(prefix + k, float(v), int(step))
        self.tb.flush()

    def close(self) -> None:
        if self.active:
            self.tb.close()
            self.jsonl.close()
