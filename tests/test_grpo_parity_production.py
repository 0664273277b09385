"""GRPO parity (ALGORITHMS.md §8) on the production path, and the per-token GRPO advantage (§3) against an
independent computation.

A real rollout on the built-in world (env pool, prompts, per-group state interning, the choice parser,
a word-level tokenizer) is collated by ``collate_turns``; the advantages come from ``grpo`` and from
``graphgpo`` with ``beta_graph = 0``. The two batches must be equal, one optimizer step from the same
parameters must give identical parameters, and the step must move the parameters the way the gradient of
``-sum_t A_t log pi(t)`` with ``A_t`` computed here (numpy, float64, from the turns) says — which a wrong
advantage reaching the tokens would break (the control shows it does).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from env_bridge.collate import collate_turns
from ggtrain.config import BatchConfig, LossConfig, MeshConfig, OptimizerConfig, TrainConfig
from ggtrain.ppo import clipped_policy_gradient
from ggtrain.update_loop import Updater
from graph import compute_advantages
from models.config import tiny_llama
from models.decoder import init_params
from models.scoring import score_tokens, score_tokens_jit
from tests.ring_rollouts import ring_rollout

GAMES = ["builtin:3:0:1", "builtin:4:1:2", "builtin:3:2:1"]
GROUP_SIZE = 4
MAX_TURNS = 6
ROW_FIELDS = ("group", "traj", "turn", "state", "next_state", "env_reward", "valid")
EPS, PENALTY = 1e-6, 0.1


def grpo_row_advantages(turns) -> np.ndarray:
    """§3, trajectory weighting, mode mean_std: per group over trajectory returns R(tau) (sum of the
    turns' env rewards), mu = mean, sigma = sample std (n - 1), A = (R - mu) / (sigma + 1e-6); a group of
    one trajectory has mu = 0, sigma = 1; then -0.1 on each invalid row (not normalized)."""
    returns: dict[int, float] = {}
    group_of: dict[int, int] = {}
    for t in turns:
        returns[t.traj] = returns.get(t.traj, 0.0) + float(t.env_reward)
        group_of[t.traj] = t.group
    episode: dict[int, float] = {}
    for g in set(group_of.values()):
        trajs = sorted(k for k, v in group_of.items() if v == g)
        r = np.array([returns[k] for k in trajs], np.float64)
        mu, sigma = (r.mean(), r.std(ddof=1)) if len(r) > 1 else (0.0, 1.0)
        for k, value in zip(trajs, (r - mu) / (sigma + EPS), strict=True):
            episode[k] = float(value)
    return np.array([episode[t.traj] - PENALTY * (not t.valid) for t in turns], np.float64)


@pytest.fixture(scope="module")
def rollout():
    tokenizer, result = ring_rollout(GAMES, GROUP_SIZE, MAX_TURNS, invalid=0.1)
    assert not result.dropped_groups
    return tokenizer, result.turns


@pytest.fixture(scope="module")
def model(rollout):
    tokenizer, _ = rollout
    config = tiny_llama(tokenizer.vocab_size, 32, 64, 2, 1, 1024, eos_token_id=tokenizer.eos_token_id, num_layers=1)
    return config, init_params(config, jax.random.PRNGKey(0))


def _batch(rollout, model, method: str, **options) -> dict[str, np.ndarray]:
    """The whole rollout as one collated mini-batch, with on-policy ``old_logp`` (ratio 1)."""
    tokenizer, turns = rollout
    rows = {k: np.asarray([getattr(t, k) for t in turns]) for k in ROW_FIELDS}
    advantages = compute_advantages(method, rows, **options)
    batches = list(
        collate_turns(turns, _rows(turns), seed=1, pad_id=tokenizer.pad_token_id, extra={"advantages": advantages})
    )
    assert len(batches) == 1
    batch = batches[0]
    config, params = model
    mask = batch["loss_mask"] & batch["row_mask"][:, None]
    logp = score_tokens_jit(
        config, params, jnp.asarray(batch["tokens"]), jnp.asarray(batch["attention_mask"]), jnp.asarray(mask), 1.0
    )
    batch["old_logp"] = np.where(mask, np.asarray(logp), 0.0).astype(np.float32)
    return batch


def _rows(turns) -> int:
    return 8 * -(-len(turns) // 8)


def _independent_token_advantages(rollout, batch) -> np.ndarray:
    """Per token: the row's GRPO advantage on that turn's response tokens, 0 everywhere else."""
    _, turns = rollout
    per_row = dict(zip(((t.traj, t.turn) for t in turns), grpo_row_advantages(turns), strict=True))
    out = np.zeros(batch["tokens"].shape, np.float64)
    for r in np.flatnonzero(batch["row_mask"]):
        turn = next(t for t in turns if (t.traj, t.turn) == (int(batch["traj"][r]), int(batch["turn"][r])))
        p = len(turn.prompt_ids)
        out[r, p : p + len(turn.response_ids)] = per_row[(turn.traj, turn.turn)]
    return out


def test_rollout_is_a_real_test_case(rollout):
    """The batch exercises what parity could break on: several groups, unequal trajectory lengths, mixed
    outcomes inside a group, invalid rows, and a non-zero advantage on most rows."""
    _, turns = rollout
    lengths = {}
    for t in turns:
        lengths[t.traj] = lengths.get(t.traj, 0) + 1
    assert len({t.group for t in turns}) == len(GAMES)
    assert len(set(lengths.values())) > 1
    assert not all(t.valid for t in turns) and any(t.valid for t in turns)
    won = {t.traj for t in turns if t.env_reward > 0}
    assert any(0 < len(won & {t.traj for t in turns if t.group == g}) < GROUP_SIZE for g in range(len(GAMES)))
    assert np.mean(np.abs(grpo_row_advantages(turns)) > 0.05) > 0.5


def test_grpo_and_graphgpo_beta_graph_zero_collate_to_the_same_batch(rollout, model):
    grpo = _batch(rollout, model, "grpo")
    graph = _batch(rollout, model, "graphgpo", beta_graph=0.0)
    assert grpo.keys() == graph.keys()
    for key in grpo:
        np.testing.assert_array_equal(grpo[key], graph[key], err_msg=key)
    # and graphgpo with its graph term on is a different batch (the comparison above can fail)
    full = _batch(rollout, model, "graphgpo")
    assert np.max(np.abs(full["advantages"] - grpo["advantages"])) > 0.05


def test_per_token_advantage_reaching_the_loss_is_the_grpo_formula(rollout, model):
    batch = _batch(rollout, model, "grpo")
    expected = _independent_token_advantages(rollout, batch)
    mask = batch["loss_mask"] & batch["row_mask"][:, None]
    assert not np.any(expected[~mask])  # nothing outside this turn's response tokens
    # d pg / d logp at ratio 1 is -A on every token, with the per-token A the loss builds from the batch
    logp = jnp.asarray(batch["old_logp"])
    token_adv = jnp.asarray(batch["advantages"])[:, None] * mask
    grad = jax.grad(lambda lp: jnp.sum(clipped_policy_gradient(lp, logp, token_adv, 0.2, 0.2, 3.0)[0]))(logp)
    np.testing.assert_allclose(-np.asarray(grad), expected, atol=2e-5)


def _config(rows: int) -> TrainConfig:
    return TrainConfig(
        loss=LossConfig(kl_coef=0.0, entropy_coef=0.0),
        optimizer=OptimizerConfig(learning_rate=1e-3, weight_decay=0.0),
        batch=BatchConfig(mini_batch_rows=rows, micro_batch_rows=rows // 2),
        mesh=MeshConfig(data=1),
    )


def _sign_agreement(delta, grad) -> float:
    """Share of the clearly non-zero gradient entries where the parameter moved against the gradient."""
    d = np.concatenate([np.ravel(np.asarray(x)) for x in jax.tree_util.tree_leaves(delta)])
    g = np.concatenate([np.ravel(np.asarray(x)) for x in jax.tree_util.tree_leaves(grad)])
    big = np.abs(g) > 1e-3 * np.abs(g).max()
    assert big.sum() > 100
    return float(np.mean(np.sign(d[big]) == -np.sign(g[big])))


def test_one_optimizer_step_grpo_equals_graphgpo_beta_graph_zero_and_follows_the_grpo_gradient(rollout, model):
    config_m, params = model
    grpo = _batch(rollout, model, "grpo")
    graph = _batch(rollout, model, "graphgpo", beta_graph=0.0)
    config = _config(len(grpo["row_mask"]))
    device = [jax.devices()[0]]
    u_grpo = Updater.create(config_m, params, config, device)
    u_graph = Updater.create(config_m, params, config, device)
    m_grpo, m_graph = u_grpo.update(grpo), u_graph.update(graph)
    for key in ("loss", "pg_loss", "tokens"):
        assert m_grpo[key] == m_graph[key], key
    new_grpo, new_graph = jax.device_get(u_grpo.state.params), jax.device_get(u_graph.state.params)
    for a, b in zip(jax.tree_util.tree_leaves(new_grpo), jax.tree_util.tree_leaves(new_graph), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    delta = jax.tree_util.tree_map(lambda a, b: np.asarray(a) - np.asarray(b), new_grpo, jax.device_get(params))

    # the independent gradient: -sum_t A_t log pi(t) / tokens, A_t from the turns (not from the batch)
    mask = jnp.asarray(grpo["loss_mask"] & grpo["row_mask"][:, None])
    tokens, attention = jnp.asarray(grpo["tokens"]), jnp.asarray(grpo["attention_mask"])

    def surrogate(p, token_adv):
        logp = score_tokens(config_m, p, tokens, attention, mask, 1.0)
        return -jnp.sum(token_adv * logp) / jnp.sum(mask)

    grad_fn = jax.jit(jax.grad(surrogate))
    expected = jnp.asarray(_independent_token_advantages(rollout, grpo), jnp.float32)
    # a first Adam step (no weight decay) moves each parameter by -lr * g / (|g| + eps): against the gradient
    assert _sign_agreement(delta, grad_fn(params, expected)) > 0.99
    # control: the same step does not follow the gradient of a wrong advantage (rows shuffled)
    wrong = np.zeros_like(np.asarray(expected))
    real = np.flatnonzero(grpo["row_mask"])
    shuffled = np.random.default_rng(0).permutation(real)
    for r, s in zip(real, shuffled, strict=True):
        wrong[r] = np.where(np.asarray(mask[r]), np.asarray(expected)[s][np.asarray(mask[s])].mean(), 0.0)
    assert _sign_agreement(delta, grad_fn(params, jnp.asarray(wrong))) < 0.9
