"""The multi-turn rollout driver: G rollouts of each task group's game, all live environments batched
per turn through one policy call, until success or the turn limit.

Every turn keeps the exact prompt and response token ids, the sampler's log-probs, the reward, the
validity, the canonical state before and after (interned per group; the goal sentinel on a winning
turn) and the policy version. A group whose episodes could not be completed (a worker failure) is
re-run whole up to ``retries`` times, else dropped whole: never a partial group, never a duplicated row.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from env_bridge.actions import parse_response
from env_bridge.envs import StepResult
from env_bridge.prompts import PromptBuilder, task_of
from env_bridge.state_tracker import GOAL, AlfworldStateTracker, GroupStateInterner
from env_bridge.worker_pool import EnvPool, Failure, Op


@dataclasses.dataclass
class Turn:
    group: int
    traj: int
    turn: int
    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: np.ndarray
    env_reward: float
    valid: bool
    state: int
    next_state: int
    policy_version: int
    action: str
    response_text: str


@dataclasses.dataclass
class SlotView:
    """What a policy may look at for one live environment."""

    slot: int
    game: str
    observation: str
    admissible: list[str]
    turn: int
    traj: int = 0  # the global trajectory id: the same on any number of hosts


@dataclasses.dataclass
class Response:
    ids: list[int]
    logprobs: np.ndarray
    text: str


class Policy(Protocol):
    def act(self, prompts: list[list[int]], views: list[SlotView], turn: int) -> list[Response]: ...


class SamplerPolicy:
    """The model: batched sampling over every live environment's prompt."""

    def __init__(self, sampler: Any, params: Any, sampling: Any, key: Any):
        self.sampler, self.params, self.sampling, self.key = sampler, params, sampling, key

    def act(self, prompts: list[list[int]], views: list[SlotView], turn: int) -> list[Response]:
        import jax

        out = self.sampler.generate(
            self.params, prompts, self.sampling, jax.random.fold_in(self.key, turn), [v.traj for v in views]
        )
        return [Response(t, lp, text) for t, lp, text in zip(out.tokens, out.logprobs, out.texts, strict=True)]


class ScriptedPolicy:
    """A policy from a function of the view (walkthrough, random, ...), answering in the expected format."""

    def __init__(self, tokenizer: Any, choose: Callable[[SlotView], str], action_format: str = "tags"):
        self.tokenizer, self.choose, self.action_format = tokenizer, choose, action_format

    def act(self, prompts: list[list[int]], views: list[SlotView], turn: int) -> list[Response]:
        out = []
        for view in views:
            action = self.choose(view)
            if self.action_format == "choice":
                text = str(view.admissible.index(action) + 1) if action in view.admissible else action
            else:
                text = f"<think>scripted</think><action>{action}</action>"
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            out.append(Response(ids, np.zeros(len(ids), np.float32), text))
        return out


@dataclasses.dataclass
class RolloutResult:
    turns: list[Turn]
    episodes: list[dict[str, Any]]  # one per kept trajectory: group, traj, game, won, turns, invalid
    dropped_groups: list[dict[str, Any]]  # group, game, reason
    rerun_groups: int


@dataclasses.dataclass
class RolloutDriver:
    pool: EnvPool
    tokenizer: Any
    prompts: PromptBuilder = dataclasses.field(default_factory=PromptBuilder)
    max_turns: int = 50
    max_prompt_tokens: int = 2048
    strict_actions: bool = False
    retries: int = 1
    chat: bool = True
    action_format: str = "tags"  # tags | choice (env_bridge.actions)

    def encode_prompt(self, text: str) -> list[int]:
        if self.chat:
            rendered = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], add_generation_prompt=True
            )
            return list(self.tokenizer.encode(str(rendered), add_special_tokens=False))
        return list(self.tokenizer.encode(text))

    def fit_prompt(
        self, task: str, history: list[tuple[str, str]], observation: str, admissible: list[str], tracked: str
    ) -> list[int]:
        """The prompt's ids within ``max_prompt_tokens``: fewer history pairs first, then the middle of the
        text is cut out, keeping its start (the task) and its end (admissible actions and the format)."""
        for h in range(self.prompts.history_length, -1, -1):
            text = dataclasses.replace(self.prompts, history_length=h).text(
                task, history, observation, admissible, tracked
            )
            ids = self.encode_prompt(text)
            if len(ids) <= self.max_prompt_tokens:
                return ids
        while len(ids) > self.max_prompt_tokens:
            keep = int(len(text) * self.max_prompt_tokens / len(ids) * 0.9)
            text = text[: keep // 2] + " ... " + text[len(text) - keep // 2 :]
            ids = self.encode_prompt(text)
        return ids

    def run(
        self,
        games: list[str],
        group_size: int,
        policy: Policy,
        seed: int,
        policy_version: int = 0,
        group_ids: list[int] | None = None,
        on_turn: Callable[[int, int], object] | None = None,
    ) -> RolloutResult:
        """``games[g]`` is task group g's game; each group gets ``group_size`` rollouts. ``on_turn(turn,
        live environments)`` is called after every batched turn (progress display)."""
        group_ids = list(range(len(games))) if group_ids is None else group_ids
        pending = list(range(len(games)))
        kept_turns: list[Turn] = []
        episodes: list[dict[str, Any]] = []
        dropped: list[dict[str, Any]] = []
        reruns = 0
        for attempt in range(self.retries + 1):
            if not pending:
                break
            turns, eps, failed = self._run_groups(
                [games[g] for g in pending],
                [group_ids[g] for g in pending],
                group_size,
                policy,
                seed + 7919 * attempt,
                policy_version,
                on_turn,
            )
            kept_turns += turns
            episodes += eps
            next_pending = []
            for local, reason in failed.items():
                g = pending[local]
                if attempt < self.retries:
                    next_pending.append(g)
                    reruns += 1
                else:
                    dropped.append({"group": group_ids[g], "game": games[g], "reason": reason})
            pending = next_pending
        return RolloutResult(kept_turns, episodes, dropped, reruns)

    def _run_groups(
        self,
        games: list[str],
        group_ids: list[int],
        size: int,
        policy: Policy,
        seed: int,
        version: int,
        on_turn: Callable[[int, int], object] | None,
    ) -> tuple[list[Turn], list[dict[str, Any]], dict[int, str]]:
        slots = len(games) * size
        group_of = [s // size for s in range(slots)]
        failed: dict[int, str] = {}
        traj_of = [group_ids[group_of[s]] * size + s % size for s in range(slots)]
        results = self.pool.run([Op(s, "reset", games[group_of[s]], seed + traj_of[s]) for s in range(slots)])
        trackers = [AlfworldStateTracker() for _ in range(slots)]
        interner = GroupStateInterner()
        current: list[StepResult | None] = [None] * slots
        state = [0] * slots
        task = [""] * slots
        history: list[list[tuple[str, str]]] = [[] for _ in range(slots)]
        turns: list[list[Turn]] = [[] for _ in range(slots)]
        live = [True] * slots
        for s, r in enumerate(results):
            if isinstance(r, Failure):
                failed.setdefault(group_of[s], r.reason)
                live[s] = False
                continue
            current[s] = r
            task[s] = task_of(r.observation)
            state[s] = interner.intern(group_of[s], trackers[s].key(r.observation, r.admissible))
        for t in range(self.max_turns):
            active = [s for s in range(slots) if live[s] and group_of[s] not in failed]
            if not active:
                break
            views, prompts = [], []
            for s in active:
                now = current[s]
                assert now is not None
                prompts.append(
                    self.fit_prompt(
                        task[s], history[s], now.observation, now.admissible, trackers[s].key("", []).strip()
                    )
                )
                views.append(SlotView(s, games[group_of[s]], now.observation, now.admissible, t, traj_of[s]))
            responses = policy.act(prompts, views, t)
            parsed = [
                parse_response(
                    self.action_format,
                    resp.text,
                    current[s].admissible,  # type: ignore[union-attr]
                    self.strict_actions,
                )
                for s, resp in zip(active, responses, strict=True)
            ]
            stepped = self.pool.run([Op(s, "step", action=p.action) for s, p in zip(active, parsed, strict=True)])
            for s, prompt, resp, p, r in zip(active, prompts, responses, parsed, stepped, strict=True):
                if isinstance(r, Failure):
                    failed.setdefault(group_of[s], r.reason)
                    live[s] = False
                    continue
                trackers[s].update(p.action, r.observation)
                nxt = GOAL if r.won else interner.intern(group_of[s], trackers[s].key(r.observation, r.admissible))
                turns[s].append(
                    Turn(
                        group_ids[group_of[s]],
                        -1,
                        t,
                        prompt,
                        list(resp.ids),
                        np.asarray(resp.logprobs, np.float32),
                        float(r.reward),
                        p.valid,
                        state[s],
                        nxt,
                        version,
                        p.action,
                        resp.text,
                    )
                )
                history[s].append((current[s].observation, p.action))  # type: ignore[union-attr]
                current[s], state[s] = r, nxt
                if r.won or r.done:
                    live[s] = False
            if on_turn is not None:
                on_turn(t, len(active))
        out: list[Turn] = []
        episodes = []
        for s in range(slots):
            if group_of[s] in failed:
                continue
            traj = traj_of[s]
            for turn in turns[s]:
                turn.traj = traj
            out += turns[s]
            episodes.append(
                {
                    "group": group_ids[group_of[s]],
                    "traj": traj,
                    "game": games[group_of[s]],
                    "won": any(x.env_reward > 0 for x in turns[s]),
                    "turns": len(turns[s]),
                    "invalid": sum(not x.valid for x in turns[s]),
                }
            )
        return out, episodes, failed
