"""The same step on meshes 8x1x1, 2x2x2 and 1x4x2 gives the loss and parameter delta of 1x1x1 (PPO-clip;
GGPO on 2x2x2)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from ggtrain.config import BatchConfig, LossConfig, MeshConfig, OptimizerConfig, TrainConfig
from ggtrain.metrics import MetricAccumulator
from ggtrain.sharding import param_shardings
from ggtrain.train_step import metric_means
from ggtrain.update_loop import Updater
from models import load_pretrained
from tests.synthetic_data import SyntheticBatches


@pytest.fixture(scope="module")
def reference_run(tiny_qwen2_dir):
    lm = load_pretrained(tiny_qwen2_dir)
    batch = next(SyntheticBatches(seed=5, rows=32))
    config = TrainConfig(
        optimizer=OptimizerConfig(learning_rate=1e-3),
        batch=BatchConfig(mini_batch_rows=32, micro_batch_rows=8),
        mesh=MeshConfig(data=1, fsdp=1, tensor=1),
    )
    single = Updater.create(lm.config, lm.params, config, devices=jax.devices()[:1])
    pairs = single.update(batch)
    delta = jax.tree_util.tree_map(lambda a, b: np.asarray(a) - np.asarray(b), single.state.params, lm.params)
    return lm, batch, config, metric_means(pairs), delta, single, pairs


def test_update_pairs_add_up_over_steps(reference_run):
    """``Updater.update`` returns (sum, count) pairs: over two steps ``tokens`` is the sum of both steps'
    response tokens (not their mean) and ``tokens_per_s`` is all attended tokens over all step time."""
    _, first, _, _, _, single, first_pairs = reference_run
    second = next(SyntheticBatches(seed=6, rows=32))
    pairs = [first_pairs, single.update(second)]
    accumulator = MetricAccumulator()
    for p in pairs:
        accumulator.add(p)
    means = accumulator.means()
    batches = (first, second)
    assert means["tokens"] == sum(int((b["loss_mask"] & b["row_mask"][:, None]).sum()) for b in batches)
    attended = sum(int((b["attention_mask"] & b["row_mask"][:, None]).sum()) for b in batches)
    seconds = sum(p["step_time_s"][0] for p in pairs)
    np.testing.assert_allclose(means["tokens_per_s"], attended / seconds, rtol=1e-12)
    np.testing.assert_allclose(means["step_time_s"], seconds / 2, rtol=1e-12)
    assert means["reference_refreshed"] == 0.0 and {p["reference_refreshed"][1] for p in pairs} == {1.0}


@pytest.mark.parametrize("shape", [(8, 1, 1), (2, 2, 2), (1, 4, 2)])
def test_mesh_shapes_agree_with_one_device(reference_run, shape):
    if len(jax.devices()) < 8:
        pytest.skip("needs XLA_FLAGS=--xla_force_host_platform_device_count=8 (set by conftest)")
    lm, batch, config, metrics, delta, _, _ = reference_run
    config = TrainConfig(optimizer=config.optimizer, batch=config.batch, mesh=MeshConfig(*shape))
    updater = Updater.create(lm.config, lm.params, config)
    got = metric_means(updater.update(batch))
    np.testing.assert_allclose(got["loss"], metrics["loss"], rtol=1e-5)
    np.testing.assert_allclose(got["grad_norm"], metrics["grad_norm"], rtol=1e-5)
    got_delta = jax.tree_util.tree_map(lambda a, b: np.asarray(a) - np.asarray(b), updater.state.params, lm.params)
    # Adam's first step is lr * g / (|g| + eps): where |g| is near eps (1e-8) fp32 reduction-order noise
    # in g moves the update by up to ~0.2% of lr; elsewhere the deltas agree to 1e-4 relative.
    for a, b in zip(jax.tree_util.tree_leaves(got_delta), jax.tree_util.tree_leaves(delta), strict=True):
        np.testing.assert_allclose(a, b, atol=5e-3 * config.optimizer.learning_rate, rtol=1e-4)
    # parameters really are sharded as the rules say
    if shape[2] > 1:
        q = updater.state.params["params"]["layers"]["attn"]["q_kernel"]
        assert q.sharding.spec == param_shardings(lm.config, updater.mesh)["params"]["layers"]["attn"]["q_kernel"].spec
        assert len(q.sharding.device_set) == 8
        assert q.addressable_shards[0].data.shape[-1] == q.shape[-1] // shape[2]
    # Adam's moments are laid out like their parameters, before and after a step (not replicated)
    moments = updater.state.opt_state[1][0]
    for name in ("mu", "nu"):
        for m, p in zip(
            jax.tree_util.tree_leaves(getattr(moments, name)),
            jax.tree_util.tree_leaves(updater.state.params),
            strict=True,
        ):
            assert m.sharding.is_equivalent_to(p.sharding, p.ndim)


@pytest.mark.slow
def test_ggpo_on_a_2x2x2_mesh_agrees_with_one_device(tiny_qwen2_dir):
    """GGPO's pre-pass (per-group coefficients, mini-batch-wide T_tok) over rows sharded on data x fsdp,
    parameters on fsdp x tensor: two steps (the second with the learner away from the reference) give
    one device's metrics and parameters."""
    if len(jax.devices()) < 8:
        pytest.skip("needs XLA_FLAGS=--xla_force_host_platform_device_count=8 (set by conftest)")
    lm = load_pretrained(tiny_qwen2_dir)
    data = SyntheticBatches(seed=7, rows=32)
    batches = [next(data), next(data)]
    runs = {}
    for shape, devices in [((1, 1, 1), jax.devices()[:1]), ((2, 2, 2), None)]:
        config = TrainConfig(
            loss=LossConfig(name="ggpo", ggpo_beta=0.5),
            optimizer=OptimizerConfig(learning_rate=1e-3),
            batch=BatchConfig(mini_batch_rows=32, micro_batch_rows=8),
            mesh=MeshConfig(*shape),
        )
        updater = Updater.create(lm.config, lm.params, config, devices=devices)
        steps = [metric_means(updater.update(b)) for b in batches]
        runs[shape] = steps, jax.device_get(updater.state.params)
    (one, one_params), (mesh, mesh_params) = runs[(1, 1, 1)], runs[(2, 2, 2)]
    assert all(s["ggpo_kept_groups"] == 2.0 for s in one)  # both groups take part in both steps
    assert one[1]["ggpo_abs_log_ratio"] > 0  # the second step sees s != s_ref
    for a, b in zip(mesh, one, strict=True):
        for key in ("loss", "ggpo_loss", "ggpo_J", "ggpo_t_tok", "ggpo_abs_log_ratio", "grad_norm"):
            np.testing.assert_allclose(a[key], b[key], rtol=1e-4, atol=1e-7, err_msg=key)
    lr, moved = 1e-3, []
    for a, b, p0 in zip(
        jax.tree_util.tree_leaves(mesh_params),
        jax.tree_util.tree_leaves(one_params),
        jax.tree_util.tree_leaves(lm.params),
        strict=True,
    ):
        # Adam turns reduction-order noise on (near-)zero gradients (the key bias's is exactly zero in exact
        # arithmetic) into a few percent of lr over two steps; real gradients move parameters ~2 lr
        np.testing.assert_allclose(np.asarray(a) - np.asarray(p0), np.asarray(b) - np.asarray(p0), atol=0.05 * lr)
        moved.append(np.max(np.abs(np.asarray(b) - np.asarray(p0))))
    assert max(moved) > 1.5 * lr
