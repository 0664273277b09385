"""``make_report``: the sections of ``report.md``, in order, over runs grouped by method."""

from __future__ import annotations

from pathlib import Path

from ggtrain.report import sections
from ggtrain.report.final import Entry, final_sections, last_evaluation_sections, load_outcomes
from ggtrain.report.loading import by_method, load_run


def make_report(run_dirs: list[Path], out: Path, threshold: float = 0.5, baseline: Path | None = None) -> Path:
    """Writes ``out/report.md`` with ``success_curves.png`` and ``graph_diagnostics.png``; returns the
    markdown's path. ``baseline``: a folder of ``<split>.jsonl`` outcomes compared with the runs' final
    evaluations (``<run>/eval_final/``); one without any is refused before anything is written."""
    reference = None
    if baseline:
        outcomes = load_outcomes(baseline)
        if not outcomes:
            raise ValueError(f"--baseline {baseline}: no <split>.jsonl outcome records there")
        reference = Entry(baseline.resolve().name, [None], [outcomes])
    runs = [load_run(d) for d in run_dirs]
    groups = by_method(runs)
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        *sections.header(runs, groups, threshold),
        *sections.success_curves(groups, out),
        *sections.final_table(groups, threshold),
        *last_evaluation_sections(groups),
        *final_sections(groups, reference),
        *sections.overhead(groups),
        *sections.phase_times(groups),
        *sections.profile_traces(runs),
        *sections.graph_diagnostics(groups, out),
        *sections.run_list(runs, out),
    ]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
