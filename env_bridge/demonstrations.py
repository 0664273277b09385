"""Expert demonstrations: the stored walkthroughs of ALFWorld games replayed through the environment, every
turn rendered with the prompt builder and action format that RL uses, so a supervised warm start and RL
see the same prompts.

A demonstration is one JSON-able record: ``messages`` (the user turn as RL renders it), ``response`` (the
expert's answer in the action format) and the structured parts (``task``, ``history``, ``observation``,
``admissible``) so a trainer can re-fit the prompt to its token budget exactly as the rollout driver does.
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import random
from collections.abc import Callable, Iterator
from typing import Any

from env_bridge.envs import AlfworldEnv, StepResult
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


def next_milestone(actions: list[str]) -> str:
    """The first milestone command of ``actions`` as ``subgoal`` writes it ("" when none is left)."""
    return next((subgoal(a) for a in actions if a.split()[:1] and a.split()[0] in MILESTONE_VERBS), "")


@dataclasses.dataclass
class _Episode:
    """A walkthrough being replayed: the environment, the task, the history so far and the last result."""

    env: AlfworldEnv
    task: str
    result: StepResult
    history: list[tuple[str, str]] = dataclasses.field(default_factory=list)

    def step(self, action: str) -> None:
        self.history.append((self.result.observation, action))
        self.result = self.env.step(action)

    def record(self, game: Game, builder: PromptBuilder, action_format: str, turn: int, action: str) -> dict:
        r = self.result
        text = builder.text(self.task, self.history, r.observation, r.admissible)
        return {
            "messages": [{"role": "user", "content": text}],
            "response": expert_response(action, action_format, r.admissible),
            "action": action,
            "game": game.game_id,
            "task_type": game.task_type,
            "turn": turn,
            "task": self.task,
            "history": [list(h) for h in self.history],
            "observation": r.observation,
            "admissible": r.admissible,
        }


def _detour(episode: _Episode, target: str, milestone: str, rng: random.Random) -> tuple[bool, str]:
    """Walks to a random other place (and opens it when it opens), as a searching agent would. Returns
    whether the expert's ``go to target`` is the right answer there (the place offers no command with the
    pending milestone's subgoal: no apple to take, no second table to move it to) and the place opened
    ("" if none), which the caller closes again so the rest of the walkthrough stays admissible."""
    places = [a for a in episode.result.admissible if a.startswith("go to ") and a != target]
    if not places:
        return False, ""
    place = rng.choice(places)[len("go to ") :]
    episode.step(f"go to {place}")
    opened = place if f"open {place}" in episode.result.admissible else ""
    if opened:
        episode.step(f"open {place}")
    return not any(subgoal(a) == milestone for a in episode.result.admissible), opened


def replay_game(
    game: Game, builder: PromptBuilder, action_format: str, detour_fraction: float = 0.0, seed: int = 0
) -> list[dict[str, Any]]:
    """Every turn of ``game``'s walkthrough (all of it, also past an RL turn limit) as demonstrations;
    raises if the walkthrough does not win or names an action that is not admissible.

    With ``detour_fraction``, that share of the walkthrough's ``go to`` steps first visits a random other
    place (``_detour``) and adds the turn found there, answered with the expert's ``go to``: without them
    every arrival in the walkthroughs is at the right place, and a policy learns to take an object wherever
    it arrives. Detour turns carry ``detour: True``; the detour's own steps are not demonstrations."""
    env, rng = AlfworldEnv(), random.Random(f"{seed}:{game.game_id}")
    try:
        result = env.reset(str(game.path), 0)
        episode = _Episode(env, task_of(result.observation), result)
        steps, records = walkthrough(game), list[dict[str, Any]]()
        for i, action in enumerate(steps):
            if action not in episode.result.admissible:
                raise ValueError(f"{game.game_id}: walkthrough step {i} {action!r} is not admissible")
            records.append(episode.record(game, builder, action_format, len(records), action))
            if action.startswith("go to ") and rng.random() < detour_fraction:
                answered, opened = _detour(episode, action, next_milestone(steps[i:]), rng)
                if answered and action in episode.result.admissible:
                    records.append(
                        episode.record(game, builder, action_format, len(records), action) | {"detour": True}
                    )
                if opened:
                    episode.step(f"close {opened}")
            episode.step(action)
        if not episode.result.won:
            raise ValueError(f"{game.game_id}: the walkthrough of {len(steps)} steps does not win")
        return records
    finally:
        env.close()


def _replay(args: tuple[Game, PromptBuilder, str, float, int]) -> list[dict[str, Any]]:
    return replay_game(*args)


def walkthrough_demonstrations(
    games: list[Game],
    builder: PromptBuilder,
    action_format: str,
    workers: int = 2,
    on_game: Callable[[Game], object] | None = None,
    detour_fraction: float = 0.0,
    seed: int = 0,
) -> Iterator[list[dict[str, Any]]]:
    """Each game's demonstrations, in the order of ``games``, replayed on ``workers`` processes
    (``replay_game``'s detours seeded per game, so the worker count does not change them)."""
    jobs = [(g, builder, action_format, detour_fraction, seed) for g in games]
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
