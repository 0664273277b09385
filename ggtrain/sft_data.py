"""Demonstrations for ``ggtrain sft``: read from JSONL or replayed from ALFWorld walkthroughs (cached),
split into train / validation by game, and encoded into turns with exactly the rollout driver's prompt
fitting, so a supervised warm start sees the prompts RL will show the model."""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from env_bridge.demonstrations import expert_response, subgoal_thoughts, walkthrough_demonstrations
from env_bridge.games import discover_games
from env_bridge.prompts import prompt_builder
from env_bridge.rollout import RolloutDriver, Turn
from env_bridge.state_tracker import AlfworldStateTracker
from ggtrain.config import ConfigError, RolloutConfig
from models.artifacts import cache_dir

DEMONSTRATIONS_VERSION = 1  # bump when the replay or the record layout changes: cached files are keyed by it


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """``{"messages": [...], "response": "..."}`` per line; a bad line is named with its number."""
    if not path.is_file():
        raise ConfigError(f"--data {str(path)!r}: no such file")
    records = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ConfigError(f"{path}:{number}: not JSON ({error.msg})") from None
        messages, response = record.get("messages"), record.get("response")
        if not isinstance(messages, list) or not messages or not isinstance(response, str) or not response:
            raise ConfigError(f"{path}:{number}: expected {{'messages': [non-empty list], 'response': 'text'}}")
        records.append(record)
    if not records:
        raise ConfigError(f"--data {str(path)!r}: no demonstrations in the file")
    return records


def data_hash(records: list[dict[str, Any]]) -> str:
    digest = hashlib.sha256()
    for r in records:
        digest.update(json.dumps(r, sort_keys=True).encode())
    return digest.hexdigest()


def walkthrough_records(
    split: str,
    rollout: RolloutConfig,
    data_dir: str,
    games: int,
    seed: int,
    on_game: Callable[[Any], object] | None = None,
    detour_fraction: float = 0.0,
) -> list[dict[str, Any]]:
    """The demonstrations of ``games`` games of ``split`` (0: all; else a seeded sample), replayed once (with
    ``detour_fraction`` of the ``go to`` steps detoured, ``replay_game``) and cached under
    ``$GGTRAIN_CACHE/demonstrations`` by a hash of everything that shapes them."""
    found = discover_games(split, data_dir or None, rollout.task_types or None)
    chosen = found if games <= 0 or games >= len(found) else random.Random(seed).sample(found, games)
    chosen = sorted(chosen, key=lambda g: str(g.path))
    shape = [DEMONSTRATIONS_VERSION, rollout.action_format, rollout.history_length, [g.game_id for g in chosen], split]
    key = json.dumps(shape + ([detour_fraction, seed] if detour_fraction > 0 else []))
    path = cache_dir() / "demonstrations" / f"{split}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsonl"
    if path.exists():
        return [json.loads(line) for line in path.read_text().splitlines()]
    builder = prompt_builder(rollout.action_format, rollout.history_length, rollout.show_tracked_state)
    records = [
        r
        for game_records in walkthrough_demonstrations(
            chosen, builder, rollout.action_format, rollout.workers, on_game, detour_fraction, seed
        )
        for r in game_records
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{random.getrandbits(32)}")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in records))
    tmp.replace(path)
    return records


def mix_uniform(records: list[dict[str, Any]], fraction: float, action_format: str, seed: int) -> list[dict]:
    """Replaces the answer of ``fraction`` of the turns by a uniformly random admissible action: a policy
    that knows the format but only partly the task (RL then has room to improve)."""
    if fraction <= 0:
        return records
    rng = random.Random(seed)
    out = []
    for r in records:
        if "admissible" in r and rng.random() < fraction:
            action = rng.choice(r["admissible"])
            r = r | {"action": action, "response": expert_response(action, action_format, r["admissible"])}
        out.append(r)
    return out


def with_subgoal_thoughts(records: list[dict[str, Any]], action_format: str) -> list[dict[str, Any]]:
    """Each replayed walkthrough turn's answer with its subgoal as the thought (``<think>take apple</think>``;
    ``env_bridge.demonstrations.subgoal_thoughts``); records without a game or a command (``--data``) and
    the ``choice`` format are left as they are. A game's records are its turns in order."""
    if action_format != "tags":
        return records
    games: dict[str, list[int]] = {}
    for i, r in enumerate(records):
        if "game" in r and "action" in r and "admissible" in r:
            games.setdefault(str(r["game"]), []).append(i)
    out = list(records)
    for indices in games.values():
        indices = sorted(indices, key=lambda i: int(records[i].get("turn", 0)))
        thoughts = subgoal_thoughts([str(records[i]["action"]) for i in indices])
        for i, thought in zip(indices, thoughts, strict=True):
            r = records[i]
            out[i] = r | {"response": expert_response(r["action"], action_format, r["admissible"], thought)}
    return out


def repeat_take_move(records: list[dict[str, Any]], repeats: int) -> list[dict[str, Any]]:
    """Each turn whose command starts with ``take`` or ``move`` ``repeats`` times, the copies right after
    it; every other turn once."""
    return [
        r
        for r in records
        for _ in range(repeats if str(r.get("action", "")).split()[:1] in (["take"], ["move"]) else 1)
    ]


def object_types(records: list[dict[str, Any]]) -> list[str]:
    """Every object type a record's admissible commands can take (``take OBJECT N from …``), sorted."""
    return sorted({a.split()[1] for r in records for a in r.get("admissible", []) if a.split()[:1] == ["take"]})


def rename_record(record: dict[str, Any], mapping: dict[str, str]) -> dict[str, Any]:
    """``record`` with every whole word that is a key of ``mapping`` replaced by its value, in every text
    field (the prompt's parts, the answer, the command), all at once (a swap stays a swap)."""
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, sorted(mapping))) + r")\b")

    def sub(text: str) -> str:
        return pattern.sub(lambda m: mapping[m.group(1)], text)

    out = dict(record)
    for key in ("response", "action", "task", "observation"):
        if key in record:
            out[key] = sub(record[key])
    if "admissible" in record:
        out["admissible"] = [sub(a) for a in record["admissible"]]
    if "history" in record:
        out["history"] = [[sub(o), sub(a)] for o, a in record["history"]]
    out["messages"] = [m | {"content": sub(m["content"])} for m in record["messages"]]
    return out


def rename_objects(records: list[dict[str, Any]], fraction: float, seed: int, types: list[str]) -> list[dict]:
    """Each record, with probability ``fraction``, with its object ``types`` permuted by a random bijection
    of its own: naming the object from the prior stops paying, so copying it from the prompt is learned."""
    if fraction <= 0 or len(types) < 2:
        return records
    rng, out = random.Random(seed), []
    for r in records:
        if rng.random() < fraction:
            shuffled = list(types)
            rng.shuffle(shuffled)
            r = rename_record(r, dict(zip(types, shuffled, strict=True)))
        out.append(r)
    return out


def demonstration_mix(records: list[dict[str, Any]], config: Any) -> list[dict[str, Any]]:
    """The demonstrations as ``SftConfig`` mixes them (``config`` a ``TrainConfig``): the subgoal thoughts
    when asked for, then a share of the answers replaced by uniform ones, then the take / move repeats,
    judged by each turn's answer after that replacement."""
    if config.sft.subgoal_thoughts:
        records = with_subgoal_thoughts(records, config.rollout.action_format)
    mixed = mix_uniform(records, config.sft.uniform_fraction, config.rollout.action_format, config.seed)
    return repeat_take_move(mixed, config.sft.take_move_repeats)


def split_by_game(records: list[dict[str, Any]], fraction: float, seed: int) -> tuple[list[dict], list[dict]]:
    """(train, validation): whole games (or single records without a ``game``) held out."""
    keys = sorted({str(r.get("game", i)) for i, r in enumerate(records)})
    held = set(random.Random(seed).sample(keys, max(1, round(len(keys) * fraction)) if fraction > 0 else 0))
    train = [r for i, r in enumerate(records) if str(r.get("game", i)) not in held]
    validation = [r for i, r in enumerate(records) if str(r.get("game", i)) in held]
    if not train:
        raise ConfigError(f"SftConfig.validation_fraction = {fraction} leaves no training demonstrations")
    return train, validation


def tracked_state(record: dict[str, Any]) -> str:
    """The state line RL shows with ``RolloutConfig.show_tracked_state`` (location, what is held, what was
    moved), rebuilt by following the record's history as the rollout's tracker follows the episode."""
    tracker = AlfworldStateTracker()
    history = record["history"]
    for i, (_, action) in enumerate(history):
        tracker.update(action, history[i + 1][0] if i + 1 < len(history) else record["observation"])
    return tracker.key("", []).strip()


def encode_records(records: list[dict[str, Any]], driver: RolloutDriver, eos_id: int | None) -> list[Turn]:
    """Turns whose prompt is fitted as the rollout driver fits it (structured records) or the record's
    messages through the chat template; the response ends with EOS when the tokenizer has one."""
    tokenizer, turns = driver.tokenizer, []
    for i, r in enumerate(records):
        if "admissible" in r:
            history = [tuple(h) for h in r["history"]]
            tracked = tracked_state(r) if driver.prompts.show_tracked_state else ""
            prompt = driver.fit_prompt(r["task"], history, r["observation"], r["admissible"], tracked)
        else:
            rendered = tokenizer.apply_chat_template(r["messages"], add_generation_prompt=True)
            prompt = list(tokenizer.encode(str(rendered), add_special_tokens=False))[-driver.max_prompt_tokens :]
        response = list(tokenizer.encode(r["response"], add_special_tokens=False))
        if eos_id is not None:
            response.append(eos_id)
        turns.append(
            Turn(
                group=i,
                traj=i,
                turn=0,
                prompt_ids=prompt,
                response_ids=response,
                logprobs=np.zeros(len(response), np.float32),
                env_reward=0.0,
                valid=True,
                state=0,
                next_state=0,
                policy_version=0,
                action=str(r.get("action", "")),
                response_text=r["response"],
            )
        )
    return turns
