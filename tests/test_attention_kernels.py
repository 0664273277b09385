"""The splash attention kernel (``ModelSpec.attention``) computes what the masked reference computes: the
same gradients on packed rows and on padded rows, on one device and inside ``shard_map`` on a 2x2x2 mesh.
On CPU the kernel runs in the Pallas interpreter (``splash_interpret``); the compiled TPU kernel is
compile-checked in ``test_tpu_compile.py``. ``splash`` itself is refused off TPU. Without a cache the
masked path runs in blocks of queries (``causal_masked_attention``): the same values, fewer scores."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from env_bridge.collate import collate_turns
from ggtrain.config import BatchConfig, ConfigError, ModelSpec, TrainConfig, check_values
from ggtrain.optim import make_optimizer
from ggtrain.packing import packing_of
from ggtrain.train_state import create_train_state
from ggtrain.train_step import make_gradient_fn, metric_means
from graph import compute_advantages
from models import load_pretrained
from models.attention import splash_fits
from tests.train_batches import batch_turns, synthetic_turn_batch

ROW_FIELDS = ("group", "traj", "turn", "state", "next_state", "env_reward", "valid", "row_mask")
BATCH = BatchConfig(mini_batch_rows=16, micro_batch_rows=8, pack_length=128, micro_batch_tokens=256)


@pytest.fixture(scope="module")
def tiny(tiny_qwen2_dir):
    return load_pretrained(tiny_qwen2_dir)


def _batch(packed: bool, batch_shards: int = 1) -> dict[str, jnp.ndarray]:
    big = synthetic_turn_batch(groups=2, seed=3)
    advantages = compute_advantages("graphgpo", {k: big[k] for k in ROW_FIELDS})
    packing = packing_of(BATCH, batch_shards) if packed else None
    length = None if packed else 128  # the turns fit 64; the kernel's smallest block is 128
    batch = next(
        collate_turns(batch_turns(big), 16, 2, 0, extra={"advantages": advantages}, length=length, packing=packing)
    )
    return {k: jnp.asarray(v) for k, v in batch.items() if k not in ("positions", "policy_version")}


def _gradients(model_config, params, batch):
    config = TrainConfig(batch=BATCH)
    state = create_train_state(params, make_optimizer(config.optimizer), jax.random.PRNGKey(0))
    fn = make_gradient_fn(model_config, config)
    return jax.jit(fn)(state, batch), jax.make_jaxpr(fn)(state, batch)


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "padded"])
def test_splash_kernel_gives_the_masked_references_loss_and_gradients(tiny, packed):
    batch = _batch(packed)
    assert splash_fits(batch["tokens"].shape[1])  # else both sides would take the masked path
    if packed:
        assert int(batch["segment_ids"].max()) > 1  # several turns share a sequence
    (g_ref, m_ref, _), ref_program = _gradients(tiny.config, tiny.params, batch)
    (g_spl, m_spl, _), program = _gradients(tiny.config.replace(attention="splash_interpret"), tiny.params, batch)
    assert "pallas_call" in str(program) and "pallas_call" not in str(ref_program)
    difference = optax.tree.norm(jax.tree_util.tree_map(jnp.subtract, g_spl, g_ref))
    assert float(optax.tree.norm(g_ref)) > 0
    assert float(difference / optax.tree.norm(g_ref)) <= 1e-5
    for name, value in metric_means(m_ref).items():
        np.testing.assert_allclose(metric_means(m_spl)[name], value, rtol=1e-5, atol=1e-7, err_msg=name)


@pytest.mark.slow
def test_splash_kernel_inside_shard_map_on_a_2x2x2_mesh_equals_one_masked_device(tiny):
    """Rows over (data, fsdp), heads over tensor: each chip's kernel sees its rows and its heads only."""
    from ggtrain.config import MeshConfig, OptimizerConfig
    from ggtrain.update_loop import Updater

    if len(jax.devices()) < 8:
        pytest.skip("needs XLA_FLAGS=--xla_force_host_platform_device_count=8 (set by conftest)")
    batch = {k: np.asarray(v) for k, v in _batch(True, batch_shards=4).items()}  # data x fsdp
    config = TrainConfig(optimizer=OptimizerConfig(learning_rate=1e-3), mesh=MeshConfig(1, 1, 1))
    # every micro-batch's sequences split evenly over data x fsdp = 4 (the kernel runs per chip, in shard_map)
    batch_config = dataclasses.replace(BATCH, micro_batch_tokens=4 * BATCH.pack_length)
    config = dataclasses.replace(config, batch=batch_config)
    single = Updater.create(tiny.config, tiny.params, config, devices=jax.devices()[:1])
    want = metric_means(single.update(dict(batch)))
    mesh = dataclasses.replace(config, mesh=MeshConfig(2, 2, 2))
    sharded = Updater.create(tiny.config.replace(attention="splash_interpret"), tiny.params, mesh)
    got = metric_means(sharded.update(dict(batch)))
    for name in ("loss", "grad_norm", "kl", "tokens"):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, err_msg=name)
    leaves = jax.tree_util.tree_leaves
    for a, b in zip(leaves(sharded.state.params), leaves(single.state.params), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=5e-3 * 1e-3, rtol=1e-4)


def test_the_tpu_kernel_is_refused_off_tpu_and_an_unknown_kernel_is_named():
    with pytest.raises(ConfigError, match=r"ModelSpec.attention = 'splash'.*TPU only.*cpu"):
        check_values(TrainConfig(model=ModelSpec(attention="splash")))
    with pytest.raises(ConfigError, match=r"ModelSpec.attention = 'flash': expected one of masked, splash"):
        check_values(TrainConfig(model=ModelSpec(attention="flash")))
    check_values(TrainConfig(model=ModelSpec(attention="splash_interpret")))


def _attention_inputs(length: int):
    """Two rows of ``length`` tokens: one padded after 300 tokens, one packed with three segments."""
    ks = jax.random.split(jax.random.PRNGKey(5), 3)
    q = jax.random.normal(ks[0], (2, length, 2, 2, 16))
    k, v = (jax.random.normal(key, (2, length, 2, 16)) for key in ks[1:])
    segments = np.zeros((2, length), np.int32)
    segments[0, :300] = 1
    segments[1, :100], segments[1, 100:250], segments[1, 250:] = 1, 2, 3
    causal = np.tril(np.ones((length, length), bool))
    visible = causal[None] & (segments[:, :, None] == segments[:, None, :]) & (segments[:, None, :] > 0)
    return q, k, v, jnp.asarray(visible), segments > 0


def test_causal_blocks_give_the_masked_values_and_skip_the_hidden_scores():
    from models.attention import causal_masked_attention, masked_attention

    q, k, v, visible, real = _attention_inputs(384)  # three blocks of 128
    want = masked_attention(q, k, v, visible, jnp.float32)
    got = causal_masked_attention(q, k, v, visible, jnp.float32)
    np.testing.assert_allclose(np.asarray(got)[real], np.asarray(want)[real], rtol=1e-5, atol=1e-6)
    flops = [
        jax.jit(f, static_argnums=4).lower(q, k, v, visible, jnp.float32).compile().cost_analysis()
        for f in (masked_attention, causal_masked_attention)
    ]
    flops = [(c[0] if isinstance(c, list) else c)["flops"] for c in flops]
    assert flops[1] < 0.75 * flops[0]  # 6 of the 9 blocks of scores (XLA's cost-analysis estimate)


def test_the_decoder_without_a_cache_gives_the_one_block_logits(tiny, monkeypatch):
    """The layers' blocked path (lengths over one block) against the same layers with one block."""
    import models.layers
    from models.attention import masked_attention
    from models.decoder import forward

    tokens = jax.random.randint(jax.random.PRNGKey(1), (2, 256), 0, tiny.config.vocab_size)
    mask = jnp.asarray(np.arange(256)[None] < np.array([[256], [200]]))
    blocked = forward(tiny.config, tiny.params, tokens, mask)
    monkeypatch.setattr(models.layers, "causal_masked_attention", masked_attention)
    one_block = forward(tiny.config, tiny.params, tokens, mask)
    real = np.asarray(mask)
    np.testing.assert_allclose(np.asarray(blocked)[real], np.asarray(one_block)[real], rtol=1e-5, atol=1e-5)
