"""``experiments/iteration_model.py``: each program's roofline is the larger of its compute and memory
times per chip, counted as often as a reference iteration runs it; a missing or negative count gives no
figure instead of a wrong one."""

from __future__ import annotations

import pytest

from experiments.iteration_model import iteration_model, main


def _report(train_bytes: float = 819e9, decode_bytes: float = 0.5 * 819e9) -> dict:
    return {
        "chip": "v5e",
        "peak_bf16_tflops_per_chip": 197.0,
        "plan": {"micro_rows": 16},
        "train_step": {"flops": 2 * 197e12, "bytes_accessed": train_bytes},
        "sampler": {
            "decode_chunk_steps": 16,
            "prefill": {"flops": 197e12, "bytes_accessed": 3 * 819e9},
            "decode_chunk": {"flops": 0.25 * 197e12, "bytes_accessed": decode_bytes},
        },
    }


def test_roofline_takes_the_bound_and_counts_a_reference_iteration():
    model = iteration_model(_report(), _report())
    p = model["programs"]
    assert p["train_step"]["roofline_s"] == pytest.approx(2.0)  # compute-bound
    assert p["train_step"]["runs_per_iteration"] == 128 * 50 // 16
    assert p["prefill"]["roofline_s"] == pytest.approx(3.0)  # memory-bound
    assert p["decode_chunk"]["runs_per_iteration"] == 50 * 512 // 16
    assert model["iteration_s"] == pytest.approx(2.0 * 400 + 3.0 * 50 + 0.5 * 1600)
    assert "not a measurement" in model["label"]


def test_negative_byte_count_gives_no_figure():
    model = iteration_model(_report(), _report(decode_bytes=-1e9))
    assert model["programs"]["decode_chunk"]["roofline_s"] is None
    assert model["iteration_s"] is None


def test_a_file_that_is_no_report_is_one_line_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("not json\n")
    assert main(["--train", str(bad)]) == 2
    assert "bad.json" in capsys.readouterr().err
