"""Packing (env_bridge.packing, ggtrain.packing): the packed mini-batches hold the padded ones' rows, the
order follows from the seed and resumes, no segment sees another, and one packed update equals one padded
update (loss, every metric, gradients) for PPO-clip in all three aggregations and for GGPO."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from env_bridge.collate import collate_turns
from env_bridge.packing import Packing, first_fit_decreasing, micro_batch_sequences
from ggtrain.config import BatchConfig, ConfigError, LossConfig, TrainConfig, resolve_config
from ggtrain.optim import make_optimizer
from ggtrain.packing import packing_of
from ggtrain.train_state import create_train_state
from ggtrain.train_step import make_gradient_fn, metric_means
from graph import compute_advantages
from models import load_pretrained
from models.scoring import score_tokens_jit
from tests.train_batches import batch_turns, synthetic_turn_batch

ROW_FIELDS = ("group", "traj", "turn", "state", "next_state", "env_reward", "valid", "row_mask")
PACKING = Packing(length=64, micro_batch_tokens=128)  # 2 sequences of 64 per micro-batch


@pytest.fixture(scope="module")
def tiny(tiny_qwen2_dir):
    return load_pretrained(tiny_qwen2_dir)


@pytest.fixture(scope="module")
def turns_and_advantages():
    big = synthetic_turn_batch(groups=4, seed=3)
    return batch_turns(big), compute_advantages("graphgpo", {k: big[k] for k in ROW_FIELDS})


def _collate(turns_and_advantages, rows: int, seed: int = 1, packing: Packing | None = None, whole_groups=False):
    turns, advantages = turns_and_advantages
    extra = {"advantages": advantages}
    return collate_turns(turns, rows, seed=seed, pad_id=0, extra=extra, whole_groups=whole_groups, packing=packing)


def _rows_of(batch: dict[str, np.ndarray]) -> dict[tuple[int, int], dict[str, np.ndarray]]:
    """Each real row's tokens, masks, log-probs, positions and per-row values, keyed by (traj, turn)."""
    out = {}
    if "segment_ids" not in batch:
        for r in np.flatnonzero(batch["row_mask"]):
            n = int(batch["attention_mask"][r].sum())
            tokens = {k: batch[k][r, :n] for k in ("tokens", "loss_mask", "old_logp", "positions")}
            out[int(batch["traj"][r]), int(batch["turn"][r])] = tokens | {"advantages": batch["advantages"][r]}
        return out
    for s, k in zip(*np.nonzero(batch["row_mask"]), strict=True):
        on = batch["segment_ids"][s] == k + 1
        tokens = {f: batch[f][s][on] for f in ("tokens", "loss_mask", "old_logp", "positions")}
        out[int(batch["traj"][s, k]), int(batch["turn"][s, k])] = tokens | {"advantages": batch["advantages"][s, k]}
    return out


@pytest.mark.parametrize("whole_groups", [False, True])
def test_packed_mini_batches_hold_the_padded_ones_rows(turns_and_advantages, whole_groups):
    """Same seed, same mini-batches: each packed one holds exactly the rows of its padded twin, every
    row's tokens, loss mask, old log-probs and advantage intact, its positions restarting at 0."""
    padded = list(_collate(turns_and_advantages, 8, whole_groups=whole_groups))
    packed = list(_collate(turns_and_advantages, 8, packing=PACKING, whole_groups=whole_groups))
    assert len(packed) == len(padded) > 2
    assert len({tuple(b["tokens"].shape) for b in packed}) == 1  # one shape per collation
    for a, b in zip(padded, packed, strict=True):
        rows_a, rows_b = _rows_of(a), _rows_of(b)
        assert rows_a.keys() == rows_b.keys()
        for key, row in rows_a.items():
            for field, value in row.items():
                np.testing.assert_array_equal(rows_b[key][field], value, err_msg=f"{key} {field}")
            np.testing.assert_array_equal(rows_b[key]["positions"], np.arange(len(row["tokens"])))
        assert not b["loss_mask"][b["segment_ids"] == 0].any()
        np.testing.assert_array_equal(b["attention_mask"], b["segment_ids"] > 0)
    assert sum(int(b["row_mask"].sum()) for b in packed) == len(turns_and_advantages[0])


def test_packing_order_follows_the_seed_and_resumes_mid_epoch(turns_and_advantages):
    first = list(_collate(turns_and_advantages, 8, seed=4, packing=PACKING))
    again = list(_collate(turns_and_advantages, 8, seed=4, packing=PACKING))
    other = list(_collate(turns_and_advantages, 8, seed=5, packing=PACKING))
    for a, b in zip(first, again, strict=True):
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    assert any(not np.array_equal(a["tokens"], b["tokens"]) for a, b in zip(first, other, strict=False))
    iterator = _collate(turns_and_advantages, 8, seed=4, packing=PACKING)
    next(iterator)
    state = iterator.get_state()
    resumed = _collate(turns_and_advantages, 8, seed=4, packing=PACKING)
    resumed.set_state(state)
    rest = list(resumed)
    assert len(rest) == len(first) - 1
    for a, b in zip(first[1:], rest, strict=True):
        assert all(np.array_equal(a[k], b[k]) for k in a)


def test_first_fit_decreasing_and_micro_batch_rule():
    lengths = [30, 50, 20, 40, 10, 60]
    bins = first_fit_decreasing(lengths, 64)
    assert bins == [[5], [1, 4], [3, 2], [0]]
    assert sorted(i for b in bins for i in b) == list(range(6))
    with pytest.raises(ValueError, match="70 tokens"):
        first_fit_decreasing([70], 64)
    # the most sequences within the budget that divides the sequence count
    assert micro_batch_sequences(12, 64, 64 * 5) == 4
    assert micro_batch_sequences(12, 64, 64 * 12) == 12
    assert micro_batch_sequences(7, 64, 63) == 1


def test_a_small_mini_batch_packs_into_a_shorter_length_and_a_long_turn_lengthens_it(turns_and_advantages):
    """Packing at 2048 does not blow a few hundred tokens up to 2048 positions: they take the shortest
    length bucket whose ``multiple`` sequences hold them. A turn longer than ``length`` gets its bucket."""
    tokens = sum(len(t.prompt_ids) + len(t.response_ids) for t in turns_and_advantages[0])
    batch = next(_collate(turns_and_advantages, 64, packing=Packing(2048, 2048 * 4, multiple=2)))
    sequences, length = batch["tokens"].shape
    assert length < 2048 and sequences % 2 == 0
    assert length * sequences < 4 * tokens
    longest = max(len(t.prompt_ids) + len(t.response_ids) for t in turns_and_advantages[0])
    short = next(_collate(turns_and_advantages, 64, packing=Packing(longest - 1, 4 * longest)))
    assert short["tokens"].shape[1] >= longest


def test_perturbing_one_segment_changes_no_other_segments_logprobs(tiny, turns_and_advantages):
    """Exactly: attention never crosses a segment, positions restart, the first token of a segment is not
    scored off the previous one. And each segment scores as its row does unpacked (RoPE sees the same)."""
    padded = next(_collate(turns_and_advantages, 32))
    packed = next(_collate(turns_and_advantages, 32, packing=PACKING))
    s = int(np.argmax((packed["segment_ids"] == 2).any(axis=1)))
    assert (packed["segment_ids"][s] == 3).any()  # a middle segment, with neighbours on both sides

    def score(tokens: np.ndarray) -> np.ndarray:
        args = (jnp.asarray(tokens), jnp.asarray(packed["attention_mask"]), jnp.asarray(packed["attention_mask"]))
        return np.asarray(score_tokens_jit(tiny.config, tiny.params, *args, 1.0, jnp.asarray(packed["segment_ids"])))

    base = score(packed["tokens"])
    target = np.zeros_like(packed["segment_ids"], bool)
    target[s] = packed["segment_ids"][s] == 2
    perturbed = packed["tokens"].copy()
    perturbed[target] = (perturbed[target] + 7) % tiny.config.vocab_size
    moved = score(perturbed)
    np.testing.assert_array_equal(moved[~target], base[~target])
    assert np.abs(moved[target] - base[target]).max() > 1e-3
    unpacked = np.asarray(
        score_tokens_jit(tiny.config, tiny.params, padded["tokens"], padded["attention_mask"], padded["loss_mask"], 1.0)
    )
    for (traj, turn), row in _rows_of(padded | {"old_logp": unpacked}).items():
        k = np.argwhere((packed["traj"] == traj) & (packed["turn"] == turn) & packed["row_mask"])[0]
        on = packed["segment_ids"][k[0]] == k[1] + 1
        mine = np.where(packed["loss_mask"][k[0]][on], base[k[0]][on], 0.0)
        np.testing.assert_allclose(mine, row["old_logp"], rtol=1e-5, atol=1e-6)


def _config(loss: str, aggregation: str) -> TrainConfig:
    return TrainConfig(
        loss=dataclasses.replace(LossConfig(name=loss), aggregation=aggregation, kl_coef=0.05, entropy_coef=0.01),
        batch=BatchConfig(mini_batch_rows=32, micro_batch_rows=8, pack_length=64, micro_batch_tokens=128),
    )


@pytest.mark.parametrize(
    "loss,aggregation",
    [
        ("ppo_clip", "token-mean"),
        ("ppo_clip", "seq-mean-token-mean"),
        ("ppo_clip", "seq-mean-token-sum"),
        ("ggpo", "token-mean"),
    ],
)
def test_one_packed_update_equals_one_padded_update(tiny, turns_and_advantages, loss, aggregation):
    config = _config(loss, aggregation)
    whole = loss == "ggpo"
    padded = next(_collate(turns_and_advantages, 32, whole_groups=whole))
    packed = next(_collate(turns_and_advantages, 32, packing=packing_of(config.batch), whole_groups=whole))
    assert packed["tokens"].size < padded["tokens"].size
    gradients = jax.jit(make_gradient_fn(tiny.config, config))
    state = create_train_state(tiny.params, make_optimizer(config.optimizer), jax.random.PRNGKey(0))
    on_device = lambda b: {k: jnp.asarray(v) for k, v in b.items() if k not in ("positions", "policy_version")}
    g_pad, m_pad, _ = gradients(state, on_device(padded))
    g_pack, m_pack, _ = gradients(state, on_device(packed))
    difference = optax.tree.norm(jax.tree_util.tree_map(jnp.subtract, g_pack, g_pad))
    assert float(difference / optax.tree.norm(g_pad)) <= 1e-5
    assert float(optax.tree.norm(g_pad)) > 0
    pad, pack = metric_means(m_pad), metric_means(m_pack)
    assert pad.keys() == pack.keys()
    for name in pad.keys() - {"real_token_fraction"}:
        np.testing.assert_allclose(pack[name], pad[name], rtol=1e-5, atol=1e-8, err_msg=name)
    expected = {"loss", "kl", "entropy", "clip_fraction"} if loss == "ppo_clip" else {"ggpo_loss", "ggpo_t_tok"}
    assert expected <= pad.keys()
    if loss == "ggpo":
        assert pad["ggpo_kept_groups"] > 0
    real = padded["attention_mask"][padded["row_mask"]].sum()
    assert pack["real_token_fraction"] == pytest.approx(real / packed["tokens"].size)
    assert pad["real_token_fraction"] == pytest.approx(real / padded["tokens"].size)
    assert pack["real_token_fraction"] > pad["real_token_fraction"]


def test_packing_settings_are_checked_at_resolution():
    assert resolve_config().batch.packing  # on by default: the equivalence above is its proof
    for binding, name in (
        ("BatchConfig.pack_length = 0", "pack_length"),
        ("BatchConfig.micro_batch_tokens = -1", "micro"),
    ):
        with pytest.raises(ConfigError, match=f"BatchConfig.{name}"):
            resolve_config(bindings=[binding])
