"""The estimators compared where learning is visible in minutes on a CPU: GRPO, GiGPO, GraphGPO, graph-only
and GGPO x 5 seeds on the built-in ring world with ``tiny-ring`` (``configs/builtin_ring.gin``), then one
report over all runs. Resumable: finished runs are skipped, interrupted ones resumed.

    python experiments/builtin_comparison.py --out experiments/results/builtin_comparison
    python experiments/builtin_comparison.py --methods graphgpo grpo --seeds 0 1 --iterations 5 --out /tmp/cmp
    python experiments/builtin_comparison.py --methods ggpo --set LossConfig.ggpo_beta=1.0 --out runs/ggpo_beta1
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ggtrain.metrics import TRAIN_SUCCESS, read_metrics  # noqa: E402

METHODS = ("grpo", "gigpo", "graphgpo", "graph_only", "ggpo")
SEEDS = (0, 1, 2, 3, 4)


def finished(run: Path) -> bool:
    """Every configured iteration logged (an interrupted run has fewer, and no end time in its manifest)."""
    if not (run / "config.json").exists() or not (run / "metrics.jsonl").exists():
        return False
    iterations = json.loads((run / "config.json").read_text())["iterations"]
    steps = [m["step"] for _, m in read_metrics(run / "metrics.jsonl") if TRAIN_SUCCESS in m]
    return bool(steps) and max(steps) >= iterations


class StrayRunFolder(ValueError):
    """A run folder with checkpoints but no config.json: not a run the trainer started (for example a
    folder deleted while its trainer was still writing its last checkpoint)."""


def has_checkpoint(run: Path) -> bool:
    """A finished orbax step folder (``checkpoints/<step>``; unfinished saves carry a tmp suffix)."""
    folder = run / "checkpoints"
    return folder.is_dir() and any(p.is_dir() and p.name.isdecimal() for p in folder.iterdir())


def run_dir_flags(run: Path) -> list[str]:
    """``--resume`` for a run the trainer started (config.json is written before any checkpoint) that has a
    checkpoint; ``--run-dir`` for a new one. A run stopped before its first checkpoint is moved aside to
    ``<run>.unfinished-<time>`` with its log ``<run>.log`` (kept, and neither appended to); a stray folder is
    refused."""
    if (run / "config.json").exists():
        if has_checkpoint(run):
            return ["--resume", str(run)]
        aside = run.with_name(f"{run.name}.unfinished-{time.strftime('%Y%m%d-%H%M%S')}")
        run.rename(aside)
        log = run.with_name(f"{run.name}.log")
        if log.exists():
            log.rename(aside.with_name(f"{aside.name}.log"))
    elif (run / "checkpoints").exists():
        raise StrayRunFolder(f"{run}: checkpoints/ without config.json, not a run this script started; remove it")
    return ["--run-dir", str(run)]


def train_command(method: str, seed: int, run: Path, iterations: int | None, sets: list[str]) -> list[str]:
    cmd = [sys.executable, "-m", "ggtrain.cli", "train", "--config", method, "--config", "builtin_ring"]
    cmd += ["--set", f"TrainConfig.seed={seed}", *[x for b in sets for x in ("--set", b)]]
    if iterations is not None:
        cmd += ["--set", f"TrainConfig.iterations={iterations}"]
    return cmd + run_dir_flags(run)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="folder for the runs (runs/<method>-seed<k>) and the report")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS))
    parser.add_argument("--iterations", type=int, help="override TrainConfig.iterations (default: the gin file's)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="gin binding for every run")
    parser.add_argument("--threshold", type=float, default=0.5, help="success rate for the cost-to-reach table")
    args = parser.parse_args(argv)
    out = Path(args.out).absolute()
    env = os.environ | {"XLA_FLAGS": "--xla_force_host_platform_device_count=1", "PYTHONUNBUFFERED": "1"}
    runs, timings = [], {}
    for method in args.methods:
        for seed in args.seeds:
            run = out / "runs" / f"{method}-seed{seed}"
            runs.append(run)
            if finished(run):
                print(f"{run.name}: done already", file=sys.stderr)
                continue
            run.parent.mkdir(parents=True, exist_ok=True)
            started = time.perf_counter()
            command = train_command(method, seed, run, args.iterations, args.set)  # may move the old log aside
            with (run.parent / f"{run.name}.log").open("a") as log:
                code = subprocess.run(command, cwd=ROOT, env=env, stdout=log, stderr=log).returncode
            if code != 0:
                print(
                    f"{run.name}: ggtrain train exited {code}; see {run.parent / (run.name + '.log')}", file=sys.stderr
                )
                return code
            timings[run.name] = round(time.perf_counter() - started, 1)
            print(f"{run.name}: {timings[run.name]} s", file=sys.stderr)
    report = subprocess.run(
        [
            sys.executable,
            "-m",
            "ggtrain.cli",
            "report",
            *map(str, runs),
            "--out",
            str(out / "report"),
            "--threshold",
            str(args.threshold),
        ],
        cwd=ROOT,
        env=env,
    )
    print(json.dumps({"runs": len(runs), "seconds": timings, "report": str(out / "report")}))
    return report.returncode


if __name__ == "__main__":
    try:
        sys.exit(main())
    except StrayRunFolder as stray:
        print(f"{Path(__file__).name}: {stray}", file=sys.stderr)
        sys.exit(2)
