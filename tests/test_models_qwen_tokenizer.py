"""The Qwen2.5 tokenizer built from the real Qwen tokenizer files and the Qwen2.5 chat template."""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")

MESSAGES = [
    {"role": "system", "content": "You are an ALFWorld agent."},
    {"role": "user", "content": "Go to the fridge."},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "step", "arguments": {"action": "go to fridge 1"}}}],
    },
    {"role": "tool", "content": "You arrive at fridge 1."},
    {"role": "assistant", "content": "<action>open fridge 1</action>"},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "step",
            "description": "Take an action.",
            "parameters": {"type": "object", "properties": {"action": {"type": "string"}}, "required": ["action"]},
        },
    }
]


@pytest.fixture(scope="module")
def hf_qwen(qwen_tokenizer, tmp_path_factory):
    out = tmp_path_factory.mktemp("qwen_tok")
    qwen_tokenizer.save(out)
    return transformers.AutoTokenizer.from_pretrained(out)


def test_known_ids(qwen_tokenizer):
    assert qwen_tokenizer.encode("<|im_start|>user\nHello, world!") == [151644, 872, 198, 9707, 11, 1879, 0]


def test_qwen3_only_tokens_are_dropped(qwen_tokenizer):
    assert qwen_tokenizer.vocab_size == 151665
    assert len(qwen_tokenizer.encode("<think>")) > 1
    assert qwen_tokenizer.token_to_id("<|im_end|>") == 151645 == qwen_tokenizer.eos_token_id


@pytest.mark.parametrize("upto", [1, 2, 4, 5])
def test_chat_template_equals_transformers(qwen_tokenizer, hf_qwen, upto):
    messages = MESSAGES[:upto]
    for tools in (None, TOOLS):
        for gen in (False, True):
            ours = qwen_tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=gen)
            ref = hf_qwen.apply_chat_template(messages, tools=tools, add_generation_prompt=gen, tokenize=False)
            assert ours == ref


def test_default_system_line(qwen_tokenizer):
    text = qwen_tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.")
    assert text.endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize(
    "text", ["héllo wörld", "你好，世界", "emoji 🧊🍎 and ZWJ 👩‍🍳", "tabs\tand\nnewlines  ", "Ω≈ç√∫"]
)
def test_unicode_round_trip_and_transformers_ids(qwen_tokenizer, hf_qwen, text):
    ids = qwen_tokenizer.encode(text)
    assert qwen_tokenizer.decode(ids) == text
    assert ids == hf_qwen.encode(text)
