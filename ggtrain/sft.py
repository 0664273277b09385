"""``ggtrain sft``: a supervised warm start on demonstrations through the RL update machinery (optax, the
mesh and shardings, micro-batches, orbax checkpoints, metrics), loss on response tokens only; writes an
HF model directory that ``ggtrain train`` and transformers load, with ``sft.json`` recording what it did.

The run's state lives in ``OUT/sft_run`` (resolved config, checkpoints, ``metrics.jsonl``, TensorBoard);
``--resume`` continues it bit for bit: the data order is a pure function of (seed, epoch) and the
iterator position is checkpointed with the optimizer state.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from env_bridge.collate import collate_turns, length_bucket
from env_bridge.packing import Packing
from ggtrain.checkpoint import CheckpointStore
from ggtrain.config import ConfigError, TrainConfig, config_to_dict, write_resolved_config
from ggtrain.metrics import MetricsWriter, truncate_metrics
from ggtrain.packing import packing_of
from ggtrain.rollout_setup import make_rollout_driver
from ggtrain.run import STOP_SIGNALS, StopFlag
from ggtrain.sft_data import data_hash, encode_records, object_types, rename_objects, split_by_game
from ggtrain.sharding import host_local_copy
from ggtrain.train_step import metric_means
from ggtrain.update_loop import Updater
from models import load_pretrained
from models.config import ModelConfig
from models.pretrained import LanguageModel
from models.scoring import score_tokens

RUN = "sft_run"


def sft_train_config(config: TrainConfig) -> TrainConfig:
    """The update configuration of SFT: the ``sft`` loss, no reference or KL term."""
    return dataclasses.replace(config, loss=dataclasses.replace(config.loss, name="sft", kl_coef=0.0))


def check_sft_config(config: TrainConfig) -> None:
    s, b = config.sft, config.batch
    if s.steps < 1:
        raise ConfigError(f"SftConfig.steps = {s.steps}: expected at least 1")
    if not 0 <= s.language_model_steps <= s.steps:
        raise ConfigError(f"SftConfig.language_model_steps = {s.language_model_steps}: expected 0 to steps ({s.steps})")
    if s.take_move_repeats < 1:
        raise ConfigError(f"SftConfig.take_move_repeats = {s.take_move_repeats}: expected at least 1")
    if not 0 <= s.rename_fraction <= 1:
        raise ConfigError(f"SftConfig.rename_fraction = {s.rename_fraction}: expected a value in [0, 1]")
    if not 0 <= s.detour_fraction <= 1:
        raise ConfigError(f"SftConfig.detour_fraction = {s.detour_fraction}: expected a value in [0, 1]")
    if not 0 <= s.uniform_fraction <= 1 or not 0 <= s.validation_fraction < 1:
        raise ConfigError("SftConfig.uniform_fraction must be in [0, 1] and validation_fraction in [0, 1)")
    if s.pack and not b.packing:
        raise ConfigError("SftConfig.pack = True packs with BatchConfig's packed layout: BatchConfig.packing is False")
    if b.mini_batch_rows % b.micro_batch_rows:
        raise ConfigError(
            f"BatchConfig.mini_batch_rows = {b.mini_batch_rows} is not a multiple of"
            f" BatchConfig.micro_batch_rows = {b.micro_batch_rows}"
        )


class Batches:
    """Endless mini-batches over the training turns. Each epoch is a permutation seeded by (seed, epoch),
    sorted by length within windows of ``WINDOW`` batches so a batch pads to its own length bucket (not
    the longest demonstration's), then the batches shuffled. The position (epoch, batch) is the state."""

    WINDOW = 16

    def __init__(self, turns: list[Any], rows: int, seed: int, pad_id: int, packing: Packing | None = None):
        self.turns, self.rows, self.seed, self.pad_id, self.packing = turns, rows, seed, pad_id, packing
        self.epoch, self.index = 0, 0
        self.plan = self._plan(0)

    def _plan(self, epoch: int) -> list[list[int]]:
        rng = np.random.default_rng([self.seed, epoch])
        order = rng.permutation(len(self.turns)).tolist()
        window, batches = self.rows * self.WINDOW, []
        for start in range(0, len(order), window):
            chunk = sorted(order[start : start + window], key=lambda i: _length(self.turns[i]))
            batches += [chunk[k : k + self.rows] for k in range(0, len(chunk), self.rows)]
        return [batches[i] for i in rng.permutation(len(batches))]

    def __next__(self) -> dict[str, np.ndarray]:
        if self.index >= len(self.plan):
            self.epoch, self.index = self.epoch + 1, 0
            self.plan = self._plan(self.epoch)
        chosen = [self.turns[i] for i in self.plan[self.index]]
        self.index += 1
        if self.packing is not None:
            return next(collate_turns(chosen, self.rows, seed=0, pad_id=self.pad_id, packing=self.packing))
        length = length_bucket(max(_length(t) for t in chosen))
        return next(collate_turns(chosen, self.rows, seed=0, pad_id=self.pad_id, length=length))

    def plan_batches(self) -> list[dict[str, np.ndarray]]:
        """Every batch of the current epoch once (the validation set)."""
        return [next(self) for _ in range(len(self.plan) - self.index)]

    def get_state(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "index": self.index}

    def set_state(self, state: dict[str, Any]) -> None:
        self.epoch, self.index = int(state["epoch"]), int(state["index"])
        self.plan = self._plan(self.epoch)


def every_token_loss(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The batch with its loss on every real token but each sequence's first (prompt and response)."""
    return batch | {"loss_mask": batch["attention_mask"].astype(bool) & (batch["positions"] > 0)}


def _length(turn: Any) -> int:
    return len(turn.prompt_ids) + len(turn.response_ids)


@functools.partial(jax.jit, static_argnums=0)
def _nll(
    model_config: ModelConfig, params: Any, tokens: jax.Array, attention: jax.Array, mask: jax.Array
) -> tuple[jax.Array, jax.Array]:
    logp = score_tokens(model_config, params, tokens, attention, mask)
    return -jnp.sum(logp), jnp.sum(mask)


def validation_loss(model_config: ModelConfig, params: Any, batches: list[dict[str, np.ndarray]]) -> float:
    """Mean negative log-likelihood per response token of the held-out demonstrations."""
    total = count = 0.0
    for b in batches:
        s, c = _nll(model_config, params, b["tokens"], b["attention_mask"], b["loss_mask"] & b["row_mask"][:, None])
        total, count = total + float(s), count + float(c)
    return total / max(count, 1.0)


@dataclasses.dataclass
class SftResult:
    steps: int
    train_loss: float
    validation_loss: float | None
    interrupted: str = ""


def run_sft_steps(
    config: TrainConfig,
    model_dir: Path,
    records: list[dict[str, Any]],
    out: Path,
    resume: bool,
    progress: bool = True,
    log: Any = None,
) -> tuple[LanguageModel, SftResult]:
    """The supervised steps; returns the trained model (not yet saved) and what happened."""
    log = log or (lambda m: print(m, file=sys.stderr, flush=True))
    run_dir = out / RUN
    lm = load_pretrained(model_dir, config.model.param_dtype, config.model.dtype)
    tokenizer = lm.tokenizer
    driver = make_rollout_driver(config.rollout, None, tokenizer, config.rollout.max_turns)  # type: ignore[arg-type]
    train_records, val_records = split_by_game(records, config.sft.validation_fraction, config.seed)
    train_records = rename_objects(train_records, config.sft.rename_fraction, config.seed, object_types(records))
    train_turns = encode_records(train_records, driver, tokenizer.eos_token_id)
    val_turns = encode_records(val_records, driver, tokenizer.eos_token_id)
    pad, rows = tokenizer.pad_token_id, config.batch.mini_batch_rows
    val_batches = list(Batches(val_turns, rows, 0, pad).plan_batches()) if val_turns else []
    updater = Updater.create(
        lm.config.replace(remat=config.model.remat, attention=config.model.attention),
        lm.params,
        sft_train_config(config),
    )
    del lm
    packing = packing_of(config.batch, updater.batch_shards) if config.sft.pack else None
    data = Batches(train_turns, rows, config.seed, pad, packing)
    store = CheckpointStore(run_dir / "checkpoints", config.checkpoint, log=log)
    last: tuple[float, float | None] = (float("nan"), None)  # (train loss, validation loss) of the last step
    if resume and (restored := store.restore_latest(updater.abstract_state())) is not None:
        _, updater.state, record = restored
        data.set_state(record["data_iterator"])
        last = (record.get("loss", float("nan")), record.get("validation_loss"))
        log(f"ggtrain sft: resumed {out} at step {int(updater.state.step)}")
    if resume:  # lines past the restored step are played again (all of them when nothing was restored)
        truncate_metrics(run_dir, int(updater.state.step))
    write_resolved_config(config, run_dir)
    writer = MetricsWriter(run_dir, resumed_at=int(updater.state.step) if resume else None)
    flag = StopFlag()
    previous = {s: signal.signal(s, flag) for s in STOP_SIGNALS}
    loss, val = last
    try:
        loss, val = _step_loop(config, updater, data, val_batches, store, writer, flag, progress, last)
    finally:
        store.close()
        writer.close()
        for s, h in previous.items():
            signal.signal(s, h)
    model = LanguageModel(
        updater.model_config.replace(remat=False, attention="masked"), host_local_copy(updater.state.params), tokenizer
    )
    return model, SftResult(int(updater.state.step), loss, val, flag.requested)


def _step_loop(
    config: TrainConfig,
    updater: Updater,
    data: Batches,
    val_batches: list[dict[str, np.ndarray]],
    store: CheckpointStore,
    writer: MetricsWriter,
    flag: StopFlag,
    progress: bool,
    last: tuple[float, float | None],
) -> tuple[float, float | None]:
    """``last``: the losses of the step the run starts after (restored with its checkpoint), returned as
    they are when no step is left to take."""
    from tqdm import tqdm

    s = config.sft
    loss, val = last
    start = int(updater.state.step)
    with tqdm(total=s.steps, initial=start, desc="sft", unit="step", disable=None if progress else True) as bar:
        while int(updater.state.step) < s.steps and not flag.requested:
            batch = next(data)
            if int(updater.state.step) < s.language_model_steps:
                batch = every_token_loss(batch)
            means = metric_means(updater.update(batch))
            step = int(updater.state.step)
            loss = means.get("loss", float("nan"))
            scalars = {"loss": loss, "tokens": means.get("tokens", 0.0), "grad_norm": means.get("grad_norm", 0.0)}
            if val_batches and (step % s.validation_every == 0 or step == s.steps):
                val = validation_loss(updater.model_config, updater.state.params, val_batches)
                scalars["validation_loss"] = val
            writer.write(step, scalars, prefix="sft/")  # before the checkpoint: a resume drops lines past it
            if step % s.checkpoint_every == 0 or step == s.steps or flag.requested:
                record = {"data_iterator": data.get_state(), "config": config_to_dict(config), "step": step}
                record |= {"loss": loss, "validation_loss": val}
                store.save(step, updater.state, record)
                store.wait()
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.3f}")
    return loss, val


def write_sft_record(out: Path, config: TrainConfig, records: list[dict], result: SftResult, extra: dict) -> None:
    record = {
        "steps": result.steps,
        "train_loss": result.train_loss,
        "validation_loss": result.validation_loss,
        "demonstrations": len(records),
        "data_sha256": data_hash(records),
        "config": config_to_dict(config),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    } | extra
    (out / "sft.json").write_text(json.dumps(record, indent=2) + "\n")


def evaluate_model(config: TrainConfig, model: LanguageModel, games: int) -> tuple[dict[str, Any], list[dict]]:
    """Success of ``model`` on ``games`` episodes of the evaluation split (EvalConfig's turn limit and
    temperature), one episode per game, seeded by the game's position."""
    from env_bridge.worker_pool import EnvPool
    from ggtrain.evaluate import eval_games, evaluate

    chosen = eval_games(config, config.eval.split, games)
    pool = EnvPool(config.rollout.env, config.rollout.workers, step_timeout_s=config.rollout.step_timeout_s)
    try:
        return evaluate(config, model.config, model.params, model.tokenizer, chosen, [0], pool)
    finally:
        pool.close()


def sft(
    config: TrainConfig,
    model_dir: Path,
    records: list[dict[str, Any]],
    out: Path,
    resume: bool = False,
    progress: bool = True,
) -> dict[str, Any]:
    """Supervised steps, the HF model written to ``out``, its evaluation, and ``out/sft.json``."""
    check_sft_config(config)
    if (out / RUN / "checkpoints").exists() and not resume:
        raise ConfigError(f"{out} already holds an SFT run; pass --resume to continue it")
    model, result = run_sft_steps(config, model_dir, records, out, resume, progress)
    if result.interrupted:
        return {"interrupted": result.interrupted, "steps": result.steps}
    model.save(out)
    extra: dict[str, Any] = {"base_model": str(model_dir)}
    if config.sft.eval_games > 0:
        summary, outcomes = evaluate_model(config, model, config.sft.eval_games)
        from ggtrain.evaluate import write_outcomes

        write_outcomes(outcomes, out / RUN / "eval" / "sft_final.jsonl")
        extra["evaluation"] = {"split": config.eval.split, "max_turns": config.eval.max_turns} | summary
    write_sft_record(out, config, records, result, extra)
    return json.loads((out / "sft.json").read_text())
