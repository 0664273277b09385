"""Padding to a fixed table of sizes, so that each size compiles once: the sampler's batch and prompt
lengths and the trainer's turn length (``env_bridge.collate``) share this one rule.

``graph.host_api.row_bucket`` keeps its own power-of-two rule: ``graph`` imports only jax (DESIGN.md).
"""

from __future__ import annotations

from collections.abc import Sequence


def bucket(n: int, sizes: Sequence[int], what: str) -> int:
    """The smallest of the ascending ``sizes`` that holds ``n``; ``what`` names ``n`` in the error."""
    for size in sizes:
        if n <= size:
            return size
    raise ValueError(f"{what} {n} exceeds the largest bucket {sizes[-1]}")
