"""``tiny-ring``: answers the built-in world's numbered-choice prompts with valid numbers, not knowing
which action is good; and a rollout through the real pool, sampler and parser in the ``choice`` format."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from env_bridge.prompts import prompt_builder
from env_bridge.rollout import RolloutDriver, SamplerPolicy
from env_bridge.worker_pool import EnvPool
from ggtrain.policies import model_aliases, register_model, resolve_model
from ggtrain.policies.tiny_ring import tiny_ring_dir
from models import load_pretrained
from models.sampler import Sampler, SamplingParams


def test_numbered_prompt_lists_actions_by_number():
    text = prompt_builder("choice", 1).text(
        "put the key in room 2.", [], "You are in room 0.", ["go to room 1", "look"]
    )
    assert "Actions: 1: go to room 1, 2: look." in text and "number of one action" in text


def test_one_registry_resolves_base_models_built_policies_and_directories(tmp_path):
    assert {"smollm2-135m-instruct", "tiny-random", "tiny-ring"} <= set(model_aliases())
    assert model_aliases()["tiny-ring"] is tiny_ring_dir
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model(str(tmp_path)) == tmp_path
    with pytest.raises(ValueError, match="not a model directory") as error:
        resolve_model(str(tmp_path / "nope"))
    assert all(repr(alias) in str(error.value) for alias in model_aliases())  # every alias is listed
    with pytest.raises(ValueError, match="already registered"):
        register_model("tiny-ring", lambda: tmp_path)
    with pytest.raises(ValueError, match="already registered"):
        register_model("tiny-random", lambda: tmp_path)
    register_model("tiny-ring", tiny_ring_dir)  # the same builder again: a no-op


def test_tiny_ring_answers_validly_and_uniformly():
    model_dir = tiny_ring_dir()
    assert resolve_model("tiny-ring") == model_dir
    stats = json.loads((model_dir / "warm_start.json").read_text())
    assert stats["valid_answer_probability"] > 0.95
    lm = load_pretrained(model_dir)
    pool = EnvPool("builtin", 1)
    try:
        driver = RolloutDriver(pool, lm.tokenizer, prompt_builder("choice", 1), max_turns=6, action_format="choice")
        sampler = Sampler(lm.config, lm.tokenizer)
        policy = SamplerPolicy(sampler, lm.params, SamplingParams(max_new_tokens=1), jax.random.PRNGKey(0))
        result = driver.run(["builtin:4:1:2", "builtin:3:2:1"], 8, policy, seed=0)
    finally:
        pool.close()
    turns = result.turns
    assert len(turns) >= 2 * 8 and all(len(t.response_ids) == 1 for t in turns)
    assert np.mean([t.valid for t in turns]) > 0.9
    # not yet a policy: the answers spread over the listed numbers (3 or 4 actions per state)
    answers = [t.response_text.strip() for t in turns if t.valid]
    shares = [answers.count(str(k)) / len(answers) for k in (1, 2, 3)]
    assert min(shares) > 0.15, shares
