"""`ggtrain report` on run directories with known metrics."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from ggtrain.cli import main
from ggtrain.metrics import TOKENS, TRAIN_SUCCESS, MetricAccumulator, MetricsWriter
from ggtrain.report import bootstrap_interval, load_run, to_threshold

C0, C1 = (0x1F, 0x77, 0xB4), (0xFF, 0x7F, 0x0E)  # matplotlib's first two line colours


def png_pixels(path: Path, size: tuple[int, int]) -> np.ndarray:
    """The PNG as an RGB uint8 array, checked to be ``size`` (height, width) pixels."""
    from matplotlib.image import imread

    image = np.round(imread(path)[..., :3] * 255).astype(np.int16)
    assert image.shape[:2] == size, image.shape
    return image


def pixels_of(image: np.ndarray, colour: tuple[int, int, int], alpha: float = 1.0) -> int:
    """Pixels of ``colour`` drawn with ``alpha`` over the white background."""
    blended = alpha * np.asarray(colour) + (1 - alpha) * 255
    return int(np.sum(np.all(np.abs(image - blended) <= 2, axis=-1)))


def _run(
    root: Path,
    name: str,
    estimator: str,
    seed: int,
    success: list[float],
    wins: list[int],
    unreachable: float = 0.5,
    iterations: int | None = None,  # configured; default: as many as logged (a finished run)
) -> Path:
    run = root / name
    (run / "eval").mkdir(parents=True)
    config = {"estimator": estimator, "seed": seed, "loss": {"name": "ppo_clip"}}
    (run / "config.json").write_text(json.dumps(config | {"iterations": iterations or len(success)}))
    (run / "manifest.json").write_text(json.dumps({"jax": {"devices": ["cpu:0", "cpu:1"]}}))
    lines = []
    for i, s in enumerate(success, start=1):
        lines.append(
            {
                "step": i,
                "train/success_rate": s,
                "train/mean_turns": 10.0,
                "train/graph/trajectories": 8.0,
                "train/tokens": 1000.0,
                "train/rollout_s": 1.0,
                "train/update_s": 2.0,
                "train/iteration_s": 3600.0,
                "train/advantage_ms": 2.0 + i,
                "train/graph/unreachable_fraction": unreachable,
            }
        )
    lines.append({"step": len(success), "eval/success_rate": float(np.mean(wins))})
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    outcomes = [
        {
            "game_id": f"g{i}",
            "seed": 0,
            "won": bool(w),
            "task_type": "pick_and_place_simple",
            "turns": 5,
            "invalid_actions": 0,
            "split": "valid_seen",
        }
        for i, w in enumerate(wins)
    ]
    (run / "eval" / f"iteration_{len(success):04d}.jsonl").write_text("\n".join(json.dumps(x) for x in outcomes))
    return run


def test_threshold_costs_and_report(tmp_path, capsys):
    a = _run(tmp_path, "a", "graphgpo", 0, [0.1, 0.4, 0.6, 0.8], [1, 1, 0, 1])
    b = _run(tmp_path, "b", "grpo", 0, [0.1, 0.2, 0.3, 0.5], [0, 1, 0, 0], unreachable=0.25)
    cost = to_threshold(load_run(a), 0.5)
    assert cost == {"iterations": 3.0, "env_steps": 240.0, "tokens": 3000.0, "device_hours": 6.0}
    assert to_threshold(load_run(b), 0.9)["iterations"] is None
    assert main(["report", str(a), str(b), "--out", str(tmp_path / "rep"), "--threshold", "0.5"]) == 0
    report = (tmp_path / "rep" / "report.md").read_text()
    assert "| graphgpo | 1 | 0.750 ± – | 0.475 | 3 (1/1 reached) |" in report  # no spread from one run
    assert "| valid_seen | graphgpo − grpo | 4 | +0.500 |" in report  # the last evaluation during training
    assert "| graphgpo | 0.750 (4) |" in report and "| grpo | 0.250 (4) |" in report  # its task type
    assert "| grpo | 5.000 |" in report  # advantage ms 3, 4, 5, 6: the first (compile) is left out
    assert report.rstrip().endswith("Runs: `../a`, `../b`")  # relative to the report: true in any clone
    # the curves are drawn: each method's line colour (graphgpo C0, grpo C1, in sorted order) in each panel
    curves = png_pixels(tmp_path / "rep" / "success_curves.png", (4 * 120, 11 * 120))
    train_panel, eval_panel = curves[:, : curves.shape[1] // 2], curves[:, curves.shape[1] // 2 :]
    for colour in (C0, C1):
        assert pixels_of(train_panel, colour) > 100 and pixels_of(eval_panel, colour) > 10
    diagnostics = png_pixels(tmp_path / "rep" / "graph_diagnostics.png", (int(3.5 * 120), 6 * 120))
    assert pixels_of(diagnostics, C0, alpha=0.6) > 100 and pixels_of(diagnostics, C1, alpha=0.6) > 100


def test_tokens_to_threshold_sum_every_optimizer_step_of_every_iteration(tmp_path, capsys):
    """Each iteration's ``train/tokens`` is its total over all its optimizer steps (per-step (sum, 0)
    pairs through the accumulator and writer, as the train loop logs them); the cost to reach the
    threshold sums those totals, not per-step means."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"estimator": "grpo", "seed": 0, "loss": {"name": "ppo_clip"}}))
    (run / "manifest.json").write_text(json.dumps({"jax": {"devices": ["cpu:0"]}}))
    per_step_tokens = [[100, 120, 80], [90, 110], [50, 60, 70, 80], [500]]  # optimizer steps per iteration
    writer = MetricsWriter(run, process_index=0)
    for iteration, (steps, success) in enumerate(zip(per_step_tokens, [0.1, 0.3, 0.6, 0.9], strict=True), start=1):
        acc = MetricAccumulator()
        for tokens in steps:
            acc.add({"tokens": (tokens, 0.0), "loss": (0.5, 1.0)})
        timings = {"iteration_s": 1.0, "rollout_s": 0.5, "update_s": 0.4, "advantage_ms": 1.0}
        writer.write(iteration, {"success_rate": success} | timings | acc.means())
    writer.close()
    run_record = load_run(run)
    assert [run_record.train[k][TOKENS] for k in (1, 2, 3, 4)] == [300.0, 200.0, 260.0, 500.0]
    assert run_record.train[3][TRAIN_SUCCESS] == 0.6
    assert to_threshold(run_record, 0.5)["tokens"] == 760.0  # 300 + 200 + 260, not the step means' 265
    assert to_threshold(run_record, 0.5)["iterations"] == 3.0
    assert to_threshold(run_record, 0.95)["tokens"] is None
    assert main(["report", str(run), "--out", str(tmp_path / "rep")]) == 0
    report = (tmp_path / "rep" / "report.md").read_text()
    assert "| 760 (1/1 reached) |" in report and "Tokens: trained response tokens" in report


def test_bootstrap_interval_is_the_percentile_interval_of_the_resampled_mean():
    # 5 outcomes, 3 wins: a resample's mean is Binomial(5, 0.6) / 5, whose 2.5 % and 97.5 % quantiles are
    # 0.2 (P(0 wins) = 1.0 %, P(<= 1) = 8.7 %) and 1.0 (P(<= 4 wins) = 92.2 %)
    assert bootstrap_interval(np.asarray([0.0, 1.0, 1.0, 0.0, 1.0])) == (0.2, 1.0)
    # 400 outcomes, 120 wins: the normal approximation, 0.3 -+ 1.96 sqrt(0.3 * 0.7 / 400) = 0.3 -+ 0.0449
    lo, hi = bootstrap_interval(np.repeat([1.0, 0.0], [120, 280]))
    np.testing.assert_allclose([lo, hi], [0.3 - 0.0449, 0.3 + 0.0449], atol=0.004)
    assert all(np.isnan(bootstrap_interval(np.zeros(0))))


def test_the_cluster_bootstrap_resamples_whole_clusters():
    from ggtrain.report.statistics import cluster_bootstrap_interval

    per_game = np.asarray([1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    # each game's value three times (three run seeds agreeing): the interval of the seven games' values,
    # not of 21 independent values (which would be narrower)
    repeated = np.repeat(per_game, 3)
    games = [g for g in range(7) for _ in range(3)]
    assert cluster_bootstrap_interval(repeated, games) == bootstrap_interval(per_game)
    lo, hi = bootstrap_interval(repeated)
    assert hi - lo < np.subtract(*cluster_bootstrap_interval(repeated, games)[::-1])
    # one value per cluster: the plain bootstrap
    assert cluster_bootstrap_interval(per_game, list(range(7))) == bootstrap_interval(per_game)


def test_the_seeds_then_games_bootstrap_counts_how_much_training_runs_differ():
    from ggtrain.report.statistics import cluster_bootstrap_interval, seeds_then_games_interval

    # run seed 0 won every game more than the other side, run seed 1 none: each game's two pairs average
    # +0.5, so resampling games alone is sure of +0.5; another training run could give 0 or +1
    values = np.asarray([1.0] * 20 + [0.0] * 20)
    seeds, games = [0] * 20 + [1] * 20, list(range(20)) * 2
    assert cluster_bootstrap_interval(values, games) == (0.5, 0.5)
    lo, hi = seeds_then_games_interval(values, seeds, games)
    assert (lo, hi) == (0.0, 1.0)
    # one run seed: the same as resampling the games
    one = np.asarray([1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    np.testing.assert_allclose(
        seeds_then_games_interval(one, [0] * 7, list(range(7))),
        cluster_bootstrap_interval(one, list(range(7))),
        atol=0.05,
    )
    assert all(np.isnan(seeds_then_games_interval(np.zeros(0), [], [])))


def test_report_refuses_a_non_run_directory(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "not a run directory" in capsys.readouterr().err


def _outcomes(folder: Path, split: str, wins: list[int], dropped: int = 0, seed: int = 0) -> None:
    """Four games' outcomes under evaluation seed ``seed``; the last ``dropped`` games were dropped (env
    failures: lost, not completed)."""
    folder.mkdir(parents=True, exist_ok=True)
    types = ["pick_and_place_simple", "pick_and_place_simple", "look_at_obj_in_light", "look_at_obj_in_light"]
    records = [
        {"split": split, "game_id": i, "task_type": t, "seed": seed, "won": bool(w), "turns": 9, "invalid_actions": 0}
        | {"completed": i < 4 - dropped}
        for i, (t, w) in enumerate(zip(types, wins, strict=True))
    ]
    (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_final_evaluations_pair_every_run_seed_with_the_baseline_and_pool_episodes_for_wilson(tmp_path, capsys):
    from ggtrain.evaluate import wilson_interval

    g0 = _run(tmp_path, "g0", "graphgpo", 0, [0.1], [0])
    g1 = _run(tmp_path, "g1", "graphgpo", 1, [0.1], [0])
    r0 = _run(tmp_path, "r0", "grpo", 0, [0.1], [0], iterations=12)
    _outcomes(g0 / "eval_final", "valid_seen", [1, 1, 0, 0])
    _outcomes(g1 / "eval_final", "valid_seen", [1, 1, 1, 0])
    _outcomes(r0 / "eval_final", "valid_seen", [0, 1, 0, 0], dropped=1)
    _outcomes(tmp_path / "warm_start", "valid_seen", [0, 1, 0, 0])
    out = tmp_path / "rep"
    args = ["report", str(g0), str(g1), str(r0), "--out", str(out), "--baseline", str(tmp_path / "warm_start")]
    assert main(args) == 0
    report = (out / "report.md").read_text()
    assert "**Unfinished runs** (iterations logged of those configured): `r0` (1 of 12)." in report
    assert report.count("Unfinished") == 1  # g0 and g1 logged all theirs
    lo, hi = wilson_interval(5, 8)
    # seeds at 0.5 and 0.75: the sample std, sqrt(2) x 0.125 (the population std would be 0.125)
    assert f"| valid_seen | graphgpo | 2 | 0 | 0.625 ± 0.177 | 5 / 8 | [{lo:.3f}, {hi:.3f}] | 0 |" in report
    assert "| valid_seen | warm_start | 1 | 0 | 0.250 ± – | 1 / 4 |" in report
    # both graphgpo seeds won game 0 (the baseline lost it), seed 1 also game 2: +3 / 8
    assert "| valid_seen | graphgpo − warm_start | 8 | +0.375 |" in report
    assert "| valid_seen | graphgpo − grpo | 4 | +0.250 |" in report  # only run seed 0 is in both
    assert "| valid_seen | grpo | 1 | 0 | 0.250 ± – | 1 / 4 | [" in report and report.count("] | 1 |") == 1  # 1 dropped
    assert "| warm_start | 0.000 (2) | 0.500 (2) |" in report  # look_at_obj_in_light, then pick_and_place
    assert "| graphgpo | 0.250 (4) | 1.000 (4) |" in report
    refused = tmp_path / "refused"
    assert main([*args[:5], str(refused), "--baseline", str(tmp_path / "nothing")]) == 2
    assert "--baseline" in (err := capsys.readouterr().err) and "no <split>.jsonl" in err
    assert not refused.exists()  # refused before anything is written


def test_further_evaluation_seeds_are_read_from_seed_folders_paired_per_seed_and_resampled_by_game(tmp_path, capsys):
    from ggtrain.report.statistics import cluster_bootstrap_interval

    run = _run(tmp_path, "g0", "graphgpo", 0, [0.1], [0])
    warm = tmp_path / "warm_start"
    _outcomes(run / "eval_final", "valid_seen", [1, 1, 0, 0])
    _outcomes(run / "eval_final" / "seed1", "valid_seen", [1, 0, 0, 0], seed=1)
    _outcomes(warm, "valid_seen", [0, 1, 0, 0])
    _outcomes(warm / "seed1", "valid_seen", [0, 0, 0, 0], seed=1)
    out = tmp_path / "rep"
    assert main(["report", str(run), "--out", str(out), "--baseline", str(warm)]) == 0
    report = (out / "report.md").read_text()
    assert "| valid_seen | graphgpo | 1 | 0, 1 | 0.375 ± – | 3 / 8 |" in report
    assert "| valid_seen | warm_start | 1 | 0, 1 | 0.125 ± – | 1 / 8 |" in report
    # pairs per (game, evaluation seed): game 0 is +1 under both seeds, every other pair 0. Resampled by
    # game, game 0's two pairs are drawn together, not as two independent games
    lo, hi = cluster_bootstrap_interval(np.asarray([1.0, 1, 0, 0, 0, 0, 0, 0]), [0, 0, 1, 1, 2, 2, 3, 3])
    assert f"| valid_seen | graphgpo − warm_start | 8 | +0.250 | [{lo:+.3f}, {hi:+.3f}] |" in report
    assert (lo, hi) != cluster_bootstrap_interval(np.asarray([1.0, 1, 0, 0, 0, 0, 0, 0]), list(range(8)))
    _outcomes(warm / "seeds_old", "valid_seen", [1, 1, 1, 1])  # not a seed<K> folder: not read
    assert main(["report", str(run), "--out", str(out), "--baseline", str(warm)]) == 0
    assert "| valid_seen | warm_start | 1 | 0, 1 | 0.125 ± – | 1 / 8 |" in (out / "report.md").read_text()
    refused = tmp_path / "refused"
    _outcomes(warm / "seed7", "valid_seen", [0, 1, 0, 0])  # seed 0's outcomes, in seed 7's folder
    assert main(["report", str(run), "--out", str(refused), "--baseline", str(warm)]) == 2
    assert f"{warm / 'seed7' / 'valid_seen.jsonl'}:1: played under evaluation seed 0, not 7" in capsys.readouterr().err
    shutil.rmtree(warm / "seed7")
    # one file of seeds 0 and 1 (as `ggtrain eval --seeds 0 1` writes it) beside seed1/: seed 1's games twice
    both = (warm / "valid_seen.jsonl").read_text() + (warm / "seed1" / "valid_seen.jsonl").read_text()
    (warm / "valid_seen.jsonl").write_text(both)
    assert main(["report", str(run), "--out", str(refused), "--baseline", str(warm)]) == 2
    twice = (
        f"{warm / 'seed1' / 'valid_seen.jsonl'}: game 0 under evaluation seed 1 is also in {warm / 'valid_seen.jsonl'}"
    )
    assert twice in capsys.readouterr().err
    assert not refused.exists()


def test_the_curves_seed_band_is_the_sample_std_as_in_the_tables():
    from ggtrain.report.sections import _mean_band

    steps = np.array([1, 2])
    common, mean, band = _mean_band([(steps, np.array([0.0, 0.5])), (steps, np.array([1.0, 0.5]))])
    assert common == [1, 2]
    np.testing.assert_allclose(mean, [0.5, 0.5])
    np.testing.assert_allclose(band, [np.sqrt(0.5), 0.0])  # the population std would be 0.5
    assert _mean_band([(steps, np.array([0.2, 0.4]))])[2].tolist() == [0.0, 0.0]
