"""Text environments with one interface: the real ALFWorld (TextWorld) games and a small built-in one.

``reset(game, seed) -> StepResult`` and ``step(action) -> StepResult``; a winning step carries
``won=True`` and ``reward=10`` (the ALFWorld reward of the reference recipe), every other step 0.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Protocol

WIN_REWARD = 10.0


@dataclasses.dataclass(frozen=True)
class StepResult:
    observation: str
    reward: float
    done: bool
    won: bool
    admissible: list[str]


class TextEnv(Protocol):
    def reset(self, game: str, seed: int) -> StepResult: ...

    def step(self, action: str) -> StepResult: ...

    def close(self) -> None: ...


class AlfworldEnv:
    """One ALFWorld game through TextWorld (alfworld==0.4.2's demangler and infos wrappers)."""

    def __init__(self, max_episode_steps: int = 1000):
        self.max_episode_steps = max_episode_steps
        self._env: Any = None
        self._game: str | None = None

    def reset(self, game: str, seed: int) -> StepResult:
        import textworld
        import textworld.gym
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

        from env_bridge import pddl_translation, textworld_textgen

        pddl_translation.install()
        textworld_textgen.install()
        if game != self._game or self._env is None:
            self.close()
            infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
            env_id = textworld.gym.register_games(
                [game],
                infos,
                batch_size=1,
                asynchronous=False,
                max_episode_steps=self.max_episode_steps,
                wrappers=[AlfredDemangler(), AlfredInfos],
            )
            self._env = textworld.gym.make(env_id)
            self._game = game
        self._env.seed(seed)
        obs, info = self._env.reset()
        return StepResult(obs[0], 0.0, False, False, list(info["admissible_commands"][0]))

    def step(self, action: str) -> StepResult:
        if self._env is None:
            raise RuntimeError("step before reset")
        obs, _, dones, info = self._env.step([action])
        won = bool(info["won"][0])
        return StepResult(obs[0], WIN_REWARD if won else 0.0, bool(dones[0]), won, list(info["admissible_commands"][0]))

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None
            self._game = None


class BuiltinRingEnv:
    """A small built-in world for fast tests with recurring states: rooms on a ring, a key in one room,
    the task is to put the key in another. Games are named ``builtin:<rooms>:<key room>:<goal room>``.

    With ``fault_injection`` the action ``debug hang`` blocks forever and ``debug crash`` kills the
    process (failure injection for the worker-pool tests only).
    """

    def __init__(self, fault_injection: bool = False):
        self.fault_injection = fault_injection
        self.rooms = self.key_room = self.goal = self.at = 0
        self.holding = False
        self.key_at: int | None = None

    @staticmethod
    def parse(game: str) -> tuple[int, int, int]:
        parts = game.split(":")
        if len(parts) != 4 or parts[0] != "builtin":
            raise ValueError(f"built-in game {game!r}: expected builtin:<rooms>:<key room>:<goal room>")
        rooms, key, goal = (int(p) for p in parts[1:])
        if rooms < 2 or not (0 <= key < rooms and 0 <= goal < rooms):
            raise ValueError(f"built-in game {game!r}: rooms must be >= 2 and both rooms inside the ring")
        return rooms, key, goal

    def _admissible(self) -> list[str]:
        out = [f"go to room {(self.at + d) % self.rooms}" for d in (1, -1)]
        if self.key_at == self.at and not self.holding:
            out.append("take key")
        if self.holding:
            out.append("put key")
        return sorted({*out, "look"})

    def _describe(self) -> str:
        seen = "a key" if self.key_at == self.at else "nothing"
        return f"You are in room {self.at}. You see {seen}."

    def reset(self, game: str, seed: int) -> StepResult:
        self.rooms, self.key_room, self.goal = self.parse(game)
        self.at, self.holding, self.key_at = 0, False, self.key_room
        task = f"Your task is to: put the key in room {self.goal}."
        return StepResult(f"{self._describe()}\n\n{task}", 0.0, False, False, self._admissible())

    def step(self, action: str) -> StepResult:
        action = action.strip().lower()
        if self.fault_injection and action == "debug hang":
            time.sleep(10**6)
        if self.fault_injection and action == "debug crash":
            import os

            os._exit(3)
        won = False
        if action not in self._admissible():
            obs = "Nothing happens."
        elif action.startswith("go to room "):
            self.at = int(action.rsplit(" ", 1)[1])
            obs = self._describe()
        elif action == "take key":
            self.holding, self.key_at = True, None
            obs = "You pick up the key."
        elif action == "put key":
            self.holding, self.key_at = False, self.at
            won = self.at == self.goal
            obs = "You put down the key." + (" You won!" if won else "")
        else:
            obs = self._describe()
        return StepResult(obs, WIN_REWARD if won else 0.0, won, won, self._admissible())

    def walkthrough(self, game: str) -> list[str]:
        rooms, key, goal = self.parse(game)

        def path(a: int, b: int) -> list[str]:
            forward = (b - a) % rooms
            step = 1 if forward <= rooms - forward else -1
            out, at = [], a
            while at != b:
                at = (at + step) % rooms
                out.append(f"go to room {at}")
            return out

        return [*path(0, key), "take key", *path(key, goal), "put key"]

    def close(self) -> None:
        pass


def make_env(kind: str, fault_injection: bool = False) -> TextEnv:
    if kind == "alfworld":
        return AlfworldEnv()
    if kind == "builtin":
        return BuiltinRingEnv(fault_injection=fault_injection)
    raise ValueError(f"environment kind {kind!r}: expected 'alfworld' or 'builtin'")
