"""The estimators compared on real ALFWorld: GRPO, GiGPO, GraphGPO, graph-only and GGPO x seeds 0, 1, 2, all
from one warm start (``configs/alfworld_comparison.gin``'s ``ModelSpec.path``: a `tiny-alfworld` build kept
in the repository); every run and the warm start evaluated on all 140 valid_seen and all 134 valid_unseen
games (one seeded episode per game and evaluation seed, ``--eval-seeds``), then one report over everything.
Resumable: finished runs and evaluations are skipped, an interrupted run resumes from its last checkpoint
(every iteration is checkpointed, so at most one iteration is lost). Refused before anything runs: a start
whose settings (``--iterations``, ``--set``, the gin files) would give any existing run other values than its
``config.json`` holds, and a start whose warm-start files differ from those any existing run or the warm
start's evaluation recorded in its manifest. ``--set METHOD:KEY=VALUE`` binds for one method's runs only,
for a setting that method's loss cannot take.

    python experiments/alfworld_comparison.py --out experiments/results/alfworld_comparison
    python experiments/alfworld_comparison.py --methods graphgpo --seeds 0 --iterations 2 --out /tmp/cmp
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from experiments.builtin_comparison import StrayRunFolder, finished, run_dir_flags  # noqa: E402

METHODS = ("grpo", "gigpo", "graphgpo", "graph_only", "ggpo")
SEEDS = (0, 1, 2)
FINAL_SPLITS = {"valid_seen": 140, "valid_unseen": 134}
CONFIG = "alfworld_comparison"


def method_of(binding: str) -> str | None:
    """The method a ``METHOD:KEY=VALUE`` binding is for; None for a plain ``KEY=VALUE``."""
    prefix, colon, _ = binding.partition(":")
    return prefix if colon and prefix in METHODS else None


def method_sets(method: str, sets: list[str]) -> list[str]:
    """The study's bindings for ``method``'s runs: every plain one, then (so they win) its own
    ``METHOD:KEY=VALUE`` ones, for a setting one loss cannot take (GGPO's mini-batch holds whole groups)."""
    own = [b.partition(":")[2] for b in sets if method_of(b) == method]
    return [b for b in sets if method_of(b) is None] + own


def run_bindings(seed: int, iterations: int | None, sets: list[str]) -> list[str]:
    """The gin bindings of one run: its seed, the study's ``--set`` bindings and ``--iterations``."""
    bindings = [f"TrainConfig.seed={seed}", *sets]
    return bindings + ([f"TrainConfig.iterations={iterations}"] if iterations is not None else [])


def train_command(method: str, seed: int, run: Path, iterations: int | None, sets: list[str]) -> list[str]:
    cmd = [sys.executable, "-m", "ggtrain.cli", "train", "--config", method, "--config", CONFIG]
    cmd += [x for b in run_bindings(seed, iterations, method_sets(method, sets)) for x in ("--set", b)]
    return cmd + run_dir_flags(run)


def eval_command(source: list[str], split: str, games: int, seed: int, out: Path, sets: list[str]) -> list[str]:
    """A run is evaluated with its own config.json; the warm start with the comparison's config."""
    cmd = [sys.executable, "-m", "ggtrain.cli", "eval", *source]
    if source[0] == "--model":
        bindings = method_sets("graphgpo", sets)
        cmd += ["--config", "graphgpo", "--config", CONFIG, *[x for b in bindings for x in ("--set", b)]]
    return [*cmd, "--split", split, "--games", str(games), "--seeds", str(seed), "--out", str(out)]


def run_logged(cmd: list[str], log: Path, env: dict[str, str]) -> int:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        return subprocess.run(cmd, cwd=ROOT, env=env, stdout=f, stderr=f).returncode


def complete_outcomes(path: Path, games: int, seed: int) -> bool:
    """The file holds one outcome per game, all played under evaluation seed ``seed``; one cut short or with
    a line that is not JSON is not (it is played again). One holding another seed's outcomes is refused: it
    would be overwritten."""
    if not path.exists():
        return False
    try:
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except json.JSONDecodeError:
        return False
    if other := sorted({r.get("seed") for r in records} - {seed}, key=str):
        raise StudyMismatch(f"{path}: holds outcomes of evaluation seed(s) {other}, where seed {seed}'s belong")
    return len(records) == games


def final_evaluations(
    source: list[str], out: Path, log: Path, env: dict[str, str], sets: list[str], seeds: tuple[int, ...] = (0,)
) -> int:
    """All games of each final split under each evaluation seed, unless that seed's outcome file of the
    split is already complete: a study can add evaluation seeds later without playing the others again."""
    from ggtrain.report.final import evaluation_folder

    for split, games in FINAL_SPLITS.items():
        expected = final_split_games(split, sets)
        for seed in seeds:
            folder = evaluation_folder(out, seed)
            if complete_outcomes(folder / f"{split}.jsonl", expected, seed):
                continue
            code = run_logged(eval_command(source, split, games, seed, folder, sets), log, env)
            if code != 0:
                return code
    return 0


def warm_start_config(sets: list[str]) -> Any:
    """The configuration the warm start is evaluated under (``eval_command``'s ``--config graphgpo --config
    alfworld_comparison`` and the study's bindings); its ``WARM_START_SECTIONS`` are every run's too."""
    from ggtrain.config import config_file, resolve_config

    return resolve_config([config_file("graphgpo"), config_file(CONFIG)], method_sets("graphgpo", sets))


def final_split_games(split: str, sets: list[str]) -> int:
    """How many games the final evaluation of ``split`` plays under the study's settings: all of the
    split's, or those of ``RolloutConfig.task_types`` alone (35 of valid_seen's 140 for one type)."""
    from ggtrain.run import evaluation_games

    return len(evaluation_games(warm_start_config(sets), split, FINAL_SPLITS[split]))


def study_run(folder: Path) -> tuple[str, int] | None:
    """``(method, seed)`` of a ``<method>-seed<k>`` folder, one of the study's runs; None for any other
    (a folder moved aside as ``….unfinished-<time>``)."""
    method, _, seed = folder.name.rpartition("-seed")
    return (method, int(seed)) if method in METHODS and seed.isdigit() else None


class StudyMismatch(ValueError):
    """The folder holds a study run with other settings: its finished runs would be skipped, not redone."""


WARM_START_SECTIONS = ("data_dir", "model", "rollout", "eval")  # what decides how the warm start plays
# rollout fields that only decide which training games are drawn and what a training run logs
TRAINING_ONLY_FIELDS = ("rollout.balance_task_types", "rollout.log_turns")


def warm_start_folders(out: Path) -> list[Path]:
    """The warm start's evaluation folders: its own (seed 0) and each ``seed<K>/``
    (``ggtrain.report.final.evaluation_folder``)."""
    from ggtrain.report.final import seed_folders

    return [folder for folder, _ in seed_folders(out / "warm_start")]


def check_run_configs(out: Path, iterations: int | None, sets: list[str]) -> None:
    """Refuses a start under which any run already in ``out/runs`` would resolve to other values than its
    ``config.json`` (finished runs are skipped by their files alone, so a changed ``--set``,
    ``--iterations`` or gin file would silently mix two configurations in one report), or under which the
    warm start would be evaluated with other games, prompt, sampling or model (``WARM_START_SECTIONS`` but
    ``TRAINING_ONLY_FIELDS``: its advantage and optimizer settings, and a run's training draws and logs,
    never change what it plays). The resolved values are compared,
    so an edit that changes no value (a comment) is not a change."""
    from ggtrain.config import config_file, resolve_config

    changed = []
    for stored in sorted(out.glob("runs/*-seed*/config.json")):
        if run := study_run(stored.parent):
            method, seed = run
            files = [config_file(method), config_file(CONFIG)]
            now = resolve_config(files, run_bindings(seed, iterations, method_sets(method, sets)))
            changed += _changes(stored, now, None)
    for warm in warm_start_folders(out):
        if (warm / "config.json").exists():
            changed += _changes(warm / "config.json", warm_start_config(sets), WARM_START_SECTIONS)
    if changed:
        raise StudyMismatch(f"{out}: its runs were made with other settings ({'; '.join(changed)}); use a new --out")


def study_model(sets: list[str]) -> tuple[str, Path]:
    """The warm start every run of the study starts from: the config's ``ModelSpec.path`` as written (an
    alias, or a directory relative to the repository root, where every command of the study runs) and
    the directory it names."""
    from ggtrain.policies.registry import model_aliases, resolve_model

    path = warm_start_config(sets).model.path
    if path in model_aliases():
        return path, resolve_model(path)
    return path, resolve_model(str(ROOT / Path(path).expanduser()))  # an absolute path stays as it is


def check_warm_start_files(out: Path, model_dir: Path) -> None:
    """Refuses a start whose warm-start files (``model_hashes``: the weights, config and tokenizer) differ
    from those a run in ``out/runs`` started from or the warm start's evaluation played with, by their
    manifests. The configs alone cannot tell: an alias or a path names the same folder after a rebuild."""
    from ggtrain.manifest import model_hashes

    now, changed = model_hashes(model_dir), []
    runs = [m for m in sorted(out.glob("runs/*-seed*/manifest.json")) if study_run(m.parent)]
    recorded = [(m, json.loads(m.read_text()).get("model_files", {})) for m in runs]
    for manifest in (folder / "manifest.json" for folder in warm_start_folders(out)):
        if manifest.exists():
            events = json.loads(manifest.read_text()).get("events", [])
            recorded += [(manifest, e.get("model_files", {})) for e in events if e.get("kind") == "evaluation"]
    for manifest, files in recorded:
        then = files.get("sha256") or {}
        for name in sorted(n for n in then.keys() | now.keys() if then and then.get(n) != now.get(n)):
            was, new = then.get(name, "absent")[:12], now.get(name, "absent")[:12]
            changed.append(f"{_folder_label(manifest)} {name}: {was} -> {new}")
    if changed:
        detail = "; ".join(changed)
        raise StudyMismatch(f"{out}: its runs started from other files than {model_dir} ({detail}); use a new --out")


def _changes(stored: Path, now: Any, sections: tuple[str, ...] | None) -> list[str]:
    """``"<folder> section.field: old -> new"`` for each value the folder's config.json and ``now`` disagree
    on (in ``sections`` only, when given)."""
    from ggtrain.config import config_differences, config_from_dict, config_to_dict

    then, new = config_to_dict(config_from_dict(json.loads(stored.read_text()))), config_to_dict(now)
    if sections is not None:
        then, new = ({k: d[k] for k in sections} for d in (then, new))
    label, differences = _folder_label(stored), config_differences(then, new)
    ignored = TRAINING_ONLY_FIELDS if sections is not None else ()
    return [f"{label} {k}: {a!r} -> {b!r}" for k, (a, b) in differences.items() if k not in ignored]


def _folder_label(path: Path) -> str:
    """The folder a file is in, by name (``gigpo-seed0``, ``warm_start``), ``warm_start/seed1`` for a seed's."""
    from ggtrain.report.final import SEED_FOLDER

    folder = path.parent
    return f"{folder.parent.name}/{folder.name}" if SEED_FOLDER.fullmatch(folder.name) else folder.name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="folder for warm_start/, runs/<method>-seed<k>/ and report/")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS))
    parser.add_argument("--iterations", type=int, help="override TrainConfig.iterations (default: the gin file's)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="[METHOD:]KEY=VALUE",
        help="gin binding for every run, or with METHOD: for that method's runs only (after the plain ones)",
    )
    parser.add_argument("--threshold", type=float, default=0.3, help="success rate for the cost-to-reach table")
    parser.add_argument(
        "--eval-seeds",
        nargs="+",
        type=int,
        default=[0],
        metavar="K",
        help="evaluation seeds of every final evaluation, the warm start's included (default 0): each game is "
        "played once per seed; seed 0's outcomes go in the folder itself, seed K's in seed<K>/",
    )
    args = parser.parse_args(argv)
    if any(k < 0 for k in args.eval_seeds) or len(set(args.eval_seeds)) < len(args.eval_seeds):
        parser.error(f"--eval-seeds {' '.join(map(str, args.eval_seeds))}: expected distinct seeds of at least 0")
    for binding in args.set:
        prefix, colon, _ = binding.partition(":")
        if colon and prefix.isidentifier() and prefix not in METHODS:
            parser.error(f"--set {binding}: {prefix!r} is not a method (one of {', '.join(METHODS)})")
    out = Path(args.out).absolute()
    check_run_configs(out, args.iterations, args.set)
    try:
        model, model_dir = study_model(args.set)
    except ValueError as missing:  # not a model directory, nor an alias
        parser.error(str(missing))
    check_warm_start_files(out, model_dir)
    env = os.environ | {"XLA_FLAGS": "--xla_force_host_platform_device_count=1", "PYTHONUNBUFFERED": "1"}
    warm = out / "warm_start"
    seeds = tuple(args.eval_seeds)
    code = final_evaluations(["--model", model], warm, warm / "eval.log", env, args.set, seeds)
    if code:
        return code
    runs, timings = [], {}
    for seed in args.seeds:  # seed-major: a study cut short still has every method at its first seeds
        for method in args.methods:
            run = out / "runs" / f"{method}-seed{seed}"
            runs.append(run)
            log = run.parent / f"{run.name}.log"
            started = time.perf_counter()
            if not finished(run):
                code = run_logged(train_command(method, seed, run, args.iterations, args.set), log, env)
                if code != 0:
                    print(f"{run.name}: ggtrain train exited {code}; see {log}", file=sys.stderr)
                    return code
            code = final_evaluations(["--run", str(run)], run / "eval_final", log, env, args.set, seeds)
            if code != 0:
                print(f"{run.name}: ggtrain eval exited {code}; see {log}", file=sys.stderr)
                return code
            timings[run.name] = round(time.perf_counter() - started, 1)
            print(f"{run.name}: {timings[run.name]} s", file=sys.stderr)
    report = [sys.executable, "-m", "ggtrain.cli", "report", *map(str, runs), "--out", str(out / "report")]
    report += ["--threshold", str(args.threshold), "--baseline", str(warm)]
    code = subprocess.run(report, cwd=ROOT, env=env).returncode
    print(json.dumps({"runs": len(runs), "seconds": timings, "report": str(out / "report")}))
    return code


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (StrayRunFolder, StudyMismatch) as refused:
        print(f"{Path(__file__).name}: {refused}", file=sys.stderr)
        sys.exit(2)
