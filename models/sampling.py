"""Token sampling from logits: greedy, temperature, top-k, top-p (pure functions, jit-friendly)."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def sample_tokens(
    logits: jax.Array, key: jax.Array, temperature: float, top_k: int, top_p: float
) -> tuple[jax.Array, jax.Array]:
    """Samples one token per row of ``logits [B, V]``; returns ``(tokens [B], logp [B])``.

    ``key`` is one key, or one key per row (``[B, 2]``): then a row's sample depends only on its own key
    and logits, not on which other rows share the batch.

    ``logp`` is the token's log-probability under ``softmax(logits / temperature)`` (temperature 1 when
    greedy), before top-k / top-p truncation: the distribution the scorer recomputes for the loss.
    ``temperature``, ``top_k`` and ``top_p`` are static (Python numbers).
    """
    logits = logits.astype(jnp.float32)
    scaled = logits / temperature if temperature > 0 else logits
    logp_all = jax.nn.log_softmax(scaled, axis=-1)
    if temperature <= 0:
        tokens = jnp.argmax(logits, axis=-1)
    else:
        masked = scaled
        if top_k > 0:
            kth = jax.lax.top_k(masked, top_k)[0][:, -1:]
            masked = jnp.where(masked < kth, -jnp.inf, masked)
        if top_p < 1.0:
            sorted_logits = jnp.sort(masked, axis=-1)[:, ::-1]
            probs = jax.nn.softmax(sorted_logits, axis=-1)
            before = jnp.cumsum(probs, axis=-1) - probs  # mass strictly above each candidate
            keep = before < top_p  # always keeps the most likely token
            threshold = jnp.min(jnp.where(keep, sorted_logits, jnp.inf), axis=-1, keepdims=True)
            masked = jnp.where(masked < threshold, -jnp.inf, masked)
        if key.ndim == 2:
            tokens = jax.vmap(lambda k, row: jax.random.categorical(k, row))(key, masked)
        else:
            tokens = jax.random.categorical(key, masked, axis=-1)
    tokens = tokens.astype(jnp.int32)
    return tokens, jnp.take_along_axis(logp_all, tokens[:, None], axis=-1)[:, 0]
