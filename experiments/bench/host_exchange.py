"""Bytes that cross hosts per iteration at the reference recipe's scale: every host's turns (the exchange
before rows stayed home, ``git show f21f614:ggtrain/train_loop.py``) against what crosses now (each
host's rollout summary and the mini-batch layout's integers). Prints one JSON object.

A turn is pickled as the old exchange pickled it (``RolloutShare`` of ``Turn``s, 64 turns together, as a
host's share is): token ids of English ALFWorld-style text under the Qwen2.5 tokenizer, float32 log-probs,
the response's text. Two sizes: the recipe's maxima (2,048 prompt + 512 response tokens,
``RolloutConfig.max_prompt_tokens`` / ``max_new_tokens``) and the packing bench's medians (510-token
reference prompts, responses uniform on 50-400 tokens: 225). An iteration: ``groups`` x 8 trajectories x
50 turns (the reference: 16 groups, 128 trajectories; every host plays at least one group, so 64 hosts
need 64). Through the coordinator's key-value store each host writes its value once and reads every
peer's: with P hosts and T turns of b bytes the old exchange moved T*b/P out and T*b*(P-1)/P in per host,
P*T*b in all; values of S bytes move S out and (P-1)*S in per host, P**2*S in all.

    python experiments/bench/host_exchange.py [--out experiments/bench/results_host_exchange.json]
"""

from __future__ import annotations

import argparse
import pickle
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from env_bridge.rollout import Episode, Turn  # noqa: E402
from experiments.bench.sides import emit_json  # noqa: E402
from ggtrain.host_batches import bins, needs  # noqa: E402

TEXT = (
    "You are in the middle of a room. Looking quickly around you, you see a cabinet 4, a cabinet 3, a cabinet 2,"
    " a cabinet 1, a coffeemachine 1, a countertop 1, a diningtable 2, a drawer 1, a fridge 1, a garbagecan 1,"
    " a microwave 1, a sinkbasin 1, a stoveburner 2, and a toaster 1. Your task is to: put a clean mug in"
    " coffeemachine. Your admissible actions of the current situation are: 'go to cabinet 1', 'go to fridge 1',"
    " 'open drawer 1', 'inventory', 'look'. <think>The mug is likely on the countertop or in a cabinet; I"
    " should check the countertop first, then clean it at the sinkbasin.</think><action>go to countertop 1"
    "</action> "
)
SIZES = {"maxima": (2048, 512), "medians": (510, 225)}
TURNS_PER_TRAJECTORY = 50  # RolloutConfig.max_turns: failed trajectories use every one
BYTES = 1 << 20


def token_ids(count: int) -> list[int]:
    from models.zoo import qwen25_tokenizer

    ids = qwen25_tokenizer().encode(TEXT, add_special_tokens=False)
    return (ids * (count // len(ids) + 1))[:count]


def reference_turns(prompt: int, response: int, count: int) -> list[Turn]:
    from models.zoo import qwen25_tokenizer

    ids = token_ids(prompt + response)
    text = qwen25_tokenizer().decode(ids[prompt:])
    return [
        Turn(
            group=i // (8 * TURNS_PER_TRAJECTORY),
            traj=i // TURNS_PER_TRAJECTORY,
            turn=i % TURNS_PER_TRAJECTORY,
            prompt_ids=ids[:prompt],
            response_ids=ids[prompt:],
            logprobs=np.random.default_rng(i).uniform(-3, 0, response).astype(np.float32),
            env_reward=0.0,
            valid=True,
            state=i % 7,
            next_state=(i + 1) % 7,
            policy_version=0,
            action="go to countertop 1",
            response_text=text,
        )
        for i in range(count)
    ]


def bytes_per_turn(prompt: int, response: int) -> float:
    """One turn's share of a pickled ``RolloutShare`` of 64 turns, as the old exchange sent them."""
    from ggtrain.train_loop import RolloutShare

    turns = reference_turns(prompt, response, 64)
    episodes = [Episode(0, t, "game", False, TURNS_PER_TRAJECTORY, 0) for t in range(2)]
    return len(pickle.dumps(RolloutShare(turns, episodes, [], 0), protocol=pickle.HIGHEST_PROTOCOL)) / 64


def summary_bytes() -> int:
    """What one host sends per iteration now: its summary (one group's GraphGPO diagnostics), the layout's
    integers (one epoch, packed: batch_needs and packing_bins) and the stop flag."""
    from ggtrain.config import TrainConfig
    from ggtrain.train_loop import RolloutShare, advantages_of, summarize

    turns = reference_turns(64, 8, 8 * TURNS_PER_TRAJECTORY)  # one group; only its ids and states matter here
    _, diagnostics, _ = advantages_of(TrainConfig(estimator="graphgpo"), turns)
    episodes = [Episode(0, t, "game", False, TURNS_PER_TRAJECTORY, 3) for t in range(8)]
    summary = summarize(RolloutShare(turns, episodes, [], 0), diagnostics)
    lengths = [2560] * len(turns)
    plan = [list(range(i, min(i + 128, len(turns)))) for i in range(0, len(turns), 128)]
    values: list[Any] = [summary, [needs(plan, lengths)], [bins(plan, lengths, 4096)], ""]
    return sum(len(pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL)) for v in values)


def per_iteration(hosts: int, turn_bytes: float, small: int) -> dict[str, Any]:
    groups = max(16, hosts)
    total = groups * 8 * TURNS_PER_TRAJECTORY * turn_bytes
    return {
        "hosts": hosts,
        "groups": groups,
        "turns": groups * 8 * TURNS_PER_TRAJECTORY,
        "turns_exchanged_MiB": {
            "per_host_out": round(total / hosts / BYTES, 2),
            "per_host_in": round(total * (hosts - 1) / hosts / BYTES, 2),
            "coordinator_in_and_out": round(hosts * total / BYTES, 1),
        },
        "rows_at_home_KiB": {
            "per_host_out": round(small / 1024, 2),
            "per_host_in": round((hosts - 1) * small / 1024, 2),
            "coordinator_in_and_out": round(hosts**2 * small / 1024, 1),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    small = summary_bytes()
    out: dict[str, Any] = {"small_values_bytes_per_host_per_iteration": small}
    for name, (prompt, response) in SIZES.items():
        b = bytes_per_turn(prompt, response)
        out[name] = {
            "prompt_tokens": prompt,
            "response_tokens": response,
            "bytes_per_turn": round(b, 1),
            "per_iteration": [per_iteration(p, b, small) for p in (2, 16, 64)],
        }
    emit_json(out, args.out)


if __name__ == "__main__":
    main()
