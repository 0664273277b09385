"""Worker-pool fault injection: a killed worker, a hung step, a game that fails to load; recycling."""

from __future__ import annotations

import json
import os
import time

from env_bridge.envs import BuiltinRingEnv
from env_bridge.games import discover_games
from env_bridge.worker_pool import EnvPool, Failure, Op

GAME = "builtin:6:2:4"


def test_builtin_walkthrough_wins_in_parallel_slots():
    with EnvPool("builtin", 2) as pool:
        pool.run([Op(s, "reset", GAME, 0) for s in range(4)])
        for action in BuiltinRingEnv().walkthrough(GAME):
            results = pool.run([Op(s, "step", action=action) for s in range(4)])
        assert all(r.won and r.reward == 10.0 for r in results)


def test_a_worker_killed_mid_episode_fails_only_its_slots_and_is_restarted():
    with EnvPool("builtin", 2) as pool:
        pool.run([Op(s, "reset", GAME, 0) for s in range(4)])
        os.kill(pool.workers[1].process.pid, 9)
        results = pool.run([Op(s, "step", action="look") for s in range(4)])
        assert [isinstance(r, Failure) for r in results] == [False, True, False, True]
        assert results[1].reason.startswith("worker 1 died (exit code -9, ")
        assert results[3].reason == results[1].reason
        assert pool.restarts == 1
        again = pool.run([Op(s, "reset", GAME, 0) for s in range(4)])
        assert not any(isinstance(r, Failure) for r in again)


def test_a_hanging_step_times_out_and_the_worker_is_replaced():
    with EnvPool("builtin", 2, step_timeout_s=1.0, fault_injection=True) as pool:
        pool.run([Op(s, "reset", GAME, 0) for s in range(2)])
        start = time.monotonic()
        results = pool.run([Op(0, "step", action="debug hang"), Op(1, "step", action="look")])
        assert time.monotonic() - start < 10
        assert isinstance(results[0], Failure) and "timed out" in results[0].reason
        assert not isinstance(results[1], Failure)
        assert pool.restarts == 1


def test_a_game_that_fails_to_load_fails_that_reset_only(tmp_path):
    bad = tmp_path / "broken" / "trial" / "game.tw-pddl"
    bad.parent.mkdir(parents=True)
    good = discover_games("valid_seen")[0].path
    data = json.loads(good.read_text())
    data["pddl_problem"] = "(define (problem broken"
    bad.write_text(json.dumps(data))
    with EnvPool("alfworld", 2) as pool:
        results = pool.run([Op(0, "reset", str(bad), 0), Op(1, "reset", str(good), 0)])
        assert isinstance(results[0], Failure) and "reset failed" in results[0].reason and str(bad) in results[0].reason
        assert not isinstance(results[1], Failure) and "Your task is to" in results[1].observation
        assert pool.restarts == 0


def test_workers_are_recycled_after_n_games():
    with EnvPool("builtin", 1, recycle_after_games=2) as pool:
        first = pool.workers[0].process.pid
        for _ in range(3):
            assert not any(isinstance(r, Failure) for r in pool.run([Op(0, "reset", GAME, 0)]))
        assert pool.recycles == 1 and pool.workers[0].process.pid != first and pool.restarts == 0
