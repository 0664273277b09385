"""Estimator options, resolved once on the host and passed to jitted code as a static argument."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

EPISODE_WEIGHTINGS = ("trajectory", "turn")
MODES = ("mean_std", "mean")


@dataclasses.dataclass(frozen=True)
class AdvantageConfig:
    """Options of every estimator (ALGORITHMS.md §1-§5); defaults are the ALFWorld ones.

    Frozen and hashable so it can be a static argument of ``jax.jit``: each distinct config compiles once
    per row bucket.
    """

    episode_weighting: str = "trajectory"
    mode: str = "mean_std"
    omega: float = 0.1
    gamma: float = 0.95
    beta_graph: float = 1.0
    beta_episode: float = 1.0
    step_weight: float = 1.0
    invalid_penalty: float = 0.1
    paper_cost: bool = False
    normalize_distance: bool = False
    graph_reward_scale: float = 10.0
    epsilon: float = 1e-6

    def __post_init__(self) -> None:
        if self.episode_weighting not in EPISODE_WEIGHTINGS:
            raise ValueError(f"episode_weighting={self.episode_weighting!r}: expected one of {EPISODE_WEIGHTINGS}")
        if self.mode not in MODES:
            raise ValueError(f"mode={self.mode!r}: expected one of {MODES}")
        for name in (
            "omega",
            "gamma",
            "beta_graph",
            "beta_episode",
            "step_weight",
            "invalid_penalty",
            "graph_reward_scale",
            "epsilon",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"{name}={value!r}: expected a finite number")
            object.__setattr__(self, name, float(value))
        for name in ("paper_cost", "normalize_distance"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}={getattr(self, name)!r}: expected True or False")
        if not 0.0 < self.omega <= 1.0:
            raise ValueError(f"omega={self.omega}: expected 0 < omega <= 1")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma={self.gamma}: expected 0 <= gamma <= 1")
        if self.epsilon <= 0.0:
            raise ValueError(f"epsilon={self.epsilon}: expected > 0")

    def replace(self, **changes: Any) -> AdvantageConfig:
        return dataclasses.replace(self, **changes)


OPTION_NAMES = tuple(field.name for field in dataclasses.fields(AdvantageConfig))


def make_config(**options: Any) -> AdvantageConfig:
    """Builds a config from keyword options, naming any unknown option."""
    unknown = sorted(set(options) - set(OPTION_NAMES))
    if unknown:
        raise ValueError(f"unknown option(s) {unknown}: expected some of {list(OPTION_NAMES)}")
    return AdvantageConfig(**options)
