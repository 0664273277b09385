"""Expert demonstrations: the stored walkthroughs of ALFWorld games replayed through the environment, every
turn rendered with the prompt builder and action format that RL uses, so a supervised warm start and RL
see the same prompts.

A demonstration is one JSON-able record: ``messages`` (the user turn as RL renders it), ``response`` (the
expert's answer in the action format) and the structured parts (``task``, ``history``, ``observation``,
``admissible``) so a trainer can re-fit the prompt to its token budget exactly as the rollout driver does.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable, Iterator
from typing import Any

from env_bridge.envs import AlfworldEnv
from env_bridge.games import Game, walkthrough
from env_bridge.prompts import PromptBuilder, task_of

MILESTONE_VERBS = frozenset({"take", "move", "put", "clean", "heat", "cool", "slice", "use"})


def expert_response(action: str, action_format: str, admissible: list[str], thought: str = "") -> str:
    """The answer RL's parser reads back as ``action``: ``<think>thought</think><action>…</action>`` or the
    action's 1-based number."""
    if action_format == "choice":
        return str(admissible.index(action) + 1)
    return f"<think>{thought}</think><action>{action}</action>"


def subgoal(action: str) -> str:
    """A milestone command as a thought: its numbers dropped, and for ``take`` the place it was found
    too (a policy cannot know it before it looks): ``take apple 1 from fridge 1`` -> ``take apple``,
    ``clean apple 1 with sinkbasin 1`` -> ``clean apple with sinkbasin``."""
    words = action.split()
    if words[:1] == ["take"]:
        words = words[:3]
    return " ".join(w for w in words if not w.isdecimal())


def subgoal_thoughts(actions: list[str]) -> list[str]:
    """For each turn of an expert episode, the next milestone (an action that changes an object: take,
    move, clean, heat, cool, slice, use) at or after it, as ``subgoal`` writes it. What the thought says
    follows from the task and the tracked state (what is held, its status, what was moved), so a policy
    that sees the tracked state can learn it; the action then copies its object from a few tokens back."""
    thoughts, upcoming = [], ""
    for action in reversed(actions):
        if action.split()[:1] and action.split()[0] in MILESTONE_VERBS:
            upcoming = subgoal(action)
        thoughts.append(upcoming)
    return thoughts[::-1]


def replay_game(game: Game, builder: PromptBuilder, action_format: str) -> list[dict[str, Any]]:
    """Every turn of ``game``'s walkthrough (all of it, also past an RL turn limit) as demonstrations;
    raises if the walkthrough does not win or names an action that is not admissible."""
    env = AlfworldEnv()
    try:
        r = env.reset(str(game.path), 0)
        task, history, records = task_of(r.observation), list[tuple[str, str]](), []
        steps = walkthrough(game)
        for turn, action in enumerate(steps):
            if action not in r.admissible:
                raise ValueError(f"{game.game_id}: walkthrough step {turn} {action!r} is not admissible")
            text = builder.text(task, history, r.observation, r.admissible)
            records.append(
                {
                    "messages": [{"role": "user", "content": text}],
                    "response": expert_response(action, action_format, r.admissible),
                    "action": action,
                    "game": game.game_id,
                    "task_type": game.task_type,
                    "turn": turn,
                    "task": task,
                    "history": [list(h) for h in history],
                    "observation": r.observation,
                    "admissible": r.admissible,
                }
            )
            history.append((r.observation, action))
            r = env.step(action)
        if not r.won:
            raise ValueError(f"{game.game_id}: the walkthrough of {len(steps)} steps does not win")
        return records
    finally:
        env.close()


def _replay(args: tuple[Game, PromptBuilder, str]) -> list[dict[str, Any]]:
    return replay_game(*args)


def walkthrough_demonstrations(
    games: list[Game],
    builder: PromptBuilder,
    action_format: str,
    workers: int = 2,
    on_game: Callable[[Game], object] | None = None,
) -> Iterator[list[dict[str, Any]]]:
    """Each game's demonstrations, in the order of ``games``, replayed on ``workers`` processes."""
    jobs = [(g, builder, action_format) for g in games]
    if workers <= 1:
        for job in jobs:
            yield _replay(job)
            if on_game:
                on_game(job[0])
        return
    with mp.get_context("spawn").Pool(workers) as pool:
        for job, records in zip(jobs, pool.imap(_replay, jobs), strict=True):
            yield records
            if on_game:
                on_game(job[0])
