"""The final evaluations on whole splits: ``<run>/eval_final/<split>.jsonl`` (``ggtrain eval --run RUN
--out RUN/eval_final``) and a baseline folder of the same files (``ggtrain eval --model M --out DIR``, e.g.
the warm start's). Success per method and split (the seeds' mean ± std and the Wilson interval of all
their episodes), success per task type, and per-game differences against the baseline and between
methods, paired on (game, evaluation seed, run seed)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ggtrain.evaluate import wilson_interval
from ggtrain.report.loading import Run
from ggtrain.report.statistics import cluster_bootstrap_interval, sample_std, seeds_then_games_interval

Outcomes = dict[str, list[dict[str, Any]]]  # split -> per-game records
FINAL_FOLDER = "eval_final"


def load_outcomes(folder: Path) -> Outcomes:
    """Every ``<split>.jsonl`` in the folder and in its ``seed<K>/`` folders (evaluation seed K's outcomes, as
    ``experiments/alfworld_comparison.py --eval-seeds`` lays them out; every such folder present is read),
    merged by split; none: an empty dict. Refused, naming the file: a record without a game or seed, one in
    ``seed<K>/`` played under another seed, and a game played twice under one seed (it would count twice)."""
    merged: Outcomes = {}
    where: dict[tuple[str, Any, Any], Path] = {}
    for path, seed in _outcome_files(folder):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if not line.strip():
                continue
            record = json.loads(line)
            if "game_id" not in record or "seed" not in record:
                raise ValueError(f"{path}:{number}: an outcome without game_id or seed")
            if seed is not None and record["seed"] != seed:
                raise ValueError(f"{path}:{number}: played under evaluation seed {record['seed']}, not {seed}")
            key = (path.stem, record["game_id"], record["seed"])
            if key in where:
                raise ValueError(f"{path}: game {key[1]} under evaluation seed {key[2]} is also in {where[key]}")
            where[key] = path
            merged.setdefault(path.stem, []).append(record)
    return dict(sorted(merged.items()))


def _outcome_files(folder: Path) -> list[tuple[Path, int | None]]:
    """The folder's own ``<split>.jsonl`` (any seed) and each ``seed<K>/<split>.jsonl`` with its K."""
    return [(p, seed) for d, seed in seed_folders(folder) for p in sorted(d.glob("*.jsonl"))]


SEED_FOLDER = re.compile(r"seed(\d+)")  # evaluation seed K's outcomes beside a folder's own: ``seed<K>/``


def evaluation_folder(folder: Path, seed: int) -> Path:
    """Where evaluation seed ``seed``'s outcomes go: seed 0's in the folder itself, as in every study made
    before a study could ask for more seeds, each further seed's in ``seed<K>/``."""
    return folder if seed == 0 else folder / f"seed{seed}"


def seed_folders(folder: Path) -> list[tuple[Path, int | None]]:
    """The folder itself (its outcomes may be of any seed) and each ``seed<K>/`` in it with its K."""
    named = [(d, SEED_FOLDER.fullmatch(d.name)) for d in sorted(folder.glob("seed*/"), key=lambda d: d.name)]
    return [(folder, None), *((d, int(match[1])) for d, match in named if match)]


@dataclass(frozen=True)
class Entry:
    """A method's runs (one per seed) or the baseline (one evaluation, run seed None)."""

    name: str
    seeds: list[int | None]
    outcomes: list[Outcomes]

    def wins(self, split: str) -> dict[tuple[Any, ...], float]:
        return {
            (r["game_id"], r["seed"], seed): float(r["won"])
            for seed, o in zip(self.seeds, self.outcomes, strict=True)
            for r in o.get(split, [])
        }


def splits_of(entries: list[Entry]) -> list[str]:
    return sorted({s for e in entries for o in e.outcomes for s in o})


def success_table(entries: list[Entry]) -> list[str]:
    lines = [
        "\n## Final evaluation on whole splits (one seeded episode per game and evaluation seed)\n",
        "| split | method | seeds | evaluation seeds | success (mean ± sample std over seeds) | wins / episodes |"
        " Wilson 95 % of the episodes | dropped (counted lost) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for split in splits_of(entries):
        for e in entries:
            per_seed = [[bool(r["won"]) for r in o[split]] for o in e.outcomes if o.get(split)]
            if not per_seed:
                continue
            rates = [float(np.mean(w)) for w in per_seed]
            wins, n = sum(map(sum, per_seed)), sum(map(len, per_seed))
            lo, hi = wilson_interval(wins, n)
            dropped = sum(not r.get("completed", True) for o in e.outcomes for r in o.get(split, []))
            evaluation_seeds = sorted({r["seed"] for o in e.outcomes for r in o.get(split, [])})
            lines.append(
                f"| {split} | {e.name} | {len(per_seed)} | {', '.join(map(str, evaluation_seeds))} |"
                f" {np.mean(rates):.3f} ± {sample_std(rates)} |"
                f" {wins} / {n} | [{lo:.3f}, {hi:.3f}] | {dropped} |"
            )
    return lines


def task_type_table(entries: list[Entry], which: str = "final evaluation") -> list[str]:
    lines = []
    for split in splits_of(entries):
        records = {e.name: [r for o in e.outcomes for r in o.get(split, [])] for e in entries}
        types = sorted({r["task_type"] for rs in records.values() for r in rs})
        lines += [f"\n### Success by task type, {split}, {which} (all seeds' episodes)\n"]
        lines += ["| method | " + " | ".join(types) + " |", "|---|" + "---|" * len(types)]
        for name, rs in records.items():
            cells = []
            for t in types:
                won = [bool(r["won"]) for r in rs if r["task_type"] == t]
                cells.append(f"{np.mean(won):.3f} ({len(won)})" if won else "–")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def paired_table(entries: list[Entry], which: str = "final evaluation") -> list[str]:
    """A − B per game, A before B in ``entries``; a baseline (run seed None) pairs with every run seed of
    the other side. One interval resamples games (a game's pairs over the run seeds and evaluation seeds
    share its difficulty and, against a baseline, its baseline outcomes): how sure the difference is for
    these trained policies. The other resamples the run seeds, then the games: how sure it is for another training run
    of the methods, which is the question a comparison asks. Nothing when no two entries share a game."""
    lines = [
        f"\n## Paired per-game differences, {which} (same game, evaluation seed and run seed)\n",
        "| split | A − B | pairs | mean difference | bootstrap 95 % (resampling games) |"
        " bootstrap 95 % (resampling run seeds, then games) |",
        "|---|---|---|---|---|---|",
    ]
    header = len(lines)
    for split in splits_of(entries):
        for i, a in enumerate(entries):
            for b in entries[i + 1 :]:
                keys, diff = _paired(a.wins(split), b.wins(split))
                if not len(diff):
                    continue
                games = [k[0] for k in keys]
                lo, hi = cluster_bootstrap_interval(diff, games)
                slo, shi = seeds_then_games_interval(diff, [k[2] for k in keys], games)
                lines.append(
                    f"| {split} | {a.name} − {b.name} | {len(diff)} | {diff.mean():+.3f} | [{lo:+.3f}, {hi:+.3f}] |"
                    f" [{slo:+.3f}, {shi:+.3f}] |"
                )
    return lines if len(lines) > header else []


def _paired(a: dict[tuple[Any, ...], float], b: dict[tuple[Any, ...], float]) -> tuple[list[Any], np.ndarray]:
    a, b = _expand(a, b), _expand(b, a)
    keys = sorted(set(a) & set(b), key=str)
    return keys, np.asarray([a[k] - b[k] for k in keys])


def _expand(side: dict[tuple[Any, ...], float], other: dict[tuple[Any, ...], float]) -> dict[tuple[Any, ...], float]:
    """A baseline's outcomes (run seed None), repeated for each run seed of the other side."""
    if any(run_seed is not None for _, _, run_seed in side):
        return side
    seeds = {run_seed for _, _, run_seed in other}
    return {(game, seed, r): won for (game, seed, _), won in side.items() for r in seeds}


def last_evaluation_sections(groups: dict[str, list[Run]]) -> list[str]:
    """Success per task type and paired per-game differences in each run's last evaluation during
    training (``<run>/eval/iteration_*.jsonl``), by the outcomes' own split (older runs' outcomes do not
    name it)."""
    entries = []
    for method, runs in sorted(groups.items()):
        runs = sorted(runs, key=lambda run: run.seed)
        outcomes: list[Outcomes] = [{} for _ in runs]
        for by_split, run in zip(outcomes, runs, strict=True):
            for r in run.outcomes:
                by_split.setdefault(r.get("split", "split not recorded"), []).append(r)
        if any(outcomes):
            entries.append(Entry(method, [run.seed for run in runs], outcomes))
    which = "last evaluation during training"
    return [*task_type_table(entries, which), *paired_table(entries, which)]


def final_sections(groups: dict[str, list[Run]], baseline: Entry | None) -> list[str]:
    """The three tables, over every method's runs that have final evaluations and the baseline (last, so
    its differences read method − baseline)."""
    entries = []
    for method, runs in sorted(groups.items()):
        runs = sorted(runs, key=lambda run: run.seed)
        finals = [load_outcomes(run.dir / FINAL_FOLDER) for run in runs]
        if any(finals):
            entries.append(Entry(method, [run.seed for run in runs], finals))
    if baseline:
        entries.append(baseline)
    if not splits_of(entries):
        return []
    return [*success_table(entries), *task_type_table(entries), *paired_table(entries)]
