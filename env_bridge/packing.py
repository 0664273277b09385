"""Turn rows packed into fixed-length sequences (DESIGN.md, packed layout).

A mini-batch's rows are placed first-fit decreasing into sequences of one length; each row is one
segment (``segment_ids`` 1, 2, ... in its sequence, 0 = padding) whose ``positions`` restart at 0. Per-row
values become ``[S, K]`` tables: slot ``k`` of sequence ``s`` is the row of segment ``k + 1`` there
(``row_mask`` False on empty slots). Micro-batches are whole sequences within a token budget.

The sequence length is ``Packing.length``; a mini-batch so small that ``multiple`` sequences of a
shorter length bucket hold it uses that bucket instead, and a turn longer than ``length`` lengthens it
to that turn's bucket. Every mini-batch of one collation shares one shape: the largest sequence count
and slot count any of them needs.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from models.buckets import bucket

SLOT_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
TOKEN_FIELDS = ("tokens", "attention_mask", "loss_mask", "old_logp")


@dataclasses.dataclass(frozen=True)
class Packing:
    """How a collation packs: ``length`` tokens per sequence, ``micro_batch_tokens`` token positions per
    micro-batch, sequence counts per micro-batch a multiple of ``multiple`` (the mesh's batch shards)."""

    length: int
    micro_batch_tokens: int
    multiple: int = 1

    def __post_init__(self) -> None:
        for name in ("length", "micro_batch_tokens", "multiple"):
            if getattr(self, name) < 1:
                raise ValueError(f"packing {name} = {getattr(self, name)}: expected >= 1")


@dataclasses.dataclass(frozen=True)
class PackedShape:
    length: int  # tokens per sequence
    sequences: int  # sequences per mini-batch (a whole number of micro-batches)
    slots: int  # segments a sequence can hold: the per-row tables are [sequences, slots]


def first_fit_decreasing(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """Bins of indices into ``lengths`` whose lengths sum to at most ``capacity``: longest first, each into
    the first bin with room (ties keep the input order, so the bins follow deterministically from it)."""
    bins: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        if lengths[i] > capacity:
            raise ValueError(f"a turn of {lengths[i]} tokens does not fit a packed sequence of {capacity}")
        for b, free in enumerate(room):
            if lengths[i] <= free:
                bins[b].append(i)
                room[b] -= lengths[i]
                break
        else:
            bins.append([i])
            room.append(capacity - lengths[i])
    return bins


def micro_batch_sequences(sequences: int, length: int, micro_batch_tokens: int) -> int:
    """Sequences per micro-batch: the most within ``micro_batch_tokens`` (at least one) that divides
    ``sequences`` (the train step and :func:`packed_shape` agree through this rule)."""
    budget = max(1, micro_batch_tokens // length)
    return max(d for d in range(1, min(budget, sequences) + 1) if sequences % d == 0)


def sequence_length(packing: Packing, longest_turn: int, largest_batch_tokens: int, buckets: Sequence[int]) -> int:
    per_shard = math.ceil(largest_batch_tokens / packing.multiple)
    length = packing.length
    if per_shard <= min(packing.length, buckets[-1]):
        length = min(length, bucket(per_shard, buckets, "packed mini-batch tokens"))
    if longest_turn > length:
        length = bucket(longest_turn, buckets, "turn length")
    return length


def bins_needed(batch_lengths: Sequence[Sequence[int]], length: int) -> tuple[int, int]:
    """(sequences, segments per sequence) the fullest of these mini-batches needs at ``length``."""
    bins = [first_fit_decreasing(b, length) for b in batch_lengths]
    return max(len(b) for b in bins), max(len(s) for b in bins for s in b)


def shape_for(packing: Packing, length: int, sequences: int, segments: int) -> PackedShape:
    """The packed shape that holds ``sequences`` of ``segments``: whole micro-batches, each a multiple of
    ``packing.multiple`` sequences within its token budget, and a bucketed slot count."""
    q = packing.multiple
    budget = max(q, max(1, packing.micro_batch_tokens // length) // q * q)
    micro_batches = math.ceil(sequences / budget)
    per_micro = math.ceil(math.ceil(sequences / micro_batches) / q) * q
    slots = bucket(segments, SLOT_BUCKETS, "segments per packed sequence")
    return PackedShape(length, micro_batches * per_micro, slots)


def packed_shape(packing: Packing, batch_lengths: Sequence[Sequence[int]], buckets: Sequence[int]) -> PackedShape:
    """The one shape every mini-batch of a collation is packed into, from each mini-batch's turn lengths."""
    longest = max(max(b) for b in batch_lengths)
    length = sequence_length(packing, longest, max(sum(b) for b in batch_lengths), buckets)
    return shape_for(packing, length, *bins_needed(batch_lengths, length))


def pack_rows(rows: Sequence[dict[str, np.ndarray]], shape: PackedShape, pad_id: int) -> dict[str, np.ndarray]:
    """One packed mini-batch from unpadded turn rows (``env_bridge.collate.turn_row`` at each row's own
    length): token fields ``[S, L]`` plus ``segment_ids`` and ``positions``, row fields ``[S, K]``."""
    if any(r["loss_mask"][:1].any() for r in rows):
        raise ValueError("a packed turn needs a prompt: its first token is read off the previous segment")
    bins = first_fit_decreasing([len(r["tokens"]) for r in rows], shape.length)
    if len(bins) > shape.sequences or max(len(b) for b in bins) > shape.slots:
        raise ValueError(f"{len(rows)} rows need {len(bins)} sequences, more than the shape {shape}")
    sample = rows[0]
    out = {k: np.zeros((shape.sequences, shape.length), sample[k].dtype) for k in TOKEN_FIELDS}
    out["tokens"][:] = pad_id
    out["segment_ids"] = np.zeros((shape.sequences, shape.length), np.int32)
    out["positions"] = np.zeros((shape.sequences, shape.length), np.int32)
    row_keys = [k for k in sample if k not in (*TOKEN_FIELDS, "positions")]
    out |= {k: np.zeros((shape.sequences, shape.slots, *sample[k].shape), sample[k].dtype) for k in row_keys}
    for s, members in enumerate(bins):
        start = 0
        for slot, i in enumerate(members):
            row, end = rows[i], start + len(rows[i]["tokens"])
            for k in TOKEN_FIELDS:
                out[k][s, start:end] = row[k]
            out["segment_ids"][s, start:end] = slot + 1
            out["positions"][s, start:end] = np.arange(end - start)
            for k in row_keys:
                out[k][s, slot] = row[k]
            start = end
    return out
