"""TextWorld's text generation with memoized parses and shallow context copies plays real ALFWorld games
exactly as TextWorld as shipped, and the shallow copies are safe for every shipped game's grammar."""

from __future__ import annotations

import ast
import json
import random
import re
from typing import Any

import pytest

from env_bridge.envs import AlfworldEnv
from env_bridge.games import SPLITS, discover_games, walkthrough

EXPRESSION = re.compile(r"\{([^{}\"\n]*)\}")  # the grammar's {expression} and {expression | condition}
READ_ONLY = (ast.Expression, ast.Name, ast.Attribute, ast.Load, ast.BinOp, ast.Add, ast.BoolOp, ast.Or, ast.Constant)


def _play(paths: list[tuple[str, list[str]]], seed: int) -> list[tuple[Any, ...]]:
    """Each game's walkthrough with an invalid command inserted, then 12 random admissible commands."""
    seen: list[tuple[Any, ...]] = []
    rng = random.Random(seed)
    for path, actions in paths:
        env = AlfworldEnv()
        result = env.reset(path, seed)
        seen.append((result.observation, result.admissible))
        for action in [*actions[:3], "take the moon from the sky", *actions[3:]]:
            result = env.step(action)
            seen.append((result.observation, result.admissible, result.won, result.done))
        result = env.reset(path, seed + 1)
        for _ in range(12):
            result = env.step(rng.choice(result.admissible))
            seen.append((result.observation, result.admissible, result.won, result.done))
        env.close()
    return seen


def test_games_play_as_textworld_as_shipped_with_parses_memoized_and_contexts_copied_shallowly(monkeypatch):
    from textworld.envs.pddl import textgen

    from env_bridge import textworld_textgen

    shipped = textworld_textgen.shipped_functions()
    faster = {key: getattr(*key) for key in shipped}
    games = discover_games("valid_seen")
    by_type = {g.task_type: g for g in reversed(games)}  # one game of each of the six task types
    paths = [(str(g.path), walkthrough(g)) for g in by_type.values()]

    monkeypatch.setattr(textworld_textgen, "install", lambda: None)  # AlfworldEnv.reset: keep what is set
    for (module, name), function in shipped.items():
        monkeypatch.setattr(module, name, function)
    as_shipped = _play(paths, seed=3)
    for (module, name), function in faster.items():
        monkeypatch.setattr(module, name, function)
    memoized = _play(paths, seed=3)

    assert memoized == as_shipped
    wins = [step[2] for step in as_shipped if len(step) == 4 and step[2]]
    assert len(wins) == len(paths)  # every walkthrough still wins, past the invalid command
    assert textgen._parse_and_convert.original is shipped[(textgen, "_parse_and_convert")]


@pytest.mark.parametrize("split", SPLITS)
def test_every_shipped_grammar_expression_only_reads_so_contexts_can_be_copied_shallowly(split):
    expressions = set()
    for game in discover_games(split, include_unsolvable=True):
        data = json.loads(game.path.read_text())
        expressions |= set(EXPRESSION.findall(data["grammar"] + data["pddl_domain"]))
    evaluated = {e.split("|")[0].strip() for e in expressions if not e.lstrip().startswith("#")}
    assert "o.name" in evaluated
    for expression in evaluated:
        nodes = ast.walk(ast.parse(expression, mode="eval"))
        assert all(isinstance(n, READ_ONLY) for n in nodes), expression
