"""NVIDIA GPU targets for compiling without a GPU: XLA:GPU builds a compile-only topology from a
``GpuTargetConfig`` text proto (``jax.experimental.topologies.get_topology_desc(platform="cuda", ...)``,
with the CUDA plugin of the ``gpu-compile`` extra and ``JAX_PLATFORMS=cpu``, so the plugin's start-up
never looks for a driver).

The H100 fields are NVIDIA's H100 SXM5 80 GB figures, as XLA's device description reports them (the form
of jax-ml/jax#28376 and openxla/xla#25919); the H200 is the same SM90 die with its 141 GB of HBM3e at
4.8 TB/s, edited by hand, so any other field of a real H200 is unverified. No autotuning runs without a
device: matmul tilings are the compiler's defaults, so the compiled memory is close to, not exactly, a
real device's.
"""

from __future__ import annotations

GPU_FIELDS = {
    "threads_per_block_limit": 1024,
    "threads_per_warp": 32,
    "shared_memory_per_block": 49152,
    "shared_memory_per_core": 233472,
    "threads_per_core_limit": 2048,
    "core_count": 132,
    "fpus_per_core": 128,
    "block_dim_limit_x": 2147483647,
    "block_dim_limit_y": 65535,
    "block_dim_limit_z": 65535,
    "l2_cache_size": 52428800,
    "clock_rate_ghz": 1.98,
    "shared_memory_per_block_optin": 232448,
    "registers_per_core_limit": 65536,
    "registers_per_block_limit": 65536,
}
# name -> (device description, memory bytes, bandwidth bytes/s)
GPU_TARGETS = {
    "h100": ("NVIDIA H100 80GB HBM3", 84929347584, 3352320000000),
    "h200": ("NVIDIA H200", 150754820096, 4800000000000),
}


def target_config(name: str) -> str:
    """The ``GpuTargetConfig`` text proto of ``name`` (a key of ``GPU_TARGETS``)."""
    description, memory, bandwidth = GPU_TARGETS[name]
    fields = GPU_FIELDS | {"device_memory_size": memory, "memory_bandwidth": bandwidth}
    info = "\n".join(f"  {k}: {v}" for k, v in fields.items())
    return (
        f"gpu_device_info {{\n{info}\n  cuda_compute_capability {{\n    major: 9\n  }}\n}}\n"
        'platform_name: "CUDA"\n'
        "dnn_version_info {\n  major: 9\n  minor: 7\n}\n"
        "runtime_version {\n  major: 12\n  minor: 8\n  patch: 0\n}\n"
        f'device_description_str: "{description}"\n'
    )


def parse_gpu_topology(name: str) -> tuple[str, int] | None:
    """``"h200:8"`` -> ("h200", 8); None when ``name`` is not a GPU target (a TPU topology)."""
    kind, _, count = name.partition(":")
    if kind not in GPU_TARGETS:
        return None
    if not count.isdigit() or int(count) < 1:
        raise ValueError(f"expected {kind}:N with N GPUs on one host, e.g. {kind}:8")
    return kind, int(count)
