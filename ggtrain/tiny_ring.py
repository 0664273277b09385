"""Shim until train_loop imports ggtrain.policies: the old path of ``ggtrain.policies.tiny_ring``."""

from ggtrain.policies import resolve_model  # noqa: F401
from ggtrain.policies.tiny_ring import ALIAS, tiny_ring_dir  # noqa: F401
