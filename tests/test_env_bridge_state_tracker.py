"""The ALFWorld state tracker (ALGORITHMS.md §7) and per-group interning."""

from __future__ import annotations

import pytest

from env_bridge.games import discover_games, walkthrough
from env_bridge.state_tracker import AlfworldStateTracker, GroupStateInterner


def test_rules():
    t = AlfworldStateTracker()
    assert not t.update("go to fridge 1", "Nothing happens.")
    assert t.location == "middle of room"
    assert t.update("go to countertop 1", "You arrive at countertop 1. On the countertop 1, you see a apple 1.")
    assert t.update("take apple 1 from countertop 1", "You pick up the apple 1 from the countertop 1.")
    assert t.holding == "apple 1"
    assert t.update("go to microwave 1", "You arrive at microwave 1.")
    assert t.update("heat apple 1 with microwave 1", "You heat the apple 1 using the microwave 1.")
    assert "apple 1(heated)" in t.key("obs", [])
    assert not t.update("look", "You are facing the microwave 1.")
    assert t.update("move apple 1 to fridge 1", "You move the apple 1 to the fridge 1.")
    assert t.holding is None
    assert t.moved == ["apple 1(heated) from countertop 1 move to fridge 1;"]
    assert not t.update("clean apple 1 with sinkbasin 1", "You clean the apple 1 using the sinkbasin 1.")


def test_key_contains_every_part_and_sorts_admissible():
    t = AlfworldStateTracker(location="desk 1", holding="pen 1")
    key = t.key("You see a pen.", ["look", "go to bed 1", "examine desk 1"])
    assert key.startswith("You see a pen.\nLocation: desk 1. Items in hand (status): pen 1(unprocessed)")
    assert key.endswith("Admissible: examine desk 1, go to bed 1, look")


def test_interning_is_per_group():
    interner = GroupStateInterner()
    assert interner.intern(0, "a") == 0 and interner.intern(0, "b") == 1 and interner.intern(0, "a") == 0
    assert interner.intern(1, "b") == 0  # same text, other group: its own id space


@pytest.mark.slow
@pytest.mark.parametrize("task", ["pick_heat_then_place_in_recep", "pick_two_obj_and_place"])
def test_tracked_part_changes_exactly_when_update_says_so_on_real_games(task):
    from env_bridge.envs import AlfworldEnv

    game = next(g for g in discover_games("valid_seen") if g.task_type == task)
    env = AlfworldEnv()
    env.reset(str(game.path), 0)
    tracker = AlfworldStateTracker()
    changes = 0
    for action in walkthrough(game):
        before = tracker.key("", [])
        result = env.step(action)
        changed = tracker.update(action, result.observation)
        assert (tracker.key("", []) != before) == changed, action
        changes += changed
    env.close()
    assert result.won and changes >= 3
