"""Training configuration: frozen dataclasses, bound from gin files once at start-up.

gin never reaches jitted code: :func:`resolve_config` parses the files and ``--set`` bindings, builds
one :class:`TrainConfig`, checks every field's type, and clears gin again.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gin

from env_bridge.actions import ACTION_FORMATS
from graph.config import AdvantageConfig

GinAdvantageConfig = gin.external_configurable(AdvantageConfig, name="AdvantageConfig")


@gin.configurable
@dataclasses.dataclass(frozen=True)
class ModelSpec:
    path: str = ""  # a local HF directory; "smollm2-135m-instruct" names the wheel-imported model
    param_dtype: str = "float32"
    dtype: str = "float32"
    remat: bool = False
    attention: str = "masked"  # masked (reference, any backend) | splash (TPU kernel) | splash_interpret (tests)


@gin.configurable
@dataclasses.dataclass(frozen=True)
class LossConfig:
    name: str = "ppo_clip"  # ppo_clip | ggpo
    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: float = 3.0
    aggregation: str = "token-mean"
    kl_type: str = "low_var_kl"
    kl_coef: float = 0.01
    entropy_coef: float = 0.001
    temperature: float = 1.0  # the sampling temperature the log-probs are taken at
    ggpo_beta: float = 0.1
    ggpo_clip_radius: float | None = None


@gin.configurable
@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
    learning_rate: float = 1e-6
    weight_decay: float = 0.01
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8
    grad_clip: float = 1.0
    schedule: str = "constant"  # constant | linear | cosine (after warmup)
    warmup_steps: int = 0
    total_steps: int = 150
    # no optimizer step on a mini-batch whose advantages are all 0 on every host: there the policy term has
    # no gradient, and a KL or entropy term alone would move the weights, Adam scaling even a rounding-noise
    # gradient to a step of about the learning rate (experiments/results/alfworld_comparison/attempt7_kl/).
    # A skipped step is not an optimizer step: Adam's bias correction, the schedule and the policy refresh
    # intervals count only the steps taken.
    skip_zero_advantage_steps: bool = False


@gin.configurable
@dataclasses.dataclass(frozen=True)
class BatchConfig:
    mini_batch_rows: int = 256  # turn rows per optimizer step (either layout)
    micro_batch_rows: int = 16  # padded layout: rows per micro-batch
    epochs: int = 1
    packing: bool = True  # several turns share one sequence (env_bridge.packing); False: one padded row each
    pack_length: int = 1536  # tokens per packed sequence (experiments/bench/packing.py chose it)
    micro_batch_tokens: int = 0  # packed: token positions per micro-batch; 0 = micro_batch_rows x pack_length
    # train only the turns whose advantage is not 0 (the filter of DAPO's dynamic sampling): a turn of a
    # group whose episodes all scored alike has no policy gradient, yet costs as much as any other turn.
    # The PPO term's gradient direction is unchanged; its token-mean is then over the trained turns, and
    # the KL and entropy terms cover those turns only. Fewer turns make fewer mini-batches. Not with GGPO,
    # whose loss compares whole groups.
    drop_zero_advantage_turns: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.pack_length, int) or self.pack_length < 1:
            raise ValueError(f"BatchConfig.pack_length = {self.pack_length!r}: expected a positive int")
        if not isinstance(self.micro_batch_tokens, int) or self.micro_batch_tokens < 0:
            raise ValueError(f"BatchConfig.micro_batch_tokens = {self.micro_batch_tokens!r}: expected an int >= 0")


@gin.configurable
@dataclasses.dataclass(frozen=True)
class PolicyConfig:
    reference_refresh_every: int = 0  # optimizer steps between hard copies learner -> reference; 0 = never
    behavior_sync_every: int = 1  # optimizer steps between learner -> behavior syncs; 0 = never


@gin.configurable
@dataclasses.dataclass(frozen=True)
class MeshConfig:
    data: int = -1  # -1: all devices not used by fsdp and tensor
    fsdp: int = 1
    tensor: int = 1


@gin.configurable
@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
    keep_last: int = 3
    best_metric: str = ""  # e.g. "eval/success_rate"; "" keeps no best checkpoint
    best_mode: str = "max"
    async_save: bool = True


@gin.configurable
@dataclasses.dataclass(frozen=True)
class RolloutConfig:
    env: str = "alfworld"  # alfworld | builtin
    split: str = "train"
    task_types: tuple[str, ...] = ()
    # train only on the games of ``split`` whose task (task type, object, receptacle and scene: the game's
    # folder) is one of the evaluation games' tasks: other trials of the tasks it is evaluated on, so the
    # games stay disjoint but the rooms and goals are the same (ALFWorld only)
    evaluation_tasks_only: bool = False
    # draw the task groups' games so that every task type gets the same number of groups over the run
    # (seeded rounds of all the types, ggtrain.game_draws), not uniformly over the games (ALFWorld only)
    balance_task_types: bool = False
    builtin_games: tuple[str, ...] = ("builtin:5:2:3", "builtin:6:1:4", "builtin:7:3:5", "builtin:5:4:1")
    groups_per_iteration: int = 16
    group_size: int = 8
    max_turns: int = 50
    max_prompt_tokens: int = 2048
    max_new_tokens: int = 512
    # prompt tokens per prefill step (a power of two); a prompt no longer than it prefills in one pass,
    # attending to its own keys in causal blocks (models.sampler). 256 keeps a 1.5B model's 2,048-token
    # prompts within a 16 GiB chip; a small model has no memory to save (the quickstart sets 1,024)
    prefill_chunk: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    history_length: int = 2
    show_tracked_state: bool = False
    action_format: str = "tags"  # tags: <think>/<action> (reference) | choice: the number of a listed action
    strict_actions: bool = False
    workers: int = 2
    retries: int = 1
    step_timeout_s: float = 60.0
    # write every training turn (action, episode outcome, advantage) to RUN_DIR/turns/ (ggtrain.turn_log)
    log_turns: bool = False


@gin.configurable
@dataclasses.dataclass(frozen=True)
class EvalConfig:
    split: str = "valid_seen"
    games: int = 128
    every: int = 5  # iterations between evaluations; 0 = only at the end
    temperature: float = 0.4
    max_turns: int = 50
    at_start: bool = False  # also evaluate the starting policy before the first update (logged at step 0)


@gin.configurable
@dataclasses.dataclass(frozen=True)
class SftConfig:
    """``ggtrain sft``: supervised steps on demonstrations (response tokens only), then an evaluation."""

    steps: int = 300
    # the first steps train on every token (prompt and response): a language-model phase that teaches a
    # model initialised at random to read and copy the game's text before it learns to answer
    language_model_steps: int = 0
    walkthrough_games: int = 0  # --walkthroughs: how many games of the split (0 = all), a seeded sample
    uniform_fraction: float = 0.0  # turns whose answer is replaced by a uniformly random admissible action
    # turns whose expert command takes or moves an object appear this many times: the object named by the
    # task must be copied into them, and they are a few of a game's turns among many `go to` answers
    take_move_repeats: int = 1
    # training turns (never held-out ones) whose object types are permuted by a random bijection: the model
    # cannot name the object from what rooms usually hold and must copy it from the prompt
    rename_fraction: float = 0.0
    # each walkthrough answer thinks its next milestone (``<think>clean apple with sinkbasin</think>``): the
    # subgoal follows from the task and the tracked state, and the action copies its object from it
    subgoal_thoughts: bool = False
    # a share of the walkthroughs' `go to` steps first visit a random other place, whose turn is answered
    # with the expert's `go to`: without them every arrival is at the right place, and the policy learns
    # to take the object wherever it arrives
    detour_fraction: float = 0.0
    # each mini-batch's rows packed into BatchConfig.pack_length-token sequences (the RL update's packed
    # layout) instead of padded to their length bucket: the same loss, fewer computed positions when the
    # rows' lengths vary (experiments/bench/sft_packing.py measures the recipe's rows)
    pack: bool = False
    validation_fraction: float = 0.05  # demonstrations (whole games) held out for the validation loss
    validation_every: int = 50
    checkpoint_every: int = 50
    eval_games: int = 32  # evaluation episodes at the end (EvalConfig's split and turn limit); 0 = none


@gin.configurable
@dataclasses.dataclass(frozen=True)
class TrainConfig:
    seed: int = 0
    iterations: int = 150
    data_dir: str = ""  # ALFWorld data; "" = $ALFWORLD_DATA, then ../shared/data/alfworld
    estimator: str = "graphgpo"
    model: ModelSpec = dataclasses.field(default_factory=ModelSpec)
    advantage: AdvantageConfig = dataclasses.field(default_factory=GinAdvantageConfig)
    loss: LossConfig = dataclasses.field(default_factory=LossConfig)
    optimizer: OptimizerConfig = dataclasses.field(default_factory=OptimizerConfig)
    batch: BatchConfig = dataclasses.field(default_factory=BatchConfig)
    policies: PolicyConfig = dataclasses.field(default_factory=PolicyConfig)
    mesh: MeshConfig = dataclasses.field(default_factory=MeshConfig)
    checkpoint: CheckpointConfig = dataclasses.field(default_factory=CheckpointConfig)
    rollout: RolloutConfig = dataclasses.field(default_factory=RolloutConfig)
    eval: EvalConfig = dataclasses.field(default_factory=EvalConfig)
    sft: SftConfig = dataclasses.field(default_factory=SftConfig)


CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"

CHOICES: dict[str, tuple[str, ...]] = {
    "RolloutConfig.env": ("alfworld", "builtin"),
    "RolloutConfig.action_format": ACTION_FORMATS,
}


class ConfigError(ValueError):
    """A configuration problem; the message names the binding, file or value."""


def _check_types(obj: Any, prefix: str = "") -> None:
    hints = typing.get_type_hints(type(obj))
    for field in dataclasses.fields(obj):
        value = getattr(obj, field.name)
        name = f"{prefix}{type(obj).__name__}.{field.name}"
        if dataclasses.is_dataclass(value):
            _check_types(value, prefix)
            continue
        expected = hints[field.name]
        allowed = typing.get_args(expected) if isinstance(expected, types.UnionType) else (expected,)
        ok = any(
            (typing.get_origin(a) is tuple and isinstance(value, tuple))
            or (a is type(None) and value is None)
            or (a is float and isinstance(value, (int, float)) and not isinstance(value, bool))
            or (a is int and isinstance(value, int) and not isinstance(value, bool))
            or (a not in (int, float, type(None)) and isinstance(a, type) and isinstance(value, a))
            for a in allowed
        )
        if not ok:
            raise ConfigError(f"{name} = {value!r}: expected {expected}")
        choices = CHOICES.get(f"{type(obj).__name__}.{field.name}")
        if choices is not None and value not in choices:
            raise ConfigError(f"{name} = {value!r}: expected one of {choices}")


# the smallest allowed value of each numeric field (TrainConfig's attribute path); ``ABOVE_ZERO`` must be > 0
AT_LEAST: dict[str, float] = {
    "seed": 0,
    "iterations": 0,
    "rollout.groups_per_iteration": 1,
    "rollout.group_size": 1,
    "rollout.max_turns": 1,
    "rollout.max_prompt_tokens": 1,
    "rollout.max_new_tokens": 1,
    "rollout.temperature": 0,
    "rollout.top_k": 0,
    "rollout.history_length": 0,
    "rollout.workers": 1,
    "rollout.retries": 0,
    "batch.mini_batch_rows": 1,
    "batch.micro_batch_rows": 1,
    "batch.epochs": 1,
    "eval.games": 1,
    "eval.every": 0,
    "eval.temperature": 0,
    "eval.max_turns": 1,
    "optimizer.learning_rate": 0,
    "optimizer.weight_decay": 0,
    "optimizer.warmup_steps": 0,
    "optimizer.total_steps": 1,
    "loss.clip_low": 0,
    "loss.clip_high": 0,
    "loss.dual_clip": 1,
    "loss.kl_coef": 0,
    "policies.reference_refresh_every": 0,
    "policies.behavior_sync_every": 0,
    "checkpoint.keep_last": 0,
}
ABOVE_ZERO = ("rollout.top_p", "rollout.step_timeout_s", "loss.temperature", "optimizer.grad_clip", "optimizer.eps")
AT_MOST: dict[str, float] = {"rollout.top_p": 1}


def _field(config: TrainConfig, path: str) -> tuple[str, Any]:
    """``("RolloutConfig.group_size", 8)`` for ``"rollout.group_size"``: the binding's name and value."""
    section, _, name = path.rpartition(".")
    owner = getattr(config, section) if section else config
    return f"{type(owner).__name__}.{name}", getattr(owner, name)


def _choices() -> dict[str, tuple[str, ...]]:
    """The names a string field may take, from the registries that define them (imported here, late:
    they import this module)."""
    from ggtrain.losses import LOSSES
    from ggtrain.optim import SCHEDULES
    from ggtrain.ppo import AGGREGATIONS, KL_TYPES
    from graph import ESTIMATORS
    from models.attention import ATTENTION_KERNELS

    dtypes = ("float32", "bfloat16", "float16")
    return {
        "estimator": tuple(sorted(ESTIMATORS)),
        "loss.name": tuple(sorted(LOSSES)),
        "loss.aggregation": AGGREGATIONS,
        "loss.kl_type": KL_TYPES,
        "optimizer.schedule": SCHEDULES,
        "checkpoint.best_mode": ("max", "min"),
        "model.param_dtype": dtypes,
        "model.dtype": dtypes,
        "model.attention": ATTENTION_KERNELS,
    }


def _backend() -> str:
    import jax

    return jax.default_backend()


def check_values(config: TrainConfig) -> None:
    """Every field's range and choices and the batch's divisibility: what a run would otherwise find out
    part-way through (an unknown estimator at the first advantage, a zero turn limit at the first rollout)."""
    for path, least in AT_LEAST.items():
        name, value = _field(config, path)
        if value < least:
            raise ConfigError(f"{name} = {value!r}: expected at least {least}")
    for path in ABOVE_ZERO:
        name, value = _field(config, path)
        if not value > 0:
            raise ConfigError(f"{name} = {value!r}: expected more than 0")
    for path, most in AT_MOST.items():
        name, value = _field(config, path)
        if value > most:
            raise ConfigError(f"{name} = {value!r}: expected at most {most}")
    for path, choices in _choices().items():
        name, value = _field(config, path)
        if value not in choices:
            raise ConfigError(f"{name} = {value!r}: expected one of {', '.join(choices)}")
    if config.model.attention == "splash" and (backend := _backend()) != "tpu":
        raise ConfigError(
            f"ModelSpec.attention = 'splash': the kernel runs on TPU only (this backend is {backend});"
            " use 'masked' (or 'splash_interpret', the same kernel interpreted: slow, for checks)"
        )
    chunk = config.rollout.prefill_chunk
    if chunk < 1 or chunk & (chunk - 1):
        raise ConfigError(
            f"RolloutConfig.prefill_chunk = {chunk}: expected a power of two (it divides the prompt buckets)"
        )
    batch = config.batch
    if batch.mini_batch_rows % batch.micro_batch_rows:
        raise ConfigError(
            f"BatchConfig.mini_batch_rows = {batch.mini_batch_rows} is not a multiple of"
            f" BatchConfig.micro_batch_rows = {batch.micro_batch_rows}"
        )


def resolve_config(files: Sequence[str | Path] = (), bindings: Sequence[str] = ()) -> TrainConfig:
    """Parses gin files and ``KEY=VALUE`` bindings into a checked, frozen :class:`TrainConfig`."""
    for f in files:
        if not Path(f).exists():
            raise ConfigError(f"config file {str(f)!r} does not exist")
    gin.clear_config()
    for f in files:  # `include 'base.gin'` resolves next to the including file, then in configs/
        gin.add_config_file_search_path(str(Path(f).resolve().parent))
    gin.add_config_file_search_path(str(CONFIG_DIR))
    logging.disable(logging.ERROR)  # gin logs each include it first looks for in the working directory
    try:
        gin.parse_config_files_and_bindings([str(f) for f in files], list(bindings), finalize_config=False)
        config = TrainConfig()
    except (ValueError, TypeError, SyntaxError, OSError) as error:
        first = str(error).strip().splitlines()[0]
        raise ConfigError(first) from error
    finally:
        logging.disable(logging.NOTSET)
        gin.clear_config()
    _check_types(config)
    return config


def config_from_dict(data: dict[str, Any], cls: type = TrainConfig) -> Any:
    """The frozen config a run directory's ``config.json`` holds (the inverse of :func:`config_to_dict`),
    checked like a resolved one: the run directory is the truth for everything that continues a run."""
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if field.name not in data:
            continue
        value, kind = data[field.name], hints[field.name]
        if dataclasses.is_dataclass(kind) and isinstance(kind, type):
            value = config_from_dict(value, kind)
        elif typing.get_origin(kind) is tuple or isinstance(value, list):
            value = tuple(value)
        values[field.name] = value
    config = cls(**values)
    if cls is TrainConfig:
        _check_types(config)
    return config


def config_file(name_or_path: str | Path) -> Path:
    """A gin file by path, or by name in ``configs/`` (``graphgpo`` -> ``configs/graphgpo.gin``)."""
    path = Path(name_or_path)
    if path.exists():
        return path
    candidate = CONFIG_DIR / (path.name if path.suffix == ".gin" else f"{path.name}.gin")
    if candidate.exists():
        return candidate
    raise ConfigError(f"config file {str(name_or_path)!r} not found (looked in {CONFIG_DIR} too)")


def config_to_dict(config: Any) -> dict[str, Any]:
    return dataclasses.asdict(config)


def config_differences(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> dict[str, tuple[Any, Any]]:
    """``{"section.field": (old, new)}`` for every value two config dicts disagree on."""
    out: dict[str, tuple[Any, Any]] = {}
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out |= config_differences(a, b, f"{prefix}{key}.")
        elif a != b:
            out[f"{prefix}{key}"] = (a, b)
    return out


def holds_resolved_config(run_dir: str | Path, config: TrainConfig) -> bool:
    """``run_dir``'s ``config.json`` (:func:`write_resolved_config`) exists and holds exactly ``config``."""
    stored = Path(run_dir) / "config.json"
    return stored.exists() and json.loads(stored.read_text()) == json.loads(json.dumps(config_to_dict(config)))


def write_resolved_config(config: TrainConfig, run_dir: str | Path) -> Path:
    """Writes ``config.json`` (the resolved values) into the run directory."""
    path = Path(run_dir) / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config_to_dict(config), indent=2, sort_keys=True) + "\n")
    return path
