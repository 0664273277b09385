"""ALFWorld step time, TextWorld's text generation as shipped against ``env_bridge.textworld_textgen``
(memoized parses, shallow context copies); prints JSON.

Both sides play the same ``--games`` valid_seen games (every sixth, so all task types) for ``--steps``
random admissible commands each (seeded), in this process, one env. Resets are not timed (the PDDL
translation memo is on for both). One untimed game warms imports first; the sides then alternate for
``--rounds`` rounds, the memo emptied before each of its rounds. Both sides' observations are hashed:
they must be equal. Ratios are shipped seconds over faster seconds.

    python experiments/bench/alfworld_step.py [--games 6 --steps 30 --rounds 2]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from env_bridge import textworld_textgen  # noqa: E402
from env_bridge.envs import AlfworldEnv  # noqa: E402
from env_bridge.games import discover_games  # noqa: E402
from ggtrain.machine import machine_record  # noqa: E402


def time_steps(paths: list[str], steps: int) -> dict[str, Any]:
    seconds, seen = 0.0, []
    for index, path in enumerate(paths):
        env = AlfworldEnv()
        result = env.reset(path, index)
        rng = random.Random(index)
        start = time.perf_counter()
        for _ in range(steps):
            result = env.step(rng.choice(result.admissible))
            seen.append((result.observation, result.admissible, result.won))
        seconds += time.perf_counter() - start
        env.close()
    digest = hashlib.sha256(repr(seen).encode()).hexdigest()[:16]
    return {"step_s": seconds / (steps * len(paths)), "steps": steps * len(paths), "outcomes_sha256": digest}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=6)
    parser.add_argument("--steps", type=int, default=30, help="random admissible commands per game")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if min(args.games, args.steps, args.rounds) < 1:
        parser.error(f"--games {args.games} --steps {args.steps} --rounds {args.rounds}: each must be >= 1")
    install = textworld_textgen.install
    shipped = textworld_textgen.shipped_functions()
    textworld_textgen.install = lambda: None  # AlfworldEnv.reset keeps what this bench sets
    games = discover_games("valid_seen")
    paths = [str(g.path) for g in games[6 : 6 * (args.games + 1) : 6]]
    time_steps([str(games[0].path)], 5)  # warm-up, with the faster functions
    sides: dict[str, list[dict[str, Any]]] = {"shipped": [], "faster": []}
    for _ in range(args.rounds):
        for (module, name), function in shipped.items():
            setattr(module, name, function)
        sides["shipped"].append(time_steps(paths, args.steps))
        install()  # a fresh memo over the shipped parsers, and the shallow copies
        assert all(getattr(*key) is not function for key, function in shipped.items())
        sides["faster"].append(time_steps(paths, args.steps))
    digests = {r["outcomes_sha256"] for rounds in sides.values() for r in rounds}
    means = {side: statistics.mean(r["step_s"] for r in rounds) for side, rounds in sides.items()}
    record = {"benchmark": "alfworld_step", "games": len(paths), "steps_per_game": args.steps, "rounds": args.rounds}
    record |= {"machine": machine_record(), "outcomes_equal": len(digests) == 1, "outcomes_sha256": sorted(digests)}
    record |= {f"{side}_step_s": round(v, 4) for side, v in means.items()}
    record["speedup"] = round(means["shipped"] / means["faster"], 2)
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
