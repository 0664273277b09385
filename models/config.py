"""Decoder configuration, read from and written to a Hugging Face ``config.json``."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import jax.numpy as jnp

ARCHITECTURES = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2"}
MODEL_TYPES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """One decoder for the Llama and Qwen2 families; the differences are data (``attention_bias``,
    ``tie_word_embeddings``, ``rope_theta``)."""

    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float
    rms_norm_eps: float
    max_position_embeddings: int
    attention_bias: bool
    tie_word_embeddings: bool
    bos_token_id: int | None = None
    eos_token_id: int | tuple[int, ...] | None = None
    torch_dtype: str = "float32"
    param_dtype: str = "float32"
    dtype: str = "float32"
    remat: bool = False
    attention: str = "masked"  # models.attention.ATTENTION_KERNELS; a run setting, not saved with the weights

    def __post_init__(self) -> None:
        from models.attention import ATTENTION_KERNELS

        if self.attention not in ATTENTION_KERNELS:
            raise ValueError(f"attention={self.attention!r}: expected one of {list(ATTENTION_KERNELS)}")
        if self.model_type not in MODEL_TYPES:
            raise ValueError(f"model_type={self.model_type!r}: expected one of {sorted(MODEL_TYPES)}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads={self.num_heads} is not a multiple of num_kv_heads={self.num_kv_heads}")
        for name in ("param_dtype", "dtype"):
            if getattr(self, name) not in ("float32", "bfloat16", "float16"):
                raise ValueError(f"{name}={getattr(self, name)!r}: expected float32, bfloat16 or float16")

    @property
    def jnp_param_dtype(self) -> Any:
        return jnp.dtype(self.param_dtype)

    @property
    def jnp_dtype(self) -> Any:
        return jnp.dtype(self.dtype)

    def replace(self, **changes: Any) -> ModelConfig:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_hf_dict(cls, hf: dict[str, Any], source: str = "config.json") -> ModelConfig:
        architectures = hf.get("architectures") or [MODEL_TYPES.get(hf.get("model_type", ""), "")]
        arch = architectures[0]
        if arch not in ARCHITECTURES:
            raise ValueError(
                f"{source}: architecture {arch!r} (model_type {hf.get('model_type')!r}) is not supported;"
                f" expected one of {sorted(ARCHITECTURES)}"
            )
        model_type = ARCHITECTURES[arch]
        num_heads = hf["num_attention_heads"]
        eos = hf.get("eos_token_id")
        return cls(
            model_type=model_type,
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            intermediate_size=hf["intermediate_size"],
            num_layers=hf["num_hidden_layers"],
            num_heads=num_heads,
            num_kv_heads=hf.get("num_key_value_heads") or num_heads,
            head_dim=hf.get("head_dim") or hf["hidden_size"] // num_heads,
            rope_theta=float(_rope_theta(hf)),
            rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
            max_position_embeddings=hf.get("max_position_embeddings", 4096),
            attention_bias=bool(hf.get("attention_bias", model_type == "qwen2")),
            tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
            bos_token_id=hf.get("bos_token_id"),
            eos_token_id=tuple(eos) if isinstance(eos, list) else eos,
            torch_dtype=str(hf.get("torch_dtype") or hf.get("dtype") or "float32"),
        )

    def to_hf_dict(self) -> dict[str, Any]:
        eos = list(self.eos_token_id) if isinstance(self.eos_token_id, tuple) else self.eos_token_id
        out: dict[str, Any] = {
            "architectures": [MODEL_TYPES[self.model_type]],
            "model_type": self.model_type,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "rope_theta": self.rope_theta,
            "rms_norm_eps": self.rms_norm_eps,
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings,
            "hidden_act": "silu",
            "bos_token_id": self.bos_token_id,
            "eos_token_id": eos,
            "torch_dtype": self.torch_dtype,
            "use_cache": True,
        }
        if self.model_type == "llama":
            out["attention_bias"] = self.attention_bias
            out["mlp_bias"] = False
        return out


def tiny_llama(
    vocab_size: int,
    hidden_size: int,
    intermediate_size: int,
    num_heads: int,
    num_kv_heads: int,
    max_position_embeddings: int,
    bos_token_id: int | None = None,
    eos_token_id: int | None = None,
    num_layers: int = 2,
) -> ModelConfig:
    """A small tied Llama for tests, toy runs and the built policies (head_dim = hidden / heads): the
    shape is the only thing they vary, so it is written once."""
    return ModelConfig(
        model_type="llama",
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_layers=num_layers,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_dim=hidden_size // num_heads,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        max_position_embeddings=max_position_embeddings,
        attention_bias=False,
        tie_word_embeddings=True,
        bos_token_id=bos_token_id,
        eos_token_id=eos_token_id,
    )


def _qwen25(
    vocab_size: int, hidden_size: int, intermediate_size: int, heads: int, kv_heads: int, tied: bool
) -> ModelConfig:
    return ModelConfig(
        model_type="qwen2",
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_layers=28,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=128,
        rope_theta=1e6,
        rms_norm_eps=1e-6,
        max_position_embeddings=32768,
        attention_bias=True,
        tie_word_embeddings=tied,
    )


# The architectures of published checkpoints (their config.json), for memory plans and benchmarks that
# need no weights; token ids and dtypes are left at the defaults (set them with ``.replace``).
MODEL_PRESETS: dict[str, ModelConfig] = {
    "qwen2.5-1.5b": _qwen25(151936, 1536, 8960, heads=12, kv_heads=2, tied=True),
    "qwen2.5-7b": _qwen25(152064, 3584, 18944, heads=28, kv_heads=4, tied=False),
    "smollm2-135m": ModelConfig(
        model_type="llama",
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_layers=30,
        num_heads=9,
        num_kv_heads=3,
        head_dim=64,
        rope_theta=1e5,
        rms_norm_eps=1e-5,
        max_position_embeddings=8192,
        attention_bias=False,
        tie_word_embeddings=True,
    ),
}


def _rope_theta(hf: dict[str, Any]) -> float:
    if "rope_theta" in hf:
        return float(hf["rope_theta"])
    params = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
    if params.get("rope_type", "default") != "default":
        raise ValueError(f"config.json: rope scaling {params.get('rope_type')!r} is not supported")
    return float(params.get("rope_theta", 10000.0))


def load_config(model_dir: str | Path) -> ModelConfig:
    path = Path(model_dir) / "config.json"
    if not path.exists():
        raise ValueError(f"{path}: no config.json in the model directory")
    return ModelConfig.from_hf_dict(json.loads(path.read_text()), source=str(path))
