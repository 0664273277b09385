"""Import a llama.cpp GGUF file (Llama or Qwen2 architecture) into a Hugging Face model directory.

Quantized tensors (Q4_1, Q8_0, ...) are dequantized to float32 with the ``gguf`` package; llama.cpp's
q/k row permutation (applied to Llama-architecture files) is undone; the tokenizer is rebuilt from
the GGUF vocabulary, merges and pre-tokenizer name into a ``tokenizer.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers import Tokenizer as Backend

from models.config import ModelConfig
from models.gguf_metadata import read_gguf_metadata
from models.hf_io import expected_hf_shapes, write_hf_tensors
from models.tokenizer import Tokenizer

SUPPORTED_ARCHITECTURES = ("llama", "qwen2")
TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED = 3, 4

GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)
# llama.cpp's pre-tokenizers that split every digit, then apply the GPT-2 regex (llama-vocab.cpp)
DIGIT_THEN_GPT2 = ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva")

GGUF_TENSOR_NAMES = {
    "attn_norm": "input_layernorm.weight",
    "ffn_norm": "post_attention_layernorm.weight",
    "attn_q": "self_attn.q_proj.weight",
    "attn_k": "self_attn.k_proj.weight",
    "attn_v": "self_attn.v_proj.weight",
    "attn_output": "self_attn.o_proj.weight",
    "ffn_gate": "mlp.gate_proj.weight",
    "ffn_up": "mlp.up_proj.weight",
    "ffn_down": "mlp.down_proj.weight",
}


def hf_tensor_name(gguf_name: str) -> str | None:
    base, _, suffix = gguf_name.rpartition(".")
    if gguf_name == "token_embd.weight":
        return "model.embed_tokens.weight"
    if gguf_name == "output_norm.weight":
        return "model.norm.weight"
    if gguf_name == "output.weight":
        return "lm_head.weight"
    parts = base.split(".")
    if len(parts) == 3 and parts[0] == "blk" and parts[2] in GGUF_TENSOR_NAMES:
        hf = GGUF_TENSOR_NAMES[parts[2]]
        if suffix == "bias":
            hf = hf.replace(".weight", ".bias")
        return f"model.layers.{parts[1]}.{hf}"
    return None


def permute_qk(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """llama.cpp's ``permute`` (convert_hf_to_gguf.py): HF's rotary halves -> interleaved pairs."""
    rows = weight.shape[0]
    return weight.reshape(num_heads, 2, rows // num_heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def unpermute_qk(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """The inverse of :func:`permute_qk`: interleaved pairs in the GGUF -> HF's rotary halves."""
    rows = weight.shape[0]
    return weight.reshape(num_heads, rows // num_heads // 2, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def _f32(value: float) -> float:
    """The shortest decimal of a float32 metadata value (1e-05, not 9.999999747378752e-06)."""
    return float(str(np.float32(value)))


def config_from_gguf(meta: dict[str, Any], has_output: bool, path: Path) -> ModelConfig:
    arch = meta.get("general.architecture")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ValueError(
            f"{path}: GGUF architecture {arch!r} is not supported; expected one of {SUPPORTED_ARCHITECTURES}"
        )

    def key(name: str, default: Any = None) -> Any:
        value = meta.get(f"{arch}.{name}", default)
        if value is None:
            raise ValueError(f"{path}: metadata key {arch}.{name} is missing")
        return value

    hidden, heads = key("embedding_length"), key("attention.head_count")
    eos = meta.get("tokenizer.ggml.eos_token_id")
    return ModelConfig(
        model_type=arch,
        vocab_size=int(meta.get(f"{arch}.vocab_size") or meta["tokenizer.ggml.tokens"]),
        hidden_size=hidden,
        intermediate_size=key("feed_forward_length"),
        num_layers=key("block_count"),
        num_heads=heads,
        num_kv_heads=key("attention.head_count_kv", heads),
        head_dim=meta.get(f"{arch}.attention.key_length") or hidden // heads,
        rope_theta=_f32(key("rope.freq_base", 10000.0)),
        rms_norm_eps=_f32(key("attention.layer_norm_rms_epsilon")),
        max_position_embeddings=key("context_length", 4096),
        attention_bias=arch == "qwen2",
        tie_word_embeddings=not has_output,
        bos_token_id=meta.get("tokenizer.ggml.bos_token_id"),
        eos_token_id=eos,
        torch_dtype="float32",
    )


def tokenizer_from_gguf(meta: dict[str, Any], path: Path) -> Tokenizer:
    kind = meta.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise ValueError(f"{path}: tokenizer model {kind!r} is not supported (byte-level BPE 'gpt2' only)")
    tokens: list[str] = meta["tokenizer.ggml.tokens"]
    token_types: list[int] = meta.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    backend = Backend(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges, fuse_unk=False))
    pre = meta.get("tokenizer.ggml.pre", "default")
    if pre in DIGIT_THEN_GPT2:
        backend.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
        )
    elif pre in ("qwen2", "deepseek-r1-qwen"):
        backend.normalizer = normalizers.NFC()
        backend.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    elif pre in ("default", "gpt2", "gpt-2"):
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        raise ValueError(f"{path}: pre-tokenizer {pre!r} is not supported")
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    backend.add_special_tokens(
        [
            AddedToken(t, special=True, normalized=False)
            for t, k in zip(tokens, token_types, strict=True)
            if k == TOKEN_TYPE_CONTROL
        ]
    )
    backend.add_tokens(
        [
            AddedToken(t, special=False, normalized=False)
            for t, k in zip(tokens, token_types, strict=True)
            if k == TOKEN_TYPE_USER_DEFINED
        ]
    )

    def token(key: str) -> str | None:
        index = meta.get(f"tokenizer.ggml.{key}")
        return None if index is None else tokens[index]

    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": token("bos_token_id"),
        "eos_token": token("eos_token_id"),
        "unk_token": token("unknown_token_id"),
        "pad_token": token("padding_token_id"),
        "add_bos_token": bool(meta.get("tokenizer.ggml.add_bos_token", False)),
        "clean_up_tokenization_spaces": False,
        "model_max_length": int(meta.get(f"{meta['general.architecture']}.context_length", 4096)),
    }
    return Tokenizer(backend, config, meta.get("tokenizer.chat_template"))


def import_gguf(gguf_path: str | Path, out_dir: str | Path, max_shard_bytes: int = 2 << 30) -> Path:
    """Writes ``config.json``, ``generation_config.json``, ``model.safetensors`` (float32),
    ``tokenizer.json`` and ``tokenizer_config.json`` into ``out_dir``."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    if not gguf_path.exists():
        raise ValueError(f"{gguf_path}: no such GGUF file")
    meta = read_gguf_metadata(
        gguf_path,
        arrays=(
            "tokenizer.ggml.tokens",
            "tokenizer.ggml.merges",
            "tokenizer.ggml.token_type",
            "tokenizer.ggml.eos_token_id",
        ),
    )
    reader = GGUFReader(str(gguf_path))
    names = {t.name for t in reader.tensors}
    cfg = config_from_gguf(meta, has_output="output.weight" in names, path=gguf_path)
    expected = expected_hf_shapes(cfg)
    tensors: dict[str, np.ndarray] = {}
    for t in reader.tensors:
        hf_name = hf_tensor_name(t.name)
        if hf_name is None:
            if t.name == "rope_freqs.weight":
                raise ValueError(f"{gguf_path}: rope frequency scaling ({t.name}) is not supported")
            continue
        weight = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(
            tuple(reversed(t.shape.tolist()))
        )
        if hf_name not in expected or weight.shape != expected[hf_name]:
            raise ValueError(
                f"{gguf_path}: tensor {t.name!r} ({hf_name}) has shape {weight.shape}, expected {expected.get(hf_name)}"
            )
        if cfg.model_type == "llama" and hf_name.endswith("q_proj.weight"):
            weight = unpermute_qk(weight, cfg.num_heads)
        elif cfg.model_type == "llama" and hf_name.endswith("k_proj.weight"):
            weight = unpermute_qk(weight, cfg.num_kv_heads)
        tensors[hf_name] = weight
    missing = sorted(set(expected) - set(tensors))
    if missing:
        raise ValueError(f"{gguf_path}: tensor(s) missing for {missing[:3]}{'...' if len(missing) > 3 else ''}")
    out_dir.mkdir(parents=True, exist_ok=True)
    write_hf_tensors({k: tensors[k] for k in expected}, out_dir, max_shard_bytes)
    (out_dir / "config.json").write_text(json.dumps(cfg.to_hf_dict(), indent=2) + "\n")
    generation = {"bos_token_id": cfg.bos_token_id, "eos_token_id": cfg.eos_token_id}
    (out_dir / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    tokenizer_from_gguf(meta, gguf_path).save(out_dir)
    return out_dir
