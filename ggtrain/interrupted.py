"""The exception a stop signal ends a command with (jax-free, so the CLI can catch it anywhere)."""

from __future__ import annotations

import signal


class Interrupted(Exception):
    """A stop signal ended the run early. ``signal`` is its name; ``iteration`` the last completed (and
    checkpointed) iteration, -1 while the loop has not said; ``exit_code`` is 128 + the signal number,
    the status a shell reports for a process the signal ended, so schedulers requeue it."""

    def __init__(self, signal_name: str, iteration: int = -1):
        super().__init__(signal_name)
        self.signal, self.iteration = signal_name, iteration

    @property
    def exit_code(self) -> int:
        return 128 + signal.Signals[self.signal].value
