"""``make_report``: the sections of ``report.md``, in order, over runs grouped by method."""

from __future__ import annotations

from pathlib import Path

from ggtrain.report import sections
from ggtrain.report.loading import by_method, load_run


def make_report(run_dirs: list[Path], out: Path, threshold: float = 0.5) -> Path:
    """Writes ``out/report.md`` with ``success_curves.png`` and ``graph_diagnostics.png``; returns the
    markdown's path."""
    runs = [load_run(d) for d in run_dirs]
    groups = by_method(runs)
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        *sections.header(runs, groups, threshold),
        *sections.success_curves(groups, out),
        *sections.final_table(groups, threshold),
        *sections.task_types(groups),
        *sections.paired_differences(groups),
        *sections.overhead(groups),
        *sections.phase_times(groups),
        *sections.profile_traces(runs),
        *sections.graph_diagnostics(groups, out),
        *sections.run_list(runs),
    ]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
