"""Segment primitives with static shapes: dense interning of keys and per-segment normalization."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def intern_keys(keys: tuple[jax.Array, ...], mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Dense ids for the distinct key tuples among the entries where ``mask`` is True.

    Ids of masked entries are ``0 .. count-1`` and follow the lexicographic order of the keys (so
    the entries of one leading key are contiguous); entries where ``mask`` is False get ids
    ``>= count`` and never share an id with a masked one. All ids are ``< len(mask)``, so
    ``num_segments=len(mask)`` is always enough. Returns ``(ids, count)``.
    """
    n = mask.shape[0]
    # lexsort: the last key is the primary one, so padding (~mask) sorts after every real entry.
    order = jnp.lexsort(tuple(reversed(keys)) + (~mask,))
    sorted_keys = [k[order] for k in keys]
    sorted_mask = mask[order]
    differs = jnp.zeros((n,), dtype=bool).at[0].set(True)
    for k in sorted_keys:
        differs = differs | jnp.concatenate([jnp.ones((1,), bool), k[1:] != k[:-1]])
    # every padding entry gets an id of its own
    differs = differs | ~sorted_mask
    sorted_ids = jnp.cumsum(differs.astype(jnp.int32)) - 1
    ids = jnp.zeros((n,), jnp.int32).at[order].set(sorted_ids)
    count = jnp.sum((differs & sorted_mask).astype(jnp.int32))
    return ids, count


def segment_count(segment_ids: jax.Array, weight: jax.Array, num_segments: int) -> jax.Array:
    return jax.ops.segment_sum(weight.astype(jnp.int32), segment_ids, num_segments=num_segments)


def segment_normalize(
    x: jax.Array,
    segment_ids: jax.Array,
    weight: jax.Array,
    *,
    num_segments: int,
    mode: str,
    epsilon: float,
    singleton_raw: bool,
) -> jax.Array:
    """Normalizes ``x`` within segments (ALGORITHMS.md §1); entries with ``weight == False`` take no
    part and get 0.

    ``mean_std``: ``(x - mean) / (sample_std + epsilon)``; ``mean``: ``x - mean``. A segment with one
    entry gives the raw value when ``singleton_raw`` (episode level: mean 0, std 1) and 0 otherwise
    (step and graph level). Each segment is first shifted by its own minimum, so a segment of identical
    values gives exactly 0.
    """
    x = jnp.where(weight, x, 0.0).astype(jnp.float32)
    big = jnp.asarray(jnp.inf, jnp.float32)
    seg_min = jax.ops.segment_min(jnp.where(weight, x, big), segment_ids, num_segments=num_segments)
    shifted = jnp.where(weight, x - seg_min[segment_ids], 0.0)
    w = weight.astype(jnp.float32)
    count = jax.ops.segment_sum(w, segment_ids, num_segments=num_segments)
    mean = jax.ops.segment_sum(shifted * w, segment_ids, num_segments=num_segments) / jnp.maximum(count, 1.0)
    centered = jnp.where(weight, shifted - mean[segment_ids], 0.0)
    if mode == "mean_std":
        var = jax.ops.segment_sum(centered * centered, segment_ids, num_segments=num_segments)
        std = jnp.sqrt(var / jnp.maximum(count - 1.0, 1.0))
        normalized = centered / (std[segment_ids] + epsilon)
    elif mode == "mean":
        normalized = centered
    else:
        raise ValueError(f"mode={mode!r}: expected 'mean_std' or 'mean'")
    singleton = count[segment_ids] == 1.0
    singleton_value = x if singleton_raw else jnp.zeros_like(x)
    return jnp.where(weight, jnp.where(singleton, singleton_value, normalized), 0.0)
