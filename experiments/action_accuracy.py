"""How often a model picks the expert's action on held-out prompts: the walkthroughs of evaluation games
replayed with RL's prompt (``env_bridge.demonstrations``), the model's greedy answer parsed as RL parses
it, compared with the expert's command. A quick diagnostic of a warm start, independent of the
environment's randomness; prints one JSON object (and writes it with ``--out``).

    python experiments/action_accuracy.py --model tiny-alfworld --games 12
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    import jax

    from env_bridge.actions import parse_action
    from env_bridge.demonstrations import walkthrough_demonstrations
    from env_bridge.games import discover_games
    from env_bridge.prompts import prompt_builder
    from env_bridge.rollout import RolloutDriver
    from ggtrain.evaluate import interleave_task_types
    from ggtrain.policies import resolve_model
    from models import load_pretrained
    from models.sampler import Sampler, SamplingParams

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="model directory or alias")
    parser.add_argument("--split", default="valid_seen")
    parser.add_argument("--games", type=int, default=12)
    parser.add_argument("--history-length", type=int, default=1)
    parser.add_argument("--max-prompt-tokens", type=int, default=1024)
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args(argv)
    games = interleave_task_types(discover_games(args.split))[: args.games]
    records = [
        r for rs in walkthrough_demonstrations(games, prompt_builder("tags", args.history_length), "tags") for r in rs
    ]
    lm = load_pretrained(resolve_model(args.model))
    driver = RolloutDriver(
        None, lm.tokenizer, prompt_builder("tags", args.history_length), max_prompt_tokens=args.max_prompt_tokens
    )  # type: ignore[arg-type]
    prompts = [
        driver.fit_prompt(r["task"], [tuple(h) for h in r["history"]], r["observation"], r["admissible"], "")
        for r in records
    ]  # type: ignore[misc]
    sampling = SamplingParams(max_new_tokens=16, temperature=0.0, stop=("</action>",))
    sampler, texts = Sampler(lm.config, lm.tokenizer), []
    for start in range(0, len(prompts), 32):  # batches the memory of this machine holds
        texts += sampler.generate(lm.params, prompts[start : start + 32], sampling, jax.random.PRNGKey(0)).texts
    chosen = [parse_action(t).action for t in texts]
    by_verb: dict[str, list[bool]] = collections.defaultdict(list)
    for r, a in zip(records, chosen, strict=True):
        by_verb[r["action"].split()[0]].append(a == r["action"])
    result = {
        "model": args.model,
        "split": args.split,
        "games": len(games),
        "turns": len(records),
        "exact": sum(a == r["action"] for r, a in zip(records, chosen, strict=True)) / len(records),
        "admissible": sum(a in r["admissible"] for r, a in zip(records, chosen, strict=True)) / len(records),
        "exact_by_expert_verb": {v: [round(sum(x) / len(x), 3), len(x)] for v, x in sorted(by_verb.items())},
    }
    print(json.dumps(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
