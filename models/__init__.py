"""Flax decoder for the Qwen2 and Llama families, weight I/O, tokenizer and a jitted KV-cache sampler."""

from models.config import ModelConfig, load_config
from models.pretrained import LanguageModel, load_pretrained

__all__ = ["LanguageModel", "ModelConfig", "load_config", "load_pretrained"]
