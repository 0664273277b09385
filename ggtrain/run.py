"""An opened training run: everything one ``train`` call holds open, built in one place and closed in one.

:meth:`OpenedRun.open` checks the configuration before anything is written, then opens the manifest, the
checkpoint store (restoring the latest checkpoint on resume), the metrics writer, the updater, the
environment pool, the rollout driver and the sampler, and takes over SIGTERM / SIGINT so a stop request
ends the iteration cleanly. :meth:`OpenedRun.close` releases them in reverse.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax

from env_bridge.games import discover_games
from env_bridge.rollout import RolloutDriver
from env_bridge.worker_pool import EnvPool
from ggtrain.checkpoint import CheckpointStore
from ggtrain.config import TrainConfig, config_to_dict, write_resolved_config
from ggtrain.evaluate import EvalGame, eval_games
from ggtrain.fault_injection import Fault, fault_from_env
from ggtrain.host_exchange import HostExchange
from ggtrain.manifest import Manifest, game_list_hash, model_hashes
from ggtrain.metrics import MetricsWriter, truncate_metrics
from ggtrain.policies import resolve_model
from ggtrain.rollout_setup import make_rollout_driver, make_sampling_params
from ggtrain.seeds import RunSeeds
from ggtrain.update_loop import Updater
from models import load_pretrained
from models.sampler import Sampler, SamplingParams

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@dataclasses.dataclass
class StopFlag:
    """A signal handler that only records the request: the loop stops at the next safe point."""

    requested: str = ""

    def __call__(self, signum: int, _frame: Any) -> None:
        self.requested = signal.Signals(signum).name


def log_to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def training_games(config: TrainConfig) -> list[str]:
    if config.rollout.env == "builtin":
        return list(config.rollout.builtin_games)
    games = discover_games(config.rollout.split, config.data_dir or None, config.rollout.task_types or None)
    return [str(g.path) for g in games]


def check_config(config: TrainConfig, processes: int) -> None:
    """The checks that need the process count; they fail before anything is written."""
    if config.rollout.groups_per_iteration < processes:
        raise ValueError(
            f"RolloutConfig.groups_per_iteration = {config.rollout.groups_per_iteration} is fewer than the"
            f" {processes} processes: every host plays at least one whole task group"
        )
    group_rows = config.rollout.group_size * config.rollout.max_turns
    if config.loss.name == "ggpo" and config.batch.mini_batch_rows < group_rows:
        raise ValueError(
            f"BatchConfig.mini_batch_rows = {config.batch.mini_batch_rows} is below a task group's"
            f" {group_rows} possible turns (group_size x max_turns): GGPO batches every group whole"
        )


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
    fault: Fault | None = None  # test-only failure injection (GGTRAIN_FAULT_INJECT)
    previous_handlers: dict[signal.Signals, Any] = dataclasses.field(default_factory=dict)

    @property
    def main(self) -> bool:
        """Process 0: the one that writes logs, metrics, outcomes and the manifest."""
        return self.host.process_index == 0

    @classmethod
    def open(cls, config: TrainConfig, run_dir: Path, resume: bool, progress: bool, host: HostExchange) -> OpenedRun:
        if (run_dir / "checkpoints").exists() and not resume:
            raise ValueError(f"run directory {run_dir} already has checkpoints; pass --resume to continue it")
        check_config(config, host.process_count)
        fault = fault_from_env()
        # everything that can fail on a bad configuration happens before anything is written
        games = training_games(config)  # the games first: a missing data folder fails before a model build
        evaluation = eval_games(config, config.eval.split, config.eval.games)
        model_dir = resolve_model(config.model.path)
        seeds = RunSeeds(config.seed)
        main = host.process_index == 0
        manifest = Manifest.open(run_dir, config_to_dict(config), seeds.manifest())
        stored = run_dir / "config.json"
        if main and not stored.exists():
            write_resolved_config(config, run_dir)  # never rewritten: the run's configuration of record
        elif main and json.loads(stored.read_text())["iterations"] != config.iterations:
            manifest.event("iterations_changed", iterations=config.iterations)
        record_inputs(manifest, config, model_dir, games, evaluation)
        log = log_to_stderr if main else (lambda message: None)
        lm = load_pretrained(model_dir, config.model.param_dtype, config.model.dtype)
        updater = Updater.create(lm.config.replace(remat=config.model.remat), lm.params, config)
        tokenizer, model_config = lm.tokenizer, lm.config
        del lm  # the updater holds its own (sharded) copies; the loaded parameters are not needed again
        store = CheckpointStore(run_dir / "checkpoints", config.checkpoint, log=log)
        start = restore(store, updater, run_dir, log) if resume else 0
        for failure in store.failures:
            manifest.event("checkpoint_unreadable", message=failure)
        writer = MetricsWriter(run_dir)
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
        self.manifest.set("ended", time.strftime("%Y-%m-%dT%H:%M:%S%z"))


def restore(store: CheckpointStore, updater: Updater, run_dir: Path, log: Callable[[str], None]) -> int:
    """Loads the latest readable checkpoint into ``updater``; returns the iteration to continue at."""
    restored = store.restore_latest(updater.abstract_state())
    if restored is None:
        return 0
    _, updater.state, record = restored
    iteration = int(record["iteration"])
    if jax.process_index() == 0:
        truncate_metrics(run_dir, iteration)  # lines written after this checkpoint are played again
    log(f"ggtrain: resumed {run_dir} at iteration {iteration}")
    return iteration
