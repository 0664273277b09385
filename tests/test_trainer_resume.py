"""Resume equality: 4 steps straight == 2 steps, a new process, 2 more steps (bitwise on CPU)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.child_env import child_env

ROOT = Path(__file__).resolve().parents[1]


def _run(tiny_qwen2_dir, run_dir, steps, out):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.resume_worker",
            "--model",
            str(tiny_qwen2_dir),
            "--run-dir",
            str(run_dir),
            "--steps",
            str(steps),
            "--out",
            str(out),
        ],
        cwd=ROOT,
        env=child_env(),
        check=True,
    )
    return dict(np.load(out))


@pytest.mark.slow
def test_resume_in_a_new_process_is_bitwise_identical(tiny_qwen2_dir, tmp_path):
    straight = _run(tiny_qwen2_dir, tmp_path / "a", 4, tmp_path / "a.npz")
    _run(tiny_qwen2_dir, tmp_path / "b", 2, tmp_path / "b2.npz")
    resumed = _run(tiny_qwen2_dir, tmp_path / "b", 4, tmp_path / "b4.npz")
    assert int(straight["step"]) == int(resumed["step"]) == 4
    assert set(straight) == set(resumed)
    for name in straight:
        np.testing.assert_array_equal(resumed[name], straight[name], err_msg=name)
    # keep-last-2: only steps 3 and 4 remain
    assert sorted(int(p.name) for p in (tmp_path / "b" / "checkpoints").iterdir() if p.name.isdigit()) == [3, 4]
    assert (tmp_path / "b" / "config.json").exists()
    # the second process continued at step 3 (a restart from scratch would log steps 1 and 2 again)
    logged = [json.loads(line)["step"] for line in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert logged == [1, 2, 3, 4]
