"""Multi-host runs: joining the processes, exchanging host-side data, and noticing a dead or hung peer.

Every host runs the same program. :func:`initialize` joins them through ``jax.distributed`` (explicit
coordinator / count / id, or JAX's own detection on TPU pods and SLURM). Host-side values (rollout turns,
evaluation outcomes) travel through the coordination service's key-value store with :func:`exchange`,
which waits for each peer at most ``peer_timeout_s`` and raises :class:`PeerTimeout` naming the
processes that did not arrive, so a dead or hung host stops the run with a message instead of a hang.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import sys
import time
from typing import Any

import jax

CHUNK_BYTES = 1 << 20  # values go through the key-value store in pieces below gRPC's message limit


class PeerTimeout(RuntimeError):
    """A peer process did not reach an exchange point in time (dead, hung, or far behind)."""

    def __init__(self, tag: str, missing: list[int], timeout_s: float):
        self.tag, self.missing, self.timeout_s = tag, missing, timeout_s
        names = ", ".join(f"process {p}" for p in missing)
        super().__init__(f"{names} did not reach {tag!r} within {timeout_s:g} s (dead or hung); stopping")


@dataclasses.dataclass(frozen=True)
class DistributedSpec:
    coordinator: str = ""  # HOST:PORT of process 0; "" = single process or auto-detected cluster
    num_processes: int = 1
    process_id: int = 0
    peer_timeout_s: float = 600.0

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


_PEER_TIMEOUT_S = 600.0
_EXCHANGES: dict[str, int] = {}


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


def initialize(spec: DistributedSpec) -> None:
    """Joins the processes (no-op for one process outside a detected cluster). On CPU, collectives use
    gloo. The runtime's heartbeat timeout follows ``peer_timeout_s`` so a peer that dies inside a device
    collective is also reported, by the runtime, within that time."""
    global _PEER_TIMEOUT_S
    _PEER_TIMEOUT_S = spec.peer_timeout_s
    cluster = detected_cluster()
    if spec.num_processes == 1 and not cluster:
        return
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


def _client() -> Any:
    from jax._src import distributed

    client = distributed.global_state.client
    if client is None:
        raise RuntimeError("jax.distributed is not initialized")
    return client


def exchange(tag: str, value: Any, timeout_s: float | None = None) -> list[Any]:
    """Every process's ``value``, indexed by process id (an all-gather of picklable host values).
    Raises :class:`PeerTimeout` naming the processes that did not contribute within the timeout."""
    count = jax.process_count()
    if count == 1:
        return [value]
    timeout_s = _PEER_TIMEOUT_S if timeout_s is None else timeout_s
    client, me = _client(), jax.process_index()
    round_ = _EXCHANGES.get(tag, 0)
    _EXCHANGES[tag] = round_ + 1
    prefix = f"ggtrain/{tag}/{round_}"
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    pieces = [data[i : i + CHUNK_BYTES] for i in range(0, len(data), CHUNK_BYTES)] or [b""]
    for i, piece in enumerate(pieces):
        client.key_value_set_bytes(f"{prefix}/{me}/{i}", piece)
    client.key_value_set(f"{prefix}/{me}/count", str(len(pieces)))
    out: list[Any] = [None] * count
    missing = []
    deadline = time.monotonic() + timeout_s  # one deadline for all peers, not one timeout each

    def left_ms() -> int:
        return max(int((deadline - time.monotonic()) * 1000), 1)

    for p in range(count):
        if p == me:
            out[p] = value
            continue
        try:
            n = int(client.blocking_key_value_get(f"{prefix}/{p}/count", left_ms()))
            # the count is written last: every piece is there already
            blob = b"".join(client.blocking_key_value_get_bytes(f"{prefix}/{p}/{i}", left_ms()) for i in range(n))
        except Exception:  # the runtime's timeout / unavailable errors carry no stable type
            missing.append(p)
            continue
        out[p] = pickle.loads(blob)
    if missing:
        raise PeerTimeout(f"{tag} #{round_}", missing, timeout_s)
    if round_ > 0:  # every peer has read the previous round: it reached this one
        client.key_value_delete(f"ggtrain/{tag}/{round_ - 1}/{me}/")
    return out


def barrier(tag: str, timeout_s: float | None = None) -> None:
    exchange(tag, None, timeout_s)


def fail_fast(error: BaseException) -> None:
    """Ends this process non-zero at once: a normal exit would wait in ``jax.distributed.shutdown`` for
    the peer that is gone."""
    print(f"\nggtrain: process {jax.process_index()}: {error}", file=sys.stderr, flush=True)
    os._exit(1)


def inject_fault(iteration: int) -> None:
    """Failure injection for the multi-host tests only: ``GGTRAIN_FAULT_INJECT=hang@P:I`` makes process P
    hang, ``exit@P:I`` makes it die, at the start of iteration I (1-based)."""
    spec = os.environ.get("GGTRAIN_FAULT_INJECT", "")
    if not spec:
        return
    kind, _, where = spec.partition("@")
    process, _, at = where.partition(":")
    if int(process) != jax.process_index() or int(at) != iteration:
        return
    print(f"ggtrain: process {process}: injected fault {kind!r} at iteration {at}", file=sys.stderr, flush=True)
    if kind == "exit":
        os._exit(7)
    if kind == "hang":
        while True:
            time.sleep(3600)
    raise ValueError(f"GGTRAIN_FAULT_INJECT={spec!r}: expected hang@P:I or exit@P:I")
