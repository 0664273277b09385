"""The comparison scripts decide between a new run and ``--resume`` by what the trainer wrote."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from experiments import alfworld_comparison
from experiments.alfworld_comparison import (
    CONFIG,
    StudyMismatch,
    check_run_configs,
    check_warm_start_files,
    final_evaluations,
    final_split_games,
    main,
    run_bindings,
    study_model,
    train_command,
)
from experiments.builtin_comparison import StrayRunFolder, finished, run_dir_flags
from ggtrain.config import config_file, resolve_config, write_resolved_config
from ggtrain.manifest import model_hashes


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


def test_a_study_folder_refuses_a_start_that_would_give_its_runs_other_values(tmp_path: Path) -> None:
    sets = ["LossConfig.kl_coef=0.02"]
    config = resolve_config([config_file("grpo"), config_file(CONFIG)], run_bindings(1, None, sets))
    stored = write_resolved_config(config, tmp_path / "runs" / "grpo-seed1")
    check_run_configs(tmp_path, None, sets)  # the same settings: resumes
    with pytest.raises(StudyMismatch, match=r"grpo-seed1 loss\.kl_coef: 0\.02 -> 0\.01\); use a new --out"):
        check_run_configs(tmp_path, None, [])
    with pytest.raises(StudyMismatch, match=r"grpo-seed1 iterations: 12 -> 2"):
        check_run_configs(tmp_path, 2, sets)
    edited = json.loads(stored.read_text())  # as if the gin file had said otherwise when the run started
    edited["loss"]["clip_high"] = 0.28
    stored.write_text(json.dumps(edited))
    with pytest.raises(StudyMismatch, match=r"grpo-seed1 loss\.clip_high: 0\.28 -> 0\.2"):
        check_run_configs(tmp_path, None, sets)
    write_resolved_config(dataclasses.replace(config, seed=0), stored.parent)  # the folder names seed 1
    with pytest.raises(StudyMismatch, match=r"grpo-seed1 seed: 0 -> 1"):
        check_run_configs(tmp_path, None, sets)


def test_a_method_binding_reaches_that_methods_runs_only_and_after_the_plain_ones(tmp_path: Path) -> None:
    sets = ["BatchConfig.mini_batch_rows=16", "ggpo:BatchConfig.mini_batch_rows=128"]
    for method, rows in (("grpo", 16), ("ggpo", 128)):
        command = train_command(method, 0, tmp_path / f"{method}-seed0", None, sets)
        bindings = [command[i + 1] for i, flag in enumerate(command) if flag == "--set"]
        config = resolve_config([config_file(method), config_file(CONFIG)], bindings)
        assert config.batch.mini_batch_rows == rows
        write_resolved_config(config, tmp_path / "runs" / f"{method}-seed0")
    check_run_configs(tmp_path, None, sets)  # each run resolves as it was made
    with pytest.raises(StudyMismatch, match=r"ggpo-seed0 batch\.mini_batch_rows: 128 -> 16\)"):
        check_run_configs(tmp_path, None, sets[:1])


def test_a_binding_for_no_method_is_refused_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--out", "/nonexistent", "--set", "gpro:BatchConfig.mini_batch_rows=16"])
    assert "--set gpro:BatchConfig.mini_batch_rows=16: 'gpro' is not a method" in capsys.readouterr().err


ONE_TASK_TYPE = ["RolloutConfig.task_types=('pick_and_place_simple',)"]


def test_a_final_evaluation_plays_the_split_or_the_chosen_task_types_games() -> None:
    assert [final_split_games(split, []) for split in ("valid_seen", "valid_unseen")] == [140, 134]
    assert [final_split_games(split, ONE_TASK_TYPE) for split in ("valid_seen", "valid_unseen")] == [35, 24]


def test_a_complete_final_evaluation_of_one_task_type_is_not_played_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    played: list[list[str]] = []
    monkeypatch.setattr(alfworld_comparison, "run_logged", lambda cmd, log, env: played.append(cmd) or 0)
    (tmp_path / "valid_seen.jsonl").write_text('{"seed": 0}\n' * 35)  # all 35 games of the type
    (tmp_path / "valid_unseen.jsonl").write_text('{"seed": 0}\n' * 23)  # one of its 24 short
    assert final_evaluations(["--model", "m"], tmp_path, tmp_path / "eval.log", {}, ONE_TASK_TYPE) == 0
    assert [cmd[cmd.index("--split") + 1] for cmd in played] == ["valid_unseen"]


def test_further_evaluation_seeds_are_played_into_seed_folders_and_only_where_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    played: list[list[str]] = []
    monkeypatch.setattr(alfworld_comparison, "run_logged", lambda cmd, log, env: played.append(cmd) or 0)
    (tmp_path / "seed1").mkdir()
    (tmp_path / "seed2").mkdir()
    (tmp_path / "valid_seen.jsonl").write_text('{"seed": 0}\n' * 35)
    (tmp_path / "valid_unseen.jsonl").write_text('{"seed": 0}\n' * 24)
    (tmp_path / "seed1" / "valid_seen.jsonl").write_text('{"seed": 1}\n' * 35)
    (tmp_path / "seed2" / "valid_seen.jsonl").write_text('{"seed": 2}\n' * 20 + "{")  # cut short mid-line
    assert final_evaluations(["--run", "r"], tmp_path, tmp_path / "eval.log", {}, ONE_TASK_TYPE, (0, 1, 2)) == 0
    flags = [
        (cmd[cmd.index("--split") + 1], cmd[cmd.index("--seeds") + 1], cmd[cmd.index("--out") + 1]) for cmd in played
    ]
    assert flags == [
        ("valid_seen", "2", str(tmp_path / "seed2")),
        ("valid_unseen", "1", str(tmp_path / "seed1")),
        ("valid_unseen", "2", str(tmp_path / "seed2")),
    ]


def test_an_outcome_file_of_another_evaluation_seed_is_refused_not_overwritten(tmp_path: Path) -> None:
    (tmp_path / "seed2").mkdir()
    (tmp_path / "seed2" / "valid_seen.jsonl").write_text('{"seed": 0}\n' * 35)  # seed 0's games, misplaced
    with pytest.raises(StudyMismatch, match=r"seed2/valid_seen\.jsonl: holds outcomes of evaluation seed\(s\) \[0\]"):
        final_evaluations(["--run", "r"], tmp_path, tmp_path / "eval.log", {}, ONE_TASK_TYPE, (2,))
    assert (tmp_path / "seed2" / "valid_seen.jsonl").read_text() == '{"seed": 0}\n' * 35


@pytest.mark.parametrize("seeds", [["1", "1"], ["0", "-1"]])
def test_repeated_or_negative_evaluation_seeds_are_refused_naming_them(
    seeds: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main(["--out", "/nonexistent", "--eval-seeds", *seeds])
    assert f"--eval-seeds {' '.join(seeds)}: expected distinct seeds of at least 0" in capsys.readouterr().err


def test_a_run_killed_while_writing_its_last_metrics_line_is_unfinished_not_an_error(tmp_path: Path) -> None:
    run = tmp_path / "grpo-seed0"
    run.mkdir()
    (run / "config.json").write_text('{"iterations": 2}')
    done = '{"step": 1, "train/success_rate": 0.0}\n{"step": 2, "train/success_rate": 0.5}\n'
    (run / "metrics.jsonl").write_text(done[:-20])
    assert not finished(run)
    (run / "metrics.jsonl").write_text(done)
    assert finished(run)


@pytest.mark.parametrize("folder", ["warm_start", "warm_start/seed3"])  # seed 3's alone: --eval-seeds 3
def test_a_study_folder_refuses_a_start_that_would_play_the_warm_start_otherwise(tmp_path: Path, folder: str) -> None:
    warm = resolve_config([config_file("graphgpo"), config_file(CONFIG)], ["AdvantageConfig.invalid_penalty=0.1"])
    write_resolved_config(warm, tmp_path / folder)
    check_run_configs(tmp_path, None, [])  # its advantages never change what it plays
    check_run_configs(tmp_path, None, ["RolloutConfig.balance_task_types=True", "RolloutConfig.log_turns=True"])
    with pytest.raises(StudyMismatch, match=rf"\({folder} rollout\.max_turns: 25 -> 30\)"):
        check_run_configs(tmp_path, None, ["RolloutConfig.max_turns=30"])


def test_a_study_folder_refuses_a_start_from_other_warm_start_weights(tmp_path: Path) -> None:
    _, committed = study_model([])
    weights = shutil.copytree(committed, tmp_path / "model")
    study = tmp_path / "study"
    recorded = {"path": str(committed), "sha256": model_hashes(weights)}
    run, aside = study / "runs" / "grpo-seed0", study / "runs" / "gigpo-seed0.unfinished-1"
    for folder in (run, aside, study / "warm_start" / "seed2"):
        folder.mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"model_files": recorded}))
    warm_event = {"kind": "evaluation", "split": "valid_seen", "model_files": recorded}
    (study / "warm_start" / "manifest.json").write_text(json.dumps({"model_files": {}, "events": [warm_event]}))
    other = {"model_files": {"sha256": {"model.safetensors": "0" * 64}}}
    (aside / "manifest.json").write_text(json.dumps(other))  # moved aside: not one of the study's runs
    check_warm_start_files(study, weights)  # the same files: resumes
    blob = bytearray((weights / "model.safetensors").read_bytes())
    blob[-1] ^= 1  # a rebuild's last bits
    (weights / "model.safetensors").write_bytes(bytes(blob))
    was = recorded["sha256"]["model.safetensors"][:12]
    with pytest.raises(StudyMismatch, match=rf"grpo-seed0 model\.safetensors: {was} -> [0-9a-f]{{12}}; warm_start"):
        check_warm_start_files(study, weights)
    (run / "manifest.json").unlink()
    with pytest.raises(StudyMismatch, match=rf"\(warm_start model\.safetensors: {was} -> [0-9a-f]{{12}}\)"):
        check_warm_start_files(study, weights)
    (study / "warm_start" / "manifest.json").rename(study / "warm_start" / "seed2" / "manifest.json")
    with pytest.raises(StudyMismatch, match=rf"\(warm_start/seed2 model\.safetensors: {was} -> [0-9a-f]{{12}}\)"):
        check_warm_start_files(study, weights)  # a further evaluation seed's folder is checked as well


def test_the_committed_warm_start_is_the_one_its_evaluation_played() -> None:
    path, model_dir = study_model([])
    assert path == "experiments/results/alfworld_comparison/warm_start/model"
    events = json.loads((model_dir.parent / "manifest.json").read_text())["events"]
    assert {e["split"] for e in events} == {"valid_seen", "valid_unseen"}
    assert all(e["model_files"]["sha256"] == model_hashes(model_dir) for e in events)
    sums = dict(line.split()[::-1] for line in (model_dir / "SHA256SUMS").read_text().splitlines())
    assert sums == model_hashes(model_dir)
