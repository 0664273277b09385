"""KV-cache decoding, the sampler and the scorer."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import load_pretrained
from models.decoder import Decoder, forward, init_cache
from models.sampler import Sampler, SamplingParams, _decode_chunk, _prefill
from models.scoring import score_tokens_jit


@pytest.fixture(scope="module")
def tiny(tiny_qwen2_dir, qwen_tokenizer):
    lm = load_pretrained(tiny_qwen2_dir)
    return lm, Sampler(lm.config, qwen_tokenizer, eos_ids=(7,))


def _score(lm, prompt, response):
    tokens = np.asarray([prompt + response], np.int32)
    mask = np.ones_like(tokens, bool)
    loss_mask = np.zeros_like(mask)
    loss_mask[0, len(prompt) :] = True
    out = score_tokens_jit(lm.config, lm.params, jnp.asarray(tokens), jnp.asarray(mask), jnp.asarray(loss_mask), 1.0)
    return np.asarray(out)[0, len(prompt) :]


def test_kv_cache_decode_equals_full_forward_at_every_step(tiny):
    lm, _ = tiny
    cfg = lm.config
    seq = [5, 90, 17, 250, 3, 41, 77, 12, 9, 400]
    prompt = 4
    full = np.asarray(forward(cfg, lm.params, jnp.asarray([seq]), jnp.ones((1, len(seq)), bool)))[0]
    cache = init_cache(cfg, 1, 16)
    valid = jnp.zeros((1, 16), bool).at[:, :prompt].set(True)
    model = Decoder(cfg)
    logits, cache = model.apply(lm.params, jnp.asarray([seq[:prompt]]), jnp.arange(prompt)[None], valid, cache, 0)
    np.testing.assert_allclose(np.asarray(logits)[0], full[:prompt], atol=1e-5)
    for t in range(prompt, len(seq)):
        valid = valid.at[:, t].set(True)
        logits, cache = model.apply(lm.params, jnp.asarray([[seq[t]]]), jnp.asarray([[t]]), valid, cache, t)
        np.testing.assert_allclose(np.asarray(logits)[0, 0], full[t], atol=1e-5, err_msg=f"step {t}")


def test_sampled_logprobs_equal_scorer(tiny):
    lm, sampler = tiny
    prompts = [[11, 12, 13], [200, 201, 202, 203, 204, 205, 206]]
    out = sampler.generate(
        lm.params, prompts, SamplingParams(max_new_tokens=12, temperature=1.0), jax.random.PRNGKey(3)
    )
    for p, toks, logp in zip(prompts, out.tokens, out.logprobs, strict=True):
        np.testing.assert_allclose(logp, _score(lm, p, toks), atol=1e-4)


def test_padding_in_a_batch_changes_nothing(tiny):
    lm, sampler = tiny
    sp = SamplingParams(max_new_tokens=10, temperature=0.0)
    alone = sampler.generate(lm.params, [[30, 31, 32]], sp, jax.random.PRNGKey(0))
    batched = sampler.generate(lm.params, [[30, 31, 32], list(range(40, 60)), [9]], sp, jax.random.PRNGKey(0))
    assert batched.tokens[0] == alone.tokens[0]
    np.testing.assert_allclose(batched.logprobs[0], alone.logprobs[0], atol=1e-5)


def test_deterministic_for_a_fixed_key(tiny):
    lm, sampler = tiny
    sp = SamplingParams(max_new_tokens=16, temperature=1.0)
    a = sampler.generate(lm.params, [[1, 2, 3]] * 4, sp, jax.random.PRNGKey(7))
    b = sampler.generate(lm.params, [[1, 2, 3]] * 4, sp, jax.random.PRNGKey(7))
    c = sampler.generate(lm.params, [[1, 2, 3]] * 4, sp, jax.random.PRNGKey(8))
    assert a.tokens == b.tokens
    assert a.tokens != c.tokens
    assert len({tuple(t) for t in a.tokens}) > 1  # rows of one batch draw different samples


def test_a_row_samples_the_same_whatever_else_is_in_the_batch(tiny):
    lm, sampler = tiny
    sp = SamplingParams(max_new_tokens=12, temperature=1.0)
    prompt = [5, 6, 7, 8]
    both = sampler.generate(lm.params, [[1, 2, 3], prompt], sp, jax.random.PRNGKey(3), row_seeds=[11, 42])
    alone = sampler.generate(lm.params, [prompt], sp, jax.random.PRNGKey(3), row_seeds=[42])
    other = sampler.generate(lm.params, [prompt], sp, jax.random.PRNGKey(3), row_seeds=[43])
    assert both.tokens[1] == alone.tokens[0]
    np.testing.assert_allclose(both.logprobs[1], alone.logprobs[0], atol=1e-5)
    assert other.tokens[0] != alone.tokens[0]
    with pytest.raises(ValueError, match="1 row seeds for 2 prompts"):
        sampler.generate(lm.params, [[1], [2]], sp, jax.random.PRNGKey(3), row_seeds=[1])


def test_top_k_one_and_tiny_top_p_are_greedy(tiny):
    lm, sampler = tiny
    greedy = sampler.generate(
        lm.params, [[50, 60]], SamplingParams(max_new_tokens=8, temperature=0.0), jax.random.PRNGKey(0)
    )
    for sp in (
        SamplingParams(max_new_tokens=8, temperature=0.8, top_k=1),
        SamplingParams(max_new_tokens=8, temperature=0.8, top_p=1e-6),
    ):
        assert sampler.generate(lm.params, [[50, 60]], sp, jax.random.PRNGKey(1)).tokens == greedy.tokens


def test_one_compile_per_bucket(tiny):
    lm, sampler = tiny
    sp = SamplingParams(max_new_tokens=8, temperature=0.0)
    sampler.generate(lm.params, [[1, 2, 3]], sp, jax.random.PRNGKey(0))
    prefill, decode = _prefill._cache_size(), _decode_chunk._cache_size()
    sampler.generate(lm.params, [[4, 5, 6, 7, 8, 9]], sp, jax.random.PRNGKey(1))  # same buckets
    assert (_prefill._cache_size(), _decode_chunk._cache_size()) == (prefill, decode)


def test_stop_string_truncates_and_eos_is_kept(smollm):
    sampler = Sampler(smollm.config, smollm.tokenizer)
    ids = smollm.tokenizer.encode(
        smollm.tokenizer.apply_chat_template(
            [{"role": "user", "content": "Name three colors."}], add_generation_prompt=True
        )
    )
    free = sampler.generate(
        smollm.params, [ids], SamplingParams(max_new_tokens=24, temperature=0.0), jax.random.PRNGKey(0)
    )
    assert free.finish_reasons == ["eos"] and free.tokens[0][-1] == smollm.tokenizer.eos_token_id
    assert "2." in free.texts[0]
    stopped = sampler.generate(
        smollm.params, [ids], SamplingParams(max_new_tokens=24, temperature=0.0, stop=("2.",)), jax.random.PRNGKey(0)
    )
    assert stopped.finish_reasons == ["stop"]
    assert stopped.texts[0].endswith("2.") and "3." not in stopped.texts[0]
    assert stopped.tokens[0] == free.tokens[0][: len(stopped.tokens[0])]


@pytest.mark.slow
def test_smollm_sampled_logprobs_equal_scorer(smollm):
    sampler = Sampler(smollm.config, smollm.tokenizer)
    ids = smollm.tokenizer.encode(
        smollm.tokenizer.apply_chat_template(
            [{"role": "user", "content": "Describe a kitchen in one sentence."}], add_generation_prompt=True
        )
    )
    out = sampler.generate(
        smollm.params, [ids], SamplingParams(max_new_tokens=24, temperature=0.7), jax.random.PRNGKey(0)
    )
    tokens = np.asarray([ids + out.tokens[0]], np.int32)
    loss_mask = np.zeros_like(tokens, bool)
    loss_mask[0, len(ids) :] = True
    scored = score_tokens_jit(
        smollm.config, smollm.params, jnp.asarray(tokens), jnp.ones_like(loss_mask), jnp.asarray(loss_mask), 0.7
    )
    np.testing.assert_allclose(out.logprobs[0], np.asarray(scored)[0, len(ids) :], atol=1e-4)


def test_generate_handle(smollm):
    assert smollm.generate(["What is the capital of France?"], max_new_tokens=12, temperature=0.0) == [
        "The capital of France is Paris."
    ]
    assert isinstance(smollm.tokenizer.encode("hi"), list)


def test_out_of_vocabulary_prompt_is_named(tiny):
    lm, sampler = tiny
    with pytest.raises(ValueError, match=r"prompts\[1\] has token id 9999 outside the vocabulary \[0, 512\)"):
        sampler.generate(lm.params, [[1, 2], [3, 9999]], SamplingParams(max_new_tokens=4), jax.random.PRNGKey(0))
