"""Step 1's read-out 2 (PLAN.md): at the thought's first word of every expert turn on the 140 valid_seen
walkthroughs that pursues a processing step (clean, cool, heat), the log-probability the warm start and
each finished run of this study give each of the three verbs there. Scored exactly as
``../alfworld_seed2_turn_credit/expert_likelihood.py`` scores it (its functions, the comparison's RL
prompt, subgoal thoughts as in the warm start's recipe). Writes ``decisions.jsonl``, one line per such
turn; ``summarize.py`` makes the table. Needs the runs' final checkpoints (kept on this machine, not
committed).

    python experiments/results/alfworld_comparison_balanced_task_types/decisions.py
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))
SCORING = HERE.parent / "alfworld_seed2_turn_credit" / "expert_likelihood.py"


def scoring_module():
    spec = importlib.util.spec_from_file_location("expert_likelihood", SCORING)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def main() -> int:
    from experiments.builtin_comparison import finished
    from ggtrain.config import config_file, config_from_dict, resolve_config
    from ggtrain.rollout_setup import make_rollout_driver
    from ggtrain.run_policy import model_dir, restore_run_policy
    from ggtrain.sft_data import encode_records, walkthrough_records, with_subgoal_thoughts
    from models import load_pretrained

    scoring = scoring_module()
    config = resolve_config(
        [config_file("gigpo"), config_file("alfworld_comparison")], [f"ModelSpec.path='{scoring.WARM}'"]
    )
    records = with_subgoal_thoughts(walkthrough_records("valid_seen", config.rollout, config.data_dir, 0, 0), "tags")
    warm = load_pretrained(model_dir(scoring.WARM, "warm start"))
    tokenizer = warm.tokenizer
    driver = make_rollout_driver(config.rollout, None, tokenizer, config.rollout.max_turns)  # type: ignore[arg-type]
    turns = encode_records(records, driver, tokenizer.eos_token_id)
    variants = scoring.process_variants(turns, records, tokenizer)
    policies = {"warm_start": (warm.config, warm.params)}
    for run in sorted(p for p in (HERE / "runs").iterdir() if p.is_dir() and finished(p)):
        run_config = config_from_dict(json.loads((run / "config.json").read_text()))
        lm, params, step = restore_run_policy(run, run_config, model_dir(run_config.model.path, run.name))
        assert step == run_config.iterations, (run, step)
        policies[run.name] = (lm.config, params)
    decisions: dict[str, dict] = {}
    for name, (lm_config, params) in policies.items():
        print(f"scoring {len(variants)} processing decisions under {name}", file=sys.stderr, flush=True)
        per_variant = scoring.score(lm_config, params, [v for _, _, v in variants], tokenizer.pad_token_id)
        decisions[name] = {(i, verb): logp[1] for (i, verb, _), logp in zip(variants, per_variant, strict=True)}
    with (HERE / "decisions.jsonl").open("w") as f:
        for i in sorted({i for i, _, _ in variants}):
            record = records[i]
            line = {k: record[k] for k in ("game", "task_type", "turn", "action")}
            line["expert_verb"] = record["response"].split("<think>")[1].split()[0]
            line["logp"] = {name: {v: float(d[(i, v)]) for v in scoring.PROCESSES} for name, d in decisions.items()}
            f.write(json.dumps(line) + "\n")
    print(f"wrote {HERE / 'decisions.jsonl'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
