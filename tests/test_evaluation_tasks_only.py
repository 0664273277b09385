"""``RolloutConfig.evaluation_tasks_only`` on the real ALFWorld games: the training games are exactly the
train-split trials of the evaluation games' tasks (task type, object, receptacle, scene), never an
evaluation game; a split that shares no task with the evaluation is refused by name."""

from __future__ import annotations

import pytest

from env_bridge.games import discover_games
from ggtrain.config import ConfigError, config_file, resolve_config
from ggtrain.run import evaluation_games, training_games


def _config(*sets: str):
    return resolve_config([config_file("quickstart")], ["RolloutConfig.evaluation_tasks_only=True", *sets])


def test_the_training_games_are_the_other_trials_of_the_evaluated_tasks():
    config = _config()
    evaluated = evaluation_games(config, "valid_seen", config.eval.games)
    tasks = {g.game_id.split("/")[0] for g in evaluated}
    expected = sorted(str(g.path) for g in discover_games("train") if g.task in tasks)
    kept = training_games(config)
    assert sorted(kept) == expected
    assert len({p.split("/")[-3] for p in kept}) > len(evaluated) // 2  # most evaluated tasks have a trial
    assert len(kept) < len(training_games(resolve_config([config_file("quickstart")], [])))


def test_the_evaluation_games_themselves_are_never_trained_on():
    # training and evaluation on one split, whose tasks have two or three trials each
    config = _config("RolloutConfig.split='valid_unseen'", "EvalConfig.split='valid_unseen'")
    evaluated = evaluation_games(config, "valid_unseen", config.eval.games)
    tasks = {g.game_id.split("/")[0] for g in evaluated}
    kept = training_games(config)
    assert kept and not {g.game for g in evaluated} & set(kept)
    others = [g for g in discover_games("valid_unseen") if g.task in tasks]
    assert sorted(kept) == sorted(str(g.path) for g in others if str(g.path) not in {e.game for e in evaluated})


def test_a_split_without_the_evaluated_tasks_is_refused_by_name():
    with pytest.raises(ConfigError, match=r"RolloutConfig\.evaluation_tasks_only = True: no valid_unseen game"):
        training_games(_config("RolloutConfig.split='valid_unseen'"))
