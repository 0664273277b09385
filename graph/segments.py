"""Segment primitives with static shapes: dense interning of keys and per-segment normalization."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

INT32_LIMIT = 2**31 - 1


def _packed_key(keys: tuple[jax.Array, ...], bounds: tuple[int, ...]) -> jax.Array:
    packed = jnp.zeros_like(keys[0], dtype=jnp.int32)
    for key, bound in zip(keys, bounds, strict=True):
        packed = packed * bound + key.astype(jnp.int32)
    return packed


def intern_keys(keys: tuple[jax.Array, ...], mask: jax.Array, bounds: tuple[int, ...]) -> tuple[jax.Array, jax.Array]:
    """Dense ids for the distinct key tuples among the entries where ``mask`` is True.

    Each key must lie in ``[0, bound)`` for its static ``bounds`` entry. Ids of masked entries are
    ``0 .. count-1`` in the lexicographic order of the keys (so the entries of one leading key are
    contiguous); entries where ``mask`` is False get ids ``>= count``, one each. All ids are
    ``< len(mask)``, so ``num_segments=len(mask)`` always suffices. Returns ``(ids, count)``.

    When the packed key fits in int32 this is one single-operand sort plus a binary search (a
    multi-operand comparator sort is ~5x slower on XLA:CPU); otherwise a lexsort.
    """
    n = mask.shape[0]
    total = math.prod(bounds)
    if total + n <= INT32_LIMIT:
        packed = jnp.where(mask, _packed_key(keys, bounds), total + jnp.arange(n, dtype=jnp.int32))
        sorted_keys = jnp.sort(packed)
        differs = jnp.concatenate([jnp.ones((1,), bool), sorted_keys[1:] != sorted_keys[:-1]])
        rank = jnp.cumsum(differs.astype(jnp.int32)) - 1
        ids = rank[jnp.searchsorted(sorted_keys, packed)]
        count = jnp.sum((differs & (sorted_keys < total)).astype(jnp.int32))
        return ids.astype(jnp.int32), count
    return _intern_keys_lexsort(keys, mask)


def _intern_keys_lexsort(keys: tuple[jax.Array, ...], mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    n = mask.shape[0]
    # lexsort: the last key is the primary one, so padding (~mask) sorts after every real entry.
    order = jnp.lexsort((*tuple(reversed(keys)), ~mask))
    sorted_mask = mask[order]
    differs = jnp.zeros((n,), dtype=bool).at[0].set(True)
    for key in keys:
        k = key[order]
        differs = differs | jnp.concatenate([jnp.ones((1,), bool), k[1:] != k[:-1]])
    differs = differs | ~sorted_mask
    sorted_ids = jnp.cumsum(differs.astype(jnp.int32)) - 1
    ids = jnp.zeros((n,), jnp.int32).at[order].set(sorted_ids)
    count = jnp.sum((differs & sorted_mask).astype(jnp.int32))
    return ids, count


def sorting_permutation(keys: tuple[jax.Array, ...], mask: jax.Array, bounds: tuple[int, ...]) -> jax.Array:
    """``position[i]``: where entry ``i`` goes when sorting by the keys, masked-out entries last.

    The key tuples of masked entries must be distinct (then the result is a permutation that does not
    depend on the order the entries arrive in). ``sorted = zeros.at[position].set(x)``,
    ``x == sorted[position]``.
    """
    ids, _ = intern_keys(keys, mask, bounds)
    return ids


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
