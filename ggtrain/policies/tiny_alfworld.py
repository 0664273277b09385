"""``tiny-alfworld``: a word-level Llama small enough to play real ALFWorld games on two CPU cores, warm-
started by ``ggtrain sft`` on train-game walkthroughs (``configs/tiny_alfworld_sft.gin``), so RL starts
from a policy that writes the reference ``<think>…</think><action>…</action>`` answer (the thought is its
next subgoal, ``take apple``) and completes some tasks, far from all (the recipe's measured starting
success is in ``experiments/results/tiny_alfworld_recipe/``).

The vocabulary is every word the shipped games can show (``env_bridge.vocabulary``), lower-cased, each
punctuation character alone, the chat roles and the four tags; anything else is the unknown token. The
cache folder's name carries a hash of the recipe (architecture, SFT config file, vocabulary, the
demonstrations' code, the prompt builder, the tracked-state line, the tokenizer and chat template), so a
changed recipe never reuses stale weights. ``warm_start.json`` beside the weights records the recipe and
the measured starting success.

The repository ships the build of the current recipe (``shipped/tiny-alfworld-<hash>/``, made by
:func:`ship` from a build here), so the alias costs a checked copy instead of the build; the test suite
fails when the recipe changes without a new one shipped. ``tiny-alfworld-build`` always builds it here.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

import jax
from tokenizers import AddedToken, Regex, normalizers, pre_tokenizers
from tokenizers import Tokenizer as Backend
from tokenizers import models as tokenizer_models

from env_bridge.games import SPLITS, discover_games
from env_bridge.vocabulary import alfworld_words
from ggtrain.config import CONFIG_DIR, TrainConfig, holds_resolved_config, resolve_config
from ggtrain.interrupted import Interrupted
from ggtrain.policies.registry import register_model
from models.artifacts import cache_dir
from models.config import ModelConfig, tiny_llama
from models.decoder import init_params
from models.pretrained import LanguageModel
from models.tokenizer import Tokenizer
from models.zoo import WORD_LEVEL_CHAT_TEMPLATE, WORD_LEVEL_SPECIALS, build_once

ALIAS = "tiny-alfworld"
BUILD_ALIAS = "tiny-alfworld-build"
# the builds the repository ships, one folder per recipe hash: a fresh clone starts in seconds, and
# every machine starts RL from the same weights (a build's last bits depend on the machine's core count)
SHIPPED = Path(__file__).parent / "shipped"
RECIPE_FILE = CONFIG_DIR / "tiny_alfworld_sft.gin"
TAGS = ("<think>", "</think>", "<action>", "</action>")
ROLES = ("system", "user", "assistant")
ARCHITECTURE = {"hidden_size": 128, "intermediate_size": 384, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2}


def alfworld_tokenizer(data_dir: str | None = None) -> Tokenizer:
    """Word level over every game file of every split (sorted, so the ids are deterministic)."""
    files = [g.path for split in SPLITS for g in discover_games(split, data_dir, include_unsolvable=True)]
    words = [w for w in alfworld_words(files) if w not in ROLES]
    vocab = {t: i for i, t in enumerate([*WORD_LEVEL_SPECIALS, *TAGS, *ROLES, *words])}
    backend = Backend(tokenizer_models.WordLevel(vocab, unk_token="[UNK]"))
    backend.normalizer = normalizers.Lowercase()
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Split(Regex(r"\w+|[^\w\s]"), behavior="isolated")]
    )
    backend.add_special_tokens(list(WORD_LEVEL_SPECIALS))
    backend.add_tokens([AddedToken(t, normalized=False) for t in TAGS])
    config = {"eos_token": "<|im_end|>", "pad_token": "<pad>", "unk_token": "[UNK]", "bos_token": None}
    return Tokenizer(backend, config, WORD_LEVEL_CHAT_TEMPLATE)


def model_config(tokenizer: Tokenizer) -> ModelConfig:
    a, eos = ARCHITECTURE, tokenizer.eos_token_id or 0
    return tiny_llama(
        tokenizer.vocab_size,
        a["hidden_size"],
        a["intermediate_size"],
        a["num_heads"],
        a["num_kv_heads"],
        4096,
        eos,
        eos,
        num_layers=a["num_layers"],
    )


def recipe_settings(text: str) -> str:
    """A gin file's settings: its lines without whole-line comments and blank lines, so that an edit of
    the recipe's comments (its explanation) leaves the hash, and the shipped build, as they are."""
    return "\n".join(line.rstrip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#"))


def recipe_hash() -> str:
    from env_bridge import demonstrations, vocabulary
    from ggtrain import sft_data

    parts = [
        json.dumps(ARCHITECTURE, sort_keys=True),
        recipe_settings(RECIPE_FILE.read_text()),
        Path(vocabulary.__file__).read_text(),
        Path(demonstrations.__file__).read_text(),
        Path(sft_data.__file__).read_text(),  # how the demonstrations are mixed, repeated and renamed
    ]
    changed = [text for name, text in later_inputs().items() if _sha256(text) != LATER_INPUTS_AT_SHIPPED_BUILD[name]]
    return hashlib.sha256("\n".join(parts + changed).encode()).hexdigest()[:12]


# Inputs of the weights that joined the hash after the shipped build was made, with the sha256 of the
# content that build was made with (every one last changed before the build began, 2026-12-04; the
# fresh tokenizer equals the shipped one, tests/test_alfworld_vocabulary.py). Each one's text enters
# the hash once it differs from that content: a changed prompt, state line, tokenizer or chat template
# gets a new hash, and the shipped build keeps its name until one does.
LATER_INPUTS_AT_SHIPPED_BUILD = {
    "env_bridge/prompts.py": "7cf34a2d75b6184f",
    "env_bridge/state_tracker.py": "e46b03af06759c20",
    "alfworld_tokenizer": "18208e75a1530b95",
    "word-level chat template and specials": "607e5bf0cd241436",
}


def later_inputs() -> dict[str, str]:
    """The prompt builder and tracked-state line the demonstrations are rendered with (and whose
    templates are vocabulary words), the tokenizer's construction, and the chat template."""
    from env_bridge import prompts, state_tracker

    return {
        "env_bridge/prompts.py": Path(prompts.__file__).read_text(),
        "env_bridge/state_tracker.py": Path(state_tracker.__file__).read_text(),
        "alfworld_tokenizer": inspect.getsource(alfworld_tokenizer),
        "word-level chat template and specials": json.dumps([WORD_LEVEL_CHAT_TEMPLATE, list(WORD_LEVEL_SPECIALS)]),
    }


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def build(tmp: Path, progress: bool = True, sets: Sequence[str] = ()) -> str:
    """The warm start written into ``tmp``; an earlier build interrupted there continues from its last
    checkpoint (bit for bit), and a stop signal raises :class:`Interrupted` with that checkpoint kept.
    ``sets``: gin bindings over the recipe (tests build a few-step copy)."""
    from ggtrain.sft import RUN, sft
    from ggtrain.sft_data import demonstration_mix, walkthrough_records

    config = resolve_config([RECIPE_FILE], list(sets))
    tokenizer = alfworld_tokenizer(config.data_dir or None)
    init = tmp / "init"
    cfg = model_config(tokenizer)
    LanguageModel(cfg, init_params(cfg, jax.random.PRNGKey(config.seed)), tokenizer).save(init)
    s = config.sft
    records = walkthrough_records(
        "train", config.rollout, config.data_dir, s.walkthrough_games, config.seed, None, s.detour_fraction
    )
    records = demonstration_mix(records, config)
    earlier = earlier_build(tmp, config)
    if earlier == "finished":  # stopped after its checkpoints were removed, before it was marked complete
        record = json.loads((tmp / "sft.json").read_text())
    else:
        record = sft(config, init, records, tmp, resume=earlier == "resume", progress=progress)
    if record.get("interrupted"):
        raise Interrupted(record["interrupted"])
    shutil.rmtree(init)
    shutil.rmtree(tmp / RUN / "checkpoints", ignore_errors=True)
    warm = {"alias": ALIAS, "recipe": RECIPE_FILE.name, "recipe_hash": recipe_hash(), "architecture": ARCHITECTURE}
    warm |= record
    (tmp / "warm_start.json").write_text(json.dumps(warm, indent=2) + "\n")
    return f"{ALIAS} {recipe_hash()}"


def earlier_build(tmp: Path, config: TrainConfig) -> str:
    """What an earlier, stopped build left in ``tmp``: ``finished`` (the model written, its checkpoints
    removed), ``resume`` (a run of the same resolved config: from its last checkpoint, or from step 0 with
    its logged steps dropped) or ``fresh`` (nothing; a run of another config, e.g. after a code change,
    is removed)."""
    from ggtrain.sft import RUN

    run = tmp / RUN
    if not run.exists():
        return "fresh"
    if not holds_resolved_config(run, config):
        print(f"{tmp}: an earlier build of another configuration is discarded", file=sys.stderr, flush=True)
        shutil.rmtree(run)
        (tmp / "sft.json").unlink(missing_ok=True)
        return "fresh"
    finished = (tmp / "sft.json").exists() and not (run / "checkpoints").exists()
    return "finished" if finished else "resume"


def shipped_dir(recipe: str | None = None) -> Path:
    """Where the repository ships the build of the recipe with hash ``recipe`` (default: the current one)."""
    return SHIPPED / f"{ALIAS}-{recipe or recipe_hash()}"


def check_checksums(folder: Path) -> list[str]:
    """The files ``folder/SHA256SUMS`` lists, each checked; a missing or changed one is refused by name."""
    listed = [line.split(maxsplit=1)[::-1] for line in (folder / "SHA256SUMS").read_text().splitlines() if line]
    for name, digest in listed:
        path = folder / name
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            raise ValueError(f"{path}: missing, or its sha256 differs from {folder / 'SHA256SUMS'}")
    return [name for name, _ in listed]


def install_shipped(tmp: Path, shipped: Path) -> str:
    """The shipped build copied into ``tmp``, every file checked against its ``SHA256SUMS`` first."""
    names = check_checksums(shipped)
    for name in [*names, "SHA256SUMS"]:
        shutil.copyfile(shipped / name, tmp / name)
    return f"{ALIAS} {recipe_hash()} shipped {shipped.name}"


def ship(built: Path) -> Path:
    """Copies a finished build of the current recipe (a cache folder) to :func:`shipped_dir` with its
    ``SHA256SUMS``; a build of another recipe, or an unfinished one, is refused."""
    marker = built / ".complete"
    fields = marker.read_text().split() if marker.exists() else []
    if fields[:2] != [ALIAS, recipe_hash()] or "shipped" in fields:
        raise ValueError(f"{built}: not a finished build of the current recipe ({ALIAS} {recipe_hash()}): {fields}")
    out = shipped_dir()
    out.mkdir(parents=True, exist_ok=True)
    names = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "warm_start.json"]
    for name in names[:-1]:
        shutil.copyfile(built / name, out / name)
    # builds before the record named its hash say it in their marker only
    record = json.loads((built / "warm_start.json").read_text()) | {"recipe_hash": fields[1]}
    (out / "warm_start.json").write_text(json.dumps(record, indent=2) + "\n")
    sums = [f"{hashlib.sha256((out / n).read_bytes()).hexdigest()}  {n}" for n in names]
    (out / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    return out


def tiny_alfworld_dir(root: Path | None = None) -> Path:
    """The warm start of the current recipe: the repository's shipped build when it has one for this
    recipe (copied into the cache, checksums checked), else built here on first use."""
    shipped = shipped_dir()
    make = functools.partial(install_shipped, shipped=shipped) if shipped.is_dir() else build
    return build_once((root or cache_dir()) / "models" / f"{ALIAS}-{recipe_hash()}", make)


def tiny_alfworld_build_dir(root: Path | None = None) -> Path:
    """The warm start built here from the recipe, whatever the repository ships (its own cache folder)."""
    return build_once((root or cache_dir()) / "models" / f"{BUILD_ALIAS}-{recipe_hash()}", build)


register_model(ALIAS, tiny_alfworld_dir)
register_model(BUILD_ALIAS, tiny_alfworld_build_dir)
