"""Playing games through the worker pool without a model: ``ggtrain env check`` and the env benchmark.

``walkthrough`` replays each game's stored expert route (the turn limit is lifted to its length);
``random`` picks admissible commands with a seeded RNG for at most ``max_turns`` steps.
"""

from __future__ import annotations

import json
import random
import sys
import time
import zlib
from typing import Any

from env_bridge.games import Game, walkthrough
from env_bridge.worker_pool import EnvPool, Failure, Op


def play_games(
    games: list[Game],
    policy: str,
    workers: int,
    seed: int = 0,
    max_turns: int = 50,
    progress: bool = True,
    in_flight: int | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """Returns ``(summary, failures)``: the summary has exactly the keys ``ggtrain env check`` prints.

    ``in_flight`` games (default: one per worker) are played at once; the random policy's choice depends
    only on (seed, game, turn), so results do not depend on the worker count."""
    in_flight = in_flight or workers
    if policy not in ("walkthrough", "random"):
        raise ValueError(f"policy {policy!r}: expected 'walkthrough' or 'random'")
    from tqdm import tqdm

    won = steps = 0
    step_seconds = 0.0
    reset_seconds: list[float] = []
    failures: list[str] = []
    bar = tqdm(
        total=len(games), desc=f"env check ({policy})", unit="game", file=sys.stderr, disable=None if progress else True
    )
    with EnvPool("alfworld", workers) as pool:
        for start in range(0, len(games), in_flight):
            batch = games[start : start + in_flight]
            plans = [walkthrough(g) if policy == "walkthrough" else [] for g in batch]
            limit = max((len(p) for p in plans), default=0) if policy == "walkthrough" else max_turns
            t0 = time.perf_counter()
            results = pool.run([Op(s, "reset", str(g.path), seed) for s, g in enumerate(batch)])
            # resets run in parallel across workers: a worker does ceil(len(batch) / workers) of them
            per_worker = -(-len(batch) // workers)
            reset_seconds += [(time.perf_counter() - t0) / per_worker] * len(batch)
            live = {s for s, r in enumerate(results) if not isinstance(r, Failure)}
            failures += [f"{batch[s].game_id}: {r.reason}" for s, r in enumerate(results) if isinstance(r, Failure)]
            current = dict(enumerate(results))
            for t in range(limit):
                ops = []
                for s in sorted(live):
                    if policy == "walkthrough":
                        if t >= len(plans[s]):
                            continue
                        action = plans[s][t]
                    else:
                        rng = random.Random(zlib.crc32(f"{seed}/{batch[s].game_id}/{t}".encode()))
                        action = rng.choice(current[s].admissible)  # type: ignore[union-attr]
                    ops.append(Op(s, "step", action=action))
                if not ops:
                    break
                t0 = time.perf_counter()
                stepped = pool.run(ops)
                step_seconds += time.perf_counter() - t0
                for op, r in zip(ops, stepped, strict=True):
                    if isinstance(r, Failure):
                        failures.append(f"{batch[op.slot].game_id}: {r.reason}")
                        live.discard(op.slot)
                        continue
                    steps += 1
                    current[op.slot] = r
                    if r.won or r.done:
                        won += int(r.won)
                        live.discard(op.slot)
            bar.update(len(batch))
        restarts = pool.restarts
    bar.close()
    summary: dict[str, Any] = {
        "games": len(games),
        "games_won": won,
        "steps": steps,
        "steps_per_s": steps / step_seconds if step_seconds else 0.0,
        "reset_s_mean": sum(reset_seconds) / max(len(reset_seconds), 1),
        "worker_restarts": restarts,
    }
    return summary, failures


def print_json_line(result: dict[str, Any]) -> None:
    print(json.dumps(result))
