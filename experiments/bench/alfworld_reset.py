"""ALFWorld reset time, TextWorld as shipped against the memoized PDDL translation; prints JSON.

Both sides reset the same ``--games`` valid_seen games ``--repeats`` times each, in this process, one
env, in the same order (a group's rollouts reset the same game one after another). The first reset of a
game is a "new" reset, the others "repeat" resets. Ratios are shipped seconds over memoized seconds.

    python experiments/bench/alfworld_reset.py [--games 8 --repeats 4]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from env_bridge import pddl_translation  # noqa: E402
from env_bridge.envs import AlfworldEnv  # noqa: E402
from env_bridge.games import discover_games  # noqa: E402
from experiments.bench.machine import machine_record  # noqa: E402


def time_resets(paths: list[str], repeats: int) -> dict[str, Any]:
    env = AlfworldEnv()
    new: list[float] = []
    repeat: list[float] = []
    for path in paths:
        for seed in range(repeats):
            start = time.perf_counter()
            env.reset(path, seed)
            (repeat if seed else new).append(time.perf_counter() - start)
    env.close()
    return {"new_reset_s": statistics.mean(new), "repeat_reset_s": statistics.mean(repeat), "resets": len(new + repeat)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=4, help="resets per game (a group's rollouts)")
    args = parser.parse_args()
    import fast_downward

    paths = [str(g.path) for g in discover_games("valid_seen")[: args.games]]
    shipped_translation = fast_downward.pddl2sas
    shipped_translation.memoized_by_ggtrain = True  # keeps AlfworldEnv.reset from installing the memo
    shipped = time_resets(paths, args.repeats)
    shipped_translation.memoized_by_ggtrain = False
    pddl_translation.install()
    memoized = time_resets(paths, args.repeats)
    rounded = {
        side: {k: round(v, 3) for k, v in r.items()} for side, r in (("shipped", shipped), ("memoized", memoized))
    }
    ratios = {k: round(shipped[k] / memoized[k], 2) for k in ("new_reset_s", "repeat_reset_s")}
    print(
        json.dumps(
            {
                "benchmark": "alfworld_reset",
                "games": args.games,
                "repeats": args.repeats,
                "machine": machine_record(),
                **rounded,
                "speedup": ratios,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
