"""Deviceless XLA:GPU compiles (``experiments/compile_for.py --topology h200:N``): with the CUDA plugin
(the ``gpu-compile`` extra, in its own environment) the train step and the sampler compile for 2 H200s
with the state sharded; without it the command is one line naming the extra, exit 2."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _has_cuda_plugin() -> bool:
    try:
        return importlib.util.find_spec("jax_plugins.xla_cuda12") is not None
    except ModuleNotFoundError:  # no jax_plugins namespace at all
        return False


HAS_CUDA_PLUGIN = _has_cuda_plugin()


def _run(*args: str) -> subprocess.CompletedProcess:
    env = os.environ | {"JAX_PLATFORMS": "cpu", "CUDA_VISIBLE_DEVICES": "-1"}
    return subprocess.run(
        [sys.executable, str(ROOT / "experiments" / "compile_for.py"), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )


@pytest.mark.skipif(HAS_CUDA_PLUGIN, reason="the CUDA plugin is installed: the GPU compiler is there")
def test_a_gpu_target_without_the_cuda_plugin_is_one_line_naming_the_extra():
    result = _run("--topology", "h200:8", "--mesh", "8,1,1")
    assert result.returncode == 2 and result.stdout == "", result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "h200:8" in lines[0] and "gpu-compile" in lines[0], result.stderr


@pytest.mark.parametrize("topology", ["h200", "h200:0", "h200:x"])
def test_a_gpu_target_needs_a_device_count(topology):
    result = _run("--topology", topology, "--mesh", "1,1,1")
    assert result.returncode == 2 and "expected h200:N" in result.stderr, result.stderr


@pytest.mark.slow
@pytest.mark.skipif(not HAS_CUDA_PLUGIN, reason="needs the gpu-compile extra (the CUDA plugin)")
def test_train_step_and_sampler_compile_for_two_h200s_with_the_state_split():
    import json

    result = _run(
        "--topology", "h200:2", "--model", "smollm2-135m", "--mesh", "1,2,1", "--micro-rows", "2", "--seq", "512"
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["compiler"].startswith("XLA:GPU") and report["chips"] == 2
    train = report["train_step"]
    assert train["fits"] and train["cost"] is None
    one = _run(
        "--topology", "h200:1", "--model", "smollm2-135m", "--mesh", "1,1,1", "--micro-rows", "2", "--seq", "512"
    )
    single = json.loads(one.stdout.strip().splitlines()[-1])["train_step"]
    # fsdp over 2 GPUs: the state arguments (params, moments, reference, behavior) are halved per GPU
    assert train["memory_gib"]["arguments"] < 0.55 * single["memory_gib"]["arguments"]
    assert report["sampler"]["decode_chunk"]["fits"]
