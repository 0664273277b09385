"""The jitted estimators against the plain-Python reference on random batches (hypothesis)."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings

from graph import compute_advantages
from tests.graph_strategies import configs, turn_batches
from tests.reference_advantages import reference_advantages

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _compare(method, rows, options):
    actual = compute_advantages(method, rows, **options)
    expected = np.asarray(reference_advantages(method, rows, **options))
    assert np.all(np.isfinite(actual))
    np.testing.assert_allclose(actual, expected, atol=2e-4, rtol=1e-4)
    assert np.all(actual[~rows["row_mask"]] == 0.0)


@SETTINGS
@given(turn_batches(), configs)
def test_grpo_matches_reference(rows, options):
    _compare("grpo", rows, options)


@SETTINGS
@given(turn_batches(), configs)
def test_gigpo_matches_reference(rows, options):
    _compare("gigpo", rows, options)


@SETTINGS
@given(turn_batches(), configs)
def test_graphgpo_matches_reference(rows, options):
    _compare("graphgpo", rows, options)


@SETTINGS
@given(turn_batches(), configs)
def test_graph_only_matches_reference(rows, options):
    _compare("graph_only", rows, options)
