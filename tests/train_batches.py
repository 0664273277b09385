"""Synthetic turn batches with real token layouts (prompt, then the turn's response) for update tests."""

from __future__ import annotations

import numpy as np

from env_bridge.collate import pad_rows
from env_bridge.rollout import Turn


def synthetic_turn_batch(
    groups: int = 2,
    trajs_per_group: int = 4,
    max_turns: int = 3,
    length: int = 24,
    vocab: int = 512,
    seed: int = 0,
    rows: int | None = None,
) -> dict[str, np.ndarray]:
    """Variable-length trajectories; roughly half of each group wins (reward 10 on its last turn).
    ``rows`` pads with padding rows (``row_mask`` False) up to that many."""
    rng = np.random.default_rng(seed)
    out: dict[str, list] = {
        k: []
        for k in (
            "tokens",
            "attention_mask",
            "loss_mask",
            "old_logp",
            "group",
            "traj",
            "turn",
            "state",
            "next_state",
            "env_reward",
            "valid",
            "row_mask",
        )
    }
    traj_id = 0
    for g in range(groups):
        for t in range(trajs_per_group):
            won = (t % 2 == 0) if t < 2 else bool(rng.random() < 0.5)
            turns = int(rng.integers(1, max_turns + 1))
            state = 0
            for k in range(turns):
                prompt = int(rng.integers(4, length // 2))
                response = int(rng.integers(2, length - prompt))
                tokens = np.zeros(length, np.int32)
                tokens[: prompt + response] = rng.integers(10, vocab, prompt + response)
                attn = np.zeros(length, bool)
                attn[: prompt + response] = True
                loss = np.zeros(length, bool)
                loss[prompt : prompt + response] = True
                last = k == turns - 1
                nxt = -1 if (won and last) else int(rng.integers(0, 4))
                out["tokens"].append(tokens)
                out["attention_mask"].append(attn)
                out["loss_mask"].append(loss)
                out["old_logp"].append(np.where(loss, rng.uniform(-3.0, -0.5, length), 0.0).astype(np.float32))
                out["group"].append(g)
                out["traj"].append(traj_id)
                out["turn"].append(k)
                out["state"].append(state)
                out["next_state"].append(nxt)
                out["env_reward"].append(10.0 if (won and last) else 0.0)
                out["valid"].append(bool(rng.random() > 0.1))
                out["row_mask"].append(True)
                state = max(nxt, 0)
            traj_id += 1
    batch = {k: np.asarray(v) for k, v in out.items()}
    batch["env_reward"] = batch["env_reward"].astype(np.float32)
    for k in ("group", "traj", "turn", "state", "next_state"):
        batch[k] = batch[k].astype(np.int32)
    if rows is not None:
        batch = pad_rows(batch, rows)
    return batch


def batch_turns(batch: dict[str, np.ndarray]) -> list[Turn]:
    """The real rows of a turn batch as the rollout's ``Turn`` records, for ``collate_turns``."""
    turns = []
    for r in np.flatnonzero(batch["row_mask"]):
        response = np.flatnonzero(batch["loss_mask"][r])
        start, end = int(response[0]), int(response[-1]) + 1
        turns.append(
            Turn(
                group=int(batch["group"][r]),
                traj=int(batch["traj"][r]),
                turn=int(batch["turn"][r]),
                prompt_ids=batch["tokens"][r, :start].tolist(),
                response_ids=batch["tokens"][r, start:end].tolist(),
                logprobs=batch["old_logp"][r, start:end],
                env_reward=float(batch["env_reward"][r]),
                valid=bool(batch["valid"][r]),
                state=int(batch["state"][r]),
                next_state=int(batch["next_state"][r]),
                policy_version=0,
                action="",
                response_text="",
            )
        )
    return turns
