"""``ggtrain train``: rollout (behavior policy) -> advantages (graph/) -> update -> evaluation ->
checkpoint, one iteration at a time; resumable. SIGTERM / Ctrl-C stop at the next safe point with the
last completed iteration checkpointed (:class:`Interrupted`, exit 128 + signal); any other failure is
recorded in the manifest and raised with its traceback; ``ended`` is set only when every iteration ran.

On several hosts (``ggtrain.distributed``) every host runs this same loop: each plays its share of the
task groups (whole groups), keeps its turns, computes their advantages (per group: bit for bit what one
host would), and contributes them as its rows of every global mini-batch (``ggtrain.host_batches``);
only small values cross hosts (``ggtrain.rollout_summary``: counts, episode totals, graph diagnostics,
dropped groups, stop requests; the mini-batch layout's integers; evaluation outcomes). Checkpoints are
written collectively, and process 0 alone writes logs, metrics and the manifest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np

from env_bridge.collate import collate_plan
from env_bridge.rollout import Episode, SamplerPolicy, Turn
from ggtrain.config import TrainConfig, config_to_dict
from ggtrain.distributed import fail_fast
from ggtrain.evaluate import evaluate, summarize_outcomes, write_outcomes
from ggtrain.game_draws import choose_balanced_games, choose_games
from ggtrain.host_batches import Epoch, host_epochs, host_rows, turns_with_signal
from ggtrain.host_exchange import HostExchange, PeerTimeout
from ggtrain.interrupted import Interrupted
from ggtrain.metrics import MetricAccumulator
from ggtrain.packing import packing_of
from ggtrain.rollout_summary import HostSummary, episode_metrics, episode_totals, merge_summaries, scalar_diagnostics
from ggtrain.run import OpenedRun, StopFlag, training_games, unwritable
from ggtrain.seeds import EVALUATION_SEEDS
from ggtrain.sharding import host_local_copy
from ggtrain.turn_log import turn_log_path, turn_records
from graph import compute_advantages_with_diagnostics

__all__ = ["Interrupted", "OpenedRun", "RolloutShare", "StopFlag", "train", "training_games"]

ROW_FIELDS = ("group", "traj", "turn", "state", "next_state", "env_reward", "valid")


@dataclasses.dataclass
class RolloutShare:
    """What one host played in an iteration (whole task groups), and whether it was asked to stop. It
    stays on the host: the others get its :class:`~ggtrain.rollout_summary.HostSummary`."""

    turns: list[Turn]
    episodes: list[Episode]
    dropped: list[dict[str, Any]]  # group, game, reason
    reruns: int
    stop_requested: str = ""  # the signal's name, "" when none arrived


def train(
    config: TrainConfig,
    run_dir: str | Path,
    resume: bool = False,
    progress: bool = True,
    profile_iterations: frozenset[int] = frozenset(),
    host: HostExchange | None = None,
) -> dict[str, Any]:
    """Runs (or resumes) a training run; returns the last iteration's metrics. ``profile_iterations``
    (1-based) are traced with ``jax.profiler`` into ``RUN_DIR/profile`` (TensorBoard / Perfetto).
    ``host`` is the exchange :func:`ggtrain.distributed.initialize` returned (default: the job as jax sees it).
    Raises :class:`Interrupted` after a stop signal, ``RunDirError`` when the run directory cannot be
    written, and any other failure as it came, each recorded in the manifest first."""
    run = OpenedRun.open(config, Path(run_dir), resume, progress, HostExchange.from_runtime() if host is None else host)
    last: dict[str, Any] = {}
    done = run.start  # iterations completed (and checkpointed)
    try:
        if run.start == 0 and config.eval.at_start and not (run.run_dir / "eval" / "iteration_0000.jsonl").exists():
            run.log(f"eval at step 0: {evaluate_policy(run, -1):.3f}")
        if run.start >= config.iterations:
            run.log(f"ggtrain: {run.run_dir} has finished all {config.iterations} iterations: nothing to do")
        for iteration in range(run.start, config.iterations):
            last = run_iteration(run, iteration, profiling=iteration + 1 in profile_iterations)
            done = iteration + 1
            if done < config.iterations:  # a request during the last iteration finds the run finished
                stop_if_requested(run)
    except (Interrupted, KeyboardInterrupt) as reason:
        stopped = Interrupted(str(reason) or "SIGINT", done)
        run.manifest.event("interrupted", signal=stopped.signal, iteration=done)
        run.log(f"ggtrain: {stopped.signal}: stopped after iteration {done} (checkpointed); resume with --resume")
        raise stopped from None
    except PeerTimeout as error:
        # the peer cannot join the collective shutdown, checkpoint wait or pool close: stop now
        run.manifest.event("peer_timeout", message=str(error), missing=error.missing)
        run.pool.close()
        fail_fast(error)
    except OSError as error:
        refused = unwritable(error, run.run_dir)
        record_failure(run, refused or error, done)
        if refused is None:
            raise
        raise refused from error
    except Exception as error:
        record_failure(run, error, done)
        raise
    finally:
        run.close()
    run.end()
    return last


def record_failure(run: OpenedRun, error: BaseException, done: int) -> None:
    """The manifest's ``failed`` event: what went wrong, after how many iterations, and the traceback
    (best effort: a run directory that cannot be written cannot record it either)."""
    with contextlib.suppress(OSError):
        run.manifest.event(
            "failed",
            error=f"{type(error).__name__}: {error}",
            iteration=done,
            traceback=traceback.format_exc(),
        )


def run_iteration(run: OpenedRun, iteration: int, profiling: bool) -> dict[str, float]:
    """One iteration (0-based), its phases in order; returns the metrics it logged."""
    if run.fault is not None:
        run.fault.strike(iteration + 1, run.host.process_index)
    started = time.perf_counter()
    if profiling:
        jax.profiler.start_trace(str(run.run_dir / "profile"))
    share, rollout_s = play_iteration(run, iteration)
    advantages, diagnostics, advantage_ms = advantages_of(run.config, share.turns)
    if run.config.rollout.log_turns:
        log_turns(run, iteration, share, advantages)
    rollout = gather_summary(run, iteration, summarize(share, diagnostics))
    update, update_s = update_policy(run, iteration, share.turns, advantages)
    metrics = (
        episode_metrics(rollout.episodes)
        | {"advantage_ms": advantage_ms, "rollout_s": rollout_s, "update_s": update_s}
        | {"groups_dropped": float(len(rollout.dropped)), "groups_rerun": float(rollout.reruns)}
        | update
        | {f"graph/{k}": float(v) for k, v in rollout.diagnostics.items()}
    )
    if evaluation_due(run.config, iteration):
        metrics["eval_success_rate"] = evaluate_policy(run, iteration)
    if profiling:
        jax.profiler.stop_trace()
        run.manifest.event("profiled", iteration=iteration + 1, trace=str(run.run_dir / "profile"))
    metrics["iteration_s"] = time.perf_counter() - started
    metrics |= exchange_metrics(run)
    run.writer.write(iteration + 1, metrics)
    save_checkpoint(run, iteration, metrics)
    run.log(progress_line(run.config, iteration, metrics))
    return metrics


def host_share(count: int, host: HostExchange) -> list[int]:
    """This host's items of ``count`` (task groups, evaluation games): every ``process_count``-th one."""
    return list(range(host.process_index, count, host.process_count))


def iteration_games(run: OpenedRun, iteration: int) -> list[str]:
    """The games of iteration ``iteration``'s task groups (``ggtrain.game_draws``), the same on every host."""
    rollout, seeds = run.config.rollout, run.seeds
    if rollout.balance_task_types:
        return choose_balanced_games(
            run.games, rollout.groups_per_iteration, seeds.base, iteration, seeds.group_choice(iteration)
        )
    return choose_games(run.games, rollout.groups_per_iteration, seeds.group_choice(iteration))


def play_iteration(run: OpenedRun, iteration: int) -> tuple[RolloutShare, float]:
    """This host's whole task groups played by the behavior policy; returns its share and the seconds."""
    rollout = run.config.rollout
    chosen = iteration_games(run, iteration)
    mine = host_share(len(chosen), run.host)
    behavior = host_local_copy(run.updater.state.behavior_params, run.sampler_layout)
    policy = SamplerPolicy(run.sampler, behavior, run.sampling, run.seeds.rollout_key(iteration))
    t0 = time.perf_counter()
    with _bar(run.show_progress, rollout.max_turns, f"iter {iteration + 1} rollout", "turn") as bar:
        result = run.driver.run(
            [chosen[i] for i in mine],
            rollout.group_size,
            policy,
            seed=run.seeds.environment(iteration),
            policy_version=int(run.updater.state.step),
            group_ids=mine,
            on_turn=_ticker(bar),
        )
    seconds = time.perf_counter() - t0
    share = RolloutShare(result.turns, result.episodes, result.dropped_groups, result.rerun_groups, run.stop.requested)
    return share, seconds


def log_turns(run: OpenedRun, iteration: int, share: RolloutShare, advantages: np.ndarray) -> None:
    """This host's turns of the iteration with their advantages (``ggtrain.turn_log``)."""
    path = turn_log_path(run.run_dir, iteration + 1, run.host.process_index, run.host.process_count)
    write_outcomes(turn_records(iteration + 1, share.turns, share.episodes, advantages), path)


def summarize(share: RolloutShare, diagnostics: dict[str, Any]) -> HostSummary:
    """What this host tells the others about its share: everything but the turns themselves."""
    return HostSummary(
        rows=len(share.turns),
        episodes=episode_totals(share.episodes),
        diagnostics=scalar_diagnostics(diagnostics),
        dropped=share.dropped,
        reruns=share.reruns,
        stop_requested=share.stop_requested,
    )


def gather_summary(run: OpenedRun, iteration: int, summary: HostSummary) -> HostSummary:
    """Every host's summary merged, on every host; stops on any host's stop request or when every group
    of every host failed."""
    rollout = merge_summaries(run.host.exchange("rollout_summary", summary))
    for group in rollout.dropped:
        run.manifest.event("group_dropped", iteration=iteration, **group)
    if rollout.stop_requested:
        raise Interrupted(rollout.stop_requested)
    if not rollout.rows:
        raise RuntimeError(f"iteration {iteration}: every task group failed ({rollout.dropped})")
    return rollout


def advantages_of(config: TrainConfig, turns: list[Turn]) -> tuple[np.ndarray, dict[str, Any], float]:
    """The estimator's per-turn advantages, its graph diagnostics, and the milliseconds it took (no
    turns, as on a host whose every group failed: none, and no diagnostics)."""
    if not turns:
        return np.zeros(0, np.float32), {}, 0.0
    rows = {k: np.asarray([getattr(t, k) for t in turns]) for k in ROW_FIELDS}
    t0 = time.perf_counter()
    advantages, diagnostics = compute_advantages_with_diagnostics(
        config.estimator, rows, **dataclasses.asdict(config.advantage)
    )
    return advantages, diagnostics, (time.perf_counter() - t0) * 1e3


def update_epochs(run: OpenedRun, iteration: int, turns: list[Turn]) -> list[Epoch]:
    """This host's mini-batch plan for every epoch of the update, in the count and shape all hosts share.
    Each host shuffles its own rows with the epoch's collate seed (``RunSeeds.collate``): with one host
    these are ``collate_turns``' mini-batches; with several, each host's share of every step
    (``ggtrain.host_batches`` says what that changes). Collective."""
    config, processes = run.config, run.host.process_count
    return host_epochs(
        run.host,
        turns,
        host_rows(config.batch.mini_batch_rows, processes),
        [run.seeds.collate(iteration, epoch) for epoch in range(config.batch.epochs)],
        whole_groups=config.loss.name == "ggpo",  # GGPO compares whole trajectories
        packing=packing_of(config.batch, run.updater.batch_shards, processes),
    )


def epoch_batches(
    run: OpenedRun, turns: list[Turn], advantages: np.ndarray, epoch: Epoch
) -> Iterator[dict[str, np.ndarray]]:
    """One epoch's mini-batches: this host's rows of each (padding once its own run out)."""
    for batch in collate_plan(
        turns, epoch.plan, epoch.shape, run.tokenizer.pad_token_id, {"advantages": advantages}, epoch.batches
    ):
        batch.pop("positions")
        batch.pop("policy_version")
        yield batch


def trained_turns(
    run: OpenedRun, turns: list[Turn], advantages: np.ndarray
) -> tuple[list[Turn], np.ndarray, dict[str, float]]:
    """The turns the update trains, their advantages, and with ``BatchConfig.drop_zero_advantage_turns``
    ``dropped_turns``, the turns left out on every host (those whose advantage is 0). Collective."""
    if not run.config.batch.drop_zero_advantage_turns:
        return turns, advantages, {}
    kept, kept_advantages = turns_with_signal(turns, advantages)
    counts = run.host.exchange("trained_turns", (len(kept), len(turns)))
    return kept, kept_advantages, {"dropped_turns": float(sum(total - k for k, total in counts))}


def update_policy(
    run: OpenedRun, iteration: int, turns: list[Turn], advantages: np.ndarray
) -> tuple[dict[str, float], float]:
    """``BatchConfig.epochs`` passes of optimizer steps; returns the update metrics and the seconds. With
    ``OptimizerConfig.skip_zero_advantage_steps`` a mini-batch without a nonzero advantage on any host
    takes no step, and ``skipped_steps`` counts them; with ``BatchConfig.drop_zero_advantage_turns`` only
    the turns with a nonzero advantage are trained (:func:`trained_turns`)."""
    update = MetricAccumulator()
    t0 = time.perf_counter()
    turns, advantages, dropped = trained_turns(run, turns, advantages)
    epochs = update_epochs(run, iteration, turns)
    skip, skipped = run.config.optimizer.skip_zero_advantage_steps, 0
    with _bar(run.show_progress, sum(e.batches for e in epochs), f"iter {iteration + 1} update", "step") as bar:
        for epoch in epochs:
            for batch in epoch_batches(run, turns, advantages, epoch):
                if skip and not any(run.host.exchange("advantage_signal", bool(np.any(batch["advantages"])))):
                    skipped += 1
                else:
                    update.add(run.updater.update(batch))
                bar.update(1)
    skipped_steps = {"skipped_steps": float(skipped)} if skip else {}
    return update.means() | skipped_steps | dropped, time.perf_counter() - t0


def evaluation_due(config: TrainConfig, iteration: int) -> bool:
    """Every ``EvalConfig.every`` iterations (0: never) and after the last one."""
    done = iteration + 1
    return bool(config.eval.every and done % config.eval.every == 0) or done == config.iterations


def evaluate_policy(run: OpenedRun, iteration: int) -> float:
    """Each host plays its share of the evaluation games with the learner's parameters; process 0 writes
    every outcome, in evaluation order. Returns the success rate (the same on every host)."""
    params = host_local_copy(run.updater.state.params, run.sampler_layout)
    mine = host_share(len(run.evaluation), run.host)
    with _bar(run.show_progress, run.config.eval.max_turns, "eval", "turn") as bar:
        _, records = evaluate(
            run.config,
            run.model_config,
            params,
            run.tokenizer,
            [run.evaluation[i] for i in mine],
            list(EVALUATION_SEEDS),
            run.pool,
            on_turn=_ticker(bar),
            game_ids=mine,
        )
    # one record per game: zip below relies on EVALUATION_SEEDS holding one seed
    placed = [(i, r) for share in run.host.exchange("eval", list(zip(mine, records, strict=True))) for i, r in share]
    step = {"split": run.config.eval.split, "step": iteration + 1}
    records = [r | step for _, r in sorted(placed, key=lambda x: x[0])]  # evaluation order
    summary = summarize_outcomes(records)
    if run.main:
        write_outcomes(records, run.run_dir / "eval" / f"iteration_{iteration + 1:04d}.jsonl")
    run.writer.write(iteration + 1, {"success_rate": summary["success_rate"]}, prefix="eval/")
    return float(summary["success_rate"])


def exchange_metrics(run: OpenedRun) -> dict[str, float]:
    """Bytes this host sent to and received from the others since the last iteration's record."""
    sent, received = run.host.totals()
    before, run.exchanged = run.exchanged, (sent, received)
    return {"exchange_sent_bytes": float(sent - before[0]), "exchange_received_bytes": float(received - before[1])}


def save_checkpoint(run: OpenedRun, iteration: int, metrics: dict[str, float]) -> None:
    """The state after iteration ``iteration`` (0-based), ranked by evaluation success when there is one."""
    best = {"eval/success_rate": metrics["eval_success_rate"]} if "eval_success_rate" in metrics else {}
    run.store.save(
        iteration + 1, run.updater.state, {"iteration": iteration + 1, "config": config_to_dict(run.config)}, best
    )


def progress_line(config: TrainConfig, iteration: int, metrics: dict[str, float]) -> str:
    """The one log line per iteration (all a log file gets: the progress bars need a terminal)."""
    loss = metrics.get("loss", metrics.get("ggpo_loss"))
    return (
        f"iter {iteration + 1}/{config.iterations} success {metrics['success_rate']:.3f} "
        f"turns {metrics['mean_turns']:.1f} invalid {metrics['invalid_action_rate']:.2f} "
        f"loss {_measured(loss, '.4f')} kl {_measured(metrics.get('kl'), '.4f')} "
        f"tok/s {_measured(metrics.get('tokens_per_s'), '.0f')} adv {metrics['advantage_ms']:.2f} ms"
        + (f" skipped {metrics['skipped_steps']:.0f}" if "skipped_steps" in metrics else "")
        + (f" eval {metrics['eval_success_rate']:.3f}" if "eval_success_rate" in metrics else "")
    )


def _measured(value: float | None, spec: str) -> str:
    """``-`` for a number the iteration did not measure: no loss, kl or tok/s when every optimizer step was
    skipped, no kl when the loss has no KL term."""
    return "-" if value is None else format(value, spec)


def stop_if_requested(run: OpenedRun) -> None:
    """Stops every host together when any of them got a stop signal during the iteration."""
    requested = next((r for r in run.host.exchange("stop", run.stop.requested) if r), "")
    if requested:
        raise Interrupted(requested)


def _ticker(bar: Any) -> Callable[[int, int], object]:
    """``RolloutDriver.run``'s ``on_turn``: one tick per batched turn, the live environments shown."""
    return lambda t, live: (bar.update(1), bar.set_postfix(live_envs=live))


@contextlib.contextmanager
def _bar(show: bool, total: int, desc: str, unit: str) -> Iterator[Any]:
    """A progress bar on stderr when it is a terminal (a log file gets the per-iteration lines only)."""
    from tqdm import tqdm

    bar = tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=False, disable=None if show else True)
    try:
        yield bar
    finally:
        bar.close()
