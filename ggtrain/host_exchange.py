"""Host-side all-gathers between the processes of a run, through the coordination service's key-value store.

Rollout turns and evaluation outcomes are Python values, not device arrays: each process publishes its
value under ``ggtrain/TAG/ROUND/PROCESS`` in pieces below gRPC's message limit, then reads every peer's.
One deadline covers all peers, and a peer that does not arrive raises :class:`PeerTimeout` naming it, so
a dead or hung host stops the run with a message instead of a hang. The exchange is an object (client,
timeout, round per tag) handed to whoever needs it; one process alone exchanges with itself only.

It counts, per tag, the bytes this process put into the store and the bytes it read back from its peers
(``sent``, ``received``): what crossed between hosts, through the coordinator.
"""

from __future__ import annotations

import dataclasses
import pickle
import time
from typing import Any

import jax

CHUNK_BYTES = 1 << 20  # values go through the key-value store in pieces below gRPC's message limit
DEFAULT_PEER_TIMEOUT_S = 600.0


class PeerTimeout(RuntimeError):
    """A peer process did not reach an exchange point in time (dead, hung, or far behind)."""

    def __init__(self, tag: str, missing: list[int], timeout_s: float):
        self.tag, self.missing, self.timeout_s = tag, missing, timeout_s
        names = ", ".join(f"process {p}" for p in missing)
        super().__init__(f"{names} did not reach {tag!r} within {timeout_s:g} s (dead or hung); stopping")


def pieces(data: bytes) -> list[bytes]:
    """``data`` cut into key-value-store-sized pieces (one empty piece for empty data)."""
    return [data[i : i + CHUNK_BYTES] for i in range(0, len(data), CHUNK_BYTES)] or [b""]


def runtime_client() -> Any:
    """The ``jax.distributed`` coordination client (after ``jax.distributed.initialize``)."""
    from jax._src import distributed

    client = distributed.global_state.client
    if client is None:
        raise RuntimeError("jax.distributed is not initialized")
    return client


@dataclasses.dataclass
class HostExchange:
    """All-gathers of picklable values among ``process_count`` processes, at most ``timeout_s`` per call."""

    process_index: int = 0
    process_count: int = 1
    timeout_s: float = DEFAULT_PEER_TIMEOUT_S
    client: Any = None  # the coordination client; None for one process
    rounds: dict[str, int] = dataclasses.field(default_factory=dict)  # calls so far, per tag
    sent: dict[str, int] = dataclasses.field(default_factory=dict)  # bytes put into the store, per tag
    received: dict[str, int] = dataclasses.field(default_factory=dict)  # bytes read from peers, per tag

    @classmethod
    def from_runtime(cls, timeout_s: float = DEFAULT_PEER_TIMEOUT_S) -> HostExchange:
        """This process's exchange as ``jax`` sees the job now (one process: no client needed)."""
        count = jax.process_count()
        client = runtime_client() if count > 1 else None
        return cls(jax.process_index(), count, timeout_s, client)

    def exchange(self, tag: str, value: Any, timeout_s: float | None = None) -> list[Any]:
        """Every process's ``value``, indexed by process id. Raises :class:`PeerTimeout` naming the
        processes that did not contribute within the timeout."""
        if self.process_count == 1:
            return [value]
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        round_ = self.rounds.get(tag, 0)
        self.rounds[tag] = round_ + 1
        prefix = f"ggtrain/{tag}/{round_}"
        self._count(self.sent, tag, self._publish(prefix, value))
        out: list[Any] = [None] * self.process_count
        missing = []
        deadline = time.monotonic() + timeout_s  # one deadline for all peers, not one timeout each
        for p in range(self.process_count):
            if p == self.process_index:
                out[p] = value
                continue
            try:
                blob = self._read(f"{prefix}/{p}", deadline)
            except Exception:  # the runtime's timeout / unavailable errors carry no stable type
                missing.append(p)
                continue
            self._count(self.received, tag, len(blob))
            out[p] = pickle.loads(blob)
        if missing:
            raise PeerTimeout(f"{tag} #{round_}", missing, timeout_s)
        if round_ > 0:  # every peer has read the previous round: it reached this one
            self.client.key_value_delete(f"ggtrain/{tag}/{round_ - 1}/{self.process_index}/")
        return out

    def barrier(self, tag: str, timeout_s: float | None = None) -> None:
        self.exchange(tag, None, timeout_s)

    def totals(self) -> tuple[int, int]:
        """Bytes sent and received so far, every tag together."""
        return sum(self.sent.values()), sum(self.received.values())

    def traffic(self) -> dict[str, dict[str, int]]:
        """Per tag: rounds, bytes sent, bytes received (for the manifest)."""
        return {
            tag: {"rounds": n, "sent_bytes": self.sent.get(tag, 0), "received_bytes": self.received.get(tag, 0)}
            for tag, n in sorted(self.rounds.items())
        }

    @staticmethod
    def _count(counts: dict[str, int], tag: str, size: int) -> None:
        counts[tag] = counts.get(tag, 0) + size

    def _publish(self, prefix: str, value: Any) -> int:
        """Puts ``value`` into the store; returns its pickled size (the piece count's digits left out)."""
        me = f"{prefix}/{self.process_index}"
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        parts = pieces(data)
        for i, piece in enumerate(parts):
            self.client.key_value_set_bytes(f"{me}/{i}", piece)
        self.client.key_value_set(f"{me}/count", str(len(parts)))  # last: readers then find every piece
        return len(data)

    def _read(self, peer: str, deadline: float) -> bytes:
        def left_ms() -> int:
            return max(int((deadline - time.monotonic()) * 1000), 1)

        n = int(self.client.blocking_key_value_get(f"{peer}/count", left_ms()))
        return b"".join(self.client.blocking_key_value_get_bytes(f"{peer}/{i}", left_ms()) for i in range(n))
