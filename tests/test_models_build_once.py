"""``models.zoo.build_once``: several processes building the same cached folder at once (the hosts of a
multi-host run on a cold cache) end with one complete copy and no leftovers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILDER = """
import sys, time
from pathlib import Path
from models.zoo import build_once

def build(tmp):
    (tmp / "weights.txt").write_text(sys.argv[2])
    time.sleep(1.0)  # both processes are inside build at once
    return "built by " + sys.argv[2]

print(build_once(Path(sys.argv[1]), build))
"""


def test_racing_processes_leave_one_complete_copy(tmp_path):
    out = tmp_path / "model"
    children = [
        subprocess.Popen([sys.executable, "-c", BUILDER, str(out), name], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        for name in ("a", "b")
    ]
    for child in children:
        stdout, _ = child.communicate(timeout=60)
        assert child.returncode == 0 and stdout.strip() == str(out)
    winner = (out / "weights.txt").read_text()
    assert (out / ".complete").read_text() == f"built by {winner}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # the loser's folder is gone
