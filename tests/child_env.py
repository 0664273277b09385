"""The environment of a command a test runs in a child process: one host CPU device, unbuffered output and
the test session's persistent compilation cache.

The session itself has eight host devices (conftest.py, for the sharding tests) and a child inherits the
setting: on eight devices every step of a child's run is an 8-way program on this machine's 2 cores, its
own compile and several times slower (the tiny-alfworld build test took 359 s so, most of it there).
"""

from __future__ import annotations

import os

from tests.conftest import CACHE_DIR


def child_env(devices: int = 1, **extra: str) -> dict[str, str]:
    return (
        os.environ
        | {
            "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
            "PYTHONUNBUFFERED": "1",
            "JAX_COMPILATION_CACHE_DIR": CACHE_DIR,  # children compile each program once per session
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0.2",
        }
        | extra
    )
