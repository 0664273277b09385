"""The update: gradient accumulation, GRPO parity (ALGORITHMS.md §8), GGPO through a real model,
policy refreshes, padding rows and the exactly-once token count."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from env_bridge.collate import collate_turns, pad_rows
from ggtrain.config import BatchConfig, LossConfig, OptimizerConfig, TrainConfig
from ggtrain.ggpo import ggpo_loss
from ggtrain.losses import LOSSES, make_loss_fn, policy_logits_and_logp, register_loss, response_mask
from ggtrain.metrics import MetricAccumulator
from ggtrain.optim import make_optimizer
from ggtrain.train_state import apply_policy_refreshes, create_train_state
from ggtrain.train_step import make_gradient_fn, make_train_step, metric_means
from graph import compute_advantages
from models import load_pretrained
from models.scoring import score_tokens_jit
from tests.train_batches import batch_turns, synthetic_turn_batch

ROWS = 32
ROW_FIELDS = ("group", "traj", "turn", "state", "next_state", "env_reward", "valid", "row_mask")


@pytest.fixture(scope="module")
def tiny(tiny_qwen2_dir):
    return load_pretrained(tiny_qwen2_dir)


def _config(loss: str = "ppo_clip", micro: int = 8, **loss_changes) -> TrainConfig:
    return TrainConfig(
        loss=dataclasses.replace(LossConfig(name=loss), **loss_changes),
        optimizer=OptimizerConfig(learning_rate=1e-3),
        batch=BatchConfig(mini_batch_rows=ROWS, micro_batch_rows=micro),
    )


def _batch(method: str = "graphgpo", seed: int = 0, **options) -> dict[str, np.ndarray]:
    batch = synthetic_turn_batch(seed=seed, rows=ROWS)
    batch["advantages"] = compute_advantages(method, {k: batch[k] for k in ROW_FIELDS}, **options)
    return batch


def _state(tiny, config: TrainConfig):
    params = jax.tree_util.tree_map(jnp.copy, tiny.params)
    return create_train_state(params, make_optimizer(config.optimizer), jax.random.PRNGKey(0))


def _rel_diff(a, b) -> float:
    return float(optax.tree.norm(jax.tree_util.tree_map(jnp.subtract, a, b)) / optax.tree.norm(b))


@pytest.mark.parametrize("loss", ["ppo_clip", "ggpo"])
def test_accumulated_gradient_equals_single_batch_gradient(tiny, loss):
    batch = {k: jnp.asarray(v) for k, v in _batch().items()}
    single = jax.jit(make_gradient_fn(tiny.config, _config(loss, micro=ROWS)))
    accumulated = jax.jit(make_gradient_fn(tiny.config, _config(loss, micro=4)))
    state = _state(tiny, _config(loss))
    g1, m1, _ = single(state, batch)
    g8, m8, _ = accumulated(state, batch)
    assert _rel_diff(g8, g1) <= 1e-5
    assert float(optax.tree.norm(g1)) > 0
    key = "loss" if loss == "ppo_clip" else "ggpo_loss"
    np.testing.assert_allclose(metric_means(m8)[key], metric_means(m1)[key], rtol=1e-5)


def test_a_registered_loss_without_prepare_accumulates_with_the_normalizer_scalar(tiny):
    """A plain ``loss_fn(params, micro_batch, scalars, rng)`` registers as is (no pre-pass) and divides by
    the mini-batch-wide ``scalars["normalizer"]``: micro-batch gradients add up to the single-batch one."""

    @register_loss("_test_nll")
    def nll(model_config, cfg):
        def loss_fn(params, batch, scalars, rng):
            mask = response_mask(batch).astype(jnp.float32)
            total = -jnp.sum(policy_logits_and_logp(model_config, params, batch, cfg.temperature)[1] * mask)
            return total / scalars["normalizer"], {"nll": (total, jnp.sum(mask))}

        return loss_fn

    try:
        assert make_loss_fn("_test_nll", tiny.config, LossConfig()).prepare is None
        batch = {k: jnp.asarray(v) for k, v in _batch().items()}
        state = _state(tiny, _config("_test_nll"))
        g1, m1, _ = jax.jit(make_gradient_fn(tiny.config, _config("_test_nll", micro=ROWS)))(state, batch)
        g4, m4, _ = jax.jit(make_gradient_fn(tiny.config, _config("_test_nll", micro=4)))(state, batch)
    finally:
        del LOSSES["_test_nll"]
    assert _rel_diff(g4, g1) <= 1e-5
    np.testing.assert_allclose(metric_means(m4)["nll"], metric_means(m1)["nll"], rtol=1e-5)
    assert metric_means(m1)["nll"] > 0


def test_beta_graph_zero_graphgpo_equals_grpo_through_one_optimizer_step(tiny):
    graph = _batch("graphgpo", beta_graph=0.0, beta_episode=1.0)
    grpo = _batch("grpo")
    np.testing.assert_array_equal(graph["advantages"], grpo["advantages"])
    for key in ("loss_mask", "old_logp", "tokens"):
        np.testing.assert_array_equal(graph[key], grpo[key])
    per_token = lambda b: b["advantages"][:, None] * b["loss_mask"]
    np.testing.assert_array_equal(per_token(graph), per_token(grpo))
    config = _config()
    step = jax.jit(make_train_step(tiny.config, config, make_optimizer(config.optimizer)))
    s_graph, m_graph = step(_state(tiny, config), {k: jnp.asarray(v) for k, v in graph.items()})
    s_grpo, m_grpo = step(_state(tiny, config), {k: jnp.asarray(v) for k, v in grpo.items()})
    assert metric_means(m_graph)["loss"] == metric_means(m_grpo)["loss"]
    delta = lambda s: jax.tree_util.tree_map(jnp.subtract, s.params, tiny.params)
    for a, b in zip(jax.tree_util.tree_leaves(delta(s_graph)), jax.tree_util.tree_leaves(delta(s_grpo)), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert any(np.abs(np.asarray(x)).max() > 0 for x in jax.tree_util.tree_leaves(delta(s_grpo)))


def test_padding_rows_change_nothing(tiny):
    batch = _batch()
    padded = pad_rows(batch, ROWS + 16)
    config = _config()
    grads = jax.jit(make_gradient_fn(tiny.config, config))
    state = _state(tiny, config)
    g, m, _ = grads(state, {k: jnp.asarray(v) for k, v in batch.items()})
    gp, mp, _ = grads(state, {k: jnp.asarray(v) for k, v in padded.items()})
    assert _rel_diff(gp, g) <= 1e-6
    np.testing.assert_allclose(metric_means(mp)["loss"], metric_means(m)["loss"], rtol=1e-6)
    assert metric_means(mp)["tokens"] == metric_means(m)["tokens"]


@pytest.mark.parametrize("loss", ["ppo_clip", "ggpo"])
def test_every_loss_token_is_trained_exactly_once_per_epoch(tiny, loss):
    """Through ``collate_turns``, as training batches turns (whole groups for GGPO): each epoch every
    turn lands in one mini-batch and the summed ``tokens`` total is every response token, once."""
    big = synthetic_turn_batch(groups=4, seed=3)
    turns = batch_turns(big)
    advantages = compute_advantages("graphgpo", {k: big[k] for k in ROW_FIELDS})
    total_tokens = sum(len(t.response_ids) for t in turns)
    assert total_tokens == int(big["loss_mask"].sum())
    config = _config(loss)
    grads = jax.jit(make_gradient_fn(tiny.config, config))
    state = _state(tiny, config)
    for epoch in range(2):
        seen, counted, batches = [], MetricAccumulator(), 0
        for mb in collate_turns(
            turns, ROWS // 2, seed=epoch, pad_id=0, extra={"advantages": advantages}, whole_groups=loss == "ggpo"
        ):
            mb.pop("positions")
            mb.pop("policy_version")
            seen.extend(zip(mb["traj"][mb["row_mask"]].tolist(), mb["turn"][mb["row_mask"]].tolist(), strict=True))
            counted.add(grads(state, {k: jnp.asarray(v) for k, v in mb.items()})[1])
            batches += 1
        assert batches > 1
        assert counted.means()["tokens"] == total_tokens
        assert sorted(seen) == sorted((t.traj, t.turn) for t in turns)
        assert len(seen) == len(set(seen))


def test_ggpo_gradient_through_a_real_model_equals_chain_rule(tiny):
    """d loss / d theta = sum_i (-c_i / T_tok) d s_i / d theta, with s_i summed from the model's log-probs."""
    batch = _batch()
    b = {k: jnp.asarray(v) for k, v in batch.items()}
    config = _config("ggpo", ggpo_beta=0.5)
    state = _state(tiny, config)
    grads, metrics, _ = jax.jit(make_gradient_fn(tiny.config, config))(state, b)
    mask = b["loss_mask"] & b["row_mask"][:, None]
    success = np.zeros(ROWS, np.float32)
    returns = {}
    for t, r, m in zip(batch["traj"], batch["env_reward"], batch["row_mask"], strict=True):
        if m:
            returns[t] = returns.get(t, 0.0) + r
    success = np.asarray([returns.get(t, 0.0) > 0 for t in batch["traj"]], np.float32)

    def direct(params):
        logp = score_tokens_jit(tiny.config, params, b["tokens"], b["attention_mask"], mask, 1.0)
        ref = score_tokens_jit(tiny.config, tiny.params, b["tokens"], b["attention_mask"], mask, 1.0)
        rows = np.asarray(b["row_mask"])
        return ggpo_loss(
            logp[rows],
            jax.lax.stop_gradient(ref[rows]),
            mask[rows],
            jnp.asarray(success[rows]),
            b["group"][rows],
            0.5,
            traj=b["traj"][rows],
        )

    (loss, _), direct_grads = jax.value_and_grad(direct, has_aux=True)(tiny.params)
    assert _rel_diff(grads, direct_grads) <= 1e-5
    np.testing.assert_allclose(metric_means(metrics)["ggpo_loss"], float(loss), rtol=1e-5)


def test_ggpo_clipping_without_clipped_tokens_equals_direct_and_clipped_tokens_keep_gradient():
    rng = np.random.default_rng(0)
    logp = jnp.asarray(rng.uniform(-2, -0.1, (4, 6)), jnp.float32)
    mask = jnp.asarray(rng.random((4, 6)) > 0.2)
    rewards, group = jnp.asarray([1.0, 0, 0, 1]), jnp.zeros(4, jnp.int32)
    ref = logp + jnp.asarray(rng.uniform(-0.01, 0.01, (4, 6)), jnp.float32)
    grad = lambda radius: jax.grad(lambda lp: ggpo_loss(lp, ref, mask, rewards, group, 0.1, radius)[0])(logp)
    np.testing.assert_allclose(grad(1.0), grad(None), atol=1e-7)  # no |log ratio| beyond 1.0
    far_ref = logp + 3.0  # every token beyond delta = 0.5
    clipped = jax.grad(lambda lp: ggpo_loss(lp, far_ref, mask, rewards, group, 0.1, 0.5)[0])(logp)
    assert np.all(np.abs(np.asarray(clipped))[np.asarray(mask)] > 0)


def test_ggpo_oracle_values():
    s, s_ref = np.array([-10, -12, -9, -11.0]), np.array([-10.2, -11.5, -9.3, -10.6])
    lengths, mask = [5, 7, 4, 6], np.zeros((4, 8), bool)
    for i, n in enumerate(lengths):
        mask[i, :n] = True
    per_token = lambda v: jnp.asarray(np.where(mask, (v / np.array(lengths))[:, None], 0.0), jnp.float32)
    r, g = jnp.asarray([1.0, 0, 0, 1]), jnp.zeros(4, jnp.int32)
    (loss, aux), grad = jax.value_and_grad(
        lambda lp: ggpo_loss(lp, per_token(s_ref), jnp.asarray(mask), r, g, 0.1), has_aux=True
    )(per_token(s))
    np.testing.assert_allclose(aux["adjusted"][:4], [0.98, 0.05, -0.03, 1.04], atol=1e-5)
    np.testing.assert_allclose(aux["J"][0], 0.435124, atol=1e-6)
    np.testing.assert_allclose(aux["q"][:4], [0.354327, 0.000032, 0.000015, 0.645626], atol=1e-6)
    np.testing.assert_allclose(aux["c"][:4], [0.240933, -0.577275, -0.577317, 0.913659], atol=1e-5)
    np.testing.assert_allclose(loss, 0.456762, atol=1e-6)
    np.testing.assert_allclose(np.asarray(grad)[:, 0], [-0.010952, 0.026240, 0.026242, -0.041530], atol=1e-6)
    shifted, _ = ggpo_loss(per_token(s), per_token(s_ref), jnp.asarray(mask), r + 5.0, g, 0.1)
    np.testing.assert_allclose(shifted, loss, atol=1e-6)
    _, after_refresh = ggpo_loss(per_token(s), per_token(s), jnp.asarray(mask), r, g, 0.1)
    np.testing.assert_allclose(after_refresh["J"][0], 0.430690, atol=1e-6)
    np.testing.assert_allclose(np.abs(after_refresh["c"][:4]), 0.577298, atol=1e-6)
    _, stable = ggpo_loss(per_token(s), per_token(s), jnp.asarray(mask), r, g, 1e-3)
    np.testing.assert_allclose(stable["J"][0], 0.499307, atol=1e-6)
    assert np.isfinite(stable["J"][0])


def test_ggpo_drops_groups_without_mixed_rewards():
    logp = jnp.full((6, 3), -1.0)
    mask = jnp.ones((6, 3), bool)
    rewards = jnp.asarray([1.0, 1.0, 0.0, 1.0, 0.0, 0.0])
    group = jnp.asarray([0, 0, 1, 1, 2, 2])
    _, aux = ggpo_loss(logp, logp, mask, rewards, group, 0.1)
    assert np.asarray(aux["group_kept"])[:3].tolist() == [False, True, False]
    assert float(aux["t_tok"]) == 6.0  # only group 1's two responses count


def test_reference_refresh_zeroes_the_log_ratio_and_leaves_behavior_alone(tiny):
    from ggtrain.config import PolicyConfig

    config = _config("ggpo")
    state = _state(tiny, config)
    step = jax.jit(make_train_step(tiny.config, config, make_optimizer(config.optimizer)))
    state, _ = step(state, {k: jnp.asarray(v) for k, v in _batch().items()})
    behavior_before = jax.tree_util.tree_map(np.asarray, state.behavior_params)
    state, refreshed = apply_policy_refreshes(state, PolicyConfig(reference_refresh_every=1, behavior_sync_every=0))
    assert refreshed == {"reference": True, "behavior": False}
    for a, b in zip(jax.tree_util.tree_leaves(state.ref_params), jax.tree_util.tree_leaves(state.params), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    for a, b in zip(
        jax.tree_util.tree_leaves(state.behavior_params), jax.tree_util.tree_leaves(behavior_before), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(a), b)
    _, metrics, _ = jax.jit(make_gradient_fn(tiny.config, config))(
        state, {k: jnp.asarray(v) for k, v in _batch().items()}
    )
    # right after a refresh s == s_ref, so R_i = r_i: the log-ratio term is exactly zero
    assert metric_means(metrics)["ggpo_kept_groups"] > 0
    assert metric_means(metrics)["ggpo_abs_log_ratio"] == 0.0
