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
from jax.sharding import NamedSharding, PartitionSpec

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


def optimizer_state_shardings(optimizer: optax.GradientTransformation, params: Any) -> Any:
    """The optimizer state laid out like the parameters (Adam moments sharded exactly as their parameter;
    counters replicated), or None when the parameters carry no mesh sharding. Left to the compiler,
    ``optimizer.init``'s zeros come out replicated: a full fp32 copy of the model twice on every device."""
    shardings = jax.tree_util.tree_map(lambda p: getattr(p, "sharding", None), params)
    leaves = jax.tree_util.tree_leaves(shardings)
    if not leaves or not all(isinstance(s, NamedSharding) for s in leaves):
        return None
    replicated = NamedSharding(leaves[0].mesh, PartitionSpec())
    return optax.tree_map_params(
        optimizer,
        lambda _, sharding: sharding,
        jax.eval_shape(optimizer.init, params),
        shardings,
        transform_non_params=lambda _: replicated,
    )


def create_train_state(params: Any, optimizer: optax.GradientTransformation, rng: jax.Array) -> TrainState:
    """Reference and behavior start as copies (separate buffers) of the learner."""
    return TrainState(
        step=jnp.zeros((), jnp.int32),
        params=params,
        opt_state=jax.jit(optimizer.init, out_shardings=optimizer_state_shardings(optimizer, params))(params),
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
