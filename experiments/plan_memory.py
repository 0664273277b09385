"""Per-device memory plan of a training configuration, cross-checked against the compiler.

For a model (Qwen2.5-1.5B / 7B, SmolLM2-135M), a mesh (data, fsdp, tensor), a micro-batch, a sequence
length and remat on/off, it estimates per-device bytes for the parameters, the optimizer state, the
reference and behavior copies, gradients, activations and logits of one micro-batch, and the sampler's KV
cache; then it lowers and compiles the real jitted train step on abstract CPU devices (nothing is
allocated) and prints ``compiled.memory_analysis()`` next to the estimate.

    python experiments/plan_memory.py --model qwen2.5-1.5b --mesh 1,8,1 --micro-rows 16 --seq 2048
    python experiments/plan_memory.py --model qwen2.5-7b --mesh 1,8,1 --micro-rows 8 --seq 2048 --no-remat
    python experiments/plan_memory.py --recommend      # the README's table (estimates only)

One JSON object per configuration on stdout.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GIB = 1 << 30
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def model_presets() -> dict:
    """``models.config.MODEL_PRESETS`` (the published configs), imported late: importing ``models``
    imports jax, and ``main`` must set ``JAX_PLATFORMS`` / ``XLA_FLAGS`` before that."""
    from models.config import MODEL_PRESETS

    return MODEL_PRESETS


# (name, memory per device in GiB, devices, devices per host, TPU topology) for the README's
# recommendations; TPU rows are checked with the TPU compiler (libtpu), GPU rows only against the
# estimate and an XLA:CPU compile (no deviceless GPU compile is wired here)
TARGETS = (
    ("1xH200", 141, 1, 1, None),
    ("8xH200", 141, 8, 8, None),
    ("v5e-16", 16, 16, 4, "v5e:4x4"),
)
CPU_NOTE = "XLA:CPU on abstract host devices: a cross-check, not the GPU compiler's layout"
TPU_NOTE = "XLA:TPU (libtpu) on the topology's compile-only devices, per chip"
# compiled peak / estimate of the train step measured with this script on XLA:CPU (1.15-1.40 over five
# configurations, README): the estimate leaves out some fp32 temporaries; recommendations multiply by this
CALIBRATION = 1.4
REFERENCE_ENVS = 128  # 16 task groups x 8 rollouts, spread over the hosts' samplers


@dataclasses.dataclass(frozen=True)
class Plan:
    model: str
    data: int
    fsdp: int
    tensor: int
    micro_rows: int  # global rows per micro-batch
    seq: int
    remat: bool
    param_dtype: str = "float32"
    dtype: str = "bfloat16"
    sample_batch: int = 128  # environments sampled at once per host (groups x group size)
    sample_len: int = 2560  # prompt + new tokens of one sampled turn
    loss: str = "ppo_clip"  # ppo_clip | ggpo
    # 0: padded rows (micro_rows turns of seq tokens); K > 0: the packed layout (BatchConfig.packing) of
    # micro_rows sequences of seq tokens holding up to K turns each, with segment ids and [S, K] row tables
    packed_slots: int = 0
    attention: str = "masked"  # models.attention.ATTENTION_KERNELS (splash: the TPU kernel, with segment ids)

    @property
    def devices(self) -> int:
        return self.data * self.fsdp * self.tensor


def param_count(cfg: dict) -> int:
    h, i, v, layers = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["num_layers"]
    q, kv = cfg["num_heads"] * cfg["head_dim"], cfg["num_kv_heads"] * cfg["head_dim"]
    attn = h * q + 2 * h * kv + q * h + (q + 2 * kv if cfg["attention_bias"] else 0)
    per_layer = attn + 3 * h * i + 2 * h
    return v * h * (1 if cfg["tie_word_embeddings"] else 2) + layers * per_layer + h


def estimate(plan: Plan) -> dict[str, float]:
    """Bytes per device (GiB) by part. Parameters and Adam moments are sharded over fsdp x tensor; rows over
    data x fsdp; activations follow the remat policy (per layer input kept, one layer recomputed)."""
    cfg = dataclasses.asdict(model_presets()[plan.model])
    n = param_count(cfg)
    shards = plan.fsdp * plan.tensor
    p_bytes = DTYPE_BYTES[plan.param_dtype]
    a_bytes = DTYPE_BYTES[plan.dtype]
    rows = max(plan.micro_rows // (plan.data * plan.fsdp), 1)
    h, i, layers = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_layers"]
    q = cfg["num_heads"] * cfg["head_dim"] // plan.tensor
    kv = cfg["num_kv_heads"] * cfg["head_dim"] // plan.tensor
    heads = max(cfg["num_heads"] // plan.tensor, 1)
    tokens = rows * plan.seq
    # one layer's saved activations (models/layers.py): two RMSNorms and RoPE in fp32, q/k/v, the attention
    # output and projection, the residual, SwiGLU's gate, up, silu and product in the compute dtype; the
    # attention scores and their softmax in fp32 plus the probabilities in the compute dtype
    per_token = 2 * h * 4 + (q + kv) * 4 + (2 * q + 2 * kv + 2 * h) * a_bytes + 4 * i // plan.tensor * a_bytes
    layer = tokens * per_token + rows * heads * plan.seq**2 * (4 + 4 + a_bytes)
    # remat keeps each layer's input and recomputes one layer at a time in the backward pass
    activations = layers * tokens * h * 4 + layer if plan.remat else layers * layer
    logits = 3 * tokens * cfg["vocab_size"] // plan.tensor * 4  # fp32 logits, their softmax and gradient
    kv_cache = 2 * layers * plan.sample_batch * plan.sample_len * cfg["num_kv_heads"] * cfg["head_dim"] * a_bytes
    out = {  # optax keeps Adam's moments (and the gradients are) in the parameters' dtype
        "parameters": n * p_bytes / shards,
        "optimizer_state": 2 * n * p_bytes / shards,
        "reference_and_behavior": 2 * n * p_bytes / shards,
        "gradients": n * p_bytes / shards,
        "activations": activations,
        "logits": logits,
    }
    out["train_step_total"] = sum(out.values())
    # the sampler runs on a host-local full copy of the behavior parameters (ggtrain.sharding.host_local_copy)
    out["sampler_params_and_kv_cache"] = n * p_bytes + kv_cache
    return {k: round(v / GIB, 3) for k, v in out.items()} | {"parameter_count": n}


def lower_train_step(plan: Plan, devices: list, model: Any = None) -> Any:
    """The real jitted train step for ``plan`` lowered on ``devices`` (abstract CPU devices or a TPU
    topology's compile-only devices) from abstract state and batch: nothing is allocated. ``model`` (a
    ``ModelConfig``) defaults to the plan's preset with its dtypes and remat."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    from ggtrain.config import BatchConfig, LossConfig, MeshConfig, ModelSpec, TrainConfig
    from ggtrain.optim import make_optimizer
    from ggtrain.sharding import batch_sharding, logical_rules_context, make_mesh, param_shardings
    from ggtrain.train_state import TrainState, create_train_state, optimizer_state_shardings
    from ggtrain.train_step import jit_train_step, make_train_step
    from models.decoder import init_params

    model = model if model is not None else model_config(plan)
    config = TrainConfig(
        model=ModelSpec(param_dtype=plan.param_dtype, dtype=plan.dtype, remat=plan.remat, attention=model.attention),
        loss=LossConfig(name=plan.loss),
        # packed: one micro-batch is the plan's micro_rows sequences of seq tokens (the token budget)
        batch=BatchConfig(mini_batch_rows=plan.micro_rows, micro_batch_rows=plan.micro_rows, pack_length=plan.seq),
        mesh=MeshConfig(plan.data, plan.fsdp, plan.tensor),
    )
    mesh = make_mesh(config.mesh, list(devices))
    shardings = param_shardings(model, mesh)
    abstract_params = abstract_with(jax.eval_shape(lambda: init_params(model, jax.random.PRNGKey(0))), shardings)
    optimizer = make_optimizer(config.optimizer)
    replicated = NamedSharding(mesh, PartitionSpec())
    state_shardings = TrainState(  # as ggtrain.update_loop.Updater lays the state out
        step=replicated,
        params=shardings,
        opt_state=optimizer_state_shardings(optimizer, abstract_params),
        ref_params=shardings,
        behavior_params=shardings,
        rng=replicated,
    )
    with jax.set_mesh(mesh), logical_rules_context():
        abstract_state = abstract_with(
            jax.eval_shape(lambda p: create_train_state(p, optimizer, jax.random.PRNGKey(0)), abstract_params),
            state_shardings,
        )
        fields = batch_fields(plan)
        batch = {
            k: jax.ShapeDtypeStruct(shape, dtype, sharding=batch_sharding(mesh, len(shape)))
            for k, (shape, dtype) in fields.items()
        }
        step = jit_train_step(make_train_step(model, config, optimizer), state_shardings)
        return step.lower(abstract_state, batch)


def batch_fields(plan: Plan) -> dict[str, tuple[tuple[int, ...], Any]]:
    """Shapes and dtypes of one micro-batch: padded rows, or packed sequences with ``[S, K]`` row tables."""
    import jax.numpy as jnp

    rows, seq = plan.micro_rows, plan.seq
    per_row = (rows, plan.packed_slots) if plan.packed_slots else (rows,)
    tokens = {
        "tokens": ((rows, seq), jnp.int32),
        "attention_mask": ((rows, seq), jnp.bool_),
        "loss_mask": ((rows, seq), jnp.bool_),
        "old_logp": ((rows, seq), jnp.float32),
    }
    if plan.packed_slots:
        tokens |= {"segment_ids": ((rows, seq), jnp.int32), "positions": ((rows, seq), jnp.int32)}
    row_values = {"advantages": jnp.float32, "row_mask": jnp.bool_, "env_reward": jnp.float32, "valid": jnp.bool_}
    row_values |= {k: jnp.int32 for k in ("group", "traj", "turn", "state", "next_state")}
    return tokens | {k: (per_row, dtype) for k, dtype in row_values.items()}


def model_config(plan: Plan) -> Any:
    """The plan's preset with its dtypes and remat."""
    preset = model_presets()[plan.model]
    return preset.replace(param_dtype=plan.param_dtype, dtype=plan.dtype, remat=plan.remat, attention=plan.attention)


def abstract_with(shapes: Any, shardings: Any) -> Any:
    """``jax.ShapeDtypeStruct`` leaves carrying ``shardings`` (a matching tree)."""
    import jax

    return jax.tree_util.tree_map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), shapes, shardings)


def memory_gib(memory: Any) -> dict[str, float]:
    """``compiled.memory_analysis()`` in GiB; the peak is arguments + outputs - aliased + temporaries."""
    args, out, alias, temp = (
        memory.argument_size_in_bytes,
        memory.output_size_in_bytes,
        memory.alias_size_in_bytes,
        memory.temp_size_in_bytes,
    )
    return {
        "arguments": round(args / GIB, 3),
        "outputs": round(out / GIB, 3),
        "aliased": round(alias / GIB, 3),
        "temporaries": round(temp / GIB, 3),
        "peak_estimate": round((args + out - alias + temp) / GIB, 3),
    }


def compiled_memory(plan: Plan) -> dict[str, float]:
    """Lowers and compiles the real train step for ``plan`` on ``plan.devices`` abstract CPU devices."""
    import jax

    if len(jax.devices()) < plan.devices:
        raise SystemExit(f"{plan.devices} devices needed; run with --xla_force_host_platform_device_count")
    return memory_gib(lower_train_step(plan, jax.devices()[: plan.devices]).compile().memory_analysis())


def tpu_train_step_memory(plan: Plan, topology: str) -> dict:
    """The train step compiled by the TPU compiler for ``topology`` (``experiments/compile_for.py``);
    ``compile_for.UsageError`` if libtpu cannot build the topology or the plan's mesh does not use it."""
    from experiments.compile_for import CHIPS, compile_memory, parse_mesh, topology_devices, try_compile

    devices = topology_devices(topology)
    parse_mesh(f"{plan.data},{plan.fsdp},{plan.tensor}", len(devices))
    chip_gib = CHIPS[devices[0].device_kind][1]
    return compile_memory(try_compile(lower_train_step(plan, devices)), chip_gib)


def recommend(tpu_compile: bool = False) -> list[dict]:
    """For each target and model, the first configuration whose calibrated train step and sampler both fit
    in 85 % of a device, trying (in this order) fp32 then bf16 parameters, the fewest parameter shards
    (fsdp x tensor), no remat before remat, and 4, 2, then 1 rows per device per micro-batch, at the
    reference recipe's 2048-token rows; the sampler runs 128 / hosts environments per host. With
    ``tpu_compile`` a TPU row must also fit by the TPU compiler's own peak (in 85 % of the chip)."""
    table = []
    for name, gib, devices, per_host, topology in TARGETS:
        hosts = max(devices // per_host, 1)
        for model in ("qwen2.5-1.5b", "qwen2.5-7b"):
            row: dict = {"target": name, "device_gib": gib, "model": model, "mesh": None}
            for plan in _candidates(model, devices, -(-REFERENCE_ENVS // hosts)):
                est = estimate(plan)
                if max(CALIBRATION * est["train_step_total"], est["sampler_params_and_kv_cache"]) <= 0.85 * gib:
                    if topology and tpu_compile:
                        compiled = tpu_train_step_memory(plan, topology)
                        tried = {"mesh": [plan.data, plan.fsdp, plan.tensor], "param_dtype": plan.param_dtype}
                        tried |= {"remat": plan.remat, "micro_batch_rows": plan.micro_rows, "compiled": compiled}
                        row.setdefault("tpu_compiled_train_steps", []).append(tried)
                        if compiled["peak_gib"] is None or compiled["peak_gib"] > 0.85 * gib:
                            continue
                    row |= {
                        "mesh": [plan.data, plan.fsdp, plan.tensor],
                        "param_dtype": plan.param_dtype,
                        "remat": plan.remat,
                        "micro_batch_rows": plan.micro_rows,
                        "train_step_gib": est["train_step_total"],
                        "sampler_gib": est["sampler_params_and_kv_cache"],
                    }
                    break
            table.append(row)
    return table


def _candidates(model: str, devices: int, sample_batch: int) -> list[Plan]:
    shards = sorted(
        ((f, t) for t in (1, 2, 4, 8) for f in (1, 2, 4, 8, 16) if devices % (f * t) == 0),
        key=lambda ft: (ft[0] * ft[1], ft[1]),
    )
    return [
        Plan(model, devices // (f * t), f, t, rows * (devices // t), 2048, remat, param_dtype, "bfloat16", sample_batch)
        for param_dtype in ("float32", "bfloat16")
        for f, t in shards
        for remat in (False, True)
        for rows in (4, 2, 1)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qwen2.5-1.5b", help="a key of models.config.MODEL_PRESETS")
    parser.add_argument("--mesh", default="1,8,1", help="data,fsdp,tensor")
    parser.add_argument("--micro-rows", type=int, default=16, help="global rows per micro-batch")
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--no-remat", action="store_true")
    parser.add_argument(
        "--packed-slots", type=int, default=0, help="packed: --micro-rows sequences of --seq tokens, K turns each"
    )
    parser.add_argument("--param-dtype", default="float32", choices=sorted(DTYPE_BYTES))
    parser.add_argument("--dtype", default="bfloat16", choices=sorted(DTYPE_BYTES))
    parser.add_argument("--estimate-only", action="store_true", help="skip the compiler cross-check")
    parser.add_argument("--recommend", action="store_true", help="print the recommended meshes and exit")
    parser.add_argument("--topology", default="", help="a TPU topology (e.g. v5e:4x4): compile with the TPU compiler")
    parser.add_argument("--tpu-compile", action="store_true", help="--recommend: check TPU rows with the TPU compiler")
    args = parser.parse_args(argv)
    if args.topology or args.tpu_compile:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")  # compile-only TPU devices need no attached backend
    if args.recommend:
        for row in recommend(args.tpu_compile):
            print(json.dumps(row))
        return 0
    try:
        data, fsdp, tensor = (int(x) for x in args.mesh.split(","))
    except ValueError:
        parser.error(f"--mesh {args.mesh!r}: expected DATA,FSDP,TENSOR (three integers)")
    if args.packed_slots < 0:
        parser.error(f"--packed-slots {args.packed_slots}: expected 0 (padded) or more")
    plan = Plan(
        args.model, data, fsdp, tensor, args.micro_rows, args.seq, not args.no_remat, args.param_dtype, args.dtype
    )
    plan = dataclasses.replace(plan, packed_slots=args.packed_slots)
    if not args.estimate_only and not args.topology:
        flag = f"--xla_force_host_platform_device_count={plan.devices}"
        if flag not in os.environ.get("XLA_FLAGS", ""):  # the device count must be set before jax starts
            os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + flag).strip()
            os.environ["JAX_PLATFORMS"] = "cpu"
    if args.model not in model_presets():
        parser.error(f"--model {args.model!r}: expected one of {sorted(model_presets())}")
    result: dict = {"plan": dataclasses.asdict(plan), "estimate_gib": estimate(plan)}
    if args.topology:
        from experiments.compile_for import UsageError

        try:
            memory = tpu_train_step_memory(plan, args.topology)
        except UsageError as error:
            print(f"plan_memory: {error}", file=sys.stderr)
            return 2
        result |= {"compiler": TPU_NOTE, "compiled_gib": memory}
        est, got = result["estimate_gib"]["train_step_total"], memory["peak_gib"]
        result["estimate_over_compiled"] = round(est / got, 3) if got else None
    elif not args.estimate_only:
        result |= {"compiler": CPU_NOTE, "compiled_gib": compiled_memory(plan)}
        est, got = result["estimate_gib"]["train_step_total"], result["compiled_gib"]["peak_estimate"]
        result["estimate_over_compiled"] = round(est / got, 3) if got else None
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
