"""gin is resolved once into frozen dataclasses; bad bindings are errors that name them."""

from __future__ import annotations

import dataclasses
import json

import pytest

from ggtrain.config import ConfigError, TrainConfig, config_file, resolve_config, write_resolved_config

METHODS = {
    "grpo": ("grpo", "ppo_clip"),
    "gigpo": ("gigpo", "ppo_clip"),
    "graphgpo": ("graphgpo", "ppo_clip"),
    "graph_only": ("graph_only", "ppo_clip"),
    "ggpo": ("grpo", "ggpo"),
}


@pytest.mark.parametrize("method", sorted(METHODS))
def test_method_files_resolve_with_alfworld_defaults(method):
    config = resolve_config([config_file(method)])
    assert (config.estimator, config.loss.name) == METHODS[method]
    assert config.advantage.omega == 0.1 and config.advantage.gamma == 0.95
    assert config.loss.kl_coef == 0.01 and config.optimizer.learning_rate == 1e-6
    # GGPO batches task groups whole: a mini-batch holds a group's 8 x 50 possible turns
    assert config.batch.mini_batch_rows == (512 if method == "ggpo" else 256)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.seed = 3  # type: ignore[misc]


def test_ggpo_refreshes_the_reference():
    assert resolve_config([config_file("ggpo")]).policies.reference_refresh_every == 10


def test_bindings_override_files():
    config = resolve_config([config_file("graphgpo")], ["AdvantageConfig.omega = 0.2", "TrainConfig.seed = 7"])
    assert config.advantage.omega == 0.2 and config.seed == 7


@pytest.mark.parametrize(
    ("binding", "message"),
    [
        ("OptimizerConfig.learnin_rate = 1.0", "learnin_rate"),
        ("OptimiserConfig.learning_rate = 1.0", "OptimiserConfig"),
        ("BatchConfig.epochs = 'two'", "BatchConfig.epochs = 'two'"),
        ("AdvantageConfig.mode = 'median'", "mode='median'"),
        ("RolloutConfig.action_format = 'words'", "RolloutConfig.action_format = 'words': expected one of"),
        ("RolloutConfig.env = 'minecraft'", "RolloutConfig.env = 'minecraft'"),
    ],
)
def test_bad_bindings_name_the_problem(binding, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        resolve_config([config_file("graphgpo")], [binding])


def test_files_outside_configs_include_the_method_files_and_later_files_win(tmp_path):
    own = tmp_path / "mine.gin"
    own.write_text("include 'graphgpo.gin'\nRolloutConfig.max_turns = 7\n")
    config = resolve_config([own, config_file("builtin_ring")])
    assert config.estimator == "graphgpo" and config.rollout.max_turns == 12  # builtin_ring.gin came last
    assert config.rollout.action_format == "choice"
    with pytest.raises(ConfigError, match=r"nothere\.gin"):
        bad = tmp_path / "bad.gin"
        bad.write_text("include 'nothere.gin'\n")
        resolve_config([bad])


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"nope\.gin"):
        config_file(tmp_path / "nope.gin")


def test_gin_does_not_leak_after_resolving():
    resolve_config([config_file("graphgpo")], ["TrainConfig.seed = 11"])
    assert TrainConfig().seed == 0


def test_resolved_config_is_written(tmp_path):
    config = resolve_config([config_file("gigpo")])
    path = write_resolved_config(config, tmp_path)
    assert json.loads(path.read_text())["estimator"] == "gigpo"
