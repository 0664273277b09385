"""How far a run moved its policy from the weights it started from, and whether a move of the same size
in no particular direction does as well: writes the run's final weights minus the starting ones per tensor
(norms relative to the tensor), and an HF model directory with the starting weights plus that same
displacement with its entries shuffled within each tensor (same sizes, same distribution of entries, no
direction), to evaluate beside the run with ``ggtrain eval --model``.

    python experiments/update_displacement.py --run RUN_DIR --out DIR [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import jax
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ggtrain.config import ConfigError, config_from_dict  # noqa: E402
from ggtrain.run import model_directory  # noqa: E402
from ggtrain.run_policy import restore_run_policy  # noqa: E402
from models.hf_io import params_to_hf_tensors, write_hf_tensors  # noqa: E402


def tensor_norms(start: dict, moved: dict) -> dict[str, dict[str, float]]:
    norms = {}
    for name, base in start.items():
        delta = moved[name] - base
        norms[name] = {
            "weight_norm": float(np.linalg.norm(base)),
            "displacement_norm": float(np.linalg.norm(delta)),
            "mean_abs_displacement": float(np.mean(np.abs(delta))),
        }
    return norms


def shuffled_displacement(start: dict, moved: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    out = {}
    for name, base in start.items():
        delta = (moved[name] - base).ravel()
        out[name] = (base.ravel() + rng.permutation(delta)).reshape(base.shape).astype(base.dtype)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", required=True, type=Path, help="a run directory with a checkpoint")
    parser.add_argument("--out", required=True, type=Path, help="folder for displacement.json and shuffled_model/")
    parser.add_argument("--seed", type=int, default=0, help="seed of the shuffle")
    args = parser.parse_args(argv)
    if not (args.run / "config.json").exists():
        raise ConfigError(f"--run {args.run}: not a run directory (no config.json)")
    config = config_from_dict(json.loads((args.run / "config.json").read_text()))
    source = model_directory(config)
    lm, params, iteration = restore_run_policy(args.run, config, source)
    start = params_to_hf_tensors(jax.device_get(lm.params), lm.config, "float32")
    moved = params_to_hf_tensors(jax.device_get(params), lm.config, "float32")
    norms = tensor_norms(start, moved)
    total = {k: float(np.sqrt(sum(v[k] ** 2 for v in norms.values()))) for k in ("weight_norm", "displacement_norm")}
    args.out.mkdir(parents=True, exist_ok=True)
    record = {"run": str(args.run), "iteration": iteration, "model": str(source), "seed": args.seed}
    record |= {"total": total, "tensors": norms}
    (args.out / "displacement.json").write_text(json.dumps(record, indent=1) + "\n")
    shuffled = args.out / "shuffled_model"
    shutil.copytree(source, shuffled, ignore=shutil.ignore_patterns("*.safetensors*", "sft_run"), dirs_exist_ok=True)
    write_hf_tensors(shuffled_displacement(start, moved, np.random.default_rng(args.seed)), shuffled)
    print(json.dumps({"iteration": iteration, **total, "shuffled_model": str(shuffled)}))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ConfigError as error:
        print(f"{Path(__file__).name}: {error}", file=sys.stderr)
        sys.exit(2)
