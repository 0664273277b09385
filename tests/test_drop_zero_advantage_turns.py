"""``BatchConfig.drop_zero_advantage_turns``: a turn whose advantage is 0 has no policy gradient, so the
update may leave it out. On a real rollout of the built-in world with one game no episode can win within
the turn limit (so its group's GRPO advantages are all 0, with no invalid-action penalty), the kept turns
are exactly the others, and the mini-batch of kept turns has the full mini-batch's gradient, scaled by the
ratio of their response-token counts (the token-mean) - as long as no KL or entropy term reads the
dropped turns; with an entropy term it does not (the control)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from env_bridge.collate import collate_turns
from ggtrain.config import BatchConfig, LossConfig, OptimizerConfig, TrainConfig
from ggtrain.host_batches import turns_with_signal
from ggtrain.optim import make_optimizer
from ggtrain.train_state import create_train_state
from ggtrain.train_step import make_gradient_fn
from graph import compute_advantages
from models.config import tiny_llama
from models.decoder import init_params
from models.scoring import score_tokens_jit
from tests.ring_rollouts import ring_rollout
from tests.test_grpo_parity_production import ROW_FIELDS

# 'builtin:8:4:0' needs 10 moves (4 rooms, take, 4 rooms, put), more than MAX_TURNS: nobody wins it
GAMES = ["builtin:3:0:1", "builtin:4:1:2", "builtin:8:4:0"]
GROUP_SIZE, MAX_TURNS, ROWS = 4, 6, 80


@pytest.fixture(scope="module")
def rollout():
    tokenizer, result = ring_rollout(GAMES, GROUP_SIZE, MAX_TURNS, invalid=0.0)
    rows = {k: np.asarray([getattr(t, k) for t in result.turns]) for k in ROW_FIELDS}
    advantages = compute_advantages("grpo", rows, invalid_penalty=0.0)
    return tokenizer, result.turns, np.asarray(advantages, np.float32)


@pytest.fixture(scope="module")
def model(rollout):
    tokenizer = rollout[0]
    config = tiny_llama(tokenizer.vocab_size, 32, 64, 2, 1, 1024, eos_token_id=tokenizer.eos_token_id, num_layers=1)
    return config, init_params(config, jax.random.PRNGKey(0))


def test_the_kept_turns_are_exactly_those_with_an_advantage(rollout):
    _, turns, advantages = rollout
    unwinnable = [i for i, t in enumerate(turns) if t.group == 2]
    assert unwinnable and not np.any(advantages[unwinnable])  # the case the option exists for
    assert np.count_nonzero(advantages) > len(turns) // 3  # and turns with a signal beside it
    kept, kept_advantages = turns_with_signal(turns, advantages)
    expected = [i for i, a in enumerate(advantages) if a != 0]
    assert [(t.traj, t.turn) for t in kept] == [(turns[i].traj, turns[i].turn) for i in expected]
    np.testing.assert_array_equal(kept_advantages, advantages[expected])
    assert all(t.group != 2 for t in kept)


def _gradient(rollout, model, turns, advantages, entropy_coef: float):
    """The gradient of one padded mini-batch of ``turns`` (on-policy ``old_logp``) and its response tokens."""
    tokenizer = rollout[0]
    config_m, params = model
    (batch,) = collate_turns(turns, ROWS, seed=1, pad_id=tokenizer.pad_token_id, extra={"advantages": advantages})
    mask = batch["loss_mask"] & batch["row_mask"][:, None]
    tokens, attention = jnp.asarray(batch["tokens"]), jnp.asarray(batch["attention_mask"])
    logp = score_tokens_jit(config_m, params, tokens, attention, jnp.asarray(mask), 1.0)
    batch["old_logp"] = np.where(mask, np.asarray(logp), 0.0).astype(np.float32)
    batch.pop("positions"), batch.pop("policy_version")
    config = TrainConfig(
        loss=LossConfig(kl_coef=0.0, entropy_coef=entropy_coef),
        optimizer=OptimizerConfig(learning_rate=1e-3),
        batch=BatchConfig(mini_batch_rows=ROWS, micro_batch_rows=ROWS // 2, packing=False),
    )
    state = create_train_state(params, make_optimizer(config.optimizer), jax.random.PRNGKey(0))
    grads, _, _ = jax.jit(make_gradient_fn(config_m, config))(state, {k: jnp.asarray(v) for k, v in batch.items()})
    flat = np.concatenate([np.ravel(np.asarray(g, np.float64)) for g in jax.tree_util.tree_leaves(grads)])
    return flat, int(mask.sum())


@pytest.mark.parametrize("entropy_coef", [0.0, 0.1])
def test_the_kept_turns_have_the_policy_gradient_of_all_turns(rollout, model, entropy_coef):
    _, turns, advantages = rollout
    assert len(turns) <= ROWS
    full, full_tokens = _gradient(rollout, model, turns, advantages, entropy_coef)
    kept, kept_tokens = _gradient(rollout, model, *turns_with_signal(turns, advantages), entropy_coef)
    assert kept_tokens < full_tokens
    gap = np.max(np.abs(kept * kept_tokens - full * full_tokens)) / np.max(np.abs(full * full_tokens))
    if entropy_coef == 0.0:
        assert gap < 1e-5, gap
    else:  # the dropped turns' entropy term is part of the full gradient
        assert gap > 1e-3, gap  # 3.6e-3 here
