"""``ggtrain report RUN_DIR [RUN_DIR ...]``: markdown plus PNG plots comparing runs (methods × seeds).

Curves with seed bands, final evaluation mean ± std, per-task-type success, paired per-game differences
between methods with a bootstrap interval, area under the success curve, iterations / environment steps /
trained tokens / device-hours to reach a threshold fixed in advance, graph diagnostics over time, and
the overhead of the advantage computation next to the whole iteration time.

Tokens are the trained response tokens (those under the loss mask) of every optimizer step: each
iteration's ``train/tokens`` is its total over all its mini-batches and epochs, and the cost to reach
the threshold sums those totals over the iterations up to the first that reaches it.

- ``loading``: ``Run`` and ``load_run`` (a run directory's config, manifest, metrics, last outcomes)
- ``statistics``: ``bootstrap_interval``, ``success_auc``, ``to_threshold``
- ``sections``: one function per section of ``report.md``, each returning its markdown lines
- ``final``: the tables over evaluation outcomes (success, task types, paired per-game differences), for
  the final evaluations on whole splits and the last evaluation during training
- ``make``: ``make_report``, the sections in order
"""

from ggtrain.report.loading import Run, by_method, load_run
from ggtrain.report.make import make_report
from ggtrain.report.statistics import bootstrap_interval, success_auc, to_threshold

__all__ = ["Run", "bootstrap_interval", "by_method", "load_run", "make_report", "success_auc", "to_threshold"]
