"""The ``tiny-alfworld`` warm start's build (a few-step copy of its recipe on two real train games):
stopped by SIGTERM it keeps its last checkpoint and is not marked complete, and the next build continues
from there to the same weights, bit for bit, as a build never stopped."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from models import load_pretrained
from tests.child_env import child_env
from tests.test_sft import SETS

ROOT = Path(__file__).resolve().parents[1]
STEPS = 30
BUILD = """
import sys
from functools import partial
from pathlib import Path
from ggtrain.policies.tiny_alfworld import build
from models.zoo import build_once

print(build_once(Path(sys.argv[1]), partial(build, progress=False, sets=sys.argv[2:])))
"""


def _build(out: Path) -> subprocess.Popen:
    sets = [*SETS, f"SftConfig.steps={STEPS}", "SftConfig.walkthrough_games=2"]
    return subprocess.Popen(
        [sys.executable, "-c", BUILD, str(out), *sets], cwd=ROOT, stderr=subprocess.PIPE, text=True, env=child_env()
    )


def _a_checkpoint(folder: Path) -> bool:
    """A step's checkpoint is there (one is kept at a time, so which step is a matter of timing)."""
    return folder.is_dir() and any(p.name.isdigit() for p in folder.iterdir())


@pytest.mark.slow
def test_a_stopped_build_continues_to_the_same_weights(tmp_path):
    straight = _build(tmp_path / "straight")
    assert straight.wait(timeout=600) == 0, straight.stderr.read() if straight.stderr else ""
    out = tmp_path / "stopped"
    partial = out.with_name(f"{out.name}.partial-{socket.gethostname()}")
    stopped = _build(out)
    checkpoints = partial / "sft_run" / "checkpoints"
    deadline = time.monotonic() + 300
    while not _a_checkpoint(checkpoints) and stopped.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert stopped.poll() is None, "the build ended before it could be stopped"
    stopped.send_signal(signal.SIGTERM)
    _, stderr = stopped.communicate(timeout=120)
    assert stopped.returncode != 0 and "Interrupted: SIGTERM" in stderr
    assert not out.exists()  # not marked complete with a half-trained model
    assert (partial / "sft_run" / "checkpoints").is_dir()
    resumed = _build(out)
    _, stderr = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, stderr
    assert "ggtrain sft: resumed" in stderr
    jax.tree_util.tree_map(
        np.testing.assert_array_equal, load_pretrained(tmp_path / "straight").params, load_pretrained(out).params
    )
    logged = [json.loads(x)["step"] for x in (out / "sft_run" / "metrics.jsonl").read_text().splitlines()]
    assert logged == list(range(1, STEPS + 1))  # every step exactly once
    assert json.loads((out / "warm_start.json").read_text())["steps"] == STEPS
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stopped", "straight"]
    _ship_and_install(tmp_path / "straight", tmp_path / "shipping")


def _ship_and_install(built: Path, root: Path) -> None:
    """A build shipped, then installed by the alias in a fresh cache: the same weights, no steps taken."""
    from unittest import mock

    from ggtrain.policies import tiny_alfworld

    with mock.patch.object(tiny_alfworld, "SHIPPED", root / "shipped"):
        shipped = tiny_alfworld.ship(built)
        assert tiny_alfworld.check_checksums(shipped)
        installed = tiny_alfworld.tiny_alfworld_dir(root / "cache")
    assert "shipped" in (installed / ".complete").read_text()
    jax.tree_util.tree_map(
        np.testing.assert_array_equal, load_pretrained(built).params, load_pretrained(installed).params
    )


def test_the_repository_ships_a_build_of_the_current_recipe():
    """Changing the recipe (its gin file, the vocabulary, the demonstrations' code) without shipping a new
    build fails here: the alias would otherwise build for an hour on a user's first run."""
    from ggtrain.policies.tiny_alfworld import ARCHITECTURE, RECIPE_FILE, check_checksums, recipe_hash, shipped_dir

    shipped = shipped_dir()
    assert shipped.is_dir(), f"no shipped build for recipe {recipe_hash()}: build it and ship it (tiny_alfworld.ship)"
    assert "model.safetensors" in check_checksums(shipped)
    record = json.loads((shipped / "warm_start.json").read_text())
    assert (record["recipe"], record["recipe_hash"], record["architecture"]) == (
        RECIPE_FILE.name,
        recipe_hash(),
        ARCHITECTURE,
    )
    assert record["steps"] == record["config"]["sft"]["steps"]  # a finished build, not a stopped one


def test_the_alias_installs_the_shipped_build_without_building(tmp_path):
    from ggtrain.policies.tiny_alfworld import shipped_dir, tiny_alfworld_dir

    out = tiny_alfworld_dir(tmp_path)
    shipped = shipped_dir()
    for name in ("model.safetensors", "config.json", "tokenizer.json", "warm_start.json"):
        assert (out / name).read_bytes() == (shipped / name).read_bytes()
    assert "shipped" in (out / ".complete").read_text()
    assert not (out / "sft_run").exists()  # copied, not trained
    assert load_pretrained(out).config.hidden_size == json.loads((shipped / "config.json").read_text())["hidden_size"]


def test_a_changed_shipped_file_is_refused_by_name(tmp_path):
    import shutil

    from ggtrain.policies.tiny_alfworld import install_shipped, shipped_dir

    copy = tmp_path / "shipped"
    shutil.copytree(shipped_dir(), copy)
    weights = bytearray((copy / "model.safetensors").read_bytes())
    weights[-1] ^= 1
    (copy / "model.safetensors").write_bytes(bytes(weights))
    (tmp_path / "out").mkdir()
    with pytest.raises(ValueError, match=r"model\.safetensors"):
        install_shipped(tmp_path / "out", copy)
    assert not any((tmp_path / "out").iterdir())  # nothing copied before the check


def test_ship_refuses_a_build_of_another_recipe(tmp_path, monkeypatch):
    from ggtrain.policies import tiny_alfworld

    monkeypatch.setattr(tiny_alfworld, "SHIPPED", tmp_path / "shipped")
    built = tmp_path / "built"
    built.mkdir()
    (built / ".complete").write_text("tiny-alfworld 000000000000\n")
    with pytest.raises(ValueError, match="not a finished build of the current recipe"):
        tiny_alfworld.ship(built)
    assert not (tmp_path / "shipped").exists()


def test_the_recipe_hash_follows_its_settings_not_its_comments(tmp_path, monkeypatch):
    """A comment's edit keeps the shipped build (no hour's rebuild for a better explanation); any changed
    setting, even one outside the comments' lines, gives a new hash."""
    from ggtrain.policies import tiny_alfworld

    recipe = tmp_path / "tiny_alfworld_sft.gin"
    text = tiny_alfworld.RECIPE_FILE.read_text()
    monkeypatch.setattr(tiny_alfworld, "RECIPE_FILE", recipe)
    recipe.write_text(text)
    current = tiny_alfworld.recipe_hash()
    recipe.write_text("# a new first line\n" + text.replace("\n\n", "\n\n  # indented, between settings\n\n", 1))
    assert tiny_alfworld.recipe_hash() == current
    recipe.write_text(text.replace("SftConfig.steps = ", "SftConfig.steps = 1"))
    assert tiny_alfworld.recipe_hash() != current
    recipe.write_text(text + "SftConfig.eval_games = 8\n")
    assert tiny_alfworld.recipe_hash() != current


@pytest.mark.parametrize("module", ["prompts", "state_tracker"])
def test_an_edited_prompt_builder_or_state_line_gets_a_new_recipe_hash(tmp_path, monkeypatch, module):
    """They render every demonstration and their templates are vocabulary words: an edit would otherwise
    reuse weights trained on other prompts."""
    import importlib

    from ggtrain.policies import tiny_alfworld

    source = importlib.import_module(f"env_bridge.{module}")
    current = tiny_alfworld.recipe_hash()
    copy = tmp_path / f"{module}.py"
    copy.write_text(Path(source.__file__).read_text())
    monkeypatch.setattr(source, "__file__", str(copy))
    assert tiny_alfworld.recipe_hash() == current  # the same content, the same hash
    copy.write_text(copy.read_text() + "\n# one more line\n")
    assert tiny_alfworld.recipe_hash() != current
