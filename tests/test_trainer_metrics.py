"""Metrics: exact (sum, count) accumulation; TensorBoard + JSONL on process 0 only."""

from __future__ import annotations

import json

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
