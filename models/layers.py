"""Decoder building blocks: RMSNorm, rotary embeddings, grouped-query attention, SwiGLU MLP.

Every parameter carries logical axis names (``nn.with_logical_partitioning``) and every activation a
logical constraint, so ``ggtrain/`` shards the model over a (data, fsdp, tensor) mesh through one set
of rules without touching this file. Outside a mesh context the constraints are no-ops.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from models.attention import causal_masked_attention, masked_attention, splash_attention, splash_fits
from models.config import ModelConfig

KVCache = dict[str, jax.Array]

init_normal = nn.initializers.normal(stddev=0.02)


def _param(module: nn.Module, name: str, init: Any, shape: tuple[int, ...], axes: tuple[str, ...], dtype: Any) -> Any:
    return module.param(name, nn.with_logical_partitioning(init, axes), shape, dtype)


class RMSNorm(nn.Module):
    config: ModelConfig

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        cfg = self.config
        scale = _param(self, "scale", nn.initializers.ones, (cfg.hidden_size,), ("norm",), cfg.jnp_param_dtype)
        x32 = x.astype(jnp.float32)
        normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + cfg.rms_norm_eps)
        # HF casts back to the input dtype before the scale
        return scale.astype(cfg.jnp_dtype) * normed.astype(cfg.jnp_dtype)


def rotary_embedding(x: jax.Array, positions: jax.Array, theta: float) -> jax.Array:
    """HF (non-interleaved, ``rotate_half``) rotary embedding of ``x [B, T, H, D]`` at ``positions [B, T]``."""
    head_dim = x.shape[-1]
    inv_freq = 1.0 / (theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim))
    freqs = positions.astype(jnp.float32)[..., None] * inv_freq  # [B, T, D/2]
    angles = jnp.concatenate([freqs, freqs], axis=-1)[:, :, None, :]
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    x32 = x.astype(jnp.float32)
    half = head_dim // 2
    rotated = jnp.concatenate([-x32[..., half:], x32[..., :half]], axis=-1)
    return (x32 * cos + rotated * sin).astype(x.dtype)


class Attention(nn.Module):
    """``fresh_cache``: the keys and values are written from slot 0 of an empty cache (a one-pass prefill),
    so the queries attend to this call's own keys, causally, as without a cache."""

    config: ModelConfig
    fresh_cache: bool = False

    def _project(self, x: jax.Array, name: str, heads: int, axis: str) -> jax.Array:
        cfg = self.config
        width = heads * cfg.head_dim
        kernel = _param(
            self, f"{name}_kernel", init_normal, (cfg.hidden_size, width), ("embed", axis), cfg.jnp_param_dtype
        )
        y = jnp.einsum("bte,ew->btw", x, kernel.astype(cfg.jnp_dtype))
        if cfg.attention_bias:
            bias = _param(self, f"{name}_bias", nn.initializers.zeros, (width,), (axis,), cfg.jnp_param_dtype)
            y = y + bias.astype(cfg.jnp_dtype)
        return y.reshape(*x.shape[:2], heads, cfg.head_dim)

    @nn.compact
    def __call__(
        self,
        x: jax.Array,
        positions: jax.Array,
        kv_valid: jax.Array,
        cache: KVCache | None,
        layer: jax.Array,
        write_index: jax.Array,
        segment_ids: jax.Array | None = None,
    ) -> tuple[jax.Array, KVCache | None]:
        """``cache`` is the whole stack ``{"k", "v"}: [L, B, S, Hkv, D]``; this layer writes its new keys
        and values in place at ``[layer, :, write_index:write_index + T]`` and reads its own slice.
        ``segment_ids [B, T]`` (packed rows, no cache) keep every query inside its own segment."""
        cfg = self.config
        batch, length, _ = x.shape
        q = rotary_embedding(self._project(x, "q", cfg.num_heads, "q_heads"), positions, cfg.rope_theta)
        k = rotary_embedding(self._project(x, "k", cfg.num_kv_heads, "kv_heads"), positions, cfg.rope_theta)
        v = self._project(x, "v", cfg.num_kv_heads, "kv_heads")
        q = nn.with_logical_constraint(q, ("batch", "length", "heads", "head_dim"))
        if cache is not None:
            zero = jnp.zeros((), jnp.int32)
            start = (layer, zero, write_index, zero, zero)
            cache = {
                "k": jax.lax.dynamic_update_slice(cache["k"], k[None].astype(cache["k"].dtype), start),
                "v": jax.lax.dynamic_update_slice(cache["v"], v[None].astype(cache["v"].dtype), start),
            }
        if cache is not None and not self.fresh_cache:
            keys, values = cache["k"][layer], cache["v"][layer]
            query_slots = write_index + jnp.arange(length)
        else:  # key s is the token at position s: this call's own keys, causally
            keys, values, kv_valid, query_slots = k, v, kv_valid[:, :length], jnp.arange(length)
        causal = cache is None or self.fresh_cache
        keys = nn.with_logical_constraint(keys, ("batch", "cache_length", "kv_heads", "head_dim"))
        groups = cfg.num_heads // cfg.num_kv_heads
        q = q.reshape(batch, length, cfg.num_kv_heads, groups, cfg.head_dim)
        if cache is None and cfg.attention != "masked" and splash_fits(length):
            segments = segment_ids if segment_ids is not None else kv_valid.astype(jnp.int32)
            out = splash_attention(q, keys, values, segments, interpret=cfg.attention == "splash_interpret")
        else:
            key_slots = jnp.arange(keys.shape[1])
            visible = kv_valid[:, None, :] & (key_slots[None, None, :] <= query_slots[None, :, None])  # [B, T, S]
            if segment_ids is not None:
                visible = visible & (segment_ids[:, :, None] == segment_ids[:, None, :])
            attend = causal_masked_attention if causal else masked_attention
            out = attend(q, keys, values, visible, cfg.jnp_dtype)
        out = out.reshape(batch, length, cfg.num_heads * cfg.head_dim)
        o_kernel = _param(
            self,
            "o_kernel",
            init_normal,
            (cfg.num_heads * cfg.head_dim, cfg.hidden_size),
            ("q_heads", "embed"),
            cfg.jnp_param_dtype,
        )
        return jnp.einsum("btw,we->bte", out, o_kernel.astype(cfg.jnp_dtype)), cache


class MLP(nn.Module):
    config: ModelConfig

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        cfg = self.config
        shape_in, shape_out = (cfg.hidden_size, cfg.intermediate_size), (cfg.intermediate_size, cfg.hidden_size)
        gate = _param(self, "gate_kernel", init_normal, shape_in, ("embed", "mlp"), cfg.jnp_param_dtype)
        up = _param(self, "up_kernel", init_normal, shape_in, ("embed", "mlp"), cfg.jnp_param_dtype)
        down = _param(self, "down_kernel", init_normal, shape_out, ("mlp", "embed"), cfg.jnp_param_dtype)
        dt = cfg.jnp_dtype
        hidden = jax.nn.silu(jnp.einsum("bte,em->btm", x, gate.astype(dt))) * jnp.einsum(
            "bte,em->btm", x, up.astype(dt)
        )
        hidden = nn.with_logical_constraint(hidden, ("batch", "length", "mlp"))
        return jnp.einsum("btm,me->bte", hidden, down.astype(dt))


class DecoderLayer(nn.Module):
    """One pre-norm block. Scanned over layers with carry ``(h, cache, layer)``: the whole KV cache rides
    in the carry and is updated in place, instead of being sliced and restacked each step."""

    config: ModelConfig
    fresh_cache: bool = False

    @nn.compact
    def __call__(
        self,
        carry: tuple[jax.Array, KVCache | None, jax.Array],
        positions: jax.Array,
        kv_valid: jax.Array,
        write_index: jax.Array,
        segment_ids: jax.Array | None = None,
    ) -> tuple[tuple[jax.Array, KVCache | None, jax.Array], None]:
        h, cache, layer = carry
        attn_out, cache = Attention(self.config, self.fresh_cache, name="attn")(
            RMSNorm(self.config, name="input_norm")(h), positions, kv_valid, cache, layer, write_index, segment_ids
        )
        h = h + attn_out
        h = h + MLP(self.config, name="mlp")(RMSNorm(self.config, name="post_attn_norm")(h))
        h = nn.with_logical_constraint(h, ("batch", "length", "embed"))
        return (h, cache, layer + 1), None
