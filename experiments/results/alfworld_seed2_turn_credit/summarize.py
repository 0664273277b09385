"""The tables of this folder's README, recomputed from its committed files (PLAN.md says what each is):

1. ``expert_turns.jsonl`` (``expert_likelihood.py``): mean log-probability of the expert's answers, thoughts
   and actions per task type, per the thought's milestone verb and per the action's verb, under the warm
   start and each seed-2 policy, with the change against the warm start (``LOWERED``: fell by >= 0.69 nats).
2. ``runs/<run>/turns/`` (the replays' turn logs): whether each replay's metrics equal the committed run's
   (timings aside), training success per task type, and the advantages each action verb got in the cool
   and heat groups, split by the episode's outcome.
3. ``runs/<run>/eval_final/`` (measurements 4 and 5): valid_seen wins per evaluation seed, paired to the
   warm start's five seeds, and per task type, beside the five-seed folder's seed-2 runs.

    python experiments/results/alfworld_seed2_turn_credit/summarize.py
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
COMMITTED = HERE.parent / "alfworld_comparison_16_row_mini_batches" / "runs"
LOWERED = -0.69  # PLAN.md's rule: the expert's answer at most half as likely (geometric mean)
PARTS = ("answer", "thought", "action")
TIMINGS = {"time", "train/rollout_s", "train/update_s", "train/iteration_s", "train/advantage_ms"}
TIMINGS |= {"train/step_time_s", "train/tokens_per_s"}
ROLLOUT_METRICS = ("train/success_rate", "train/mean_turns", "train/invalid_action_rate", "train/graph/rows")
FOCUS = ("pick_cool_then_place_in_recep", "pick_heat_then_place_in_recep")


COMMANDS = {"go", "take", "put", "move", "open", "close", "toggle", "clean", "heat", "cool", "slice", "use"}
COMMANDS |= {"look", "examine", "inventory", "help"}


def verb(text: str) -> str:
    return text.split()[0] if text.strip() else "(none)"


def command_verb(action: str) -> str:
    """The action's verb; a malformed answer's leftovers (``hink>``, ``desk 1``) are ``(not a command)``."""
    return verb(action) if verb(action) in COMMANDS else "(not a command)"


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def likelihood_tables(lines: list[dict]) -> None:
    policies = [k for k in lines[0] if isinstance(lines[0][k], dict)]
    keys = {
        "task type": lambda r: r["task_type"],
        "thought's milestone verb": lambda r: verb(r["thought"]),
        "action verb": lambda r: verb(r["action"]),
    }
    for title, key in keys.items():
        groups: dict[str, list[dict]] = collections.defaultdict(list)
        for r in lines:
            groups[key(r)].append(r)
        print(f"\n## Expert turns by {title}: mean log-probability (change against the warm start)\n")
        print("| " + title + " | turns | part | " + " | ".join(policies) + " |")
        print("|---|---|---|" + "---|" * len(policies))
        for name in sorted(groups):
            rows = groups[name]
            for part in PARTS:
                warm = sum(r["warm_start"][part] for r in rows) / len(rows)
                cells = [f"{warm:.3f}"]  # the first policy is the warm start
                for p in policies[1:]:
                    mean = sum(r[p][part] for r in rows) / len(rows)
                    cells.append(f"{mean:.3f} ({mean - warm:+.3f}{' LOWERED' if mean - warm <= LOWERED else ''})")
                print(f"| {name} | {len(rows)} | {part} | " + " | ".join(cells) + " |")


def decision_table(lines: list[dict]) -> None:
    """At the thought's first word of the expert turns pursuing clean, cool or heat: the mean probability
    each policy gives each of the three verbs there (a row sums to at most 1; the rest goes elsewhere)."""
    import math

    chosen = [r for r in lines if "thought_first_word" in r["warm_start"]]
    if not chosen:
        return
    policies = [k for k in chosen[0] if isinstance(chosen[0][k], dict)]
    verbs = sorted(chosen[0]["warm_start"]["thought_first_word"])
    print("\n## The decision: mean probability of each verb as the thought's first word, by the expert's verb\n")
    print("| expert's verb | turns | policy | " + " | ".join(verbs) + " |\n|---|---|---|" + "---|" * len(verbs))
    for expert in verbs:
        rows = [r for r in chosen if verb(r["thought"]) == expert]
        for p in policies:
            means = [sum(math.exp(r[p]["thought_first_word"][v]) for r in rows) / len(rows) for v in verbs]
            print(f"| {expert} | {len(rows)} | {p} | " + " | ".join(f"{m:.3f}" for m in means) + " |")


def metrics_equal(replay: Path) -> str:
    """How the replay's metrics compare with the committed run's: equal, or where they differ and by how much
    (the rollout's own metrics, success, turns and invalid actions, apart from the update's)."""

    def strip(path: Path) -> list[dict]:
        return [{k: v for k, v in m.items() if k not in TIMINGS} for m in read_jsonl(path / "metrics.jsonl")]

    committed = COMMITTED / replay.name
    if not (committed / "metrics.jsonl").exists():
        return f"no committed run {committed.name} to compare with"
    a, b = strip(replay), strip(committed)
    if a == b:
        return f"equal to the committed run's, timings aside ({len(a)} records)"
    if len(a) != len(b) or [sorted(x) for x in a] != [sorted(y) for y in b]:
        return f"not comparable with the committed run's ({len(a)} against {len(b)} records: still running?)"
    rollout = [k for k in ROLLOUT_METRICS if any(x.get(k) != y.get(k) for x, y in zip(a, b, strict=True))]
    differ = [(x["step"], k) for x, y in zip(a, b, strict=True) for k in x if x[k] != y[k]]
    update = [(x[k], y[k]) for x, y in zip(a, b, strict=True) for k in x if x[k] != y[k] and "eval" not in k]
    relative = max(abs(u - v) / max(abs(v), 1e-12) for u, v in update)
    evaluations = sorted({step for step, k in differ if "eval" in k})
    return (
        f"DIFFERENT from the committed run's from step {differ[0][0]}: update metrics by at most {relative:.1e} "
        f"relative, mid-run evaluations at steps {evaluations or 'none'}; the rollout metrics "
        f"{'differ' if rollout else 'are equal in every iteration'}"
    )


def turn_tables(replay: Path) -> None:
    turns = [t for path in sorted((replay / "turns").glob("iteration_*.jsonl")) for t in read_jsonl(path)]
    print(f"\n## {replay.name}: {len(turns)} training turns, metrics {metrics_equal(replay)}\n")
    episodes = {(t["iteration"], t["traj"]): t for t in turns}
    by_type: dict[str, list[bool]] = collections.defaultdict(list)
    for e in episodes.values():
        by_type[e["task_type"]].append(e["won"])
    print("| task type | training episodes | won | success |\n|---|---|---|---|")
    for name, won in sorted(by_type.items()):
        print(f"| {name} | {len(won)} | {sum(won)} | {sum(won) / len(won):.3f} |")
    print(f"\n### {replay.name}, every task type: advantages by action verb (the ledger of each verb's credit)\n")
    verb_table(turns, lambda t: (command_verb(t["action"]), ""))
    for task_type in FOCUS:
        print(f"\n### {replay.name}, {task_type}: advantages by action verb and the episode's outcome\n")
        chosen = [t for t in turns if t["task_type"] == task_type]
        verb_table(chosen, lambda t: (command_verb(t["action"]), t["won"]))
        won = [t["advantage"] for t in chosen if t["won"]]
        print(f"\nturns of won episodes: {len(won)}, their advantages' sum {sum(won):+.3f}")


def verb_table(turns: list[dict], key) -> None:
    print("| verb | episode | turns | sum | mean | negative | zero | positive |\n|---|---|---|---|---|---|---|---|")
    table: dict[tuple[str, object], list[float]] = collections.defaultdict(list)
    for t in turns:
        table[key(t)].append(t["advantage"])
    for (name, won), values in sorted(table.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        neg, zero = sum(v < 0 for v in values), sum(v == 0 for v in values)
        outcome = "any" if won == "" else ("won" if won else "lost")
        print(
            f"| {name} | {outcome} | {len(values)} | {sum(values):+.3f} | "
            f"{sum(values) / len(values):+.4f} | {neg} | {zero} | {len(values) - neg - zero} |"
        )


def evaluations() -> None:
    """Measurements 4 and 5: this folder's runs' valid_seen evaluations beside the warm start's five seeds
    and the five-seed folder's seed-2 runs, with its functions (wins per seed, paired to the warm start
    over (game, seed) pairs resampling games, wins per task type)."""
    import importlib.util

    folder = HERE.parent / "alfworld_16_row_runs_five_evaluation_seeds"
    spec = importlib.util.spec_from_file_location("five_seeds", folder / "summarize.py")
    assert spec is not None and spec.loader is not None
    five = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(five)
    warm_records = five.records_by_seed(folder / "warm_start")
    warm = five.wins_by_seed(warm_records)
    summary = {"warm_start": five.describe(warm) | five.by_task_type(warm_records)}
    runs = [folder / "runs" / name for name in five.RUNS]
    runs += [p for p in sorted((HERE / "runs").iterdir()) if (p / "eval_final" / "valid_seen.jsonl").exists()]
    for run in runs:
        records = five.records_by_seed(run / "eval_final")
        wins = five.wins_by_seed(records)
        name = f"{run.name} ({'this folder' if run.parent.parent == HERE else 'five-seed folder'})"
        summary[name] = five.describe(wins) | {"paired_to_the_warm_start": five.paired(wins, warm)}
        summary[name] |= five.by_task_type(records)
    print("\n## Valid_seen evaluations (measurements 4 and 5)\n")
    print(json.dumps(summary, indent=1))


def main() -> int:
    if (HERE / "expert_turns.jsonl").exists():
        lines = read_jsonl(HERE / "expert_turns.jsonl")
        likelihood_tables(lines)
        decision_table(lines)
    for replay in sorted(p for p in (HERE / "runs").glob("*") if (p / "turns").is_dir()):
        turn_tables(replay)
    evaluations()
    return 0


if __name__ == "__main__":
    sys.exit(main())
