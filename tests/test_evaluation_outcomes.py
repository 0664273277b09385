"""Evaluation outcomes: a game whose group was dropped counts as lost and is counted as dropped; an
evaluation in which no episode completed is an error, not a success rate of 0."""

from __future__ import annotations

import pytest

from ggtrain.evaluate import EvalGame, outcome_record, require_completed, summarize_outcomes


def _games(n: int) -> list[EvalGame]:
    return [EvalGame(f"game{i}", f"g{i}", "pick_and_place_simple") for i in range(n)]


def test_dropped_games_count_as_lost_and_are_reported():
    records = [outcome_record(g, 0, None) for g in _games(3)]
    records[0] = records[0] | {"won": True, "turns": 4, "completed": True}
    summary = summarize_outcomes(require_completed(records))
    assert (summary["episodes"], summary["dropped"], summary["success_rate"]) == (3, 2, 1 / 3)


def test_an_evaluation_where_nothing_completed_is_an_error():
    records = [outcome_record(g, 0, None) for g in _games(4)]
    with pytest.raises(RuntimeError, match="none of the 4 episodes completed"):
        require_completed(records)
