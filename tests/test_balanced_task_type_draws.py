"""``RolloutConfig.balance_task_types`` on the real ALFWorld train games: over whole rounds every task type
gets the same number of task groups (uniform draws gave seed 2 of the comparison 14 heat groups and 5 cool
ones in 12 iterations), never more than one apart in between, each group a game of its scheduled type; the
draws are a pure function of the seed and the iteration, and off by default."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from env_bridge.games import game_task_type
from ggtrain.config import config_file, resolve_config
from ggtrain.game_draws import choose_games, scheduled_task_types
from ggtrain.run import training_games
from ggtrain.seeds import RunSeeds
from ggtrain.train_loop import iteration_games

ITERATIONS, GROUPS = 12, 4  # the comparison's: 48 groups, 8 rounds of the 6 task types


@pytest.fixture(scope="module")
def games() -> list[str]:
    return training_games(resolve_config([config_file("alfworld_comparison")], []))


def _run(games: list[str], seed: int, balanced: bool) -> Any:
    config = resolve_config(
        [config_file("alfworld_comparison")],
        [f"TrainConfig.seed={seed}", f"RolloutConfig.balance_task_types={balanced}"],
    )
    return SimpleNamespace(config=config, seeds=RunSeeds(seed), games=games)


def _task_type(game: str) -> str:
    return game_task_type(Path(game))


def _type_counts(draws: list[list[str]]) -> Counter[str]:
    return Counter(_task_type(game) for drawn in draws for game in drawn)


def test_every_task_type_gets_the_same_number_of_groups(games):
    run = _run(games, seed=2, balanced=True)
    draws = [iteration_games(run, i) for i in range(ITERATIONS)]
    types = {_task_type(g) for g in games}
    assert _type_counts(draws) == {t: 8 for t in types}
    for done in range(1, ITERATIONS + 1):
        counts = _type_counts(draws[:done])
        assert max(counts.values()) - min(counts[t] for t in types) <= 1, (done, counts)
    uniform = [iteration_games(_run(games, seed=2, balanced=False), i) for i in range(ITERATIONS)]
    assert _type_counts(uniform)["pick_heat_then_place_in_recep"] == 14
    assert _type_counts(uniform)["pick_cool_then_place_in_recep"] == 5


def test_each_group_plays_a_distinct_game_of_its_scheduled_type(games):
    types = sorted({_task_type(g) for g in games})
    for iteration in range(ITERATIONS):
        drawn = iteration_games(_run(games, seed=2, balanced=True), iteration)
        assert [_task_type(g) for g in drawn] == scheduled_task_types(types, 2, iteration, GROUPS)
        assert len(set(drawn)) == GROUPS and set(drawn) <= set(games)


def test_the_draws_depend_on_the_seed_and_iteration_only(games):
    again = [iteration_games(_run(games, seed=2, balanced=True), i) for i in (7, 3)]
    assert again == [iteration_games(_run(games, seed=2, balanced=True), i) for i in (7, 3)]
    types = sorted({_task_type(g) for g in games})
    orders = {seed: [scheduled_task_types(types, seed, i, GROUPS) for i in range(3)] for seed in (0, 1, 2)}
    assert orders[0] != orders[1] != orders[2] != orders[0]


def test_uniform_draws_stay_the_default(games):
    run = _run(games, seed=2, balanced=False)
    assert run.config.rollout.balance_task_types is False
    for iteration in (0, 5):
        assert iteration_games(run, iteration) == choose_games(games, GROUPS, RunSeeds(2).group_choice(iteration))
