"""Weights in the Hugging Face layout: a directory with ``config.json`` and ``model.safetensors`` (or
shards plus ``model.safetensors.index.json``), converted to and from our scanned parameter tree.

HF stores ``nn.Linear`` weights as ``[out, in]``; our kernels are ``[in, out]`` and the layers are
stacked on a leading axis (the decoder scans over them). Transposes and stacking are exact, so a
load -> save round trip in the file's dtype is bit-exact.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

from models.config import ModelConfig

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"

# (our name inside params/layers, HF name inside model.layers.{i}, transpose)
LAYER_TENSORS = (
    (("input_norm", "scale"), "input_layernorm.weight", False),
    (("post_attn_norm", "scale"), "post_attention_layernorm.weight", False),
    (("attn", "q_kernel"), "self_attn.q_proj.weight", True),
    (("attn", "k_kernel"), "self_attn.k_proj.weight", True),
    (("attn", "v_kernel"), "self_attn.v_proj.weight", True),
    (("attn", "o_kernel"), "self_attn.o_proj.weight", True),
    (("mlp", "gate_kernel"), "mlp.gate_proj.weight", True),
    (("mlp", "up_kernel"), "mlp.up_proj.weight", True),
    (("mlp", "down_kernel"), "mlp.down_proj.weight", True),
)
BIAS_TENSORS = (
    (("attn", "q_bias"), "self_attn.q_proj.bias"),
    (("attn", "k_bias"), "self_attn.k_proj.bias"),
    (("attn", "v_bias"), "self_attn.v_proj.bias"),
)


def expected_hf_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    e, q, kv, m = cfg.hidden_size, cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim, cfg.intermediate_size
    per_layer = {
        "input_layernorm.weight": (e,),
        "post_attention_layernorm.weight": (e,),
        "self_attn.q_proj.weight": (q, e),
        "self_attn.k_proj.weight": (kv, e),
        "self_attn.v_proj.weight": (kv, e),
        "self_attn.o_proj.weight": (e, q),
        "mlp.gate_proj.weight": (m, e),
        "mlp.up_proj.weight": (m, e),
        "mlp.down_proj.weight": (e, m),
    }
    if cfg.attention_bias:
        per_layer |= {"self_attn.q_proj.bias": (q,), "self_attn.k_proj.bias": (kv,), "self_attn.v_proj.bias": (kv,)}
    shapes = {"model.embed_tokens.weight": (cfg.vocab_size, e), "model.norm.weight": (e,)}
    for i in range(cfg.num_layers):
        shapes |= {f"model.layers.{i}.{k}": v for k, v in per_layer.items()}
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (cfg.vocab_size, e)
    return shapes


def weight_files(model_dir: Path) -> dict[str, Path]:
    """Tensor name -> the safetensors file that holds it."""
    index = model_dir / INDEX_FILE
    if index.exists():
        weight_map = json.loads(index.read_text())["weight_map"]
        return {name: model_dir / file for name, file in weight_map.items()}
    single = model_dir / SINGLE_FILE
    if not single.exists():
        raise ValueError(f"{model_dir}: neither {SINGLE_FILE} nor {INDEX_FILE} found")
    with safe_open(str(single), framework="numpy") as f:
        return {name: single for name in f.keys()}


def read_hf_tensors(model_dir: str | Path, cfg: ModelConfig) -> dict[str, np.ndarray]:
    """Every tensor the config needs, checked by name and shape (errors name the file and tensor)."""
    model_dir = Path(model_dir)
    files = weight_files(model_dir)
    expected = expected_hf_shapes(cfg)
    out: dict[str, np.ndarray] = {}
    by_file: dict[Path, list[str]] = {}
    for name in expected:
        if name not in files:
            where = files[next(iter(files))] if files else model_dir
            raise ValueError(f"{where}: tensor {name!r} is missing (needed by {cfg.model_type} config)")
        by_file.setdefault(files[name], []).append(name)
    for path, names in by_file.items():
        if not path.exists():
            raise ValueError(f"{path}: listed in {INDEX_FILE} but not found")
        with safe_open(str(path), framework="numpy") as f:
            for name in names:
                tensor = f.get_tensor(name)
                if tuple(tensor.shape) != expected[name]:
                    raise ValueError(
                        f"{path}: tensor {name!r} has shape {tuple(tensor.shape)}, expected {expected[name]}"
                    )
                out[name] = tensor
    return out


def hf_tensors_to_params(tensors: dict[str, np.ndarray], cfg: ModelConfig) -> dict[str, Any]:
    dtype = np.dtype(cfg.param_dtype) if cfg.param_dtype != "bfloat16" else _bf16()

    def cast(x: np.ndarray) -> np.ndarray:
        return np.asarray(x).astype(dtype)

    def stacked(hf_name: str, transpose: bool) -> np.ndarray:
        layers = [tensors[f"model.layers.{i}.{hf_name}"] for i in range(cfg.num_layers)]
        return cast(np.stack([x.T if transpose else x for x in layers]))

    layers: dict[str, dict[str, np.ndarray]] = {}
    for (module, leaf), hf_name, transpose in LAYER_TENSORS:
        layers.setdefault(module, {})[leaf] = stacked(hf_name, transpose)
    if cfg.attention_bias:
        for (module, leaf), hf_name in BIAS_TENSORS:
            layers[module][leaf] = stacked(hf_name, False)
    params: dict[str, Any] = {
        "embedding": cast(tensors["model.embed_tokens.weight"]),
        "layers": layers,
        "final_norm": {"scale": cast(tensors["model.norm.weight"])},
    }
    if not cfg.tie_word_embeddings:
        params["lm_head"] = cast(tensors["lm_head.weight"].T)
    return {"params": params}


def params_to_hf_tensors(params: dict[str, Any], cfg: ModelConfig, dtype: str | None = None) -> dict[str, np.ndarray]:
    dtype_name = dtype or cfg.torch_dtype
    np_dtype = _bf16() if dtype_name == "bfloat16" else np.dtype(dtype_name)
    p = params["params"]

    def out(x: Any) -> np.ndarray:
        return np.ascontiguousarray(np.asarray(x).astype(np_dtype))

    tensors = {"model.embed_tokens.weight": out(p["embedding"]), "model.norm.weight": out(p["final_norm"]["scale"])}
    for i in range(cfg.num_layers):
        for (module, leaf), hf_name, transpose in LAYER_TENSORS:
            x = np.asarray(p["layers"][module][leaf][i])
            tensors[f"model.layers.{i}.{hf_name}"] = out(x.T if transpose else x)
        if cfg.attention_bias:
            for (module, leaf), hf_name in BIAS_TENSORS:
                tensors[f"model.layers.{i}.{hf_name}"] = out(p["layers"][module][leaf][i])
    if not cfg.tie_word_embeddings:
        tensors["lm_head.weight"] = out(np.asarray(p["lm_head"]).T)
    return tensors


def write_hf_tensors(tensors: dict[str, np.ndarray], out_dir: Path, max_shard_bytes: int = 2 << 30) -> None:
    """One ``model.safetensors``, or shards plus an index when the total exceeds ``max_shard_bytes``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    total = sum(t.nbytes for t in tensors.values())
    metadata = {"format": "pt"}
    if total <= max_shard_bytes:
        save_file(tensors, str(out_dir / SINGLE_FILE), metadata=metadata)
        return
    shards: list[dict[str, np.ndarray]] = [{}]
    size = 0
    for name, tensor in tensors.items():
        if shards[-1] and size + tensor.nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = tensor
        size += tensor.nbytes
    weight_map: dict[str, str] = {}
    for k, shard in enumerate(shards):
        file = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(out_dir / file), metadata=metadata)
        weight_map |= {name: file for name in shard}
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out_dir / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n")


def _bf16() -> Any:
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)
