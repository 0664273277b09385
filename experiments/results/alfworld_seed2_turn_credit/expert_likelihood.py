"""Measurement 1 of PLAN.md: the teacher-forced log-probability of every expert answer on the 140 valid_seen
walkthroughs (the comparison's RL prompt, subgoal thoughts as in the warm start's recipe) under the warm
start and the seed-2 final checkpoints of the 16-row comparison. Writes one line per expert turn with the
log-probability of its thought, its action and its whole answer under each policy (``expert_turns.jsonl``);
``summarize.py`` makes the tables from it. For the turns whose thought starts
with a processing verb (clean, cool, heat), also the log-probability each policy gives each of the three
verbs as the thought's first word. Needs the runs' checkpoints (kept on this machine, not committed),
and scores this folder's other runs (``runs/*``, finished) too.

    python experiments/results/alfworld_seed2_turn_credit/expert_likelihood.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))

WARM = "ggtrain/policies/shipped/tiny-alfworld-69af91647828"
RUNS = ROOT / "experiments/results/alfworld_comparison_16_row_mini_batches/runs"
POLICIES = ("gigpo-seed2", "graphgpo-seed2", "graph_only-seed2")
ROWS, ALIGN = 16, 64
PROCESSES = ("clean", "cool", "heat")  # the milestone verbs of the three processing task types


def spans(response: list[int], ids: dict[str, int]) -> dict[str, slice]:
    """Where the thought's and the action's tokens are in an answer ``<think>…</think><action>…</action>``."""
    think, action = response.index(ids["</think>"]), response.index(ids["<action>"])
    return {"thought": slice(1, think), "action": slice(action + 1, response.index(ids["</action>"]))}


def process_variants(turns, records, tokenizer) -> list[tuple[int, str, object]]:
    """For each turn whose thought starts with a processing verb, the turn with that first thought word
    replaced by each processing verb (itself included): (turn index, verb, turn). The prefix up to that
    word is the same, so its log-probability is the policy's weight on each verb at the decision."""
    import dataclasses

    variants = []
    for i, (turn, record) in enumerate(zip(turns, records, strict=True)):
        first = tokenizer.decode([turn.response_ids[1]]).strip()
        if first not in PROCESSES:
            continue
        assert record["response"].startswith(f"<think>{first} "), record["response"]
        for verb in PROCESSES:
            (verb_id,) = tokenizer.encode(verb, add_special_tokens=False)
            ids = [turn.response_ids[0], verb_id, *turn.response_ids[2:]]
            variants.append((i, verb, dataclasses.replace(turn, response_ids=ids)))
    return variants


def score(lm_config, params, turns, pad_id: int) -> list[np.ndarray]:
    """Each turn's per-token log-probabilities of its answer."""
    from models.scoring import score_tokens_jit

    order = sorted(range(len(turns)), key=lambda i: len(turns[i].prompt_ids) + len(turns[i].response_ids))
    out: list[np.ndarray] = [np.zeros(0)] * len(turns)
    for start in range(0, len(order), ROWS):
        chosen = order[start : start + ROWS]
        length = -(-max(len(turns[i].prompt_ids) + len(turns[i].response_ids) for i in chosen) // ALIGN) * ALIGN
        tokens = np.full((ROWS, length), pad_id, np.int32)
        attention, mask = np.zeros((ROWS, length), bool), np.zeros((ROWS, length), bool)
        for row, i in enumerate(chosen):
            p, r = turns[i].prompt_ids, turns[i].response_ids
            tokens[row, : len(p) + len(r)] = p + r
            attention[row, : len(p) + len(r)] = True
            mask[row, len(p) : len(p) + len(r)] = True
        logp = np.asarray(score_tokens_jit(lm_config, params, tokens, attention, mask, 1.0))
        for row, i in enumerate(chosen):
            p, r = len(turns[i].prompt_ids), len(turns[i].response_ids)
            out[i] = logp[row, p : p + r].astype(np.float64)
    return out


def main() -> int:
    from ggtrain.config import config_file, config_from_dict, resolve_config
    from ggtrain.rollout_setup import make_rollout_driver
    from ggtrain.run_policy import model_dir, restore_run_policy
    from ggtrain.sft_data import encode_records, walkthrough_records, with_subgoal_thoughts
    from models import load_pretrained

    config = resolve_config([config_file("gigpo"), config_file("alfworld_comparison")], [f"ModelSpec.path='{WARM}'"])
    records = with_subgoal_thoughts(walkthrough_records("valid_seen", config.rollout, config.data_dir, 0, 0), "tags")
    warm = load_pretrained(model_dir(WARM, "warm start"))
    tokenizer = warm.tokenizer
    driver = make_rollout_driver(config.rollout, None, tokenizer, config.rollout.max_turns)  # type: ignore[arg-type]
    turns = encode_records(records, driver, tokenizer.eos_token_id)
    ids = {tag: tokenizer.encode(tag, add_special_tokens=False)[0] for tag in ("</think>", "<action>", "</action>")}
    variants = process_variants(turns, records, tokenizer)
    policies = {"warm_start": (warm.config, warm.params)}
    replays = [p for p in sorted((HERE / "runs").iterdir()) if p.is_dir() and p.name not in POLICIES]
    for run in [RUNS / name for name in POLICIES] + replays:
        run_config = config_from_dict(json.loads((run / "config.json").read_text()))
        lm, params, step = restore_run_policy(run, run_config, model_dir(run_config.model.path, run.name))
        assert step == run_config.iterations, (run, step)
        policies[run.name] = (lm.config, params)
    scores, decisions = {}, {}
    for name, (lm_config, params) in policies.items():
        print(f"scoring {len(turns)} expert turns under {name}", file=sys.stderr, flush=True)
        scores[name] = score(lm_config, params, turns, tokenizer.pad_token_id)
        per_variant = score(lm_config, params, [v for _, _, v in variants], tokenizer.pad_token_id)
        decisions[name] = {(i, verb): logp[1] for (i, verb, _), logp in zip(variants, per_variant, strict=True)}
    with (HERE / "expert_turns.jsonl").open("w") as f:
        for i, (record, turn) in enumerate(zip(records, turns, strict=True)):
            parts = spans(turn.response_ids, ids)
            line = {k: record[k] for k in ("game", "task_type", "turn", "action")}
            line["thought"] = record["response"].split("<think>")[1].split("</think>")[0]
            for name, per_turn in scores.items():
                logp = per_turn[i]
                line[name] = {"answer": logp.sum()} | {part: logp[s].sum() for part, s in parts.items()}
                if (i, PROCESSES[0]) in decisions[name]:
                    line[name]["thought_first_word"] = {v: decisions[name][(i, v)] for v in PROCESSES}
            f.write(json.dumps(line) + "\n")
    print(f"wrote {HERE / 'expert_turns.jsonl'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
