"""experiments/update_displacement.py: the shuffled control keeps each tensor's displacement entries (so
its size and distribution) and drops their placement."""

from __future__ import annotations

import numpy as np

from experiments.update_displacement import shuffled_displacement, tensor_norms


def _weights() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    start = {"a": rng.normal(size=(8, 16)).astype(np.float32), "b": rng.normal(size=(32,)).astype(np.float32)}
    moved = {k: v + rng.normal(scale=1e-2, size=v.shape).astype(np.float32) for k, v in start.items()}
    return start, moved


def test_the_shuffled_move_has_each_tensors_entries_in_other_places():
    start, moved = _weights()
    shuffled = shuffled_displacement(start, moved, np.random.default_rng(1))
    for name in start:
        delta, control = moved[name] - start[name], shuffled[name] - start[name]
        np.testing.assert_allclose(np.sort(control.ravel()), np.sort(delta.ravel()), atol=1e-6)
        assert not np.allclose(control, delta)
        assert shuffled[name].shape == start[name].shape and shuffled[name].dtype == start[name].dtype


def test_tensor_norms_measure_the_displacement_against_the_weights():
    start, moved = _weights()
    norms = tensor_norms(start, moved)
    assert set(norms) == {"a", "b"}
    np.testing.assert_allclose(norms["a"]["displacement_norm"], np.linalg.norm(moved["a"] - start["a"]), rtol=1e-6)
    np.testing.assert_allclose(norms["b"]["weight_norm"], np.linalg.norm(start["b"]), rtol=1e-6)
    assert tensor_norms(start, start)["a"]["mean_abs_displacement"] == 0.0
