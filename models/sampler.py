"""Batched generation with a preallocated KV cache: one jitted prefill (``prefill_chunk`` prompt tokens
at a time), then jitted decode chunks.

Prompts of different lengths are left-padded to a length bucket and the batch to a batch bucket, so
there is one compile per (batch bucket, prompt bucket, new-token bucket). Decoding runs ``chunk``
steps per device call; between chunks the host checks stop strings (EOS is checked on device).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from models.buckets import bucket
from models.config import ModelConfig
from models.decoder import Decoder, init_cache
from models.sampling import sample_tokens
from models.tokenizer import Tokenizer

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
LENGTH_BUCKETS = (32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    stop: tuple[str, ...] = ()
    chunk: int = 16
    # prompt tokens per prefill step: the attention scores of one step are [prefill_chunk, cache length],
    # not [prompt bucket, cache length]; for Qwen2.5-1.5B, 32 prompts of 2,048 tokens prefill on a 16 GiB
    # v5e chip in 256-token chunks (14.3 GiB), not in 512 (16.5) or one pass (20.5 GiB of temporaries;
    # measured before a prompt of one chunk took the one pass in causal blocks, `_prefill`)
    prefill_chunk: int = 256

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={self.max_new_tokens}: expected >= 1")
        if self.temperature < 0:
            raise ValueError(f"temperature={self.temperature}: expected >= 0")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p={self.top_p}: expected 0 < top_p <= 1")
        if self.top_k < 0 or self.chunk < 1:
            raise ValueError(f"top_k={self.top_k}, chunk={self.chunk}: expected top_k >= 0, chunk >= 1")
        if self.prefill_chunk < 1 or self.prefill_chunk & (self.prefill_chunk - 1):
            # a power of two divides every prompt bucket at least as long
            raise ValueError(f"prefill_chunk={self.prefill_chunk}: expected a power of two")


class DecodeState(NamedTuple):
    cache: Any  # {"k", "v"}: [L, B, S, Hkv, D]
    kv_valid: jax.Array  # [B, S]
    logits: jax.Array  # [B, V] next-token logits
    next_pos: jax.Array  # [B]
    step: jax.Array  # []
    done: jax.Array  # [B]
    tokens: jax.Array  # [B, N]
    logp: jax.Array  # [B, N]


@dataclasses.dataclass
class Generation:
    tokens: list[list[int]]  # response tokens per prompt (EOS included when produced)
    logprobs: list[np.ndarray]  # log-prob of each response token under the sampling distribution
    texts: list[str]
    finish_reasons: list[str]  # "eos", "stop" or "length"


@functools.partial(jax.jit, static_argnums=(0, 4, 5))
def _prefill(
    config: ModelConfig, params: Any, tokens: jax.Array, prompt_valid: jax.Array, cache_len: int, chunk: int
) -> tuple[jax.Array, Any, jax.Array, jax.Array]:
    """The prompt through the decoder ``chunk`` tokens at a time, each chunk writing its keys and values
    into the cache and attending to every slot of the cache (the causal mask hides those not written yet).
    A prompt no longer than ``chunk`` takes one pass that attends to its own keys in causal blocks
    (``write_index`` the Python int 0: ``Decoder``), so the slots after the prompt are never scored."""
    batch, length = tokens.shape
    chunk = min(chunk, length)
    kv_valid = jnp.zeros((batch, cache_len), bool).at[:, :length].set(prompt_valid)
    positions = jnp.maximum(jnp.cumsum(prompt_valid.astype(jnp.int32), axis=1) - 1, 0)

    def body(i: jax.Array, carry: tuple[Any, jax.Array]) -> tuple[Any, jax.Array]:
        start = i * chunk
        piece = lambda x: jax.lax.dynamic_slice_in_dim(x, start, chunk, axis=1)
        logits, cache = Decoder(config).apply(
            params, piece(tokens), piece(positions), kv_valid, carry[0], start, last_only=True
        )
        return cache, logits[:, -1]

    if chunk == length:  # one pass from slot 0 (a static 0: causal blocks over the prompt's own keys)
        logits, cache = Decoder(config).apply(
            params, tokens, positions, kv_valid, init_cache(config, batch, cache_len), 0, last_only=True
        )
        return logits[:, -1], cache, kv_valid, positions[:, -1] + 1
    logits = jnp.zeros((batch, config.vocab_size), jnp.float32)
    cache, logits = jax.lax.fori_loop(0, length // chunk, body, (init_cache(config, batch, cache_len), logits))
    return logits, cache, kv_valid, positions[:, -1] + 1


@functools.partial(jax.jit, static_argnums=(0, 3, 4, 5, 6, 7, 8), donate_argnums=(2,))
def _decode_chunk(
    config: ModelConfig,
    params: Any,
    state: DecodeState,
    prompt_len: int,
    steps: int,
    temperature: float,
    top_k: int,
    top_p: float,
    eos_ids: tuple[int, ...],
    row_keys: jax.Array,
    pad_id: jax.Array,
) -> DecodeState:
    eos = jnp.asarray(eos_ids if eos_ids else (-1,), jnp.int32)

    def body(_: int, s: DecodeState) -> DecodeState:
        keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(row_keys, s.step)
        token, logp = sample_tokens(s.logits, keys, temperature, top_k, top_p)
        token = jnp.where(s.done, pad_id, token)
        logp = jnp.where(s.done, 0.0, logp)
        tokens = jax.lax.dynamic_update_slice_in_dim(s.tokens, token[:, None], s.step, axis=1)
        logps = jax.lax.dynamic_update_slice_in_dim(s.logp, logp[:, None], s.step, axis=1)
        done = s.done | jnp.isin(token, eos)
        slot = prompt_len + s.step
        kv_valid = jax.lax.dynamic_update_slice_in_dim(s.kv_valid, jnp.ones((s.kv_valid.shape[0], 1), bool), slot, 1)
        logits, cache = Decoder(config).apply(params, token[:, None], s.next_pos[:, None], kv_valid, s.cache, slot)
        return DecodeState(cache, kv_valid, logits[:, -1], s.next_pos + 1, s.step + 1, done, tokens, logps)

    return jax.lax.fori_loop(0, steps, body, state)


class Sampler:
    def __init__(self, config: ModelConfig, tokenizer: Tokenizer, eos_ids: tuple[int, ...] | None = None):
        self.config = config
        self.tokenizer = tokenizer
        if eos_ids is None:
            ids = {tokenizer.eos_token_id}
            cfg_eos = config.eos_token_id
            ids |= set(cfg_eos) if isinstance(cfg_eos, tuple) else {cfg_eos}
            eos_ids = tuple(sorted(i for i in ids if i is not None))
        self.eos_ids = eos_ids

    def generate(
        self,
        params: Any,
        prompts: list[list[int]],
        sp: SamplingParams,
        key: jax.Array,
        row_seeds: list[int] | None = None,
    ) -> Generation:
        """Row i samples with ``fold_in(key, row_seeds[i])`` (default: its index), so a row's tokens do not
        depend on the batch it was sampled in (rollouts are the same on any number of hosts)."""
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("prompts must be a non-empty list of non-empty token lists")
        if row_seeds is not None and len(row_seeds) != len(prompts):
            raise ValueError(f"{len(row_seeds)} row seeds for {len(prompts)} prompts")
        n = len(prompts)
        batch = bucket(n, BATCH_BUCKETS, "batch size")
        prompt_len = bucket(max(len(p) for p in prompts), LENGTH_BUCKETS, "prompt length")
        new_len = -(-sp.max_new_tokens // sp.chunk) * sp.chunk
        pad_id = self.tokenizer.pad_token_id
        if not 0 <= pad_id < self.config.vocab_size:  # a tokenizer beside a smaller test model
            pad_id = 0
        for i, p in enumerate(prompts):
            bad = [t for t in p if not 0 <= t < self.config.vocab_size]
            if bad:
                raise ValueError(
                    f"prompts[{i}] has token id {bad[0]} outside the vocabulary [0, {self.config.vocab_size})"
                )
        tokens = np.full((batch, prompt_len), pad_id, np.int32)
        valid = np.zeros((batch, prompt_len), bool)
        for i, p in enumerate(prompts):
            tokens[i, prompt_len - len(p) :] = p
            valid[i, prompt_len - len(p) :] = True
        valid[n:, -1] = True  # padding rows see one token so nothing is empty
        logits, cache, kv_valid, next_pos = _prefill(
            self.config, params, jnp.asarray(tokens), jnp.asarray(valid), prompt_len + new_len, sp.prefill_chunk
        )
        done = np.zeros(batch, bool)
        done[n:] = True
        seeds = np.arange(batch, dtype=np.uint32)
        if row_seeds is not None:
            seeds[:n] = np.asarray(row_seeds, np.int64) % (1 << 32)
        row_keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, jnp.asarray(seeds))
        state = DecodeState(
            cache,
            kv_valid,
            logits,
            next_pos,
            jnp.asarray(0, jnp.int32),
            jnp.asarray(done),
            jnp.full((batch, new_len), pad_id, jnp.int32),
            jnp.zeros((batch, new_len), jnp.float32),
        )
        stopped = np.zeros(batch, bool)
        produced = 0
        while produced < sp.max_new_tokens:
            state = _decode_chunk(
                self.config,
                params,
                state,
                prompt_len,
                sp.chunk,
                sp.temperature,
                sp.top_k,
                sp.top_p,
                self.eos_ids,
                row_keys,
                jnp.asarray(pad_id, jnp.int32),
            )
            produced += sp.chunk
            done = np.asarray(state.done).copy()
            if sp.stop:
                out = np.asarray(state.tokens)
                for i in np.flatnonzero(~done[:n]).tolist():
                    text = self.tokenizer.decode(out[i, : min(produced, sp.max_new_tokens)].tolist())
                    if any(s in text for s in sp.stop):
                        done[i] = stopped[i] = True
                state = state._replace(done=jnp.asarray(done))
            if done.all():
                break
        return self._finish(np.asarray(state.tokens)[:n], np.asarray(state.logp)[:n], sp, stopped[:n])

    def _finish(self, tokens: np.ndarray, logp: np.ndarray, sp: SamplingParams, stopped: np.ndarray) -> Generation:
        out_tokens, out_logp, texts, reasons = [], [], [], []
        for i in range(tokens.shape[0]):
            row = tokens[i, : sp.max_new_tokens].tolist()
            end, reason = len(row), "length"
            for j, t in enumerate(row):
                if t in self.eos_ids:
                    end, reason = j + 1, "eos"
                    break
            if stopped[i] or sp.stop:
                cut = self._stop_cut(row[:end], sp.stop)
                if cut is not None:
                    end, reason = cut, "stop"
            out_tokens.append(row[:end])
            out_logp.append(logp[i, :end].copy())
            texts.append(self.tokenizer.decode(row[:end], skip_special_tokens=True))
            reasons.append(reason)
        return Generation(out_tokens, out_logp, texts, reasons)

    def _stop_cut(self, row: list[int], stop: tuple[str, ...]) -> int | None:
        """Smallest prefix length whose text contains a stop string (the stop string's tokens kept)."""
        for j in range(1, len(row) + 1):
            text = self.tokenizer.decode(row[:j])
            if any(s in text for s in stop):
                return j
        return None
