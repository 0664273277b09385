"""The memoized PDDL translation plays real ALFWorld games exactly as TextWorld's own, translating less."""

from __future__ import annotations

from typing import Any

from env_bridge.envs import AlfworldEnv
from env_bridge.games import discover_games, walkthrough


def _play(path: str, actions: list[str], seeds: tuple[int, ...]) -> list[tuple[Any, ...]]:
    env, seen = AlfworldEnv(), []
    for seed in seeds:
        result = env.reset(path, seed)
        seen.append((result.observation, result.admissible))
        for action in [*actions, "go to the moon"]:
            result = env.step(action)
            seen.append((result.observation, result.admissible, result.won, result.done))
    env.close()
    return seen


def test_a_game_is_translated_once_per_process_and_plays_as_textworld_translating_four_times(monkeypatch):
    import fast_downward

    from env_bridge import pddl_translation

    pddl_translation.install()
    original = fast_downward.pddl2sas.original
    calls: list[bool] = []

    def counted(domain: str, problem: str, verbose: bool = False, optimize: bool = False) -> Any:
        calls.append(optimize)
        return original(domain, problem, verbose=verbose, optimize=optimize)

    counted.memoized_by_ggtrain = True  # type: ignore[attr-defined]  # TextWorld as shipped: no memo
    monkeypatch.setattr(fast_downward, "pddl2sas", counted)
    game = min(discover_games("valid_seen"), key=lambda g: len(walkthrough(g)))
    actions = walkthrough(game)
    as_shipped = _play(str(game.path), actions, seeds=(0, 1))
    assert calls == [False, True] * 4  # load and reset each build a PddlState; each translates twice
    assert as_shipped[-2][2] is True  # the walkthrough's last step wins

    calls.clear()
    counted.memoized_by_ggtrain = False  # type: ignore[attr-defined]
    memoized = _play(str(game.path), actions, seeds=(0, 1))  # AlfworldEnv.reset installs the memo
    assert fast_downward.pddl2sas.original is counted
    assert calls == [False]  # one plain translation for both resets
    assert memoized == as_shipped
