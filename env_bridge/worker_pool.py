"""Environments in worker processes: parallel steps, per-call timeouts, crash/hang recovery, recycling.

Environment slots are spread over the workers (slot % workers). One ``run`` sends every worker its
operations at once and collects the replies, so workers step in parallel. A worker that dies or
misses its deadline is killed and restarted; every operation it had in flight comes back as a
``Failure`` and its slots lose their episodes (the caller re-runs or drops those task groups whole).
A worker is replaced after ``recycle_after_games`` resets, at a reset boundary (TextWorld processes
grow with every game). An exception inside one operation (a game that fails to load) fails only that
operation.
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

from env_bridge.envs import StepResult, make_env


@dataclasses.dataclass(frozen=True)
class Op:
    slot: int
    kind: str  # "reset" | "step"
    game: str = ""
    seed: int = 0
    action: str = ""


@dataclasses.dataclass(frozen=True)
class Failure:
    slot: int
    reason: str


def _worker_main(conn: Connection, env_kind: str, fault_injection: bool) -> None:
    envs: dict[int, Any] = {}
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):  # the parent is gone (killed or exited without closing the pool)
            break
        if message is None:
            break
        replies: list[StepResult | Failure] = []
        for op in message:
            try:
                env = envs.get(op.slot)
                if env is None:
                    env = envs[op.slot] = make_env(env_kind, fault_injection)
                replies.append(env.reset(op.game, op.seed) if op.kind == "reset" else env.step(op.action))
            except Exception as error:
                last = traceback.format_exception_only(type(error), error)[-1].strip()
                where = f" (game {op.game})" if op.kind == "reset" else ""
                replies.append(Failure(op.slot, f"{op.kind} failed{where}: {last}"))
        conn.send(replies)
    for env in envs.values():
        env.close()


class _Worker:
    def __init__(self, ctx: Any, env_kind: str, fault_injection: bool):
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker_main, args=(child, env_kind, fault_injection), daemon=True)
        self.process.start()
        child.close()
        self.games = 0

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5)
        self.conn.close()


class EnvPool:
    def __init__(
        self,
        env_kind: str,
        num_workers: int,
        *,
        step_timeout_s: float = 60.0,
        reset_timeout_s: float = 180.0,
        recycle_after_games: int = 50,
        fault_injection: bool = False,
        start_method: str = "spawn",
    ):
        if num_workers < 1:
            raise ValueError(f"num_workers={num_workers}: expected >= 1")
        self.env_kind, self.fault_injection = env_kind, fault_injection
        self.step_timeout_s, self.reset_timeout_s = step_timeout_s, reset_timeout_s
        self.recycle_after_games = recycle_after_games
        self._ctx = mp.get_context(start_method)
        self.workers = [self._start() for _ in range(num_workers)]
        self.restarts = 0
        self.recycles = 0
        self.events: list[str] = []

    def _start(self) -> _Worker:
        return _Worker(self._ctx, self.env_kind, self.fault_injection)

    def worker_of(self, slot: int) -> int:
        return slot % len(self.workers)

    def _replace(self, index: int, why: str, count_as_restart: bool = True) -> None:
        self.workers[index].kill()
        self.workers[index] = self._start()
        if count_as_restart:
            self.restarts += 1
            self.events.append(f"worker {index} restarted: {why}")
        else:
            self.recycles += 1

    def run(self, ops: list[Op]) -> list[StepResult | Failure]:
        """Runs the operations (at most one per slot), workers in parallel; results in ``ops`` order."""
        by_worker: dict[int, list[int]] = {}
        for i, op in enumerate(ops):
            by_worker.setdefault(self.worker_of(op.slot), []).append(i)
        for w, indices in by_worker.items():
            resets = sum(ops[i].kind == "reset" for i in indices)
            if resets == len(indices) and self.workers[w].games >= self.recycle_after_games:
                self._replace(w, "recycled", count_as_restart=False)
        results: list[StepResult | Failure | None] = [None] * len(ops)
        deadlines = {}
        for w, indices in by_worker.items():
            timeout = sum(self.reset_timeout_s if ops[i].kind == "reset" else self.step_timeout_s for i in indices)
            try:
                self.workers[w].conn.send([ops[i] for i in indices])
                deadlines[w] = (time.monotonic() + timeout, timeout)
            except (BrokenPipeError, OSError) as error:
                self._fail(w, indices, ops, results, self._lost(w, error))
        for w, (deadline, timeout) in deadlines.items():
            indices = by_worker[w]
            worker = self.workers[w]
            try:
                if not worker.conn.poll(max(deadline - time.monotonic(), 0.0)):
                    self._fail(w, indices, ops, results, f"worker {w} timed out (no reply within {timeout:.0f} s)")
                    continue
                replies = worker.conn.recv()
            except (EOFError, OSError) as error:
                self._fail(w, indices, ops, results, self._lost(w, error))
                continue
            worker.games += sum(ops[i].kind == "reset" for i in indices)
            for i, reply in zip(indices, replies, strict=True):
                results[i] = reply
        return [r if r is not None else Failure(ops[i].slot, "no reply") for i, r in enumerate(results)]

    def _lost(self, w: int, error: BaseException) -> str:
        """Why worker ``w``'s pipe broke; the same words whether the send or the receive noticed it first."""
        process = self.workers[w].process
        process.join(timeout=1.0)
        if process.exitcode is not None:
            return f"worker {w} died (exit code {process.exitcode}, {type(error).__name__})"
        return f"worker {w} unreachable ({type(error).__name__}: {error})"

    def _fail(self, w: int, indices: list[int], ops: list[Op], results: list[Any], why: str) -> None:
        for i in indices:
            results[i] = Failure(ops[i].slot, why)
        self._replace(w, why)

    def close(self) -> None:
        for worker in self.workers:
            try:
                worker.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            worker.process.join(timeout=5)
            worker.kill()

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
