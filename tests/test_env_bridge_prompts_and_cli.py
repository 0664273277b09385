"""Prompt building and `ggtrain env check`."""

from __future__ import annotations

import json

import pytest

from env_bridge.prompts import PromptBuilder, task_of
from ggtrain.cli import main

OBS = "You are in the middle of a room.\n\nYour task is to: put a clean apple in fridge."


def test_first_turn_and_history_window():
    builder = PromptBuilder(history_length=2)
    first = builder.text(task_of(OBS), [], OBS, ["go to fridge 1", "look"])
    assert "Your current observation is: You are in the middle" in first
    assert "['go to fridge 1', 'look']" in first and "<think>" in first and "<action>" in first
    history = [("obs one", "go to a"), ("obs two", "go to b"), ("obs three", "go to c")]
    later = builder.text(task_of(OBS), history, "obs four", ["look"])
    assert "Your task is to: put a clean apple in fridge." in later
    assert "taken 3 step(s)" in later and "most recent 2 observations" in later
    assert "obs one" not in later and "[Observation 2: 'obs two', Action: 'go to b']" in later
    assert "You are now at step 4" in later


def test_tracked_state_is_shown_only_when_configured():
    shown = PromptBuilder(show_tracked_state=True).text("t", [("o", "a")], "obs", ["look"], "Location: desk 1.")
    hidden = PromptBuilder().text("t", [("o", "a")], "obs", ["look"], "Location: desk 1.")
    assert "Location: desk 1." in shown and "Location: desk 1." not in hidden


@pytest.mark.slow
def test_env_check_prints_exactly_one_json_line(capsys):
    assert main(["env", "check", "--split", "valid_seen", "--games", "2", "--policy", "walkthrough"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1
    summary = json.loads(out[0])
    assert set(summary) == {"games", "games_won", "steps", "steps_per_s", "reset_s_mean", "worker_restarts"}
    assert summary["games"] == summary["games_won"] == 2 and summary["worker_restarts"] == 0


def test_env_check_with_missing_data_is_a_one_line_error(tmp_path, capsys):
    assert main(["env", "check", "--data-dir", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert "looked in" in err and str(tmp_path / "none") in err


def test_long_prompts_drop_history_then_cut_the_middle(qwen_tokenizer):
    from env_bridge.rollout import RolloutDriver

    driver = RolloutDriver(None, qwen_tokenizer, PromptBuilder(history_length=3), max_prompt_tokens=200)  # type: ignore[arg-type]
    history = [(f"observation {i} " + "word " * 20, f"go to place {i}") for i in range(5)]
    admissible = [f"go to drawer {i}" for i in range(40)]
    ids = driver.fit_prompt("put a clean apple in fridge.", history, "You arrive at drawer 1.", admissible, "")
    text = qwen_tokenizer.decode(ids)
    assert len(ids) <= 200
    assert "You are an expert agent" in text and "<action> </action> tags." in text and " ... " in text
    short = driver.fit_prompt("t", history[:1], "obs", ["look"], "")
    assert " ... " not in qwen_tokenizer.decode(short) and "Observation 1" in qwen_tokenizer.decode(short)
