"""Log-probabilities of given tokens under the model: the trainer's old / reference log-probs."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from models.config import ModelConfig
from models.decoder import forward, segment_positions


def token_logprobs_from_logits(logits: jax.Array, tokens: jax.Array, temperature: float = 1.0) -> jax.Array:
    """``out[b, t] = log p(tokens[b, t] | tokens[b, :t])`` from ``logits [B, T, V]``; ``out[:, 0] = 0``."""
    scaled = logits[:, :-1].astype(jnp.float32) / temperature
    # logsumexp + gather instead of a full log_softmax: one [B, T, V] array fewer (forward and backward)
    picked = jnp.take_along_axis(scaled, tokens[:, 1:, None], axis=-1)[..., 0]
    picked = picked - jax.nn.logsumexp(scaled, axis=-1)
    return jnp.concatenate([jnp.zeros_like(picked[:, :1]), picked], axis=1)


def segment_first_zero(logp: jax.Array, segment_ids: jax.Array) -> jax.Array:
    """Packed log-probs with 0 at each segment's first token and on padding, as the padded layout has at
    position 0: those entries are read off the previous segment's last logits and belong to no row."""
    return jnp.where((segment_positions(segment_ids) > 0) & (segment_ids > 0), logp, 0.0)


def score_tokens(
    config: ModelConfig,
    params: dict[str, Any],
    tokens: jax.Array,
    attention_mask: jax.Array,
    loss_mask: jax.Array,
    temperature: float = 1.0,
    segment_ids: jax.Array | None = None,
) -> jax.Array:
    """Per-token log-probs ``[B, T]`` of ``tokens``, zero outside ``loss_mask`` (the response tokens).
    With ``segment_ids`` the rows are packed (``models.decoder.forward``)."""
    logits = forward(config, params, tokens, attention_mask, segment_ids=segment_ids)
    logp = token_logprobs_from_logits(logits, tokens, temperature)
    if segment_ids is not None:
        logp = segment_first_zero(logp, segment_ids)
    return jnp.where(loss_mask, logp, 0.0)


score_tokens_jit = jax.jit(score_tokens, static_argnums=(0, 5))
