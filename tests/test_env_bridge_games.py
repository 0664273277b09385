"""Game discovery and the walkthrough policy on real ALFWorld games of every task type."""

from __future__ import annotations

import pytest

from env_bridge.check import play_games
from env_bridge.games import TASK_TYPES, discover_games, walkthrough


def test_discovery_splits_sorted_and_filtered():
    games = discover_games("valid_seen")
    assert len(games) == 140
    assert [g.path for g in games] == sorted(g.path for g in games)
    only = discover_games("valid_unseen", task_types=("pick_two_obj_and_place",))
    assert only and all(g.task_type == "pick_two_obj_and_place" for g in only)
    assert {g.task_type for g in discover_games("valid_seen")} == set(TASK_TYPES)


def test_missing_data_dir_says_where_it_looked_and_how_to_get_games(tmp_path, monkeypatch):
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path / "nothing"))
    with pytest.raises(FileNotFoundError, match=r"looked in .*nothing.*alfworld-download"):
        discover_games("train")
    with pytest.raises(FileNotFoundError, match=r"looked in .*empty.*alfworld-download"):
        discover_games("train", data_dir=tmp_path / "empty")


def test_alfworld_download_layout_is_accepted(tmp_path):
    games = discover_games("valid_seen")
    root = tmp_path / "json_2.1.1" / "valid_seen"
    target = root / games[0].path.parent.parent.name / games[0].path.parent.name
    target.mkdir(parents=True)
    (target / "game.tw-pddl").write_text(games[0].path.read_text())
    found = discover_games("valid_seen", data_dir=tmp_path)
    assert [g.game_id for g in found] == [games[0].game_id]


def test_unsolvable_games_are_excluded(tmp_path):
    import json

    games = discover_games("valid_seen")
    for i, game in enumerate(games[:2]):
        target = tmp_path / "valid_seen" / game.path.parent.parent.name / game.path.parent.name
        target.mkdir(parents=True)
        data = json.loads(game.path.read_text())
        data["solvable"] = i == 0
        (target / "game.tw-pddl").write_text(json.dumps(data))
    assert len(discover_games("valid_seen", data_dir=tmp_path)) == 1
    assert len(discover_games("valid_seen", data_dir=tmp_path, include_unsolvable=True)) == 2


@pytest.mark.slow
def test_walkthrough_wins_games_of_every_task_type():
    every = discover_games("valid_seen")
    games = [g for task in TASK_TYPES for g in [x for x in every if x.task_type == task][:2]]
    summary, failures = play_games(games, "walkthrough", workers=2, progress=False)
    assert failures == []
    assert summary["games_won"] == len(games) == 2 * len(TASK_TYPES)
    assert summary["steps"] == sum(len(walkthrough(g)) for g in games)
    assert summary["worker_restarts"] == 0
