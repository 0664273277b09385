"""Every seed of a run, derived by name from ``TrainConfig.seed``, and the rules written to the manifest.

A run has one user-set number; each random stream (which games an iteration plays, how its environments
reset, what the policy samples, how the batch is shuffled, what evaluation plays) is derived from it
here and nowhere else, so a reader can reproduce any of them from ``manifest.json`` alone. The strides
are primes, kept from the first version so that old runs reproduce: they keep one run's per-iteration
values apart from the next seed's (``seed * stride + iteration`` collides only past ``stride``
iterations). Evaluation does not depend on the training seed: every run of a comparison plays the same
evaluation games the same way.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

from env_bridge.rollout import RERUN_SEED_STRIDE

ENVIRONMENT_STRIDE = 100_003  # environment reset seed: seed * stride + iteration (+ trajectory id)
COLLATE_STRIDE = 7919  # batch shuffle seed: seed * stride + iteration + COLLATE_EPOCH_STRIDE * epoch
COLLATE_EPOCH_STRIDE = 104_729
EVALUATION_SEEDS = (0,)  # the evaluation seeds played during training
EVALUATION_KEY_OFFSET = 10_000  # evaluation sampling key: PRNGKey(offset + evaluation seed)


def evaluation_key(seed: int) -> jax.Array:
    """The sampling key of evaluation seed ``seed`` (per turn and game, ``fold_in`` turn then game)."""
    return jax.random.PRNGKey(EVALUATION_KEY_OFFSET + seed)


@dataclasses.dataclass(frozen=True)
class RunSeeds:
    """The seeds of one training run, from its ``TrainConfig.seed``."""

    base: int

    def training_key(self) -> jax.Array:
        """The train state's rng (``Updater.create`` builds the same key from ``config.seed``)."""
        return jax.random.PRNGKey(self.base)

    def group_choice(self, iteration: int) -> np.random.Generator:
        """Draws which games iteration ``iteration`` (0-based) plays, the same on every host."""
        return np.random.default_rng([self.base, iteration])

    def environment(self, iteration: int) -> int:
        """The rollout's reset seed: trajectory t resets with this + t (``RolloutDriver.run``)."""
        return self.base * ENVIRONMENT_STRIDE + iteration

    def rollout_key(self, iteration: int) -> jax.Array:
        """The behavior policy's sampling key; the sampler folds in the turn, then the trajectory id."""
        return jax.random.fold_in(jax.random.PRNGKey(self.base), iteration)

    def collate(self, iteration: int, epoch: int) -> int:
        """The mini-batch shuffle seed of one epoch of one iteration's update (each host shuffles its own
        rows with it: ``ggtrain.host_batches``)."""
        return self.base * COLLATE_STRIDE + iteration + COLLATE_EPOCH_STRIDE * epoch

    def manifest(self) -> dict[str, Any]:
        """The derivation rules, with the base values they start from, for ``manifest.json``."""
        return {
            "base": self.base,
            "training": f"jax.random.PRNGKey({self.base}): the train state's rng",
            "group_choice": f"numpy.random.default_rng([{self.base}, iteration]).choice(games, groups_per_iteration)",
            "balanced_group_choice": (
                f"RolloutConfig.balance_task_types: round r orders the sorted task types by"
                f" numpy.random.default_rng([{self.base}, r, 1]).permutation; iteration i's groups take positions"
                " i * groups_per_iteration onwards, each a game of its type drawn with"
                f" numpy.random.default_rng([{self.base}, i]) (ggtrain.game_draws)"
            ),
            "environment": (
                f"{self.base} * {ENVIRONMENT_STRIDE} + iteration + trajectory id"
                f" (+ {RERUN_SEED_STRIDE} per re-run of a failed group)"
            ),
            "rollout": f"fold_in(fold_in(fold_in(PRNGKey({self.base}), iteration), turn), trajectory id)",
            "collate": (
                f"{self.base} * {COLLATE_STRIDE} + iteration + {COLLATE_EPOCH_STRIDE} * epoch"
                " (each host shuffles its own rows with it)"
            ),
            "evaluation": {
                "seeds": list(EVALUATION_SEEDS),
                "environment": "evaluation seed + game index",
                "sampling": f"fold_in(fold_in(PRNGKey({EVALUATION_KEY_OFFSET} + evaluation seed), turn), game index)",
            },
        }
