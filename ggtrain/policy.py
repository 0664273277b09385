"""What the losses, their pre-passes and the train step share: the trained-token mask, the policy's
token log-probs, and the split of a mini-batch into micro-batches (to bound activation memory).

Kept apart from ``losses.py`` so that ``ggpo.py`` can use it while ``losses.py`` imports ``ggpo.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from ggtrain.packing import row_to_tokens
from models.config import ModelConfig
from models.decoder import forward
from models.scoring import segment_first_zero, token_logprobs_from_logits

Batch = dict[str, jax.Array]


def response_mask(batch: Batch) -> jax.Array:
    """Tokens that are trained: the response tokens of real (non-padding) rows."""
    return batch["loss_mask"] & row_to_tokens(batch, batch["row_mask"])


def policy_logits_and_logp(
    model_config: ModelConfig, params: Any, batch: Batch, temperature: float
) -> tuple[jax.Array, jax.Array]:
    segments = batch.get("segment_ids")  # packed rows (ggtrain.packing)
    logits = forward(model_config, params, batch["tokens"], batch["attention_mask"], segment_ids=segments)
    logp = token_logprobs_from_logits(logits, batch["tokens"], temperature)
    return logits, logp if segments is None else segment_first_zero(logp, segments)


def detached_logp(model_config: ModelConfig, params: Any, batch: Batch, temperature: float) -> jax.Array:
    """Token log-probs with no gradient: for the reference policy and the pre-passes."""
    return jax.lax.stop_gradient(policy_logits_and_logp(model_config, params, batch, temperature)[1])


def split_micro_batches(batch: Batch, micro_rows: int) -> tuple[Batch, int]:
    """``[R, ...] -> [R / micro_rows, micro_rows, ...]``, micro-batch k taking rows k, k + n, k + 2n, ...
    so that each micro-batch draws rows from every data shard (packed: sequences, with their row tables)."""
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


def map_micro_batches(fn: Callable[[Batch], Any], batch: Batch, micro_rows: int) -> Any:
    """``fn`` (per-row outputs) over the mini-batch one micro-batch at a time, merged back to ``[R, ...]``:
    a whole-mini-batch pre-pass within the memory of one micro-batch."""
    micro, _ = split_micro_batches(batch, micro_rows)
    _, out = jax.lax.scan(lambda _, mb: (None, fn(mb)), None, micro)
    return jax.tree_util.tree_map(merge_micro_batches, out)


def pair(total: jax.Array, count: jax.Array | float) -> tuple[jax.Array, jax.Array]:
    """A (sum, count) metric pair in float32; count 0 marks a total."""
    return jnp.asarray(total).astype(jnp.float32), jnp.asarray(count).astype(jnp.float32)


class Extras(NamedTuple):
    """What a loss's pre-pass hands the micro-batch scan: ``rows`` are ``[R, ...]`` arrays split into
    micro-batches with the batch; ``scalars`` are mini-batch-wide values passed whole to every micro-batch."""

    rows: Batch
    scalars: dict[str, jax.Array]
