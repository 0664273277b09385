"""``tiny-ring``: a tiny model that knows the built-in world's ``choice`` answer format and nothing else.

A random decoder cannot follow any answer format, so RL from it measures format discovery, not credit
assignment. This model is a tiny Llama (word-level vocabulary of the built-in world's prompts) given a
short supervised warm start on *uniformly random admissible* answers: it answers with a valid number
but does not know which action is good, so its success rate is that of a random walk. Estimators are
then compared on what they can learn from there. Built once, deterministically, into the cache.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from env_bridge.envs import BuiltinRingEnv
from env_bridge.prompts import prompt_builder, task_of
from ggtrain.policies.registry import register_model
from models.artifacts import cache_dir
from models.config import ModelConfig, tiny_llama
from models.decoder import init_params
from models.pretrained import LanguageModel
from models.scoring import score_tokens
from models.tokenizer import Tokenizer
from models.zoo import build_once, word_level_tokenizer

ALIAS = "tiny-ring"
MAX_ROOMS = 12
WARM_START_EXAMPLES = 4096
WARM_START_STEPS = 400
WARM_START_BATCH = 64
WARM_START_LR = 3e-3
WARM_START_HISTORY = (0, 1, 2)


def all_games() -> list[str]:
    return [f"builtin:{n}:{k}:{g}" for n in range(3, MAX_ROOMS + 1) for k in range(n) for g in range(n) if k != g]


def random_walk_prompts(count: int, seed: int) -> Iterator[tuple[str, list[str]]]:
    """``(prompt text, admissible actions)`` along uniformly random walks through random built-in games."""
    rng = random.Random(seed)
    games, env = all_games(), BuiltinRingEnv()
    produced = 0
    while produced < count:
        game = rng.choice(games)
        builder = prompt_builder("choice", rng.choice(WARM_START_HISTORY))
        r = env.reset(game, 0)
        task, history = task_of(r.observation), list[tuple[str, str]]()
        for _ in range(rng.randint(1, 10)):
            yield builder.text(task, history, r.observation, r.admissible), r.admissible
            produced += 1
            action = rng.choice(r.admissible)
            history.append((r.observation, action))
            r = env.step(action)
            if r.done or produced >= count:
                break


def ring_corpus() -> list[str]:
    """Every word the built-in world's choice prompts can contain."""
    texts = [text for text, _ in random_walk_prompts(2000, seed=12345)]
    texts.append(" ".join(str(i) for i in range(4 * MAX_ROOMS)) + " user assistant system")
    return texts


def _model_config(vocab_size: int, eos_id: int) -> ModelConfig:
    return tiny_llama(vocab_size, 64, 128, 4, 2, 2048, eos_id, eos_id)


def _warm_start_batches(tokenizer: Tokenizer, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
    rng = random.Random(seed)
    rows, counts = [], []
    for text, admissible in random_walk_prompts(WARM_START_EXAMPLES, seed):
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
        answer = str(rng.randint(1, len(admissible)))
        rows.append(tokenizer.encode(str(prompt), add_special_tokens=False) + tokenizer.encode(answer))
        counts.append(len(admissible))
    length = max(len(r) for r in rows)
    tokens = np.full((len(rows), length), tokenizer.pad_token_id, np.int32)
    attention = np.zeros((len(rows), length), bool)
    target = np.zeros((len(rows), length), bool)
    for i, r in enumerate(rows):
        tokens[i, : len(r)], attention[i, : len(r)] = r, True
        target[i, len(r) - 1] = True
    return tokens, attention, target, counts


def warm_start(config: ModelConfig, params: Any, tokenizer: Tokenizer, seed: int) -> tuple[Any, dict[str, float]]:
    """Supervised steps on uniformly random valid answers; returns the parameters and how valid the
    model's answers are afterwards (probability mass on in-range numbers, on held-out prompts)."""
    tokens, attention, target, counts = _warm_start_batches(tokenizer, seed)
    optimizer = optax.adam(WARM_START_LR)
    opt_state = optimizer.init(params)

    def loss_fn(p: Any, t: jax.Array, a: jax.Array, m: jax.Array) -> jax.Array:
        return -jnp.sum(score_tokens(config, p, t, a, m)) / jnp.sum(m)

    @jax.jit
    def step(p: Any, s: Any, t: jax.Array, a: jax.Array, m: jax.Array) -> tuple[Any, Any, jax.Array]:
        loss, grads = jax.value_and_grad(loss_fn)(p, t, a, m)
        updates, s = optimizer.update(grads, s, p)
        return optax.apply_updates(p, updates), s, loss

    order = np.random.default_rng(seed).permutation(len(tokens))
    held_out, train_rows = order[:256], order[256:]
    batch = WARM_START_BATCH
    loss = jnp.zeros(())
    for i in range(WARM_START_STEPS):
        idx = train_rows[(i * batch) % len(train_rows) :][:batch]
        if len(idx) < batch:
            idx = train_rows[:batch]
        params, opt_state, loss = step(params, opt_state, tokens[idx], attention[idx], target[idx])
    valid = _valid_mass(
        config, params, tokenizer, tokens[held_out], attention[held_out], target[held_out], counts, held_out
    )
    return params, {"final_loss": float(loss), "valid_answer_probability": valid}


def _valid_mass(
    config: ModelConfig,
    params: Any,
    tokenizer: Tokenizer,
    tokens: np.ndarray,
    attention: np.ndarray,
    target: np.ndarray,
    counts: list[int],
    rows: np.ndarray,
) -> float:
    from models.decoder import forward

    logits = forward(config, params, jnp.asarray(tokens), jnp.asarray(attention))
    answer_at = target.argmax(axis=1) - 1  # the position whose logits predict the answer
    probs = np.asarray(jax.nn.softmax(logits[np.arange(len(tokens)), answer_at], axis=-1))
    mass = []
    for i, row in enumerate(rows):
        ids = [tokenizer.token_to_id(str(k)) for k in range(1, counts[row] + 1)]
        mass.append(sum(probs[i, j] for j in ids if j is not None))
    return float(np.mean(mass))


def tiny_ring_dir(root: Path | None = None, seed: int = 0) -> Path:
    """The ``tiny-ring`` HF directory, built (about a minute) and warm-started once into the cache."""

    def build(tmp: Path) -> str:
        tokenizer = word_level_tokenizer(ring_corpus())
        config = _model_config(tokenizer.vocab_size, tokenizer.eos_token_id or 0)
        params, stats = warm_start(config, init_params(config, jax.random.PRNGKey(seed)), tokenizer, seed)
        LanguageModel(config, params, tokenizer).save(tmp)
        record = {
            "seed": seed,
            "examples": WARM_START_EXAMPLES,
            "steps": WARM_START_STEPS,
            "batch": WARM_START_BATCH,
            "learning_rate": WARM_START_LR,
            **stats,
        }
        (tmp / "warm_start.json").write_text(json.dumps(record, indent=2) + "\n")
        return "tiny ring"

    return build_once((root or cache_dir()) / "models" / f"tiny-ring-{seed}", build)


register_model(ALIAS, tiny_ring_dir)
