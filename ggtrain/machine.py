"""What a run or a benchmark ran on: CPU model, vector extensions, core counts and thread settings.

Every benchmark JSON carries :func:`machine_record` so a figure can be read against the machine that
produced it (a 2-core AVX2 laptop and a 64-core AMX server are not the same claim).
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from typing import Any

# the /proc/cpuinfo flags that decide CPU matmul/attention speed (x86; "Features" on ARM)
VECTOR_FLAGS = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "avx_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "neon",
    "asimd",
    "sve",
    "sve2",
    "bf16",
    "i8mm",
)
THREAD_ENV = (
    "XLA_FLAGS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "TF_NUM_INTRAOP_THREADS",
    "TF_NUM_INTEROP_THREADS",
    "TORCH_NUM_THREADS",
)


def parse_cpuinfo(text: str) -> dict[str, Any]:
    """``cpu_model`` and the ``vector_extensions`` (of :data:`VECTOR_FLAGS`) of the first processor."""
    model, flags = "", set[str]()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "hardware", "cpu model") and not model:
            model = value.strip()
        elif key in ("flags", "features") and not flags:
            flags = set(value.split())
    return {"cpu_model": model, "vector_extensions": [f for f in VECTOR_FLAGS if f in flags]}


def cpu_record(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, Any]:
    try:
        info = parse_cpuinfo(cpuinfo.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        info = {"cpu_model": "", "vector_extensions": []}
    if not info["cpu_model"]:
        info["cpu_model"] = platform.processor() or "unknown"
    usable: int | None
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    return info | {"machine": platform.machine(), "cpu_count": os.cpu_count(), "usable_cpus": usable}


def thread_record() -> dict[str, Any]:
    """The thread-related environment, plus torch's thread counts when torch is loaded."""
    out: dict[str, Any] = {name: os.environ.get(name) for name in THREAD_ENV}
    torch = sys.modules.get("torch")
    if torch is not None:
        out["torch_num_threads"] = torch.get_num_threads()
        out["torch_num_interop_threads"] = torch.get_num_interop_threads()
    return out


def host_record() -> dict[str, Any]:
    """CPU and thread settings: what a run manifest records as ``machine`` (it has Python and JAX already)."""
    return {"cpu": cpu_record(), "threads": thread_record()}


def machine_record() -> dict[str, Any]:
    """CPU, threads, Python and (when loaded) JAX: the block every benchmark JSON records as ``machine``."""
    out: dict[str, Any] = host_record() | {"python": platform.python_version()}
    jax = sys.modules.get("jax")
    if jax is not None:
        out["jax"] = {
            "version": jax.__version__,
            "backend": jax.default_backend(),
            "devices": [str(d) for d in jax.devices()],
        }
    return out
