"""The tokenizer: a ``tokenizers`` backend plus the model's ``tokenizer_config.json`` and chat template."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as Backend

from models.chat_template import render_chat

SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "unk_token", "pad_token")


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):  # {"content": "<|im_end|>", ...} in older configs
        return value.get("content")
    return value


class Tokenizer:
    """``encode(text) -> list[int]``, ``decode(ids)``, ``apply_chat_template(messages, ...)``."""

    def __init__(self, backend: Backend, config: dict[str, Any], chat_template: str | None = None):
        self.backend = backend
        self.config = config
        self.chat_template = chat_template or config.get("chat_template")
        self.special_tokens = {k: t for k in SPECIAL_TOKEN_KEYS if (t := _token_text(config.get(k))) is not None}

    @classmethod
    def from_dir(cls, model_dir: str | Path) -> Tokenizer:
        model_dir = Path(model_dir)
        path = model_dir / "tokenizer.json"
        if not path.exists():
            raise ValueError(f"{path}: no tokenizer.json in the model directory")
        config_path = model_dir / "tokenizer_config.json"
        config = json.loads(config_path.read_text()) if config_path.exists() else {}
        template_path = model_dir / "chat_template.jinja"
        template = template_path.read_text() if template_path.exists() else None
        return cls(Backend.from_file(str(path)), config, template)

    def save(self, out_dir: str | Path) -> None:
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        self.backend.save(str(out_dir / "tokenizer.json"))
        config = dict(self.config)
        if self.chat_template is not None:
            config["chat_template"] = self.chat_template
        (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self.backend.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token: str) -> int | None:
        return self.backend.token_to_id(token)

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    @property
    def eos_token_id(self) -> int | None:
        eos = self.special_tokens.get("eos_token")
        return None if eos is None else self.backend.token_to_id(eos)

    @property
    def pad_token_id(self) -> int:
        pad = self.special_tokens.get("pad_token")
        pad_id = None if pad is None else self.backend.token_to_id(pad)
        if pad_id is None:
            pad_id = self.eos_token_id
        return 0 if pad_id is None else pad_id

    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = False,
        tokenize: bool = False,
        **kwargs: Any,
    ) -> str | list[int]:
        if self.chat_template is None:
            raise ValueError("this tokenizer has no chat_template (tokenizer_config.json or chat_template.jinja)")
        text = render_chat(
            self.chat_template,
            messages,
            tools=tools,
            add_generation_prompt=add_generation_prompt,
            special_tokens=self.special_tokens,
            **kwargs,
        )
        return self.encode(text, add_special_tokens=False) if tokenize else text
