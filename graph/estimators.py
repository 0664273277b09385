"""The advantage estimators, registered by name: ``(rows, config) -> (advantages [R], diagnostics)``.

Each is a pure function of the row fields; ``jitted_estimator(name)`` returns it jitted with the
config static, so every (config, row bucket) pair compiles once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp

from graph.config import AdvantageConfig
from graph.diagnostics import graph_diagnostics, group_diagnostics, source_state_diagnostics
from graph.episode import episode_advantage
from graph.graph_reward import graph_rewards, node_distances, source_state_advantage
from graph.indexing import index_rows
from graph.rows import TurnRows
from graph.segments import sorting_permutation
from graph.step_returns import discounted_step_returns

Diagnostics = dict[str, jax.Array]
Estimator = Callable[[TurnRows, AdvantageConfig], tuple[jax.Array, Diagnostics]]

ESTIMATORS: dict[str, Estimator] = {}


def in_canonical_row_order(fn: Estimator) -> Estimator:
    """Runs ``fn`` on the rows sorted by (trajectory, turn), padding last, and returns the advantages
    in the caller's order. Float sums then never depend on the order rows arrive in, so a permutation
    of the rows permutes the advantages bit for bit; and each trajectory's rows are contiguous and in
    turn order, which the step returns rely on."""

    @functools.wraps(fn)
    def wrapped(rows: TurnRows, config: AdvantageConfig) -> tuple[jax.Array, Diagnostics]:
        n = rows.row_mask.shape[0]
        position = sorting_permutation((rows.traj, rows.turn), rows.row_mask, bounds=(n, n))
        sorted_rows = jax.tree_util.tree_map(lambda field: jnp.zeros_like(field).at[position].set(field), rows)
        advantage, diagnostics = fn(sorted_rows, config)
        return advantage[position], diagnostics

    return wrapped


def register_estimator(name: str) -> Callable[[Estimator], Estimator]:
    """Registers an estimator under ``name``; it always sees its rows in canonical order."""

    def register(fn: Estimator) -> Estimator:
        if name in ESTIMATORS:
            raise ValueError(f"estimator {name!r} is already registered")
        ESTIMATORS[name] = in_canonical_row_order(fn)
        return fn

    return register


def get_estimator(name: str) -> Estimator:
    if name not in ESTIMATORS:
        raise ValueError(f"unknown advantage estimator {name!r}: expected one of {sorted(ESTIMATORS)}")
    return ESTIMATORS[name]


@functools.cache
def jitted_estimator(name: str) -> Callable[[TurnRows, AdvantageConfig], tuple[jax.Array, Diagnostics]]:
    return jax.jit(get_estimator(name), static_argnums=1)


@register_estimator("grpo")
def grpo(rows: TurnRows, config: AdvantageConfig) -> tuple[jax.Array, Diagnostics]:
    """A = A_E (ALGORITHMS.md §3)."""
    index = index_rows(rows)
    advantage = episode_advantage(rows, index, config)
    return advantage, group_diagnostics(rows, index)


@register_estimator("gigpo")
def gigpo(rows: TurnRows, config: AdvantageConfig) -> tuple[jax.Array, Diagnostics]:
    """A = A_E + w * A_S, A_S the discounted step return normalized per source state (§4)."""
    index = index_rows(rows)
    step_return = discounted_step_returns(rows, index, config.gamma)
    step_return = step_return - jnp.where(rows.valid, 0.0, config.invalid_penalty)
    step_advantage = source_state_advantage(step_return, rows, index, config)
    advantage = episode_advantage(rows, index, config) + config.step_weight * step_advantage
    advantage = jnp.where(rows.row_mask, advantage, 0.0)
    diagnostics = group_diagnostics(rows, index) | source_state_diagnostics(rows, index, step_advantage, "step_")
    return advantage, diagnostics


@register_estimator("graphgpo")
def graphgpo(rows: TurnRows, config: AdvantageConfig) -> tuple[jax.Array, Diagnostics]:
    """A = beta_G * A_G + beta_E * A_E (§5); beta_E = 0 skips the episode term entirely."""
    index = index_rows(rows)
    nodes = node_distances(rows, index)
    reward = graph_rewards(rows, index, nodes["distance"], config)
    graph_advantage = source_state_advantage(reward, rows, index, config)
    advantage = config.beta_graph * graph_advantage
    if config.beta_episode != 0.0:
        advantage = advantage + config.beta_episode * episode_advantage(rows, index, config)
    advantage = jnp.where(rows.row_mask, advantage, 0.0)
    diagnostics = (
        group_diagnostics(rows, index)
        | source_state_diagnostics(rows, index, graph_advantage, "graph_")
        | graph_diagnostics(rows, index, nodes["distance"], nodes["unreachable"], nodes["rounds"])
    )
    return advantage, diagnostics


@register_estimator("graph_only")
def graph_only(rows: TurnRows, config: AdvantageConfig) -> tuple[jax.Array, Diagnostics]:
    """The graph-only ablation: GraphGPO with beta_E = 0, beta_G = 1 (§5.5)."""
    return graphgpo(rows, config.replace(beta_graph=1.0, beta_episode=0.0))
