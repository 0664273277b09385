"""Each host's mini-batches of its own turns, laid out alike on every host.

Task groups are whole on their host and their advantages are computed there, so no host needs another
host's turns: each collates its own into its share of every optimizer step, ``mini_batch_rows /
process_count`` rows shuffled by the epoch's collate seed, and contributes them as its block of the
global mini-batch (``ggtrain.sharding.shard_batch``). What crosses hosts is a few integers per epoch,
from which every host derives the same mini-batch count and shape: the count is the most any host has
(a host with fewer adds mini-batches of padding rows, which train nothing: every loss normalizer is a
sum over the global mini-batch, inside the jitted step); the padded shape is the longest turn's length
bucket; the packed shape is the sequence length from the longest turn and the fullest mini-batch, then,
in a second exchange, the sequences and slots the fullest host needs at that length.

With one process this is ``collate_turns``: the same plan, shape and batches. With several, a global
mini-batch is each host's own shuffle of its own rows side by side. With one mini-batch per epoch that
is the same set of rows as one host's, so the update is the same up to the order of float sums; with
several, which turns share an optimizer step differs from a one-host run (and with it every step after
the first), though every turn is still trained once per epoch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from env_bridge.collate import LENGTH_BUCKETS, PaddedShape, length_bucket, mini_batch_plan, turn_lengths
from env_bridge.packing import PackedShape, Packing, bins_needed, sequence_length, shape_for
from env_bridge.rollout import Turn
from ggtrain.host_exchange import HostExchange

Plan = list[list[int]]  # each mini-batch's turns, as indices into the host's turns


@dataclasses.dataclass(frozen=True)
class Epoch:
    """One epoch of one host's update: its plan, the mini-batch count every host runs, and their shape."""

    plan: Plan
    batches: int
    shape: PaddedShape | PackedShape


def turns_with_signal(turns: Sequence[Turn], advantages: np.ndarray) -> tuple[list[Turn], np.ndarray]:
    """The turns whose advantage is not 0, in their order, with their advantages
    (``BatchConfig.drop_zero_advantage_turns``)."""
    keep = np.flatnonzero(np.asarray(advantages) != 0)
    return [turns[int(i)] for i in keep], np.asarray(advantages)[keep]


def host_rows(mini_batch_rows: int, processes: int) -> int:
    """Rows of each mini-batch one host contributes (``check_config`` makes it a whole number)."""
    return mini_batch_rows // processes


def needs(plan: Plan, lengths: Sequence[int]) -> tuple[int, int, int]:
    """What a plan asks of the common layout: (mini-batches, longest turn, fullest mini-batch's tokens)."""
    if not plan:
        return 0, 0, 0
    return len(plan), max(lengths[i] for b in plan for i in b), max(sum(lengths[i] for i in b) for b in plan)


def bins(plan: Plan, lengths: Sequence[int], length: int) -> tuple[int, int]:
    """(sequences, slots) a plan's fullest mini-batch needs when packed at ``length``; a plan without turns
    still fills its mini-batches with one padding segment each: one sequence, one slot."""
    return bins_needed([[lengths[i] for i in b] for b in plan], length) if plan else (1, 1)


def most_of(everyone: list[list[tuple[int, ...]]]) -> list[tuple[int, ...]]:
    """Per epoch, the elementwise maximum over hosts of the hosts' tuples (``everyone[host][epoch]``)."""
    return [tuple(max(values) for values in zip(*per_host, strict=True)) for per_host in zip(*everyone, strict=True)]


def host_epochs(
    host: HostExchange,
    turns: Sequence[Turn],
    rows: int,
    seeds: Sequence[int],
    whole_groups: bool,
    packing: Packing | None,
) -> list[Epoch]:
    """This host's plan for each epoch (``seeds``: one collate seed each) and the mini-batch count and
    shape every host agrees on. Collective: every host calls it at the same point."""
    plans = [mini_batch_plan(turns, rows, seed, whole_groups) for seed in seeds]
    lengths = turn_lengths(turns)
    agreed = most_of(host.exchange("batch_needs", [needs(plan, lengths) for plan in plans]))
    if packing is None:
        shapes = [PaddedShape(rows, length_bucket(longest)) for _, longest, _ in agreed]
        return [Epoch(p, n, shape) for p, (n, _, _), shape in zip(plans, agreed, shapes, strict=True)]
    sequence = [sequence_length(packing, longest, fullest, LENGTH_BUCKETS) for _, longest, fullest in agreed]
    packed = most_of(host.exchange("packing_bins", [bins(p, lengths, n) for p, n in zip(plans, sequence, strict=True)]))
    return [
        Epoch(plan, n, shape_for(packing, length, sequences, slots))
        for plan, (n, _, _), length, (sequences, slots) in zip(plans, agreed, sequence, packed, strict=True)
    ]
