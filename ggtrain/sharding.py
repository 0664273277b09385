"""Meshes and the logical-axis rules, kept in one place.

The model names every parameter and activation axis (``models/layers.py``); these rules map the names
onto a ``(data, fsdp, tensor)`` mesh. Parameters are sharded over ``fsdp`` on their embedding axis and
over ``tensor`` on heads / MLP / vocabulary; rows of a batch over ``data`` and ``fsdp``.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ggtrain.config import MeshConfig
from models.config import ModelConfig
from models.decoder import Decoder

MESH_AXES = ("data", "fsdp", "tensor")
BATCH_AXES = ("data", "fsdp")

LOGICAL_AXIS_RULES: tuple[tuple[str, Any], ...] = (
    ("batch", BATCH_AXES),
    ("vocab", "tensor"),
    ("embed", "fsdp"),
    ("q_heads", "tensor"),
    ("kv_heads", "tensor"),
    ("heads", "tensor"),
    ("mlp", "tensor"),
    ("layers", None),
    ("norm", None),
    ("length", None),
    ("cache_length", None),
    ("head_dim", None),
)


def make_mesh(config: MeshConfig, devices: list[jax.Device] | None = None) -> Mesh:
    devices = list(devices if devices is not None else jax.devices())
    fsdp, tensor = config.fsdp, config.tensor
    if fsdp < 1 or tensor < 1:
        raise ValueError(f"mesh fsdp={fsdp}, tensor={tensor}: expected >= 1")
    data = config.data if config.data != -1 else len(devices) // (fsdp * tensor)
    if data < 1 or data * fsdp * tensor != len(devices):
        raise ValueError(f"mesh data={config.data}, fsdp={fsdp}, tensor={tensor} does not fit {len(devices)} devices")
    return Mesh(np.asarray(devices).reshape(data, fsdp, tensor), MESH_AXES)


def param_logical_specs(model_config: ModelConfig) -> Any:
    """The logical ``PartitionSpec`` of every parameter (from the boxed metadata of an abstract init)."""
    tokens = jnp.zeros((1, 1), jnp.int32)
    abstract = jax.eval_shape(
        lambda: Decoder(model_config).init(jax.random.PRNGKey(0), tokens, tokens, jnp.ones((1, 1), bool))
    )
    return nn.get_partition_spec(abstract)


def param_shardings(model_config: ModelConfig, mesh: Mesh) -> Any:
    return nn.logical_to_mesh_sharding(param_logical_specs(model_config), mesh, LOGICAL_AXIS_RULES)


def batch_sharding(mesh: Mesh, ndim: int) -> NamedSharding:
    """Rows over (data, fsdp); other axes replicated."""
    return NamedSharding(mesh, PartitionSpec(BATCH_AXES, *([None] * (ndim - 1))))


def shard_batch(batch: dict[str, Any], mesh: Mesh) -> dict[str, jax.Array]:
    return {k: jax.device_put(np.asarray(v), batch_sharding(mesh, np.ndim(v))) for k, v in batch.items()}


def logical_rules_context() -> Any:
    return nn.logical_axis_rules(LOGICAL_AXIS_RULES)
