"""ALFWorld reset time, TextWorld as shipped against the memoized PDDL translation; prints JSON.

Both sides reset the same ``--games`` valid_seen games ``--repeats`` times each, in this process, one
env, in the same order (a group's rollouts reset the same game one after another). The first reset of a
game is a "new" reset, the others "repeat" resets. One untimed reset of another game warms imports and
files first; the sides then alternate for ``--rounds`` rounds (the memo emptied before each of its
rounds). Ratios are shipped seconds over memoized seconds.

    python experiments/bench/alfworld_reset.py [--games 8 --repeats 4 --rounds 2]
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
from ggtrain.machine import machine_record  # noqa: E402


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
    parser.add_argument("--repeats", type=int, default=4, help="resets per game (a group's rollouts), at least 2")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if args.repeats < 2 or args.games < 1 or args.rounds < 1:
        parser.error(f"--repeats {args.repeats} --games {args.games} --rounds {args.rounds}: need >= 2, >= 1, >= 1")
    import fast_downward

    games = discover_games("valid_seen")[: args.games + 1]
    paths = [str(g.path) for g in games[1:]]
    shipped_translation = fast_downward.pddl2sas
    shipped_translation.memoized_by_ggtrain = True  # keeps AlfworldEnv.reset from installing the memo
    time_resets([str(games[0].path)], 2)  # warm-up
    sides: dict[str, list[dict[str, Any]]] = {"shipped": [], "memoized": []}
    for _ in range(args.rounds):
        fast_downward.pddl2sas = shipped_translation
        sides["shipped"].append(time_resets(paths, args.repeats))
        shipped_translation.memoized_by_ggtrain = False
        pddl_translation.install()  # a fresh memo over the shipped translation
        shipped_translation.memoized_by_ggtrain = True
        sides["memoized"].append(time_resets(paths, args.repeats))
    keys = ("new_reset_s", "repeat_reset_s")
    means = {side: {k: statistics.mean(r[k] for r in rounds) for k in keys} for side, rounds in sides.items()}
    record = {"benchmark": "alfworld_reset", "games": args.games, "repeats": args.repeats, "rounds": args.rounds}
    record |= {"machine": machine_record()}
    record |= {side: {k: round(v, 3) for k, v in m.items()} for side, m in means.items()}
    record["speedup"] = {k: round(means["shipped"][k] / means["memoized"][k], 2) for k in keys}
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
