"""``ggtrain train``: rollout (behavior policy) -> advantages (graph/) -> update -> evaluation ->
checkpoint, one iteration at a time; resumable; SIGTERM / Ctrl-C checkpoint and exit cleanly."""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np

from env_bridge.collate import collate_turns
from env_bridge.games import discover_games
from env_bridge.rollout import SamplerPolicy
from env_bridge.worker_pool import EnvPool
from ggtrain.checkpoint import CheckpointStore
from ggtrain.config import TrainConfig, config_to_dict, write_resolved_config
from ggtrain.distributed import PeerTimeout, exchange, fail_fast, inject_fault
from ggtrain.evaluate import eval_games, evaluate, summarize_outcomes, write_outcomes
from ggtrain.manifest import Manifest, game_list_hash, model_hashes
from ggtrain.metrics import MetricAccumulator, MetricsWriter
from ggtrain.rollout_setup import make_rollout_driver, make_sampling_params
from ggtrain.sharding import host_local_copy
from ggtrain.tiny_ring import resolve_model as resolve_model_path
from ggtrain.update_loop import Updater
from graph import compute_advantages_with_diagnostics
from models import load_pretrained
from models.sampler import Sampler

ROW_FIELDS = ("group", "traj", "turn", "state", "next_state", "env_reward", "valid")


class Interrupted(Exception):
    pass


@dataclasses.dataclass
class StopFlag:
    requested: str = ""

    def __call__(self, signum: int, _frame: Any) -> None:
        self.requested = signal.Signals(signum).name


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def training_games(config: TrainConfig) -> list[str]:
    if config.rollout.env == "builtin":
        return list(config.rollout.builtin_games)
    games = discover_games(config.rollout.split, config.data_dir or None, config.rollout.task_types or None)
    return [str(g.path) for g in games]


def _scalar_diagnostics(diagnostics: dict[str, Any]) -> dict[str, float]:
    return {f"graph/{k}": float(v) for k, v in diagnostics.items() if np.ndim(v) == 0}


def train(
    config: TrainConfig,
    run_dir: str | Path,
    resume: bool = False,
    progress: bool = True,
    profile_iterations: frozenset[int] = frozenset(),
) -> dict[str, Any]:
    """Runs (or resumes) a training run; ``profile_iterations`` (1-based) are traced with
    ``jax.profiler`` into ``RUN_DIR/profile`` (TensorBoard / Perfetto).

    On several hosts (``ggtrain.distributed``) every host runs this same function: each plays its share
    of the task groups (whole groups), the turns are exchanged so every host holds the global batch and
    computes the same advantages, each contributes its rows to the global arrays, checkpoints are written
    collectively, and process 0 alone writes logs, metrics and the manifest."""
    run_dir = Path(run_dir)
    processes, me = jax.process_count(), jax.process_index()
    main = me == 0
    if (run_dir / "checkpoints").exists() and not resume:
        raise ValueError(f"run directory {run_dir} already has checkpoints; pass --resume to continue it")
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
    # everything that can fail on a bad configuration happens before anything is written
    model_dir = resolve_model_path(config.model.path)
    games = training_games(config)
    evaluation = eval_games(config, config.eval.split, config.eval.games)
    seeds = {"training": config.seed, "environment": config.seed, "rollout": config.seed, "evaluation": 0}
    manifest = Manifest.open(run_dir, config_to_dict(config), seeds)
    if main:
        write_resolved_config(config, run_dir)
    manifest.set("model_files", {"path": str(model_dir), "sha256": model_hashes(model_dir)})
    manifest.set(
        "game_lists",
        {
            config.rollout.split if config.rollout.env == "alfworld" else "builtin": game_list_hash(games),
            f"eval:{config.eval.split}": game_list_hash([g.game for g in evaluation]),
        },
    )
    log = _log if main else (lambda message: None)
    lm = load_pretrained(model_dir, config.model.param_dtype, config.model.dtype)
    updater = Updater.create(lm.config.replace(remat=config.model.remat), lm.params, config)
    tokenizer, model_config = lm.tokenizer, lm.config
    del lm  # the updater holds its own (sharded) copies; the loaded parameters are not needed again
    store = CheckpointStore(run_dir / "checkpoints", config.checkpoint, log=log)
    start = 0
    restored = store.restore_latest(updater.abstract_state()) if resume else None
    if restored is not None:
        _, updater.state, record = restored
        start = int(record["iteration"])
        log(f"ggtrain: resumed {run_dir} at iteration {start}")
    for failure in store.failures:
        manifest.event("checkpoint_unreadable", message=failure)
    writer = MetricsWriter(run_dir)
    stop = StopFlag()
    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    rollout = config.rollout
    pool = EnvPool(rollout.env, rollout.workers, step_timeout_s=rollout.step_timeout_s)
    sampler = Sampler(model_config, tokenizer)
    driver = make_rollout_driver(rollout, pool, tokenizer, rollout.max_turns)
    sampling = make_sampling_params(rollout, rollout.temperature)
    show = progress and main
    last: dict[str, Any] = {}
    try:
        for iteration in range(start, config.iterations):
            inject_fault(iteration + 1)
            started = time.perf_counter()
            profiling = iteration + 1 in profile_iterations
            if profiling:
                jax.profiler.start_trace(str(run_dir / "profile"))
            rng = np.random.default_rng([config.seed, iteration])
            chosen = [
                games[i]
                for i in rng.choice(
                    len(games), rollout.groups_per_iteration, replace=len(games) < rollout.groups_per_iteration
                )
            ]
            mine = list(range(me, len(chosen), processes))  # this host's whole task groups
            policy = SamplerPolicy(
                sampler,
                host_local_copy(updater.state.behavior_params),
                sampling,
                jax.random.fold_in(jax.random.PRNGKey(config.seed), iteration),
            )
            t0 = time.perf_counter()
            with _bar(show, rollout.max_turns, f"iter {iteration + 1} rollout", "turn") as bar:
                result = driver.run(
                    [chosen[i] for i in mine],
                    rollout.group_size,
                    policy,
                    seed=config.seed * 100_003 + iteration,
                    policy_version=int(updater.state.step),
                    group_ids=mine,
                    on_turn=lambda t, live: (bar.update(1), bar.set_postfix(live_envs=live)),
                )
            rollout_s = time.perf_counter() - t0
            shares = exchange(
                "rollout",
                (result.turns, result.episodes, result.dropped_groups, result.rerun_groups, stop.requested),
            )
            turns = sorted((t for share in shares for t in share[0]), key=lambda t: (t.traj, t.turn))
            episodes = sorted((e for share in shares for e in share[1]), key=lambda e: e["traj"])
            dropped = [d for share in shares for d in share[2]]
            reruns = sum(share[3] for share in shares)
            for group in dropped:
                manifest.event("group_dropped", iteration=iteration, **group)
            requested = next((share[4] for share in shares if share[4]), "")
            if requested:
                raise Interrupted(requested)
            if not turns:
                raise RuntimeError(f"iteration {iteration}: every task group failed ({dropped})")
            rows = {k: np.asarray([getattr(t, k) for t in turns]) for k in ROW_FIELDS}
            t0 = time.perf_counter()
            advantages, diagnostics = compute_advantages_with_diagnostics(
                config.estimator, rows, **dataclasses.asdict(config.advantage)
            )
            advantage_ms = (time.perf_counter() - t0) * 1e3
            update = MetricAccumulator()
            t0 = time.perf_counter()
            steps = -(-len(turns) // config.batch.mini_batch_rows) * config.batch.epochs  # about, for the bar
            with _bar(show, steps, f"iter {iteration + 1} update", "step") as bar:
                for epoch in range(config.batch.epochs):
                    batches = collate_turns(  # the global batch, the same on every host
                        turns,
                        config.batch.mini_batch_rows,
                        seed=config.seed * 7919 + iteration + 104_729 * epoch,
                        pad_id=tokenizer.pad_token_id,
                        extra={"advantages": advantages},
                        whole_groups=config.loss.name == "ggpo",  # GGPO compares whole trajectories
                    )
                    for batch in batches:
                        batch.pop("positions")
                        batch.pop("policy_version")
                        step_metrics = updater.update(batch)
                        update.add({k: (v, 1.0) for k, v in step_metrics.items()})
                        bar.update(1)
            update_s = time.perf_counter() - t0
            turn_count = sum(e["turns"] for e in episodes)
            metrics = (
                {
                    "success_rate": sum(e["won"] for e in episodes) / max(len(episodes), 1),
                    "mean_turns": turn_count / max(len(episodes), 1),
                    "invalid_action_rate": sum(e["invalid"] for e in episodes) / max(turn_count, 1),
                    "advantage_ms": advantage_ms,
                    "rollout_s": rollout_s,
                    "update_s": update_s,
                    "groups_dropped": float(len(dropped)),
                    "groups_rerun": float(reruns),
                }
                | update.means()
                | _scalar_diagnostics(diagnostics)
            )
            if (config.eval.every and (iteration + 1) % config.eval.every == 0) or iteration + 1 == config.iterations:
                params = host_local_copy(updater.state.params)
                mine_eval = list(range(me, len(evaluation), processes))
                with _bar(show, config.eval.max_turns, "eval", "turn") as bar:
                    _, records = evaluate(
                        config,
                        model_config,
                        params,
                        tokenizer,
                        [evaluation[i] for i in mine_eval],
                        [0],
                        pool,
                        on_turn=lambda t, live: (bar.update(1), bar.set_postfix(live_envs=live)),
                        game_ids=mine_eval,
                    )
                placed = [
                    (i, r) for share in exchange("eval", list(zip(mine_eval, records, strict=True))) for i, r in share
                ]
                records = [r for _, r in sorted(placed, key=lambda x: x[0])]  # evaluation order
                summary = summarize_outcomes(records)
                if main:
                    write_outcomes(records, run_dir / "eval" / f"iteration_{iteration + 1:04d}.jsonl")
                writer.write(iteration + 1, {"success_rate": summary["success_rate"]}, prefix="eval/")
                metrics["eval_success_rate"] = summary["success_rate"]
            if profiling:
                jax.profiler.stop_trace()
                manifest.event("profiled", iteration=iteration + 1, trace=str(run_dir / "profile"))
            metrics["iteration_s"] = time.perf_counter() - started
            writer.write(iteration + 1, metrics)
            store.save(
                iteration + 1,
                updater.state,
                {"iteration": iteration + 1, "config": config_to_dict(config)},
                {"eval/success_rate": metrics["eval_success_rate"]} if "eval_success_rate" in metrics else {},
            )
            last = metrics
            log(
                f"iter {iteration + 1}/{config.iterations} success {metrics['success_rate']:.3f} "
                f"turns {metrics['mean_turns']:.1f} invalid {metrics['invalid_action_rate']:.2f} "
                f"loss {metrics.get('loss', metrics.get('ggpo_loss', float('nan'))):.4f} "
                f"kl {metrics.get('kl', 0.0):.4f} tok/s {metrics.get('tokens_per_s', 0.0):.0f} "
                f"adv {advantage_ms:.2f} ms"
                + (f" eval {metrics['eval_success_rate']:.3f}" if "eval_success_rate" in metrics else "")
            )
            requested = next((r for r in exchange("stop", stop.requested) if r), "")
            if requested:
                raise Interrupted(requested)
    except (Interrupted, KeyboardInterrupt) as reason:
        manifest.event("interrupted", signal=str(reason) or "SIGINT", iteration=int(updater.state.step))
        log(f"ggtrain: {reason or 'interrupt'}: the last completed iteration is checkpointed; resume with --resume")
    except PeerTimeout as error:
        # the peer cannot join the collective shutdown, checkpoint wait or pool close: stop now
        manifest.event("peer_timeout", message=str(error), missing=error.missing)
        pool.close()
        fail_fast(error)
    finally:
        store.close()
        writer.close()
        pool.close()
        for s, handler in previous.items():
            signal.signal(s, handler)
    manifest.set("ended", time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    return last


@contextlib.contextmanager
def _bar(show: bool, total: int, desc: str, unit: str) -> Iterator[Any]:
    """A progress bar on stderr when it is a terminal (a log file gets the per-iteration lines only)."""
    from tqdm import tqdm

    bar = tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=False, disable=None if show else True)
    try:
        yield bar
    finally:
        bar.close()
