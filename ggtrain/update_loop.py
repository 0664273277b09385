"""The update half of training, on a stream of turn batches: mesh, sharded state, the jitted step,
policy refreshes, metrics and checkpoints, resumable. The end-to-end loop feeds it rollouts; tests
feed it synthetic batches.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from ggtrain.checkpoint import CheckpointStore, abstract_like
from ggtrain.config import TrainConfig, config_to_dict, write_resolved_config
from ggtrain.metrics import MetricsWriter
from ggtrain.optim import make_optimizer
from ggtrain.sharding import batch_shards, logical_rules_context, make_mesh, param_shardings, shard_batch
from ggtrain.train_state import TrainState, apply_policy_refreshes, create_train_state
from ggtrain.train_step import jit_train_step, make_train_step, metric_means
from models.config import ModelConfig


class DataIterator(Protocol):
    """Batches of numpy turn rows with a checkpointable position (grain's iterator interface)."""

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]: ...

    def __next__(self) -> dict[str, np.ndarray]: ...

    def get_state(self) -> dict[str, Any]: ...

    def set_state(self, state: dict[str, Any]) -> None: ...


@dataclasses.dataclass
class Updater:
    """Owns the mesh, the sharded train state and the jitted step for one run."""

    model_config: ModelConfig
    config: TrainConfig
    state: TrainState
    mesh: Any
    step_fn: Any

    @classmethod
    def create(
        cls, model_config: ModelConfig, params: Any, config: TrainConfig, devices: list[jax.Device] | None = None
    ) -> Updater:
        mesh = make_mesh(config.mesh, devices)
        shardings = param_shardings(model_config, mesh)
        # the step donates the state: copy so the caller's parameter buffers stay alive
        params = jax.tree_util.tree_map(jnp.copy, jax.device_put(params, shardings))
        optimizer = make_optimizer(config.optimizer)
        with jax.set_mesh(mesh), logical_rules_context():
            state = create_train_state(params, optimizer, jax.random.PRNGKey(config.seed))
        state_shardings = jax.tree_util.tree_map(lambda x: x.sharding, state)
        step_fn = jit_train_step(make_train_step(model_config, config, optimizer), state_shardings)
        return cls(model_config, config, state, mesh, step_fn)

    def abstract_state(self) -> Any:
        return abstract_like(self.state)

    @property
    def batch_shards(self) -> int:
        """Devices a batch's rows (or packed sequences) are split over: its row counts are multiples."""
        return batch_shards(self.mesh)

    def update(self, batch: dict[str, np.ndarray]) -> dict[str, tuple[float, float]]:
        """One optimizer step on ``batch`` (with several processes, this host's share of the mini-batch);
        returns (sum, count) metric pairs (count 0 marks a total, e.g. ``tokens``), so a caller adds
        several steps with ``MetricAccumulator.add`` and totals stay totals. Besides the step's own
        metrics: ``step_time_s`` (mean per step), ``tokens_per_s`` (real, attended tokens of the whole
        mini-batch, every host's, over seconds, so its mean is the ratio of the sums) and
        ``reference_refreshed`` (fraction of steps)."""
        start = time.perf_counter()
        with jax.set_mesh(self.mesh), logical_rules_context():
            self.state, metrics = self.step_fn(self.state, shard_batch(batch, self.mesh))
        out = {k: (float(total), float(count)) for k, (total, count) in metrics.items()}  # waits for the step
        seconds = time.perf_counter() - start
        self.state, refreshed = apply_policy_refreshes(self.state, self.config.policies)
        out["step_time_s"] = (seconds, 1.0)
        out["tokens_per_s"] = (out["real_token_fraction"][0], seconds)  # the step's count: every host's rows
        out["reference_refreshed"] = (float(refreshed["reference"]), 1.0)
        return out


def run_updates(
    model_config: ModelConfig,
    params: Any,
    config: TrainConfig,
    data: DataIterator,
    run_dir: str | Path,
    num_steps: int,
    devices: list[jax.Device] | None = None,
) -> Updater:
    """Runs optimizer steps until ``state.step == num_steps``, checkpointing after each; resumes from the
    run directory's newest readable checkpoint (state, PRNG key and data position)."""
    run_dir = Path(run_dir)
    write_resolved_config(config, run_dir)
    updater = Updater.create(model_config, params, config, devices)
    store = CheckpointStore(run_dir / "checkpoints", config.checkpoint)
    restored = store.restore_latest(updater.abstract_state())
    if restored is not None:
        _, updater.state, record = restored
        data.set_state(record["data_iterator"])
    writer = MetricsWriter(run_dir)
    try:
        while int(updater.state.step) < num_steps:
            metrics = metric_means(updater.update(next(data)))
            step = int(updater.state.step)
            writer.write(step, metrics)
            record = {"data_iterator": data.get_state(), "config": config_to_dict(config), "step": step}
            store.save(step, updater.state, record, {"train/" + k: v for k, v in metrics.items()})
    finally:
        store.close()
        writer.close()
    return updater
