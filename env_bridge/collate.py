"""Turns -> the turn batch of DESIGN.md, through a grain pipeline.

Each row is one turn: its prompt then its response, right-padded to a length bucket; ``loss_mask`` is
True exactly on that turn's response tokens (never the prompt, history, observation or padding);
``old_logp`` holds the sampler's log-probs there. Mini-batches have a fixed row count (the last one is
filled with padding rows), the order is shuffled deterministically from a seed, and the iterator's
position is checkpointable (``get_state``/``set_state``). With a :class:`~env_bridge.packing.Packing`
the same mini-batches' rows are packed into shared sequences instead (``env_bridge.packing``).

Two steps: a plan (which turns each mini-batch holds: :func:`mini_batch_plan`) and a shape to lay it
out in (:class:`PaddedShape` or ``PackedShape``: :func:`collate_plan`). ``collate_turns`` derives the
shape from the turns; several hosts agree on one shape first (``ggtrain.host_batches``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import grain
import numpy as np

from env_bridge.packing import PackedShape, Packing, pack_rows, packed_shape
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


NO_TURN = Turn(
    group=0,
    traj=0,
    turn=0,
    prompt_ids=[],
    response_ids=[],
    logprobs=np.zeros(0, np.float32),
    env_reward=0.0,
    valid=False,
    state=0,
    next_state=0,
    policy_version=0,
    action="",
    response_text="",
)


def padding_row(length: int, pad_id: int, extra: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A row with no tokens and ``row_mask`` False, with ``turn_row``'s fields and ``extra``'s dtypes: what
    a mini-batch holds when this host has no turns for it."""
    row = turn_row(NO_TURN, length, pad_id, {k: np.zeros((), np.asarray(v).dtype) for k, v in extra.items()})
    return row | {"row_mask": np.asarray(False)}


def pad_rows(batch: dict[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
    """Appends padding rows (zeros, ``row_mask`` False) up to ``rows``: static shapes, nothing trained."""
    have = len(batch["row_mask"])
    if have > rows:
        raise ValueError(f"batch has {have} rows, more than the {rows} to pad to")
    return {k: np.concatenate([v, np.zeros((rows - have, *v.shape[1:]), v.dtype)]) for k, v in batch.items()}


@dataclasses.dataclass(frozen=True)
class PaddedShape:
    rows: int  # rows per mini-batch
    length: int  # tokens per row


def turn_lengths(turns: Sequence[Turn]) -> list[int]:
    return [len(t.prompt_ids) + len(t.response_ids) for t in turns]


def mini_batch_plan(
    turns: Sequence[Turn], rows_per_batch: int, seed: int, whole_groups: bool = False
) -> list[list[int]]:
    """Which turns (indices) each mini-batch holds, in order: a seeded shuffle cut into ``rows_per_batch``
    rows, or with ``whole_groups`` whole task groups (``collate_turns``)."""
    indices = list(range(len(turns)))
    if not turns:
        return []
    if whole_groups:
        return _group_batches(turns, indices, rows_per_batch, seed)
    order = list(grain.MapDataset.source(indices).shuffle(seed=seed))
    return [order[i : i + rows_per_batch] for i in range(0, len(order), rows_per_batch)]


def collate_plan(
    turns: Sequence[Turn],
    plan: list[list[int]],
    shape: PaddedShape | PackedShape,
    pad_id: int,
    extra: dict[str, np.ndarray],
    batches: int | None = None,
) -> grain.DatasetIterator:
    """A checkpointable iterator of the mini-batches of ``plan`` laid out in ``shape``, followed by
    mini-batches of padding only up to ``batches`` (default: none)."""
    batches = len(plan) if batches is None else batches
    if batches < len(plan):
        raise ValueError(f"{len(plan)} mini-batches planned, more than the {batches} asked for")
    lengths = turn_lengths(turns)

    def build(batch: list[int]) -> dict[str, np.ndarray]:
        length = shape.length if isinstance(shape, PaddedShape) else None
        rows = [turn_row(turns[i], length or lengths[i], pad_id, {k: v[i] for k, v in extra.items()}) for i in batch]
        rows = rows or [padding_row(length or 0, pad_id, extra)]
        if isinstance(shape, PackedShape):
            return pack_rows(rows, shape, pad_id)
        return pad_rows({k: np.stack([r[k] for r in rows]) for k in rows[0]}, shape.rows)

    padding: list[list[int]] = [[] for _ in range(batches - len(plan))]
    return iter(grain.MapDataset.source(plan + padding).map(build).to_iter_dataset())


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
    """A checkpointable iterator of padded mini-batches over ``turns`` (on several hosts each host collates
    its own turns into its share of every mini-batch: ``ggtrain.host_batches``).

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
    plan = mini_batch_plan(turns, rows_per_batch, seed, whole_groups)
    lengths = turn_lengths(turns)
    shape: PaddedShape | PackedShape
    if packing is not None:
        shape = packed_shape(packing, [[lengths[i] for i in b] for b in plan], LENGTH_BUCKETS)
    else:
        shape = PaddedShape(rows_per_batch, length or length_bucket(max(lengths)))
    return collate_plan(turns, plan, shape, pad_id, extra)


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
