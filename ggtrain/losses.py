"""Policy losses in a name registry. A registered factory ``(model_config, loss_config)`` returns either a
plain ``loss_fn`` or a :class:`Loss` that adds a ``prepare`` pre-pass; ``make_loss_fn`` always gives a
:class:`Loss`.

``loss_fn(params, micro_batch, scalars, rng) -> (loss, aux)`` runs once per micro-batch; the micro-batch
losses (and gradients) add up to the mini-batch's, so a loss divides by mini-batch-wide ``scalars``:
``normalizer`` (the ``LossConfig.aggregation`` denominator, always there) and whatever ``prepare`` adds.
``prepare(state, mini_batch, micro_rows) -> (Extras, metrics)`` runs once over the whole mini-batch
before the scan, without gradients: ``Extras.rows`` travel with the micro-batch rows (e.g. ``ref_logp``,
``ggpo_c``), ``Extras.scalars`` join ``scalars`` (e.g. GGPO's ``t_tok``). ``aux`` and ``metrics`` hold
(sum, count) pairs; a count of 0 marks a total (e.g. ``tokens``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from ggtrain.config import LossConfig
from ggtrain.ggpo import ggpo_loss, ggpo_prepare, ggpo_surrogate
from ggtrain.packing import aggregate, row_to_tokens
from ggtrain.policy import Batch, Extras, detached_logp, map_micro_batches, pair, policy_logits_and_logp, response_mask
from ggtrain.ppo import clipped_policy_gradient, kl_penalty, token_entropy
from ggtrain.train_state import TrainState
from models.config import ModelConfig

Scalars = dict[str, jax.Array]
Metrics = dict[str, tuple[jax.Array, jax.Array]]
LossFn = Callable[[Any, Batch, Scalars, jax.Array], tuple[jax.Array, dict[str, Any]]]
PrepareFn = Callable[[TrainState, Batch, int], tuple[Extras, Metrics]]


class Loss(NamedTuple):
    fn: LossFn
    prepare: PrepareFn | None = None


LossFactory = Callable[[ModelConfig, LossConfig], "LossFn | Loss"]
LOSSES: dict[str, LossFactory] = {}

__all__ = [
    "LOSSES",
    "Extras",
    "Loss",
    "ggpo_loss",
    "make_loss_fn",
    "policy_logits_and_logp",
    "register_loss",
    "response_mask",
]


def register_loss(name: str) -> Callable[[LossFactory], LossFactory]:
    def register(factory: LossFactory) -> LossFactory:
        LOSSES[name] = factory
        return factory

    return register


def make_loss_fn(name: str, model_config: ModelConfig, loss_config: LossConfig) -> Loss:
    if name not in LOSSES:
        raise ValueError(f"unknown policy loss {name!r}: expected one of {sorted(LOSSES)}")
    loss = LOSSES[name](model_config, loss_config)
    return loss if isinstance(loss, Loss) else Loss(loss)


def reference_logp_prepare(model_config: ModelConfig, cfg: LossConfig) -> PrepareFn:
    """Per-token reference log-probs as a row extra ``ref_logp``, for a KL penalty."""

    def prepare(state: TrainState, batch: Batch, micro_rows: int) -> tuple[Extras, Metrics]:
        ref = map_micro_batches(
            lambda mb: detached_logp(model_config, state.ref_params, mb, cfg.temperature), batch, micro_rows
        )
        return Extras(rows={"ref_logp": ref}, scalars={}), {}

    return prepare


@register_loss("ppo_clip")
def ppo_clip(model_config: ModelConfig, cfg: LossConfig) -> Loss:
    def loss_fn(params: Any, batch: Batch, scalars: Scalars, rng: jax.Array) -> tuple[jax.Array, dict[str, Any]]:
        del rng
        mask = response_mask(batch)
        maskf = mask.astype(jnp.float32)
        logits, logp = policy_logits_and_logp(model_config, params, batch, cfg.temperature)
        advantage = row_to_tokens(batch, batch["advantages"]) * maskf
        pg, clipped = clipped_policy_gradient(
            logp, batch["old_logp"], advantage, cfg.clip_low, cfg.clip_high, cfg.dual_clip
        )
        pg_sum, count = aggregate(batch, pg, mask, cfg.aggregation)
        loss_sum = pg_sum
        tokens = jnp.sum(maskf)
        aux: dict[str, Any] = {
            "pg_loss": pair(pg_sum, count),
            "clip_fraction": pair(jnp.sum(clipped * maskf), tokens),
            "tokens": pair(tokens, 0.0),
            "log_ratio": pair(jnp.sum((logp - batch["old_logp"]) * maskf), tokens),
        }
        if "ref_logp" in batch:  # from reference_logp_prepare when kl_coef != 0
            kl_sum, _ = aggregate(batch, kl_penalty(logp, batch["ref_logp"], cfg.kl_type), mask, cfg.aggregation)
            loss_sum = loss_sum + cfg.kl_coef * kl_sum
            aux["kl"] = pair(kl_sum, count)
        if cfg.entropy_coef:
            # entropy of the distribution that produced token t: the logits at t - 1
            entropy = jnp.concatenate([jnp.zeros_like(logp[:, :1]), token_entropy(logits[:, :-1] / cfg.temperature)], 1)
            ent_sum, _ = aggregate(batch, entropy, mask, cfg.aggregation)
            loss_sum = loss_sum - cfg.entropy_coef * ent_sum
            aux["entropy"] = pair(ent_sum, count)
        aux["loss"] = pair(loss_sum, count)
        return loss_sum / scalars["normalizer"], aux

    return Loss(loss_fn, reference_logp_prepare(model_config, cfg) if cfg.kl_coef != 0.0 else None)


@register_loss("ggpo")
def ggpo(model_config: ModelConfig, cfg: LossConfig) -> Loss:
    """GGPO (ALGORITHMS.md §10): coefficients from the pre-pass, then the linear surrogate."""
    return Loss(ggpo_surrogate(model_config, cfg), ggpo_prepare(model_config, cfg))


@register_loss("sft")
def sft(model_config: ModelConfig, cfg: LossConfig) -> LossFn:
    """Supervised fine-tuning (``ggtrain sft``): the negative log-likelihood of the response tokens,
    aggregated as ``LossConfig.aggregation`` says (token-mean by default)."""

    def loss_fn(params: Any, batch: Batch, scalars: Scalars, rng: jax.Array) -> tuple[jax.Array, dict[str, Any]]:
        del rng
        mask = response_mask(batch)
        _, logp = policy_logits_and_logp(model_config, params, batch, 1.0)
        nll_sum, count = aggregate(batch, -logp, mask, cfg.aggregation)
        tokens = jnp.sum(mask.astype(jnp.float32))
        aux = {"loss": pair(nll_sum, count), "tokens": pair(tokens, jnp.zeros(()))}
        return nll_sum / scalars["normalizer"], aux

    return loss_fn
