"""The ``ggtrain`` command line.

Exit status: 0 finished; 2 bad input or configuration (one line naming the value; for ``train``, before
anything is written), a run directory that cannot be written, or no readable checkpoint to resume; 1 an
internal failure (its traceback on stderr, and for ``train`` a ``failed`` event in the manifest);
128 + signal (130 SIGINT, 143 SIGTERM) a run stopped by a signal, its last iteration checkpointed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ggtrain import __version__
from ggtrain.interrupted import Interrupted


def parse_assignments(assignments: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs; values are JSON when they parse (``0.2``, ``true``), else strings."""
    out: dict[str, Any] = {}
    for item in assignments:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set {item!r}: expected KEY=VALUE")
        lowered = {"True": "true", "False": "false"}.get(raw, raw)
        try:
            out[key] = json.loads(lowered)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def load_rows(path: Path) -> dict[str, np.ndarray]:
    """Rows from ``.npz`` (one array per field), ``.json`` (field -> list) or ``.jsonl`` (one row a line)."""
    if not path.exists():
        raise ValueError(f"rows file {str(path)!r} does not exist")
    if path.suffix == ".npz":
        with np.load(path) as data:
            return {k: data[k] for k in data.files}
    if path.suffix == ".json":
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}: not JSON ({error.msg} at line {error.lineno})") from None
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a JSON object mapping field names to lists")
        return {k: np.asarray(v) for k, v in data.items()}
    if path.suffix == ".jsonl":
        records = []
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}:{number}: not JSON ({error.msg})") from None
        if not records:
            raise ValueError(f"{path}: no rows (the file is empty)")
        keys = sorted({k for r in records for k in r})
        for i, record in enumerate(records):
            missing = [k for k in keys if k not in record]
            if missing:
                raise ValueError(f"{path}: line {i + 1} lacks field(s) {missing}")
        return {k: np.asarray([r[k] for r in records]) for k in keys}
    raise ValueError(f"rows file {str(path)!r}: expected a .npz, .json or .jsonl file")


def _jsonable(value: Any) -> Any:
    array = np.asarray(value)
    return array.tolist() if array.ndim else array.item()


def cmd_advantages(args: argparse.Namespace) -> int:
    from graph import compute_advantages_with_diagnostics

    rows = load_rows(Path(args.rows))
    advantages, diagnostics = compute_advantages_with_diagnostics(args.method, rows, **parse_assignments(args.set))
    result = {
        "method": args.method,
        "advantages": [float(a) for a in advantages],
        "diagnostics": {k: _jsonable(v) for k, v in diagnostics.items()},
    }
    text = json.dumps(result)
    if args.out:
        Path(args.out).write_text(text + "\n")
    else:
        print(text)
    return 0


def cmd_model_import_gguf(args: argparse.Namespace) -> int:
    from models.gguf_import import import_gguf

    out = import_gguf(args.gguf_path, args.out_dir)
    print(json.dumps({"out_dir": str(out), "files": sorted(p.name for p in out.iterdir())}))
    return 0


def cmd_env_check(args: argparse.Namespace) -> int:
    from env_bridge.check import play_games, print_json_line
    from env_bridge.games import discover_games

    try:
        games = discover_games(args.split, args.data_dir)[: args.games]
    except FileNotFoundError as error:
        raise ValueError(str(error)) from error
    summary, failures = play_games(games, args.policy, args.workers, seed=args.seed, max_turns=args.max_turns)
    for failure in failures:
        print(f"ggtrain env check: {failure}", file=sys.stderr)
    print_json_line(summary)
    return 0


def _resolve(args: argparse.Namespace) -> Any:
    from ggtrain.config import config_file, resolve_config

    return resolve_config([config_file(c) for c in args.config or ["quickstart"]], _bindings(args.set))


def _resume_config(args: argparse.Namespace, run_dir: Path) -> Any:
    """The run's own config.json. Flags are accepted when they resolve to the same values (the original
    command plus ``--resume``); another ``TrainConfig.iterations`` extends (or ends) the run there and is
    a manifest event; any other change is refused, naming it, before anything is written."""
    from ggtrain.config import ConfigError, config_differences, config_from_dict, config_to_dict

    if not (run_dir / "config.json").exists():
        raise ConfigError(f"--resume {run_dir}: not a run directory (no config.json)")
    if args.run_dir and Path(args.run_dir).resolve() != run_dir.resolve():
        raise ConfigError(f"--resume {run_dir} with --run-dir {args.run_dir}: a run continues in its own directory")
    stored = config_from_dict(json.loads((run_dir / "config.json").read_text()))
    if not args.config and not args.set:
        return stored
    given = _resolve(args)
    changed = config_differences(config_to_dict(stored), config_to_dict(given))
    changed.pop("iterations", None)
    if changed:
        names = ", ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in sorted(changed.items()))
        raise ConfigError(f"--resume {run_dir}: the flags change the run's configuration ({names})")
    return given


def _bindings(bindings: list[str]) -> list[str]:
    from ggtrain.config import ConfigError

    for b in bindings:
        if "=" not in b or not b.partition("=")[0].strip():
            raise ConfigError(f"--set {b!r}: expected KEY=VALUE (e.g. --set RolloutConfig.max_turns=4)")
    return bindings


def _profile_iterations(text: str | None) -> frozenset[int]:
    from ggtrain.config import ConfigError

    try:
        iterations = frozenset(int(x) for x in (text or "").split(",") if x.strip())
    except ValueError:
        raise ConfigError(
            f"--profile {text!r}: expected comma-separated iteration numbers, e.g. --profile 2,3"
        ) from None
    if any(i < 1 for i in iterations):
        raise ConfigError(f"--profile {text!r}: iterations are 1-based")
    return iterations


def cmd_train(args: argparse.Namespace) -> int:
    import time

    import jax

    from ggtrain.distributed import DistributedSpec, PeerTimeout, fail_fast, initialize
    from ggtrain.train_loop import train

    host = initialize(
        DistributedSpec.from_env(
            coordinator=args.coordinator,
            num_processes=args.num_processes,
            process_id=args.process_id,
            peer_timeout_s=args.peer_timeout,
        )
    )

    if args.resume:
        run_dir = Path(args.resume)
        config = _resume_config(args, run_dir)
    else:
        config = _resolve(args)
        name = "+".join(Path(c).stem for c in args.config or ["quickstart"])
        # process 0's timestamp names the run on every host
        try:
            run_dir = Path(host.exchange("run_dir", args.run_dir or f"runs/{name}-{time.strftime('%Y%m%d-%H%M%S')}")[0])
        except PeerTimeout as error:
            fail_fast(error)
    profile = _profile_iterations(args.profile)
    try:
        summary = train(config, run_dir, resume=bool(args.resume), profile_iterations=profile, host=host)
    except Interrupted as stopped:  # not finished: a scheduler that requeues on 128 + signal resumes it
        if jax.process_index() == 0:
            print(json.dumps({"run_dir": str(run_dir), "interrupted": stopped.signal, "iteration": stopped.iteration}))
        return stopped.exit_code
    if jax.process_index() == 0:
        print(json.dumps({"run_dir": str(run_dir), "last_iteration": summary}))
    return 0


def _model_dir(name: str, binding: str) -> Path:
    from ggtrain.run_policy import model_dir

    return model_dir(name, binding)


def _check_eval_args(args: argparse.Namespace) -> None:
    from ggtrain.config import ConfigError

    if bool(args.run) == bool(args.model):
        raise ConfigError("give exactly one of --run RUN_DIR or --model PATH")
    if args.games < 1:
        raise ConfigError(f"--games {args.games}: expected at least 1 game")
    if args.temperature is not None and args.temperature < 0:
        raise ConfigError(f"--temperature {args.temperature}: expected at least 0")


def cmd_eval(args: argparse.Namespace) -> int:
    from env_bridge.worker_pool import EnvPool
    from ggtrain.config import check_values
    from ggtrain.evaluate import evaluate, write_outcomes
    from ggtrain.run import evaluation_games
    from ggtrain.run_policy import restore_run_policy
    from models import load_pretrained

    _check_eval_args(args)
    config = _evaluated_config(args, _run_config(args) if args.run else _resolve(args))
    check_values(config)
    if args.out:
        _check_evaluation_folder(Path(args.out), config)
    games = evaluation_games(config, args.split, args.games)
    if args.run:
        model_dir = _model_dir(config.model.path, "the run's ModelSpec.path")
        lm, params, step = restore_run_policy(Path(args.run), config, model_dir)
    else:
        model_dir = _model_dir(args.model, "--model")
        lm = load_pretrained(model_dir)
        params, step = lm.params, 0
    started, clock = time.strftime("%Y-%m-%dT%H:%M:%S%z"), time.perf_counter()
    with EnvPool(config.rollout.env, config.rollout.workers, step_timeout_s=config.rollout.step_timeout_s) as pool:
        summary, records = evaluate(config, lm.config, params, lm.tokenizer, games, args.seeds, pool)
    timing = {"started": started, "seconds": round(time.perf_counter() - clock, 1)}
    records = [r | {"split": args.split, "step": step} for r in records]
    if args.out:
        path = Path(args.out) / f"{args.split}.jsonl"
    else:  # beside the training-time outcomes, never replacing them or an earlier evaluation
        folder = Path(args.run) / "eval" if args.run else Path("eval_outcomes")
        path = folder / f"{args.split}-step{step}-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
    if args.out:  # the event first: complete outcomes without their manifest event cannot exist
        _record_evaluation(args, config, model_dir, [g.game for g in games], step, summary, timing)
    write_outcomes(records, path)
    print(json.dumps(summary))
    return 0


def _evaluated_config(args: argparse.Namespace, config: Any) -> Any:
    """The configuration as evaluated: ``--model`` is the model, ``--temperature`` the evaluation's."""
    import dataclasses

    if args.model:
        config = dataclasses.replace(config, model=dataclasses.replace(config.model, path=args.model))
    if args.temperature is not None:
        config = dataclasses.replace(config, eval=dataclasses.replace(config.eval, temperature=args.temperature))
    return config


def _check_evaluation_folder(folder: Path, config: Any) -> None:
    """One evaluation folder holds evaluations under one configuration (its ``config.json``)."""
    from ggtrain.config import ConfigError, holds_resolved_config

    if (folder / "config.json").exists() and not holds_resolved_config(folder, config):
        raise ConfigError(f"--out {folder}: its config.json holds another configuration; evaluate into a new folder")


def _record_evaluation(
    args: argparse.Namespace,
    config: Any,
    model_dir: Path,
    games: list[str],
    step: int,
    summary: dict[str, Any],
    timing: dict[str, Any],
) -> None:
    """``--out``: the configuration of record and the manifest beside the outcomes; the event's ``time``
    is when it ended, ``started`` and ``seconds`` when the episodes began and how long they took."""
    from ggtrain.config import config_to_dict, write_resolved_config
    from ggtrain.manifest import game_list_hash, model_hashes, record_evaluation
    from ggtrain.seeds import RunSeeds

    folder = Path(args.out)
    if not (folder / "config.json").exists():
        write_resolved_config(config, folder)
    seeds = {"evaluation": RunSeeds(config.seed).manifest()["evaluation"] | {"seeds": args.seeds}}
    record_evaluation(
        folder,
        config_to_dict(config),
        seeds,
        split=args.split,
        games=len(games),
        game_list=game_list_hash(games),
        model_files={"path": str(model_dir), "sha256": model_hashes(model_dir)},
        checkpoint_of=args.run,
        evaluation_seeds=args.seeds,
        temperature=config.eval.temperature,
        step=step,
        success_rate=summary["success_rate"],
        **timing,
    )


EVAL_BINDINGS = ("EvalConfig.", "RolloutConfig.workers", "RolloutConfig.step_timeout_s")


def _run_config(args: argparse.Namespace) -> Any:
    """``eval --run``: the run's own resolved config; ``--set`` may change evaluation settings only."""
    from ggtrain.config import ConfigError, config_from_dict, config_to_dict

    path = Path(args.run) / "config.json"
    if not path.exists():
        raise ConfigError(f"--run {args.run}: not a run directory (no config.json)")
    if args.config:
        raise ConfigError("--run evaluates with the run's own config.json: drop --config")
    config = config_from_dict(json.loads(path.read_text()))
    sections = config_to_dict(config)
    for key, value in parse_assignments(_bindings(args.set)).items():
        if not key.startswith(EVAL_BINDINGS):
            raise ConfigError(f"--set {key}: with --run only {', '.join(EVAL_BINDINGS)}* may change")
        section, _, name = key.partition(".")
        target = "eval" if section == "EvalConfig" else "rollout"
        if name not in sections[target]:
            raise ConfigError(f"--set {key}: {section} has no field {name!r}")
        sections[target][name] = value
    return config_from_dict(sections)


def cmd_report(args: argparse.Namespace) -> int:
    from ggtrain.report import make_report

    runs = [Path(r) for r in args.runs]
    for run in runs:
        if not (run / "metrics.jsonl").exists():
            raise ValueError(f"{run}: not a run directory (no metrics.jsonl)")
    baseline = Path(args.baseline) if args.baseline else None
    out = Path(args.out) if args.out else runs[0] / "report"
    print(json.dumps({"report": str(make_report(runs, out, args.threshold, baseline))}))
    return 0


Subparsers = argparse._SubParsersAction  # what ``add_subparsers`` returns


def _add_advantages_parser(sub: Subparsers) -> None:
    adv = sub.add_parser(
        "advantages",
        help="compute advantages and graph diagnostics for a file of turn rows (prints JSON)",
        description="Reads turn rows (fields group, traj, turn, state, next_state, env_reward, valid and "
        "optionally row_mask; next_state -1 marks the goal) and prints {advantages, diagnostics} as JSON.",
    )
    adv.add_argument("rows", help="rows file: .npz, .json (field -> list) or .jsonl (one row per line)")
    adv.add_argument("--method", default="graphgpo", help="grpo | gigpo | graphgpo | graph_only (default graphgpo)")
    adv.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="estimator option, repeatable")
    adv.add_argument("--out", help="write the JSON here instead of stdout")
    adv.set_defaults(func=cmd_advantages)


def _add_model_parser(sub: Subparsers) -> None:
    model = sub.add_parser("model", help="model files").add_subparsers(dest="model_command", required=True)
    imp = model.add_parser(
        "import-gguf",
        help="convert a llama.cpp GGUF (Llama or Qwen2) into a Hugging Face model directory",
        description="Dequantizes to float32 and writes config.json, model.safetensors, tokenizer.json and "
        "tokenizer_config.json; the directory loads in transformers and in models.load_pretrained.",
    )
    imp.add_argument("gguf_path")
    imp.add_argument("out_dir")
    imp.set_defaults(func=cmd_model_import_gguf)


def _add_train_parser(sub: Subparsers) -> None:
    tr = sub.add_parser("train", help="train an agent (rollout -> advantages -> update -> eval -> checkpoint)")
    tr.add_argument(
        "--config",
        action="append",
        help="gin file, or a name in configs/ (default quickstart); repeatable, later files override earlier ones",
    )
    tr.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="gin binding, e.g. --set RolloutConfig.max_turns=4 (repeatable)",
    )
    tr.add_argument("--run-dir", help="default runs/<config>-<timestamp>")
    tr.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its newest readable checkpoint")
    tr.add_argument(
        "--profile",
        metavar="ITERS",
        help="comma-separated iterations (1-based) to trace with "
        "jax.profiler into RUN_DIR/profile; the report shows the per-phase timing table",
    )
    multi = tr.add_argument_group(
        "multi-host",
        "every host runs the same command; without these flags GGTRAIN_COORDINATOR, GGTRAIN_NUM_PROCESSES,"
        " GGTRAIN_PROCESS_ID are read, and TPU pod slices and SLURM jobs are detected by JAX",
    )
    multi.add_argument("--coordinator", metavar="HOST:PORT", help="address of process 0's coordination service")
    multi.add_argument("--num-processes", type=int, metavar="N")
    multi.add_argument("--process-id", type=int, metavar="I")
    multi.add_argument(
        "--peer-timeout",
        type=float,
        metavar="SECONDS",
        help="a peer that does not reach an exchange point (or stops sending heartbeats) within this time is"
        " reported by name and every other process exits non-zero (default 600, GGTRAIN_PEER_TIMEOUT_S)",
    )
    tr.set_defaults(func=cmd_train)


def cmd_sft(args: argparse.Namespace) -> int:
    from env_bridge.games import discover_games
    from ggtrain.config import ConfigError
    from ggtrain.run import alfworld_games
    from ggtrain.sft import check_sft_config, sft
    from ggtrain.sft_data import demonstration_mix, read_jsonl, walkthrough_records

    config = _resolve_sft(args)
    check_sft_config(config)
    out = Path(args.out)
    if args.resume and not (out / "sft_run" / "config.json").exists():
        raise ConfigError(f"--resume: {out} holds no SFT run (no sft_run/config.json)")
    model_dir = _model_dir(config.model.path, "ModelSpec.path")
    if args.data:
        records = read_jsonl(Path(args.data))
    else:
        alfworld_games(config, lambda: discover_games(args.walkthroughs, config.data_dir or None))
        s = config.sft
        records = walkthrough_records(
            args.walkthroughs,
            config.rollout,
            config.data_dir,
            s.walkthrough_games,
            config.seed,
            None,
            s.detour_fraction,
        )
        records = demonstration_mix(records, config)
    record = sft(config, model_dir, records, out, resume=args.resume)
    print(json.dumps({"out": str(out)} | {k: record.get(k) for k in ("steps", "validation_loss", "interrupted")}))
    return 143 if record.get("interrupted") == "SIGTERM" else 130 if record.get("interrupted") else 0


def _resolve_sft(args: argparse.Namespace) -> Any:
    from ggtrain.config import config_file, resolve_config

    return resolve_config([config_file(c) for c in args.config or ["tiny_alfworld_sft"]], _bindings(args.set))


def _add_sft_parser(sub: Subparsers) -> None:
    sf = sub.add_parser("sft", help="supervised warm start on demonstrations (loss on response tokens only)")
    sf.add_argument("--config", action="append", help="gin file or name in configs/ (default tiny_alfworld_sft)")
    sf.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="gin binding (repeatable)")
    source = sf.add_mutually_exclusive_group()
    source.add_argument("--data", metavar="FILE.jsonl", help='demonstrations: {"messages": [...], "response": "..."}')
    source.add_argument(
        "--walkthroughs",
        metavar="SPLIT",
        default="train",
        help="replay the expert walkthroughs of an ALFWorld split with RL's prompt (default train)",
    )
    sf.add_argument("--out", required=True, metavar="MODEL_DIR", help="the HF model directory to write")
    sf.add_argument("--resume", action="store_true", help="continue the SFT run in MODEL_DIR/sft_run")
    sf.set_defaults(func=cmd_sft)


def _add_eval_parser(sub: Subparsers) -> None:
    ev = sub.add_parser("eval", help="evaluate a run's checkpoint or a model directory")
    ev.add_argument("--run", help="run directory (its newest checkpoint)")
    ev.add_argument("--model", help="model directory or alias")
    ev.add_argument("--config", action="append", help="gin file(s) as for train (default quickstart)")
    ev.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ev.add_argument("--split", default="valid_seen", choices=["train", "valid_seen", "valid_unseen"])
    ev.add_argument("--games", type=int, default=128)
    ev.add_argument("--seeds", type=int, nargs="+", default=[0])
    ev.add_argument("--temperature", type=float, default=None, help="default EvalConfig.temperature (0.4)")
    ev.add_argument("--out", help="folder for the per-game JSONL (default RUN_DIR/eval)")
    ev.set_defaults(func=cmd_eval)


def _add_report_parser(sub: Subparsers) -> None:
    rep = sub.add_parser("report", help="markdown + PNG plots comparing runs")
    rep.add_argument("runs", nargs="+", metavar="RUN_DIR")
    rep.add_argument("--out", help="default: the first run's report/ folder")
    rep.add_argument("--threshold", type=float, default=0.5, help="success rate for the cost-to-reach table")
    rep.add_argument(
        "--baseline",
        metavar="DIR",
        help="folder of <split>.jsonl outcomes (ggtrain eval --model M --out DIR) compared with the runs' final"
        " evaluations in RUN_DIR/eval_final/",
    )
    rep.set_defaults(func=cmd_report)


def _add_env_parser(sub: Subparsers) -> None:
    env = sub.add_parser("env", help="environments").add_subparsers(dest="env_command", required=True)
    check = env.add_parser(
        "check",
        help="play the first N games of a split through the bridge; prints one JSON line",
        description="Plays the first N games of the split (sorted path order) in worker processes and prints "
        "{games, games_won, steps, steps_per_s, reset_s_mean, worker_restarts} as one JSON line on "
        "stdout; progress goes to stderr. The walkthrough policy lifts the turn limit to the walkthrough's length.",
    )
    check.add_argument("--split", default="valid_seen", choices=["train", "valid_seen", "valid_unseen"])
    check.add_argument("--games", type=int, default=4)
    check.add_argument("--policy", default="walkthrough", choices=["walkthrough", "random"])
    check.add_argument("--workers", type=int, default=2)
    check.add_argument("--max-turns", type=int, default=50, help="turn limit of the random policy")
    check.add_argument("--seed", type=int, default=0)
    check.add_argument(
        "--data-dir", help="ALFWorld data folder (default: $ALFWORLD_DATA, then ../shared/data/alfworld)"
    )
    check.set_defaults(func=cmd_env_check)


# The subcommands in ``ggtrain --help`` order. A new one is a ``cmd_<name>(args) -> exit code`` plus an
# ``_add_<name>_parser(sub)`` that adds its parser with ``set_defaults(func=cmd_<name>)``, listed here.
SUBCOMMANDS: tuple[Callable[[Subparsers], None], ...] = (
    _add_advantages_parser,
    _add_model_parser,
    _add_train_parser,
    _add_sft_parser,
    _add_eval_parser,
    _add_report_parser,
    _add_env_parser,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ggtrain", description=__doc__)
    parser.add_argument("--version", action="version", version=f"ggtrain {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for add_parser in SUBCOMMANDS:
        add_parser(sub)
    return parser


# commands whose whole work is reading the inputs they are given: any ValueError / FileNotFoundError is
# about those inputs. In train, eval and sft only a ConfigError (raised by a check) is the user's input.
INPUT_COMMANDS = ("advantages", "model", "env", "report")


COMPILING_COMMANDS = ("train", "sft", "eval")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command in COMPILING_COMMANDS:
            from ggtrain.compilation_cache import enable

            enable()
        return int(args.func(args))
    except KeyboardInterrupt:  # Ctrl-C before a run took the signals over (or outside one)
        print(f"ggtrain {args.command}: interrupted", file=sys.stderr)
        return 130
    except Interrupted as stopped:  # e.g. while building a model alias: the next call continues the build
        print(f"ggtrain {args.command}: {stopped.signal}: stopped; run it again to continue", file=sys.stderr)
        return stopped.exit_code
    except Exception as error:
        from ggtrain.config import ConfigError  # here, not at the top: `ggtrain --help` stays jax-free

        input_error = (ValueError, FileNotFoundError) if args.command in INPUT_COMMANDS else ConfigError
        if not isinstance(error, input_error):
            return _internal_failure(args.command)
        print(f"ggtrain {args.command}: error: {error}", file=sys.stderr)
        return 2


def _internal_failure(command: str) -> int:
    """A failure that is not the user's input: the whole traceback stays on stderr (the run's log)."""
    traceback.print_exc()
    print(f"ggtrain {command}: internal error (traceback above); exit 1", file=sys.stderr, flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
