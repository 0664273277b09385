"""The training state: three policies as separate parameter trees, the optimizer state, step and RNG.

learner: updated every optimizer step; reference: hard copy of the learner every K optimizer steps
(K = 0 keeps it frozen); behavior (rollout) policy: its own sync interval. A refresh of one never
touches another.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from ggtrain.config import PolicyConfig


@struct.dataclass
class TrainState:
    step: jax.Array
    params: Any
    opt_state: Any
    ref_params: Any
    behavior_params: Any
    rng: jax.Array


def _copy(tree: Any) -> Any:
    return jax.tree_util.tree_map(jnp.copy, tree)


def create_train_state(params: Any, optimizer: optax.GradientTransformation, rng: jax.Array) -> TrainState:
    """Reference and behavior start as copies (separate buffers) of the learner."""
    return TrainState(
        step=jnp.zeros((), jnp.int32),
        params=params,
        opt_state=jax.jit(optimizer.init)(params),
        ref_params=_copy(params),
        behavior_params=_copy(params),
        rng=rng,
    )


def refresh_reference(state: TrainState) -> TrainState:
    return dataclasses.replace(state, ref_params=_copy(state.params))


def sync_behavior(state: TrainState) -> TrainState:
    return dataclasses.replace(state, behavior_params=_copy(state.params))


def apply_policy_refreshes(state: TrainState, policies: PolicyConfig) -> tuple[TrainState, dict[str, bool]]:
    """After an optimizer step: the refreshes that are due at ``state.step``."""
    step = int(state.step)
    refreshed = {
        "reference": policies.reference_refresh_every > 0 and step % policies.reference_refresh_every == 0,
        "behavior": policies.behavior_sync_every > 0 and step % policies.behavior_sync_every == 0,
    }
    if refreshed["reference"]:
        state = refresh_reference(state)
    if refreshed["behavior"]:
        state = sync_behavior(state)
    return state, refreshed
