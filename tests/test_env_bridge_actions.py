"""Action parsing: the reference recipe's rules as a table."""

from __future__ import annotations

import pytest

from env_bridge.actions import parse_action, parse_choice, parse_response

ADMISSIBLE = ["go to fridge 1", "open fridge 1", "look"]


@pytest.mark.parametrize(
    ("text", "action", "valid", "reason"),
    [
        ("<think>cold stuff</think><action>go to fridge 1</action>", "go to fridge 1", True, ""),
        ("<think>x</think> <action>  Go To Fridge 1 </action> trailing", "go to fridge 1", True, ""),
        ("<think>x</think><action>open fridge 1</action><action>look</action>", "open fridge 1", True, ""),
        ("<action>go to fridge 1</action>", "go to fridge 1", False, "missing <think></think>"),
        ("<think>x</think>go to fridge 1", "<think>x</think>go to fridge 1"[-30:], False, "missing <action></action>"),
        (
            "<think>x</think><action>go to fridge 1",
            "<think>x</think><action>go to fridge 1"[-30:],
            False,
            "missing <action></action>",
        ),
        (
            "<think>x</think></action>look<action>",
            "<think>x</think></action>look<action>"[-30:],
            False,
            "missing <action></action>",
        ),
        ("<think>x</think><action></action>", "", False, "empty action"),
        ("<think>x</think><action>   </action>", "", False, "empty action"),
        ("<think>x</think><action><action>look</action></action>", "<action>look", False, "nested tag in action"),
        ("<think>冰箱</think><action>look</action>", "look", False, "CJK characters"),
        ("<think>x</think><action>look 你好</action>", "look 你好", False, "CJK characters"),
        ("<THINK>x</THINK><ACTION>LOOK</ACTION>", "look", True, ""),
    ],
)
def test_parsing_table(text, action, valid, reason):
    parsed = parse_action(text, ADMISSIBLE)
    assert (parsed.action, parsed.valid, parsed.reason) == (action, valid, reason)


def test_strict_mode_marks_non_admissible_invalid():
    text = "<think>x</think><action>fly to the moon</action>"
    assert parse_action(text, ADMISSIBLE).valid
    strict = parse_action(text, ADMISSIBLE, strict=True)
    assert (strict.valid, strict.reason, strict.action) == (False, "not admissible", "fly to the moon")
    assert parse_action("<think>x</think><action>look</action>", ADMISSIBLE, strict=True).valid


RING_ACTIONS = ["go to room 1", "go to room 3", "look", "take key"]


@pytest.mark.parametrize(
    ("text", "action", "valid", "reason"),
    [
        ("2", "go to room 3", True, ""),
        (" 4 ", "take key", True, ""),
        ("1 look", "go to room 1", True, ""),  # the first word counts
        ("5", "5", False, "number out of range"),
        ("0", "0", False, "number out of range"),
        ("look", "look", False, "not a number"),  # the action's text is not its number
        ("²", "²", False, "not a number"),  # a digit to str.isdigit, not a number to int()
        ("", "", False, "empty response"),
    ],
)
def test_choice_format_table(text, action, valid, reason):
    got = parse_choice(text, RING_ACTIONS)
    assert (got.action, got.valid, got.reason) == (action, valid, reason)


def test_unknown_format_is_named():
    assert parse_response("tags", "<think>x</think><action>look</action>", RING_ACTIONS).action == "look"
    with pytest.raises(ValueError, match="'json'"):
        parse_response("json", "1", RING_ACTIONS)
