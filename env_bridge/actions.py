"""Parsing the model's response into an environment action (the reference recipe's rules).

Two formats. ``tags`` (the reference): lower-cased; the first ``<action>…</action>`` is the action. Invalid
(``valid = False``) when the tag pair is missing (then the response's last 30 characters are sent to the game,
as the reference does), when ``<think>…</think>`` is missing, when the text contains CJK characters, when the
action is empty or contains a nested tag, and in strict mode when the action is not admissible. ``choice``
(for small models on the built-in world): the response's first word is the number of an admissible action as
listed in the prompt (1-based); anything else is invalid and is sent to the game as written.
"""

from __future__ import annotations

import dataclasses
import re

CJK = re.compile(r"[\u4e00-\u9fff]")
TAIL_CHARS = 30


@dataclasses.dataclass(frozen=True)
class ParsedAction:
    action: str  # what is sent to the environment
    valid: bool
    reason: str  # "" when valid


def parse_action(text: str, admissible: list[str] | None = None, strict: bool = False) -> ParsedAction:
    lowered = text.lower()
    start, end = lowered.find("<action>"), lowered.find("</action>")
    if start == -1 or end == -1 or end < start:
        return ParsedAction(lowered[-TAIL_CHARS:], False, "missing <action></action>")
    action = lowered[start + len("<action>") : end].strip()
    reason = ""
    if lowered.find("<think>") == -1 or lowered.find("</think>") == -1:
        reason = "missing <think></think>"
    elif CJK.search(text):
        reason = "CJK characters"
    elif not action:
        reason = "empty action"
    elif "<" in action and ">" in action:
        reason = "nested tag in action"
    elif strict and admissible is not None and action not in admissible:
        reason = "not admissible"
    return ParsedAction(action, reason == "", reason)


ACTION_FORMATS = ("tags", "choice")


def parse_choice(text: str, admissible: list[str]) -> ParsedAction:
    words = text.strip().lower().split()
    if not words:
        return ParsedAction("", False, "empty response")
    if not (words[0].isascii() and words[0].isdecimal()):
        return ParsedAction(text.strip().lower(), False, "not a number")
    index = int(words[0])
    if not 1 <= index <= len(admissible):
        return ParsedAction(text.strip().lower(), False, "number out of range")
    return ParsedAction(admissible[index - 1], True, "")


def parse_response(action_format: str, text: str, admissible: list[str], strict: bool = False) -> ParsedAction:
    if action_format == "tags":
        return parse_action(text, admissible, strict)
    if action_format == "choice":
        return parse_choice(text, admissible)
    raise ValueError(f"action format {action_format!r}: expected one of {ACTION_FORMATS}")
