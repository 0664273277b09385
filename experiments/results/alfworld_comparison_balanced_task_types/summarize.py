"""Every table of this folder's README from its committed files: the training groups and wins per task type
(each run's turn log, ``runs/<run>/turns.tar.gz``), the processing decisions (``decisions.jsonl``) and the
final evaluation wins (``runs/<run>/eval_final/``, ``warm_start/``), beside the 16-row study's (uniform draws).

    python experiments/results/alfworld_comparison_balanced_task_types/summarize.py
"""

from __future__ import annotations

import io
import json
import math
import tarfile
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
UNIFORM = HERE.parent / "alfworld_comparison_16_row_mini_batches"
SPLITS = ("valid_seen", "valid_unseen")


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def turn_lines(run: Path) -> list[dict]:
    """The run's turn log: its ``turns/`` folder, or the committed ``turns.tar.gz`` of it."""
    if (run / "turns").is_dir():
        return [line for path in sorted((run / "turns").glob("*.jsonl")) for line in read_jsonl(path)]
    lines = []
    with tarfile.open(run / "turns.tar.gz") as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            if member.isfile() and member.name.endswith(".jsonl"):
                text = io.TextIOWrapper(tar.extractfile(member), encoding="utf-8").read()  # type: ignore[arg-type]
                lines += [json.loads(line) for line in text.splitlines() if line.strip()]
    return lines


def training_table(runs: list[Path]) -> None:
    print("## Training groups and won episodes per task type\n")
    print("| run | task type | groups | won episodes / episodes |\n|---|---|---|---|")
    for run in runs:
        if not ((run / "turns").is_dir() or (run / "turns.tar.gz").exists()):
            continue
        episodes: dict[tuple[int, int, int], dict] = {}
        for line in turn_lines(run):
            episodes[(line["iteration"], line["group"], line["traj"])] = line
        by_type: dict[str, list[dict]] = defaultdict(list)
        for episode in episodes.values():
            by_type[episode["task_type"]].append(episode)
        for task_type, eps in sorted(by_type.items()):
            groups = len({(e["iteration"], e["group"]) for e in eps})
            print(f"| {run.name} | {task_type} | {groups} | {sum(e['won'] for e in eps)} / {len(eps)} |")


def decision_table() -> None:
    path = HERE / "decisions.jsonl"
    if not path.exists():
        return
    lines = read_jsonl(path)
    policies, verbs = list(lines[0]["logp"]), sorted(lines[0]["logp"]["warm_start"])
    print("\n## Mean probability of each verb as the thought's first word, by the expert's verb\n")
    print("| expert's verb | turns | policy | " + " | ".join(verbs) + " |\n|---|---|---|" + "---|" * len(verbs))
    for expert in verbs:
        rows = [r for r in lines if r["expert_verb"] == expert]
        for p in policies:
            means = [sum(math.exp(r["logp"][p][v]) for r in rows) / len(rows) for v in verbs]
            print(f"| {expert} | {len(rows)} | {p} | " + " | ".join(f"{m:.3f}" for m in means) + " |")


def wins(folder: Path) -> str:
    counts = []
    for split in SPLITS:
        path = folder / f"{split}.jsonl"
        outcomes = read_jsonl(path) if path.exists() else []
        counts.append(f"{sum(o['won'] for o in outcomes)}/{len(outcomes)}" if outcomes else "-")
    return " | ".join(counts)


def final_table(runs: list[Path]) -> None:
    print("\n## Final evaluation wins (evaluation seed 0)\n")
    print("| run | draws | valid_seen | valid_unseen |\n|---|---|---|---|")
    print(f"| warm start | - | {wins(HERE / 'warm_start')} |")
    for run in runs:
        if (run / "eval_final").is_dir():
            print(f"| {run.name} | balanced | {wins(run / 'eval_final')} |")
            print(f"| {run.name} | uniform (16-row study) | {wins(UNIFORM / 'runs' / run.name / 'eval_final')} |")


def main() -> None:
    runs = sorted(p.parent.parent for p in (HERE / "runs").glob("*-seed*/eval_final/valid_unseen.jsonl"))  # finished
    training_table(runs)
    decision_table()
    final_table(runs)


if __name__ == "__main__":
    main()
