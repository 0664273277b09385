"""Checkpoints: retention (keep-last-N plus best), a corrupt latest checkpoint, restore onto another mesh."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from ggtrain.checkpoint import CheckpointError, CheckpointStore, abstract_like
from ggtrain.config import CheckpointConfig, MeshConfig
from ggtrain.sharding import make_mesh


def _state(value: float) -> dict:
    return {"w": jnp.full((8, 4), value, jnp.float32), "step": jnp.asarray(int(value), jnp.int32)}


def test_keep_last_n_plus_best(tmp_path):
    store = CheckpointStore(tmp_path, CheckpointConfig(keep_last=2, best_metric="eval/success", best_mode="max"))
    for step, score in [(1, 0.2), (2, 0.9), (3, 0.1), (4, 0.3), (5, 0.4)]:
        store.save(step, _state(step), {"step": step}, {"eval/success": score})
    store.wait()
    assert store.steps() == [2, 4, 5]
    assert store.best_step() == 2
    store.close()


def test_corrupt_latest_is_reported_by_name_and_previous_is_used(tmp_path):
    messages = []
    store = CheckpointStore(
        tmp_path, CheckpointConfig(keep_last=3, best_metric="", async_save=False), log=messages.append
    )
    store.save(1, _state(1.0), {"data": 1})
    store.save(2, _state(2.0), {"data": 2})
    store.wait()
    for f in (tmp_path / "2" / "state").rglob("*"):
        if f.is_file() and f.stat().st_size > 0 and "manifest" not in f.name and f.suffix != ".json":
            f.write_bytes(f.read_bytes()[: max(1, f.stat().st_size // 3)])
    for f in (tmp_path / "2" / "state").rglob("_METADATA"):
        f.write_text("{ truncated")
    step, state, record = store.restore_latest(abstract_like(_state(0.0)))
    assert step == 1 and record == {"data": 1}
    np.testing.assert_array_equal(np.asarray(state["w"]), np.full((8, 4), 1.0))
    assert len(messages) == 1 and "checkpoint step 2" in messages[0] and str(tmp_path / "2") in messages[0]
    store.close()


def test_no_readable_checkpoint_names_every_failure(tmp_path):
    store = CheckpointStore(tmp_path, CheckpointConfig(async_save=False), log=lambda m: None)
    store.save(1, _state(1.0), {})
    store.wait()
    for f in (tmp_path / "1" / "state").rglob("_METADATA"):
        f.write_text("garbage")
    with pytest.raises(CheckpointError, match="checkpoint step 1"):
        store.restore_latest(abstract_like(_state(0.0)))
    store.close()


def test_restore_onto_a_different_mesh(tmp_path):
    if len(jax.devices()) < 8:
        pytest.skip("needs 8 host devices (conftest sets XLA_FLAGS)")
    saved_mesh = make_mesh(MeshConfig(data=8, fsdp=1, tensor=1))
    state = {"w": jax.device_put(jnp.arange(64.0).reshape(16, 4), NamedSharding(saved_mesh, PartitionSpec("data")))}
    store = CheckpointStore(tmp_path, CheckpointConfig(async_save=True))
    store.save(3, state, {"k": "v"})
    store.close()
    target_mesh = make_mesh(MeshConfig(data=1, fsdp=2, tensor=4))
    target = {"w": NamedSharding(target_mesh, PartitionSpec("fsdp", "tensor"))}
    store = CheckpointStore(tmp_path, CheckpointConfig())
    step, restored, record = store.restore_latest(abstract_like(state, target))
    assert step == 3 and record == {"k": "v"}
    assert restored["w"].sharding.spec == PartitionSpec("fsdp", "tensor")
    np.testing.assert_array_equal(np.asarray(restored["w"]), np.arange(64.0).reshape(16, 4))
    store.close()
