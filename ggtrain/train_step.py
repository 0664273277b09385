"""One jitted, donated ``train_step(state, mini_batch) -> (state, metrics)``.

Gradients are accumulated over micro-batches with ``lax.scan``; every loss is normalized by
mini-batch-wide scalars, so the accumulated gradient equals the single-batch gradient. A loss's
optional ``prepare`` pre-pass (``ggtrain.losses``) runs first over the whole mini-batch: its per-row
extras are split with the rows, its scalars go whole to every micro-batch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from ggtrain.config import TrainConfig
from ggtrain.losses import Loss, Metrics, Scalars, make_loss_fn
from ggtrain.metrics import MetricAccumulator
from ggtrain.packing import micro_batch_size, normalizer, real_token_fraction
from ggtrain.policy import Batch, merge_micro_batches, response_mask, split_micro_batches
from ggtrain.train_state import TrainState
from models.config import ModelConfig

TrainStep = Callable[[TrainState, Batch], tuple[TrainState, Metrics]]

__all__ = [
    "jit_train_step",
    "make_gradient_fn",
    "make_train_step",
    "merge_micro_batches",
    "metric_means",
    "split_micro_batches",
]


def _accumulate_gradients(
    loss: Loss, state: TrainState, micro: Batch, n_micro: int, scalars: Scalars, rng: jax.Array
) -> tuple[Any, Metrics]:
    """Sum of the micro-batch gradients and of their (sum, count) metric pairs."""

    def step(grads_sum: Any, xs: tuple[Batch, jax.Array]) -> tuple[Any, Metrics]:
        mb, index = xs
        (_, aux), grads = jax.value_and_grad(loss.fn, has_aux=True)(
            state.params, mb, scalars, jax.random.fold_in(rng, index)
        )
        return jax.tree_util.tree_map(jnp.add, grads_sum, grads), aux

    zeros = jax.tree_util.tree_map(jnp.zeros_like, state.params)
    grads, aux = jax.lax.scan(step, zeros, (micro, jnp.arange(n_micro)))
    return grads, jax.tree_util.tree_map(lambda x: jnp.sum(x, axis=0), aux)


def _batch_metrics(batch: Batch) -> Metrics:
    rows = jnp.sum(batch["row_mask"].astype(jnp.float32))
    advantages = jnp.where(batch["row_mask"], batch.get("advantages", jnp.zeros(batch["row_mask"].shape)), 0.0)
    return {
        "rows": (rows, jnp.ones(())),
        "advantage_mean": (jnp.sum(advantages), rows),
        "advantage_abs_mean": (jnp.sum(jnp.abs(advantages)), rows),
        "real_token_fraction": real_token_fraction(batch),
    }


def make_gradient_fn(
    model_config: ModelConfig, config: TrainConfig
) -> Callable[[TrainState, Batch], tuple[Any, Metrics, jax.Array]]:
    """``(state, mini_batch) -> (grads, metrics, next_rng)``: the accumulated mini-batch gradient, on the
    padded or the packed layout (``ggtrain.packing``), whichever the batch has."""
    loss = make_loss_fn(config.loss.name, model_config, config.loss)

    def gradients(state: TrainState, batch: Batch) -> tuple[Any, Metrics, jax.Array]:
        micro_rows = micro_batch_size(config.batch, batch)
        scalars: Scalars = {"normalizer": normalizer(batch, response_mask(batch), config.loss.aggregation)}
        metrics: Metrics = {}
        if loss.prepare is not None:
            extras, metrics = loss.prepare(state, batch, micro_rows)
            batch = batch | extras.rows
            scalars = scalars | extras.scalars
        micro, n_micro = split_micro_batches(batch, micro_rows)
        rng, step_rng = jax.random.split(state.rng)
        grads, aux = _accumulate_gradients(loss, state, micro, n_micro, scalars, step_rng)
        return grads, dict(metrics) | aux | _batch_metrics(batch), rng

    return gradients


def make_train_step(
    model_config: ModelConfig, config: TrainConfig, optimizer: optax.GradientTransformation
) -> TrainStep:
    gradients = make_gradient_fn(model_config, config)

    def train_step(state: TrainState, batch: Batch) -> tuple[TrainState, Metrics]:
        grads, metrics, rng = gradients(state, batch)
        grad_norm = optax.tree.norm(grads)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        metrics["grad_norm"] = (grad_norm, jnp.ones(()))
        new_state = dataclasses.replace(state, step=state.step + 1, params=params, opt_state=opt_state, rng=rng)
        return new_state, metrics

    return train_step


def jit_train_step(train_step: TrainStep, state_shardings: Any = None) -> Callable[..., tuple[TrainState, Metrics]]:
    """``jax.jit`` with the state donated; with ``state_shardings`` the output state keeps them."""
    if state_shardings is None:
        return jax.jit(train_step, donate_argnums=0)
    return jax.jit(train_step, donate_argnums=0, out_shardings=(state_shardings, None))


def metric_means(metrics: dict[str, tuple[Any, Any]]) -> dict[str, float]:
    """(sum, count) pairs -> means, a count of 0 giving the sum: the rule of ``MetricAccumulator``."""
    accumulator = MetricAccumulator()
    accumulator.add(metrics)
    return accumulator.means()
