"""Host-facing convenience API: numpy rows in any order -> numpy advantages in the same order.

Validates the input at the boundary (every error names the field and the offending row), interns the
ids, pads the rows to a bucket so each bucket compiles once, and runs the jitted estimator.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp
import numpy as np

from graph.config import make_config
from graph.estimators import get_estimator, jitted_estimator
from graph.rows import GOAL, ROW_FIELDS, TurnRows

INT_FIELDS = ("group", "traj", "turn", "state", "next_state")
BOOL_FIELDS = ("valid", "row_mask")
MIN_BUCKET = 16


def row_bucket(num_rows: int) -> int:
    """Padded row count: the next power of two, at least MIN_BUCKET (unbounded, unlike the size tables
    of ``models.buckets``, which ``graph`` may not import: it depends on jax only)."""
    return max(MIN_BUCKET, 1 << (max(num_rows, 1) - 1).bit_length())


def _as_array(name: str, value: Any) -> np.ndarray:
    array = np.asarray(value)
    if array.ndim != 1:
        raise ValueError(f"rows[{name!r}] has shape {array.shape}: expected a 1-D array")
    return array


def validate_rows(rows: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Checks the row fields and returns them as numpy arrays (``row_mask`` filled in if absent)."""
    unknown = sorted(set(rows) - set(ROW_FIELDS))
    if unknown:
        raise ValueError(f"unknown row field(s) {unknown}: expected {list(ROW_FIELDS)}")
    missing = [f for f in ROW_FIELDS if f != "row_mask" and f not in rows]
    if missing:
        raise ValueError(f"missing row field(s) {missing}")
    fields = {name: _as_array(name, rows[name]) for name in ROW_FIELDS if name in rows}
    n = len(fields["group"])
    for name, array in fields.items():
        if len(array) != n:
            raise ValueError(f"rows[{name!r}] has {len(array)} entries but rows['group'] has {n}")
    if n == 0:
        raise ValueError("rows are empty: expected at least one row")
    if "row_mask" not in fields:
        fields["row_mask"] = np.ones(n, bool)
    for name in INT_FIELDS:
        array = fields[name]
        if not (np.issubdtype(array.dtype, np.integer) or array.dtype == bool):
            raise ValueError(f"rows[{name!r}] has dtype {array.dtype}: expected integers")
        fields[name] = array.astype(np.int64)
    for name in BOOL_FIELDS:
        array = fields[name]
        if array.dtype != bool:
            bad = np.flatnonzero((array != 0) & (array != 1))
            if bad.size:
                raise ValueError(f"rows[{name!r}][{bad[0]}] = {array[bad[0]].item()!r}: expected a boolean")
        fields[name] = array.astype(bool)
    reward = fields["env_reward"]
    if not np.issubdtype(reward.dtype, np.number) or reward.dtype == bool:
        raise ValueError(f"rows['env_reward'] has dtype {reward.dtype}: expected numbers")
    fields["env_reward"] = reward = reward.astype(np.float64)
    real = fields["row_mask"]
    for name, bad in (
        ("env_reward", ~np.isfinite(reward) & real),
        ("state", (fields["state"] < 0) & real),
        ("next_state", (fields["next_state"] < GOAL) & real),
        ("turn", (fields["turn"] < 0) & real),
    ):
        rows_bad = np.flatnonzero(bad)
        if rows_bad.size:
            r = rows_bad[0]
            raise ValueError(
                f"rows[{name!r}][{r}] = {fields[name][r].item()!r} is not allowed"
                f" ({'non-finite reward' if name == 'env_reward' else 'negative id'})"
            )
    _check_trajectories(fields)
    return fields


def _check_trajectories(fields: dict[str, np.ndarray]) -> None:
    """Each trajectory lies in one group and has turns 0..T-1, each exactly once."""
    real = np.flatnonzero(fields["row_mask"])
    if real.size == 0:
        return
    traj, turn, group = fields["traj"][real], fields["turn"][real], fields["group"][real]
    order = np.lexsort((turn, traj))
    traj_s, turn_s, group_s, rows_s = traj[order], turn[order], group[order], real[order]
    starts = np.concatenate([[True], traj_s[1:] != traj_s[:-1]])
    mixed = ~starts & (group_s != np.roll(group_s, 1))
    if mixed.any():
        r = rows_s[np.flatnonzero(mixed)[0]]
        raise ValueError(
            f"rows['traj'][{r}] = {fields['traj'][r]}: trajectory appears in more than one group"
            f" (rows['group'][{r}] = {fields['group'][r]}); traj ids must be unique in a batch"
        )
    expected = np.arange(len(turn_s)) - np.maximum.accumulate(np.where(starts, np.arange(len(turn_s)), 0))
    wrong = np.flatnonzero(turn_s != expected)
    if wrong.size:
        i = wrong[0]
        r = rows_s[i]
        kind = "duplicate" if i > 0 and not starts[i] and turn_s[i] == turn_s[i - 1] else "gap"
        raise ValueError(
            f"rows['turn'][{r}] = {turn_s[i]}: {kind} in the turn sequence of trajectory"
            f" {traj_s[i]} (expected turn {expected[i]}; turns must be 0..T-1, each once)"
        )


def _dense(values: np.ndarray, keep_goal: bool = False) -> np.ndarray:
    if keep_goal:
        goal = values == GOAL
        _, ids = np.unique(np.where(goal, 0, values), return_inverse=True)
        return np.where(goal, GOAL, ids).astype(np.int32)
    return np.unique(values, return_inverse=True)[1].astype(np.int32)


def to_turn_rows(fields: dict[str, np.ndarray], num_padded: int) -> TurnRows:
    """Interns ids to dense int32 and pads to ``num_padded`` rows (padding has ``row_mask=False``)."""
    n = len(fields["group"])
    states = _dense(np.concatenate([fields["state"], fields["next_state"]]), keep_goal=True)
    arrays = {
        "group": _dense(fields["group"]),
        "traj": _dense(fields["traj"]),
        "turn": fields["turn"].astype(np.int32),
        "state": states[:n],
        "next_state": states[n:],
        "env_reward": fields["env_reward"].astype(np.float32),
        "valid": fields["valid"],
        "row_mask": fields["row_mask"],
    }
    pad = num_padded - n
    padded = {k: np.concatenate([v, np.zeros(pad, v.dtype)]) for k, v in arrays.items()}
    return TurnRows(**{k: jnp.asarray(v) for k, v in padded.items()})


def compute_advantages_with_diagnostics(
    method: str, rows: Mapping[str, Any], **options: Any
) -> tuple[np.ndarray, dict[str, Any]]:
    get_estimator(method)
    config = make_config(**options)
    fields = validate_rows(rows)
    n = len(fields["group"])
    turn_rows = to_turn_rows(fields, row_bucket(n))
    advantage, diagnostics = jitted_estimator(method)(turn_rows, config)
    return np.asarray(advantage)[:n], {k: np.asarray(v) for k, v in diagnostics.items()}


def compute_advantages(method: str, rows: Mapping[str, Any], **options: Any) -> np.ndarray:
    """One advantage per row, in the input order (float32 [R]); padding rows (``row_mask=False``) get 0.

    ``method`` is a registered estimator (``grpo``, ``gigpo``, ``graphgpo``, ``graph_only``); options
    are the fields of :class:`graph.AdvantageConfig`. Raises ``ValueError`` naming the bad field/row.
    """
    return compute_advantages_with_diagnostics(method, rows, **options)[0]
