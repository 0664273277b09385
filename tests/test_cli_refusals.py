"""Refusals before anything is written, and honest endings: one line and exit 2 for the user's input
(a bad value, an unwritable run directory, no readable checkpoint, a checkpoint of another model), exit
1 with the traceback and a manifest event for an internal failure, 128 + signal for a stopped run."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import pytest

from ggtrain.cli import main
from tests.child_env import child_env

ROOT = Path(__file__).resolve().parents[1]
RING = ["--config", "graphgpo", "--config", "builtin_ring"]
TINY = [
    "RolloutConfig.groups_per_iteration=2",
    "RolloutConfig.group_size=2",
    "RolloutConfig.max_turns=3",
    "BatchConfig.mini_batch_rows=8",
    "BatchConfig.micro_batch_rows=8",
    "EvalConfig.games=2",
    "EvalConfig.max_turns=2",
    "EvalConfig.every=0",
    "CheckpointConfig.async_save=False",
]


def _sets(*bindings: str) -> list[str]:
    return [x for b in bindings for x in ("--set", b)]


def _error_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


@pytest.mark.parametrize(
    "binding, expected",
    [
        ("TrainConfig.estimator='graphpgo'", "TrainConfig.estimator = 'graphpgo': expected one of"),
        ("LossConfig.name='ppo'", "LossConfig.name = 'ppo': expected one of"),
        ("MeshConfig.data=64", "MeshConfig data = 64, fsdp = 1, tensor = 1 does not fit the {devices} device(s)"),
        ("BatchConfig.micro_batch_rows=48", "BatchConfig.mini_batch_rows = 128 is not a multiple of"),
        ("RolloutConfig.group_size=0", "RolloutConfig.group_size = 0: expected at least 1"),
        ("RolloutConfig.max_turns=0", "RolloutConfig.max_turns = 0: expected at least 1"),
        ("TrainConfig.iterations=-1", "TrainConfig.iterations = -1: expected at least 0"),
        ("RolloutConfig.prefill_chunk=384", "RolloutConfig.prefill_chunk = 384: expected a power of two"),
        ("RolloutConfig.top_p=1.5", "RolloutConfig.top_p = 1.5: expected at most 1"),
        (
            "RolloutConfig.evaluation_tasks_only=True",
            "RolloutConfig.evaluation_tasks_only = True with RolloutConfig.env = 'builtin'",
        ),
        (
            "RolloutConfig.balance_task_types=True",
            "RolloutConfig.balance_task_types = True with RolloutConfig.env = 'builtin': only ALFWorld games have"
            " task types",
        ),
    ],
)
def test_a_bad_value_is_refused_by_name_before_the_run_directory_exists(tmp_path, capsys, binding, expected):
    run = tmp_path / "run"
    assert main(["train", *RING, "--run-dir", str(run), *_sets(binding)]) == 2
    (line,) = _error_lines(capsys)
    assert expected.format(devices=len(jax.devices())) in line, line
    assert not run.exists()


def test_dropping_zero_advantage_turns_is_refused_for_ggpo_before_the_run_directory_exists(tmp_path, capsys):
    run = tmp_path / "run"
    sets = _sets("LossConfig.name='ggpo'", "BatchConfig.drop_zero_advantage_turns=True")
    assert main(["train", *RING, "--run-dir", str(run), *sets]) == 2
    (line,) = _error_lines(capsys)
    assert "BatchConfig.drop_zero_advantage_turns = True with LossConfig.name = 'ggpo'" in line, line
    assert not run.exists()


def test_eval_refuses_zero_games(capsys):
    assert main(["eval", "--model", "tiny-ring", *RING, "--games", "0"]) == 2
    (line,) = _error_lines(capsys)
    assert "--games 0" in line


def test_an_empty_data_dir_says_to_set_the_binding(tmp_path, monkeypatch, capsys):
    empty = tmp_path / "no_games"
    empty.mkdir()
    monkeypatch.setenv("ALFWORLD_DATA", str(empty))
    run = tmp_path / "run"
    assert main(["train", "--config", "quickstart", "--run-dir", str(run)]) == 2
    (line,) = _error_lines(capsys)
    assert "TrainConfig.data_dir" in line and str(empty) in line
    assert not run.exists()


def test_a_run_directory_under_a_file_is_refused_naming_the_path(tmp_path, capsys):
    blocker = tmp_path / "somefile"
    blocker.write_text("not a folder\n")
    assert main(["train", *RING, "--run-dir", str(blocker / "run"), *_sets(*TINY)]) == 2
    (line,) = _error_lines(capsys)
    assert f"run directory {blocker / 'run'}" in line and "is a file" in line
    assert blocker.read_text() == "not a folder\n"


def test_a_full_disk_is_one_line_naming_the_path_and_leaves_the_command_rerunnable(tmp_path, monkeypatch, capsys):
    from ggtrain.manifest import Manifest

    def full_disk(self):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path.with_suffix(".tmp")))

    monkeypatch.setattr(Manifest, "save", full_disk)
    run = tmp_path / "run"
    assert main(["train", *RING, "--run-dir", str(run), *_sets(*TINY)]) == 2
    (line,) = _error_lines(capsys)
    assert str(run / "manifest.tmp") in line and "No space left on device" in line
    assert not (run / "checkpoints").exists()  # the same command, once there is space, is not refused


def _ring_config():
    from ggtrain.config import config_file, resolve_config

    return resolve_config([config_file("graphgpo"), config_file("builtin_ring")], TINY)


def _saved_run(run: Path, model_config=None, params=None) -> None:
    """A run directory holding config.json and checkpoints 1 and 2 of a train state (tiny-ring's, or the
    given model's): what an interrupted run leaves, without training."""
    from ggtrain.checkpoint import CheckpointStore
    from ggtrain.config import write_resolved_config
    from ggtrain.policies import resolve_model
    from ggtrain.update_loop import Updater
    from models import load_pretrained

    config = _ring_config()
    write_resolved_config(config, run)
    if model_config is None:
        lm = load_pretrained(resolve_model("tiny-ring"))
        model_config, params = lm.config, lm.params
    updater = Updater.create(model_config, params, config, devices=jax.devices()[:1])
    keep_both = dataclasses.replace(config.checkpoint, keep_last=2)
    store = CheckpointStore(run / "checkpoints", keep_both, log=lambda m: None)
    for step in (1, 2):
        store.save(step, updater.state, {"iteration": step})
    store.close()


def test_a_checkpoint_of_another_model_is_a_configuration_error_and_writes_nothing(tmp_path, capsys):
    from ggtrain.policies import resolve_model
    from models import load_pretrained
    from models.decoder import init_params

    wide = load_pretrained(resolve_model("tiny-ring")).config
    wide = wide.replace(intermediate_size=2 * wide.intermediate_size)
    run = tmp_path / "run"
    _saved_run(run, wide, init_params(wide, jax.random.PRNGKey(0)))
    before = sorted(str(p.relative_to(run)) for p in run.rglob("*"))
    assert main(["train", *RING, "--resume", str(run), *_sets(*TINY)]) == 2
    (line,) = _error_lines(capsys)
    assert "checkpoint step 2" in line and "does not fit the model" in line and "mlp" in line, line
    assert sorted(str(p.relative_to(run)) for p in run.rglob("*")) == before  # no manifest, no metrics


def _truncate_arrays(step_dir: Path) -> None:
    for f in [*(step_dir / "state" / "d").rglob("*"), *(step_dir / "state").glob("ocdbt.process_*/**/*")]:
        if f.is_file():
            f.write_bytes(f.read_bytes()[: f.stat().st_size // 3 + 1])


def _env() -> dict[str, str]:
    """One device, unbuffered output, and the tests' compilation cache (the child's compiles dominate)."""
    return child_env(JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")


@pytest.mark.slow
def test_no_readable_checkpoint_is_one_line_naming_each_step_and_recorded(tmp_path):
    run = tmp_path / "run"
    _saved_run(run)
    for step in (1, 2):
        _truncate_arrays(run / "checkpoints" / str(step))
    cmd = [sys.executable, "-m", "ggtrain.cli", "train", *RING, "--resume", str(run), *_sets(*TINY)]
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, proc.stderr[-3000:]  # no pages of asyncio tracebacks, no absl warnings
    assert "no readable checkpoint" in lines[0]
    assert "checkpoint step 2" in lines[0] and "checkpoint step 1" in lines[0] and "unreadable (" in lines[0]
    manifest = json.loads((run / "manifest.json").read_text())
    kinds = [e["kind"] for e in manifest["events"]]
    assert kinds.count("checkpoint_unreadable") == 2 and kinds[-1] == "no_readable_checkpoint"
    assert manifest["ended"] is None


@pytest.mark.slow
@pytest.mark.parametrize(
    "failure, code, expected",
    [
        (ValueError("injected failure in the advantages"), 1, "injected failure in the advantages"),
        (OSError(errno.ENOSPC, "No space left on device", "RUN/metrics.jsonl"), 2, "No space left on device"),
    ],
)
def test_a_failure_mid_run_is_recorded_and_only_a_full_disk_is_one_line(
    tmp_path, monkeypatch, capsys, failure, code, expected
):
    import ggtrain.train_loop

    run = tmp_path / "run"
    if isinstance(failure, OSError):
        failure = OSError(failure.errno, failure.strerror, str(run / "metrics.jsonl"))

    def fail(*args, **kwargs):
        raise failure

    monkeypatch.setattr(ggtrain.train_loop, "advantages_of", fail)
    assert main(["train", *RING, "--run-dir", str(run), *_sets(*TINY, "TrainConfig.iterations=2")]) == code
    err = capsys.readouterr().err
    assert expected in err
    if code == 1:  # an internal failure keeps its traceback
        assert "Traceback (most recent call last)" in err and "advantages_of" in err
    else:
        assert [x for x in err.splitlines() if x.startswith("ggtrain train: error:")] == [
            f"ggtrain train: error: run directory {run}: cannot write {run / 'metrics.jsonl'} ({expected})"
        ]
        assert "Traceback" not in err
    manifest = json.loads((run / "manifest.json").read_text())
    (failed,) = [e for e in manifest["events"] if e["kind"] == "failed"]
    assert failed["iteration"] == 0 and expected in failed["error"] and "advantages_of" in failed["traceback"]
    assert manifest["ended"] is None


def _start(run: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "ggtrain.cli", "train", *RING, "--run-dir", str(run), *_sets(*TINY, *extra)]
    return subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_checkpoint(child: subprocess.Popen, run: Path) -> None:
    deadline = time.time() + 240
    while time.time() < deadline and not (run / "checkpoints" / "1").exists() and child.poll() is None:
        time.sleep(0.2)
    assert (run / "checkpoints" / "1").exists(), child.communicate()[1][-3000:]


@pytest.mark.slow
def test_sigint_exits_130_unfinished_with_the_iteration_recorded_after_a_refusal(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", *RING, "--run-dir", str(run), *_sets(*TINY, "RolloutConfig.max_turns=0")]) == 2
    assert not run.exists()
    child = _start(run, "TrainConfig.iterations=200")  # the corrected command
    _wait_for_checkpoint(child, run)
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=240)
    assert child.returncode == 130, err[-3000:]
    done = max(int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit())
    assert "SIGINT" in err and "--resume" in err and "Traceback" not in err
    assert json.loads(out.strip().splitlines()[-1]) == {"run_dir": str(run), "interrupted": "SIGINT", "iteration": done}
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["events"][-1] | {"time": None} == {
        "time": None,
        "kind": "interrupted",
        "signal": "SIGINT",
        "iteration": done,  # the iterations completed (and checkpointed), not the optimizer step
    }
    assert manifest["ended"] is None and done < 200


@pytest.mark.slow
def test_a_second_signal_exits_at_once(tmp_path):
    run = tmp_path / "run"
    # iterations of a few seconds: the first request is still waiting for its safe point when the second comes
    longer = ("RolloutConfig.groups_per_iteration=8", "RolloutConfig.group_size=8", "RolloutConfig.max_turns=12")
    child = _start(run, "TrainConfig.iterations=200", *longer)
    _wait_for_checkpoint(child, run)
    child.send_signal(signal.SIGINT)
    assert child.stderr is not None
    deadline = time.time() + 120
    while time.time() < deadline and "send it again to exit at once" not in child.stderr.readline():
        pass  # the handler ran: the first request is recorded
    child.send_signal(signal.SIGINT)
    child.wait(timeout=30)
    assert child.returncode == -signal.SIGINT  # ended by the signal itself: no cleanup, no checkpoint wait
    assert json.loads((run / "manifest.json").read_text())["ended"] is None


def test_the_exit_code_of_a_stop_is_128_plus_the_signal():
    from ggtrain.train_loop import Interrupted

    assert (Interrupted("SIGINT", 3).exit_code, Interrupted("SIGTERM", 3).exit_code) == (130, 143)


def test_a_stop_signal_while_a_model_alias_builds_exits_128_plus_the_signal(monkeypatch, capsys):
    from ggtrain import cli
    from ggtrain.interrupted import Interrupted

    def building(name: str, binding: str):  # the tiny-alfworld build raises this when SIGTERM stops it
        raise Interrupted("SIGTERM")

    monkeypatch.setattr(cli, "_model_dir", building)
    assert main(["eval", "--model", "tiny-alfworld", "--games", "1"]) == 143
    assert "ggtrain eval: SIGTERM: stopped; run it again to continue" in capsys.readouterr().err
