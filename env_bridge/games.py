"""Finding ALFWorld games: a split, optional task-type filter, unsolvable games excluded.

Accepts the layout ``alfworld-download`` produces (``$ALFWORLD_DATA/json_2.1.1/<split>/<task>/<trial>/``)
and the same tree given directly. Splits: ``train``, ``valid_seen``, ``valid_unseen``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

TASK_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
SPLITS = ("train", "valid_seen", "valid_unseen")
GAME_FILE = "game.tw-pddl"
HOW_TO_GET = (
    "set ALFWORLD_DATA to a folder holding json_2.1.1/ (on this project's machines: ../shared/data/alfworld; "
    "with internet: pip install alfworld && alfworld-download)"
)


ALFWORLD_DEFAULT_CACHE = Path("~/.cache/alfworld").expanduser()


@dataclasses.dataclass(frozen=True)
class Game:
    path: Path  # the game.tw-pddl file
    split: str
    task_type: str

    @property
    def game_id(self) -> str:
        return game_id_of(self.path)

    @property
    def task(self) -> str:
        """The task folder (task type, object, receptacle and scene number): every trial of a task shares it."""
        return self.path.parent.parent.name


def game_id_of(path: Path) -> str:
    """A game file's ``<task folder>/<trial folder>``: unique within a split."""
    return f"{path.parent.parent.name}/{path.parent.name}"


def game_task_type(path: Path) -> str:
    """A game file's task type, from its task folder's name."""
    return task_type_of(path.parent.parent.name)


def task_type_of(task_folder: str) -> str:
    for task in TASK_TYPES:
        if task_folder.startswith(task + "-"):
            return task
    raise ValueError(f"game folder {task_folder!r} does not start with a known task type {TASK_TYPES}")


def data_root(data_dir: str | Path | None = None) -> Path:
    """The folder holding the splits: ``data_dir`` if given, else ``$ALFWORLD_DATA`` if set, else the
    project's ``../shared/data/alfworld``. An explicit choice that holds no games is an error, never a
    silent fall-back to another folder."""
    env = os.environ.get("ALFWORLD_DATA")
    # importing alfworld sets ALFWORLD_DATA to its (empty) default cache when it was unset
    if env and Path(env) == ALFWORLD_DEFAULT_CACHE and not (Path(env) / "json_2.1.1").is_dir():
        env = None
    if data_dir:
        candidates = [Path(data_dir)]
    elif env:
        candidates = [Path(env)]
    else:
        candidates = [Path(__file__).resolve().parents[2] / "shared" / "data" / "alfworld"]
    for root in candidates:
        if (root / "json_2.1.1").is_dir():
            return root / "json_2.1.1"
        if any((root / split).is_dir() for split in SPLITS):
            return root
    looked = ", ".join(str(c) for c in candidates) or "(nowhere: no data_dir and no ALFWORLD_DATA)"
    raise FileNotFoundError(f"no ALFWorld games found; looked in {looked}; {HOW_TO_GET}")


def discover_games(
    split: str,
    data_dir: str | Path | None = None,
    task_types: tuple[str, ...] | None = None,
    include_unsolvable: bool = False,
) -> list[Game]:
    """The games of a split in sorted path order."""
    if split not in SPLITS:
        raise ValueError(f"split {split!r}: expected one of {SPLITS}")
    for task in task_types or ():
        if task not in TASK_TYPES:
            raise ValueError(f"task type {task!r}: expected some of {TASK_TYPES}")
    root = data_root(data_dir) / split
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: split {split!r} not found; {HOW_TO_GET}")
    games = []
    for path in sorted(root.glob(f"*/*/{GAME_FILE}")):
        task = game_task_type(path)
        if task_types and task not in task_types:
            continue
        if not include_unsolvable and not json.loads(path.read_text()).get("solvable", True):
            continue
        games.append(Game(path, split, task))
    if not games:
        raise FileNotFoundError(
            f"{root}: no {GAME_FILE} files{' of task types ' + str(task_types) if task_types else ''}; {HOW_TO_GET}"
        )
    return games


def walkthrough(game: Game) -> list[str]:
    return list(json.loads(game.path.read_text()).get("walkthrough") or [])
