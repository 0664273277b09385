"""What a policy does on the first N evaluation games, played exactly as ``ggtrain eval`` plays them (the
same games, game seeds, sampling seed and temperature): per command verb, how often it is chosen and how
often it was an invalid action (with ``RolloutConfig.strict_actions``, also every inadmissible command);
how often a command repeats the trajectory's previous one; the malformed answers (how many were cut at
the new-token limit, and the first few as written); and the wins. It tells a policy that stops trying
from one that tries the wrong things. Prints one JSON object (and writes it with ``--out``).

    python experiments/policy_actions.py --run RUN_DIR [--games 24]
    python experiments/policy_actions.py --model tiny-alfworld --config grpo --config alfworld_comparison
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def verb(action: str) -> str:
    """The command's first word (``go to desk 1``: ``go``); ``(none)`` for an answer with no command."""
    return action.split()[0] if action.strip() else "(none)"


def action_profile(turns: list[Any]) -> dict[str, Any]:
    """Per verb: turns, invalid turns and the invalid share; and the share of turns repeating the same
    trajectory's previous command. ``turns`` are ``env_bridge.rollout.Turn``s in play order."""
    chosen: collections.Counter[str] = collections.Counter()
    invalid: collections.Counter[str] = collections.Counter()
    previous: dict[int, str] = {}
    repeats = 0
    for turn in turns:
        v = verb(turn.action)
        chosen[v] += 1
        invalid[v] += not turn.valid
        repeats += previous.get(turn.traj) == turn.action
        previous[turn.traj] = turn.action
    by_verb = {
        v: {"turns": n, "invalid": invalid[v], "invalid_share": round(invalid[v] / n, 3)}
        for v, n in chosen.most_common()
    }
    total = sum(chosen.values())
    return {
        "turns": total,
        "invalid_share": round(sum(invalid.values()) / max(total, 1), 3),
        "repeat_share": round(repeats / max(total, 1), 3),
        "by_verb": by_verb,
    }


def malformed_answers(turns: list[Any], max_new_tokens: int, examples: int = 8) -> dict[str, Any]:
    """The answers the ``tags`` format rejects whatever the command (``parse_action`` without strict
    actions): how many, why, how many stopped at the new-token limit (cut short rather than written
    wrong), and the first ``examples`` of them as written."""
    from env_bridge.actions import parse_action

    reasons = [(t, parse_action(t.response_text).reason) for t in turns]
    malformed = [(t, reason) for t, reason in reasons if reason]
    return {
        "malformed": len(malformed),
        "malformed_reasons": dict(collections.Counter(reason for _, reason in malformed).most_common()),
        "malformed_at_token_limit": sum(len(t.response_ids) >= max_new_tokens for t, _ in malformed),
        "malformed_examples": [t.response_text for t, _ in malformed[:examples]],
    }


def main(argv: list[str] | None = None) -> int:
    from env_bridge.worker_pool import EnvPool
    from ggtrain.config import config_file, config_from_dict, resolve_config
    from ggtrain.evaluate import play_evaluation
    from ggtrain.run import evaluation_games
    from ggtrain.run_policy import model_dir, restore_run_policy
    from models import load_pretrained

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", help="a run directory: its config.json and newest checkpoint")
    source.add_argument("--model", help="a model directory or alias, played with the --config files' settings")
    parser.add_argument("--config", action="append", default=[], help="gin file or name (with --model)")
    parser.add_argument("--games", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0, help="the evaluation seed")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args(argv)
    if args.games < 1:
        parser.error(f"--games {args.games}: expected at least 1")
    if args.run and args.config:
        parser.error("--run plays with the run's own config.json: drop --config")
    if args.run:
        config = config_from_dict(json.loads((Path(args.run) / "config.json").read_text()))
        path = model_dir(config.model.path, "the run's ModelSpec.path")
        lm, params, step = restore_run_policy(Path(args.run), config, path)
    else:
        config = resolve_config(
            [config_file(c) for c in args.config or ["quickstart"]], [f"ModelSpec.path='{args.model}'"]
        )
        lm, step = load_pretrained(model_dir(args.model, "--model")), 0
        params = lm.params
    games = evaluation_games(config, config.eval.split, args.games)
    with EnvPool(config.rollout.env, config.rollout.workers) as pool:
        result = play_evaluation(config, lm.config, params, lm.tokenizer, games, args.seed, pool)
    wins = {e.group: e.won for e in result.episodes}
    out = {
        "source": args.run or args.model,
        "step": step,
        "split": config.eval.split,
        "games": len(games),
        "seed": args.seed,
        "temperature": config.eval.temperature,
        "max_turns": config.eval.max_turns,
        "strict_actions": config.rollout.strict_actions,
        "wins": sum(wins.values()),
        "won_games": [games[g].game_id for g, won in sorted(wins.items()) if won],
        **action_profile(turns := sorted(result.turns, key=lambda t: (t.traj, t.turn))),
        **(malformed_answers(turns, config.rollout.max_new_tokens) if config.rollout.action_format == "tags" else {}),
    }
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
