"""The memory plan lowers the layout the trainer runs: with ``--packed-slots`` the batch carries segment ids,
positions and ``[S, K]`` row tables, and a packed micro-batch needs what a padded one of the same token
positions needs (the recommendation table holds for packed updates)."""

from __future__ import annotations

import dataclasses

import jax

from experiments.plan_memory import Plan, lower_train_step
from models.config import tiny_llama

PLAN = Plan("tiny", data=1, fsdp=1, tensor=1, micro_rows=4, seq=128, remat=True, dtype="float32")
MODEL = tiny_llama(512, 64, 128, 4, 2, 4096, eos_token_id=1).replace(remat=True)


def _memory(plan: Plan):
    return lower_train_step(plan, jax.devices()[:1], MODEL).compile().memory_analysis()


def test_packed_plan_lowers_segment_ids_and_costs_what_padded_rows_cost():
    padded, packed = _memory(PLAN), _memory(dataclasses.replace(PLAN, packed_slots=4))
    segment_ids = PLAN.micro_rows * PLAN.seq * 4  # int32 [S, L]; positions follow from them (jit drops them)
    row_tables = PLAN.micro_rows * (4 - 1) * 4  # at least the float32 advantages gain 3 slots a sequence
    assert packed.argument_size_in_bytes - padded.argument_size_in_bytes >= segment_ids + row_tables
    assert abs(packed.temp_size_in_bytes - padded.temp_size_in_bytes) <= 0.05 * padded.temp_size_in_bytes
