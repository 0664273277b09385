"""ALFWorld through the worker pool: steps/s with 1, 2 and 4 workers and the reset time; prints JSON.

Each run plays the same games (the first ``--games`` of valid_seen, ``--in-flight`` at a time) with the
seeded random policy for ``--turns`` steps each, so every run takes the same steps; the speed-up is
against the 1-worker run of the same script.

    python experiments/bench/env.py [--games 8 --turns 20 --workers 1 2 4]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from env_bridge.check import play_games  # noqa: E402
from env_bridge.games import discover_games  # noqa: E402
from ggtrain.machine import machine_record  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=8)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--in-flight", type=int, default=4, help="games played at once (the same for every run)")
    args = parser.parse_args()
    games = discover_games("valid_seen")[: args.games]
    runs = {}
    for workers in args.workers:
        start = time.perf_counter()
        summary, failures = play_games(
            games, "random", workers, seed=0, max_turns=args.turns, progress=False, in_flight=args.in_flight
        )
        runs[workers] = summary | {"wall_s": time.perf_counter() - start, "failures": len(failures)}
    base = runs[args.workers[0]]["steps_per_s"]
    print(
        json.dumps(
            {
                "benchmark": "env",
                "games": args.games,
                "turns_per_game": args.turns,
                "cpu_count": os.cpu_count(),
                "machine": machine_record(),  # the workers are child processes with this environment
                "runs": {
                    str(w): {k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()}
                    for w, r in runs.items()
                },
                "speedup_steps_per_s": {str(w): round(r["steps_per_s"] / base, 2) for w, r in runs.items()},
                "target": ">= 1.7x at 2 workers on 2 cores",
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
