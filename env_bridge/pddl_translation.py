"""fast_downward's PDDL -> SAS translation, once per game and process instead of four times per reset.

TextWorld's PDDL env builds a ``PddlState`` in ``load`` and again in ``reset``, and TextWorld's batch env
loads the game file on every reset, even of the same game. Each ``PddlState`` translates the game twice:
plainly, for stepping, and optimized, only to feed ``replan`` (asked for by ``policy_commands`` or a
walkthrough the game file lacks; this bridge asks for neither: walkthroughs come from the game files).
The translation is deterministic, and ``PddlState`` only reads the task it returns, so:
- the plain translation is memoized per (domain, problem) in this process;
- the optimized one answers with the plain one (a valid SAS task of the same game, so ``replan`` would
  search the unpruned task, perhaps more slowly; no test here exercises ``replan``).
A reset of a new game then translates once instead of four times; a reset of a game this process has
seen (the rollouts of one group) translates nothing.
"""

from __future__ import annotations

import functools
from typing import Any

CACHED_GAMES = 32  # a worker's games in flight: one group's game per slot, with room to spare


def install() -> None:
    """Replaces ``fast_downward.pddl2sas`` in this process (idempotent); TextWorld looks it up per call."""
    import fast_downward

    if getattr(fast_downward.pddl2sas, "memoized_by_ggtrain", False):
        return
    original = fast_downward.pddl2sas

    @functools.lru_cache(maxsize=CACHED_GAMES)
    def plain(domain: str, problem: str, verbose: bool) -> Any:
        return original(domain, problem, verbose=verbose, optimize=False)

    def pddl2sas(domain: str, problem: str, verbose: bool = False, optimize: bool = False) -> Any:
        return plain(domain, problem, verbose)

    pddl2sas.memoized_by_ggtrain = True  # type: ignore[attr-defined]
    pddl2sas.original = original  # type: ignore[attr-defined]
    fast_downward.pddl2sas = pddl2sas
