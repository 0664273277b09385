"""The model preset table: the published architectures have their published parameter counts, and
``tiny_llama`` is the toy model the built-in ring world trains."""

from __future__ import annotations

import math

import jax
import pytest

from models.config import MODEL_PRESETS, tiny_llama
from models.decoder import init_params


@pytest.mark.parametrize(
    "name, params", [("qwen2.5-1.5b", 1_543_714_304), ("qwen2.5-7b", 7_615_616_512), ("smollm2-135m", 134_515_008)]
)
def test_presets_have_the_published_parameter_counts(name, params):
    shapes = jax.eval_shape(lambda: init_params(MODEL_PRESETS[name], jax.random.PRNGKey(0)))
    assert sum(math.prod(x.shape) for x in jax.tree_util.tree_leaves(shapes)) == params


def test_tiny_llama_is_the_tiny_ring_model():
    from ggtrain.policies.tiny_ring import _model_config

    assert tiny_llama(300, 64, 128, 4, 2, 2048, bos_token_id=5, eos_token_id=5) == _model_config(300, 5)
    tiny = tiny_llama(49152, 32, 64, 2, 1, 4096, bos_token_id=1, eos_token_id=2)
    assert (tiny.head_dim, tiny.num_layers, tiny.tie_word_embeddings) == (16, 2, True)
