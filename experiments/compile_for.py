"""Compiles the train step and the sampler for a TPU topology on this machine, with no TPU attached.

The TPU compiler in libtpu (the ``tpu`` extra) compiles for compile-only devices of a named topology
(``jax.experimental.topologies``); parameters, optimizer state and batches are abstract
(``jax.ShapeDtypeStruct``), so nothing the size of the model is allocated.

    python experiments/compile_for.py --topology v5e:4x4 --model qwen2.5-1.5b --mesh 2,8,1 \\
        --micro-rows 16 --seq 2048 [--loss ppo_clip|ggpo] [--no-remat] [--dtype bfloat16] [--param-dtype float32] \\
        [--prefill-chunk 256] [--prefill-memory-only] [--packed-slots K] [--attention masked|splash]

The mesh uses every chip of the topology. The last line of stdout is one JSON object: the command,
``train_step`` (one micro-batch of ``--micro-rows`` global rows) and ``sampler`` (prefill, the prompt in
``--prefill-chunk``-token chunks as the sampler runs it, and one decode chunk at the reference sampling
sizes), each with the compiler's per-chip memory, ``fits``, FLOPs, ``optimal_seconds``, a modeled MFU,
the collectives by kind and the compile time. ``--prefill-memory-only``: the prefill's memory alone.

Memory comes from the real program (the layers scanned, as it runs). XLA's cost analysis counts a while
loop's body once whatever its trip count, so FLOPs, bytes, ``optimal_seconds`` and collectives come from
the same program with 1 and 2 layers (and 1 and 2 decode steps) with those loops unrolled, extrapolated
linearly to the real depth and chunk. The MFU is the compiler's cost model (FLOPs / optimal seconds / the
chip's peak bf16 rate), never a measurement. ``--packed-slots K`` compiles the packed layout (K turns
per sequence, segment ids); ``--attention splash`` the training forward and backward with the TPU splash
kernel (Pallas/Mosaic, segment ids, the causal and segment masks' empty blocks skipped) instead of the
masked reference; the sampler's cached attention is the masked one either way.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import math
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from experiments.plan_memory import (  # noqa: E402
    DTYPE_BYTES,
    GIB,
    Plan,
    abstract_with,
    lower_train_step,
    model_config,
    model_presets,
)

# device_kind -> (name, HBM GiB per chip, peak bf16 FLOP/s per chip): Google's published chip figures; for
# the GPUs the memory of experiments/gpu_targets.py and NVIDIA's dense bf16 peak
CHIPS = {
    "TPU v5 lite": ("v5e", 16, 197e12),
    "TPU v6 lite": ("v6e", 32, 918e12),
    "TPU v5": ("v5p", 95, 459e12),
    "NVIDIA H100 80GB HBM3": ("h100", 84929347584 / 2**30, 989e12),
    "NVIDIA H200": ("h200", 150754820096 / 2**30, 989e12),
}
GPU_COST_NOTE = (
    "XLA:GPU compile-only executables give no cost analysis at JAX 0.10.2 (cost_analysis() is None): memory only"
)
COLLECTIVE_KINDS = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")
HLO_BYTES = {"pred": 1, "s8": 1, "u8": 1, "bf16": 2, "f16": 2, "s16": 2, "u16": 2, "f32": 4, "s32": 4, "u32": 4}
HLO_BYTES |= {"f64": 8, "s64": 8, "u64": 8}
REFERENCE_ENVS = 128  # 16 task groups x 8 rollouts (RolloutConfig), spread over the hosts' samplers
REFERENCE_PROMPT, REFERENCE_NEW = 2048, 512  # RolloutConfig.max_prompt_tokens, max_new_tokens
REFERENCE_PREFILL_CHUNK = 256  # models.sampler.SamplingParams.prefill_chunk
MFU_LABEL = "compiler cost-model estimate (flops / optimal_seconds / chip peak bf16), not a measurement"


class UsageError(Exception):
    """A bad command-line value: reported as one line, exit 2."""


@contextlib.contextmanager
def _stderr_captured() -> Iterator[None]:
    """libtpu logs on fd 2 while it builds a topology; keep it out of the one-line error."""
    with tempfile.TemporaryFile() as sink:
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def topology_devices(name: str) -> list:
    """The compile-only devices of a TPU topology (``v5e:4x4``) or of N GPUs on one host (``h200:8``,
    ``experiments/gpu_targets.py``); UsageError if the installed compiler cannot build it."""
    from experiments.gpu_targets import parse_gpu_topology

    try:
        gpu = parse_gpu_topology(name)
    except ValueError as error:
        raise UsageError(f"--topology {name!r}: {error}") from None
    devices = _gpu_devices(name, *gpu) if gpu else _tpu_devices(name)
    if devices[0].device_kind not in CHIPS:
        known = sorted(v[0] for v in CHIPS.values())
        raise UsageError(f"--topology {name!r}: chip {devices[0].device_kind!r} has no memory figure here ({known})")
    return devices


def _tpu_devices(name: str) -> list:
    # compiling holds no chip: let several processes load libtpu (it takes /tmp/libtpu_lockfile otherwise)
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    from jax.experimental import topologies

    try:
        with _stderr_captured():
            return list(topologies.get_topology_desc(platform="tpu", topology_name=name).devices)
    except Exception as error:  # JaxRuntimeError (unknown name), RuntimeError (no libtpu)
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise UsageError(f"--topology {name!r}: the installed libtpu cannot build it ({reason})") from None


def _gpu_devices(name: str, kind: str, count: int) -> list:
    from jax.experimental import topologies

    from experiments.gpu_targets import target_config

    try:
        topology = topologies.get_topology_desc(
            platform="cuda", topology=f"1x1x{count}", target_config=target_config(kind)
        )
    except Exception as error:  # NotImplementedError: no CUDA plugin registered
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise UsageError(
            f"--topology {name!r}: no XLA:GPU compiler here ({reason}); it comes with the gpu-compile extra"
            " (pip install -e '.[gpu-compile]', about 6 GB) and needs JAX_PLATFORMS=cpu"
        ) from None
    return list(topology.devices)


def has_cost_analysis(devices: list) -> bool:
    return not devices[0].device_kind.startswith("NVIDIA")


def parse_mesh(text: str, chips: int) -> tuple[int, int, int]:
    try:
        data, fsdp, tensor = (int(x) for x in text.split(","))
    except ValueError:
        raise UsageError(f"--mesh {text!r}: expected DATA,FSDP,TENSOR (three integers)") from None
    if min(data, fsdp, tensor) < 1 or data * fsdp * tensor != chips:
        raise UsageError(f"--mesh {text!r}: {data}x{fsdp}x{tensor} does not use the topology's {chips} chips")
    return data, fsdp, tensor


@contextlib.contextmanager
def unrolled_loops() -> Iterator[None]:
    """The decoder's layer scan (``flax.linen.scan``), the decode loop and the prefill's chunk loop
    (``jax.lax.fori_loop``) unrolled,
    so the compiler's cost analysis sees every iteration (it counts a while body once)."""
    import flax.linen as nn
    import jax

    scan, fori_loop = nn.scan, jax.lax.fori_loop
    nn.scan = functools.partial(scan, unroll=True)  # type: ignore[assignment]
    jax.lax.fori_loop = functools.partial(fori_loop, unroll=True)
    try:
        yield
    finally:
        nn.scan, jax.lax.fori_loop = scan, fori_loop  # type: ignore[assignment]


def collectives(hlo: str) -> dict[str, dict[str, int]]:
    """Collective ops of an optimized HLO module by kind: how many and the bytes of their results (an
    asynchronous pair counted once, at its ``-done``)."""
    kinds = "|".join(COLLECTIVE_KINDS)
    pattern = re.compile(rf"=\s*(.+?)\s+({kinds})(-done)?\(")
    out: dict[str, dict[str, int]] = {}
    for line in hlo.splitlines():
        match = pattern.search(line)
        if match is None or f"{match.group(2)}-start(" in line:
            continue
        size = sum(
            HLO_BYTES.get(dtype, 0) * math.prod(int(d) for d in dims.split(",") if d)
            for dtype, dims in re.findall(r"\b([a-z]+\d*)\[([\d,]*)\]", match.group(1))
        )
        entry = out.setdefault(match.group(2), {"count": 0, "bytes": 0})
        entry["count"] += 1
        entry["bytes"] += size
    return out


def try_compile(lowered: Any) -> tuple[Any, str | None, float]:
    """(compiled or None, the compiler's out-of-memory message or None, seconds): a program over the
    chip's HBM fails to compile on TPU."""
    start = time.perf_counter()
    try:
        return lowered.compile(), None, time.perf_counter() - start
    except Exception as error:
        if "RESOURCE_EXHAUSTED" not in str(error):
            raise
        return None, str(error).splitlines()[0][:600], time.perf_counter() - start


def compile_memory(attempt: tuple[Any, str | None, float], hbm_gib: float) -> dict:
    """Per-chip memory of the real program; one that does not fit is reported with the compiler's
    own figures from its message."""
    compiled, message, seconds = attempt
    if compiled is None:
        return {"fits": False, "peak_gib": None, "compiler_message": message, "compile_seconds": round(seconds, 1)}
    m = compiled.memory_analysis()
    peak = m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes + m.temp_size_in_bytes
    parts = {
        "arguments": m.argument_size_in_bytes,
        "outputs": m.output_size_in_bytes,
        "aliased": m.alias_size_in_bytes,
        "temporaries": m.temp_size_in_bytes,
        "generated_code": m.generated_code_size_in_bytes,
    }
    return {
        "peak_gib": round(peak / GIB, 3),
        "memory_gib": {k: round(v / GIB, 3) for k, v in parts.items()},
        "fits": peak + m.generated_code_size_in_bytes <= hbm_gib * GIB,
        "compile_seconds": round(seconds, 1),
    }


def program_cost(lowered: Any) -> dict:
    """FLOPs, bytes accessed, optimal seconds and collectives of one compiled program (per chip)."""
    compiled = lowered.compile()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    flat = {
        "flops": cost["flops"],
        "bytes_accessed": cost["bytes accessed"],
        "optimal_seconds": cost["optimal_seconds"],
    }
    for kind, entry in collectives(compiled.as_text()).items():
        flat[f"{kind}/count"], flat[f"{kind}/bytes"] = entry["count"], entry["bytes"]
    return flat


def extrapolated_cost(lower: Callable[[int, int], Any], steps: int, layers: int) -> dict:
    """The cost of ``steps`` loop steps over ``layers`` layers from unrolled compiles at (1, 1), (1, 2) and,
    when ``steps > 1``, (2, 1): cost(s, L) = c11 + (s - 1)(c21 - c11) + s (L - 1)(c12 - c11)."""
    start = time.perf_counter()
    with unrolled_loops():
        c11, c12 = program_cost(lower(1, 1)), program_cost(lower(1, 2))
        c21 = program_cost(lower(2, 1)) if steps > 1 else c11
    keys = sorted(set(c11) | set(c12) | set(c21))
    get = lambda c, k: c.get(k, 0)
    total = {
        k: get(c11, k) + (steps - 1) * (get(c21, k) - get(c11, k)) + steps * (layers - 1) * (get(c12, k) - get(c11, k))
        for k in keys
    }
    by_kind: dict[str, dict[str, int]] = {}
    for k in keys:
        if "/" in k:
            kind, field = k.split("/")
            by_kind.setdefault(kind, {})[field] = round(total[k])
    seconds = [c["optimal_seconds"] for c in (c11, c12, c21)]
    linear = min(seconds) > 0 and c12["optimal_seconds"] >= c11["optimal_seconds"] and total["optimal_seconds"] > 0
    return {
        "flops": total["flops"],
        "bytes_accessed": total["bytes_accessed"],
        # the compiler's time estimate is reported only where it grows with depth as the FLOPs do
        "optimal_seconds": total["optimal_seconds"] if linear else None,
        "optimal_seconds_at_1_2_layers_and_2_steps": seconds,
        "collectives": by_kind,
        "cost_compile_seconds": round(time.perf_counter() - start, 1),
    }


def with_mfu(report: dict, peak_flops: float) -> dict:
    seconds = report.get("optimal_seconds") or 0.0
    mfu = report["flops"] / seconds / peak_flops if seconds > 0 else None
    return report | {"modeled_mfu": None if mfu is None else round(mfu, 4), "modeled_mfu_label": MFU_LABEL}


def train_step_report(plan: Plan, model: Any, devices: list, chip: tuple) -> dict:
    _, hbm_gib, peak = chip
    memory = compile_memory(try_compile(lower_train_step(plan, devices, model)), hbm_gib)
    if not has_cost_analysis(devices):
        return memory | {"cost": None, "cost_note": GPU_COST_NOTE}
    cost = extrapolated_cost(
        lambda _, layers: lower_train_step(plan, devices, model.replace(num_layers=layers)), 1, model.num_layers
    )
    return with_mfu(memory | cost, peak)


def sampler_target(topology: str, devices: list) -> tuple[list, int]:
    """(the devices the sampler's program is compiled for, the host count). On several hosts each samples
    on its own chips alone, but the compiler refuses a program on a subset of a topology's compile-only
    devices, so one host is compiled as the one-host slice of the same chip with as many chips."""
    hosts = len({d.process_index for d in devices})
    if hosts == 1:
        return devices, 1
    local = sum(d.process_index == devices[0].process_index for d in devices)
    generation = topology.split(":")[0]
    shapes = {"v5p": {4: "2x2x1"}}.get(generation, {1: "1x1", 4: "2x2", 8: "2x4"})
    if local not in shapes:
        raise UsageError(f"--topology {topology!r}: no one-host slice of {local} chips to compile the sampler for")
    return topology_devices(f"{generation}:{shapes[local]}"), hosts


@dataclasses.dataclass(frozen=True)
class SamplerSetup:
    """How the sampler is compiled: for how many hosts (each samples its share of the environments on its
    own chips when there are several), in what prefill chunks, with which parameter layout on a host's
    chips (``ggtrain.sharding.sampler_shardings``: ``tensor``, the trainer's, or ``fsdp``), for how many
    environments per sampler (0: the reference 128 over the hosts)."""

    hosts: int = 1
    prefill_chunk: int = REFERENCE_PREFILL_CHUNK
    layout: str = "tensor"
    environments: int = 0


def sampler_placement(model: Any, plan: Plan, devices: list, setup: SamplerSetup) -> tuple[Any, Any, int, str]:
    """Where the sampler runs (``ggtrain.sharding.host_local_copy``): on one host, on the training mesh
    with the training parameter shardings; on several (``devices``: one host's chips, ``sampler_target``),
    each host's share of the environments on its own chips, the parameters split over them by
    ``setup.layout``. Returns (parameter shardings, input sharding, batch, label)."""
    from jax.sharding import NamedSharding, PartitionSpec

    from ggtrain.config import MeshConfig
    from ggtrain.sharding import make_mesh, param_shardings, sampler_shardings
    from models.buckets import bucket
    from models.sampler import BATCH_BUCKETS

    environments = setup.environments or -(-REFERENCE_ENVS // setup.hosts)
    batch = bucket(environments, BATCH_BUCKETS, "batch size")
    if setup.hosts == 1:
        mesh = make_mesh(MeshConfig(plan.data, plan.fsdp, plan.tensor), devices)
        return param_shardings(model, mesh), NamedSharding(mesh, PartitionSpec()), batch, "training mesh, one host"
    label = f"each host's {len(devices)} chips, parameters split over them ({setup.hosts} hosts, {setup.layout})"
    inputs = NamedSharding(make_mesh(MeshConfig(1, len(devices), 1), devices), PartitionSpec())
    return sampler_shardings(model, devices, setup.layout), inputs, batch, label


def lower_sampler(
    model: Any, plan: Plan, devices: list, steps: int, setup: SamplerSetup = SamplerSetup()
) -> tuple[Any, tuple, Any]:
    """``models.sampler``'s prefill in chunks of ``setup.prefill_chunk`` prompt tokens (lowered, and its compile
    attempt) and one decode chunk of ``steps`` steps (lowered) from abstract inputs; the chunk takes the
    prefill's output shardings, as it does at run time. Fresh jits of the same functions, so an unrolled
    trace never comes from the jit cache."""
    import jax
    import jax.numpy as jnp

    from models import sampler
    from models.decoder import init_params

    param_sh, inputs, batch, _ = sampler_placement(model, plan, devices, setup)
    params = abstract_with(jax.eval_shape(lambda: init_params(model, jax.random.PRNGKey(0))), param_sh)
    sds = lambda shape, dtype: jax.ShapeDtypeStruct(shape, dtype, sharding=inputs)
    prefill = jax.jit(sampler._prefill.__wrapped__, static_argnums=(0, 4, 5))
    cache_len = REFERENCE_PROMPT + REFERENCE_NEW
    lowered_prefill = prefill.lower(
        model,
        params,
        sds((batch, REFERENCE_PROMPT), jnp.int32),
        sds((batch, REFERENCE_PROMPT), jnp.bool_),
        cache_len,
        setup.prefill_chunk,
    )
    attempt = try_compile(lowered_prefill)
    out_shardings = jax.tree_util.tree_map(lambda _: inputs, lowered_prefill.out_info)
    if attempt[0] is not None:
        out_shardings = attempt[0].output_shardings
    logits, cache, kv_valid, next_pos = abstract_with(lowered_prefill.out_info, out_shardings)
    state = sampler.DecodeState(
        cache,
        kv_valid,
        logits,
        next_pos,
        sds((), jnp.int32),
        sds((batch,), jnp.bool_),
        sds((batch, REFERENCE_NEW), jnp.int32),
        sds((batch, REFERENCE_NEW), jnp.float32),
    )
    decode = jax.jit(sampler._decode_chunk.__wrapped__, static_argnums=(0, 3, 4, 5, 6, 7, 8), donate_argnums=(2,))
    eos = (0,)  # the stop test is one comparison whatever the ids
    lowered_decode = decode.lower(
        model, params, state, REFERENCE_PROMPT, steps, 1.0, 0, 1.0, eos, sds((batch, 2), jnp.uint32), sds((), jnp.int32)
    )
    return lowered_prefill, attempt, lowered_decode


def sampler_report(
    plan: Plan, model: Any, devices: list, chip: tuple, setup: SamplerSetup, prefill_memory_only: bool = False
) -> dict:
    from models.sampler import SamplingParams

    _, hbm_gib, peak = chip
    chunk = SamplingParams().chunk
    _, _, batch, placement = sampler_placement(model, plan, devices, setup)
    _, prefill, decode = lower_sampler(model, plan, devices, chunk, setup)
    out: dict = {
        "placement": placement,
        "environments_per_sampler": batch,
        "prompt_tokens": REFERENCE_PROMPT,
        "new_tokens": REFERENCE_NEW,
        "prefill_chunk_tokens": min(setup.prefill_chunk, REFERENCE_PROMPT),
        "decode_chunk_steps": chunk,
    }
    if prefill_memory_only:
        return out | {"prefill": compile_memory(prefill, hbm_gib)}

    def lower_at(index: int, steps: int, layers: int) -> Any:
        return lower_sampler(model.replace(num_layers=layers), plan, devices, steps, setup)[index]

    for name, attempt, steps, index in (("prefill", prefill, 1, 0), ("decode_chunk", try_compile(decode), chunk, 2)):
        memory = compile_memory(attempt, hbm_gib)
        if not has_cost_analysis(devices):
            out[name] = memory | {"cost": None, "cost_note": GPU_COST_NOTE}
            continue
        cost = extrapolated_cost(functools.partial(lower_at, index), steps, model.num_layers)
        out[name] = with_mfu(memory | cost, peak)
    return out


def compile_for(
    topology: str,
    plan: Plan,
    model: Any,
    devices: list,
    setup: SamplerSetup,
    prefill_memory_only: bool = False,
    sampler_only: bool = False,
) -> dict:
    """The report; ``setup.hosts`` is taken from the topology."""
    chip = CHIPS[devices[0].device_kind]
    report = {
        "topology": topology,
        "chip": chip[0],
        "chips": len(devices),
        "hosts": len({d.process_index for d in devices}),
        "compiler": "XLA:TPU" if has_cost_analysis(devices) else "XLA:GPU (compile-only, no autotuning)",
        "hbm_gib_per_chip": round(chip[1], 2),
        "peak_bf16_tflops_per_chip": chip[2] / 1e12,
        "plan": {k: v for k, v in dataclasses.asdict(plan).items() if k not in ("sample_batch", "sample_len")},
    }
    sampler_devices, hosts = sampler_target(topology, devices)
    setup = dataclasses.replace(setup, hosts=hosts)
    if prefill_memory_only or sampler_only:
        return report | {"sampler": sampler_report(plan, model, sampler_devices, chip, setup, prefill_memory_only)}
    return report | {
        "train_step": train_step_report(plan, model, devices, chip),
        "sampler": sampler_report(plan, model, sampler_devices, chip, setup),
        "cost_note": "flops, bytes, optimal_seconds and collectives per chip, from 1- and 2-layer unrolled "
        "compiles extrapolated to the full depth; memory from the real (scanned) program"
        if has_cost_analysis(devices)
        else GPU_COST_NOTE,
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--topology",
        required=True,
        help="a TPU topology (v5e:4x4, v6e:4x4, v5p:2x2x2) or GPUs on one host (h100:8, h200:8; gpu-compile extra)",
    )
    parser.add_argument("--model", default="qwen2.5-1.5b", help="a key of models.config.MODEL_PRESETS")
    parser.add_argument("--mesh", required=True, help="data,fsdp,tensor (their product: every chip)")
    parser.add_argument("--micro-rows", type=int, default=16, help="global rows per micro-batch")
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--loss", default="ppo_clip", choices=("ppo_clip", "ggpo"))
    parser.add_argument("--no-remat", action="store_true")
    parser.add_argument(
        "--packed-slots",
        type=int,
        default=0,
        help="packed layout: --micro-rows sequences of --seq tokens, K turns each",
    )
    parser.add_argument(
        "--attention", default="masked", choices=("masked", "splash"), help="splash: the TPU kernel (segment ids)"
    )
    parser.add_argument("--dtype", default="bfloat16", choices=sorted(DTYPE_BYTES), help="the compute dtype")
    parser.add_argument("--param-dtype", default="float32", choices=sorted(DTYPE_BYTES))
    parser.add_argument(
        "--prefill-chunk", type=int, default=REFERENCE_PREFILL_CHUNK, help="prompt tokens per prefill step"
    )
    parser.add_argument(
        "--prefill-memory-only",
        action="store_true",
        help="compile only the sampler's prefill, for its memory (one compile: no train step, no cost figures)",
    )
    parser.add_argument(
        "--sampler-layout",
        default="tensor",
        choices=("tensor", "fsdp"),
        help="on several hosts, how a host's chips split the sampler's parameters (tensor: the trainer's)",
    )
    parser.add_argument(
        "--sampler-envs", type=int, default=0, help="environments per sampler (0: the reference 128 over the hosts)"
    )
    parser.add_argument(
        "--sampler-only", action="store_true", help="compile only the sampler (prefill and decode chunk, with costs)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # compile-only devices need no attached backend
    try:
        if args.model not in model_presets():
            raise UsageError(f"--model {args.model!r}: expected one of {sorted(model_presets())}")
        devices = topology_devices(args.topology)
        data, fsdp, tensor = parse_mesh(args.mesh, len(devices))
        if args.prefill_chunk < 1 or args.prefill_chunk & (args.prefill_chunk - 1):
            raise UsageError(f"--prefill-chunk {args.prefill_chunk}: expected a power of two")
        if args.sampler_envs < 0:
            raise UsageError(f"--sampler-envs {args.sampler_envs}: expected 0 (the reference) or more")
        if args.packed_slots < 0:
            raise UsageError(f"--packed-slots {args.packed_slots}: expected 0 (padded) or more")
        if args.attention == "splash" and not has_cost_analysis(devices):
            raise UsageError(f"--attention splash: the splash kernel is TPU only, not for --topology {args.topology!r}")
        if args.attention == "splash" and args.seq % 128:
            raise UsageError(f"--seq {args.seq}: the splash kernel takes multiples of 128 tokens")
        if args.micro_rows < 1 or args.micro_rows % (data * fsdp) or args.seq < 1:
            raise UsageError(
                f"--micro-rows {args.micro_rows}: expected a positive multiple of data x fsdp = {data * fsdp}"
            )
    except UsageError as error:
        print(f"compile_for: {error}", file=sys.stderr)
        return 2
    plan = Plan(
        args.model, data, fsdp, tensor, args.micro_rows, args.seq, not args.no_remat, args.param_dtype, args.dtype
    )
    plan = dataclasses.replace(plan, loss=args.loss, packed_slots=args.packed_slots, attention=args.attention)
    model = model_config(plan)
    command = "python experiments/compile_for.py " + " ".join(sys.argv[1:] if argv is None else argv)
    setup = SamplerSetup(prefill_chunk=args.prefill_chunk, layout=args.sampler_layout, environments=args.sampler_envs)
    report = compile_for(args.topology, plan, model, devices, setup, args.prefill_memory_only, args.sampler_only)
    print(json.dumps({"command": command} | report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
