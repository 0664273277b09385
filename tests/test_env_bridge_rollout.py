"""The rollout driver and collation: the reviewers' mis-grouping test, whole-group reruns and drops."""

from __future__ import annotations

import json
import random
from collections import Counter

import jax
import numpy as np
import pytest

from env_bridge.collate import collate_turns
from env_bridge.envs import BuiltinRingEnv
from env_bridge.games import discover_games
from env_bridge.rollout import RolloutDriver, ScriptedPolicy, Turn
from env_bridge.worker_pool import EnvPool
from graph import build_state_graph, compute_advantages
from graph.host_api import to_turn_rows, validate_rows

GAME = "builtin:5:2:3"
ROW_FIELDS = ("group", "traj", "turn", "state", "next_state", "env_reward", "valid")


def _wandering(seed: int):
    """Follows the walkthrough with probability 0.6, else a random admissible action."""
    plan = BuiltinRingEnv().walkthrough(GAME)
    progress: dict[int, int] = {}

    def choose(view) -> str:
        rng = random.Random(hash((seed, view.slot, view.turn)))
        k = progress.get(view.slot, 0)
        if view.turn == 0:
            k = progress[view.slot] = 0
        if rng.random() < 0.6 and k < len(plan) and plan[k] in view.admissible:
            progress[view.slot] = k + 1
            return plan[k]
        return rng.choice(view.admissible)

    return choose


@pytest.fixture(scope="module")
def pool():
    with EnvPool("builtin", 2, fault_injection=True, step_timeout_s=5) as p:
        yield p


def test_misgrouping_two_groups_with_identical_text(pool, qwen_tokenizer):
    driver = RolloutDriver(pool, qwen_tokenizer, max_turns=8)
    result = driver.run(
        [GAME, GAME], group_size=8, policy=ScriptedPolicy(qwen_tokenizer, _wandering(1)), seed=0, group_ids=[4, 9]
    )
    turns = list(result.turns)
    random.Random(0).shuffle(turns)  # rows arriving in any (asynchronous) order
    assert not result.dropped_groups and result.rerun_groups == 0
    lengths = Counter(t.traj for t in turns)
    assert len(lengths) == 16 and len(set(lengths.values())) > 1  # unequal trajectory lengths
    assert {t.group for t in turns} == {4, 9}
    assert all(t.traj // 8 == t.group for t in turns)
    # identical observation text in both groups, yet ids come from per-group interning
    rows = {k: np.asarray([getattr(t, k) for t in turns]) for k in ROW_FIELDS}
    advantages = compute_advantages("graphgpo", rows)
    graph = jax.jit(build_state_graph)(to_turn_rows(validate_rows(rows), 128))
    n_node = np.asarray(graph.n_node)
    node_group = np.asarray(graph.nodes["group"])
    senders, receivers = np.asarray(graph.senders), np.asarray(graph.receivers)
    real_edges = int(np.asarray(graph.n_edge)[:-1].sum())
    assert np.all(node_group[senders[:real_edges]] == node_group[receivers[:real_edges]])
    per_group_nodes = [
        len({t.state for t in turns if t.group == g} | {t.next_state for t in turns if t.group == g}) for g in (4, 9)
    ]
    assert sorted(n_node[:-1][n_node[:-1] > 0].tolist()) == sorted(per_group_nodes)
    # collation in shuffled order: ids survive, each turn exactly once, loss_mask exactly on responses
    by_key = {(t.group, t.traj, t.turn): (t, a) for t, a in zip(turns, advantages, strict=True)}
    seen = []
    for batch in collate_turns(
        turns, rows_per_batch=16, seed=3, pad_id=qwen_tokenizer.pad_token_id, extra={"advantages": advantages}
    ):
        for r in np.flatnonzero(batch["row_mask"]):
            key = (int(batch["group"][r]), int(batch["traj"][r]), int(batch["turn"][r]))
            turn, adv = by_key[key]
            seen.append(key)
            p, n = len(turn.prompt_ids), len(turn.prompt_ids) + len(turn.response_ids)
            assert np.flatnonzero(batch["loss_mask"][r]).tolist() == list(range(p, n))
            assert batch["tokens"][r, p:n].tolist() == turn.response_ids
            assert batch["tokens"][r, :p].tolist() == turn.prompt_ids
            assert batch["advantages"][r] == np.float32(adv)
            assert (batch["state"][r], batch["next_state"][r]) == (turn.state, turn.next_state)
        assert not batch["loss_mask"][~batch["row_mask"]].any()
    assert sorted(seen) == sorted(by_key) and len(seen) == len(turns)
    assert [k for k in seen] != sorted(seen)  # shuffled
    # one episode per trajectory, its outcome read off that trajectory's turns
    assert sorted(e.traj for e in result.episodes) == sorted(lengths)
    for e in result.episodes:
        mine = [t for t in result.turns if t.traj == e.traj]
        assert (e.group, e.game) == (e.traj // 8, GAME) and e.group == mine[0].group
        assert e.turns == len(mine) and e.invalid == sum(not t.valid for t in mine)
        assert e.won == any(t.env_reward > 0 for t in mine)


def test_collation_is_deterministic_and_checkpointable(pool, qwen_tokenizer):
    driver = RolloutDriver(pool, qwen_tokenizer, max_turns=3)
    turns = driver.run([GAME], 4, ScriptedPolicy(qwen_tokenizer, _wandering(2)), seed=1).turns
    a = collate_turns(turns, 4, seed=5, pad_id=0)
    first = next(a)
    state = a.get_state()
    second = next(a)
    b = collate_turns(turns, 4, seed=5, pad_id=0)
    np.testing.assert_array_equal(next(b)["tokens"], first["tokens"])
    b.set_state(state)
    np.testing.assert_array_equal(next(b)["tokens"], second["tokens"])


def _crash_once(qwen_tokenizer, when: tuple[int, int], fault: str = "debug crash"):
    crashed = {"done": False}
    inner = _wandering(3)

    def choose(view):
        if (view.slot, view.turn) == when and not crashed["done"]:
            crashed["done"] = True
            return fault
        return inner(view)

    return ScriptedPolicy(qwen_tokenizer, choose)


def test_a_group_hit_by_a_worker_crash_is_rerun_whole(pool, qwen_tokenizer):
    driver = RolloutDriver(pool, qwen_tokenizer, max_turns=4, retries=1)
    result = driver.run([GAME, GAME], 4, _crash_once(qwen_tokenizer, (1, 1)), seed=0)
    assert result.rerun_groups >= 1 and not result.dropped_groups
    keys = [(t.traj, t.turn) for t in result.turns]
    assert len(keys) == len(set(keys))
    assert {t.traj for t in result.turns} == set(range(8))
    for traj in range(8):
        assert sorted(t.turn for t in result.turns if t.traj == traj) == list(
            range(len([t for t in result.turns if t.traj == traj]))
        )


def test_a_group_hit_by_a_hung_step_is_rerun_whole(qwen_tokenizer):
    with EnvPool("builtin", 2, fault_injection=True, step_timeout_s=1.0) as pool:
        driver = RolloutDriver(pool, qwen_tokenizer, max_turns=4, retries=1)
        result = driver.run([GAME, GAME], 4, _crash_once(qwen_tokenizer, (1, 1), "debug hang"), seed=0)
    assert result.rerun_groups >= 1 and not result.dropped_groups and pool.restarts >= 1
    keys = [(t.traj, t.turn) for t in result.turns]
    assert len(keys) == len(set(keys)) and {t.traj for t in result.turns} == set(range(8))


def test_a_group_whose_game_cannot_load_is_dropped_whole(tmp_path, qwen_tokenizer):
    bad = tmp_path / "broken" / "trial" / "game.tw-pddl"
    bad.parent.mkdir(parents=True)
    good = discover_games("valid_seen")[0].path
    bad.write_text(json.dumps(json.loads(good.read_text()) | {"pddl_problem": "(define (problem broken"}))
    with EnvPool("alfworld", 2) as pool:
        driver = RolloutDriver(pool, qwen_tokenizer, max_turns=2, retries=1)
        result = driver.run([str(bad), str(good)], 2, ScriptedPolicy(qwen_tokenizer, lambda view: "look"), seed=0)
    assert [d["group"] for d in result.dropped_groups] == [0] and "reset failed" in result.dropped_groups[0]["reason"]
    assert {t.group for t in result.turns} == {1} and {e.traj for e in result.episodes} == {2, 3}


def test_without_retries_the_failed_group_is_dropped_whole(qwen_tokenizer):
    # 3 workers: slot s lives on worker s % 3, so killing worker 0 (slots 0 and 3) hits groups 0 and 1
    with EnvPool("builtin", 3, fault_injection=True, step_timeout_s=5) as pool:
        driver = RolloutDriver(pool, qwen_tokenizer, max_turns=4, retries=0)
        result = driver.run([GAME, GAME, GAME], 2, _crash_once(qwen_tokenizer, (0, 1)), seed=0)
    assert sorted(d["group"] for d in result.dropped_groups) == [0, 1]
    assert all("worker 0 died" in d["reason"] for d in result.dropped_groups)
    assert {t.group for t in result.turns} == {2}
    assert {t.traj for t in result.turns} == {4, 5}
    assert [(e.group, e.traj) for e in result.episodes] == [(2, 4), (2, 5)]


@pytest.mark.slow
def test_sampled_rollout_rows_carry_the_sampler_logprobs(smollm):
    import jax.numpy as jnp

    from env_bridge.rollout import SamplerPolicy
    from models.sampler import Sampler, SamplingParams
    from models.scoring import score_tokens_jit

    with EnvPool("builtin", 2) as pool:
        driver = RolloutDriver(pool, smollm.tokenizer, max_turns=2, max_prompt_tokens=512)
        policy = SamplerPolicy(
            Sampler(smollm.config, smollm.tokenizer),
            smollm.params,
            SamplingParams(max_new_tokens=16, temperature=1.0),
            jax.random.PRNGKey(0),
        )
        result = driver.run([GAME, GAME], 2, policy, seed=0, policy_version=7)
    assert len(result.turns) == 8 and all(t.policy_version == 7 for t in result.turns)
    batch = next(collate_turns(result.turns, 8, seed=0, pad_id=smollm.tokenizer.pad_token_id))
    scored = score_tokens_jit(
        smollm.config,
        smollm.params,
        jnp.asarray(batch["tokens"]),
        jnp.asarray(batch["attention_mask"]),
        jnp.asarray(batch["loss_mask"]),
        1.0,
    )
    np.testing.assert_allclose(np.asarray(scored)[batch["loss_mask"]], batch["old_logp"][batch["loss_mask"]], atol=2e-4)
    assert batch["policy_version"].tolist() == [7] * 8


def _turn(group: int, traj: int, turn: int) -> Turn:
    return Turn(
        group=group,
        traj=traj,
        turn=turn,
        prompt_ids=[1, 2, 3],
        response_ids=[4],
        logprobs=np.zeros(1, np.float32),
        env_reward=0.0,
        valid=True,
        state=0,
        next_state=1,
        policy_version=0,
        action="look",
        response_text="1",
    )


def test_whole_group_batches_keep_each_group_in_one_mini_batch():
    sizes = {0: 5, 1: 9, 2: 3, 3: 7, 4: 6}  # turns per group, over trajectories of unequal length
    turns = [_turn(g, g * 10 + t % 3, t // 3) for g, n in sizes.items() for t in range(n)]
    seen: dict[int, set[int]] = {}
    count = 0
    for b, batch in enumerate(collate_turns(turns, 12, seed=4, pad_id=0, whole_groups=True)):
        real = batch["row_mask"]
        assert len(real) == 12
        for g in batch["group"][real].tolist():
            seen.setdefault(g, set()).add(b)
        count += int(real.sum())
    assert count == len(turns)
    assert all(len(batches) == 1 for batches in seen.values()) and set(seen) == set(sizes)
    with pytest.raises(ValueError, match="task group 1 has 9 turns, more than a mini-batch of 8 rows"):
        collate_turns(turns, 8, seed=4, pad_id=0, whole_groups=True)
