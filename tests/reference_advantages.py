"""A plain-Python reference of ALGORITHMS.md §1-§5 (dicts, heapq Dijkstra, float64).

Deliberately written without numpy or JAX and without sharing code with ``graph/``: the property tests
compare the jitted estimators against it, and the advantage benchmark times it as the peer.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict

GOAL = -1
DEFAULTS = {
    "episode_weighting": "trajectory",
    "mode": "mean_std",
    "omega": 0.1,
    "gamma": 0.95,
    "beta_graph": 1.0,
    "beta_episode": 1.0,
    "step_weight": 1.0,
    "invalid_penalty": 0.1,
    "paper_cost": False,
    "normalize_distance": False,
    "graph_reward_scale": 10.0,
    "epsilon": 1e-6,
}


def _normalize(samples: dict, mode: str, eps: float, singleton_raw: bool) -> dict:
    """samples: key -> (list of (sample_id, value)); returns sample_id -> normalized value."""
    out = {}
    for members in samples.values():
        values = [v for _, v in members]
        if len(values) == 1:
            out[members[0][0]] = values[0] if singleton_raw else 0.0
            continue
        if len(set(values)) == 1:
            for sid, _ in members:
                out[sid] = 0.0
            continue
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
        for sid, v in members:
            out[sid] = (v - mean) / (std + eps) if mode == "mean_std" else v - mean
    return out


def _rows(rows: dict) -> list[dict]:
    n = len(rows["group"])
    mask = rows.get("row_mask", [True] * n)
    out = []
    for i in range(n):
        if not bool(mask[i]):
            continue
        out.append(
            {
                "i": i,
                "group": int(rows["group"][i]),
                "traj": int(rows["traj"][i]),
                "turn": int(rows["turn"][i]),
                "state": int(rows["state"][i]),
                "next_state": int(rows["next_state"][i]),
                "reward": float(rows["env_reward"][i]),
                "valid": bool(rows["valid"][i]),
            }
        )
    return out


def episode_advantage(rows: list[dict], o: dict) -> dict:
    p = o["invalid_penalty"]
    ret = defaultdict(float)
    for r in rows:
        ret[r["traj"]] += r["reward"]
    if o["episode_weighting"] == "turn":
        samples = defaultdict(list)
        for r in rows:
            samples[r["group"]].append((r["i"], ret[r["traj"]] - (0.0 if r["valid"] else p)))
        return _normalize(samples, o["mode"], o["epsilon"], singleton_raw=True)
    samples = defaultdict(list)
    seen = set()
    for r in rows:
        if r["traj"] not in seen:
            seen.add(r["traj"])
            samples[r["group"]].append((r["traj"], ret[r["traj"]]))
    per_traj = _normalize(samples, o["mode"], o["epsilon"], singleton_raw=True)
    return {r["i"]: per_traj[r["traj"]] - (0.0 if r["valid"] else p) for r in rows}


def step_returns(rows: list[dict], gamma: float) -> dict:
    by_traj = defaultdict(list)
    for r in rows:
        by_traj[r["traj"]].append(r)
    out = {}
    for members in by_traj.values():
        g = 0.0
        for r in sorted(members, key=lambda r: -r["turn"]):
            g = r["reward"] + gamma * g
            out[r["i"]] = g
    return out


def distances_to_goal(rows: list[dict]) -> dict:
    """(group, node) -> fewest edges to the goal, Dijkstra with heapq on the reversed graph."""
    reverse = defaultdict(list)
    nodes = set()
    for r in rows:
        a, b = (r["group"], r["state"]), (r["group"], r["next_state"])
        nodes.update((a, b))
        reverse[b].append(a)
    dist = {}
    heap = [(0, node) for node in nodes if node[1] == GOAL]
    while heap:
        d, node = heapq.heappop(heap)
        if node in dist:
            continue
        dist[node] = d
        for prev in reverse[node]:
            if prev not in dist:
                heapq.heappush(heap, (d + 1, prev))
    d_max = defaultdict(int)
    for (g, _), d in dist.items():
        d_max[g] = max(d_max[g], d)
    return {node: dist.get(node, d_max[node[0]] + 1) for node in nodes}


def graph_advantage(rows: list[dict], o: dict) -> dict:
    dist = distances_to_goal(rows)
    samples = defaultdict(list)
    for r in rows:
        d_next = dist[(r["group"], r["next_state"])]
        if o["normalize_distance"]:
            exponent = d_next - dist[(r["group"], r["state"])] + 1
        elif o["paper_cost"]:
            exponent = d_next + 1
        else:
            exponent = d_next
        value = o["graph_reward_scale"] * o["omega"] ** exponent - (0.0 if r["valid"] else o["invalid_penalty"])
        samples[(r["group"], r["state"])].append((r["i"], value))
    return _normalize(samples, o["mode"], o["epsilon"], singleton_raw=False)


def reference_advantages(method: str, rows: dict, **options) -> list[float]:
    o = dict(DEFAULTS, **options)
    real = _rows(rows)
    out = [0.0] * len(rows["group"])
    if method == "graph_only":
        method, o["beta_graph"], o["beta_episode"] = "graphgpo", 1.0, 0.0
    if method == "grpo":
        values = episode_advantage(real, o)
    elif method == "gigpo":
        episode = episode_advantage(real, o)
        g = step_returns(real, o["gamma"])
        samples = defaultdict(list)
        for r in real:
            samples[(r["group"], r["state"])].append(
                (r["i"], g[r["i"]] - (0.0 if r["valid"] else o["invalid_penalty"]))
            )
        step = _normalize(samples, o["mode"], o["epsilon"], singleton_raw=False)
        values = {i: episode[i] + o["step_weight"] * step[i] for i in episode}
    elif method == "graphgpo":
        graph = graph_advantage(real, o)
        episode = episode_advantage(real, o) if o["beta_episode"] else defaultdict(float)
        values = {i: o["beta_graph"] * graph[i] + o["beta_episode"] * episode[i] for i in graph}
    else:
        raise ValueError(method)
    for i, v in values.items():
        out[i] = v
    return out
