"""Turns -> the turn batch of DESIGN.md, through a grain pipeline.

Each row is one turn: its prompt then its response, right-padded to a length bucket; ``loss_mask`` is
True exactly on that turn's response tokens (never the prompt, history, observation or padding);
``old_logp`` holds the sampler's log-probs there. Mini-batches have a fixed row count (the last one is
filled with padding rows), the order is shuffled deterministically from a seed, and the iterator's
position is checkpointable (``get_state``/``set_state``). With a :class:`~env_bridge.packing.Packing`
the same mini-batches' rows are packed into shared sequences instead (``env_bridge.packing``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grain
import numpy as np

from env_bridge.packing import Packing, pack_rows, packed_shape
from env_bridge.rollout import Turn
from models.buckets import bucket

LENGTH_BUCKETS = (64, 128, 256, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192)
ROW_INT_FIELDS = ("group", "traj", "turn", "state", "next_state", "policy_version")


def length_bucket(n: int) -> int:
    """The padded token length of a turn batch whose longest turn has ``n`` tokens."""
    return bucket(n, LENGTH_BUCKETS, "turn length")


def turn_row(turn: Turn, length: int, pad_id: int, extra: dict[str, Any]) -> dict[str, np.ndarray]:
    prompt, response = turn.prompt_ids, turn.response_ids
    n = len(prompt) + len(response)
    if n > length:
        raise ValueError(f"turn (group {turn.group}, traj {turn.traj}, turn {turn.turn}) has {n} tokens > {length}")
    tokens = np.full(length, pad_id, np.int32)
    tokens[:n] = prompt + response
    attention = np.zeros(length, bool)
    attention[:n] = True
    loss = np.zeros(length, bool)
    loss[len(prompt) : n] = True
    old_logp = np.zeros(length, np.float32)
    old_logp[len(prompt) : n] = turn.logprobs[: len(response)]
    row = {
        "tokens": tokens,
        "attention_mask": attention,
        "loss_mask": loss,
        "old_logp": old_logp,
        "positions": np.maximum(np.cumsum(attention) - 1, 0).astype(np.int32),
        "env_reward": np.float32(turn.env_reward),
        "valid": np.bool_(turn.valid),
        "row_mask": np.bool_(True),
    }
    row |= {k: np.int32(getattr(turn, k)) for k in ROW_INT_FIELDS}
    return row | {k: np.asarray(v) for k, v in extra.items()}


def pad_rows(batch: dict[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
    """Appends padding rows (zeros, ``row_mask`` False) up to ``rows``: static shapes, nothing trained."""
    have = len(batch["row_mask"])
    if have > rows:
        raise ValueError(f"batch has {have} rows, more than the {rows} to pad to")
    return {k: np.concatenate([v, np.zeros((rows - have, *v.shape[1:]), v.dtype)]) for k, v in batch.items()}


def collate_turns(
    turns: Sequence[Turn],
    rows_per_batch: int,
    seed: int,
    pad_id: int,
    extra: dict[str, np.ndarray] | None = None,
    length: int | None = None,
    whole_groups: bool = False,
    packing: Packing | None = None,
) -> grain.DatasetIterator:
    """A checkpointable iterator of padded mini-batches over ``turns`` (on several hosts every host
    collates the same global batches and contributes its own rows: ``ggtrain.sharding.shard_batch``).

    ``extra`` holds per-turn values aligned with ``turns`` (e.g. ``advantages``) that travel with rows.
    With ``whole_groups`` every task group's rows (all its trajectories, all their turns) land in one
    mini-batch: groups are shuffled and packed in order, a mini-batch closing when the next group does
    not fit (GGPO compares whole trajectories of a group within a mini-batch). With ``packing`` the
    mini-batches hold the same rows, packed (``length`` is the padded layout's only).
    """
    if not turns:
        raise ValueError("no turns to collate")
    extra = extra or {}
    for name, values in extra.items():
        if len(values) != len(turns):
            raise ValueError(f"extra[{name!r}] has {len(values)} entries for {len(turns)} turns")
    indices = list(range(len(turns)))
    if packing is not None:
        batches = _group_batches(turns, indices, rows_per_batch, seed) if whole_groups else None
        if batches is None:
            order = list(grain.MapDataset.source(indices).shuffle(seed=seed))
            batches = [order[i : i + rows_per_batch] for i in range(0, len(order), rows_per_batch)]
        return _packed_batches(turns, batches, packing, pad_id, extra)
    length = length or length_bucket(max(len(t.prompt_ids) + len(t.response_ids) for t in turns))
    if whole_groups:
        return _whole_group_batches(turns, indices, rows_per_batch, seed, length, pad_id, extra)
    dataset = (
        grain.MapDataset.source(indices)
        .shuffle(seed=seed)
        .map(lambda i: turn_row(turns[i], length, pad_id, {k: v[i] for k, v in extra.items()}))
        .batch(rows_per_batch, drop_remainder=False)
        .map(lambda b: pad_rows(b, rows_per_batch))
    )
    return iter(dataset.to_iter_dataset())


def _whole_group_batches(
    turns: Sequence[Turn],
    indices: list[int],
    rows_per_batch: int,
    seed: int,
    length: int,
    pad_id: int,
    extra: dict[str, np.ndarray],
) -> grain.DatasetIterator:
    batches = _group_batches(turns, indices, rows_per_batch, seed)

    def build(batch: list[int]) -> dict[str, np.ndarray]:
        rows = [turn_row(turns[i], length, pad_id, {k: v[i] for k, v in extra.items()}) for i in batch]
        stacked = {k: np.stack([r[k] for r in rows]) for k in rows[0]}
        return pad_rows(stacked, rows_per_batch)

    return iter(grain.MapDataset.source(batches).map(build).to_iter_dataset())


def _group_batches(turns: Sequence[Turn], indices: list[int], rows_per_batch: int, seed: int) -> list[list[int]]:
    """Whole task groups per mini-batch, groups in a seeded order, each group's rows by (traj, turn)."""
    by_group: dict[int, list[int]] = {}
    for i in indices:
        by_group.setdefault(turns[i].group, []).append(i)
    for group, rows in by_group.items():
        if len(rows) > rows_per_batch:
            raise ValueError(
                f"task group {group} has {len(rows)} turns, more than a mini-batch of {rows_per_batch} rows:"
                " whole-group batches need BatchConfig.mini_batch_rows >= the largest group's turns"
            )
    order = np.random.default_rng(seed).permutation(sorted(by_group))
    batches: list[list[int]] = [[]]
    for group in order.tolist():
        rows = sorted(by_group[group], key=lambda i: (turns[i].traj, turns[i].turn))
        if len(batches[-1]) + len(rows) > rows_per_batch:
            batches.append([])
        batches[-1] += rows
    return batches


def _packed_batches(
    turns: Sequence[Turn], batches: list[list[int]], packing: Packing, pad_id: int, extra: dict[str, np.ndarray]
) -> grain.DatasetIterator:
    lengths = [len(t.prompt_ids) + len(t.response_ids) for t in turns]
    shape = packed_shape(packing, [[lengths[i] for i in b] for b in batches], LENGTH_BUCKETS)

    def build(batch: list[int]) -> dict[str, np.ndarray]:
        extras = [{k: v[i] for k, v in extra.items()} for i in batch]
        rows = [turn_row(turns[i], lengths[i], pad_id, e) for i, e in zip(batch, extras, strict=True)]
        return pack_rows(rows, shape, pad_id)

    return iter(grain.MapDataset.source(batches).map(build).to_iter_dataset())
