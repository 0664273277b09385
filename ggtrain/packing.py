"""The two batch layouts seen from a loss: per-row values and per-token values, either way.

Padded (``env_bridge.collate``): rows are ``[R]``, tokens ``[R, L]``, a row's tokens are its line.
Packed (``env_bridge.packing``, a batch with ``segment_ids``): rows are ``[S, K]`` tables, tokens
``[S, L]``, slot ``k`` owns the tokens of segment ``k + 1``. Everything a loss needs from the layout goes
through :func:`row_to_tokens` and :func:`row_sums`; on the padded layout they are the plain broadcast
and sum, so the padded path computes what it always did.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from env_bridge.packing import Packing, micro_batch_sequences
from ggtrain.config import BatchConfig
from ggtrain.ppo import aggregate_parts, aggregate_sequences, aggregation_normalizer

Batch = dict[str, jax.Array]


def is_packed(batch: Batch) -> bool:
    return "segment_ids" in batch


def row_to_tokens(batch: Batch, values: jax.Array) -> jax.Array:
    """Per-row ``values`` where each row's tokens are: ``[R, 1]`` (broadcasts) padded, ``[S, L]`` packed
    (zero on padding)."""
    if not is_packed(batch):
        return values[:, None]
    segments = batch["segment_ids"]
    picked = jnp.take_along_axis(values, jnp.maximum(segments - 1, 0), axis=1)
    return jnp.where(segments > 0, picked, jnp.zeros((), values.dtype))


def row_sums(batch: Batch, token_values: jax.Array) -> jax.Array:
    """Per-row sums of per-token values: ``[R]`` padded, ``[S, K]`` packed."""
    if not is_packed(batch):
        return jnp.sum(token_values, axis=-1)
    slots = jnp.arange(1, batch["row_mask"].shape[-1] + 1)
    owned = batch["segment_ids"][:, :, None] == slots  # [S, L, K]
    # a masked sum, not a one-hot matmul: exact on every backend (a TPU f32 matmul is not)
    return jnp.sum(jnp.where(owned, token_values[:, :, None], jnp.zeros((), token_values.dtype)), axis=1)


def aggregate(batch: Batch, values: jax.Array, mask: jax.Array, mode: str) -> tuple[jax.Array, jax.Array]:
    """``ggtrain.ppo.aggregate_parts`` on either layout: the ``seq-mean`` modes average over rows."""
    if not is_packed(batch) or mode == "token-mean":
        return aggregate_parts(values, mask, mode)
    m = mask.astype(jnp.float32)
    return aggregate_sequences(row_sums(batch, values * m), row_sums(batch, m), mode)


def normalizer(batch: Batch, mask: jax.Array, mode: str) -> jax.Array:
    """``ggtrain.ppo.aggregation_normalizer`` on either layout (rows with loss tokens, not sequences)."""
    if not is_packed(batch) or mode == "token-mean":
        return aggregation_normalizer(mask, mode)
    rows_with_tokens = row_sums(batch, mask.astype(jnp.float32)) > 0
    return jnp.maximum(jnp.sum(rows_with_tokens.astype(jnp.float32)), 1.0)


def real_token_fraction(batch: Batch) -> tuple[jax.Array, jax.Array]:
    """(real token positions, computed positions): the share of the model's work that is not padding."""
    real = batch["attention_mask"] & row_to_tokens(batch, batch["row_mask"])
    return jnp.sum(real.astype(jnp.float32)), jnp.asarray(real.size, jnp.float32)


def micro_batch_tokens(config: BatchConfig) -> int:
    """``BatchConfig.micro_batch_tokens``, where 0 means a padded micro-batch's positions at ``pack_length``."""
    return config.micro_batch_tokens or config.micro_batch_rows * config.pack_length


def micro_batch_size(config: BatchConfig, batch: Batch) -> int:
    """Rows (padded) or sequences (packed) per micro-batch of ``batch``; shapes are static under jit."""
    if not is_packed(batch):
        return config.micro_batch_rows
    sequences, length = batch["tokens"].shape
    return micro_batch_sequences(sequences, length, micro_batch_tokens(config))


def packing_of(config: BatchConfig, batch_shards: int = 1, processes: int = 1) -> Packing | None:
    """The collation's packing (None: the padded layout), sequences a multiple of the mesh's batch shards.
    With several processes, one host's share: its shards, its share of a micro-batch's token budget."""
    if not config.packing:
        return None
    return Packing(config.pack_length, max(micro_batch_tokens(config) // processes, 1), batch_shards // processes)


def real_positions(batch: dict[str, Any]) -> int:
    """Real (non-padding) token positions of a host batch of either layout."""
    if "segment_ids" in batch:
        return int((batch["segment_ids"] > 0).sum())
    return int((batch["attention_mask"] & batch["row_mask"][:, None]).sum())
