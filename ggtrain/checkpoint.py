"""Checkpoints with orbax: the train state (three policies, optimizer state, step, PRNG key) plus a JSON
record (data-iterator state, resolved config, metrics). Keep-last-N plus the best by a metric; async
saves; restore onto any mesh (the caller's abstract state carries the target shardings); a corrupt or
truncated latest checkpoint is reported by name and the previous one is used; a checkpoint whose arrays
do not fit the state to restore (another model or optimizer) is a configuration error, not a corrupt one.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp

from ggtrain.config import CheckpointConfig, ConfigError

INDEX = "checkpoints.json"


class CheckpointError(ConfigError):
    """No readable checkpoint (every candidate is named in the message): a run that cannot continue is
    refused like a bad input (exit 2), not reported as a failure of the trainer."""


class CheckpointMismatch(ConfigError):
    """A readable checkpoint whose arrays do not fit the state to restore: another model or optimizer."""


def tree_shapes(tree: Any) -> dict[str, tuple[int, ...]]:
    """Every leaf's shape by its dotted path (``params.params.embedding``); dataclass fields, dict keys
    and sequence positions name the same way, so a saved tree and its metadata compare."""
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {jax.tree_util.keystr(path, simple=True, separator="."): tuple(leaf.shape) for path, leaf in leaves}


def shape_mismatch(stored: dict[str, tuple[int, ...]], wanted: dict[str, tuple[int, ...]], most: int = 3) -> str:
    """What differs between a checkpoint's arrays and the state to restore ("" when they fit)."""
    missing = [f"{k} missing" for k in sorted(set(wanted) - set(stored))]
    extra = [f"{k} not in the model" for k in sorted(set(stored) - set(wanted))]
    shapes = [f"{k} {stored[k]} != {wanted[k]}" for k in sorted(set(stored) & set(wanted)) if stored[k] != wanted[k]]
    found = shapes + missing + extra
    return ", ".join(found[:most]) + (f" (and {len(found) - most} more)" if len(found) > most else "")


def _closed_loop_noise(error: BaseException | None) -> bool:
    return isinstance(error, RuntimeError) and str(error) == "Event loop is closed"


class _NeverRetrieved(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "exception was never retrieved" not in record.getMessage()


def _quiet_failed_read_noise() -> None:
    """A failed read leaves tensorstore callbacks that land on the asyncio loop orbax already closed:
    each prints an 'Event loop is closed' traceback (through sys.unraisablehook or sys.excepthook, pages
    of them), and asyncio logs the abandoned reads as 'exception was never retrieved'. Only those are
    dropped (the read's own error is reported by name); any other exception still shows."""
    if getattr(sys.unraisablehook, "drops_closed_loop_noise", False):
        return
    unraisable, excepthook = sys.unraisablehook, sys.excepthook

    def on_unraisable(args: Any) -> None:
        if not _closed_loop_noise(args.exc_value):
            unraisable(args)

    def on_exception(kind: type[BaseException], error: BaseException, tb: Any) -> None:
        if not _closed_loop_noise(error):
            excepthook(kind, error, tb)

    on_unraisable.drops_closed_loop_noise = True  # type: ignore[attr-defined]
    sys.unraisablehook, sys.excepthook = on_unraisable, on_exception
    logging.getLogger("asyncio").addFilter(_NeverRetrieved())


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
        # the handlers named up front: a new process reads a checkpoint's metadata without restoring it first
        handlers = {"state": ocp.StandardCheckpointHandler(), "record": ocp.JsonCheckpointHandler()}
        self.manager = ocp.CheckpointManager(self.directory, options=options, item_handlers=handlers)
        self.failures: list[str] = []  # "step N: why", one per unreadable checkpoint skipped
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

    def check_fits(self, step: int, abstract_state: Any) -> None:
        """Raises :class:`CheckpointMismatch` when step ``step``'s arrays (read from its metadata) are not
        the state's; a checkpoint whose metadata cannot be read is left for :meth:`restore` to report."""
        try:
            stored = tree_shapes(self.manager.item_metadata(step)["state"].tree)
        except Exception:
            return
        mismatch = shape_mismatch(stored, tree_shapes(abstract_state))
        if mismatch:
            raise CheckpointMismatch(
                f"checkpoint step {step} at {self.directory / str(step)} does not fit the model and optimizer"
                f" (another ModelSpec.path model or checkpoint?): {mismatch}"
            )

    def restore_latest(self, abstract_state: Any) -> tuple[int, Any, dict[str, Any]] | None:
        """The newest readable checkpoint; unreadable ones are skipped, each recorded in ``failures`` and
        logged once an older one is read. Raises :class:`CheckpointMismatch` for one that reads but does
        not fit, and :class:`CheckpointError` naming every step and why when none is readable."""
        self.manager.wait_until_finished()
        self.manager.reload()
        steps = self.steps()
        _quiet_failed_read_noise()  # before any read: the noise starts while a read's error propagates
        for step in reversed(steps):
            self.check_fits(step, abstract_state)
            try:
                state, record = self.restore(step, abstract_state)
            except Exception as error:
                why = (str(error).strip().splitlines() or [""])[0][:200]
                self.failures.append(
                    f"checkpoint step {step} at {self.directory / str(step)} is unreadable"
                    f" ({type(error).__name__}: {why})"
                )
                continue
            for failure in self.failures:
                self.log(f"{failure}; using step {step}")
            return step, state, record
        if steps:
            raise CheckpointError(f"no readable checkpoint in {self.directory}: " + "; ".join(self.failures))
        return None

    def close(self) -> None:
        self.manager.wait_until_finished()
        self.manager.close()
