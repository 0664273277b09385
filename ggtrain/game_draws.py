"""Which games an iteration's task groups play: uniform draws, or draws balanced over task types.

Uniform draws (the default) pick ``groups_per_iteration`` games at random, so with few groups an ALFWorld
task type can go many iterations undrawn or unwon (a 12-iteration run of 4 groups drew 5 groups of one type
and 11 of another). ``RolloutConfig.balance_task_types`` instead walks an endless sequence of rounds, each
a seeded permutation of the task types, ``groups_per_iteration`` positions per iteration: after any number
of whole rounds every type has had the same number of groups, and never more than one apart in between.
Each group's game is then drawn among its type's games. Both are pure functions of the run's seed and the
iteration, so a resumed run and every host draw the same games.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from env_bridge.games import game_task_type

ROUND_STREAM = 1  # keeps the rounds' permutations apart from the iterations' game draws ([seed, iteration])


def choose_games(games: Sequence[str], count: int, rng: np.random.Generator) -> list[str]:
    """The iteration's task groups' games (with repeats only when there are fewer games than groups)."""
    return [games[i] for i in rng.choice(len(games), count, replace=len(games) < count)]


def round_order(seed: int, round_index: int, types: int) -> np.ndarray:
    """The order of the ``types`` task types (indices) in round ``round_index`` of the run with ``seed``."""
    return np.random.default_rng([seed, round_index, ROUND_STREAM]).permutation(types)


def scheduled_task_types(task_types: Sequence[str], seed: int, iteration: int, count: int) -> list[str]:
    """The task types of the ``count`` groups of ``iteration`` (0-based): positions ``iteration * count``
    onwards of the rounds' sequence."""
    n = len(task_types)
    positions = range(iteration * count, (iteration + 1) * count)
    return [task_types[round_order(seed, p // n, n)[p % n]] for p in positions]


def choose_balanced_games(
    games: Sequence[str], count: int, seed: int, iteration: int, rng: np.random.Generator
) -> list[str]:
    """The iteration's games under ``RolloutConfig.balance_task_types``: each group's game drawn with
    ``rng`` among the games of the task type the schedule gives it (distinct within the iteration while
    the type has enough games)."""
    by_type: dict[str, list[str]] = {}
    for game in games:
        by_type.setdefault(game_task_type(Path(game)), []).append(game)
    types = scheduled_task_types(sorted(by_type), seed, iteration, count)
    drawn = {t: iter(choose_games(by_type[t], types.count(t), rng)) for t in sorted(set(types))}
    return [next(drawn[t]) for t in types]
