"""The prefill in chunks of prompt tokens samples what one pass samples, with smaller attention
temporaries (what lets 32 environments x 2,048 prompt tokens prefill on a 16 GiB chip)."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import load_pretrained
from models.sampler import Sampler, SamplingParams, _prefill


@pytest.fixture(scope="module")
def tiny(tiny_qwen2_dir, qwen_tokenizer):
    lm = load_pretrained(tiny_qwen2_dir)
    return lm, Sampler(lm.config, qwen_tokenizer, eos_ids=(7,))


@pytest.mark.parametrize(
    ("lengths", "chunks"),
    [((5, 40, 64), (64, 16)), ((5, 150, 256), (256, 64))],
    ids=["one-block-pass", "causal-blocks-pass"],
)
def test_prefill_in_chunks_samples_the_same_tokens_and_logprobs_as_one_pass(tiny, lengths, chunks):
    """Prompts left-padded to their bucket: in chunks the short prompt's first chunks are all padding,
    and the long one's attention crosses chunk boundaries. The one pass attends to the prompt's own keys
    (a 256-token prompt in two causal blocks of 128), the chunks to the cache slots written so far."""
    lm, sampler = tiny
    rng = np.random.default_rng(0)
    prompts = [rng.integers(8, lm.config.vocab_size, n).tolist() for n in lengths]
    out = {
        chunk: sampler.generate(
            lm.params,
            prompts,
            SamplingParams(max_new_tokens=12, temperature=1.0, prefill_chunk=chunk),
            jax.random.PRNGKey(5),
        )
        for chunk in chunks
    }
    one_pass, chunked = (out[c] for c in chunks)
    assert chunked.tokens == one_pass.tokens
    for a, b in zip(chunked.logprobs, one_pass.logprobs, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_prefill_in_chunks_holds_a_fraction_of_the_temporaries(tiny):
    """The attention scores are [chunk, cache] per step instead of [prompt, cache] (in the one pass, two
    causal blocks of 128 queries): measured on XLA:CPU for 4 prompts of 256 tokens, 7.3 MB of temporaries
    in one pass (14.3 MB before the causal blocks), 1.5 MB in 32-token chunks."""
    lm, _ = tiny
    tokens = jax.ShapeDtypeStruct((4, 256), jnp.int32)
    valid = jax.ShapeDtypeStruct((4, 256), jnp.bool_)
    temps = {
        chunk: _prefill.lower(lm.config, lm.params, tokens, valid, 272, chunk).compile().memory_analysis()
        for chunk in (256, 32)
    }
    assert temps[32].temp_size_in_bytes < 0.25 * temps[256].temp_size_in_bytes
    assert temps[32].output_size_in_bytes == temps[256].output_size_in_bytes  # the same cache and logits


@pytest.mark.parametrize("chunk", [0, 3, 384])
def test_prefill_chunk_that_is_no_power_of_two_is_refused(chunk):
    with pytest.raises(ValueError, match=f"prefill_chunk={chunk}"):
        SamplingParams(prefill_chunk=chunk)


@pytest.mark.parametrize("remat", [False, True], ids=["scan", "remat"])
def test_the_one_pass_prefill_scores_the_prompts_own_keys_in_causal_blocks(tiny, remat):
    """The scores of the one pass are [128 queries, 128 or 256 keys] (``fresh_cache`` reaches the layers,
    through ``nn.remat`` too); in 128-token chunks every chunk scores all 272 cache slots."""
    lm, _ = tiny
    tokens, valid = jax.ShapeDtypeStruct((2, 256), jnp.int32), jax.ShapeDtypeStruct((2, 256), jnp.bool_)
    config = lm.config.replace(remat=remat)

    def scores(chunk: int) -> set[str]:
        text = _prefill.lower(config, lm.params, tokens, valid, 272, chunk).as_text()
        return set(re.findall(r"tensor<2x2x2x128x(\d+)xf32>", text)) - {"1"}

    assert scores(256) == {"128", "256"}
    assert scores(128) == {"272"}
