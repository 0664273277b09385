"""``models.zoo.build_once``: several processes building the same cached folder at once (the hosts of a
multi-host run on a cold cache, or two commands on one machine) end with one complete copy and no
leftovers, and a build that failed part way leaves its folder for the next build to continue from."""

from __future__ import annotations

import errno
import subprocess
import sys
from pathlib import Path

import pytest

from models.zoo import build_once

ROOT = Path(__file__).resolve().parents[1]
BUILDER = """
import fcntl, socket, sys, time
from pathlib import Path
from models.zoo import build_once

out, name, host, builds = Path(sys.argv[1]), sys.argv[2], sys.argv[3], Path(sys.argv[4])
socket.gethostname = lambda: host  # the host this process plays
flock = fcntl.flock

def announced_flock(fd, operation):  # marks that this process got past the check for a finished copy
    (builds.parent / f"{name}.locking").touch()
    return flock(fd, operation)

fcntl.flock = announced_flock

def build(tmp):
    with builds.open("a") as f:
        f.write(name + "\\n")
    deadline = time.monotonic() + 30
    while len(list(builds.parent.glob("*.locking"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # the other process, at its lock, blocks on it (same host) or builds (another host)
    (tmp / "weights.txt").write_text(name)
    return "built by " + name

print(build_once(out, build))
"""


def _race(tmp_path: Path, hosts: tuple[str, str]) -> tuple[list[str], list[str]]:
    """(each process's stderr, the names of those that ran ``build``)."""
    out, scratch = tmp_path / "model", tmp_path.parent / f"{tmp_path.name}-scratch"
    scratch.mkdir()
    builds = scratch / "builds.txt"
    children = [
        subprocess.Popen(
            [sys.executable, "-c", BUILDER, str(out), name, host, str(builds)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, host in zip(("a", "b"), hosts, strict=True)
    ]
    errors = []
    for child in children:
        stdout, stderr = child.communicate(timeout=60)
        assert child.returncode == 0 and stdout.strip() == str(out), stderr
        errors.append(stderr)
    winner = (out / "weights.txt").read_text()
    assert (out / ".complete").read_text() == f"built by {winner}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no partial folder, no lock file left
    return errors, builds.read_text().split()


def test_racing_hosts_leave_one_complete_copy(tmp_path):
    _, built = _race(tmp_path, ("host0", "host1"))
    assert sorted(built) == ["a", "b"]  # each host built its own copy; one rename won


def test_processes_on_one_host_build_once_and_the_others_wait(tmp_path):
    errors, built = _race(tmp_path, ("host0", "host0"))
    assert len(built) == 1
    assert sum("waiting for another process on this host" in e for e in errors) == 1


def test_a_failed_build_leaves_its_folder_for_the_next_build(tmp_path):
    out = tmp_path / "model"

    def failing(tmp: Path) -> str:
        (tmp / "first_half.txt").write_text("done")
        raise RuntimeError("killed half way")

    with pytest.raises(RuntimeError, match="half way"):
        build_once(out, failing)
    assert not out.exists()

    def continuing(tmp: Path) -> str:
        assert (tmp / "first_half.txt").read_text() == "done"  # the first attempt's work is there
        (tmp / "second_half.txt").write_text("done")
        return "continued"

    assert build_once(out, continuing) == out
    assert sorted(p.name for p in out.iterdir()) == [".complete", "first_half.txt", "second_half.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    assert build_once(out, failing) == out  # complete: never built again


def test_a_copy_another_host_finished_first_is_discarded_on_the_next_call(tmp_path, monkeypatch):
    out = tmp_path / "model"
    monkeypatch.setattr("socket.gethostname", lambda: "host1")

    def failing(tmp: Path) -> str:
        raise RuntimeError("host1's build failed")

    with pytest.raises(RuntimeError):
        build_once(out, failing)
    out.mkdir()  # host0 finished meanwhile
    (out / ".complete").write_text("host0\n")
    assert build_once(out, failing) == out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_without_flock_each_process_builds_its_own_copy_from_scratch(tmp_path, monkeypatch, capsys):
    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr("fcntl.flock", no_locks)
    out = tmp_path / "model"
    assert build_once(out, lambda tmp: (tmp / "weights.txt").write_text("w") and "built") == out
    assert (out / ".complete").read_text() == "built\n"
    assert "building without a lock" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
