"""How far Adam's momentum (b1 0.9, b2 0.999) moves the weights in the steps without a gradient, against the
steps with one, over this run's own sequence of optimizer steps (an estimate from the update rule, not a
measurement of the weights). Each iteration makes round(train/graph/rows / train/rows) mini-batch steps;
they carry a gradient when train/grad_norm > 0. Each coordinate's gradient is held constant, or takes a
random sign at every step; prints JSON.

    python momentum_estimate.py runs/grpo-seed0/metrics.jsonl
"""

import json
import sys

import numpy as np


def step_sequence(metrics_path: str) -> list[bool]:
    steps = []
    for line in open(metrics_path):
        record = json.loads(line)
        if "train/rows" in record:
            count = round(record["train/graph/rows"] / record["train/rows"])
            steps += [record["train/grad_norm"] > 0] * count
    return steps


def moved(steps: list[bool], random_signs: bool, coordinates: int = 4096, b1: float = 0.9, b2: float = 0.999):
    rng = np.random.default_rng(0)
    m, v = np.zeros(coordinates), np.zeros(coordinates)
    with_gradient, without = np.zeros(coordinates), np.zeros(coordinates)
    for t, has_gradient in enumerate(steps, start=1):
        g = np.zeros(coordinates)
        if has_gradient:
            g = rng.choice([-1.0, 1.0], coordinates) if random_signs else np.ones(coordinates)
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        update = (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + 1e-8)
        if has_gradient:
            with_gradient += update
        else:
            without += update
    return float(np.linalg.norm(without) / np.linalg.norm(with_gradient))


if __name__ == "__main__":
    steps = step_sequence(sys.argv[1])
    print(
        json.dumps(
            {
                "steps": len(steps),
                "steps_with_gradient": sum(steps),
                "without_over_with_constant_gradient": round(moved(steps, False), 2),
                "without_over_with_random_signs": round(moved(steps, True), 2),
            }
        )
    )
