"""How often a model picks the expert's action on held-out prompts: the walkthroughs of evaluation games
replayed with RL's prompt (``env_bridge.demonstrations``), the model's greedy answer parsed as RL parses
it, compared with the expert's command; and, teacher-forced, the mean log-probability the model gives each
word of the expert's command after the verb (the object, its number, the place: a finer signal than the
greedy match while a model is still learning to copy them). A quick diagnostic of a warm start,
independent of the environment's randomness; prints one JSON object (and writes it with ``--out``).

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
    argument_logp = expert_argument_logprobs(lm, prompts, records)
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
        "argument_logprob_by_expert_verb": argument_logp,
    }
    print(json.dumps(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


def expert_argument_logprobs(lm, prompts: list[list[int]], records: list[dict]) -> dict[str, float]:
    """Per expert verb, the mean teacher-forced log-prob of the command's tokens after the verb."""
    import jax.numpy as jnp
    import numpy as np

    from env_bridge.collate import length_bucket
    from models.scoring import score_tokens_jit

    by_verb: dict[str, list[float]] = collections.defaultdict(list)
    for prompt, r in zip(prompts, records, strict=True):
        verb, *arguments = r["action"].split()
        before = lm.tokenizer.encode(r["response"].split(r["action"])[0] + verb, add_special_tokens=False)
        argument_ids = lm.tokenizer.encode(" " + " ".join(arguments), add_special_tokens=False)
        if not argument_ids:
            continue
        tokens = [*prompt, *before, *argument_ids]
        n = length_bucket(len(tokens))
        padded = np.zeros((1, n), np.int32)
        padded[0, : len(tokens)] = tokens
        attention, mask = np.zeros((1, n), bool), np.zeros((1, n), bool)
        attention[0, : len(tokens)] = True
        mask[0, len(tokens) - len(argument_ids) : len(tokens)] = True
        logp = score_tokens_jit(lm.config, lm.params, jnp.asarray(padded), jnp.asarray(attention), jnp.asarray(mask))
        by_verb[verb].append(float(logp.sum()) / len(argument_ids))
    return {v: round(sum(x) / len(x), 3) for v, x in sorted(by_verb.items())}


if __name__ == "__main__":
    sys.exit(main())
