"""Shared by the benchmarks that compare us with torch: each side runs in its own child process of the
calling script (so each side's peak RSS is its own), one after the other on the same machine."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SIDES = ("jax", "torch")


def median_time(fn: Callable[[], Any], repeats: int) -> float:
    """Median seconds of ``repeats`` calls after one warm-up (compile) call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def add_side_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)


def run_sides(script: str, argv: list[str]) -> dict[str, dict[str, Any]]:
    """Runs ``script --side S argv`` for each side and returns each side's last JSON line."""
    out = {}
    for side in SIDES:
        proc = subprocess.run(
            [sys.executable, script, "--side", side, *argv],
            capture_output=True,
            text=True,
            env=os.environ | {"TOKENIZERS_PARALLELISM": "false"},
        )
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr)
            raise SystemExit(f"the {side} side of {script} failed")
        out[side] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def torch_next_token_loss(model: Any, tokens: Any) -> Any:
    """The torch peer's loss: mean next-token negative log-likelihood of ``tokens``."""
    import torch

    logits = model(tokens).logits[:, :-1]
    return -torch.log_softmax(logits, -1).gather(-1, tokens[:, 1:, None]).mean()


def emit_json(result: dict[str, Any], out: Path | None) -> None:
    """A benchmark's result: printed as indented JSON, and written to ``out`` when given."""
    text = json.dumps(result, indent=2)
    print(text)
    if out:
        out.write_text(text + "\n")
