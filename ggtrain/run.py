"""An opened training run: everything one ``train`` call holds open, built in one place and closed in one.

:func:`preflight` checks the whole configuration, the game lists, the model and the run directory before
anything is written; :meth:`OpenedRun.open` then loads the model, restores the latest checkpoint on resume
(one that does not fit the model is refused before anything is written), opens the manifest, the metrics
writer, the environment pool, the rollout driver and the sampler, and takes over SIGTERM / SIGINT so a
stop request ends the iteration cleanly. :meth:`OpenedRun.close` releases them in reverse.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax

from env_bridge.games import Game, discover_games
from env_bridge.rollout import RolloutDriver
from env_bridge.worker_pool import EnvPool
from ggtrain.checkpoint import CheckpointError, CheckpointStore
from ggtrain.config import ConfigError, TrainConfig, check_values, config_to_dict, write_resolved_config
from ggtrain.evaluate import EvalGame, eval_games
from ggtrain.fault_injection import Fault, fault_from_env
from ggtrain.host_batches import host_rows
from ggtrain.host_exchange import HostExchange
from ggtrain.manifest import Manifest, game_list_hash, model_hashes
from ggtrain.metrics import MetricsWriter, truncate_metrics
from ggtrain.rollout_setup import make_rollout_driver, make_sampling_params
from ggtrain.run_policy import model_dir
from ggtrain.seeds import RunSeeds
from ggtrain.sharding import batch_shards, check_rows_stay_home, make_mesh, sampler_shardings
from ggtrain.turn_log import drop_turn_logs_after
from ggtrain.update_loop import Updater
from models import load_pretrained
from models.sampler import Sampler, SamplingParams

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# what an OSError writing into the run directory means: it cannot be written (full, read-only, not a folder)
UNWRITABLE = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EEXIST)


@dataclasses.dataclass
class StopFlag:
    """A signal handler that only records the request: the loop stops at the next safe point. The
    first request hands both stop signals back to the operating system, so a second one ends the
    process at once (its default action), whatever the loop is doing."""

    requested: str = ""

    def __call__(self, signum: int, _frame: Any) -> None:
        self.requested = signal.Signals(signum).name
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_DFL)
        print(
            f"ggtrain: {self.requested}: stopping at the next safe point (send it again to exit at once)",
            file=sys.stderr,
            flush=True,
        )


class RunDirError(ConfigError):
    """The run directory cannot be written (not a folder, read-only, or the disk is full)."""


def log_to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def alfworld_games(config: TrainConfig, find: Callable[[], Any]) -> Any:
    """``find()`` (a discovery of ALFWorld games) with a missing or empty data folder refused by the
    binding that chooses it."""
    try:
        return find()
    except (ValueError, FileNotFoundError) as error:
        if config.data_dir:
            raise ConfigError(f"TrainConfig.data_dir = {config.data_dir!r}: {error}") from None
        raise ConfigError(f"{error}; or set TrainConfig.data_dir (--set TrainConfig.data_dir=PATH)") from None


def training_games(config: TrainConfig) -> list[str]:
    if config.rollout.env == "builtin":
        return list(config.rollout.builtin_games)
    rollout = config.rollout
    found = alfworld_games(
        config, lambda: discover_games(rollout.split, config.data_dir or None, rollout.task_types or None)
    )
    if rollout.evaluation_tasks_only:
        found = evaluation_tasks(config, found)
    return [str(g.path) for g in found]


def evaluation_tasks(config: TrainConfig, games: list[Game]) -> list[Game]:
    """``RolloutConfig.evaluation_tasks_only``: the ``games`` whose task is an evaluation game's, none of
    them an evaluation game."""
    evaluated = evaluation_games(config, config.eval.split, config.eval.games)
    tasks, ids = {g.game_id.split("/")[0] for g in evaluated}, {(config.eval.split, g.game_id) for g in evaluated}
    kept = [g for g in games if g.task in tasks and (g.split, g.game_id) not in ids]
    if not kept:
        raise ConfigError(
            f"RolloutConfig.evaluation_tasks_only = True: no {config.rollout.split} game shares a task with the"
            f" {len(evaluated)} {config.eval.split} evaluation games"
        )
    return kept


def evaluation_games(config: TrainConfig, split: str, count: int) -> list[EvalGame]:
    return list(alfworld_games(config, lambda: eval_games(config, split, count)))


def model_directory(config: TrainConfig) -> Path:
    return model_dir(config.model.path, "ModelSpec.path =")


# the RolloutConfig switches that need ALFWorld's games, and what only those have
ALFWORLD_ONLY = {
    "evaluation_tasks_only": "ALFWorld games have tasks with several trials",
    "balance_task_types": "ALFWorld games have task types",
}


def check_config(config: TrainConfig, processes: int, devices: list[jax.Device]) -> None:
    """The whole resolved configuration: every field's range and choices (``check_values``), and what
    needs the job's ``processes`` and ``devices``. Called before anything is written."""
    check_values(config)
    if config.rollout.groups_per_iteration < processes:
        raise ConfigError(
            f"RolloutConfig.groups_per_iteration = {config.rollout.groups_per_iteration} is fewer than the"
            f" {processes} processes: every host plays at least one whole task group"
        )
    mesh = config.mesh
    try:
        built = make_mesh(mesh, devices)  # the mesh the updater builds, on the same devices
    except ValueError:
        raise ConfigError(
            f"MeshConfig data = {mesh.data}, fsdp = {mesh.fsdp}, tensor = {mesh.tensor} does not fit the"
            f" {len(devices)} device(s) (data x fsdp x tensor must be the device count; data = -1 fills it)"
        ) from None
    rows = config.batch.mini_batch_rows
    if rows % batch_shards(built):
        raise ConfigError(
            f"BatchConfig.mini_batch_rows = {rows} does not split over the {batch_shards(built)} row shards"
            " (MeshConfig data x fsdp)"
        )
    try:
        check_rows_stay_home(built)  # then each host's share, rows / processes, splits over its own shards
    except ValueError as error:
        raise ConfigError(str(error)) from None
    for field, why in ALFWORLD_ONLY.items():
        if config.rollout.env != "alfworld" and getattr(config.rollout, field):
            raise ConfigError(
                f"RolloutConfig.{field} = True with RolloutConfig.env = {config.rollout.env!r}: only {why}"
            )
    if config.loss.name == "ggpo" and config.batch.drop_zero_advantage_turns:
        raise ConfigError(
            "BatchConfig.drop_zero_advantage_turns = True with LossConfig.name = 'ggpo': GGPO's loss compares"
            " whole task groups, so no turn of a group can be left out"
        )
    group_rows = config.rollout.group_size * config.rollout.max_turns
    if config.loss.name == "ggpo" and host_rows(rows, processes) < group_rows:
        raise ConfigError(
            f"BatchConfig.mini_batch_rows = {rows} over {processes} process(es) gives each host"
            f" {host_rows(rows, processes)} rows per mini-batch, below a task group's {group_rows} possible"
            " turns (group_size x max_turns): GGPO batches every group whole on its host"
        )


def check_writable(run_dir: Path) -> None:
    """Refuses a run directory that cannot be made: its nearest existing folder is a file, or read-only."""
    existing = run_dir.absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise RunDirError(f"run directory {run_dir}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise RunDirError(f"run directory {run_dir}: {existing} is not writable")


def unwritable(error: OSError, run_dir: Path) -> RunDirError | None:
    """The one-line error for an OSError that means the run directory cannot be written, else None."""
    name = error.filename if isinstance(error.filename, str) else None
    inside = name is not None and Path(name).absolute().is_relative_to(run_dir.absolute())
    if error.errno in (errno.ENOSPC, errno.EDQUOT) or (inside and error.errno in UNWRITABLE):
        return RunDirError(f"run directory {run_dir}: cannot write {name or 'it'} ({error.strerror or error})")
    return None


@contextlib.contextmanager
def writing_to(run_dir: Path) -> Iterator[None]:
    """Turns an OSError that means the run directory cannot be written into its one-line error."""
    try:
        yield
    except OSError as error:
        refused = unwritable(error, run_dir)
        if refused is None:
            raise
        raise refused from error


def preflight(
    config: TrainConfig, run_dir: Path, resume: bool, host: HostExchange
) -> tuple[list[str], list[EvalGame], Path, Fault | None]:
    """Everything that can refuse the run, before anything is written: the configuration, the game
    lists, the model directory, the run directory. Returns the games, evaluation games, model, fault."""
    if (run_dir / "checkpoints").exists() and not resume:
        raise ConfigError(f"run directory {run_dir} already has checkpoints; pass --resume to continue it")
    check_config(config, host.process_count, jax.devices())
    try:
        fault = fault_from_env()
    except ValueError as error:
        raise ConfigError(str(error)) from None
    games = training_games(config)  # the games first: a missing data folder fails before a model build
    evaluation = evaluation_games(config, config.eval.split, config.eval.games)
    model_dir = model_directory(config)
    check_writable(run_dir)
    return games, evaluation, model_dir, fault


def record_inputs(
    manifest: Manifest, config: TrainConfig, model_dir: Path, games: list[str], evaluation: list[EvalGame]
) -> None:
    """The model files' and game lists' hashes: what a rerun must find again to reproduce this one."""
    manifest.set("model_files", {"path": str(model_dir), "sha256": model_hashes(model_dir)})
    manifest.set(
        "game_lists",
        {
            config.rollout.split if config.rollout.env == "alfworld" else "builtin": game_list_hash(games),
            f"eval:{config.eval.split}": game_list_hash([g.game for g in evaluation]),
        },
    )


@dataclasses.dataclass
class OpenedRun:
    """One training run's open resources and fixed inputs; ``start`` is the first iteration to play."""

    config: TrainConfig
    run_dir: Path
    host: HostExchange
    seeds: RunSeeds
    games: list[str]  # the training game list the iterations draw from
    evaluation: list[EvalGame]
    manifest: Manifest
    store: CheckpointStore
    writer: MetricsWriter
    updater: Updater
    tokenizer: Any
    model_config: Any
    pool: EnvPool
    driver: RolloutDriver
    sampler: Sampler
    sampling: SamplingParams
    start: int
    stop: StopFlag
    log: Callable[[str], None]
    show_progress: bool  # progress bars (process 0, when asked for)
    sampler_layout: Any = None  # with several hosts, each samples on all its devices (sharding.sampler_shardings)
    exchanged: tuple[int, int] = (0, 0)  # the host exchange's (sent, received) byte totals at the last record
    fault: Fault | None = None  # test-only failure injection (GGTRAIN_FAULT_INJECT)
    previous_handlers: dict[signal.Signals, Any] = dataclasses.field(default_factory=dict)

    @property
    def main(self) -> bool:
        """Process 0: the one that writes logs, metrics, outcomes and the manifest."""
        return self.host.process_index == 0

    @classmethod
    def open(cls, config: TrainConfig, run_dir: Path, resume: bool, progress: bool, host: HostExchange) -> OpenedRun:
        games, evaluation, model_dir, fault = preflight(config, run_dir, resume, host)
        seeds = RunSeeds(config.seed)
        main = host.process_index == 0
        log = log_to_stderr if main else (lambda message: None)
        lm = load_pretrained(model_dir, config.model.param_dtype, config.model.dtype)
        updater = Updater.create(
            lm.config.replace(remat=config.model.remat, attention=config.model.attention), lm.params, config
        )
        tokenizer, model_config = lm.tokenizer, lm.config
        del lm  # the updater holds its own (sharded) copies; the loaded parameters are not needed again
        with writing_to(run_dir):
            store, start, manifest = open_records(config, run_dir, resume, updater, seeds, log)
            record_inputs(manifest, config, model_dir, games, evaluation)
            # checkpoints start at iteration 1: a resume at 0 restored nothing, and every step is played again
            writer = MetricsWriter(run_dir, resumed_at=(start or -1) if resume else None)
        stop = StopFlag()
        previous = {s: signal.signal(s, stop) for s in STOP_SIGNALS}
        rollout = config.rollout
        pool = EnvPool(rollout.env, rollout.workers, step_timeout_s=rollout.step_timeout_s)
        return cls(
            config=config,
            run_dir=run_dir,
            host=host,
            seeds=seeds,
            games=games,
            evaluation=evaluation,
            manifest=manifest,
            store=store,
            writer=writer,
            updater=updater,
            tokenizer=tokenizer,
            model_config=model_config,
            pool=pool,
            driver=make_rollout_driver(rollout, pool, tokenizer, rollout.max_turns),
            sampler=Sampler(model_config, tokenizer),
            sampling=make_sampling_params(rollout, rollout.temperature),
            start=start,
            stop=stop,
            log=log,
            show_progress=progress and main,
            sampler_layout=sampler_shardings(model_config) if jax.process_count() > 1 else None,
            fault=fault,
            previous_handlers=previous,
        )

    def close(self) -> None:
        """Waits for checkpoint writes, closes the writers and the pool, gives the signals back."""
        self.store.close()
        self.writer.close()
        self.pool.close()
        for s, handler in self.previous_handlers.items():
            signal.signal(s, handler)

    def end(self) -> None:
        self.manifest.set("host_exchange", self.host.traffic())  # process 0's share of it
        self.manifest.set("ended", time.strftime("%Y-%m-%dT%H:%M:%S%z"))


def open_records(
    config: TrainConfig, run_dir: Path, resume: bool, updater: Updater, seeds: RunSeeds, log: Callable[[str], None]
) -> tuple[CheckpointStore, int, Manifest]:
    """The checkpoint store, the iteration to start at and the manifest. A new run writes its manifest
    and config.json first (a refusal then leaves no checkpoints folder in the way of the corrected
    command); a resumed one restores first, so a checkpoint that does not fit the model is refused with
    the run directory unchanged. With no readable checkpoint the manifest records each one and why."""
    if not resume:
        manifest = open_manifest(config, run_dir, seeds)
        return CheckpointStore(run_dir / "checkpoints", config.checkpoint, log=log), 0, manifest
    store = CheckpointStore(run_dir / "checkpoints", config.checkpoint, log=log)
    try:
        start = restore(store, updater, run_dir, log)
    except CheckpointError:
        manifest = open_manifest(config, run_dir, seeds)
        for failure in store.failures:
            manifest.event("checkpoint_unreadable", message=failure)
        manifest.event("no_readable_checkpoint", checkpoints=str(store.directory))
        store.close()
        raise
    except BaseException:
        store.close()
        raise
    manifest = open_manifest(config, run_dir, seeds)
    for failure in store.failures:
        manifest.event("checkpoint_unreadable", message=failure)
    return store, start, manifest


def open_manifest(config: TrainConfig, run_dir: Path, seeds: RunSeeds) -> Manifest:
    """The manifest (a restart event on resume) and, once, config.json: the run's configuration of record."""
    manifest = Manifest.open(run_dir, config_to_dict(config), seeds.manifest())
    stored = run_dir / "config.json"
    if jax.process_index() == 0 and not stored.exists():
        write_resolved_config(config, run_dir)
    elif jax.process_index() == 0 and json.loads(stored.read_text())["iterations"] != config.iterations:
        manifest.event("iterations_changed", iterations=config.iterations)
    return manifest


def restore(store: CheckpointStore, updater: Updater, run_dir: Path, log: Callable[[str], None]) -> int:
    """Loads the latest readable checkpoint into ``updater``; returns the iteration to continue at."""
    restored = store.restore_latest(updater.abstract_state())
    if restored is None:  # killed before its first checkpoint: everything is played again from the start
        if jax.process_index() == 0:
            truncate_metrics(run_dir, -1)
        drop_turn_logs_after(run_dir, 0)
        return 0
    _, updater.state, record = restored
    iteration = int(record["iteration"])
    if jax.process_index() == 0:
        truncate_metrics(run_dir, iteration)  # lines written after this checkpoint are played again
    drop_turn_logs_after(run_dir, iteration)  # each host's own files: hosts may not share a disk
    log(f"ggtrain: resumed {run_dir} at iteration {iteration}")
    return iteration
