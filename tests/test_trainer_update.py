"""The update: gradient accumulation of the logged loss, GGPO (§10, groups of unequal size too) through a
real model, policy refreshes, padding rows and the exactly-once token count. GRPO parity through an
optimizer step is in test_grpo_parity_production.py."""

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
from ggtrain.ppo import aggregation_normalizer
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
def test_accumulated_gradient_is_the_gradient_of_the_logged_loss(tiny, loss):
    """Micro-batch gradients add up to the one-batch gradient, and that is the gradient of the function
    whose value is logged as ``loss`` (GGPO: the linear surrogate; ``ggpo_loss`` is its objective)."""
    batch = {k: jnp.asarray(v) for k, v in _batch().items()}
    single = jax.jit(make_gradient_fn(tiny.config, _config(loss, micro=ROWS)))
    accumulated = jax.jit(make_gradient_fn(tiny.config, _config(loss, micro=4)))
    state = _state(tiny, _config(loss))
    g1, m1, _ = single(state, batch)
    g8, m8, _ = accumulated(state, batch)
    assert _rel_diff(g8, g1) <= 1e-5
    assert float(optax.tree.norm(g1)) > 0
    for key in ("loss", "ggpo_loss") if loss == "ggpo" else ("loss",):
        np.testing.assert_allclose(metric_means(m8)[key], metric_means(m1)[key], rtol=1e-5)
    cfg = _config(loss).loss
    fn = make_loss_fn(loss, tiny.config, cfg)

    def whole_batch(params):
        b, scalars = batch, {"normalizer": aggregation_normalizer(response_mask(batch), cfg.aggregation)}
        if fn.prepare is not None:
            extras, _ = fn.prepare(state, batch, ROWS)
            b, scalars = b | extras.rows, scalars | extras.scalars
        return fn.fn(params, b, scalars, jax.random.PRNGKey(0))[0]

    value, grads = jax.jit(jax.value_and_grad(whole_batch))(state.params)
    assert _rel_diff(g1, grads) <= 1e-6
    np.testing.assert_allclose(metric_means(m1)["loss"], float(value), rtol=1e-5)


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
    mask = batch["loss_mask"] & batch["row_mask"][:, None]
    logp = score_tokens_jit(tiny.config, tiny.params, batch["tokens"], batch["attention_mask"], mask, 1.0)
    mean_nll = -float(jnp.sum(jnp.where(mask, logp, 0.0))) / float(jnp.sum(mask))  # the mean over response tokens
    np.testing.assert_allclose(metric_means(m1)["nll"], mean_nll, rtol=1e-5)
    np.testing.assert_allclose(metric_means(m4)["nll"], mean_nll, rtol=1e-5)


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


def test_a_batch_without_advantage_leaves_the_weights_bit_for_bit(tiny):
    """Adam from a fresh state, no weight decay, no KL or entropy term: zero advantages are a zero
    gradient and no step (what the ALFWorld comparison's attempt 4 relies on for iterations without a
    win); the penalty alone (-0.1 on every row) moves them."""
    config = _config(kl_coef=0.0, entropy_coef=0.0)
    config = dataclasses.replace(config, optimizer=dataclasses.replace(config.optimizer, weight_decay=0.0))
    step = jax.jit(make_train_step(tiny.config, config, make_optimizer(config.optimizer)))
    batch = _batch()
    mask = batch["loss_mask"] & batch["row_mask"][:, None]
    on_policy = score_tokens_jit(tiny.config, tiny.params, batch["tokens"], batch["attention_mask"], mask, 1.0)
    batch["old_logp"] = np.where(mask, np.asarray(on_policy), 0.0).astype(np.float32)  # ratios 1: nothing clipped
    batch["advantages"] = np.zeros_like(batch["advantages"])
    state, _ = step(_state(tiny, config), {k: jnp.asarray(v) for k, v in batch.items()})
    leaves = zip(jax.tree_util.tree_leaves(tiny.params), jax.tree_util.tree_leaves(state.params), strict=True)
    assert all(np.array_equal(np.asarray(before), np.asarray(after)) for before, after in leaves)
    batch["advantages"][batch["row_mask"]] = -0.1
    state, _ = step(_state(tiny, config), {k: jnp.asarray(v) for k, v in batch.items()})
    assert _rel_diff(state.params, tiny.params) > 0


@pytest.mark.parametrize(("b1", "moves"), [(0.9, True), (0.0, False)])
def test_after_a_step_a_zero_gradient_moves_the_weights_only_with_momentum(b1, moves):
    """The ALFWorld comparison's attempt 6 (b1 0) rests on this: without momentum an iteration without a
    win leaves the weights where the last update with a win put them."""
    optimizer = make_optimizer(OptimizerConfig(learning_rate=3e-4, weight_decay=0.0, b1=b1))
    params = {"w": jnp.ones(4)}
    state = optimizer.init(params)
    _, state = optimizer.update({"w": jnp.asarray([1e-3, -2e-3, 5e-4, 0.0])}, state, params)
    updates, _ = optimizer.update({"w": jnp.zeros(4)}, state, params)
    assert bool(jnp.any(updates["w"] != 0.0)) == moves


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


def _numpy_ggpo(adjusted: np.ndarray, group: np.ndarray, beta: float) -> tuple[np.ndarray, np.ndarray]:
    """Per group ``J`` and per response ``c`` straight from ALGORITHMS.md §10, in float64."""
    J, c = {}, np.zeros(len(adjusted))
    for g in np.unique(group):
        at = group == g
        R, m = adjusted[at].astype(np.float64), at.sum()
        z = R / beta - np.max(R / beta)
        q = np.exp(z) / np.exp(z).sum()
        J[g] = beta * (np.max(R / beta) + np.log(np.exp(z).sum()) - np.log(m)) - R.mean()
        c[at] = (m * q - 1) / np.sqrt(m - 1)
    return np.asarray([J[g] for g in np.unique(group)]), c


def _per_token(row_sums: np.ndarray, lengths: np.ndarray, width: int) -> tuple[jax.Array, jax.Array]:
    """Token log-probs whose masked row sums are ``row_sums`` (each row's first ``lengths`` tokens)."""
    mask = np.arange(width)[None, :] < lengths[:, None]
    return jnp.asarray(np.where(mask, (row_sums / lengths)[:, None], 0.0), jnp.float32), jnp.asarray(mask)


def test_ggpo_direct_gradient_is_minus_c_over_t_tok_for_groups_of_unequal_size():
    """§10 defines l_bar for equal group sizes only; ggtrain weights each group by its size (m_g / N),
    which keeps d loss / d s_i = -c_i / T_tok (the trainer's surrogate) for any sizes and is §10's mean
    over groups when the sizes are equal."""
    rng = np.random.default_rng(4)
    group = np.repeat([0, 1, 2, 3], [2, 3, 5, 3])  # group 3 is all-fail: dropped before T_tok
    rewards = np.asarray([1, 0, 0, 1, 0, 1, 1, 0, 0, 1, 0, 0, 0], np.float32)
    lengths = rng.integers(1, 7, len(group))
    s, s_ref = rng.uniform(-12, -3, len(group)), rng.uniform(-12, -3, len(group))
    logp, mask = _per_token(s, lengths, 8)
    ref, _ = _per_token(s_ref, lengths, 8)
    beta = 0.5
    loss, grad = jax.value_and_grad(
        lambda lp: ggpo_loss(lp, ref, mask, jnp.asarray(rewards), jnp.asarray(group), beta)[0]
    )(logp)
    kept = group < 3
    t_tok = lengths[kept].sum()
    J, c = _numpy_ggpo((rewards - beta * (s - s_ref))[kept], group[kept], beta)
    m = np.bincount(group[kept])
    np.testing.assert_allclose(float(loss), np.sum(m * J / (beta * t_tok * np.sqrt(m - 1))), rtol=1e-5)
    expected = np.zeros(len(group))
    expected[kept] = -c / t_tok
    np.testing.assert_allclose(np.asarray(grad), np.where(np.asarray(mask), expected[:, None], 0.0), atol=1e-6)
    # equal sizes: §10's mean over groups of J_g / (beta * l_bar * sqrt(m - 1)), l_bar = T_tok / (G m)
    group = np.repeat([0, 1], 4)
    loss, _ = ggpo_loss(
        logp[:8], ref[:8], mask[:8], jnp.asarray(rewards[[0, 1, 2, 3, 0, 1, 2, 3]]), jnp.asarray(group), beta
    )
    l_bar = lengths[:8].sum() / 8
    J, _ = _numpy_ggpo(rewards[[0, 1, 2, 3, 0, 1, 2, 3]] - beta * (s - s_ref)[:8], group, beta)
    np.testing.assert_allclose(float(loss), np.mean(J / (beta * l_bar * np.sqrt(3))), rtol=1e-5)


def test_ggpo_gradient_through_a_real_model_equals_chain_rule(tiny):
    """d loss / d theta = sum_i (-c_i / T_tok) d s_i / d theta, with s_i summed from the model's log-probs,
    for groups of unequal size (one trajectory of group 0 missing) and a learner away from the reference;
    ``loss`` logs the surrogate whose gradient is applied, ``ggpo_loss`` the Gibbs-gap objective."""
    batch = _batch()
    batch["row_mask"] = batch["row_mask"] & (batch["traj"] != 3)  # group 0: 3 trajectories, group 1: 4
    b = {k: jnp.asarray(v) for k, v in batch.items()}
    config = _config("ggpo", ggpo_beta=0.5)
    state = _state(tiny, config)
    noise = jax.random.split(jax.random.PRNGKey(1), len(jax.tree_util.tree_leaves(tiny.params)))
    leaves, tree = jax.tree_util.tree_flatten(tiny.params)
    moved = [p + 0.02 * jax.random.normal(k, p.shape, p.dtype) for p, k in zip(leaves, noise, strict=True)]
    state = dataclasses.replace(state, params=jax.tree_util.tree_unflatten(tree, moved))
    grads, metrics, _ = jax.jit(make_gradient_fn(tiny.config, config))(state, b)
    mask = b["loss_mask"] & b["row_mask"][:, None]
    returns: dict[int, float] = {}
    for t, r, m in zip(batch["traj"], batch["env_reward"], batch["row_mask"], strict=True):
        if m:
            returns[t] = returns.get(t, 0.0) + r
    success = np.asarray([returns.get(t, 0.0) > 0 for t in batch["traj"]], np.float32)
    rows = np.asarray(b["row_mask"])
    ref = score_tokens_jit(tiny.config, state.ref_params, b["tokens"], b["attention_mask"], mask, 1.0)[rows]

    def direct(params):
        logp = score_tokens_jit(tiny.config, params, b["tokens"], b["attention_mask"], mask, 1.0)
        return ggpo_loss(
            logp[rows], ref, mask[rows], jnp.asarray(success[rows]), b["group"][rows], 0.5, traj=b["traj"][rows]
        )

    (loss, aux), direct_grads = jax.value_and_grad(direct, has_aux=True)(state.params)
    assert np.asarray(aux["m"])[:2].tolist() == [3.0, 4.0] and np.asarray(aux["group_kept"])[:2].all()
    assert float(jnp.max(jnp.abs(aux["s"] - aux["s_ref"]))) > 0.1  # the log-ratio term takes part
    assert _rel_diff(grads, direct_grads) <= 1e-5
    means = metric_means(metrics)
    np.testing.assert_allclose(means["ggpo_loss"], float(loss), rtol=1e-5)
    applied = -float(jnp.sum(aux["c"] * aux["s"])) / float(aux["t_tok"])
    np.testing.assert_allclose(means["loss"], applied, rtol=1e-5)


def test_ggpo_clipping_without_clipped_tokens_equals_direct_and_clipped_tokens_keep_gradient():
    rng = np.random.default_rng(0)
    logp = jnp.asarray(rng.uniform(-2, -0.1, (4, 6)), jnp.float32)
    mask = jnp.asarray(rng.random((4, 6)) > 0.2)
    rewards, group = jnp.asarray([1.0, 0, 0, 1]), jnp.zeros(4, jnp.int32)
    ref = logp + jnp.asarray(rng.uniform(-0.01, 0.01, (4, 6)), jnp.float32)
    grad = lambda radius: jax.grad(lambda lp: ggpo_loss(lp, ref, mask, rewards, group, 0.1, radius)[0])(logp)
    np.testing.assert_allclose(grad(1.0), grad(None), atol=1e-7)  # no |log ratio| beyond 1.0
    far_ref = logp + 3.0  # every token's log-ratio -3 is clamped to -delta = -0.5
    clipped = jax.grad(lambda lp: ggpo_loss(lp, far_ref, mask, rewards, group, 0.1, 0.5)[0])(logp)
    lengths = np.asarray(mask).sum(1)
    _, c_tilde = _numpy_ggpo(np.asarray(rewards) - 0.1 * (-0.5 * lengths), np.zeros(4, int), 0.1)
    expected = np.where(np.asarray(mask), (-c_tilde / lengths.sum())[:, None], 0.0)
    np.testing.assert_allclose(np.asarray(clipped), expected, atol=1e-6)
    assert np.all(np.abs(expected[np.asarray(mask)]) > 1e-3)  # every clipped token keeps a gradient


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
