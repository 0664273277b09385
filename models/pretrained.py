"""``load_pretrained(path)``: a small user-facing handle on a model directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

from models.config import ModelConfig, load_config
from models.decoder import forward
from models.hf_io import hf_tensors_to_params, params_to_hf_tensors, read_hf_tensors, write_hf_tensors
from models.tokenizer import Tokenizer


class LanguageModel:
    """``lm.tokenizer``, ``lm.logits(ids)``, ``lm.generate(prompts, ...)``, ``lm.save(out_dir)``."""

    def __init__(self, config: ModelConfig, params: dict[str, Any], tokenizer: Tokenizer | None):
        self.config = config
        self.params = params
        self._tokenizer = tokenizer
        self._logits = jax.jit(lambda params, ids, mask: forward(config, params, ids, mask))

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            raise ValueError("this model directory has no tokenizer.json")
        return self._tokenizer

    def logits(self, ids: Any, attention_mask: Any = None) -> jax.Array:
        ids = jnp.asarray(ids, jnp.int32)
        if ids.ndim != 2:
            raise ValueError(f"ids has shape {ids.shape}: expected [batch, length]")
        mask = jnp.ones(ids.shape, bool) if attention_mask is None else jnp.asarray(attention_mask, bool)
        return self._logits(self.params, ids, mask)

    def generate(
        self,
        prompts: list[str],
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        seed: int = 0,
        chat: bool = True,
        top_p: float = 1.0,
        top_k: int = 0,
        stop: tuple[str, ...] = (),
    ) -> list[str]:
        from models.sampler import Sampler, SamplingParams

        tok = self.tokenizer
        if chat:
            texts = [
                str(tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True))
                for p in prompts
            ]
        else:
            texts = list(prompts)
        ids = [tok.encode(t, add_special_tokens=not chat) for t in texts]
        sampler = Sampler(self.config, tok)
        result = sampler.generate(
            self.params,
            ids,
            SamplingParams(
                max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, top_k=top_k, stop=tuple(stop)
            ),
            jax.random.PRNGKey(seed),
        )
        return result.texts

    def save(self, out_dir: str | Path, dtype: str | None = None, max_shard_bytes: int = 2 << 30) -> None:
        import json

        out_dir = Path(out_dir)
        write_hf_tensors(params_to_hf_tensors(self.params, self.config, dtype), out_dir, max_shard_bytes)
        (out_dir / "config.json").write_text(json.dumps(self.config.to_hf_dict(), indent=2) + "\n")
        if self._tokenizer is not None:
            self._tokenizer.save(out_dir)


def load_pretrained(path: str | Path, param_dtype: str = "float32", dtype: str = "float32") -> LanguageModel:
    """Loads a local HF directory (Llama or Qwen2: ``config.json``, ``model*.safetensors``, tokenizer files)."""
    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"{path}: not a model directory")
    config = load_config(path).replace(param_dtype=param_dtype, dtype=dtype)
    params = hf_tensors_to_params(read_hf_tensors(path, config), config)
    params = jax.tree_util.tree_map(jnp.asarray, params)
    tokenizer = Tokenizer.from_dir(path) if (path / "tokenizer.json").exists() else None
    return LanguageModel(config, params, tokenizer)


__all__ = ["LanguageModel", "load_pretrained"]
