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

RERUN_SEED_STRIDE = 7919  # a re-run group's environments reset with seed + stride * attempt: new games


@dataclasses.dataclass(kw_only=True)
class Turn:
    """One training row: the exact tokens the policy saw and produced, and where it moved in the state graph."""

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


@dataclasses.dataclass(frozen=True)
class Episode:
    """One kept trajectory's outcome, for success rates and evaluation records."""

    group: int  # the global task-group id
    traj: int  # the global trajectory id
    game: str
    won: bool
    turns: int
    invalid: int  # turns whose action was not admissible


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
class Slot:
    """One live environment of a task group: its trajectory's ids, what it has seen and the turns so far."""

    index: int  # the pool slot, also the policy's ``SlotView.slot``
    group: int  # the group's position in this run's game list (failures are keyed by it)
    group_id: int  # the global task-group id
    traj: int  # the global trajectory id: the same on any number of hosts
    game: str
    tracker: AlfworldStateTracker = dataclasses.field(default_factory=AlfworldStateTracker)
    current: StepResult | None = None  # the last observation; None until reset
    state: int = 0  # the interned canonical state of ``current``
    task: str = ""
    history: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (observation, action) pairs
    turns: list[Turn] = dataclasses.field(default_factory=list)
    live: bool = True

    def now(self) -> StepResult:
        assert self.current is not None, "a live slot has been reset"
        return self.current

    def view(self, turn: int) -> SlotView:
        now = self.now()
        return SlotView(self.index, self.game, now.observation, now.admissible, turn, self.traj)

    def episode(self) -> Episode:
        return Episode(
            group=self.group_id,
            traj=self.traj,
            game=self.game,
            won=any(x.env_reward > 0 for x in self.turns),
            turns=len(self.turns),
            invalid=sum(not x.valid for x in self.turns),
        )


def open_slots(games: list[str], group_ids: list[int], size: int) -> list[Slot]:
    """``size`` slots per game, group-major; trajectory ids follow the global group id."""
    return [
        Slot(index=g * size + k, group=g, group_id=group_ids[g], traj=group_ids[g] * size + k, game=game)
        for g, game in enumerate(games)
        for k in range(size)
    ]


@dataclasses.dataclass
class RolloutResult:
    turns: list[Turn]
    episodes: list[Episode]  # one per kept trajectory
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
        """``games[g]`` is task group g's game; each group gets ``group_size`` rollouts. Trajectory t resets
        its environment with ``seed + t`` (plus ``RERUN_SEED_STRIDE`` per re-run). ``on_turn(turn, live
        environments)`` is called after every batched turn (progress display)."""
        group_ids = list(range(len(games))) if group_ids is None else group_ids
        pending = list(range(len(games)))
        result = RolloutResult([], [], [], 0)
        for attempt in range(self.retries + 1):
            if not pending:
                break
            turns, episodes, failed = self._run_groups(
                open_slots([games[g] for g in pending], [group_ids[g] for g in pending], group_size),
                policy,
                seed + RERUN_SEED_STRIDE * attempt,
                policy_version,
                on_turn,
            )
            result.turns += turns
            result.episodes += episodes
            next_pending = []
            for local, reason in failed.items():
                g = pending[local]
                if attempt < self.retries:
                    next_pending.append(g)
                    result.rerun_groups += 1
                else:
                    result.dropped_groups.append({"group": group_ids[g], "game": games[g], "reason": reason})
            pending = next_pending
        return result

    def _run_groups(
        self,
        slots: list[Slot],
        policy: Policy,
        seed: int,
        version: int,
        on_turn: Callable[[int, int], object] | None,
    ) -> tuple[list[Turn], list[Episode], dict[int, str]]:
        """Plays the slots' groups to the end; returns the kept groups' turns and episodes and, per failed
        group (its position in this call), the first failure's reason."""
        failed: dict[int, str] = {}
        interner = GroupStateInterner()
        self._reset(slots, seed, interner, failed)
        for t in range(self.max_turns):
            active = [s for s in slots if s.live and s.group not in failed]
            if not active:
                break
            self._play_turn(active, t, policy, version, interner, failed)
            if on_turn is not None:
                on_turn(t, len(active))
        kept = [s for s in slots if s.group not in failed]
        return [t for s in kept for t in s.turns], [s.episode() for s in kept], failed

    def _reset(self, slots: list[Slot], seed: int, interner: GroupStateInterner, failed: dict[int, str]) -> None:
        results = self.pool.run([Op(s.index, "reset", s.game, seed + s.traj) for s in slots])
        for s, r in zip(slots, results, strict=True):
            if isinstance(r, Failure):
                failed.setdefault(s.group, r.reason)
                s.live = False
                continue
            s.current, s.task = r, task_of(r.observation)
            s.state = interner.intern(s.group, s.tracker.key(r.observation, r.admissible))

    def _play_turn(
        self,
        active: list[Slot],
        t: int,
        policy: Policy,
        version: int,
        interner: GroupStateInterner,
        failed: dict[int, str],
    ) -> None:
        """One batched policy call over the live slots, then one step of each of their environments."""
        prompts = [
            self.fit_prompt(s.task, s.history, s.now().observation, s.now().admissible, s.tracker.key("", []).strip())
            for s in active
        ]
        responses = policy.act(prompts, [s.view(t) for s in active], t)
        parsed = [
            parse_response(self.action_format, resp.text, s.now().admissible, self.strict_actions)
            for s, resp in zip(active, responses, strict=True)
        ]
        stepped = self.pool.run([Op(s.index, "step", action=p.action) for s, p in zip(active, parsed, strict=True)])
        for s, prompt, resp, p, r in zip(active, prompts, responses, parsed, stepped, strict=True):
            if isinstance(r, Failure):
                failed.setdefault(s.group, r.reason)
                s.live = False
                continue
            s.tracker.update(p.action, r.observation)
            nxt = GOAL if r.won else interner.intern(s.group, s.tracker.key(r.observation, r.admissible))
            s.turns.append(
                Turn(
                    group=s.group_id,
                    traj=s.traj,
                    turn=t,
                    prompt_ids=prompt,
                    response_ids=list(resp.ids),
                    logprobs=np.asarray(resp.logprobs, np.float32),
                    env_reward=float(r.reward),
                    valid=p.valid,
                    state=s.state,
                    next_state=nxt,
                    policy_version=version,
                    action=p.action,
                    response_text=resp.text,
                )
            )
            s.history.append((s.now().observation, p.action))
            s.current, s.state = r, nxt
            if r.won or r.done:
                s.live = False
