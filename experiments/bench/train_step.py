"""One optimizer update of SmolLM2-135M-Instruct on a 16 x 512 turn batch (PPO-clip + low-variance KL),
ours (jitted train step, micro-batches, remat) next to torch forward + backward + AdamW on the same
model and batch, each side in its own child process of this script. Prints one JSON object with
update tokens/s, peak RSS, the ratio, and the advantage computation's share of the step.

    python experiments/bench/train_step.py [--rows 16 --length 512 --micro 4 --repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from experiments.bench.sides import (  # noqa: E402
    add_side_argument,
    median_time,
    run_sides,
    torch_next_token_loss,
)
from ggtrain.machine import machine_record, thread_record  # noqa: E402


def _batch(rows: int, length: int, vocab: int):
    import numpy as np

    rng = np.random.default_rng(0)
    tokens = rng.integers(100, vocab - 100, (rows, length)).astype(np.int32)
    loss_mask = np.zeros((rows, length), bool)
    loss_mask[:, length // 2 :] = True  # second half of each row is the response
    groups = max(rows // 8, 1)
    return {
        "tokens": tokens,
        "attention_mask": np.ones((rows, length), bool),
        "loss_mask": loss_mask,
        "old_logp": np.where(loss_mask, -2.0, 0.0).astype(np.float32),
        "group": (np.arange(rows) % groups).astype(np.int32),
        "traj": np.arange(rows, dtype=np.int32),
        "turn": np.zeros(rows, np.int32),
        "state": np.zeros(rows, np.int32),
        "next_state": np.where(np.arange(rows) % 2 == 0, -1, 1).astype(np.int32),
        "env_reward": np.where(np.arange(rows) % 2 == 0, 10.0, 0.0).astype(np.float32),
        "valid": np.ones(rows, bool),
        "row_mask": np.ones(rows, bool),
    }


def run_jax(args: argparse.Namespace) -> dict:
    import dataclasses

    import jax

    from ggtrain.config import BatchConfig, MeshConfig, TrainConfig
    from ggtrain.update_loop import Updater
    from graph import compute_advantages
    from models import load_pretrained
    from models.zoo import smollm2_135m_instruct_dir

    lm = load_pretrained(smollm2_135m_instruct_dir())
    model_config = lm.config.replace(remat=True)
    config = TrainConfig(
        batch=BatchConfig(mini_batch_rows=args.rows, micro_batch_rows=args.micro),
        mesh=MeshConfig(data=1, fsdp=1, tensor=1),
    )
    config = dataclasses.replace(config, loss=dataclasses.replace(config.loss, kl_coef=0.01, entropy_coef=0.0))
    batch = _batch(args.rows, args.length, lm.config.vocab_size)
    row_fields = ("group", "traj", "turn", "state", "next_state", "env_reward", "valid", "row_mask")
    rows = {k: batch[k] for k in row_fields}
    batch["advantages"] = compute_advantages("graphgpo", rows)
    advantage_s = median_time(lambda: compute_advantages("graphgpo", rows), 20)
    updater = Updater.create(model_config, lm.params, config, devices=jax.devices()[:1])
    start = time.perf_counter()
    updater.update(batch)
    compile_and_first = time.perf_counter() - start
    step_s = median_time(lambda: updater.update(batch), args.repeats)
    return {
        "threads": thread_record(),  # this side's XLA_FLAGS and thread environment
        "update_tokens_per_s": args.rows * args.length / step_s,
        "step_s": step_s,
        "first_step_with_compile_s": compile_and_first,
        "advantage_ms": advantage_s * 1e3,
        "advantage_fraction_of_step": advantage_s / step_s,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def run_torch(args: argparse.Namespace) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    from models.zoo import smollm2_135m_instruct_dir

    model = AutoModelForCausalLM.from_pretrained(smollm2_135m_instruct_dir(), dtype=torch.float32)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.01)
    tokens = torch.tensor(_batch(args.rows, args.length, model.config.vocab_size)["tokens"], dtype=torch.long)

    def step():
        opt.zero_grad(set_to_none=True)
        torch_next_token_loss(model, tokens).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    step_s = median_time(step, args.repeats)
    return {
        "update_tokens_per_s": args.rows * args.length / step_s,
        "step_s": step_s,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "torch": torch.__version__,
        "threads": thread_record(),  # torch's intra/inter-op threads
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--micro", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    add_side_argument(parser)
    args = parser.parse_args()
    if args.side:
        print(json.dumps(run_jax(args) if args.side == "jax" else run_torch(args)))
        return
    sides = run_sides(__file__, sys.argv[1:])
    threads = {side: sides[side].pop("threads") for side in ("jax", "torch")}  # each child's own settings
    print(
        json.dumps(
            {
                "benchmark": "train_step",
                "model": "SmolLM2-135M-Instruct fp32",
                "batch": f"{args.rows} x {args.length} tokens, micro-batches of {args.micro} rows, remat per layer",
                "objective": "PPO-clip + low_var_kl (ours; includes a reference forward) vs next-token NLL (torch)",
                "cpu_count": os.cpu_count(),
                "machine": machine_record() | {"threads": threads},
                "ours": sides["jax"],
                "torch_forward_backward_adamw": sides["torch"],
                "ratio_ours_over_torch_tokens_per_s": round(
                    sides["jax"]["update_tokens_per_s"] / sides["torch"]["update_tokens_per_s"], 3
                ),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
