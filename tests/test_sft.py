"""``ggtrain sft`` on real ALFWorld walkthrough turns with a small word-level Llama (the tiny-alfworld
tokenizer and architecture, randomly initialized): the validation loss falls, a killed and resumed run
continues bit for bit, and the written directory loads in ``load_pretrained`` and transformers alike."""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from ggtrain.config import resolve_config
from ggtrain.packing import packing_of
from ggtrain.policies.tiny_alfworld import RECIPE_FILE
from ggtrain.sft import Batches, run_sft_steps, sft
from ggtrain.sft_data import read_jsonl
from models import load_pretrained
from tests.child_env import child_env

ROOT = Path(__file__).resolve().parents[1]
SETS = [
    "SftConfig.steps=6",
    "SftConfig.validation_every=3",
    "SftConfig.checkpoint_every=3",
    "SftConfig.validation_fraction=0.34",
    "SftConfig.eval_games=0",
    "BatchConfig.mini_batch_rows=8",
    "BatchConfig.micro_batch_rows=4",
    "OptimizerConfig.learning_rate=1e-2",
    # the recipe warms up over 50 of its 900 steps; a few-step test needs its learning rate from the start
    "OptimizerConfig.schedule='constant'",
    "OptimizerConfig.warmup_steps=0",
    # the recipe's levers off: each test below turns on the one it pins
    "SftConfig.language_model_steps=0",
    "SftConfig.take_move_repeats=1",
    "SftConfig.rename_fraction=0.0",
    "SftConfig.subgoal_thoughts=False",
    "RolloutConfig.show_tracked_state=False",
    "RolloutConfig.max_prompt_tokens=512",
]


def _config(*extra: str):
    return resolve_config([RECIPE_FILE], [*SETS, *extra])


def test_demonstrations_are_rl_prompts_and_win(walkthrough_turns):
    assert {r["game"] for r in walkthrough_turns} and len({r["game"] for r in walkthrough_turns}) == 3
    first = [r for r in walkthrough_turns if r["turn"] == 0]
    assert all(r["messages"][0]["content"].startswith("You are an expert agent") for r in first)
    assert all(r["response"] == f"<think></think><action>{r['action']}</action>" for r in walkthrough_turns)
    assert all(r["action"] in r["admissible"] for r in walkthrough_turns)


def test_validation_loss_falls(walkthrough_turns, initial_model, tmp_path):
    config = _config("SftConfig.steps=12", "SftConfig.validation_every=1")
    _, result = run_sft_steps(config, initial_model, walkthrough_turns, tmp_path, resume=False, progress=False)
    lines = [json.loads(x) for x in (tmp_path / "sft_run" / "metrics.jsonl").read_text().splitlines()]
    val = [m["sft/validation_loss"] for m in lines]
    assert result.steps == 12 and len(val) == 12
    # a random model starts near log(vocab) = 6.0 nats a token; without learning it stays there
    assert val[-1] < 0.6 * val[0], val


def test_a_resume_at_the_last_step_keeps_that_steps_losses(walkthrough_turns, initial_model, tmp_path):
    # a build stopped during its final evaluation restores its last checkpoint and takes no step
    config = _config()
    _, done = run_sft_steps(config, initial_model, walkthrough_turns, tmp_path, resume=False, progress=False)
    _, again = run_sft_steps(config, initial_model, walkthrough_turns, tmp_path, resume=True, progress=False)
    assert again.steps == done.steps == 6 and np.isfinite(done.train_loss) and done.validation_loss is not None
    assert (again.train_loss, again.validation_loss) == (done.train_loss, done.validation_loss)


def test_language_model_steps_train_every_token_then_only_responses(walkthrough_turns, initial_model, tmp_path):
    config = _config("SftConfig.steps=4", "SftConfig.language_model_steps=2", "SftConfig.validation_fraction=0")
    run_sft_steps(config, initial_model, walkthrough_turns, tmp_path, resume=False, progress=False)
    lines = [json.loads(x) for x in (tmp_path / "sft_run" / "metrics.jsonl").read_text().splitlines()]
    batches = Batches(_encoded(config, initial_model, walkthrough_turns), 8, config.seed, 0)
    expected = []
    for step in range(4):
        b = next(batches)
        mask = b["attention_mask"] & b["row_mask"][:, None]
        prompt_and_response = int(mask.sum()) - int(b["row_mask"].sum())  # every token but each row's first
        expected.append(prompt_and_response if step < 2 else int((b["loss_mask"] & mask).sum()))
    assert [int(m["sft/tokens"]) for m in lines] == expected
    assert expected[0] > 5 * expected[2]  # a prompt is many times its answer: the phases really differ


def test_packed_steps_train_the_same_tokens_to_the_same_weights(walkthrough_turns, initial_model, tmp_path):
    """``SftConfig.pack``: the same rows in packed sequences, the language-model phase included, give the
    padded layout's losses and weights up to float rounding, in no more computed positions."""
    common = ("SftConfig.steps=3", "SftConfig.language_model_steps=2", "SftConfig.validation_fraction=0")
    runs = {}
    for pack in (False, True):
        config = _config(*common, f"SftConfig.pack={pack}", "BatchConfig.pack_length=1024")
        model, _ = run_sft_steps(config, initial_model, walkthrough_turns, tmp_path / str(pack), False, False)
        lines = [json.loads(x) for x in (tmp_path / str(pack) / "sft_run" / "metrics.jsonl").read_text().splitlines()]
        runs[pack] = (model.params, lines)
    (padded, padded_lines), (packed, packed_lines) = runs[False], runs[True]
    assert [m["sft/tokens"] for m in packed_lines] == [m["sft/tokens"] for m in padded_lines]
    np.testing.assert_allclose([m["sft/loss"] for m in packed_lines], [m["sft/loss"] for m in padded_lines], rtol=1e-5)
    # Adam divides by the gradient's size: where a gradient is near 0, its rounding moves a weight by up to
    # ~1e-5 (seen: 2 of 49,920 weights); a token trained wrongly moves many by ~lr (3e-3)
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=3e-5), packed, padded)
    config = _config(*common, "SftConfig.pack=True", "BatchConfig.pack_length=1024")
    turns = _encoded(config, initial_model, walkthrough_turns)
    padded_batch = next(Batches(turns, 8, config.seed, 0))
    packed_batch = next(Batches(turns, 8, config.seed, 0, packing_of(config.batch)))
    assert "segment_ids" in packed_batch
    assert packed_batch["attention_mask"].sum() == padded_batch["attention_mask"].sum()  # the same rows, whole
    assert packed_batch["tokens"].size <= padded_batch["tokens"].size


def test_pack_without_the_packed_layout_is_refused():
    from ggtrain.config import ConfigError
    from ggtrain.sft import check_sft_config

    with pytest.raises(ConfigError, match=r"BatchConfig\.packing is False"):
        check_sft_config(_config("SftConfig.pack=True", "BatchConfig.packing=False"))


def _encoded(config, model_dir, records):
    from ggtrain.rollout_setup import make_rollout_driver
    from ggtrain.sft_data import encode_records

    tokenizer = load_pretrained(model_dir).tokenizer
    driver = make_rollout_driver(config.rollout, None, tokenizer, config.rollout.max_turns)
    return encode_records(records, driver, tokenizer.eos_token_id)


def _sft_cli(out: Path, data: Path, *extra: str, wait: bool = True) -> subprocess.Popen:
    args = [sys.executable, "-m", "ggtrain.cli", "sft", "--data", str(data), "--out", str(out)]
    args += [x for s in [*SETS, f"ModelSpec.path='{data.parent / 'init'}'"] for x in ("--set", s)]
    proc = subprocess.Popen([*args, *extra], cwd=ROOT, stderr=subprocess.PIPE, text=True, env=child_env())
    if wait:
        proc.wait(timeout=600)
    return proc


@pytest.mark.slow
def test_killed_and_resumed_sft_continues_bit_for_bit(walkthrough_turns, initial_model, tmp_path):
    data = tmp_path / "demos.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in walkthrough_turns))
    (tmp_path / "init").symlink_to(initial_model)
    steps = ("--set", "SftConfig.steps=30")
    straight = _sft_cli(tmp_path / "straight", data, *steps)
    assert straight.returncode == 0, straight.stderr.read() if straight.stderr else ""
    killed = _sft_cli(tmp_path / "killed", data, *steps, wait=False)
    checkpoint = tmp_path / "killed" / "sft_run" / "checkpoints" / "3"
    deadline = time.monotonic() + 300
    while not checkpoint.exists() and killed.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert killed.poll() is None, "the run ended before it could be killed"
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=60)
    assert not (tmp_path / "killed" / "model.safetensors").exists()
    resumed = _sft_cli(tmp_path / "killed", data, *steps, "--resume")
    assert resumed.returncode == 0, resumed.stderr.read() if resumed.stderr else ""
    a = load_pretrained(tmp_path / "straight").params
    b = load_pretrained(tmp_path / "killed").params
    jax.tree_util.tree_map(np.testing.assert_array_equal, a, b)
    logged = [
        json.loads(x)["step"] for x in (tmp_path / "killed" / "sft_run" / "metrics.jsonl").read_text().split("\n") if x
    ]
    assert logged == list(range(1, 31))  # every step exactly once, none doubled by the restart


def test_a_resume_before_the_first_checkpoint_logs_every_step_once(walkthrough_turns, initial_model, tmp_path):
    # killed after logging steps 1 and 2 but before any checkpoint: the resume starts at step 0 again
    (tmp_path / "sft_run").mkdir()
    (tmp_path / "sft_run" / "metrics.jsonl").write_text('{"step": 1, "sft/loss": 9.0}\n{"step": 2, "sft/loss": 9.0}\n')
    sft(_config("SftConfig.steps=2"), initial_model, walkthrough_turns, tmp_path, resume=True, progress=False)
    logged = [json.loads(x) for x in (tmp_path / "sft_run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logged] == [1, 2] and all(r["sft/loss"] != 9.0 for r in logged)


def test_written_model_loads_in_transformers_with_equal_logits(walkthrough_turns, initial_model, tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    record = sft(_config("SftConfig.steps=2"), initial_model, walkthrough_turns, tmp_path, progress=False)
    assert record["steps"] == 2 and len(record["data_sha256"]) == 64
    ours = load_pretrained(tmp_path)
    prompt = ours.tokenizer.apply_chat_template(walkthrough_turns[0]["messages"], add_generation_prompt=True)
    ids = np.asarray([ours.tokenizer.encode(str(prompt), add_special_tokens=False)])
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    with torch.no_grad():
        theirs = hf(torch.tensor(ids)).logits.numpy()
    np.testing.assert_allclose(np.asarray(ours.logits(ids)), theirs, atol=1e-4, rtol=1e-4)
    assert not np.allclose(np.asarray(load_pretrained(initial_model).logits(ids)), theirs, atol=1e-3)  # it trained


def test_jsonl_errors_name_the_file_and_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": [{"role": "user", "content": "hi"}], "response": "ok"}\nnot json\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: not JSON"):
        read_jsonl(bad)
    bad.write_text('{"messages": [], "response": "ok"}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:1: expected"):
        read_jsonl(bad)


def test_take_move_repeats_repeat_only_those_turns(walkthrough_turns):
    from ggtrain.sft_data import demonstration_mix

    mixed = demonstration_mix(walkthrough_turns, _config("SftConfig.take_move_repeats=3"))
    verb = [r["action"].split()[0] for r in walkthrough_turns]
    takes_moves = sum(v in ("take", "move") for v in verb)
    assert takes_moves > 0
    assert len(mixed) == len(walkthrough_turns) + 2 * takes_moves
    assert [r for r in mixed if r["action"].split()[0] not in ("take", "move")] == [
        r for r, v in zip(walkthrough_turns, verb, strict=True) if v not in ("take", "move")
    ]
    assert demonstration_mix(walkthrough_turns, _config()) == walkthrough_turns


def test_take_move_repeats_below_one_is_refused():
    from ggtrain.config import ConfigError
    from ggtrain.sft import check_sft_config

    with pytest.raises(ConfigError, match=r"SftConfig.take_move_repeats = 0"):
        check_sft_config(_config("SftConfig.take_move_repeats=0"))


def test_renamed_objects_are_a_consistent_permutation_of_the_whole_record(walkthrough_turns):
    from ggtrain.sft_data import object_types, rename_objects

    types = object_types(walkthrough_turns)
    renamed = rename_objects(walkthrough_turns, 1.0, 0, types)
    changed = 0
    for before, after in zip(walkthrough_turns, renamed, strict=True):
        words_before, words_after = before["messages"][0]["content"].split(), after["messages"][0]["content"].split()
        mapping = dict(zip(words_before, words_after, strict=True))  # same word count: a word for a word
        assert all(mapping[w] == w for w in mapping if w.strip(".,'") not in types)
        assert len(set(mapping.values())) == len(mapping)  # a bijection, so the prompt's objects stay apart
        assert after["action"] in after["admissible"]
        assert after["response"] == f"<think></think><action>{after['action']}</action>"
        assert after["action"].split()[0] == before["action"].split()[0]
        changed += after["action"] != before["action"]
    assert changed > 0 and rename_objects(walkthrough_turns, 0.0, 0, types) == walkthrough_turns


def test_renaming_never_touches_held_out_games(walkthrough_turns, initial_model, tmp_path, monkeypatch):
    import ggtrain.sft as sft_module

    seen = []
    original = sft_module.encode_records
    monkeypatch.setattr(sft_module, "encode_records", lambda r, *a: seen.append(r) or original(r, *a))
    config = _config("SftConfig.steps=1", "SftConfig.rename_fraction=1.0")
    run_sft_steps(config, initial_model, walkthrough_turns, tmp_path, resume=False, progress=False)
    train, validation = seen
    held = {r["game"] for r in validation}
    assert validation == [r for r in walkthrough_turns if r["game"] in held]
    assert train != [r for r in walkthrough_turns if r["game"] not in held]


def test_rename_fraction_outside_zero_to_one_is_refused():
    from ggtrain.config import ConfigError
    from ggtrain.sft import check_sft_config

    with pytest.raises(ConfigError, match=r"SftConfig.rename_fraction = 1.5"):
        check_sft_config(_config("SftConfig.rename_fraction=1.5"))


def test_tracked_state_follows_the_walkthrough_and_reaches_the_prompt(walkthrough_turns):
    from ggtrain.policies.tiny_alfworld import alfworld_tokenizer
    from ggtrain.rollout_setup import make_rollout_driver
    from ggtrain.sft_data import encode_records, tracked_state

    pairs = [(r, n) for r, n in itertools.pairwise(walkthrough_turns) if r["game"] == n["game"]]
    after_take = [(r, n) for r, n in pairs if r["action"].startswith("take ")]
    assert after_take
    for record, following in after_take:
        obj, place = record["action"][len("take ") :].split(" from ")
        assert tracked_state(following).startswith(f"Location: {place}. Items in hand (status): {obj}(unprocessed)")

    tokenizer = alfworld_tokenizer()
    shown = _config("RolloutConfig.show_tracked_state=True").rollout
    driver = make_rollout_driver(shown, None, tokenizer, shown.max_turns)  # type: ignore[arg-type]
    plain = make_rollout_driver(_config().rollout, None, tokenizer, shown.max_turns)  # type: ignore[arg-type]
    record, following = after_take[0]
    with_state = encode_records([following], driver, None)[0].prompt_ids
    without = encode_records([following], plain, None)[0].prompt_ids
    line = tokenizer.encode(tracked_state(following), add_special_tokens=False)
    assert len(with_state) > len(without) and any(with_state[i : i + len(line)] == line for i in range(len(with_state)))


def test_subgoal_thoughts_name_the_next_milestone_and_follow_from_the_tracked_state(walkthrough_turns):
    from env_bridge.actions import parse_action
    from ggtrain.sft_data import demonstration_mix, tracked_state

    thought = demonstration_mix(walkthrough_turns, _config("SftConfig.subgoal_thoughts=True"))
    assert len(thought) == len(walkthrough_turns)
    by_prompt: dict[tuple[str, str], set[str]] = {}
    for before, after in zip(walkthrough_turns, thought, strict=True):
        think = after["response"].split("<think>")[1].split("</think>")[0]
        parsed = parse_action(after["response"], after["admissible"], strict=True)
        assert parsed.valid and parsed.action == before["action"]
        words = before["action"].split()
        if words[0] == "take":  # where it was found is not in the thought: a policy cannot know it
            assert think == f"take {words[1]}"
        elif words[0] in ("move", "clean", "heat", "cool", "use"):
            assert think == " ".join(w for w in words if not w.isdecimal())
        else:
            assert think.split()[0] in ("take", "move", "clean", "heat", "cool", "use")
        by_prompt.setdefault((before["task"], tracked_state(before)), set()).add(think)
    # the thought is a function of what the prompt shows: the task and the tracked state
    assert all(len(thoughts) == 1 for thoughts in by_prompt.values()), by_prompt
    assert demonstration_mix(walkthrough_turns, _config()) == walkthrough_turns


def test_detours_arrive_elsewhere_and_answer_with_the_experts_go_to(walkthrough_turns):
    from env_bridge.demonstrations import next_milestone, replay_game, subgoal, walkthrough_demonstrations
    from env_bridge.games import discover_games
    from env_bridge.prompts import prompt_builder

    names = list(dict.fromkeys(r["game"] for r in walkthrough_turns))
    games = {g.game_id: g for g in discover_games("train")}
    builder = prompt_builder("tags", 1)
    replay = list(walkthrough_demonstrations([games[n] for n in names], builder, "tags", 1, None, 1.0, seed=0))
    for name, records in zip(names, replay, strict=True):
        expert = [r for r in walkthrough_turns if r["game"] == name]
        detours = [r for r in records if r.get("detour")]
        assert [r["action"] for r in records if not r.get("detour")] == [r["action"] for r in expert]
        assert [r["turn"] for r in records] == list(range(len(records))) and detours
        for k, r in enumerate(records):
            if not r.get("detour"):
                continue
            place = r["history"][-1][1].removeprefix("go to ").removeprefix("open ")
            assert r["history"][-1][1] in (f"go to {place}", f"open {place}") and r["action"] != f"go to {place}"
            assert r["action"].startswith("go to ") and r["action"] in r["admissible"]
            # the expert's `go to` is right there: the place offers nothing for the pending milestone
            pending = next_milestone([x["action"] for x in records[k:] if not x.get("detour")])
            assert pending and not any(subgoal(a) == pending for a in r["admissible"])
    # seeded per game: a game's detours do not depend on which games (or workers) replay beside it
    assert replay_game(games[names[1]], builder, "tags", 1.0, seed=0) == replay[1]


def test_detour_fraction_keys_the_demonstration_cache_and_outside_zero_to_one_is_refused(tmp_path, monkeypatch):
    from ggtrain.config import ConfigError
    from ggtrain.sft import check_sft_config
    from ggtrain.sft_data import walkthrough_records

    monkeypatch.setenv("GGTRAIN_CACHE", str(tmp_path))
    rollout = _config().rollout
    plain = walkthrough_records("train", rollout, "", 1, 0)
    detoured = walkthrough_records("train", rollout, "", 1, 0, None, 1.0)
    assert not any(r.get("detour") for r in plain) and any(r.get("detour") for r in detoured)
    assert len(list((tmp_path / "demonstrations").iterdir())) == 2
    with pytest.raises(ConfigError, match=r"SftConfig.detour_fraction = -0.5"):
        check_sft_config(_config("SftConfig.detour_fraction=-0.5"))
