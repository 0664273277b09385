"""TextWorld's text generation without its repeated work: parses memoized, contexts copied shallowly.

After each step TextWorld's PDDL env names every admissible command (``PddlEnv._gather_infos``): the
grammar's ``derive`` parses the command's template with tatsu, every condition and query on the way is
parsed again by ``Rule.parse_conjunctive_query``, and every symbol derived gets a deep copy of its
context. In a profile of random ALFWorld steps, parsing was two thirds of a step and the deep copies of
the contexts most of the rest. Two replacements, installed per process:
- ``_parse_and_convert`` of the grammar and the logic modules is memoized on its arguments (the text and
  the grammar rule): parsing is a pure function of them. Callers change what they get (the grammar sets
  each symbol's context), so every call gets a deep copy of the memoized result.
- ``copy_context`` copies the ``variables`` and ``mapping`` dicts instead of deep-copying them. A derived
  symbol only adds to its own dicts; the objects in them (entity infos, logic variables) are only read,
  by the grammar's ``{expression}`` symbols, which in every shipped game are names, attributes, ``+`` and
  ``or`` (``tests/test_env_bridge_textworld_textgen.py`` checks all 2,044 games).
"""

from __future__ import annotations

import copy
import functools
from types import ModuleType
from typing import Any

CACHED_PARSES = 4096  # per parser; one game's templates, conditions and queries are a few hundred


def install() -> None:
    """Replaces the three functions in this process (idempotent); TextWorld looks each up per call."""
    from textworld import logic
    from textworld.envs.pddl import textgen

    for module in (textgen, logic):
        _memoize_parses(module)
    if not getattr(textgen.copy_context, "shallow_by_ggtrain", False):
        shallow_copy_context.original = textgen.copy_context  # type: ignore[attr-defined]
        textgen.copy_context = shallow_copy_context


def shipped_functions() -> dict[tuple[ModuleType, str], Any]:
    """TextWorld as shipped: each (module, attribute) that ``install`` replaces, with the function it
    replaced (installs first), for comparing the two."""
    from textworld import logic
    from textworld.envs.pddl import textgen

    install()
    names = [(textgen, "_parse_and_convert"), (logic, "_parse_and_convert"), (textgen, "copy_context")]
    return {(module, name): getattr(module, name).original for module, name in names}


def shallow_copy_context(context: dict[str, Any]) -> dict[str, Any]:
    return {
        "state": context["state"],
        "facts": context["facts"],
        "variables": dict(context["variables"]),
        "mapping": dict(context["mapping"]),
        "entity_infos": context["entity_infos"],
    }


shallow_copy_context.shallow_by_ggtrain = True  # type: ignore[attr-defined]


def _memoize_parses(module: ModuleType) -> None:
    original = module._parse_and_convert
    if getattr(original, "memoized_by_ggtrain", False):
        return

    @functools.lru_cache(maxsize=CACHED_PARSES)
    def parsed(args: tuple[Any, ...], options: tuple[tuple[str, Any], ...]) -> Any:
        return original(*args, **dict(options))

    def parse_and_convert(*args: Any, **kwargs: Any) -> Any:
        return copy.deepcopy(parsed(args, tuple(sorted(kwargs.items()))))

    parse_and_convert.memoized_by_ggtrain = True  # type: ignore[attr-defined]
    parse_and_convert.original = original  # type: ignore[attr-defined]
    module._parse_and_convert = parse_and_convert  # type: ignore[attr-defined]
