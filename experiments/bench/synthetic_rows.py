"""ALFWorld-shaped synthetic turn rows for benchmarks: random walks on a per-group state graph."""

from __future__ import annotations

import numpy as np


def alfworld_like_rows(
    groups: int = 16,
    trajectories: int = 8,
    turns: int = 50,
    states: int = 60,
    win_rate: float = 0.5,
    invalid_rate: float = 0.05,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """``groups * trajectories * turns`` rows in shuffled order. Each group walks a random sparse graph
    of ``states`` states (so states recur across trajectories); a won trajectory reaches the goal on its
    last turn with reward 10."""
    rng = np.random.default_rng(seed)
    out: dict[str, list] = {k: [] for k in ("group", "traj", "turn", "state", "next_state", "env_reward", "valid")}
    for g in range(groups):
        successors = rng.integers(0, states, size=(states, 4))
        for t in range(trajectories):
            won = rng.random() < win_rate
            s = int(rng.integers(0, 3))
            for k in range(turns):
                last = k == turns - 1
                nxt = -1 if (won and last) else int(successors[s, rng.integers(0, 4)])
                out["group"].append(g)
                out["traj"].append(g * trajectories + t)
                out["turn"].append(k)
                out["state"].append(s)
                out["next_state"].append(nxt)
                out["env_reward"].append(10.0 if (won and last) else 0.0)
                out["valid"].append(rng.random() >= invalid_rate)
                s = nxt
    order = rng.permutation(len(out["group"]))
    return {k: np.asarray(v)[order] for k, v in out.items()}
