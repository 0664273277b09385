"""Failure injection for the multi-host tests: a process that hangs or dies at the start of an iteration.

``GGTRAIN_FAULT_INJECT=hang@P:I`` makes process P hang, ``exit@P:I`` makes it exit 7, at the start of
iteration I (1-based). Unset (every production run), there is no fault and the loop calls nothing.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Mapping

ENV_VAR = "GGTRAIN_FAULT_INJECT"
KINDS = ("hang", "exit")


@dataclasses.dataclass(frozen=True)
class Fault:
    kind: str  # hang | exit
    process: int
    iteration: int  # 1-based

    @classmethod
    def parse(cls, spec: str) -> Fault:
        kind, _, where = spec.partition("@")
        process, _, at = where.partition(":")
        try:
            fault = cls(kind, int(process), int(at))
        except ValueError:
            fault = cls("", -1, -1)
        if fault.kind not in KINDS:
            raise ValueError(f"{ENV_VAR}={spec!r}: expected hang@P:I or exit@P:I")
        return fault

    def strike(self, iteration: int, process_index: int) -> None:
        """Hangs or ends this process if it is the one, at the iteration (1-based), the fault names."""
        if (process_index, iteration) != (self.process, self.iteration):
            return
        print(
            f"ggtrain: process {self.process}: injected fault {self.kind!r} at iteration {self.iteration}",
            file=sys.stderr,
            flush=True,
        )
        if self.kind == "exit":
            os._exit(7)
        while True:  # hang
            time.sleep(3600)


def fault_from_env(environ: Mapping[str, str] = os.environ) -> Fault | None:
    """The fault ``GGTRAIN_FAULT_INJECT`` asks for, or None (the normal case)."""
    spec = environ.get(ENV_VAR, "")
    return Fault.parse(spec) if spec else None
