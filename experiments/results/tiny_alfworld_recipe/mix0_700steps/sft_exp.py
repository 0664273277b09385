"""The script that trained mix0_700steps/ (``python sft_exp.py 700 0.0 OUT``): the tiny-alfworld builder's
steps (``ggtrain.sft.run_sft_steps`` on the recipe's cached walkthrough demonstrations) with a step count
and uniform fraction from the command line, no final evaluation."""

import shutil
import sys
import time
from pathlib import Path

if __name__ == "__main__":
    import jax

    from ggtrain.config import resolve_config
    from ggtrain.policies import tiny_alfworld as ta
    from ggtrain.sft import run_sft_steps
    from ggtrain.sft_data import mix_uniform, walkthrough_records
    from models.decoder import init_params
    from models.pretrained import LanguageModel

    steps, frac, out = int(sys.argv[1]), float(sys.argv[2]), Path(sys.argv[3])
    sets = [f"SftConfig.steps={steps}", "SftConfig.validation_every=50", "SftConfig.checkpoint_every=100000"]
    config = resolve_config([ta.RECIPE_FILE], sets)
    tok = ta.alfworld_tokenizer()
    cfg = ta.model_config(tok)
    shutil.rmtree(out, ignore_errors=True)
    init = out / "init"
    LanguageModel(cfg, init_params(cfg, jax.random.PRNGKey(0)), tok).save(init)
    recs = walkthrough_records("train", config.rollout, config.data_dir, config.sft.walkthrough_games, config.seed)
    recs = mix_uniform(recs, frac, "tags", 0)
    t = time.time()
    model, res = run_sft_steps(config, init, recs, out / "m", False, progress=False)
    model.save(out / "m")
    print(res, "sft s", time.time() - t, flush=True)
