"""PPO-clip pieces (ALGORITHMS.md §9) against hand-computed numbers.

Every expected value below is written out by hand (the arithmetic is in the comments), not computed
by the code under test. The clip bounds are asymmetric (0.2 low, 0.28 high) so a swapped bound shows.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ggtrain.ppo import (
    AGGREGATIONS,
    KL_TYPES,
    aggregate_parts,
    aggregation_normalizer,
    clipped_policy_gradient,
    kl_penalty,
    token_entropy,
)

CLIP_LOW, CLIP_HIGH, DUAL = 0.2, 0.28, 3.0

# (advantage, ratio, expected pg, clip active, d pg / d logp)
#   pg = max(-A rho, -A clip(rho, 0.8, 1.28)); for A < 0: min(pg, -A * 3)
PG_CASES = [
    # A > 0, ratio above 1 + clip_high: max(-3.0, -2 * 1.28 = -2.56) = -2.56, clipped, no gradient
    (2.0, 1.5, -2.56, True, 0.0),
    # A > 0, ratio below 1 - clip_low: max(-1.0, -2 * 0.8 = -1.6) = -1.0, the clip does not bind
    (2.0, 0.5, -1.0, False, -1.0),
    # A < 0, ratio below 1 - clip_low: max(0.5, 0.8) = 0.8, clipped; dual min(0.8, 3) = 0.8
    (-1.0, 0.5, 0.8, True, 0.0),
    # A < 0, ratio inside the band: 1.2, untouched; gradient -A rho = 1.2
    (-1.0, 1.2, 1.2, False, 1.2),
    # A < 0, huge ratio: max(10, 1.28) = 10, dual clip min(10, 1 * 3) = 3, clipped, no gradient
    (-1.0, 10.0, 3.0, True, 0.0),
    # A < 0, ratio above 1 + clip_high but below the dual bound: max(4, 2.56) = 4 < 6, not clipped
    (-2.0, 2.0, 4.0, False, 4.0),
    # A < 0, ratio just under the dual bound 3: max(2.9 * 0.5, ...) = 1.45 < 1.5
    (-0.5, 2.9, 1.45, False, 1.45),
    # A > 0 inside the band
    (1.0, 1.1, -1.1, False, -1.1),
    # A = 0: nothing, whatever the ratio
    (0.0, 5.0, 0.0, False, 0.0),
]


def _pg_inputs():
    adv = np.array([c[0] for c in PG_CASES], np.float32)
    ratio = np.array([c[1] for c in PG_CASES], np.float64)
    old_logp = np.full(len(PG_CASES), -1.5, np.float32)
    logp = (old_logp + np.log(ratio)).astype(np.float32)
    return jnp.asarray(logp), jnp.asarray(old_logp), jnp.asarray(adv)


def test_clipped_policy_gradient_values_and_clip_flags():
    logp, old_logp, adv = _pg_inputs()
    pg, clipped = clipped_policy_gradient(logp, old_logp, adv, CLIP_LOW, CLIP_HIGH, DUAL)
    np.testing.assert_allclose(np.asarray(pg), [c[2] for c in PG_CASES], rtol=1e-5, atol=1e-6)
    assert np.asarray(clipped).tolist() == [c[3] for c in PG_CASES]


def test_clipped_policy_gradient_gradient_is_zero_exactly_where_clipped():
    logp, old_logp, adv = _pg_inputs()
    grad = jax.grad(lambda lp: jnp.sum(clipped_policy_gradient(lp, old_logp, adv, CLIP_LOW, CLIP_HIGH, DUAL)[0]))(logp)
    # d(-A rho)/d logp = -A rho where the unclipped branch is active, 0 where a clip binds
    np.testing.assert_allclose(np.asarray(grad), [c[4] for c in PG_CASES], rtol=1e-5, atol=1e-6)


def test_swapped_clip_bounds_change_the_values():
    """The control for the asymmetric bounds above: swapping low/high must be visible."""
    logp, old_logp, adv = _pg_inputs()
    pg, _ = clipped_policy_gradient(logp, old_logp, adv, CLIP_HIGH, CLIP_LOW, DUAL)
    # case 0 becomes max(-3, -2 * 1.2) = -2.4, case 2 becomes max(0.5, 0.72) = 0.72
    np.testing.assert_allclose(np.asarray(pg)[[0, 2]], [-2.4, 0.72], rtol=1e-5)


def test_at_ratio_one_the_gradient_is_minus_the_advantage():
    adv = jnp.asarray([1.5, -0.5, 0.0, 2.0, -3.0])
    logp = jnp.asarray([-1.0, -2.0, -0.3, -4.0, -0.01])
    grad = jax.grad(lambda lp: jnp.sum(clipped_policy_gradient(lp, logp, adv, 0.2, 0.2, 3.0)[0]))(logp)
    np.testing.assert_allclose(np.asarray(grad), [-1.5, 0.5, 0.0, -2.0, 3.0], rtol=1e-6)


# KL estimators of the learner against the reference, per token (logp, ref_logp):
#   kl (k1) = logp - ref; mse (k2) = (logp - ref)^2 / 2; low_var_kl (k3) = e^r - r - 1, r = ref - logp,
#   clamped to [-10, 10]
KL_LOGP = [-1.0, -2.0, -20.0, -5.0, -0.7]
KL_REF = [-1.5, -1.0, -5.0, -20.0, -0.7]
KL_EXPECTED = {
    "kl": [0.5, -1.0, -15.0, 15.0, 0.0],
    "mse": [0.125, 0.5, 112.5, 112.5, 0.0],
    # r = -0.5: e^-0.5 + 0.5 - 1 = 0.6065307 - 0.5; r = 1: e - 2; r = 15: e^15 - 16 -> clamp 10;
    # r = -15: e^-15 + 14 -> clamp 10; r = 0: 0
    "low_var_kl": [0.10653066, 0.71828183, 10.0, 10.0, 0.0],
}


@pytest.mark.parametrize("kind", KL_TYPES)
def test_kl_estimators(kind):
    out = kl_penalty(jnp.asarray(KL_LOGP), jnp.asarray(KL_REF), kind)
    np.testing.assert_allclose(np.asarray(out), KL_EXPECTED[kind], rtol=1e-5, atol=1e-7)


def test_low_var_kl_direction_and_gradient():
    """k3 uses r = ref - logp (the sign-swapped r gives e^0.5 - 1.5 = 0.148721 on the first token), and
    its gradient d/d logp = 1 - e^r vanishes at logp = ref and is 0 where the clamp binds."""
    logp, ref = jnp.asarray(KL_LOGP), jnp.asarray(KL_REF)
    assert abs(float(kl_penalty(logp, ref, "low_var_kl")[0]) - 0.148721) > 0.04
    grad = jax.grad(lambda lp: jnp.sum(kl_penalty(lp, ref, "low_var_kl")))(logp)
    # 1 - e^-0.5 = 0.3934693; 1 - e = -1.7182818; clamped: 0, 0; equal: 0
    np.testing.assert_allclose(np.asarray(grad), [0.39346934, -1.7182818, 0.0, 0.0, 0.0], rtol=1e-5, atol=1e-7)


def test_unknown_kl_type_and_aggregation_raise():
    with pytest.raises(ValueError, match="kl_type"):
        kl_penalty(jnp.zeros(2), jnp.zeros(2), "k4")
    with pytest.raises(ValueError, match="aggregation"):
        aggregate_parts(jnp.zeros((1, 2)), jnp.ones((1, 2), bool), "sum")


def test_token_entropy_values():
    logits = jnp.asarray(
        [
            [0.0, 0.0, 0.0, 0.0],  # uniform over 4: ln 4 = 1.3862944
            [0.0, math.log(3.0), -1e9, -1e9],  # p = [1/4, 3/4]: 0.25 ln 4 + 0.75 ln(4/3) = 0.5623351
            [1000.0, 0.0, 0.0, 0.0],  # one-hot up to e^-1000: 0, not NaN
            [100.0, 100.0, 100.0, 100.0],  # shift invariance: ln 4
        ]
    )
    out = token_entropy(logits)
    np.testing.assert_allclose(np.asarray(out), [1.3862944, 0.5623351, 0.0, 1.3862944], rtol=1e-6, atol=1e-6)
    # bfloat16 logits are promoted to float32 before the softmax
    assert token_entropy(logits.astype(jnp.bfloat16)).dtype == jnp.float32


# values [3 rows, 4 tokens]; row 2 has no loss tokens (and non-zero values there), row 3 one token
AGG_VALUES = [[1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 0.0, 0.0], [5.0, 5.0, 5.0, 5.0], [7.0, -1.0, 0.0, 0.0]]
AGG_MASK = [[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0], [0, 1, 0, 0]]
# token-mean: (1 + 2 + 3 + 10 - 1) / 5 tokens = 15 / 5
# seq-mean-token-sum: per row [6, 10, -, -1] -> 15 over 3 rows with tokens
# seq-mean-token-mean: per row [2, 10, -, -1] -> 11 over 3 rows
AGG_EXPECTED = {
    "token-mean": (15.0, 5.0, 5.0),  # numerator, count, normalizer
    "seq-mean-token-sum": (15.0, 3.0, 3.0),
    "seq-mean-token-mean": (11.0, 3.0, 3.0),
}


@pytest.mark.parametrize("mode", AGGREGATIONS)
def test_aggregations(mode):
    values, mask = jnp.asarray(AGG_VALUES), jnp.asarray(AGG_MASK, bool)
    num, count = aggregate_parts(values, mask, mode)
    expected = AGG_EXPECTED[mode]
    np.testing.assert_allclose([float(num), float(count)], expected[:2], rtol=1e-6)
    np.testing.assert_allclose(float(aggregation_normalizer(mask, mode)), expected[2], rtol=1e-6)


@pytest.mark.parametrize("mode", AGGREGATIONS)
def test_micro_batch_numerators_add_up_to_the_mini_batch(mode):
    values, mask = jnp.asarray(AGG_VALUES), jnp.asarray(AGG_MASK, bool)
    whole, _ = aggregate_parts(values, mask, mode)
    parts = [aggregate_parts(values[s], mask[s], mode)[0] for s in (slice(0, 1), slice(1, 3), slice(3, 4))]
    np.testing.assert_allclose(float(sum(parts)), float(whole), rtol=1e-6)
    np.testing.assert_allclose(float(whole), AGG_EXPECTED[mode][0], rtol=1e-6)


@pytest.mark.parametrize("mode", AGGREGATIONS)
def test_rows_without_loss_tokens_contribute_zero_and_no_nan(mode):
    values = jnp.asarray([[3.0, 4.0], [1e30, -2.0]])
    empty = jnp.zeros((2, 2), bool)
    num, count = aggregate_parts(values, empty, mode)
    norm = aggregation_normalizer(empty, mode)
    assert (float(num), float(count), float(norm)) == (0.0, 0.0, 1.0)
    assert float(num / norm) == 0.0
    # the gradient of a fully masked loss is exactly 0 (no 0/0 anywhere)
    grad = jax.grad(lambda v: aggregate_parts(v, empty, mode)[0] / aggregation_normalizer(empty, mode))(values)
    assert np.all(np.asarray(grad) == 0.0)
    # an empty row next to a real one: the real row's value alone
    mask = jnp.asarray([[True, True], [False, False]])
    num, count = aggregate_parts(values, mask, mode)
    # token-mean: 7 over 2 tokens; seq-mean-token-sum: 7 over 1 row; seq-mean-token-mean: 3.5 over 1 row
    expected = {"token-mean": (7.0, 2.0), "seq-mean-token-sum": (7.0, 1.0), "seq-mean-token-mean": (3.5, 1.0)}
    assert (float(num), float(count)) == expected[mode]


def test_ppo_loss_composed_from_the_pieces():
    """The §9 per-token loss through each aggregation, with the gradient landing only on loss tokens."""
    # two rows of three tokens; ratio 1 everywhere, so pg = -A per token
    adv = jnp.asarray([[2.0, 2.0, 2.0], [-1.0, -1.0, -1.0]])
    mask = jnp.asarray([[True, True, False], [True, False, False]])
    logp = jnp.asarray([[-1.0, -2.0, -3.0], [-0.5, -0.5, -0.5]])

    def loss(lp, mode):
        pg, _ = clipped_policy_gradient(lp, logp, adv * mask, 0.2, 0.2, 3.0)
        return aggregate_parts(pg, mask, mode)[0] / aggregation_normalizer(mask, mode)

    # token-mean: (-2 - 2 + 1) / 3 = -1; seq-mean-token-sum: (-4 + 1) / 2 = -1.5;
    # seq-mean-token-mean: (-2 + 1) / 2 = -0.5
    for mode, value in (("token-mean", -1.0), ("seq-mean-token-sum", -1.5), ("seq-mean-token-mean", -0.5)):
        np.testing.assert_allclose(float(loss(logp, mode)), value, rtol=1e-6)
    grad = jax.grad(loss)(logp, "seq-mean-token-mean")
    # -A / (tokens of the row) / rows: row 0: -2 / 2 / 2 = -0.5; row 1: 1 / 1 / 2 = 0.5; masked: 0
    np.testing.assert_allclose(np.asarray(grad), [[-0.5, -0.5, 0.0], [0.5, 0.0, 0.0]], rtol=1e-6)
