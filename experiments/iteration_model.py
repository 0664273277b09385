"""A modeled time per training iteration at the reference recipe, from ``compile_for.py`` reports: each
program's roofline (the larger of its FLOPs over the chip's peak and its bytes over the chip's HBM
bandwidth, both per chip as the TPU compiler counts them), times how often an iteration runs it. A model,
not a measurement, and not the compiler's ``optimal_seconds`` (libtpu 0.0.42.1 reports a negative
sentinel there); it leaves out collectives over ICI, host work, the environments and the old / reference
log-prob passes, so a real iteration takes longer.

    python experiments/iteration_model.py --train FILE.json [--sampler FILE.json]

The reference iteration: 128 environments (16 task groups x 8 rollouts) over the hosts, up to 50 turns,
each turn one prefill of 2,048 prompt tokens and 512 new tokens in 16-step decode chunks; then one epoch
of updates over the 128 x 50 turn rows, ``--micro-rows`` global rows per micro-batch. Prints one JSON
object.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HBM_BYTES_PER_S = {"v5e": 819e9, "v6e": 1640e9, "v5p": 2765e9}  # per chip, the vendors' figures
REFERENCE_ENVS, REFERENCE_TURNS, REFERENCE_NEW = 128, 50, 512
LABEL = "roofline model from the TPU compiler's per-chip FLOP and byte counts: not a measurement"


def roofline(program: dict, peak_flops: float, hbm: float) -> dict:
    """Seconds per run: compute-bound, memory-bound, and the larger (null when a count is missing or not
    positive, as the extrapolated byte count of a decode chunk can come out)."""
    flops, bytes_ = program.get("flops"), program.get("bytes_accessed")
    compute = flops / peak_flops if flops and flops > 0 else None
    memory = bytes_ / hbm if bytes_ and bytes_ > 0 else None
    known = [t for t in (compute, memory) if t is not None]
    return {"compute_s": compute, "memory_s": memory, "roofline_s": max(known) if len(known) == 2 else None}


def iteration_model(train: dict, sampler: dict) -> dict:
    chip = train["chip"]
    peak, hbm = train["peak_bf16_tflops_per_chip"] * 1e12, HBM_BYTES_PER_S[chip]
    micro_rows = train["plan"]["micro_rows"]
    s = sampler["sampler"]
    runs = {
        "train_step": (train["train_step"], -(-REFERENCE_ENVS * REFERENCE_TURNS // micro_rows)),
        "prefill": (s["prefill"], REFERENCE_TURNS),
        "decode_chunk": (s["decode_chunk"], REFERENCE_TURNS * -(-REFERENCE_NEW // s["decode_chunk_steps"])),
    }
    programs = {}
    for name, (program, count) in runs.items():
        one = roofline(program, peak, hbm)
        total = one["roofline_s"] * count if one["roofline_s"] is not None else None
        programs[name] = one | {"runs_per_iteration": count, "seconds_per_iteration": total}
    totals = [p["seconds_per_iteration"] for p in programs.values()]
    return {
        "label": LABEL,
        "chip": chip,
        "hbm_bytes_per_s": hbm,
        "peak_flops": peak,
        "train_report": train.get("command"),
        "sampler_report": sampler.get("command"),
        "sampler_placement": s.get("placement"),
        "programs": programs,
        "iteration_s": sum(totals) if None not in totals else None,  # type: ignore[arg-type]
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", required=True, help="a compile_for.py JSON with train_step")
    parser.add_argument("--sampler", help="a compile_for.py JSON with the sampler (default: --train's)")
    args = parser.parse_args(argv)
    reports = []
    for path in (args.train, args.sampler or args.train):
        try:
            reports.append(json.loads(Path(path).read_text().splitlines()[-1]))
        except (OSError, ValueError, IndexError) as error:
            print(f"iteration_model: {path}: not a compile_for.py JSON ({error})", file=sys.stderr)
            return 2
    train, sampler = reports
    if "train_step" not in train or "sampler" not in sampler or train.get("chip") not in HBM_BYTES_PER_S:
        print("iteration_model: --train needs a TPU train_step report and --sampler a sampler report", file=sys.stderr)
        return 2
    print(json.dumps(iteration_model(train, sampler)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
