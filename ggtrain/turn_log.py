"""``RolloutConfig.log_turns``: every training turn of an iteration with its episode's outcome and the
advantage the estimator gave it, one JSON line per turn in ``RUN_DIR/turns/iteration_NNNN.jsonl``
(``iteration_NNNN.process<P>.jsonl`` on several hosts: each host logs the groups it played). It answers
what the metrics' averages cannot: which actions of which task types the update pushed up or down.

Like the metrics, the log follows checkpoints: a resumed run drops the files past its checkpoint (their
iterations are played again); the trainer writes each file whole or not at all
(``ggtrain.evaluate.write_outcomes``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from env_bridge.games import game_id_of, game_task_type
from env_bridge.rollout import Episode, Turn

FOLDER = "turns"
_FILE = re.compile(r"^iteration_(\d+)(?:\.process\d+)?\.jsonl$")


def turn_log_path(run_dir: Path, iteration: int, process_index: int, process_count: int) -> Path:
    """The file of iteration ``iteration`` (1-based, as the metrics count) written by this host."""
    host = f".process{process_index}" if process_count > 1 else ""
    return run_dir / FOLDER / f"iteration_{iteration:04d}{host}.jsonl"


def game_fields(game: str) -> dict[str, str]:
    """``game_id`` and ``task_type`` of an ALFWorld game file; a built-in game is its own id."""
    if game.startswith("builtin:"):
        return {"game_id": game, "task_type": ""}
    path = Path(game)
    return {"game_id": game_id_of(path), "task_type": game_task_type(path)}


def turn_records(iteration: int, turns: Sequence[Turn], episodes: Sequence[Episode], advantages: Any) -> list[dict]:
    """One record per turn, in the order the estimator saw them. Raises ValueError when the advantages
    do not match the turns one for one, or a turn's trajectory has no episode."""
    advantages = np.asarray(advantages, np.float64)
    if advantages.shape != (len(turns),):
        raise ValueError(f"{len(turns)} turns but advantages of shape {advantages.shape}")
    by_traj = {e.traj: e for e in episodes}
    records = []
    for turn, advantage in zip(turns, advantages, strict=True):
        episode = by_traj.get(turn.traj)
        if episode is None:
            raise ValueError(f"turn {turn.turn} of trajectory {turn.traj} has no episode")
        records.append(
            {"iteration": iteration, "group": turn.group, "traj": turn.traj, "turn": turn.turn}
            | game_fields(episode.game)
            | {
                "action": turn.action,
                "valid": bool(turn.valid),
                "env_reward": float(turn.env_reward),
                "state": int(turn.state),
                "next_state": int(turn.next_state),
                "advantage": float(advantage),
                "logprob": float(np.sum(turn.logprobs)),
                "response_tokens": len(turn.response_ids),
                "won": bool(episode.won),
                "episode_turns": episode.turns,
            }
        )
    return records


def drop_turn_logs_after(run_dir: Path, iteration: int) -> list[Path]:
    """Removes the files of iterations past ``iteration`` (and any cut-short ``.tmp``); returns them."""
    folder = run_dir / FOLDER
    if not folder.is_dir():
        return []
    dropped = []
    for path in sorted(folder.iterdir()):
        match = _FILE.match(path.name)
        if path.name.endswith(".tmp") or (match is not None and int(match.group(1)) > iteration):
            path.unlink(missing_ok=True)  # several hosts may share the folder
            dropped.append(path)
    return dropped
