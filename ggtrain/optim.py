"""The optimizer from config: global-norm clipping, then AdamW on a warmup + schedule."""

from __future__ import annotations

import optax

from ggtrain.config import OptimizerConfig

SCHEDULES = ("constant", "linear", "cosine")


def learning_rate_schedule(cfg: OptimizerConfig) -> optax.Schedule:
    decay_steps = max(cfg.total_steps - cfg.warmup_steps, 1)
    if cfg.schedule == "constant":
        after = optax.constant_schedule(cfg.learning_rate)
    elif cfg.schedule == "linear":
        after = optax.linear_schedule(cfg.learning_rate, 0.0, decay_steps)
    elif cfg.schedule == "cosine":
        after = optax.cosine_decay_schedule(cfg.learning_rate, decay_steps)
    else:
        raise ValueError(f"OptimizerConfig.schedule={cfg.schedule!r}: expected one of {SCHEDULES}")
    if cfg.warmup_steps <= 0:
        return after
    warmup = optax.linear_schedule(0.0, cfg.learning_rate, cfg.warmup_steps)
    return optax.join_schedules([warmup, after], [cfg.warmup_steps])


def make_optimizer(cfg: OptimizerConfig) -> optax.GradientTransformation:
    return optax.chain(
        optax.clip_by_global_norm(cfg.grad_clip),
        optax.adamw(learning_rate_schedule(cfg), b1=cfg.b1, b2=cfg.b2, eps=cfg.eps, weight_decay=cfg.weight_decay),
    )
