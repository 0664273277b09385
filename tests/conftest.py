"""Session-wide test set-up: JAX's persistent compilation cache (CPU compiles dominate test time)."""

from __future__ import annotations

import os
from pathlib import Path

import jax

CACHE_DIR = os.environ.get("GGTRAIN_JAX_CACHE", str(Path(__file__).resolve().parents[1] / ".jax_cache"))
jax.config.update("jax_compilation_cache_dir", CACHE_DIR)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
