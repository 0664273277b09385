"""Advantage-estimator benchmark: prints one JSON object (and writes it to ``--out``).

For each estimator on 16 groups x 8 trajectories x 50 turns (6,400 rows): compile time, then median
and p95 milliseconds per call of the jitted function (device arrays in, block until ready) and of the
host API ``compute_advantages`` (validation, interning, padding, transfer included); the same batch
through the plain-Python reference of the tests, in the same process, and the ratios. Every ratio is
between two figures measured in this run; the published recipe's time is recorded as a quoted figure
only. The JSON records the machine (CPU model, vector extensions, thread settings).

    python experiments/bench/advantages.py --out experiments/bench/results_advantages_cpu.json
        [--repeats 50] [--groups 16 --trajectories 8 --turns 50]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from experiments.bench.sides import emit_json  # noqa: E402
from experiments.bench.synthetic_rows import alfworld_like_rows  # noqa: E402
from ggtrain.machine import machine_record  # noqa: E402
from graph import compute_advantages, jitted_estimator, make_config, row_bucket  # noqa: E402
from graph.host_api import to_turn_rows, validate_rows  # noqa: E402
from tests.reference_advantages import reference_advantages  # noqa: E402

METHODS = ("grpo", "gigpo", "graphgpo", "graph_only")
# A figure quoted in issue #2 (the PyTorch reference recipe on a 5,570-row batch), not measured here: that
# recipe does not run in this repository, so no ratio against it is computed.
QUOTED_PUBLISHED_RECIPE = {
    "published_recipe_ms": 930.0,
    "rows": 5570,
    "source": "quoted in issue #2; not measured by this benchmark, no ratio computed against it",
}


def _times_ms(fn, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1e3)
    return out


def _summary(times: list[float]) -> dict[str, float]:
    return {"median_ms": round(statistics.median(times), 3), "p95_ms": round(float(np.percentile(times, 95)), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--reference-repeats", type=int, default=5)
    parser.add_argument("--groups", type=int, default=16)
    parser.add_argument("--trajectories", type=int, default=8)
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON to this file")
    args = parser.parse_args()

    rows = alfworld_like_rows(args.groups, args.trajectories, args.turns)
    n = len(rows["group"])
    turn_rows = to_turn_rows(validate_rows(rows), row_bucket(n))
    config = make_config()
    results = {}
    for method in METHODS:
        fn = jitted_estimator(method)
        start = time.perf_counter()
        jax.block_until_ready(fn(turn_rows, config))
        compile_s = time.perf_counter() - start
        jitted = _times_ms(lambda fn=fn: jax.block_until_ready(fn(turn_rows, config)), args.repeats)
        host = _times_ms(lambda m=method: compute_advantages(m, rows), args.repeats)
        reference = _times_ms(lambda m=method: reference_advantages(m, rows), args.reference_repeats)
        ours = np.asarray(compute_advantages(method, rows))
        max_diff = float(np.max(np.abs(ours - np.asarray(reference_advantages(method, rows)))))
        results[method] = {
            "compile_s": round(compile_s, 3),
            "jitted": _summary(jitted),
            "host_api": _summary(host),
            "python_reference": _summary(reference),
            "speedup_vs_python_reference_jitted": round(statistics.median(reference) / statistics.median(jitted), 2),
            "speedup_vs_python_reference_host_api": round(statistics.median(reference) / statistics.median(host), 2),
            "max_abs_diff_vs_reference": max_diff,
        }
    emit_json(
        {
            "benchmark": "advantages",
            "rows": n,
            "padded_rows": row_bucket(n),
            "shape": {"groups": args.groups, "trajectories": args.trajectories, "turns": args.turns},
            "machine": machine_record(),
            "repeats": args.repeats,
            "reference_repeats": args.reference_repeats,
            "target": "graphgpo jitted median < 10 ms on 2 CPU cores",
            "estimators": results,
            "quoted_not_measured": QUOTED_PUBLISHED_RECIPE,
        },
        args.out,
    )


if __name__ == "__main__":
    main()
