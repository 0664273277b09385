"""Policy losses in a name registry: ``make_loss_fn(name, model_config, loss_config)`` returns
``loss_fn(params, batch, rng) -> (loss, aux)`` for one micro-batch.

The micro-batch carries what the loss needs beyond tokens: ``ref_logp`` (reference log-probs), the
mini-batch-wide ``normalizer`` (so micro-batch losses add up to the mini-batch loss) and, for GGPO, the
detached per-row coefficient ``ggpo_c`` and ``t_tok`` from the pre-pass over the whole mini-batch.
``aux`` holds (sum, count) metric pairs; a count of 0 marks a total (e.g. ``tokens``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from ggtrain.config import LossConfig
from ggtrain.ggpo import ggpo_loss
from ggtrain.ppo import aggregate_parts, clipped_policy_gradient, kl_penalty, token_entropy
from models.config import ModelConfig
from models.decoder import forward
from models.scoring import token_logprobs_from_logits

Batch = dict[str, jax.Array]
LossFn = Callable[[Any, Batch, jax.Array], tuple[jax.Array, dict[str, Any]]]
LOSSES: dict[str, Callable[[ModelConfig, LossConfig], LossFn]] = {}

__all__ = ["LOSSES", "ggpo_loss", "make_loss_fn", "policy_logits_and_logp", "register_loss"]


def register_loss(name: str) -> Callable[[Callable[[ModelConfig, LossConfig], LossFn]], Any]:
    def register(factory: Callable[[ModelConfig, LossConfig], LossFn]) -> Callable[[ModelConfig, LossConfig], LossFn]:
        LOSSES[name] = factory
        return factory

    return register


def make_loss_fn(name: str, model_config: ModelConfig, loss_config: LossConfig) -> LossFn:
    if name not in LOSSES:
        raise ValueError(f"unknown policy loss {name!r}: expected one of {sorted(LOSSES)}")
    return LOSSES[name](model_config, loss_config)


def response_mask(batch: Batch) -> jax.Array:
    """Tokens that are trained: the response tokens of real (non-padding) rows."""
    return batch["loss_mask"] & batch["row_mask"][:, None]


def policy_logits_and_logp(
    model_config: ModelConfig, params: Any, batch: Batch, temperature: float
) -> tuple[jax.Array, jax.Array]:
    logits = forward(model_config, params, batch["tokens"], batch["attention_mask"])
    return logits, token_logprobs_from_logits(logits, batch["tokens"], temperature)


def _pair(total: jax.Array, count: jax.Array) -> tuple[jax.Array, jax.Array]:
    return total.astype(jnp.float32), count.astype(jnp.float32)


@register_loss("ppo_clip")
def ppo_clip(model_config: ModelConfig, cfg: LossConfig) -> LossFn:
    def loss_fn(params: Any, batch: Batch, rng: jax.Array) -> tuple[jax.Array, dict[str, Any]]:
        del rng
        mask = response_mask(batch)
        maskf = mask.astype(jnp.float32)
        logits, logp = policy_logits_and_logp(model_config, params, batch, cfg.temperature)
        advantage = batch["advantages"][:, None] * maskf
        pg, clipped = clipped_policy_gradient(
            logp, batch["old_logp"], advantage, cfg.clip_low, cfg.clip_high, cfg.dual_clip
        )
        normalizer = batch["normalizer"]
        pg_sum, count = aggregate_parts(pg, mask, cfg.aggregation)
        loss_sum = pg_sum
        tokens = jnp.sum(maskf)
        aux: dict[str, Any] = {
            "pg_loss": _pair(pg_sum, count),
            "clip_fraction": _pair(jnp.sum(clipped * maskf), tokens),
            "tokens": _pair(tokens, jnp.zeros(())),
            "log_ratio": _pair(jnp.sum((logp - batch["old_logp"]) * maskf), tokens),
        }
        if "ref_logp" in batch:  # the train step computes it when kl_coef != 0
            kl_sum, _ = aggregate_parts(kl_penalty(logp, batch["ref_logp"], cfg.kl_type), mask, cfg.aggregation)
            loss_sum = loss_sum + cfg.kl_coef * kl_sum
            aux["kl"] = _pair(kl_sum, count)
        if cfg.entropy_coef:
            # entropy of the distribution that produced token t: the logits at t - 1
            entropy = jnp.concatenate([jnp.zeros_like(logp[:, :1]), token_entropy(logits[:, :-1] / cfg.temperature)], 1)
            ent_sum, _ = aggregate_parts(entropy, mask, cfg.aggregation)
            loss_sum = loss_sum - cfg.entropy_coef * ent_sum
            aux["entropy"] = _pair(ent_sum, count)
        aux["loss"] = _pair(loss_sum, count)
        return loss_sum / normalizer, aux

    return loss_fn


@register_loss("ggpo")
def ggpo(model_config: ModelConfig, cfg: LossConfig) -> LossFn:
    """The linear surrogate ``-sum_rows c_row * s_row / T_tok`` with ``c`` and ``T_tok`` from the
    mini-batch pre-pass: its gradient equals the direct GGPO loss's (ALGORITHMS.md §10)."""

    def loss_fn(params: Any, batch: Batch, rng: jax.Array) -> tuple[jax.Array, dict[str, Any]]:
        del rng
        mask = response_mask(batch).astype(jnp.float32)
        _, logp = policy_logits_and_logp(model_config, params, batch, cfg.temperature)
        s_row = jnp.sum(logp * mask, axis=1)
        surrogate_sum = -jnp.sum(batch["ggpo_c"] * s_row)
        kept_tokens = jnp.sum(jnp.where(batch["ggpo_kept"], jnp.sum(mask, axis=1), 0.0))
        aux = {"surrogate_loss": _pair(surrogate_sum, kept_tokens), "tokens": _pair(jnp.sum(mask), jnp.zeros(()))}
        return surrogate_sum / jnp.maximum(batch["t_tok"], 1.0), aux

    return loss_fn


@register_loss("sft")
def sft(model_config: ModelConfig, cfg: LossConfig) -> LossFn:
    """Supervised fine-tuning: the negative log-likelihood of the response tokens (``ggtrain sft``),
    aggregated as ``LossConfig.aggregation`` says (token-mean by default)."""

    def loss_fn(params: Any, batch: Batch, rng: jax.Array) -> tuple[jax.Array, dict[str, Any]]:
        del rng
        mask = response_mask(batch)
        _, logp = policy_logits_and_logp(model_config, params, batch, 1.0)
        nll_sum, count = aggregate_parts(-logp, mask, cfg.aggregation)
        tokens = jnp.sum(mask.astype(jnp.float32))
        aux = {"loss": _pair(nll_sum, count), "tokens": _pair(tokens, jnp.zeros(()))}
        return nll_sum / batch["normalizer"], aux

    return loss_fn
