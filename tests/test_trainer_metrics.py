"""Metrics: exact (sum, count) accumulation; TensorBoard + JSONL on process 0 only."""

from __future__ import annotations

import json
import time

from ggtrain.metrics import MetricAccumulator, MetricsWriter


def test_sum_count_accumulation_is_exact_and_totals_stay_totals():
    acc = MetricAccumulator()
    acc.add({"kl": (3.0, 3.0), "tokens": (10.0, 0.0)})
    acc.add({"kl": (1.0, 1.0), "tokens": (5.0, 0.0)})
    assert acc.means() == {"kl": 1.0, "tokens": 15.0}


def test_writer_on_process_zero_writes_jsonl_and_event_files(tmp_path):
    writer = MetricsWriter(tmp_path, process_index=0)
    writer.write(1, {"loss": 0.5})
    writer.write(2, {"loss": 0.25})
    writer.close()
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(x["step"], x["train/loss"]) for x in lines] == [(1, 0.5), (2, 0.25)]
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))


def test_writer_elsewhere_writes_nothing(tmp_path):
    writer = MetricsWriter(tmp_path / "run", process_index=1)
    writer.write(1, {"loss": 0.5})
    writer.close()
    assert not (tmp_path / "run").exists()


def test_resume_drops_metric_lines_past_the_restored_checkpoint(tmp_path):
    """A crash after iteration 3's metrics line but before its checkpoint committed: resuming from 2 must
    leave steps 0..2 once each, so the replayed iteration 3 is not logged twice."""
    import json

    from ggtrain.metrics import truncate_metrics

    lines = [{"step": 0, "eval/success_rate": 0.1}] + [{"step": s, "train/loss": float(s)} for s in (1, 2, 3)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    truncate_metrics(tmp_path, 2)
    kept = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert kept == lines[:3]


def test_resume_drops_a_metrics_line_cut_short_by_a_kill_and_refuses_a_broken_one_elsewhere(tmp_path):
    import json

    import pytest

    from ggtrain.metrics import truncate_metrics

    lines = [json.dumps({"step": s, "train/loss": float(s)}) for s in (1, 2, 3)]
    path = tmp_path / "metrics.jsonl"
    path.write_text("\n".join(lines) + "\n" + lines[2][:17])  # killed while writing iteration 4's line
    truncate_metrics(tmp_path, 3)
    assert path.read_text() == "\n".join(lines) + "\n"
    path.write_text(lines[0] + "\n" + lines[1][:17] + "\n" + lines[2] + "\n")
    with pytest.raises(ValueError, match=r"metrics\.jsonl:2: not a JSON metrics line"):
        truncate_metrics(tmp_path, 3)


def _events(path):
    """(step, kind) of every record of a TensorBoard event file (TFRecord framing, tensorboardX's proto)."""
    import struct

    from tensorboardX.proto.event_pb2 import Event

    data, out, at = path.read_bytes(), [], 0
    while at < len(data):
        (length,) = struct.unpack("<Q", data[at : at + 8])
        event = Event.FromString(data[at + 12 : at + 12 + length])
        out.append((event.step, event.WhichOneof("what")))
        at += 12 + length + 4
    return out


def test_resumed_writer_hides_tensorboard_steps_past_the_checkpoint(tmp_path):
    first = MetricsWriter(tmp_path, process_index=0)
    for step in (1, 2, 3):
        first.write(step, {"loss": float(step)})
    first.close()
    time.sleep(1.1)  # event files are named by the second they open in, as a real restart's would differ
    resumed = MetricsWriter(tmp_path, process_index=0, resumed_at=2)  # the checkpoint holds step 2
    resumed.write(3, {"loss": 30.0})
    resumed.close()
    files = sorted((tmp_path / "tensorboard").iterdir(), key=lambda p: p.stat().st_mtime_ns)
    assert len(files) == 2
    # TensorBoard drops earlier events at or past a session-start marker's step: step 3 is shown once
    assert (3, "session_log") in _events(files[1])
    assert (3, "session_log") not in _events(files[0])


def test_a_writer_resumed_with_nothing_restored_hides_step_0_too(tmp_path):
    """A resume before the first checkpoint (``resumed_at=-1``) plays step 0's evaluation again: the lost
    start's step 0 must be hidden as well, or TensorBoard shows it twice."""
    first = MetricsWriter(tmp_path, process_index=0)
    first.write(0, {"success_rate": 0.1}, prefix="eval/")
    first.close()
    time.sleep(1.1)
    resumed = MetricsWriter(tmp_path, process_index=0, resumed_at=-1)
    resumed.write(0, {"success_rate": 0.1}, prefix="eval/")
    resumed.close()
    files = sorted((tmp_path / "tensorboard").iterdir(), key=lambda p: p.stat().st_mtime_ns)
    assert (0, "session_log") in _events(files[1])


def test_resume_without_a_checkpoint_starts_the_metrics_again(tmp_path):
    """Killed after writing metrics but before its first checkpoint committed: the run starts again at
    iteration 0, so the lines of the lost start must go, or step 0 and iteration 1 appear twice."""
    from ggtrain.run import restore

    class NoCheckpointYet:  # failure injection: the kill came before the first checkpoint
        def restore_latest(self, abstract_state):
            return None

    class Updater:
        def abstract_state(self):
            return {}

    (tmp_path / "metrics.jsonl").write_text('{"step": 0, "eval/success_rate": 0.1}\n{"step": 1, "train/loss": 1.0}\n')
    assert restore(NoCheckpointYet(), Updater(), tmp_path, print) == 0
    assert (tmp_path / "metrics.jsonl").read_text() == ""
