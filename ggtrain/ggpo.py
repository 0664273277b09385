"""The GGPO objective (ALGORITHMS.md §10): a Gibbs-gap loss on sequence log-probs with a KL-adjusted
reward, as plain functions of arrays, and the train step's two halves of it: the gradient-free
pre-pass over the whole mini-batch (:func:`ggpo_prepare`: detached coefficients ``c`` and ``T_tok``)
and the per-micro-batch linear surrogate (:func:`ggpo_surrogate`), whose gradient equals the direct loss's.

Responses are rows of ``[N, T]`` token arrays; with ``traj`` the rows of one trajectory sum into one
response (a multi-turn episode is one GGPO response). Only groups whose rewards are mixed take part,
and they are dropped before ``T_tok`` is counted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from ggtrain.config import LossConfig
from ggtrain.packing import row_sums
from ggtrain.policy import Batch, Extras, detached_logp, map_micro_batches, pair, policy_logits_and_logp, response_mask
from ggtrain.train_state import TrainState
from models.config import ModelConfig

Metrics = dict[str, tuple[jax.Array, jax.Array]]


class GGPOCoefficients(NamedTuple):
    """Per-response quantities (indexed by dense response id ``[N]``) and per-group ``J``."""

    s: jax.Array  # sequence log-prob under the learner
    s_ref: jax.Array  # under the reference
    reward: jax.Array  # r_i
    adjusted: jax.Array  # R_i = r_i - beta (s_i - s_ref_i)   (or with the clipped log-ratio)
    q: jax.Array  # softmax(R / beta) within the group
    c: jax.Array  # (m q_i - 1) / sqrt(m - 1)
    kept: jax.Array  # bool: the response is in a mixed-reward group
    group: jax.Array  # dense group id of each response
    J: jax.Array  # [N] Gibbs gap per group id (0 for dropped groups)
    group_kept: jax.Array  # [N] bool per group id
    m: jax.Array  # [N] responses per group id
    t_tok: jax.Array  # [] valid response tokens of the kept groups
    n_resp: jax.Array  # [] kept responses
    row_response: jax.Array  # [rows] dense response id of each row


def dense_ids(ids: jax.Array, mask: jax.Array) -> jax.Array:
    """Dense ids ``0..k-1`` for the distinct ``ids`` where ``mask``; masked-out entries share one id after them."""
    n = ids.shape[0]
    keys = jnp.where(mask, ids, jnp.iinfo(jnp.int32).max)
    order = jnp.argsort(keys, stable=True)
    sorted_ids = keys[order]
    new = jnp.concatenate([jnp.ones((1,), bool), sorted_ids[1:] != sorted_ids[:-1]])
    dense_sorted = jnp.cumsum(new.astype(jnp.int32)) - 1
    return jnp.zeros((n,), jnp.int32).at[order].set(dense_sorted)


def ggpo_coefficients(
    row_logp_sum: jax.Array,
    row_ref_logp_sum: jax.Array,
    row_tokens: jax.Array,
    row_clipped_ratio_sum: jax.Array | None,
    rewards: jax.Array,
    group: jax.Array,
    traj: jax.Array,
    row_mask: jax.Array,
    beta: float,
) -> GGPOCoefficients:
    """Everything GGPO needs from per-row sums; ``rewards``/``group`` are per row (equal within a traj)."""
    n = row_mask.shape[0]
    resp = dense_ids(traj, row_mask)
    w = row_mask.astype(jnp.float32)
    s = jax.ops.segment_sum(row_logp_sum * w, resp, n)
    s_ref = jax.ops.segment_sum(row_ref_logp_sum * w, resp, n)
    tokens = jax.ops.segment_sum(row_tokens * w, resp, n)
    used = jax.ops.segment_max(row_mask.astype(jnp.int32), resp, n) > 0
    reward = jax.ops.segment_max(jnp.where(row_mask, rewards.astype(jnp.float32), -jnp.inf), resp, n)
    reward = jnp.where(used, reward, 0.0)
    grp_row = dense_ids(group, row_mask)
    grp = jnp.where(used, jax.ops.segment_max(jnp.where(row_mask, grp_row, 0), resp, n), 0)
    # mixed rewards: min != max inside the group
    r_min = jax.ops.segment_min(jnp.where(used, reward, jnp.inf), grp, n)
    r_max = jax.ops.segment_max(jnp.where(used, reward, -jnp.inf), grp, n)
    group_kept = r_max > r_min
    kept = used & group_kept[grp]
    m = jax.ops.segment_sum(kept.astype(jnp.float32), grp, n)
    if row_clipped_ratio_sum is None:
        log_ratio = s - s_ref
    else:
        log_ratio = jax.ops.segment_sum(row_clipped_ratio_sum * w, resp, n)
    adjusted = reward - beta * log_ratio
    # centered, max-shifted log-mean-exp per group: D_i = (R_i - mean R)/beta
    mean = jax.ops.segment_sum(jnp.where(kept, adjusted, 0.0), grp, n) / jnp.maximum(m, 1.0)
    d = jnp.where(kept, (adjusted - mean[grp]) / beta, -jnp.inf)
    d_max = jax.ops.segment_max(d, grp, n)
    d_max = jnp.where(jnp.isfinite(d_max), d_max, 0.0)
    e = jnp.where(kept, jnp.exp(d - d_max[grp]), 0.0)
    z = jax.ops.segment_sum(e, grp, n)
    q = jnp.where(kept, e / jnp.maximum(z[grp], 1e-30), 0.0)
    lse = d_max + jnp.log(jnp.maximum(z, 1e-30))
    J = jnp.where(group_kept, beta * (lse - jnp.log(jnp.maximum(m, 1.0))), 0.0)
    c = jnp.where(kept, (m[grp] * q - 1.0) / jnp.sqrt(jnp.maximum(m[grp] - 1.0, 1.0)), 0.0)
    t_tok = jnp.sum(jnp.where(kept, tokens, 0.0))
    return GGPOCoefficients(
        s, s_ref, reward, adjusted, q, c, kept, grp, J, group_kept, m, t_tok, jnp.sum(kept.astype(jnp.float32)), resp
    )


def ggpo_direct_loss(coef: GGPOCoefficients, beta: float) -> jax.Array:
    """``sum over kept groups of (m_g / N) J_g / (beta * l_bar * sqrt(m_g - 1))`` with ``N`` kept responses
    and ``l_bar = T_tok / N``. With equal group sizes ``m_g / N = 1 / G``: §10's mean over groups. §10
    defines ``l_bar`` for equal sizes only; weighting a group by its size keeps ``d loss / d s_i =
    -c_i / T_tok`` (the surrogate's gradient) for groups of any size, where a plain mean would not."""
    n_resp = jnp.maximum(coef.n_resp, 1.0)
    l_bar = coef.t_tok / n_resp
    per_group = coef.m / n_resp * coef.J / (beta * jnp.maximum(l_bar, 1e-30) * jnp.sqrt(jnp.maximum(coef.m - 1.0, 1.0)))
    return jnp.sum(jnp.where(coef.group_kept, per_group, 0.0))


def ggpo_loss(
    logp: jax.Array,
    ref_logp: jax.Array,
    mask: jax.Array,
    rewards: jax.Array,
    group: jax.Array,
    beta: float,
    clip_radius: float | None = None,
    traj: jax.Array | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """GGPO on token log-probs ``[N, T]`` (``mask`` marks response tokens) with per-row ``rewards`` and
    ``group`` ``[N]``; with ``traj`` the rows of a trajectory are one response.

    Without clipping the loss is the direct Gibbs-gap loss (gradient by autograd). With ``clip_radius``
    the per-token log-ratio is clamped to ``±clip_radius`` for the coefficients only, and the loss is
    the surrogate ``-sum_i c~_i s_i / T_tok`` with ``c~`` detached. ``aux`` holds ``J`` (per dense group
    id), ``q`` and ``c`` (per dense response id) and the rest of :class:`GGPOCoefficients`.
    """
    n = logp.shape[0]
    traj = jnp.arange(n) if traj is None else traj
    mask_f = mask.astype(jnp.float32)
    row_mask = jnp.ones((n,), bool)
    row_s = jnp.sum(logp * mask_f, axis=1)
    row_s_ref = jax.lax.stop_gradient(jnp.sum(ref_logp * mask_f, axis=1))
    clipped = None
    if clip_radius is not None:
        ratio = jax.lax.stop_gradient(logp - ref_logp)
        clipped = jnp.sum(jnp.clip(ratio, -clip_radius, clip_radius) * mask_f, axis=1)
    coef = ggpo_coefficients(row_s, row_s_ref, jnp.sum(mask_f, axis=1), clipped, rewards, group, traj, row_mask, beta)
    if clip_radius is None:
        loss = ggpo_direct_loss(coef, beta)
    else:
        c = jax.lax.stop_gradient(coef.c)
        loss = -jnp.sum(c * coef.s) / jnp.maximum(jax.lax.stop_gradient(coef.t_tok), 1.0)
    return loss, dict(coef._asdict())


def trajectory_success(batch: Batch) -> jax.Array:
    """Per row: 1.0 when the row's trajectory has a positive return (the GGPO reward)."""
    rows = batch["traj"].shape[0]
    reward = jnp.where(batch["row_mask"], batch["env_reward"], 0.0)
    dense = dense_ids(batch["traj"], batch["row_mask"])
    returns = jax.ops.segment_sum(reward, dense, rows)
    return (returns[dense] > 0).astype(jnp.float32)


def _row_sums(model_config: ModelConfig, cfg: LossConfig, state: TrainState, batch: Batch, micro_rows: int) -> Any:
    """Per row: sequence log-probs under learner and reference, response tokens, clipped log-ratio sum."""

    def rows_of(mb: Batch) -> tuple[jax.Array, ...]:
        mask = response_mask(mb).astype(jnp.float32)
        logp = detached_logp(model_config, state.params, mb, cfg.temperature)
        ref = detached_logp(model_config, state.ref_params, mb, cfg.temperature)
        clipped = jnp.zeros(mb["row_mask"].shape)
        if cfg.ggpo_clip_radius is not None:
            r = cfg.ggpo_clip_radius
            clipped = row_sums(mb, jnp.clip(logp - ref, -r, r) * mask)
        return row_sums(mb, logp * mask), row_sums(mb, ref * mask), row_sums(mb, mask), clipped

    # one entry per row: a packed batch's [S, K] row tables flattened
    return [x.reshape(-1) for x in map_micro_batches(rows_of, batch, micro_rows)]


def ggpo_prepare(
    model_config: ModelConfig, cfg: LossConfig
) -> Callable[[TrainState, Batch, int], tuple[Extras, Metrics]]:
    """The pre-pass: GGPO's coefficients need every response of a group and ``T_tok`` the whole
    mini-batch, so they are computed once, before the micro-batch scan, without gradients."""

    def prepare(state: TrainState, batch: Batch, micro_rows: int) -> tuple[Extras, Metrics]:
        s_row, s_ref_row, tokens_row, clipped_row = _row_sums(model_config, cfg, state, batch, micro_rows)
        rows = {k: batch[k].reshape(-1) for k in ("group", "traj", "row_mask", "env_reward")}
        coef = ggpo_coefficients(
            s_row,
            s_ref_row,
            tokens_row,
            clipped_row if cfg.ggpo_clip_radius is not None else None,
            trajectory_success(rows),
            rows["group"],
            rows["traj"],
            rows["row_mask"],
            cfg.ggpo_beta,
        )
        c_row = jnp.where(rows["row_mask"], coef.c[coef.row_response], 0.0).reshape(batch["row_mask"].shape)
        kept_row = (rows["row_mask"] & coef.kept[coef.row_response]).reshape(batch["row_mask"].shape)
        kept_groups = jnp.sum(coef.group_kept.astype(jnp.float32))
        one = jnp.ones(())
        metrics = {
            "ggpo_loss": pair(ggpo_direct_loss(coef, cfg.ggpo_beta), one),
            "ggpo_J": pair(jnp.sum(coef.J), kept_groups),
            "ggpo_kept_groups": pair(kept_groups, one),
            "ggpo_t_tok": pair(coef.t_tok, one),
            "ggpo_abs_log_ratio": pair(jnp.sum(jnp.where(coef.kept, jnp.abs(coef.s - coef.s_ref), 0.0)), coef.n_resp),
        }
        return Extras(rows={"ggpo_c": c_row, "ggpo_kept": kept_row}, scalars={"t_tok": coef.t_tok}), metrics

    return prepare


def ggpo_surrogate(
    model_config: ModelConfig, cfg: LossConfig
) -> Callable[[Any, Batch, dict[str, jax.Array], jax.Array], tuple[jax.Array, dict[str, Any]]]:
    """The linear surrogate ``-sum_rows c_row * s_row / T_tok`` with ``c`` and ``T_tok`` from
    :func:`ggpo_prepare`: its gradient equals the direct GGPO loss's (ALGORITHMS.md §10)."""

    def loss_fn(
        params: Any, batch: Batch, scalars: dict[str, jax.Array], rng: jax.Array
    ) -> tuple[jax.Array, dict[str, Any]]:
        del rng
        mask = response_mask(batch).astype(jnp.float32)
        _, logp = policy_logits_and_logp(model_config, params, batch, cfg.temperature)
        s_row = row_sums(batch, logp * mask)
        surrogate_sum = -jnp.sum(batch["ggpo_c"] * s_row)
        kept_tokens = jnp.sum(jnp.where(batch["ggpo_kept"], row_sums(batch, mask), 0.0))
        # ``loss``: the value whose gradient is applied (the surrogate; ``ggpo_loss`` is the Gibbs-gap objective)
        aux = {"loss": pair(surrogate_sum, kept_tokens), "tokens": pair(jnp.sum(mask), 0.0)}
        return surrogate_sum / jnp.maximum(scalars["t_tok"], 1.0), aux

    return loss_fn
