"""PPO-clip pieces (ALGORITHMS.md §9): token-level clipped policy gradient with dual clip, KL estimators
against the reference, entropy, and the aggregation modes. Pure functions of arrays."""

from __future__ import annotations

import jax
import jax.numpy as jnp

AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")
KL_TYPES = ("low_var_kl", "kl", "mse")


def clipped_policy_gradient(
    logp: jax.Array, old_logp: jax.Array, advantage: jax.Array, clip_low: float, clip_high: float, dual_clip: float
) -> tuple[jax.Array, jax.Array]:
    """Per-token ``pg = max(-A rho, -A clip(rho, 1-lo, 1+hi))``, then ``min(pg, -A c)`` where ``A < 0``.
    Returns ``(pg, clipped)``: ``clipped`` marks tokens where the clip (or dual clip) was active."""
    ratio = jnp.exp(logp - old_logp)
    unclipped = -advantage * ratio
    clipped_obj = -advantage * jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high)
    pg = jnp.maximum(unclipped, clipped_obj)
    dual = -advantage * dual_clip
    pg_dual = jnp.where(advantage < 0, jnp.minimum(pg, dual), pg)
    clipped = (clipped_obj > unclipped) | ((advantage < 0) & (pg > dual))
    return pg_dual, clipped


def kl_penalty(logp: jax.Array, ref_logp: jax.Array, kind: str) -> jax.Array:
    """Per-token KL estimate of the learner against the reference: ``kl`` (k1), ``mse`` (k2) or
    ``low_var_kl`` (k3, clamped to [-10, 10])."""
    if kind == "kl":
        return logp - ref_logp
    if kind == "mse":
        return 0.5 * jnp.square(logp - ref_logp)
    if kind == "low_var_kl":
        log_ratio = ref_logp - logp
        return jnp.clip(jnp.exp(log_ratio) - log_ratio - 1.0, -10.0, 10.0)
    raise ValueError(f"kl_type={kind!r}: expected one of {KL_TYPES}")


def token_entropy(logits: jax.Array) -> jax.Array:
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return -jnp.sum(jnp.exp(logp) * logp, axis=-1)


def aggregate_parts(values: jax.Array, mask: jax.Array, mode: str) -> tuple[jax.Array, jax.Array]:
    """``(numerator, count)`` of ``values [B, T]`` over ``mask`` for this micro-batch: ``token-mean``
    sums tokens and counts them; the ``seq-mean-*`` modes sum per-sequence values and count sequences
    (rows with loss tokens). The loss is ``numerator / normalizer`` with the *mini-batch* normalizer, so
    micro-batch losses add up to the mini-batch loss; ``(numerator, count)`` is the metric pair."""
    m = mask.astype(jnp.float32)
    if mode == "token-mean":
        return jnp.sum(values * m), jnp.sum(m)
    return aggregate_sequences(jnp.sum(values * m, axis=-1), jnp.sum(m, axis=-1), mode)


def aggregate_sequences(per_seq: jax.Array, tokens: jax.Array, mode: str) -> tuple[jax.Array, jax.Array]:
    """The ``seq-mean-*`` ``(numerator, count)`` from per-sequence sums and token counts of any shape
    (``[B]`` rows, or a packed batch's ``[S, K]`` segment table)."""
    if mode == "seq-mean-token-mean":
        per_seq = per_seq / jnp.maximum(tokens, 1.0)
    elif mode != "seq-mean-token-sum":
        raise ValueError(f"aggregation={mode!r}: expected one of {AGGREGATIONS}")
    return jnp.sum(per_seq), jnp.sum((tokens > 0).astype(jnp.float32))


def aggregation_normalizer(mask: jax.Array, mode: str) -> jax.Array:
    """The mini-batch-wide denominator of the losses built from :func:`aggregate_parts`."""
    m = mask.astype(jnp.float32)
    if mode == "token-mean":
        return jnp.maximum(jnp.sum(m), 1.0)
    return jnp.maximum(jnp.sum((jnp.sum(m, axis=-1) > 0).astype(jnp.float32)), 1.0)
