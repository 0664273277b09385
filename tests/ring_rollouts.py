"""Real rollouts of the built-in ring world by a scripted policy, for update tests that need real turns."""

from __future__ import annotations

import random

from env_bridge.envs import BuiltinRingEnv
from env_bridge.prompts import prompt_builder
from env_bridge.rollout import RolloutDriver, ScriptedPolicy
from env_bridge.worker_pool import EnvPool
from ggtrain.policies.tiny_ring import ring_corpus
from models.zoo import word_level_tokenizer


def walkthrough_policy(tokenizer, games: list[str], seed: int, invalid: float) -> ScriptedPolicy:
    """The walkthrough's next move with probability 0.7, an invalid answer with ``invalid``, else a random
    listed action."""
    env = BuiltinRingEnv()
    plans = {g: env.walkthrough(g) for g in games}
    progress: dict[int, int] = {}

    def choose(view) -> str:
        rng = random.Random(hash((seed, view.traj, view.turn)))
        k = 0 if view.turn == 0 else progress.get(view.slot, 0)
        plan = plans[view.game]
        u = rng.random()
        if u < 0.7 and k < len(plan) and plan[k] in view.admissible:
            progress[view.slot] = k + 1
            return plan[k]
        progress[view.slot] = k
        if u < 0.7 + invalid:
            return "jump"  # not a listed action: invalid
        return rng.choice(view.admissible)

    return ScriptedPolicy(tokenizer, choose, action_format="choice")


def ring_rollout(games: list[str], group_size: int, max_turns: int, invalid: float):
    """(tokenizer, rollout result) of one group of ``group_size`` episodes per game, seed 0."""
    tokenizer = word_level_tokenizer(ring_corpus())
    with EnvPool("builtin", 2) as pool:
        driver = RolloutDriver(
            pool, tokenizer, prompt_builder("choice", 1), max_turns=max_turns, action_format="choice"
        )
        return tokenizer, driver.run(games, group_size, walkthrough_policy(tokenizer, games, 0, invalid), seed=0)
