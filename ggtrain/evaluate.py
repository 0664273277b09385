"""Evaluation: success rate overall and per task type, a Wilson 95 % interval, per-game outcomes."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from env_bridge.games import Game, discover_games
from env_bridge.rollout import Episode, RolloutResult, SamplerPolicy
from env_bridge.worker_pool import EnvPool
from ggtrain.config import TrainConfig
from ggtrain.rollout_setup import make_rollout_driver, make_sampling_params
from ggtrain.seeds import evaluation_key
from models.sampler import Sampler


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return 0.0, 0.0
    p = successes / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, center - half), min(1.0, center + half)


@dataclasses.dataclass(frozen=True)
class EvalGame:
    game: str  # game file path or builtin spec
    game_id: str
    task_type: str


def eval_games(config: TrainConfig, split: str, count: int) -> list[EvalGame]:
    if config.rollout.env == "builtin":
        specs = list(config.rollout.builtin_games)
        return [EvalGame(specs[i % len(specs)], f"{specs[i % len(specs)]}#{i}", "builtin") for i in range(count)]
    games = interleave_task_types(discover_games(split, config.data_dir or None, config.rollout.task_types or None))
    return [EvalGame(str(g.path), g.game_id, g.task_type) for g in games[:count]]


def interleave_task_types(games: list[Game]) -> list[Game]:
    """The games in rounds over the task types (each type's games in path order), so the first ``n``
    games of an evaluation cover every task type: path order alone starts with one type's games."""
    by_type: dict[str, list[Game]] = {}
    for g in games:
        by_type.setdefault(g.task_type, []).append(g)
    columns = [by_type[t] for t in sorted(by_type)]
    return [column[i] for i in range(max(map(len, columns), default=0)) for column in columns if i < len(column)]


def evaluate(
    config: TrainConfig,
    model_config: Any,
    params: Any,
    tokenizer: Any,
    games: list[EvalGame],
    seeds: list[int],
    pool: EnvPool,
    temperature: float | None = None,
    on_turn: Any = None,
    game_ids: list[int] | None = None,
) -> tuple[dict[str, Any], list[dict]]:
    """Plays every game once per seed; returns (summary, per-game outcome records). ``game_ids`` are the
    games' positions in the whole evaluation list (default 0, 1, ...): they fix the environment and
    sampling seeds, so a game plays the same wherever it runs. ``on_turn`` as for ``RolloutDriver.run``."""
    game_ids = list(range(len(games))) if game_ids is None else game_ids
    records: list[dict[str, Any]] = []
    for seed in seeds:
        result = play_evaluation(
            config, model_config, params, tokenizer, games, seed, pool, temperature, on_turn, game_ids
        )
        by_group = {e.group: e for e in result.episodes}
        records += [outcome_record(g, seed, by_group.get(i)) for i, g in zip(game_ids, games, strict=True)]
    return summarize_outcomes(require_completed(records)), records


def play_evaluation(
    config: TrainConfig,
    model_config: Any,
    params: Any,
    tokenizer: Any,
    games: list[EvalGame],
    seed: int,
    pool: EnvPool,
    temperature: float | None = None,
    on_turn: Any = None,
    game_ids: list[int] | None = None,
) -> RolloutResult:
    """One evaluation seed's episodes and every turn of them (group ``game_ids[i]`` plays ``games[i]``),
    as :func:`evaluate` plays them."""
    game_ids = list(range(len(games))) if game_ids is None else game_ids
    rollout, ev = config.rollout, config.eval
    driver = make_rollout_driver(rollout, pool, tokenizer, ev.max_turns)
    sampling = make_sampling_params(rollout, ev.temperature if temperature is None else temperature)
    policy = SamplerPolicy(Sampler(model_config, tokenizer), params, sampling, evaluation_key(seed))
    return driver.run([g.game for g in games], 1, policy, seed=seed, group_ids=game_ids, on_turn=on_turn)


def require_completed(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records, unless none completed: a success rate of 0 from an environment that never played
    (every worker dead, every game unloadable) would read as a measurement."""
    if records and not any(r["completed"] for r in records):
        raise RuntimeError(f"evaluation: none of the {len(records)} episodes completed (the environment failed)")
    return records


def outcome_record(game: EvalGame, seed: int, episode: Episode | None) -> dict[str, Any]:
    """One line of an outcomes file; a game whose group was dropped counts as lost, ``completed`` False."""
    return {
        "game_id": game.game_id,
        "task_type": game.task_type,
        "seed": seed,
        "won": bool(episode and episode.won),
        "turns": episode.turns if episode else 0,
        "invalid_actions": episode.invalid if episode else 0,
        "completed": episode is not None,
    }


def summarize_outcomes(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Success rate with its Wilson 95 % interval, per task type, mean turns and invalid-action rate."""
    won = sum(r["won"] for r in records)
    lo, hi = wilson_interval(won, len(records))
    per_type: dict[str, list[bool]] = {}
    for r in records:
        per_type.setdefault(r["task_type"], []).append(r["won"])
    summary = {
        "episodes": len(records),
        "dropped": sum(not r.get("completed", True) for r in records),
        "success_rate": won / max(len(records), 1),
        "wilson95": [lo, hi],
        "per_task_type": {k: sum(v) / len(v) for k, v in sorted(per_type.items())},
        "mean_turns": sum(r["turns"] for r in records) / max(len(records), 1),
        "invalid_action_rate": sum(r["invalid_actions"] for r in records) / max(sum(r["turns"] for r in records), 1),
    }
    return summary


def write_outcomes(records: list[dict], path: Path) -> None:
    """All of them or none: a kill while writing never leaves a part of the file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in records))
    tmp.replace(path)
