"""The comparison scripts decide between a new run and ``--resume`` by what the trainer wrote."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.alfworld_comparison import StudyMismatch, check_study_settings
from experiments.builtin_comparison import StrayRunFolder, finished, run_dir_flags


def test_a_missing_run_starts_new(tmp_path: Path) -> None:
    assert run_dir_flags(tmp_path / "grpo-seed0") == ["--run-dir", str(tmp_path / "grpo-seed0")]


def test_a_run_with_a_finished_checkpoint_resumes(tmp_path: Path) -> None:
    run = tmp_path / "grpo-seed0"
    (run / "checkpoints" / "3").mkdir(parents=True)
    (run / "config.json").write_text("{}")
    assert run_dir_flags(run) == ["--resume", str(run)]


def test_a_run_stopped_before_its_first_checkpoint_is_moved_aside_and_started_again(tmp_path: Path) -> None:
    run = tmp_path / "grpo-seed0"
    (run / "checkpoints" / "1.orbax-checkpoint-tmp-17").mkdir(parents=True)
    (run / "config.json").write_text("{}")
    (run / "metrics.jsonl").write_text('{"step": 0}\n')
    (tmp_path / "grpo-seed0.log").write_text("$ ggtrain train\n")
    assert run_dir_flags(run) == ["--run-dir", str(run)]
    assert not run.exists() and not (tmp_path / "grpo-seed0.log").exists()
    (aside,) = (p for p in tmp_path.glob("grpo-seed0.unfinished-*") if p.is_dir())
    assert (aside / "metrics.jsonl").read_text() == '{"step": 0}\n'
    assert aside.with_name(f"{aside.name}.log").read_text() == "$ ggtrain train\n"


def test_checkpoints_without_config_are_refused_naming_the_folder(tmp_path: Path) -> None:
    run = tmp_path / "gigpo-seed0"
    (run / "checkpoints" / "2").mkdir(parents=True)
    with pytest.raises(StrayRunFolder, match=r"gigpo-seed0: checkpoints/ without config\.json"):
        run_dir_flags(run)


def test_a_study_folder_refuses_a_restart_with_other_shared_settings(tmp_path: Path) -> None:
    check_study_settings(tmp_path, None, ["OptimizerConfig.b1=0.0"])
    check_study_settings(tmp_path, None, ["OptimizerConfig.b1=0.0"])  # the same settings: resumes
    recorded = (tmp_path / "study.json").read_text()
    with pytest.raises(StudyMismatch, match=r"set \['OptimizerConfig.b1=0.0'\] -> \[\]\); use a new --out"):
        check_study_settings(tmp_path, None, [])
    with pytest.raises(StudyMismatch, match=r"iterations None -> 2"):
        check_study_settings(tmp_path, 2, ["OptimizerConfig.b1=0.0"])
    assert (tmp_path / "study.json").read_text() == recorded


def test_a_run_killed_while_writing_its_last_metrics_line_is_unfinished_not_an_error(tmp_path: Path) -> None:
    run = tmp_path / "grpo-seed0"
    run.mkdir()
    (run / "config.json").write_text('{"iterations": 2}')
    done = '{"step": 1, "train/success_rate": 0.0}\n{"step": 2, "train/success_rate": 0.5}\n'
    (run / "metrics.jsonl").write_text(done[:-20])
    assert not finished(run)
    (run / "metrics.jsonl").write_text(done)
    assert finished(run)
