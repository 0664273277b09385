"""A run's policy as it stands: the model it trains (tokenizer, architecture) with the parameters of its
newest readable checkpoint, for evaluating or inspecting it outside the training loop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ggtrain.config import ConfigError, TrainConfig
from ggtrain.policies import resolve_model
from models import load_pretrained
from models.pretrained import LanguageModel


def model_dir(name: str, binding: str) -> Path:
    """``name`` (an alias or a folder) resolved, or a ConfigError naming ``binding`` and the value."""
    try:
        return resolve_model(name)
    except ValueError as error:
        raise ConfigError(f"{binding} {name!r}: {error}") from None


def restore_run_policy(run_dir: Path, config: TrainConfig, model_path: Path) -> tuple[LanguageModel, Any, int]:
    """(the run's model, read from ``model_path``, its ``ModelSpec.path`` resolved; its newest checkpoint's
    parameters; the iteration that checkpoint ended)."""
    import jax

    from ggtrain.checkpoint import CheckpointStore
    from ggtrain.update_loop import Updater

    lm = load_pretrained(model_path)
    updater = Updater.create(lm.config, lm.params, config, devices=jax.devices()[:1])
    store = CheckpointStore(Path(run_dir) / "checkpoints", config.checkpoint)
    try:
        restored = store.restore_latest(updater.abstract_state())
    finally:
        store.close()
    if restored is None:
        raise ConfigError(f"--run {run_dir}: no checkpoint to evaluate")
    return lm, restored[1].params, int(restored[2].get("iteration", restored[0]))
