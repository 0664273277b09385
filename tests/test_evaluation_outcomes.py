"""Evaluation outcomes: a game whose group was dropped counts as lost and is counted as dropped; an
evaluation in which no episode completed is an error, not a success rate of 0."""

from __future__ import annotations

import pytest

from ggtrain.evaluate import EvalGame, outcome_record, require_completed, summarize_outcomes


def _games(n: int) -> list[EvalGame]:
    return [EvalGame(f"game{i}", f"g{i}", "pick_and_place_simple") for i in range(n)]


def test_dropped_games_count_as_lost_and_are_reported():
    records = [outcome_record(g, 0, None) for g in _games(3)]
    records[0] = records[0] | {"won": True, "turns": 4, "completed": True}
    summary = summarize_outcomes(require_completed(records))
    assert (summary["episodes"], summary["dropped"], summary["success_rate"]) == (3, 2, 1 / 3)


def test_an_evaluation_where_nothing_completed_is_an_error():
    records = [outcome_record(g, 0, None) for g in _games(4)]
    with pytest.raises(RuntimeError, match="none of the 4 episodes completed"):
        require_completed(records)


def test_an_evaluation_folder_keeps_one_config_and_a_manifest_event_per_evaluation(tmp_path, capsys):
    import json

    from ggtrain.cli import main

    out = tmp_path / "warm_start"
    ring = ["eval", "--model", "tiny-ring", "--config", "graphgpo", "--config", "builtin_ring", "--games", "2"]
    ring += ["--set", "EvalConfig.max_turns=2", "--out", str(out)]
    assert main([*ring, "--split", "valid_seen"]) == 0
    assert main([*ring, "--split", "valid_unseen"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    events = [e for e in manifest["events"] if e["kind"] == "evaluation"]
    assert [(e["split"], e["games"], e["step"]) for e in events] == [("valid_seen", 2, 0), ("valid_unseen", 2, 0)]
    # each evaluation's own start and length (the event's time is its end; the manifest's start the first's)
    assert events[0]["started"] <= events[0]["time"] <= events[1]["started"] <= events[1]["time"]
    assert all(e["seconds"] > 0 for e in events)
    assert events[0]["model_files"]["sha256"]["config.json"] and len(events[0]["game_list"]) == 64
    assert manifest["git"]["commit"] and manifest["packages"]["jax"] and manifest["ended"]
    assert manifest["seeds"]["evaluation"]["seeds"] == [0]
    stored = json.loads((out / "config.json").read_text())
    assert stored["eval"]["max_turns"] == 2 and stored["model"]["path"] == "tiny-ring"  # --model, not the gin's
    assert events[1]["evaluation_seeds"] == [0] and events[1]["temperature"] == stored["eval"]["temperature"]
    assert len((out / "valid_unseen.jsonl").read_text().splitlines()) == 2
    capsys.readouterr()
    # another configuration into the same folder is refused before anything is written
    assert main([*ring, "--split", "train", "--set", "EvalConfig.max_turns=3"]) == 2
    assert "holds another configuration" in capsys.readouterr().err
    assert not (out / "train.jsonl").exists()
    assert main([*ring, "--split", "train", "--temperature", "0.7"]) == 2  # another temperature, too
    assert main([*ring, "--split", "train", "--model", "tiny-random"]) == 2  # another model
    assert json.loads((out / "manifest.json").read_text())["events"] == manifest["events"]


def test_an_evaluation_manifest_starts_when_its_first_evaluation_began(tmp_path):
    import json

    from ggtrain.manifest import record_evaluation

    began = "2000-01-01T00:00:00+0000"  # the evaluation's episodes began long before it is recorded
    record_evaluation(tmp_path, {}, {}, split="valid_seen", started=began, seconds=1.0)
    record_evaluation(tmp_path, {}, {}, split="valid_unseen", started="2000-01-01T01:00:00+0000", seconds=1.0)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["started"] == began and manifest["ended"] > began
    assert [e["started"] for e in manifest["events"]] == [began, "2000-01-01T01:00:00+0000"]
    assert all(e["git"] == manifest["git"] and e["git"]["commit"] for e in manifest["events"])  # each one's code


def test_outcomes_are_written_whole_or_not_at_all(tmp_path, monkeypatch):
    import json

    from ggtrain import evaluate

    path = tmp_path / "valid_seen.jsonl"
    path.write_text('{"game_id": "earlier"}\n')
    real_dumps, calls = json.dumps, []

    def dies_on_the_second_record(record):  # failure injection: killed while the records are written
        calls.append(record)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_dumps(record)

    monkeypatch.setattr(evaluate.json, "dumps", dies_on_the_second_record)
    with pytest.raises(KeyboardInterrupt):
        evaluate.write_outcomes([{"game_id": "a"}, {"game_id": "b"}], path)
    assert path.read_text() == '{"game_id": "earlier"}\n'  # not cut to its first new line
    monkeypatch.setattr(evaluate.json, "dumps", real_dumps)
    evaluate.write_outcomes([{"game_id": "a"}, {"game_id": "b"}], path)
    assert [json.loads(x)["game_id"] for x in path.read_text().splitlines()] == ["a", "b"]
    assert [p.name for p in tmp_path.iterdir()] == ["valid_seen.jsonl"]
