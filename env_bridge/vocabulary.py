"""Every word an ALFWorld prompt can contain, read from the game files themselves (no game is played):
the grammar's feedback texts, the object and receptacle names of every PDDL problem, the walkthrough
commands, the instance numbers and the prompt templates. A word-level model built on it can read every
prompt of the shipped games; anything else is its unknown token.

Words are what ``split_words`` makes of a text: runs of letters and digits, and each punctuation
character alone (so no unseen combination of quotes, commas and brackets can be out of vocabulary).
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Iterable
from pathlib import Path

from env_bridge import prompts, state_tracker

WORD = re.compile(r"\w+|[^\w\s]")
RHS = re.compile(r'"rhs"\s*:\s*"((?:[^"\\]|\\.)*)"')
PLACEHOLDER = re.compile(r"\{[^}]*\}|#[^#\s]*#")
OBJECTS = re.compile(r"\(:objects(.*?)\)", re.S)
MAX_INSTANCE_NUMBER = 100  # "cabinet 27": instance numbers; the largest in the shipped games is below this


def split_words(text: str) -> list[str]:
    return WORD.findall(text.lower())


def _grammar_texts(grammar: str) -> Iterable[str]:
    for rhs in RHS.findall(grammar):
        yield PLACEHOLDER.sub(" ", rhs.encode().decode("unicode_escape"))


def _object_names(problem: str) -> Iterable[str]:
    """``Apple - object`` / ``SinkBasin - receptacle``: the type names, which the demangled game shows
    lowercased (``sinkbasin 1``)."""
    match = OBJECTS.search(problem)
    for line in (match.group(1) if match else "").splitlines():
        name, _, kind = line.strip().partition(" - ")
        if name and not kind.endswith("type"):  # AppleType - otype: PDDL constants, never shown
            yield name.split("_bar_")[0].lower()  # apple_bar__plus_01_dot_2... is an instance of apple


def game_file_words(game_file: Path) -> set[str]:
    data = json.loads(game_file.read_text())
    words: set[str] = set()
    for text in _grammar_texts(data.get("grammar", "")):
        words.update(split_words(text))
    for name in _object_names(data.get("pddl_problem", "")):
        words.update(split_words(name))
    for command in data.get("walkthrough") or []:
        words.update(split_words(command))
    return words


def template_words() -> set[str]:
    texts = [
        prompts.DEFAULT_TEMPLATE,
        prompts.FIRST_TURN_TEMPLATE,
        prompts.CHOICE_TEMPLATE,
        prompts.CHOICE_FIRST_TURN_TEMPLATE,
        "Nothing happens. You won! help look inventory examine use take move open close heat cool clean go to",
        state_tracker.AlfworldStateTracker().key("", []),  # the state line of RolloutConfig.show_tracked_state
        " ".join(["unprocessed", *state_tracker.STATUS.values()]),
    ]
    return {w for t in texts for w in split_words(PLACEHOLDER.sub(" ", t))}


def alfworld_words(game_files: Iterable[Path]) -> list[str]:
    """The sorted vocabulary of the given games plus templates, numbers and every punctuation character."""
    words = template_words() | set(string.punctuation) | {str(i) for i in range(MAX_INSTANCE_NUMBER)}
    for path in game_files:
        words |= game_file_words(path)
    return sorted(words)
