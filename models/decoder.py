"""The decoder: embeddings, a scanned stack of layers (one compile for any depth), final norm, head."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from models.config import ModelConfig
from models.layers import DecoderLayer, KVCache, RMSNorm, _param, init_normal


class Decoder(nn.Module):
    """``__call__(tokens [B, T], positions [B, T], kv_valid [B, S], cache, write_index) -> (logits, cache)``.

    Without a cache, ``S == T`` and ``kv_valid`` is the attention mask of the tokens (causal masking is
    added); ``segment_ids [B, T]`` (packed rows) also keep attention inside each segment. With a cache
    (``{"k", "v"}: [L, B, S, Hkv, D]``) the new keys/values are written at slots
    ``write_index .. write_index + T`` and the queries see every valid slot up to their own.
    ``last_only`` computes the logits of the last position only (``[B, 1, V]``), as prefill needs. A
    ``write_index`` of the Python int 0 marks a one-pass prefill into an empty cache: the queries then
    attend to the call's own keys as without a cache (in causal blocks), not to every slot of the cache.
    """

    config: ModelConfig

    @nn.compact
    def __call__(
        self,
        tokens: jax.Array,
        positions: jax.Array,
        kv_valid: jax.Array,
        cache: KVCache | None = None,
        write_index: jax.Array | int = 0,
        last_only: bool = False,
        segment_ids: jax.Array | None = None,
    ) -> tuple[jax.Array, KVCache | None]:
        cfg = self.config
        embedding = _param(
            self, "embedding", init_normal, (cfg.vocab_size, cfg.hidden_size), ("vocab", "embed"), cfg.jnp_param_dtype
        )
        h = jnp.take(embedding, tokens, axis=0).astype(cfg.jnp_dtype)
        h = nn.with_logical_constraint(h, ("batch", "length", "embed"))
        layer = DecoderLayer
        if cfg.remat:
            layer = nn.remat(layer, prevent_cse=False)
        stack = nn.scan(
            layer,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            in_axes=(nn.broadcast, nn.broadcast, nn.broadcast, nn.broadcast),
            length=cfg.num_layers,
            metadata_params={nn.PARTITION_NAME: "layers"},
        )(cfg, fresh_cache=cache is not None and isinstance(write_index, int) and write_index == 0, name="layers")
        (h, cache, _), _ = stack(
            (h, cache, jnp.zeros((), jnp.int32)), positions, kv_valid, jnp.asarray(write_index, jnp.int32), segment_ids
        )
        if last_only:
            h = h[:, -1:]
        h = RMSNorm(cfg, name="final_norm")(h)
        if cfg.tie_word_embeddings:
            head = embedding.T
        else:
            head = _param(
                self, "lm_head", init_normal, (cfg.hidden_size, cfg.vocab_size), ("embed", "vocab"), cfg.jnp_param_dtype
            )
        logits = jnp.einsum("bte,ev->btv", h, head.astype(cfg.jnp_dtype))
        logits = nn.with_logical_constraint(logits, ("batch", "length", "vocab"))
        return logits.astype(jnp.float32), cache


def init_cache(config: ModelConfig, batch: int, length: int) -> KVCache:
    shape = (config.num_layers, batch, length, config.num_kv_heads, config.head_dim)
    return {"k": jnp.zeros(shape, config.jnp_dtype), "v": jnp.zeros(shape, config.jnp_dtype)}


def init_params(config: ModelConfig, rng: jax.Array) -> dict:
    """Random parameters (boxed logical-axis metadata removed): ``{"params": ...}``."""
    tokens = jnp.zeros((1, 1), jnp.int32)
    variables = Decoder(config).init(rng, tokens, tokens, jnp.ones((1, 1), bool))
    return nn.meta.unbox(variables)


def segment_positions(segment_ids: jax.Array) -> jax.Array:
    """``[B, T]`` positions that restart at 0 on the first token of every segment (a run of one id)."""
    t = jnp.arange(segment_ids.shape[-1])
    starts = jnp.concatenate(
        [jnp.ones_like(segment_ids[:, :1], bool), segment_ids[:, 1:] != segment_ids[:, :-1]], axis=1
    )
    return t - jax.lax.cummax(jnp.where(starts, t, 0), axis=1)


def forward(
    config: ModelConfig,
    params: dict,
    tokens: jax.Array,
    attention_mask: jax.Array,
    positions: jax.Array | None = None,
    segment_ids: jax.Array | None = None,
) -> jax.Array:
    """Logits ``[B, T, V]`` for a batch without a cache (training and scoring). With ``segment_ids``
    (packed rows, 0 = padding) attention stays inside each segment and positions restart in each."""
    if positions is None and segment_ids is not None:
        positions = segment_positions(segment_ids)
    elif positions is None:
        positions = jnp.maximum(jnp.cumsum(attention_mask.astype(jnp.int32), axis=-1) - 1, 0)
    logits, _ = Decoder(config).apply(params, tokens, positions, attention_mask.astype(bool), segment_ids=segment_ids)
    return logits
