"""JAX's persistent compilation cache for the commands that compile (train, sft, eval): each new shape
is compiled once per machine instead of once per process. On a fresh machine the quickstart's
iterations that met new shapes took about twice as long as the others
(experiments/results/alfworld_quickstart_strict/), and every run of a study compiles the same shapes."""

from __future__ import annotations

import os

from models.artifacts import cache_dir

ENV = "GGTRAIN_JAX_CACHE"  # a folder; empty: no persistent cache
MIN_COMPILE_SECONDS = 0.5  # shorter compiles are cheaper to redo than to read back


def enable() -> str | None:
    """Points JAX at ``$GGTRAIN_JAX_CACHE`` (default ``<ggtrain cache>/jax``) unless the process chose a
    cache folder already (the test session does); returns the folder in use, or None."""
    import jax

    chosen = jax.config.jax_compilation_cache_dir  # type: ignore[attr-defined]
    if chosen:
        return str(chosen)
    folder = os.environ.get(ENV, str(cache_dir() / "jax"))
    if not folder:
        return None
    jax.config.update("jax_compilation_cache_dir", folder)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    return folder
