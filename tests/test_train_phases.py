"""The training loop's pieces on their own: seeds by name, the hosts' rollout summaries merged, metric pairs,
the evaluation schedule, fault injection parsing and a one-process host exchange (no model, no environment)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from env_bridge.rollout import Episode
from ggtrain.config import EvalConfig, TrainConfig
from ggtrain.fault_injection import Fault, fault_from_env
from ggtrain.host_exchange import HostExchange
from ggtrain.rollout_summary import EpisodeTotals, HostSummary, episode_metrics, episode_totals, merge_summaries
from ggtrain.seeds import RunSeeds, evaluation_key
from ggtrain.train_loop import choose_games, evaluation_due, host_share, progress_line


def test_seeds_keep_the_values_runs_have_always_used():
    seeds = RunSeeds(5)
    for iteration in (0, 1, 17):
        assert seeds.environment(iteration) == 5 * 100_003 + iteration
        for epoch in (0, 1, 2):
            assert seeds.collate(iteration, epoch) == 5 * 7919 + iteration + 104_729 * epoch
        np.testing.assert_array_equal(
            jax.random.key_data(seeds.rollout_key(iteration)),
            jax.random.key_data(jax.random.fold_in(jax.random.PRNGKey(5), iteration)),
        )
        a, b = seeds.group_choice(iteration), np.random.default_rng([5, iteration])
        assert a.choice(10, 4).tolist() == b.choice(10, 4).tolist()
    np.testing.assert_array_equal(
        jax.random.key_data(evaluation_key(1)), jax.random.key_data(jax.random.PRNGKey(10_001))
    )
    recorded = seeds.manifest()
    assert recorded["base"] == 5 and "5 * 100003" in recorded["environment"] and recorded["evaluation"]["seeds"] == [0]
    streams = {"training", "group_choice", "balanced_group_choice", "environment", "rollout", "collate", "evaluation"}
    assert set(recorded) == {"base"} | streams
    assert "default_rng([5, r, 1]).permutation" in recorded["balanced_group_choice"]


def _episode(traj: int, won: bool, turns: int, invalid: int) -> Episode:
    return Episode(group=traj // 2, traj=traj, game="g", won=won, turns=turns, invalid=invalid)


def test_summaries_merge_into_the_totals_one_host_would_count():
    host1 = HostSummary(3, episode_totals([_episode(3, True, 1, 0), _episode(2, False, 2, 1)]), {}, [], 1, "")
    host0 = HostSummary(
        2, episode_totals([_episode(1, False, 1, 0), _episode(0, True, 1, 1)]), {}, [{"group": 4}], 0, ""
    )
    idle = HostSummary(0, EpisodeTotals(), {}, [{"group": 5}], 0, "SIGTERM")  # every group it played failed
    merged = merge_summaries([host0, idle, host1])
    assert merged.rows == 5 and merged.episodes == EpisodeTotals(episodes=4, won=2, turns=5, invalid=2)
    assert (merged.dropped, merged.reruns, merged.stop_requested) == ([{"group": 4}, {"group": 5}], 1, "SIGTERM")
    assert episode_metrics(merged.episodes) == {"success_rate": 0.5, "mean_turns": 1.25, "invalid_action_rate": 0.4}
    assert episode_metrics(EpisodeTotals()) == {"success_rate": 0.0, "mean_turns": 0.0, "invalid_action_rate": 0.0}


def test_host_share_choose_games_and_the_evaluation_schedule():
    assert host_share(5, HostExchange(1, 2)) == [1, 3] and host_share(5, HostExchange()) == [0, 1, 2, 3, 4]
    assert choose_games(["a", "b"], 3, np.random.default_rng(0)) != []  # fewer games than groups: repeats
    assert sorted(choose_games(list("abcd"), 4, np.random.default_rng(0))) == list("abcd")
    config = TrainConfig(iterations=5, eval=EvalConfig(every=2))
    assert [i for i in range(5) if evaluation_due(config, i)] == [1, 3, 4]
    never = TrainConfig(iterations=3, eval=EvalConfig(every=0))
    assert [i for i in range(3) if evaluation_due(never, i)] == [2]


def test_progress_line_names_the_iteration_and_its_numbers():
    metrics = {"success_rate": 0.5, "mean_turns": 3.0, "invalid_action_rate": 0.1, "advantage_ms": 1.5, "loss": 0.25}
    line = progress_line(TrainConfig(iterations=4), 1, metrics)
    assert line.startswith("iter 2/4 success 0.500 turns 3.0 invalid 0.10 loss 0.2500") and "eval" not in line
    assert progress_line(TrainConfig(iterations=4), 1, metrics | {"eval_success_rate": 1.0}).endswith("eval 1.000")
    assert progress_line(TrainConfig(iterations=4), 1, {**metrics, "skipped_steps": 3.0}).endswith("ms skipped 3")


def test_progress_line_marks_what_a_fully_skipped_update_did_not_measure():
    metrics = {"success_rate": 0.0, "mean_turns": 25.0, "invalid_action_rate": 0.0, "advantage_ms": 1.0}
    line = progress_line(TrainConfig(iterations=4), 0, metrics | {"skipped_steps": 4.0})
    assert "loss - kl - tok/s - adv 1.00 ms skipped 4" in line
    measured = progress_line(TrainConfig(iterations=4), 0, metrics | {"loss": 0.5, "kl": 0.0, "tokens_per_s": 10.0})
    assert "loss 0.5000 kl 0.0000 tok/s 10" in measured


def test_fault_injection_is_off_unless_asked_and_checked_up_front():
    assert fault_from_env({}) is None
    assert fault_from_env({"GGTRAIN_FAULT_INJECT": "exit@1:2"}) == Fault("exit", 1, 2)
    for bad in ("boom@1:2", "hang@x:2", "hang"):
        with pytest.raises(ValueError, match="expected hang@P:I or exit@P:I"):
            fault_from_env({"GGTRAIN_FAULT_INJECT": bad})
    Fault("exit", 1, 2).strike(2, process_index=0)  # another process: nothing happens
    Fault("exit", 1, 2).strike(1, process_index=1)  # another iteration: nothing happens


def test_one_process_exchanges_with_itself_only():
    host = HostExchange(timeout_s=5)
    assert host.exchange("x", {"a": 1}) == [{"a": 1}] and host.rounds == {}
    host.barrier("y")


def test_turn_log_names_real_games_and_refuses_rows_that_do_not_match(tmp_path):
    from env_bridge.games import discover_games
    from env_bridge.rollout import Turn
    from ggtrain.turn_log import drop_turn_logs_after, game_fields, turn_log_path, turn_records

    game = discover_games("valid_seen")[0]
    assert game_fields(str(game.path)) == {"game_id": game.game_id, "task_type": game.task_type}
    assert game_fields("builtin:5:2:3") == {"game_id": "builtin:5:2:3", "task_type": ""}
    turn = Turn(
        group=0,
        traj=1,
        turn=0,
        prompt_ids=[1],
        response_ids=[2, 3],
        logprobs=np.float32([-0.5, -0.25]),
        env_reward=0.0,
        valid=True,
        state=0,
        next_state=1,
        policy_version=0,
        action="look",
        response_text="look",
    )
    played = Episode(group=0, traj=1, game=str(game.path), won=True, turns=4, invalid=0)
    other = Episode(group=0, traj=2, game=str(game.path), won=True, turns=4, invalid=0)
    (record,) = turn_records(3, [turn], [played], np.float32([0.5]))
    assert (record["iteration"], record["advantage"], record["logprob"], record["won"]) == (3, 0.5, -0.75, True)
    assert (record["game_id"], record["task_type"], record["episode_turns"]) == (game.game_id, game.task_type, 4)
    with pytest.raises(ValueError, match="1 turns but advantages of shape"):
        turn_records(3, [turn], [played], np.float32([0.5, 0.5]))
    with pytest.raises(ValueError, match="trajectory 1 has no episode"):
        turn_records(3, [turn], [other], np.float32([0.5]))
    assert turn_log_path(tmp_path, 7, 1, 2).name == "iteration_0007.process1.jsonl"
    (tmp_path / "turns").mkdir()
    for name in ("iteration_0002.jsonl", "iteration_0003.process0.jsonl", "iteration_0003.jsonl.tmp", "notes.txt"):
        (tmp_path / "turns" / name).write_text("x\n")
    dropped = drop_turn_logs_after(tmp_path, 2)
    assert sorted(p.name for p in dropped) == ["iteration_0003.jsonl.tmp", "iteration_0003.process0.jsonl"]
    assert sorted(p.name for p in (tmp_path / "turns").iterdir()) == ["iteration_0002.jsonl", "notes.txt"]
