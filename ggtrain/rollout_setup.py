"""The rollout driver and sampling parameters built from ``RolloutConfig``, for training and evaluation alike."""

from __future__ import annotations

from typing import Any

from env_bridge.prompts import prompt_builder
from env_bridge.rollout import RolloutDriver
from env_bridge.worker_pool import EnvPool
from ggtrain.config import RolloutConfig
from models.sampler import SamplingParams

ACTION_STOP = ("</action>",)


def make_rollout_driver(rollout: RolloutConfig, pool: EnvPool, tokenizer: Any, max_turns: int) -> RolloutDriver:
    return RolloutDriver(
        pool,
        tokenizer,
        prompt_builder(rollout.action_format, rollout.history_length, rollout.show_tracked_state),
        max_turns=max_turns,
        max_prompt_tokens=rollout.max_prompt_tokens,
        strict_actions=rollout.strict_actions,
        retries=rollout.retries,
        action_format=rollout.action_format,
    )


def make_sampling_params(rollout: RolloutConfig, temperature: float) -> SamplingParams:
    """With the ``tags`` format generation stops at ``</action>``: nothing after the action reaches the
    environment. A ``choice`` answer is a number; ``max_new_tokens`` bounds it."""
    return SamplingParams(
        max_new_tokens=rollout.max_new_tokens,
        temperature=temperature,
        top_p=rollout.top_p,
        top_k=rollout.top_k,
        stop=ACTION_STOP if rollout.action_format == "tags" else (),
        prefill_chunk=rollout.prefill_chunk,
    )
