"""ALFWorld state tracking for state identity (ALGORITHMS.md §7) and per-group interning.

The canonical state text is the raw observation, the agent's location, the held object with its
status, the objects the agent has moved, and the sorted admissible commands. Interning into dense
ids happens per task group on the host; the device never sees strings.
"""

from __future__ import annotations

import dataclasses
import re

NOTHING_HAPPENS = "Nothing happens."
GOAL = -1

_GO = re.compile(r"^go to (.+)$")
_TAKE = re.compile(r"^take (.+?) from (.+)$")
_MOVE = re.compile(r"^(?:move|put) (.+?) (?:to|in/on|in|on) (.+)$")
_PROCESS = re.compile(r"^(heat|cool|clean|slice) (.+?) with (.+)$")
STATUS = {"heat": "heated", "cool": "cooled", "clean": "cleaned", "slice": "sliced"}


@dataclasses.dataclass
class AlfworldStateTracker:
    """Follows one episode; ``key(observation, admissible)`` is the canonical state string."""

    location: str = "middle of room"
    holding: str | None = None
    holding_from: str | None = None
    status: dict[str, str] = dataclasses.field(default_factory=dict)
    moved: list[str] = dataclasses.field(default_factory=list)

    def update(self, action: str, observation: str) -> bool:
        """Applies a step; returns whether the tracked state changed. A step whose observation is
        "Nothing happens." changes nothing."""
        if observation.strip() == NOTHING_HAPPENS:
            return False
        before = (self.location, self.holding, dict(self.status), len(self.moved))
        action = action.strip().lower()
        if m := _GO.match(action):
            self.location = m.group(1)
        elif m := _TAKE.match(action):
            self.holding, self.holding_from = m.group(1), m.group(2)
        elif (m := _MOVE.match(action)) and self.holding == m.group(1):
            obj = m.group(1)
            self.moved.append(
                f"{obj}({self.status.get(obj, 'unprocessed')}) from {self.holding_from} move to {m.group(2)};"
            )
            self.holding = self.holding_from = None
        elif m := _PROCESS.match(action):
            verb, obj = m.group(1), m.group(2)
            if verb != "slice" and self.holding != obj:
                return False
            self.status[obj] = STATUS[verb]
        return before != (self.location, self.holding, dict(self.status), len(self.moved))

    def key(self, observation: str, admissible: list[str]) -> str:
        held = "nothing" if self.holding is None else f"{self.holding}({self.status.get(self.holding, 'unprocessed')})"
        return (
            f"{observation.strip()}\nLocation: {self.location}. Items in hand (status): {held}\n"
            f"Moved: {' '.join(self.moved)}\nAdmissible: {', '.join(sorted(admissible))}"
        )


class GroupStateInterner:
    """Dense ids per task group for canonical state strings (exact: a dict, no hashing collisions)."""

    def __init__(self) -> None:
        self._ids: dict[tuple[int, str], int] = {}
        self._next: dict[int, int] = {}

    def intern(self, group: int, key: str) -> int:
        k = (group, key)
        if k not in self._ids:
            self._ids[k] = self._next.get(group, 0)
            self._next[group] = self._ids[k] + 1
        return self._ids[k]
