"""Child process for the resume test: train a tiny model on synthetic batches up to --steps, resuming
from the run directory, then write the final learner parameters to --out (npz)."""

from __future__ import annotations

import argparse
import dataclasses

import jax
import numpy as np

from ggtrain.config import BatchConfig, CheckpointConfig, OptimizerConfig, TrainConfig
from ggtrain.update_loop import run_updates
from models import load_pretrained
from tests.synthetic_data import SyntheticBatches


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    lm = load_pretrained(args.model)
    config = TrainConfig(
        optimizer=OptimizerConfig(learning_rate=1e-3),
        batch=BatchConfig(mini_batch_rows=32, micro_batch_rows=8),
        checkpoint=CheckpointConfig(keep_last=2, best_metric="", async_save=True),
    )
    config = dataclasses.replace(config, loss=dataclasses.replace(config.loss, kl_coef=0.01))
    updater = run_updates(
        lm.config,
        lm.params,
        config,
        SyntheticBatches(seed=1, rows=32),
        args.run_dir,
        args.steps,
        devices=jax.devices()[:1],
    )
    leaves = jax.tree_util.tree_leaves_with_path(updater.state.params)
    np.savez(
        args.out,
        **{jax.tree_util.keystr(k): np.asarray(v) for k, v in leaves},
        rng=np.asarray(
            jax.random.key_data(updater.state.rng)
            if jax.dtypes.issubdtype(updater.state.rng.dtype, jax.dtypes.prng_key)
            else updater.state.rng
        ),
        step=np.asarray(updater.state.step),
    )


if __name__ == "__main__":
    main()
