"""The compiling commands keep JAX's compiled programs on disk, in the folder the user chose."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBE = """
import json, jax, jax.numpy as jnp
from ggtrain.compilation_cache import enable
folder = enable()
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)  # this probe's compile is quick
jax.jit(lambda x: jnp.sin(x) * 3.0 + x.sum())(jnp.ones(7)).block_until_ready()
print(json.dumps({"folder": folder, "configured": jax.config.jax_compilation_cache_dir}))
"""


def _probe(env: dict[str, str]) -> dict[str, str | None]:
    clean = {k: v for k, v in os.environ.items() if k not in ("GGTRAIN_JAX_CACHE", "GGTRAIN_CACHE")}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=clean | env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_compiled_programs_land_in_the_chosen_folder(tmp_path: Path) -> None:
    got = _probe({"GGTRAIN_JAX_CACHE": str(tmp_path / "jax")})
    assert got == {"folder": str(tmp_path / "jax"), "configured": str(tmp_path / "jax")}
    assert any((tmp_path / "jax").iterdir())  # the probe's program was written


def test_the_default_folder_is_inside_the_ggtrain_cache(tmp_path: Path) -> None:
    assert _probe({"GGTRAIN_CACHE": str(tmp_path)})["folder"] == str(tmp_path / "jax")


def test_an_empty_setting_turns_the_cache_off(tmp_path: Path) -> None:
    assert _probe({"GGTRAIN_JAX_CACHE": "", "GGTRAIN_CACHE": str(tmp_path)}) == {"folder": None, "configured": None}
    assert not (tmp_path / "jax").exists()
