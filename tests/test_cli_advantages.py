"""`ggtrain advantages` on row files, and its one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ggtrain.cli import main, parse_assignments
from tests.graph_cases import case_e2


def test_json_rows_file(tmp_path, capsys):
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(case_e2()))
    assert main(["advantages", str(path), "--method", "graphgpo", "--set", "episode_weighting=turn"]) == 0
    out = json.loads(capsys.readouterr().out)
    np.testing.assert_allclose(out["advantages"], [2.207107, -1.207107, -0.5, -0.5], atol=1e-5)
    assert out["diagnostics"]["nodes"] == 5


def test_jsonl_and_npz_agree(tmp_path, capsys):
    rows = case_e2()
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text("\n".join(json.dumps({k: v[i] for k, v in rows.items()}) for i in range(4)))
    npz = tmp_path / "rows.npz"
    np.savez(npz, **{k: np.asarray(v) for k, v in rows.items()})
    main(["advantages", str(jsonl), "--method", "grpo"])
    a = json.loads(capsys.readouterr().out)["advantages"]
    main(["advantages", str(npz), "--method", "grpo", "--out", str(tmp_path / "out.json")])
    b = json.loads((tmp_path / "out.json").read_text())["advantages"]
    assert a == b


def test_bad_option_is_one_line_error(tmp_path, capsys):
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(case_e2()))
    assert main(["advantages", str(path), "--set", "omgea=0.3"]) == 2
    err = capsys.readouterr().err
    assert "omgea" in err and err.count("\n") == 1


def test_missing_file(capsys):
    assert main(["advantages", "/nonexistent/rows.json"]) == 2
    assert "/nonexistent/rows.json" in capsys.readouterr().err


def test_parse_assignments():
    assert parse_assignments(["omega=0.2", "paper_cost=True", "mode=mean"]) == {
        "omega": 0.2,
        "paper_cost": True,
        "mode": "mean",
    }
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_assignments(["omega"])


def test_bad_rows_files_and_flags_are_named(tmp_path, capsys):
    from ggtrain.cli import main

    empty = tmp_path / "rows.jsonl"
    empty.write_text("")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"group": 0}\n{oops\n')
    for argv, expected in [
        (["advantages", str(empty)], "rows.jsonl: no rows"),
        (["advantages", str(bad)], "bad.json: not JSON"),
        (["advantages", str(broken)], "broken.jsonl:2: not JSON"),
        (["train", "--set", "RolloutConfig.max_turns"], "--set 'RolloutConfig.max_turns': expected KEY=VALUE"),
        (["train", "--profile", "abc", "--run-dir", str(tmp_path / "run")], "--profile 'abc': expected"),
    ]:
        assert main(argv) == 2
        assert expected in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
