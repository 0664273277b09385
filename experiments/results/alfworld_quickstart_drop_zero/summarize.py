"""Recomputes the README's table from the committed run folders: python summarize.py"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ggtrain.metrics import read_metrics

HERE = Path(__file__).resolve().parent
RUNS = ("baseline_fresh_cache", "baseline", "drop_cold", "drop", "drop_steps_cold", "drop_steps")


def wins(path: Path) -> int:
    return sum(json.loads(line)["won"] for line in path.read_text().splitlines())


def wall_time(log: Path) -> str:
    return re.search(r"^real\s+(\S+)", log.read_text(), re.M).group(1)


def iterations(run: Path) -> list[dict]:
    return [m for _, m in read_metrics(run / "metrics.jsonl") if "train/rollout_s" in m]


def optimizer_steps(m: dict) -> int:
    """Turns trained over the mean real rows per step (0 when no step ran)."""
    if "train/rows" not in m:
        return 0
    return round((m["train/graph/rows"] - m.get("train/dropped_turns", 0.0)) / m["train/rows"])


def main() -> None:
    print(
        "| run | wall time | wins at step 0 -> after iteration 5 (of 32) | update s per iteration (sum) "
        "| turns left out per iteration | optimizer steps | KL at iteration 5 |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in RUNS:
        run = HERE / name
        its = iterations(run)
        update = [m["train/update_s"] for m in its]
        dropped = [int(m.get("train/dropped_turns", 0)) for m in its]
        steps = sum(optimizer_steps(m) for m in its)
        print(
            f"| `{name}/` | {wall_time(run / 'log.txt')} | {wins(run / 'eval/iteration_0000.jsonl')} -> "
            f"{wins(run / 'eval/iteration_0005.jsonl')} | {', '.join(f'{u:.1f}' for u in update)} ({sum(update):.1f}) "
            f"| {', '.join(map(str, dropped))} | {steps} | {its[-1].get('train/kl', float('nan')):.4f} |"
        )


if __name__ == "__main__":
    main()
