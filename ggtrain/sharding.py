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


def batch_shards(mesh: Mesh) -> int:
    """Devices a batch's rows (or packed sequences) are split over: its row counts are multiples."""
    return int(np.prod([mesh.shape[a] for a in BATCH_AXES]))


def process_row_blocks(mesh: Mesh) -> dict[int, list[int]]:
    """Which row shards (0 .. batch_shards - 1, in row order) each process's devices hold, by process."""
    shape = (batch_shards(mesh),)
    held: dict[int, set[int]] = {}
    for device, index in batch_sharding(mesh, 1).devices_indices_map(shape).items():
        process: int = device.process_index  # type: ignore[attr-defined]
        held.setdefault(process, set()).add(index[0].start or 0)
    return {p: sorted(rows) for p, rows in sorted(held.items())}


def rows_stay_home_problem(blocks: dict[int, list[int]], shards: int) -> str:
    """What is wrong with ``process_row_blocks``' answer for a host to contribute its own rows only ("" if
    nothing): each process must hold its own contiguous block of the row shards, as many as every other."""
    size = shards // len(blocks)
    for process, rows in blocks.items():
        if rows != list(range(rows[0], rows[0] + size)):
            return f"process {process} holds row shards {rows} of {shards}, not its own contiguous block of {size}"
    return ""


def check_rows_stay_home(mesh: Mesh) -> None:
    """Raises ValueError, naming the mesh and the process, unless every host holds its own block of a
    batch's rows: a host contributes only its own turns to each mini-batch (``shard_batch``)."""
    blocks = process_row_blocks(mesh)
    problem = rows_stay_home_problem(blocks, batch_shards(mesh)) if len(blocks) > 1 else ""
    if problem:
        axes = ", ".join(f"{a} = {n}" for a, n in mesh.shape.items())
        raise ValueError(
            f"mesh ({axes}) over {len(blocks)} processes: {problem}; each host contributes only its own"
            " turns, so keep MeshConfig.tensor (rows replicated over it) within one host's devices"
        )


def shard_batch(batch: dict[str, Any], mesh: Mesh) -> dict[str, jax.Array]:
    """The global mini-batch as arrays sharded over the mesh's batch axes, from this process's share of it:
    with one process the whole batch; with several, this host's rows only (every host's share the same
    size, on its own devices: ``check_rows_stay_home``), placed with ``jax.make_array_from_process_local_data``
    as its block of the global rows."""
    processes = jax.process_count()
    out = {}
    for k, v in batch.items():
        v = np.asarray(v)
        sharding = batch_sharding(mesh, v.ndim)
        if processes == 1:
            out[k] = jax.device_put(v, sharding)
        else:
            out[k] = jax.make_array_from_process_local_data(sharding, v, (v.shape[0] * processes, *v.shape[1:]))
    return out


SAMPLER_LAYOUTS = ("tensor", "fsdp")


def sampler_tensor_degree(model_config: ModelConfig, devices: int) -> int:
    """The most of ``devices`` that split every head, KV head, MLP and vocabulary axis evenly."""
    c = model_config
    axes = (c.num_heads, c.num_kv_heads, c.intermediate_size, c.vocab_size)
    return max(t for t in range(1, devices + 1) if devices % t == 0 and all(a % t == 0 for a in axes))


def sampler_shardings(
    model_config: ModelConfig, devices: list[jax.Device] | None = None, layout: str = "tensor"
) -> Any:
    """Where a host samples when several run: its parameters split over its own devices, so a model too
    big for one chip still samples, on every chip of the host, whatever the training mesh's axes.
    ``tensor`` (the default): heads, MLP and vocabulary over as many devices as split them evenly, the
    rest fsdp (``(1, n / t, t)``); ``fsdp``: ``(1, n, 1)``. Chosen on the TPU compiler: for qwen2.5-7b on
    one v5e-16 host (4 chips, 32 environments) tensor needs 5.3 / 5.7 GiB per chip for the prefill / a
    decode chunk against fsdp's 14.5 / 12.3, with 6x fewer all-reduce bytes
    (``experiments/results/tpu_compile/sampler_layout_*``)."""
    if layout not in SAMPLER_LAYOUTS:
        raise ValueError(f"sampler layout {layout!r}: expected one of {SAMPLER_LAYOUTS}")
    local = list(devices if devices is not None else jax.local_devices())
    tensor = sampler_tensor_degree(model_config, len(local)) if layout == "tensor" else 1
    return param_shardings(model_config, make_mesh(MeshConfig(1, len(local) // tensor, tensor), local))


def host_local_copy(tree: Any, shardings: Any = None) -> Any:
    """Every (global) array of ``tree`` on this host's devices, for host-local work like sampling: with
    one process, the arrays as they are (the training mesh is every device); with several, gathered and
    laid out by ``shardings`` (a matching tree, e.g. :func:`sampler_shardings`) or, without, as one full
    copy on the host's default device. Collective when several processes run: all must call it at the
    same point."""
    if jax.process_count() == 1:
        return tree
    from jax.experimental import multihost_utils

    def gathered(x: jax.Array) -> Any:
        return x.addressable_data(0) if x.is_fully_replicated else multihost_utils.process_allgather(x, tiled=True)

    host = jax.tree_util.tree_map(gathered, tree)
    if shardings is None:
        return jax.tree_util.tree_map(jnp.asarray, host)
    return jax.tree_util.tree_map(jax.device_put, host, shardings)


def logical_rules_context() -> Any:
    return nn.logical_axis_rules(LOGICAL_AXIS_RULES)
