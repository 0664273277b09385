"""Packing vs padding on real ALFWorld turn lengths: prints one JSON object (and writes it to ``--out``).

Prompts are the reference prompt (tags format, history 2, Qwen2.5 tokenizer and chat template) of every
turn of the expert walkthroughs of ``--games`` valid_seen games (a seeded sample); responses are a stated
distribution, uniform on ``--response-min`` .. ``--response-max`` tokens (the reference model's 50-400).
An iteration of ``--iteration-rows`` turns drawn from them is collated both ways, as training collates
(mini-batches of ``--mini-batch-rows``; padded rows at the length bucket of the iteration's longest turn),
and the fraction of computed token positions that are real is reported for several pack lengths. Then
one whole update (forward, backward, optimizer: ``Updater.update``, PPO-clip with its KL reference
forward) of SmolLM2-135M on ``--rows`` of those turns, padded and packed, in this process: real tokens
per second of each and their ratio.

    python experiments/bench/packing.py [--games 16 --rows 4] --out experiments/bench/results_packing_cpu.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from env_bridge.collate import collate_turns, length_bucket  # noqa: E402
from env_bridge.packing import Packing  # noqa: E402
from env_bridge.rollout import Turn  # noqa: E402
from experiments.bench.sides import emit_json  # noqa: E402
from ggtrain.machine import machine_record  # noqa: E402

PACK_LENGTHS = (1536, 2048, 3072, 4096)


def reference_prompt_lengths(games: int, seed: int) -> list[int]:
    """Token counts of the reference prompt at every walkthrough turn of a seeded sample of valid_seen."""
    from env_bridge.demonstrations import walkthrough_demonstrations
    from env_bridge.games import discover_games
    from env_bridge.prompts import prompt_builder
    from models.zoo import qwen25_tokenizer

    tokenizer = qwen25_tokenizer()
    every = discover_games("valid_seen")
    chosen = [every[i] for i in sorted(np.random.default_rng(seed).choice(len(every), games, replace=False))]
    lengths = []
    for records in walkthrough_demonstrations(chosen, prompt_builder("tags", 2), "tags", workers=1):
        for r in records:
            text = tokenizer.apply_chat_template(r["messages"], add_generation_prompt=True)
            lengths.append(len(tokenizer.encode(str(text), add_special_tokens=False)))
    return lengths


def synthetic_turns(prompts: list[int], count: int, low: int, high: int, vocab: int, seed: int) -> list[Turn]:
    """``count`` turns: prompt lengths drawn from ``prompts``, responses uniform on ``low..high`` tokens,
    random token ids (lengths are what packing sees), 8 trajectories per task group."""
    rng = np.random.default_rng(seed)
    turns = []
    for i in range(count):
        p, r = int(rng.choice(prompts)), int(rng.integers(low, high + 1))
        ids = rng.integers(100, vocab - 100, p + r).tolist()
        turns.append(
            Turn(
                group=i // 64,
                traj=i // 8,
                turn=i % 8,
                prompt_ids=ids[:p],
                response_ids=ids[p:],
                logprobs=np.full(r, -1.5, np.float32),
                env_reward=float(i % 16 == 7),
                valid=True,
                state=i % 8,
                next_state=-1 if i % 16 == 7 else i % 8 + 1,
                policy_version=0,
                action="",
                response_text="",
            )
        )
    return turns


def real_fraction(turns: list[Turn], rows: int, packing: Packing | None) -> dict[str, Any]:
    real = computed = batches = 0
    shapes = set()
    for batch in collate_turns(turns, rows, seed=0, pad_id=0, packing=packing):
        real += int((batch["attention_mask"] & _token_rows(batch)).sum())
        computed += batch["tokens"].size
        batches += 1
        shapes.add(batch["tokens"].shape)
    return {"real_token_fraction": round(real / computed, 4), "mini_batches": batches, "shape": sorted(shapes)[0]}


def _token_rows(batch: dict[str, np.ndarray]) -> np.ndarray:
    if "segment_ids" in batch:
        return batch["segment_ids"] > 0
    return np.broadcast_to(batch["row_mask"][:, None], batch["tokens"].shape)


def summary(values: list[int]) -> dict[str, float]:
    a = np.asarray(values)
    return {"n": len(a), "min": int(a.min()), "median": float(np.median(a)), "p90": float(np.percentile(a, 90))} | {
        "max": int(a.max()),
        "mean": round(float(a.mean()), 1),
    }


def timed_updates(turns: list[Turn], padded_length: int, args: argparse.Namespace) -> dict[str, Any]:
    """A warm-up and ``--repeats`` timed updates of each layout on the same turns (one mini-batch each)."""
    import jax

    from ggtrain.config import BatchConfig, MeshConfig, TrainConfig
    from ggtrain.packing import packing_of, real_positions
    from ggtrain.update_loop import Updater
    from models import load_pretrained
    from models.zoo import smollm2_135m_instruct_dir

    lm = load_pretrained(smollm2_135m_instruct_dir())
    model_config = lm.config.replace(remat=True)
    batch_config = BatchConfig(  # a packed micro-batch computes as many positions as a padded one
        mini_batch_rows=args.rows,
        micro_batch_rows=args.micro,
        pack_length=args.pack_length,
        micro_batch_tokens=args.micro * padded_length,
    )
    config = TrainConfig(batch=batch_config, mesh=MeshConfig(data=1, fsdp=1, tensor=1))
    advantages = {"advantages": np.where(np.arange(len(turns)) % 2 == 0, 1.0, -1.0).astype(np.float32)}
    layouts = {
        "padded": collate_turns(turns, args.rows, 0, 0, advantages, length=padded_length),
        "packed": collate_turns(turns, args.rows, 0, 0, advantages, packing=packing_of(batch_config)),
    }
    batches = {name: _host_batch(next(iterator)) for name, iterator in layouts.items()}
    # one updater steps both layouts (two compiled steps), alternating, so load drift hits both alike
    updater = Updater.create(model_config, lm.params, config, devices=jax.devices()[:1])
    first = {name: _seconds(lambda b=b: updater.update(b))[0] for name, b in batches.items()}
    times: dict[str, list[float]] = {name: [] for name in batches}
    metrics: dict[str, Any] = {}
    for _ in range(args.repeats):
        for name, batch in batches.items():
            seconds, metrics[name] = _seconds(lambda b=batch: updater.update(b))
            times[name].append(seconds)
    out: dict[str, Any] = {}
    for name, batch in batches.items():
        step = float(np.median(times[name]))
        real, computed = metrics[name]["real_token_fraction"]
        out[name] = {
            "shape": list(batch["tokens"].shape),
            "real_tokens": real_positions(batch),
            "real_token_fraction": round(real / computed, 4),
            "step_s": [round(t, 2) for t in times[name]],
            "first_step_with_compile_s": round(first[name], 2),
            "real_tokens_per_s": round(real_positions(batch) / step, 1),
        }
    out["packed_over_padded_real_tokens_per_s"] = round(
        out["packed"]["real_tokens_per_s"] / out["padded"]["real_tokens_per_s"], 3
    )
    return out


def _host_batch(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    batch.pop("positions")
    batch.pop("policy_version")
    return batch


def _seconds(step: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    result = step()
    seconds = time.perf_counter() - start
    print(f"update took {seconds:.1f} s", file=sys.stderr, flush=True)
    return seconds, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=16, help="valid_seen games whose walkthrough prompts are used")
    parser.add_argument("--response-min", type=int, default=50)
    parser.add_argument("--response-max", type=int, default=400)
    parser.add_argument("--iteration-rows", type=int, default=1024, help="turns of the collated iteration")
    parser.add_argument("--mini-batch-rows", type=int, default=256)
    parser.add_argument("--rows", type=int, default=4, help="turns of the timed update (one mini-batch)")
    parser.add_argument("--micro", type=int, default=2, help="padded rows per micro-batch; packed: the same positions")
    parser.add_argument("--pack-length", type=int, default=1536)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--no-timing", action="store_true", help="only the turn lengths and real-token fractions")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON to this file")
    args = parser.parse_args()
    started = time.perf_counter()
    prompts = reference_prompt_lengths(args.games, args.seed)
    print(f"{len(prompts)} prompts in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    vocab = 49152  # SmolLM2's: the timed turns' ids must be valid for it
    turns = synthetic_turns(prompts, args.iteration_rows, args.response_min, args.response_max, vocab, args.seed)
    lengths = [len(t.prompt_ids) + len(t.response_ids) for t in turns]
    padded_length = length_bucket(max(lengths))
    fractions = {"padded": real_fraction(turns, args.mini_batch_rows, None)}
    for length in PACK_LENGTHS:
        packing = Packing(length, 16 * length)  # BatchConfig's default micro-batch: 16 rows' positions
        fractions[f"packed_{length}"] = real_fraction(turns, args.mini_batch_rows, packing)
    result: dict[str, Any] = {
        "benchmark": "packing",
        "prompt_settings": "tags format, history 2, Qwen2.5 tokenizer + chat template, valid_seen walkthrough turns",
        "response_distribution": f"uniform {args.response_min}..{args.response_max} tokens (stated, not sampled)",
        "prompt_tokens": summary(prompts),
        "turn_tokens": summary(lengths),
        "iteration": f"{args.iteration_rows} turns in mini-batches of {args.mini_batch_rows} rows",
        "padded_length": padded_length,
        "computed_positions_real": fractions,
        "cpu_count": os.cpu_count(),
        "machine": machine_record(),
    }
    if not args.no_timing:
        timed = timed_updates(turns[: args.rows], padded_length, args)
        result["update"] = {
            "model": "SmolLM2-135M-Instruct fp32, remat per layer, PPO-clip + low_var_kl (reference forward)",
            "turns": args.rows,
            "micro_batch": f"padded {args.micro} rows; packed the same token positions",
        } | timed
        result["load_average_at_end"] = list(os.getloadavg())
    result["wall_s"] = round(time.perf_counter() - started, 1)
    emit_json(result, args.out)


if __name__ == "__main__":
    main()
