"""Causal attention over a whole batch without a cache, behind one interface: the masked einsum (the
reference, any backend; without a cache it runs a block of queries at a time against the keys up to the
block, skipping the scores the causal mask hides) or the TPU splash kernel, which takes segment ids and
skips the blocks that the causal and segment masks hide (``ModelConfig.attention``).

Both see ``q [B, T, Hkv, G, D]`` (query heads grouped by their key/value head), ``k, v [B, T, Hkv, D]``
and ``segments [B, T]`` (0 on padding; a padded batch is one segment per row). They agree on every real
token; on padding they may differ, and nothing reads padding.
"""

from __future__ import annotations

import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

ATTENTION_KERNELS = ("masked", "splash", "splash_interpret")
MASK_VALUE = -1e30  # finite: a fully masked (padding) row softmaxes to uniform instead of NaN
SPLASH_BLOCK = 128
CAUSAL_BLOCK = 128  # queries per block of causal_masked_attention


def masked_attention(q: jax.Array, k: jax.Array, v: jax.Array, visible: jax.Array, dtype: jnp.dtype) -> jax.Array:
    """The reference: scores for every (query, key) pair, ``visible [B, T, S]`` keeps the allowed ones;
    probabilities and output in ``dtype`` (the compute dtype)."""
    head_dim = q.shape[-1]
    scores = jnp.einsum("btkgd,bskd->bkgts", q, k.astype(q.dtype)).astype(jnp.float32)
    scores = scores / jnp.sqrt(jnp.float32(head_dim))
    scores = jnp.where(visible[:, None, None, :, :], scores, MASK_VALUE)
    probs = jax.nn.softmax(scores, axis=-1).astype(dtype)
    return jnp.einsum("bkgts,bskd->btkgd", probs, v.astype(dtype))


def causal_masked_attention(
    q: jax.Array, k: jax.Array, v: jax.Array, visible: jax.Array, dtype: jnp.dtype, block: int = CAUSAL_BLOCK
) -> jax.Array:
    """:func:`masked_attention` without a cache (key ``s`` is the token at position ``s``, and ``visible``
    hides every key after its query), ``block`` queries at a time against the keys up to the block's
    last one: the scores above the diagonal are never computed (at 512 tokens in blocks of 128, 6 of
    every 16). The same values on every query that sees a key, up to the order of the sums (a query that
    sees none, padding, averages the values of its block's keys instead of all; nothing reads it). A
    length that is not a multiple of ``block``, or no longer than it, takes the one-block path."""
    length = q.shape[1]
    if length <= block or length % block:
        return masked_attention(q, k, v, visible, dtype)
    return jnp.concatenate(
        [
            masked_attention(
                q[:, s : s + block], k[:, : s + block], v[:, : s + block], visible[:, s : s + block, : s + block], dtype
            )
            for s in range(0, length, block)
        ],
        axis=1,
    )


def splash_fits(length: int) -> bool:
    """Whether the kernel takes a sequence of ``length`` tokens (its blocks are multiples of 128 lanes).
    Other lengths (a short length bucket, the one-token trace of a parameter init) take the masked path,
    which computes the same values."""
    return length > 0 and length % SPLASH_BLOCK == 0


def _splash_kernel(length: int, groups: int, interpret: bool) -> Any:
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as splash
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as masks

    block = SPLASH_BLOCK
    mask = masks.MultiHeadMask([masks.CausalMask((length, length))] * groups)
    sizes = splash.BlockSizes(
        block_q=block,
        block_kv=block,
        block_kv_compute=block,
        block_q_dkv=block,
        block_kv_dkv=block,
        block_kv_dkv_compute=block,
        block_q_dq=block,
        block_kv_dq=block,
    )
    # built inside each trace, not cached: the kernel holds arrays made under the caller's trace.
    # MQA form: the G query heads of one key/value head share its keys (vmapped over the kv heads)
    return splash.make_splash_mqa_single_device(mask, block_sizes=sizes, interpret=interpret)


def _splash_local(q: jax.Array, k: jax.Array, v: jax.Array, segments: jax.Array, interpret: bool) -> jax.Array:
    from jax.experimental.pallas.ops.tpu.splash_attention.splash_attention_kernel import SegmentIds

    _, length, _, groups, head_dim = q.shape
    kernel = _splash_kernel(length, groups, interpret)
    scale = jnp.asarray(1.0 / jnp.sqrt(jnp.float32(head_dim)), q.dtype)
    qh = jnp.transpose(q * scale, (0, 2, 3, 1, 4))  # [B, Hkv, G, T, D]
    kh, vh = (jnp.transpose(x.astype(q.dtype), (0, 2, 1, 3)) for x in (k, v))  # [B, Hkv, T, D]

    def one_row(q_row: jax.Array, k_row: jax.Array, v_row: jax.Array, seg: jax.Array) -> jax.Array:
        ids = SegmentIds(q=seg, kv=seg)
        return jax.vmap(lambda qq, kk, vv: kernel(qq, kk, vv, segment_ids=ids))(q_row, k_row, v_row)

    out = jax.vmap(one_row)(qh, kh, vh, segments.astype(jnp.int32))  # [B, Hkv, G, T, D]
    return jnp.transpose(out, (0, 3, 1, 2, 4))


def _mesh_spec(logical: tuple[str | None, ...]) -> PartitionSpec:
    """The mesh layout the logical-axis rules in context (``ggtrain.sharding``) give these axes."""
    return PartitionSpec(*(nn.logical_to_mesh_axes(logical) or ()))


def splash_attention(q: jax.Array, k: jax.Array, v: jax.Array, segments: jax.Array, interpret: bool) -> jax.Array:
    """The splash kernel per (row, key/value head). Under a mesh (``jax.set_mesh``) it runs inside
    ``shard_map`` with the logical-axis rules' layout (rows over the batch axes, heads over ``tensor``): a
    Pallas call is opaque to the SPMD partitioner, which would otherwise gather every row to every chip."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty:
        return _splash_local(q, k, v, segments, interpret)
    q_spec, kv_spec, seg_spec = (
        _mesh_spec(("batch", "length", "kv_heads", None, "head_dim")),
        _mesh_spec(("batch", "length", "kv_heads", "head_dim")),
        _mesh_spec(("batch", "length")),
    )
    specs = (q_spec, kv_spec, kv_spec, seg_spec)
    local = functools.partial(_splash_local, interpret=interpret)
    return jax.shard_map(local, mesh=mesh, in_specs=specs, out_specs=specs[0], check_vma=False)(q, k, v, segments)
