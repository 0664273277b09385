"""The Qwen2.5 tokenizer built from the real Qwen tokenizer files and the Qwen2.5 chat template."""

from __future__ import annotations

import itertools

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


# ---- independent truth: the upstream tokenizer files read directly, and well-known ids written out ----

UPSTREAM_SPECIALS = {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645}
# ids of the Qwen2/2.5 byte-level BPE (shared by Qwen3), as published; "Ġ" is a leading space, "Ċ" "\n"
WELL_KNOWN_IDS = {"!": 0, ",": 11, "Ċ": 198, "user": 872, "Ġworld": 1879, "Hello": 9707, "Ġreinforcement": 71278}


@pytest.fixture(scope="module")
def upstream_json():
    import json

    from models.artifacts import fetch

    return json.loads((fetch("qwen-tokenizer-files") / "tokenizer.json").read_text(encoding="utf-8"))


def test_special_tokens_have_the_upstream_ids(qwen_tokenizer, upstream_json):
    added = {t["content"]: t["id"] for t in upstream_json["added_tokens"]}
    for text, token_id in UPSTREAM_SPECIALS.items():
        assert added[text] == token_id  # the file itself says so
        assert qwen_tokenizer.token_to_id(text) == token_id
        assert qwen_tokenizer.encode(text, add_special_tokens=False) == [token_id]
        assert qwen_tokenizer.decode([token_id], skip_special_tokens=False) == text
    assert qwen_tokenizer.pad_token_id == 151643 and qwen_tokenizer.eos_token_id == 151645
    # the byte-level vocabulary ends right before the first special token
    assert len(upstream_json["model"]["vocab"]) == 151643


def test_well_known_ids_are_in_the_upstream_vocab_and_ours(qwen_tokenizer, upstream_json):
    vocab = upstream_json["model"]["vocab"]
    for token, token_id in WELL_KNOWN_IDS.items():
        assert vocab[token] == token_id, token
        assert qwen_tokenizer.token_to_id(token) == token_id, token
    assert qwen_tokenizer.encode("Hello, world!") == [9707, 11, 1879, 0]
    assert qwen_tokenizer.decode([9707, 11, 1879, 0]) == "Hello, world!"


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table (byte-level BPE)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def _bpe(piece: str, ranks: dict[tuple[str, str], int]) -> list[str]:
    """Plain byte-level BPE of one pre-token: merge the lowest-ranked adjacent pair until none applies."""
    table = _bytes_to_unicode()
    word = [table[b] for b in piece.encode("utf-8")]
    while len(word) > 1:
        pairs = [(ranks.get((a, b), 1 << 30), i) for i, (a, b) in enumerate(itertools.pairwise(word))]
        best, _ = min(pairs)
        if best == 1 << 30:
            break
        first, second = next((word[i], word[i + 1]) for r, i in pairs if r == best)
        merged, i = [], 0
        while i < len(word):
            if i + 1 < len(word) and (word[i], word[i + 1]) == (first, second):
                merged.append(first + second)
                i += 2
            else:
                merged.append(word[i])
                i += 1
        word = merged
    return word


@pytest.mark.parametrize(
    "pieces",
    [
        ["Hello"],
        [" reinforcement"],
        ["Tokenization"],
        [" ALFWorld"],
        [" countertop", " microwave", " refrigerator"],
        ["héllo", " wörld"],
        ["put", " the", " apple", " in", " fridge", " ", "1"],
    ],
)
def test_encodings_match_bpe_from_the_upstream_merges(qwen_tokenizer, upstream_json, pieces):
    """Pre-tokens split by hand (each a run the Qwen regex keeps whole), merged with the file's merge list."""
    model = upstream_json["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    ranks = {pair: i for i, pair in enumerate(merges)}
    expected = [model["vocab"][tok] for piece in pieces for tok in _bpe(piece, ranks)]
    assert qwen_tokenizer.encode("".join(pieces)) == expected
