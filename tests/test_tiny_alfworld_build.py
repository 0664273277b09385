"""The ``tiny-alfworld`` warm start's build (a few-step copy of its recipe on two real train games):
stopped by SIGTERM it keeps its last checkpoint and is not marked complete, and the next build continues
from there to the same weights, bit for bit, as a build never stopped."""

from __future__ import annotations

import json
import os
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
    env = os.environ | {"PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-c", BUILD, str(out), *sets], cwd=ROOT, stderr=subprocess.PIPE, text=True, env=env
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
