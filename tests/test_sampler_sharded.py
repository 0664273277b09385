"""A host samples on all of its devices (``ggtrain.sharding.sampler_shardings``): with the parameters
split over 8 devices (tensor-parallel over as many as split the heads evenly, the rest fsdp; or fsdp
alone), greedy and seeded sampling give the tokens and log-probs of one device, and each device holds an
eighth of the embedding."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from ggtrain.sharding import sampler_shardings, sampler_tensor_degree
from models import load_pretrained
from models.sampler import Sampler, SamplingParams

PROMPTS = [[11, 12, 13], list(range(200, 220)), [5, 6]]


@pytest.fixture(scope="module", params=["tensor", "fsdp"])
def placed(request, tiny_qwen2_dir, qwen_tokenizer):
    if len(jax.devices()) < 8:
        pytest.skip("needs XLA_FLAGS=--xla_force_host_platform_device_count=8 (set by conftest)")
    lm = load_pretrained(tiny_qwen2_dir)
    single = jax.device_put(lm.params, jax.devices()[0])
    layout = sampler_shardings(lm.config, jax.devices()[:8], request.param)
    sharded = jax.tree_util.tree_map(jax.device_put, lm.params, layout)
    return Sampler(lm.config, qwen_tokenizer, eos_ids=(7,)), single, sharded


def test_sampler_parameters_are_split_over_the_hosts_devices(placed):
    _, single, sharded = placed
    embedding = sharded["params"]["embedding"]
    assert len(embedding.sharding.device_set) == 8
    shard = embedding.addressable_shards[0].data
    assert shard.size * 8 == single["params"]["embedding"].size


def test_tensor_layout_splits_heads_over_the_most_devices_that_divide_them(tiny_qwen2_dir):
    lm = load_pretrained(tiny_qwen2_dir)  # 4 heads, 2 KV heads: at most 2-way tensor-parallel
    assert sampler_tensor_degree(lm.config, 8) == 2
    assert sampler_tensor_degree(lm.config.replace(num_kv_heads=4), 8) == 4
    assert sampler_tensor_degree(lm.config.replace(num_heads=3, num_kv_heads=3), 8) == 1
    mesh = sampler_shardings(lm.config, jax.devices()[:8])["params"]["embedding"].mesh
    assert dict(mesh.shape) == {"data": 1, "fsdp": 4, "tensor": 2}
    with pytest.raises(ValueError, match="sampler layout 'rows'"):
        sampler_shardings(lm.config, jax.devices()[:8], "rows")


@pytest.mark.parametrize("temperature", [0.0, 1.0], ids=["greedy", "seeded"])
def test_sharded_sampling_gives_one_devices_tokens_and_logprobs(placed, temperature):
    sampler, single, sharded = placed
    params = SamplingParams(max_new_tokens=12, temperature=temperature)
    want = sampler.generate(single, PROMPTS, params, jax.random.PRNGKey(3))
    got = sampler.generate(sharded, PROMPTS, params, jax.random.PRNGKey(3))
    assert got.tokens == want.tokens
    for a, b in zip(got.logprobs, want.logprobs, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)
