"""The oracle batches of ALGORITHMS.md §6 as row dicts (GOAL = -1)."""

from __future__ import annotations

S = -1


def case_e1() -> dict:
    """Fan-out, all succeed: t0: s0->S; t1: s0->s1->S; t2: s0->s2->s1->S (rows t0, t1a, t1b, t2a-c)."""
    return dict(
        group=[0] * 6,
        traj=[0, 1, 1, 2, 2, 2],
        turn=[0, 0, 1, 0, 1, 2],
        state=[0, 0, 1, 0, 2, 1],
        next_state=[S, 1, S, 2, 1, S],
        env_reward=[10.0, 0, 10, 0, 0, 10],
        valid=[True] * 6,
    )


def case_e2() -> dict:
    """Unequal lengths: t0: s0->S (won); t1: s0->s1->s2->s3 (lost)."""
    return dict(
        group=[0] * 4,
        traj=[0, 1, 1, 1],
        turn=[0, 0, 1, 2],
        state=[0, 0, 1, 2],
        next_state=[S, 1, 2, 3],
        env_reward=[10.0, 0, 0, 0],
        valid=[True] * 4,
    )


def case_e3() -> dict:
    """All fail, one invalid row: t0: s0->s1->s2; t1: s0 -(invalid)-> s3 -> s1."""
    return dict(
        group=[0] * 4,
        traj=[0, 0, 1, 1],
        turn=[0, 1, 0, 1],
        state=[0, 1, 0, 3],
        next_state=[1, 2, 3, 1],
        env_reward=[0.0] * 4,
        valid=[True, True, False, True],
    )


def case_e5() -> dict:
    """Plain GRPO: four one-turn trajectories with returns [10, 0, 0, 0]."""
    return dict(
        group=[0] * 4,
        traj=[0, 1, 2, 3],
        turn=[0] * 4,
        state=[0, 1, 2, 3],
        next_state=[S, 4, 5, 6],
        env_reward=[10.0, 0, 0, 0],
        valid=[True] * 4,
    )
