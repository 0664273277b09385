"""bfloat16 compute: SmolLM2-135M's logits stay within a stated distance of fp32, and a bf16 training step
on a fixed batch stays finite and lowers the loss, starting where fp32 starts."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ggtrain.config import BatchConfig, LossConfig, OptimizerConfig, TrainConfig
from ggtrain.optim import make_optimizer
from ggtrain.train_state import create_train_state
from ggtrain.train_step import make_train_step, metric_means
from graph import compute_advantages
from models import load_pretrained
from models.decoder import forward
from tests.train_batches import synthetic_turn_batch

PROMPTS = [
    "What is the capital of France?",
    "You are in the middle of a room. Looking around you, you see a cabinet 1 and a fridge 1. "
    "Your task is to: put a cool apple in cabinet.",
]
ROWS = 16
STEPS = 6
ROW_FIELDS = ("group", "traj", "turn", "state", "next_state", "env_reward", "valid", "row_mask")


def _padded_chat_batch(lm) -> tuple[np.ndarray, np.ndarray]:
    ids = [
        lm.tokenizer.encode(
            lm.tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True)
        )
        for p in PROMPTS
    ]
    tokens = np.zeros((len(ids), max(map(len, ids))), np.int32)
    mask = np.zeros(tokens.shape, bool)
    for i, row in enumerate(ids):
        tokens[i, : len(row)], mask[i, : len(row)] = row, True
    return tokens, mask


@pytest.mark.slow
@pytest.mark.parametrize("param_dtype", ["float32", "bfloat16"])
def test_smollm2_bfloat16_logits_stay_near_float32(smollm, param_dtype):
    """Measured on these two chat prompts (104 positions, logits up to 38): max |Δ| 1.10, mean |Δ| 0.145,
    next-token log-probs mean |Δ| 0.056, the same argmax at 96 % of positions (bf16 parameters give the
    same: the decoder computes in the compute dtype). Asserted with margin: 2.0, 0.25, 0.1, 90 %."""
    tokens, mask = _padded_chat_batch(smollm)
    reference = np.asarray(forward(smollm.config, smollm.params, tokens, mask))
    params = jax.tree_util.tree_map(lambda x: x.astype(param_dtype), smollm.params)
    bf16 = np.asarray(forward(smollm.config.replace(dtype="bfloat16", param_dtype=param_dtype), params, tokens, mask))
    diff = np.abs(bf16 - reference)[mask]
    assert np.isfinite(bf16).all()
    assert diff.max() > 1e-3  # really computed in bf16
    assert diff.max() <= 2.0 and diff.mean() <= 0.25
    next_tokens, next_mask = tokens[:, 1:, None], mask[:, 1:]
    logp = [np.take_along_axis(jax.nn.log_softmax(x[:, :-1], -1), next_tokens, -1)[..., 0] for x in (reference, bf16)]
    assert np.abs(logp[1] - logp[0])[next_mask].mean() <= 0.1
    assert (bf16.argmax(-1) == reference.argmax(-1))[mask].mean() >= 0.9


def _losses(lm, dtype: str, param_dtype: str, steps: int) -> tuple[list[dict[str, float]], set[str]]:
    """The metrics of ``steps`` steps on one fixed batch and the dtypes of the trained parameters."""
    model = lm.config.replace(dtype=dtype, param_dtype=param_dtype)
    config = TrainConfig(
        loss=LossConfig(name="ppo_clip"),
        optimizer=OptimizerConfig(learning_rate=1e-2),
        batch=BatchConfig(mini_batch_rows=ROWS, micro_batch_rows=8),
    )
    batch = synthetic_turn_batch(seed=3, rows=ROWS)
    batch["advantages"] = compute_advantages("grpo", {k: batch[k] for k in ROW_FIELDS})
    optimizer = make_optimizer(config.optimizer)
    params = jax.tree_util.tree_map(lambda x: jnp.asarray(x, param_dtype), lm.params)
    state = create_train_state(params, optimizer, jax.random.PRNGKey(0))
    step = jax.jit(make_train_step(model, config, optimizer))
    out = []
    for _ in range(steps):
        state, metrics = step(state, {k: jnp.asarray(v) for k, v in batch.items()})
        out.append(metric_means(jax.device_get(metrics)))
    return out, {str(x.dtype) for x in jax.tree_util.tree_leaves(state.params)}


@pytest.fixture(scope="module")
def tiny(tiny_qwen2_dir):
    return load_pretrained(tiny_qwen2_dir)


@pytest.fixture(scope="module")
def float32_steps(tiny):
    return _losses(tiny, "float32", "float32", steps=STEPS)[0]


@pytest.mark.parametrize("param_dtype", ["float32", "bfloat16"])
def test_bfloat16_train_step_on_a_fixed_batch_is_finite_and_lowers_the_loss(tiny, float32_steps, param_dtype):
    """Measured (bf16 compute; fp32 / bf16 parameters): loss 0.2495 -> 0.2186 in 6 steps as in fp32; first
    step's loss within 1e-6 and grad norm within 0.2 % of fp32; the 6 losses differ from fp32's by up to
    3e-5 / 1e-4 (bf16 rounding: an exact match would mean the step ran in fp32)."""
    steps, dtypes = _losses(tiny, "bfloat16", param_dtype, steps=STEPS)
    assert all(np.isfinite([s["loss"], s["grad_norm"]]).all() for s in steps)
    assert steps[-1]["loss"] < steps[0]["loss"] - 0.01
    assert dtypes == {param_dtype}  # the update keeps the parameters in their dtype
    # the first step sees the same batch and parameters: bf16 rounding only
    np.testing.assert_allclose(steps[0]["loss"], float32_steps[0]["loss"], atol=1e-3)
    np.testing.assert_allclose(steps[0]["grad_norm"], float32_steps[0]["grad_norm"], rtol=0.02)
    assert max(abs(s["loss"] - f["loss"]) for s, f in zip(steps, float32_steps, strict=True)) > 1e-6
