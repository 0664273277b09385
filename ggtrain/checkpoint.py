"""Checkpoints with orbax: the train state (three policies, optimizer state, step, PRNG key) plus a JSON
record (data-iterator state, resolved config, metrics). Keep-last-N plus the best by a metric; async
saves; restore onto any mesh (the caller's abstract state carries the target shardings); a corrupt or
truncated latest checkpoint is reported by name and the previous one is used.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp

from ggtrain.config import CheckpointConfig

INDEX = "checkpoints.json"


class CheckpointError(RuntimeError):
    """No readable checkpoint (every candidate is named in the message)."""


def abstract_like(tree: Any, shardings: Any = None) -> Any:
    """``ShapeDtypeStruct``s of ``tree`` with ``shardings`` (default: each leaf's own)."""
    if shardings is None:
        shardings = jax.tree_util.tree_map(lambda x: x.sharding, tree)
    return jax.tree_util.tree_map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), tree, shardings)


class CheckpointStore:
    def __init__(self, directory: str | Path, config: CheckpointConfig, log: Any = None):
        self.directory = Path(directory).absolute()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.config = config
        self.log = log or (lambda message: print(f"ggtrain: {message}", file=sys.stderr))
        options = ocp.CheckpointManagerOptions(
            max_to_keep=None, enable_async_checkpointing=config.async_save, create=True
        )
        self.manager = ocp.CheckpointManager(self.directory, options=options)
        self.failures: list[str] = []
        # read once; afterwards every process updates its own copy the same way, so retention decisions
        # (collective deletes) agree across hosts without re-reading a file only process 0 writes
        path = self.directory / INDEX
        self.index: dict[str, dict[str, float]] = json.loads(path.read_text()) if path.exists() else {}

    # ---- the index of metrics per step, for best-by-metric retention ----
    def _write_index(self, index: dict[str, dict[str, float]]) -> None:
        self.index = index
        if jax.process_index() == 0:
            tmp = self.directory / (INDEX + ".tmp")
            tmp.write_text(json.dumps(index, indent=1, sort_keys=True))
            tmp.replace(self.directory / INDEX)

    def best_step(self) -> int | None:
        name = self.config.best_metric
        if not name:
            return None
        kept = set(self.steps())
        scored = [(v[name], int(s)) for s, v in self.index.items() if name in v and int(s) in kept]
        if not scored:
            return None
        return (max if self.config.best_mode == "max" else min)(scored)[1]

    def steps(self) -> list[int]:
        return sorted(self.manager.all_steps())

    def save(self, step: int, state: Any, record: dict[str, Any], metrics: dict[str, float] | None = None) -> None:
        """Saves (asynchronously when configured) and applies keep-last-N + best retention."""
        self.manager.save(
            step,
            args=ocp.args.Composite(state=ocp.args.StandardSave(state), record=ocp.args.JsonSave(record)),
        )
        index = dict(self.index)
        index[str(step)] = {k: float(v) for k, v in (metrics or {}).items()}
        self._write_index(index)
        self._retain()

    def _retain(self) -> None:
        steps = self.steps()
        keep = set(steps[-self.config.keep_last :]) if self.config.keep_last > 0 else set(steps)
        best = self.best_step()
        if best is not None:
            keep.add(best)
        for step in steps:
            if step not in keep:
                self.manager.wait_until_finished()
                self.manager.delete(step)

    def wait(self) -> None:
        self.manager.wait_until_finished()

    def restore(self, step: int, abstract_state: Any) -> tuple[Any, dict[str, Any]]:
        restored = self.manager.restore(
            step,
            args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract_state), record=ocp.args.JsonRestore()),
        )
        return restored["state"], restored["record"]

    def restore_latest(self, abstract_state: Any) -> tuple[int, Any, dict[str, Any]] | None:
        """The newest readable checkpoint; unreadable ones are reported by name and skipped."""
        self.manager.wait_until_finished()
        self.manager.reload()
        steps = self.steps()
        for step in reversed(steps):
            try:
                state, record = self.restore(step, abstract_state)
                return step, state, record
            except Exception as error:
                message = (
                    f"checkpoint step {step} at {self.directory / str(step)} is unreadable "
                    f"({type(error).__name__}: {str(error).splitlines()[0][:200]}); trying the previous one"
                )
                self.failures.append(message)
                self.log(message)
        if steps:
            raise CheckpointError(f"no readable checkpoint in {self.directory}: " + "; ".join(self.failures))
        return None

    def close(self) -> None:
        self.manager.wait_until_finished()
        self.manager.close()
