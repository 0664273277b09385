"""The trainer's update and sampler at Qwen2.5-1.5B shapes on one GPU: prints one JSON object (and writes
it to ``--out``).

Random-init parameters of the ``qwen2.5-1.5b`` preset (the real architecture; weights do not change the
time), the Qwen2.5 tokenizer for its pad and end ids.

- Update: ``ggtrain.update_loop.Updater`` (the jitted, sharded train step the trainer runs: PPO-clip with
  the low-variance KL to the reference, AdamW) on padded mini-batches of ``--rows`` turns of ``--seq``
  tokens in micro-batches of ``--micro`` rows, float32 parameters, bfloat16 compute, no remat (the plan of
  ``experiments/results/gpu_compile/``). Times are medians of ``--repeats`` steps after one warm-up step,
  each to the step's metrics on the host. MFU counts the policy's forward and backward only,
  ``6 N + 12 L d s`` FLOPs per token (N: all parameters, the tied head once; L layers, d width, s the
  sequence length; attention as computed, without causal savings), against NVIDIA's dense bf16 peak;
  the reference forward for the KL is done but not counted, so the figure is conservative.
- Sampler: ``models.sampler.Sampler.generate`` on ``--envs`` prompts of ``--prompt`` random tokens,
  ``--new`` new tokens at temperature 1 (random weights: no row stops early), medians of ``--repeats``
  calls after one warm-up call. Reported: new tokens per second, and prompt plus new tokens per second.

    python experiments/bench/gpu_qwen.py --out results_gpu_qwen.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from experiments.bench.sides import emit_json  # noqa: E402
from ggtrain.machine import machine_record  # noqa: E402

PEAK_BF16 = {"NVIDIA H200": 989e12, "NVIDIA H100 80GB HBM3": 989e12}  # dense, per chip


def model_and_params(param_dtype: str, dtype: str, layers: int = 0) -> tuple[Any, Any, int]:
    import jax

    from models.config import MODEL_PRESETS
    from models.decoder import init_params

    cfg = MODEL_PRESETS["qwen2.5-1.5b"].replace(param_dtype=param_dtype, dtype=dtype, remat=False)
    cfg = cfg.replace(num_layers=layers) if layers else cfg
    params = init_params(cfg, jax.random.PRNGKey(0))
    n = sum(x.size for x in jax.tree_util.tree_leaves(params))
    return cfg, params, n


def update_batch(rows: int, seq: int, vocab: int, seed: int) -> dict[str, Any]:
    """A padded mini-batch as the collator writes it: prompt on the first half, response on the second."""
    import numpy as np

    rng = np.random.default_rng(seed)
    loss_mask = np.zeros((rows, seq), bool)
    loss_mask[:, seq // 2 :] = True
    batch = {
        "tokens": rng.integers(0, vocab, (rows, seq), dtype=np.int32),
        "attention_mask": np.ones((rows, seq), bool),
        "loss_mask": loss_mask,
        "old_logp": np.full((rows, seq), -np.log(vocab), np.float32),
        "advantages": rng.standard_normal(rows).astype(np.float32),
        "row_mask": np.ones(rows, bool),
        "env_reward": np.zeros(rows, np.float32),
        "valid": np.ones(rows, bool),
    }
    ids = np.arange(rows, dtype=np.int32)
    batch |= {"group": ids // 8, "traj": ids, "turn": np.zeros(rows, np.int32)}
    batch |= {"state": ids, "next_state": np.full(rows, -1, np.int32)}
    return batch


def time_update(cfg: Any, params: Any, n_params: int, args: argparse.Namespace) -> dict[str, Any]:
    from ggtrain.config import BatchConfig, ModelSpec, TrainConfig
    from ggtrain.update_loop import Updater

    config = TrainConfig(
        model=ModelSpec(param_dtype=cfg.param_dtype, dtype=cfg.dtype, remat=False),
        batch=BatchConfig(mini_batch_rows=args.rows, micro_batch_rows=args.micro, packing=False),
    )
    updater = Updater.create(cfg, params, config)
    start = time.perf_counter()
    updater.update(update_batch(args.rows, args.seq, cfg.vocab_size, 0))
    first = time.perf_counter() - start
    times = []
    for i in range(args.repeats):
        start = time.perf_counter()
        metrics = updater.update(update_batch(args.rows, args.seq, cfg.vocab_size, i + 1))
        times.append(time.perf_counter() - start)
    tokens = args.rows * args.seq
    flops_per_token = 6 * n_params + 12 * cfg.num_layers * cfg.hidden_size * args.seq
    median = statistics.median(times)
    achieved = flops_per_token * tokens / median
    return {
        "rows": args.rows,
        "seq": args.seq,
        "micro_rows": args.micro,
        "param_dtype": cfg.param_dtype,
        "dtype": cfg.dtype,
        "first_step_s_with_compile": first,
        "step_s": times,
        "median_step_s": median,
        "tokens_per_s": tokens / median,
        "model_flops_per_token": flops_per_token,
        "achieved_tflops": achieved / 1e12,
        "last_loss": metrics["loss"][0] / max(metrics["loss"][1], 1.0),
    }


def time_sampler(cfg: Any, params: Any, tokenizer: Any, args: argparse.Namespace) -> dict[str, Any]:
    import jax
    import numpy as np

    from models.sampler import Sampler, SamplingParams

    sampler = Sampler(cfg, tokenizer)
    rng = np.random.default_rng(0)
    high = min(cfg.vocab_size, 151643)  # ordinary tokens only: never the end ids
    prompts = [list(rng.integers(0, high, args.prompt)) for _ in range(args.envs)]
    sp = SamplingParams(max_new_tokens=args.new, temperature=1.0)
    start = time.perf_counter()
    sampler.generate(params, prompts, sp, jax.random.PRNGKey(0))
    first = time.perf_counter() - start
    times, new_tokens = [], 0
    for i in range(args.repeats):
        start = time.perf_counter()
        out = sampler.generate(params, prompts, sp, jax.random.PRNGKey(i + 1))  # host lists: finished
        times.append(time.perf_counter() - start)
        new_tokens = sum(len(t) for t in out.tokens)
    median = statistics.median(times)
    return {
        "envs": args.envs,
        "prompt_tokens": args.prompt,
        "max_new_tokens": args.new,
        "first_call_s_with_compile": first,
        "call_s": times,
        "median_call_s": median,
        "new_tokens_last_call": new_tokens,
        "new_tokens_per_s": new_tokens / median,
        "prompt_and_new_tokens_per_s": (args.envs * args.prompt + new_tokens) / median,
    }


def qwen_tokenizer() -> Any:
    from models.zoo import qwen25_tokenizer

    return qwen25_tokenizer(chat_template="")  # the sampler takes token ids: no chat template needed


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--micro", type=int, default=2)
    parser.add_argument("--envs", type=int, default=128)
    parser.add_argument("--prompt", type=int, default=1024)
    parser.add_argument("--new", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--param-dtype", default="float32")
    parser.add_argument("--layers", type=int, default=0, help="fewer layers (a smoke test); 0: all 28")
    parser.add_argument("--only", choices=("update", "sampler"), help="run one half only")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    import jax

    device = jax.devices()[0]
    cfg, params, n = model_and_params(args.param_dtype, "bfloat16", args.layers)
    result: dict[str, Any] = {
        "benchmark": "gpu_qwen",
        "what": "measured wall-clock time on the device (no compiler cost model)",
        "model": "qwen2.5-1.5b (random init)" + (f", {args.layers} layers" if args.layers else ""),
        "parameters": n,
        "device": device.device_kind,
        "peak_bf16_flops": PEAK_BF16.get(device.device_kind),
    }
    if args.only != "sampler":
        update = time_update(cfg, params, n, args)
        peak = result["peak_bf16_flops"]
        update["mfu"] = update["achieved_tflops"] * 1e12 / peak if peak else None
        result["update"] = update
        print(json.dumps({"update": update}), file=sys.stderr, flush=True)
        if args.out:  # kept if the sampler half does not finish
            args.out.write_text(json.dumps(result, indent=2) + "\n")
    if args.only != "update":
        sampling_cfg, sampling_params, _ = model_and_params("bfloat16", "bfloat16", args.layers)
        del params
        result["sampler"] = time_sampler(sampling_cfg, sampling_params, qwen_tokenizer(), args) | {
            "param_dtype": "bfloat16"
        }
    result["machine"] = machine_record()
    emit_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
