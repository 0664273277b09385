"""SFT steps of the ``tiny-alfworld`` recipe, padded against packed (``SftConfig.pack``): prints one JSON
object (and writes it to ``--out``).

The rows are the recipe's own demonstrations (``configs/tiny_alfworld_sft.gin``: the replayed walkthroughs,
mixed as the builder mixes them; replayed into the demonstration cache first if absent), the model its
architecture at random init. For the padded layout (the recipe's) and each pack length, a fresh
``Updater`` takes the same ``--steps`` mini-batches in the same order as the build's first steps (the first
half with the loss on every token, as in the recipe's language-model phase), each step timed to
``block_until_ready``. Reported per layout: computed token positions and real tokens, the median step (the
steady state: a new shape's compile falls into its first step), the total with compiles, and the last
loss (the same rows and math, so equal up to rounding). Ratios are against the padded layout, run in the
same process on the same machine.

    python experiments/bench/sft_packing.py [--steps 40] --out experiments/bench/results_sft_packing_cpu.json
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from experiments.bench.sides import emit_json  # noqa: E402
from ggtrain.machine import machine_record  # noqa: E402


def recipe_turns() -> tuple[Any, Any, list[Any]]:
    """(resolved recipe, tokenizer, encoded training turns) as ``ggtrain.sft.run_sft_steps`` builds them."""
    from ggtrain.config import resolve_config
    from ggtrain.policies.tiny_alfworld import RECIPE_FILE, alfworld_tokenizer
    from ggtrain.rollout_setup import make_rollout_driver
    from ggtrain.sft_data import demonstration_mix, encode_records, split_by_game, walkthrough_records

    config = resolve_config([RECIPE_FILE])
    tokenizer = alfworld_tokenizer(config.data_dir or None)
    s = config.sft
    records = walkthrough_records(
        "train", config.rollout, config.data_dir, s.walkthrough_games, config.seed, None, s.detour_fraction
    )
    train, _ = split_by_game(demonstration_mix(records, config), s.validation_fraction, config.seed)
    driver = make_rollout_driver(config.rollout, None, tokenizer, config.rollout.max_turns)  # type: ignore[arg-type]
    return config, tokenizer, encode_records(train, driver, tokenizer.eos_token_id)


def time_layout(config: Any, tokenizer: Any, turns: list[Any], pack_length: int, steps: int) -> dict[str, Any]:
    """``steps`` timed SFT steps, padded (``pack_length`` 0) or packed into ``pack_length``-token sequences."""
    import jax

    from ggtrain.packing import packing_of
    from ggtrain.policies.tiny_alfworld import model_config
    from ggtrain.sft import Batches, every_token_loss, sft_train_config
    from ggtrain.train_step import metric_means
    from ggtrain.update_loop import Updater
    from models.decoder import init_params

    batch_config = dataclasses.replace(config.batch, packing=True, pack_length=pack_length or config.batch.pack_length)
    config = dataclasses.replace(config, batch=batch_config)
    cfg = model_config(tokenizer)
    params = init_params(cfg, jax.random.PRNGKey(config.seed))
    cfg = cfg.replace(remat=config.model.remat, attention=config.model.attention)
    updater = Updater.create(cfg, params, sft_train_config(config))
    packing = packing_of(config.batch, updater.batch_shards) if pack_length else None
    data = Batches(turns, config.batch.mini_batch_rows, config.seed, tokenizer.pad_token_id, packing)
    times, positions, real, loss = [], 0, 0, float("nan")
    for i in range(steps):
        rows = next(data)
        rows = every_token_loss(rows) if i < steps // 2 else rows
        positions += rows["tokens"].size
        real += int(rows["attention_mask"].sum())
        start = time.perf_counter()
        loss = metric_means(updater.update(rows)).get("loss", float("nan"))
        jax.block_until_ready(updater.state.params)
        times.append(time.perf_counter() - start)
    return {
        "layout": f"packed {pack_length}" if pack_length else "padded",
        "computed_positions": positions,
        "real_tokens": real,
        "median_step_s": statistics.median(times),
        "total_s": sum(times),
        "last_loss": loss,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--pack-lengths", default="1024,1536", help="comma-separated packed sequence lengths")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    config, tokenizer, turns = recipe_turns()
    layouts = [0, *(int(p) for p in args.pack_lengths.split(","))]
    runs = [time_layout(config, tokenizer, turns, p, args.steps) for p in layouts]
    padded = runs[0]
    for r in runs:
        r["median_speedup_vs_padded"] = padded["median_step_s"] / r["median_step_s"]
        r["total_speedup_vs_padded"] = padded["total_s"] / r["total_s"]
    result = {
        "benchmark": "sft_packing",
        "what": "measured wall-clock time of SFT steps (no compiler cost model)",
        "rows_per_step": config.batch.mini_batch_rows,
        "training_turns": len(turns),
        "steps": args.steps,
        "runs": runs,
        "machine": machine_record(),
    }
    emit_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
