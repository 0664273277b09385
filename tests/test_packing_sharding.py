"""A packed step on meshes 8x1x1 and 2x2x2 gives the loss and parameter delta of the packed step on one
device, which gives the padded step's loss; ``Updater.update`` counts real tokens only."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from env_bridge.collate import collate_turns
from ggtrain.config import BatchConfig, MeshConfig, OptimizerConfig, TrainConfig
from ggtrain.packing import packing_of
from ggtrain.train_step import metric_means
from ggtrain.update_loop import Updater
from graph import compute_advantages
from models import load_pretrained
from tests.train_batches import batch_turns, synthetic_turn_batch

ROW_FIELDS = ("group", "traj", "turn", "state", "next_state", "env_reward", "valid", "row_mask")
BATCH = BatchConfig(mini_batch_rows=32, micro_batch_rows=8, pack_length=64, micro_batch_tokens=512)


def _batches(packing):
    big = synthetic_turn_batch(groups=4, seed=5)
    advantages = compute_advantages("graphgpo", {k: big[k] for k in ROW_FIELDS})
    batch = next(collate_turns(batch_turns(big), 32, 2, 0, extra={"advantages": advantages}, packing=packing))
    batch.pop("positions")
    batch.pop("policy_version")
    return batch


@pytest.fixture(scope="module")
def reference_run(tiny_qwen2_dir):
    lm = load_pretrained(tiny_qwen2_dir)
    packed = _batches(packing_of(BATCH, batch_shards=8))  # sequences in multiples of the 8 devices
    config = TrainConfig(optimizer=OptimizerConfig(learning_rate=1e-3), batch=BATCH, mesh=MeshConfig(1, 1, 1))
    single = Updater.create(lm.config, lm.params, config, devices=jax.devices()[:1])
    pairs = single.update(packed)
    delta = jax.tree_util.tree_map(lambda a, b: np.asarray(a) - np.asarray(b), single.state.params, lm.params)
    return lm, packed, config, pairs, delta


def test_packed_update_counts_real_tokens_and_matches_the_padded_loss(reference_run):
    lm, packed, config, pairs, _ = reference_run
    real = int((packed["segment_ids"] > 0).sum())
    assert pairs["tokens_per_s"][0] == real
    assert pairs["real_token_fraction"] == (real, packed["tokens"].size)
    padded = Updater.create(lm.config, lm.params, config, devices=jax.devices()[:1]).update(_batches(None))
    assert padded["tokens_per_s"][0] == real  # the same turns: padding is not counted
    np.testing.assert_allclose(metric_means(pairs)["loss"], metric_means(padded)["loss"], rtol=1e-5)
    np.testing.assert_allclose(metric_means(pairs)["grad_norm"], metric_means(padded)["grad_norm"], rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("shape", [(8, 1, 1), (2, 2, 2)])
def test_packed_mesh_steps_agree_with_one_device(reference_run, shape):
    if len(jax.devices()) < 8:
        pytest.skip("needs XLA_FLAGS=--xla_force_host_platform_device_count=8 (set by conftest)")
    lm, packed, config, pairs, delta = reference_run
    updater = Updater.create(
        lm.config, lm.params, TrainConfig(optimizer=config.optimizer, batch=BATCH, mesh=MeshConfig(*shape))
    )
    assert updater.batch_shards == shape[0] * shape[1]
    got, want = metric_means(updater.update(packed)), metric_means(pairs)
    for name in ("loss", "grad_norm", "kl", "tokens", "real_token_fraction"):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, err_msg=name)
    got_delta = jax.tree_util.tree_map(lambda a, b: np.asarray(a) - np.asarray(b), updater.state.params, lm.params)
    # as in test_trainer_sharding: Adam's first step amplifies fp32 reduction-order noise where |g| ~ eps
    for a, b in zip(jax.tree_util.tree_leaves(got_delta), jax.tree_util.tree_leaves(delta), strict=True):
        np.testing.assert_allclose(a, b, atol=5e-3 * config.optimizer.learning_rate, rtol=1e-4)
