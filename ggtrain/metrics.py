"""Metrics: (sum, count) accumulation, a TensorBoard writer on process 0 only, and a JSONL file.

``RUN_DIR/metrics.jsonl`` holds one record per write: ``{"step": iteration, "time": ..., name: value}``
with names under ``train/`` (one record per iteration) or ``eval/`` (one per evaluation). The names read
back by ``ggtrain report`` and the experiment scripts are the constants below.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

TRAIN = "train/"  # prefix of the per-iteration record
EVAL = "eval/"  # prefix of the evaluation record
TRAIN_SUCCESS = "train/success_rate"  # share of the iteration's rollout episodes won
MEAN_TURNS = "train/mean_turns"  # turns per rollout episode
TRAJECTORIES = "train/graph/trajectories"  # trajectories in the iteration's state graphs
# every loss: the value of the function whose gradient the optimizer steps apply (GGPO: its linear
# surrogate -sum c_i s_i / T_tok; the Gibbs-gap objective itself is ``train/ggpo_loss``)
LOSS = "train/loss"
# the iteration's trained tokens: response tokens under the loss mask, summed over every optimizer step
# of the iteration (every mini-batch of every epoch), a total (count 0 in ``MetricAccumulator``)
TOKENS = "train/tokens"
ROLLOUT_S = "train/rollout_s"  # seconds of the rollout
ADVANTAGE_MS = "train/advantage_ms"  # milliseconds of the advantage computation
UPDATE_S = "train/update_s"  # seconds of the optimizer steps
ITERATION_S = "train/iteration_s"  # seconds of the whole iteration (evaluation included)
UNREACHABLE_FRACTION = "train/graph/unreachable_fraction"  # state-graph nodes that cannot reach the goal
EVAL_SUCCESS = "eval/success_rate"  # share of the evaluation games won


def read_metrics(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """Each record of a ``metrics.jsonl`` with its line as written. A last line cut short by a kill while
    it was written (no newline, not JSON) is left out; a broken line anywhere else is an error naming it."""
    text = path.read_text()
    lines = text.splitlines()
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append((line, json.loads(line)))
        except json.JSONDecodeError:
            if number == len(lines) and not text.endswith("\n"):
                break
            raise ValueError(f"{path}:{number}: not a JSON metrics line: {line[:80]!r}") from None
    return records


def truncate_metrics(run_dir: str | Path, step: int) -> None:
    """Metrics follow checkpoints: on resume from ``step``, drop ``metrics.jsonl`` lines past it (they were
    written before a crash the restored checkpoint does not include, and will be written again), so every
    step appears once. TensorBoard's events past it are hidden by the resumed writer (``resumed_at``). A
    last line cut short by a kill goes with them (``read_metrics``)."""
    path = Path(run_dir) / "metrics.jsonl"
    if path.exists():
        lines = [line for line, record in read_metrics(path) if record["step"] <= step]
        tmp = path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(line + "\n" for line in lines))
        tmp.replace(path)


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
    def __init__(self, run_dir: str | Path, process_index: int | None = None, resumed_at: int | None = None):
        """``resumed_at``: the step a resumed run restored (-1: nothing, it starts again); TensorBoard then
        hides the earlier files' events past it (a ``purge_step`` marker), as ``truncate_metrics`` drops
        those ``metrics.jsonl`` lines."""
        self.run_dir = Path(run_dir)
        if process_index is None:
            import jax

            process_index = jax.process_index()
        self.active = process_index == 0
        self.tb: Any = None
        self.jsonl: Any = None
        if self.active:
            from tensorboardX import SummaryWriter

            self.run_dir.mkdir(parents=True, exist_ok=True)
            purge = None if resumed_at is None else resumed_at + 1
            self.tb = SummaryWriter(str(self.run_dir / "tensorboard"), purge_step=purge)
            self.jsonl = (self.run_dir / "metrics.jsonl").open("a")

    def write(self, step: int, metrics: dict[str, float], prefix: str = TRAIN) -> None:
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
