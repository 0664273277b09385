"""Attention in causal blocks against one masked block, at the `tiny-alfworld` policy's shapes: prints one
JSON object (and writes it to ``--out``).

Without a cache the decoder attends a block of 128 queries at a time to the keys up to the block
(``models.attention.causal_masked_attention``); before, every query scored every key and the causal mask
hid half of them. The sampler's prefill of a prompt no longer than ``RolloutConfig.prefill_chunk`` now
takes one pass in those blocks; before, the quickstart prefilled in 256-token chunks, each scoring every
slot of the cache. Both sides run in this process, one after the other, on the same inputs: the old side
puts the one-block function back in the layers and samples with 256-token prefill chunks (the old code's
path for prompt buckets over 256 tokens, as all measured here; a bucket of at most 256 would take the new
one-pass path on both sides). The sampling rows change two things at once, the blocks and the chunk.

Inputs: the architecture of `tiny-alfworld` (``ggtrain.policies.tiny_alfworld.ARCHITECTURE``, its
tokenizer; random weights: the time does not depend on them) and the prompts of the expert walkthroughs
of ``--games`` valid_seen games as the quickstart renders them (reference prompt, history 1, the tracked
state). Measured: forward and forward + backward (token NLL) of 32 packed rows of 768 tokens (the
quickstart's ``pack_length``, first fit in order of length) and of the 32 shortest prompts padded to
their length bucket, and ``Sampler.generate`` of a seeded sample of 16 and of 32 prompts with 24 new
tokens. Median seconds of ``--repeats`` calls after a compile call.

    python experiments/bench/causal_blocks.py --out experiments/bench/results_causal_blocks_cpu.json
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from experiments.bench.sides import emit_json, median_time  # noqa: E402
from ggtrain.machine import machine_record  # noqa: E402

PACK_LENGTH, ROWS, NEW_TOKENS = 768, 32, 24


def walkthrough_prompts(games: int, tokenizer: Any) -> list[list[int]]:
    """Token ids of the quickstart's prompt at every walkthrough turn of the first ``games`` valid_seen games."""
    from env_bridge.demonstrations import walkthrough_demonstrations
    from env_bridge.games import discover_games
    from env_bridge.prompts import prompt_builder

    chosen = discover_games("valid_seen")[:games]
    prompts = []
    for records in walkthrough_demonstrations(chosen, prompt_builder("tags", 1, True), "tags", workers=1):
        for r in records:
            text = tokenizer.apply_chat_template(r["messages"], add_generation_prompt=True)
            prompts.append(tokenizer.encode(str(text), add_special_tokens=False))
    return prompts


def packed_rows(prompts: list[list[int]], pad: int) -> tuple[np.ndarray, np.ndarray]:
    """``ROWS`` rows of ``PACK_LENGTH`` tokens, prompts laid end to end (first fit), segment ids 1, 2, ..."""
    tokens, segments = np.full((ROWS, PACK_LENGTH), pad, np.int32), np.zeros((ROWS, PACK_LENGTH), np.int32)
    used = np.zeros(ROWS, int)
    for p in prompts:
        p = p[:PACK_LENGTH]
        row = next((r for r in range(ROWS) if used[r] + len(p) <= PACK_LENGTH), None)
        if row is None:
            continue
        tokens[row, used[row] : used[row] + len(p)] = p
        segments[row, used[row] : used[row] + len(p)] = segments[row].max() + 1
        used[row] += len(p)
    return tokens, segments


def padded_rows(prompts: list[list[int]], pad: int) -> tuple[np.ndarray, np.ndarray]:
    from env_bridge.collate import length_bucket

    chosen = prompts[:ROWS]
    length = length_bucket(max(map(len, chosen)))
    tokens, mask = np.full((ROWS, length), pad, np.int32), np.zeros((ROWS, length), bool)
    for i, p in enumerate(chosen):
        tokens[i, : len(p)], mask[i, : len(p)] = p, True
    return tokens, mask


def timed(fn: Callable[..., Any], args: tuple, repeats: int) -> float:
    import jax

    return median_time(lambda: jax.block_until_ready(fn(*args)), repeats)


def model_timings(config: Any, params: Any, prompts: list[list[int]], pad: int, repeats: int) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    from models.decoder import forward

    def nll(p: Any, tokens: jax.Array, mask: jax.Array, segments: jax.Array | None) -> jax.Array:
        logits = forward(config, p, tokens, mask, segment_ids=segments)[:, :-1]
        picked = jnp.take_along_axis(logits, tokens[:, 1:, None], -1)[..., 0]
        return jnp.sum((jax.nn.logsumexp(logits, -1) - picked) * mask[:, 1:]) / jnp.sum(mask[:, 1:])

    packed, segments = (jnp.asarray(x) for x in packed_rows(prompts, pad))
    padded, mask = (jnp.asarray(x) for x in padded_rows(prompts, pad))
    cases = {"packed": (packed, segments > 0, segments), "padded": (padded, mask, None)}
    out: dict[str, Any] = {"packed_prompts": int(segments.max(axis=1).sum()), "padded_length": padded.shape[1]}
    for name, (tokens, m, seg) in cases.items():
        fwd = jax.jit(lambda p, t, m, s: forward(config, p, t, m, segment_ids=s).sum())
        grad = jax.jit(jax.value_and_grad(nll))
        out[f"{name}_forward_s"] = timed(fwd, (params, tokens, m, seg), repeats)
        out[f"{name}_forward_backward_s"] = timed(grad, (params, tokens, m, seg), repeats)
    return out


def sampler_timings(sampler: Any, params: Any, prompts: list[list[int]], chunk: int, repeats: int) -> dict[str, Any]:
    import jax

    from models.buckets import bucket
    from models.sampler import LENGTH_BUCKETS, SamplingParams

    sp = SamplingParams(max_new_tokens=NEW_TOKENS, temperature=1.0, prefill_chunk=chunk)
    out = {}
    for batch in (16, 32):
        rng = np.random.default_rng(batch)  # a seeded sample, as a rollout's live environments
        chosen = [prompts[i] for i in rng.choice(len(prompts), batch, replace=False)]
        out[f"generate_{batch}_prompt_bucket"] = bucket(max(map(len, chosen)), LENGTH_BUCKETS, "prompt")
        out[f"generate_{batch}_s"] = median_time(
            functools.partial(sampler.generate, params, chosen, sp, jax.random.PRNGKey(0)), repeats
        )
    return out


def side(name: str, patch: Callable[[], Any], run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    undo = patch()
    try:
        result = run()
    finally:
        undo()
    print(f"{name}: {json.dumps(result)}", file=sys.stderr)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--games", type=int, default=8, help="valid_seen games whose walkthrough prompts are used")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    import jax

    import models.layers
    from ggtrain.policies.tiny_alfworld import ARCHITECTURE, alfworld_tokenizer, model_config
    from models.attention import causal_masked_attention, masked_attention
    from models.decoder import init_params
    from models.sampler import Sampler

    tokenizer = alfworld_tokenizer()
    config = model_config(tokenizer)
    params = init_params(config, jax.random.PRNGKey(0))
    prompts = sorted(walkthrough_prompts(args.games, tokenizer), key=len)
    pad = tokenizer.pad_token_id
    sampler = Sampler(config, tokenizer)

    def one_block() -> Callable[[], None]:
        models.layers.causal_masked_attention = masked_attention
        return lambda: setattr(models.layers, "causal_masked_attention", causal_masked_attention)

    def unchanged() -> Callable[[], None]:
        return lambda: None

    sides = {}
    for name, patch, chunk in (("one_masked_block", one_block, 256), ("causal_blocks", unchanged, 1024)):
        sides[name] = side(
            name,
            patch,
            lambda chunk=chunk: (
                model_timings(config, params, prompts, pad, args.repeats)
                | sampler_timings(sampler, params, prompts, chunk, args.repeats)
            ),
        )
    before, after = sides["one_masked_block"], sides["causal_blocks"]
    result = {
        "architecture": ARCHITECTURE,
        "prompts": {
            "count": len(prompts),
            "tokens_median": int(np.median([len(p) for p in prompts])),
            "tokens_max": max(map(len, prompts)),
        },
        "sides": {"one_masked_block": "before (prefill chunk 256)", "causal_blocks": "after (prefill chunk 1024)"},
        "seconds": sides,
        "speedup": {k: round(before[k] / after[k], 2) for k in before if k.endswith("_s")},
        "machine": machine_record(),
    }
    emit_json(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
