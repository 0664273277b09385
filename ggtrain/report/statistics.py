"""The numbers of the report: bootstrap intervals, the area under the success curve, and the cost of
reaching a success threshold. (The Wilson interval of one evaluation is ``ggtrain.evaluate``'s.)"""

from __future__ import annotations

import numpy as np

from ggtrain.metrics import ITERATION_S, MEAN_TURNS, TOKENS, TRAIN_SUCCESS, TRAJECTORIES
from ggtrain.report.loading import Run


def bootstrap_interval(values: np.ndarray, rounds: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95 % percentile-bootstrap interval of the mean (NaN, NaN for no values)."""
    if len(values) == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = rng.choice(values, size=(rounds, len(values)), replace=True).mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def cluster_bootstrap_interval(
    values: np.ndarray, clusters: list[object], rounds: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """95 % percentile-bootstrap interval of the mean, resampling whole clusters (e.g. the games, whose
    outcomes are paired over several run seeds and so not independent); each resample's mean is over all
    the values of the clusters drawn. With one value per cluster it is ``bootstrap_interval``."""
    if len(values) == 0:
        return float("nan"), float("nan")
    keys = sorted(set(clusters), key=str)
    index = {k: i for i, k in enumerate(keys)}
    ids = np.asarray([index[c] for c in clusters])
    sums, counts = np.bincount(ids, weights=values), np.bincount(ids)
    draws = np.random.default_rng(seed).choice(len(keys), size=(rounds, len(keys)), replace=True)
    means = sums[draws].sum(axis=1) / counts[draws].sum(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def seeds_then_games_interval(
    values: np.ndarray, run_seeds: list[object], games: list[object], rounds: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """95 % percentile-bootstrap interval of the mean of paired values indexed by (run seed, game): each
    round draws the run seeds with replacement, then the games (one draw shared by the seeds, which
    played the same games), and takes the mean over the drawn cells. Unlike resampling games alone, it
    counts how much another training run could differ; with one run seed the two agree."""
    if len(values) == 0:
        return float("nan"), float("nan")
    seed_keys, game_keys = sorted(set(run_seeds), key=str), sorted(set(games), key=str)
    r = np.asarray([seed_keys.index(s) for s in run_seeds])
    g = np.asarray([game_keys.index(x) for x in games])
    sums, counts = np.zeros((len(seed_keys), len(game_keys))), np.zeros((len(seed_keys), len(game_keys)))
    np.add.at(sums, (r, g), values)
    np.add.at(counts, (r, g), 1.0)
    rng = np.random.default_rng(seed)
    seed_weights = rng.multinomial(len(seed_keys), np.full(len(seed_keys), 1 / len(seed_keys)), size=rounds)
    game_weights = rng.multinomial(len(game_keys), np.full(len(game_keys), 1 / len(game_keys)), size=rounds)
    numerators = np.einsum("ks,sg,kg->k", seed_weights, sums, game_weights)
    denominators = np.einsum("ks,sg,kg->k", seed_weights, counts, game_weights)
    means = numerators[denominators > 0] / denominators[denominators > 0]
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def sample_std(values: list[float]) -> str:
    """The standard deviation over runs (n − 1 in the denominator) as the report prints it; one run: –."""
    return f"{np.std(values, ddof=1):.3f}" if len(values) > 1 else "–"


def success_auc(run: Run) -> float:
    """Area under the training success curve, per iteration (its mean over the logged iterations)."""
    return float(np.nanmean(run.series(TRAIN_SUCCESS)[1]))


def to_threshold(run: Run, threshold: float) -> dict[str, float | None]:
    """Iterations, environment steps, trained tokens and device-hours until the training success rate
    first reaches ``threshold`` (None when it never does). Costs are summed over the iterations up to
    and including that one: environment steps = turns per episode x trajectories, tokens = the
    iterations' ``train/tokens`` totals (every optimizer step's trained response tokens), device-hours =
    iteration seconds x devices."""
    steps, success = run.series(TRAIN_SUCCESS)
    hit = np.flatnonzero(success >= threshold)
    if not len(hit):
        return {"iterations": None, "env_steps": None, "tokens": None, "device_hours": None}
    k = hit[0] + 1

    def total(key: str) -> np.ndarray:
        return run.series(key)[1][:k]

    return {
        "iterations": float(steps[hit[0]]),
        "env_steps": float(np.nansum(total(MEAN_TURNS) * total(TRAJECTORIES))),
        "tokens": float(np.nansum(total(TOKENS))),
        "device_hours": float(np.nansum(total(ITERATION_S)) * run.devices / 3600),
    }
