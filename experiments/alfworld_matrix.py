"""The paper's experiment matrix: GRPO, GiGPO, GraphGPO, graph-only (and GGPO as a fifth method) x seeds.

Reference scale (default): Qwen2.5-1.5B-Instruct from a local directory (--model-dir), 16 groups x 8
rollouts, 50 turns, 150 iterations, evaluation of 128 valid_seen episodes every 5 iterations.
``--scale cpu``: the same matrix with SmolLM2-135M-Instruct and small sizes, runnable on this machine.
``--dry-run`` prints every resolved config with the estimated tokens per iteration and memory per
device and runs nothing.

    python experiments/alfworld_matrix.py --scale cpu --dry-run
    python experiments/alfworld_matrix.py --model-dir /models/Qwen2.5-1.5B-Instruct --out runs/matrix
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ggtrain.config import TrainConfig, config_file, config_to_dict, resolve_config  # noqa: E402

METHODS = ("grpo", "gigpo", "graphgpo", "graph_only", "ggpo")
SEEDS = (0, 1, 2)
# (parameters, hidden size, layers) of the models named without a local directory
KNOWN_MODELS = {"smollm2-135m-instruct": (134_515_008, 576, 30), "": (1_543_714_304, 1536, 28)}  # "" = Qwen2.5-1.5B

SCALES = {
    "reference": [
        "TrainConfig.iterations = 150",
        "RolloutConfig.groups_per_iteration = 16",
        "RolloutConfig.group_size = 8",
        "RolloutConfig.max_turns = 50",
        "RolloutConfig.max_prompt_tokens = 2048",
        "RolloutConfig.max_new_tokens = 512",
        "EvalConfig.games = 128",
        "EvalConfig.every = 5",
        "EvalConfig.max_turns = 50",
        "BatchConfig.micro_batch_rows = 16",
        "ModelSpec.param_dtype = 'float32'",
        "ModelSpec.dtype = 'bfloat16'",
        "ModelSpec.remat = True",
    ],
    "cpu": [
        "ModelSpec.path = 'smollm2-135m-instruct'",
        "TrainConfig.iterations = 4",
        "RolloutConfig.groups_per_iteration = 1",
        "RolloutConfig.group_size = 4",
        "RolloutConfig.max_turns = 3",
        "RolloutConfig.max_prompt_tokens = 512",
        "RolloutConfig.max_new_tokens = 48",
        "RolloutConfig.history_length = 1",
        "EvalConfig.games = 4",
        "EvalConfig.every = 2",
        "EvalConfig.max_turns = 3",
        "BatchConfig.mini_batch_rows = 12",
        "BatchConfig.micro_batch_rows = 4",
    ],
}


def model_dims(config: TrainConfig) -> tuple[int, int, int]:
    """(parameters, hidden size, layers) from the model directory's config.json, else a known model."""
    path = Path(config.model.path)
    if config.model.path and (path / "config.json").exists():
        from models.config import load_config

        c = load_config(path)
        per_layer = (
            c.hidden_size * c.head_dim * (c.num_heads * 2 + c.num_kv_heads * 2)
            + 3 * c.hidden_size * c.intermediate_size
            + 2 * c.hidden_size
        )
        head = 0 if c.tie_word_embeddings else c.vocab_size * c.hidden_size
        return (
            c.num_layers * per_layer + c.vocab_size * c.hidden_size + head + c.hidden_size,
            c.hidden_size,
            c.num_layers,
        )
    return KNOWN_MODELS.get(config.model.path, KNOWN_MODELS[""])


def estimate(config: TrainConfig, devices: int) -> dict[str, float]:
    """Upper bounds: every turn used, full prompt and response lengths."""
    r = config.rollout
    rows = r.groups_per_iteration * r.group_size * r.max_turns
    tokens = rows * (r.max_prompt_tokens + r.max_new_tokens)
    params, hidden, layers = model_dims(config)
    shards = max(config.mesh.fsdp * config.mesh.tensor, 1)
    # learner fp32 + Adam moments (2 x fp32) + reference + behavior copies, sharded over fsdp x tensor
    state_bytes = params * (4 + 8 + 4 + 4) / shards
    seq = r.max_prompt_tokens + r.max_new_tokens
    rows_per_device = config.batch.micro_batch_rows / max(devices // shards, 1)
    # with per-layer remat the backward keeps each layer's input (4 bytes per value) plus one layer's
    # working set (about 16 values per hidden unit) -- a rough bound; experiments/plan_memory.py gives
    # a finer estimate checked against the compiled step
    activations = rows_per_device * seq * hidden * 4 * (layers + 16)
    return {
        "rows_per_iteration": rows,
        "tokens_per_iteration": tokens,
        "tokens_total": tokens * config.iterations,
        "params": params,
        "state_gib_per_device": state_bytes / 2**30,
        "activation_gib_per_device_rough": activations / 2**30,
    }


def configs(scale: str, model_dir: str | None) -> list[tuple[str, int, TrainConfig]]:
    out = []
    for method in METHODS:
        for seed in SEEDS:
            bindings = [*SCALES[scale], f"TrainConfig.seed = {seed}"]
            if model_dir:
                bindings.append(f"ModelSpec.path = '{model_dir}'")
            out.append((method, seed, resolve_config([config_file(method)], bindings)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="reference")
    parser.add_argument("--model-dir", help="local HF directory (reference scale: Qwen2.5-1.5B-Instruct)")
    parser.add_argument("--devices", type=int, default=1, help="devices per run, for the memory estimate")
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--out", default="runs/matrix")
    parser.add_argument("--only", nargs="*", default=[], help="methods to run (default all)")
    args = parser.parse_args()
    if args.scale == "reference" and not args.model_dir and not args.dry_run:
        raise SystemExit("--model-dir is required at the reference scale (Qwen2.5-1.5B-Instruct, local)")
    matrix = configs(args.scale, args.model_dir)
    if args.dry_run:
        for method, seed, config in matrix:
            print(
                json.dumps(
                    {
                        "run": f"{method}-seed{seed}",
                        "estimate": estimate(config, args.devices),
                        "config": config_to_dict(config),
                    }
                )
            )
        return
    from ggtrain.train_loop import train

    for method, seed, config in matrix:
        if args.only and method not in args.only:
            continue
        run_dir = Path(args.out) / args.scale / f"{method}-seed{seed}"
        resume = (run_dir / "checkpoints").exists()
        print(f"== {run_dir} ({'resuming' if resume else 'new'})", file=sys.stderr)
        train(dataclasses.replace(config), run_dir, resume=resume)


if __name__ == "__main__":
    main()
