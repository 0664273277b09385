"""Multi-host runs: which processes form the job (:class:`DistributedSpec`) and joining them.

Every host runs the same program. :func:`initialize` joins them through ``jax.distributed`` (explicit
coordinator / count / id, or JAX's own detection on TPU pods and SLURM) and returns the job's
:class:`~ggtrain.host_exchange.HostExchange`, which moves host-side values (rollout turns, evaluation
outcomes) between the processes and names a dead or hung peer (:class:`PeerTimeout`).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any

import jax

from ggtrain.host_exchange import CHUNK_BYTES, DEFAULT_PEER_TIMEOUT_S, HostExchange, PeerTimeout

__all__ = [
    "CHUNK_BYTES",
    "DistributedSpec",
    "HostExchange",
    "PeerTimeout",
    "detected_cluster",
    "fail_fast",
    "initialize",
]


@dataclasses.dataclass(frozen=True)
class DistributedSpec:
    coordinator: str = ""  # HOST:PORT of process 0; "" = single process or auto-detected cluster
    num_processes: int = 1
    process_id: int = 0
    peer_timeout_s: float = DEFAULT_PEER_TIMEOUT_S

    @classmethod
    def from_env(cls, **overrides: Any) -> DistributedSpec:
        """``GGTRAIN_COORDINATOR``, ``GGTRAIN_NUM_PROCESSES``, ``GGTRAIN_PROCESS_ID`` and
        ``GGTRAIN_PEER_TIMEOUT_S``; explicit (non-None) ``overrides`` win."""
        env = os.environ

        def number(name: str, default: str, kind: type) -> Any:
            try:
                return kind(env.get(name, default))
            except ValueError:
                raise ValueError(f"{name}={env[name]!r}: expected a number") from None

        values: dict[str, Any] = {
            "coordinator": env.get("GGTRAIN_COORDINATOR", ""),
            "num_processes": number("GGTRAIN_NUM_PROCESSES", "1", int),
            "process_id": number("GGTRAIN_PROCESS_ID", "0", int),
            "peer_timeout_s": number("GGTRAIN_PEER_TIMEOUT_S", "600", float),
        }
        values |= {k: v for k, v in overrides.items() if v is not None}
        spec = cls(**values)
        if spec.num_processes < 1 or not 0 <= spec.process_id < spec.num_processes:
            raise ValueError(
                f"process id {spec.process_id} with {spec.num_processes} processes: expected 0 <= id < count"
            )
        if spec.num_processes > 1 and not spec.coordinator:
            raise ValueError(f"{spec.num_processes} processes need a coordinator address (--coordinator HOST:PORT)")
        if spec.peer_timeout_s <= 0:
            raise ValueError(f"peer timeout {spec.peer_timeout_s}: expected > 0 seconds")
        return spec


def detected_cluster() -> str:
    """``slurm`` or ``tpu`` when this process is one task of a multi-process job JAX can detect, ``auto``
    when ``GGTRAIN_DISTRIBUTED=auto`` asks for JAX's own detection anyway, else ""."""
    env = os.environ
    if env.get("GGTRAIN_DISTRIBUTED", "") == "auto":
        return "auto"
    if int(env.get("SLURM_NTASKS", "1")) > 1 and "SLURM_PROCID" in env:
        return "slurm"
    if len([h for h in env.get("TPU_WORKER_HOSTNAMES", "").split(",") if h]) > 1:
        return "tpu"
    return ""


def initialize(spec: DistributedSpec) -> HostExchange:
    """Joins the processes (no-op for one process outside a detected cluster) and returns the job's host
    exchange. On CPU, collectives use gloo. The runtime's heartbeat timeout follows ``peer_timeout_s`` so
    a peer that dies inside a device collective is also reported, by the runtime, within that time."""
    cluster = detected_cluster()
    if spec.num_processes == 1 and not cluster:
        host = HostExchange(timeout_s=spec.peer_timeout_s)
    else:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        heartbeat = max(int(spec.peer_timeout_s), 10)
        if spec.coordinator:
            jax.distributed.initialize(
                spec.coordinator,
                spec.num_processes,
                spec.process_id,
                initialization_timeout=max(int(spec.peer_timeout_s), 30),
                heartbeat_timeout_seconds=heartbeat,
            )
        else:
            jax.distributed.initialize(heartbeat_timeout_seconds=heartbeat)
        host = HostExchange.from_runtime(spec.peer_timeout_s)
    return host


def fail_fast(error: BaseException) -> None:
    """Ends this process non-zero at once: a normal exit would wait in ``jax.distributed.shutdown`` for
    the peer that is gone."""
    print(f"\nggtrain: process {jax.process_index()}: {error}", file=sys.stderr, flush=True)
    os._exit(1)
