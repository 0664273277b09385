"""One jitted, donated ``train_step(state, mini_batch) -> (state, metrics)``.

Gradients are accumulated over micro-batches with ``lax.scan``; every loss is normalized by
mini-batch-wide quantities, so the accumulated gradient equals the single-batch gradient. GGPO first
runs a gradient-free pre-pass over the whole mini-batch (sequence log-probs under learner and
reference) to get its detached coefficients and the global ``T_tok``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from ggtrain.config import TrainConfig
from ggtrain.ggpo import dense_ids, ggpo_coefficients, ggpo_direct_loss
from ggtrain.losses import Batch, make_loss_fn, policy_logits_and_logp, response_mask
from ggtrain.ppo import aggregation_normalizer
from ggtrain.train_state import TrainState
from models.config import ModelConfig

Metrics = dict[str, tuple[jax.Array, jax.Array]]
TrainStep = Callable[[TrainState, Batch], tuple[TrainState, Metrics]]


def split_micro_batches(batch: Batch, micro_rows: int) -> tuple[Batch, int]:
    """``[R, ...] -> [R / micro_rows, micro_rows, ...]``, micro-batch k taking rows k, k + n, k + 2n, ...
    so that each micro-batch draws rows from every data shard."""
    rows = next(iter(batch.values())).shape[0]
    if rows % micro_rows:
        raise ValueError(f"mini-batch of {rows} rows is not a multiple of micro_batch_rows={micro_rows}")
    n = rows // micro_rows

    def split(x: jax.Array) -> jax.Array:
        return x.reshape(micro_rows, n, *x.shape[1:]).swapaxes(0, 1)

    return {k: split(v) for k, v in batch.items()}, n


def merge_micro_batches(x: jax.Array) -> jax.Array:
    """Inverse of :func:`split_micro_batches` for one ``[n, micro_rows, ...]`` array."""
    return x.swapaxes(0, 1).reshape(-1, *x.shape[2:])


def _add(a: Metrics, b: Metrics) -> Metrics:
    return jax.tree_util.tree_map(jnp.add, a, b)


def trajectory_success(batch: Batch) -> jax.Array:
    """Per row: 1.0 when the row's trajectory has a positive return (the GGPO reward)."""
    rows = batch["traj"].shape[0]
    reward = jnp.where(batch["row_mask"], batch["env_reward"], 0.0)
    dense = dense_ids(batch["traj"], batch["row_mask"])
    returns = jax.ops.segment_sum(reward, dense, rows)
    return (returns[dense] > 0).astype(jnp.float32)


def make_gradient_fn(
    model_config: ModelConfig, config: TrainConfig
) -> Callable[[TrainState, Batch], tuple[Any, Metrics, jax.Array]]:
    """``(state, mini_batch) -> (grads, metrics, next_rng)``: the accumulated mini-batch gradient."""
    loss_cfg = config.loss
    loss_fn = make_loss_fn(loss_cfg.name, model_config, loss_cfg)
    is_ggpo = loss_cfg.name == "ggpo"
    needs_ref = is_ggpo or loss_cfg.kl_coef != 0.0
    micro_rows = config.batch.micro_batch_rows

    def logp_of(params: Any, mb: Batch) -> jax.Array:
        return jax.lax.stop_gradient(policy_logits_and_logp(model_config, params, mb, loss_cfg.temperature)[1])

    def ggpo_prepass(state: TrainState, batch: Batch, micro: Batch) -> tuple[Batch, Metrics]:
        def rows_of(_: None, mb: Batch) -> tuple[None, tuple[jax.Array, ...]]:
            mask = response_mask(mb).astype(jnp.float32)
            logp, ref = logp_of(state.params, mb), logp_of(state.ref_params, mb)
            clipped = jnp.zeros(mask.shape[:1])
            if loss_cfg.ggpo_clip_radius is not None:
                r = loss_cfg.ggpo_clip_radius
                clipped = jnp.sum(jnp.clip(logp - ref, -r, r) * mask, axis=1)
            return None, (jnp.sum(logp * mask, 1), jnp.sum(ref * mask, 1), jnp.sum(mask, 1), clipped)

        _, sums = jax.lax.scan(rows_of, None, micro)
        s_row, s_ref_row, tokens_row, clipped_row = (merge_micro_batches(x) for x in sums)
        coef = ggpo_coefficients(
            s_row,
            s_ref_row,
            tokens_row,
            clipped_row if loss_cfg.ggpo_clip_radius is not None else None,
            trajectory_success(batch),
            batch["group"],
            batch["traj"],
            batch["row_mask"],
            loss_cfg.ggpo_beta,
        )
        c_row = jnp.where(batch["row_mask"], coef.c[coef.row_response], 0.0)
        kept_row = batch["row_mask"] & coef.kept[coef.row_response]
        kept_groups = jnp.sum(coef.group_kept.astype(jnp.float32))
        metrics = {
            "ggpo_loss": (ggpo_direct_loss(coef, loss_cfg.ggpo_beta), jnp.ones(())),
            "ggpo_J": (jnp.sum(coef.J), kept_groups),
            "ggpo_kept_groups": (kept_groups, jnp.ones(())),
            "ggpo_t_tok": (coef.t_tok, jnp.ones(())),
            "ggpo_abs_log_ratio": (jnp.sum(jnp.where(coef.kept, jnp.abs(coef.s - coef.s_ref), 0.0)), coef.n_resp),
        }
        return {"ggpo_c": c_row, "ggpo_kept": kept_row, "t_tok": jnp.broadcast_to(coef.t_tok, c_row.shape)}, metrics

    def gradients(state: TrainState, batch: Batch) -> tuple[Any, Metrics, jax.Array]:
        batch = dict(batch)
        mask = response_mask(batch)
        batch["normalizer"] = jnp.broadcast_to(aggregation_normalizer(mask, loss_cfg.aggregation), mask.shape[:1])
        micro, n_micro = split_micro_batches(batch, micro_rows)
        metrics: Metrics = {}
        if is_ggpo:
            extra, metrics = ggpo_prepass(state, batch, micro)
            micro = micro | split_micro_batches(extra, micro_rows)[0]
        rng, step_rng = jax.random.split(state.rng)

        def accumulate(carry: tuple[Any, Metrics | None], xs: tuple[Batch, jax.Array]) -> tuple[Any, Metrics]:
            grads_sum, _ = carry
            mb, index = xs
            mb = dict(mb)
            mb["normalizer"] = mb["normalizer"][0]
            if "t_tok" in mb:
                mb["t_tok"] = mb["t_tok"][0]
            if needs_ref and not is_ggpo:
                mb["ref_logp"] = logp_of(state.ref_params, mb)
            (_, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(
                state.params, mb, jax.random.fold_in(step_rng, index)
            )
            return (jax.tree_util.tree_map(jnp.add, grads_sum, grads), None), aux

        zeros = jax.tree_util.tree_map(jnp.zeros_like, state.params)
        (grads, _), aux = jax.lax.scan(accumulate, (zeros, None), (micro, jnp.arange(n_micro)))
        metrics |= jax.tree_util.tree_map(lambda x: jnp.sum(x, axis=0), aux)
        metrics["rows"] = (jnp.sum(batch["row_mask"].astype(jnp.float32)), jnp.ones(()))
        advantages = jnp.where(batch["row_mask"], batch.get("advantages", jnp.zeros(mask.shape[:1])), 0.0)
        metrics["advantage_mean"] = (jnp.sum(advantages), metrics["rows"][0])
        metrics["advantage_abs_mean"] = (jnp.sum(jnp.abs(advantages)), metrics["rows"][0])
        return grads, metrics, rng

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
    """(sum, count) pairs -> means; a pair with count 0 is a total and gives its sum."""
    return {k: float(total) / float(count) if float(count) else float(total) for k, (total, count) in metrics.items()}
