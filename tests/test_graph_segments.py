"""The segment primitives: packed-key interning equals the lexsort fallback; normalization edge cases."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from graph.segments import _intern_keys_lexsort, intern_keys, segment_normalize, sorting_permutation


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 9), st.booleans()), min_size=1, max_size=32))
def test_packed_interning_equals_lexsort_interning(entries):
    a = jnp.asarray([e[0] for e in entries], jnp.int32)
    b = jnp.asarray([e[1] for e in entries], jnp.int32)
    mask = jnp.asarray([e[2] for e in entries])
    packed_ids, packed_count = intern_keys((a, b), mask, bounds=(7, 10))
    lex_ids, lex_count = _intern_keys_lexsort((a, b), mask)
    assert int(packed_count) == int(lex_count) == len({(e[0], e[1]) for e in entries if e[2]})
    real = np.asarray(mask)
    np.testing.assert_array_equal(np.asarray(packed_ids)[real], np.asarray(lex_ids)[real])
    # padding entries: one id each, all >= count
    pad = np.asarray(packed_ids)[~real]
    assert len(set(pad.tolist())) == len(pad) and np.all(pad >= int(packed_count))


def test_huge_bounds_fall_back_to_lexsort():
    keys = (jnp.asarray([3, 1, 3], jnp.int32), jnp.asarray([2**30, 5, 2**30], jnp.int32))
    ids, count = jax.jit(lambda k, m: intern_keys(k, m, bounds=(2**20, 2**31 - 1)))(keys, jnp.ones(3, bool))
    assert np.asarray(ids).tolist() == [1, 0, 1] and int(count) == 2


def test_sorting_permutation_is_a_permutation_with_padding_last():
    traj = jnp.asarray([2, 0, 1, 0, 0], jnp.int32)
    turn = jnp.asarray([0, 1, 0, 0, 0], jnp.int32)
    mask = jnp.asarray([True, True, True, True, False])
    position = np.asarray(sorting_permutation((traj, turn), mask, bounds=(5, 5)))
    assert position.tolist() == [3, 1, 2, 0, 4]


def test_segment_normalize_singletons_and_masking():
    x = jnp.asarray([5.0, 1.0, 3.0, 7.0])
    seg = jnp.asarray([0, 1, 1, 2])
    weight = jnp.asarray([True, True, True, False])
    raw = segment_normalize(x, seg, weight, num_segments=4, mode="mean_std", epsilon=1e-6, singleton_raw=True)
    zero = segment_normalize(x, seg, weight, num_segments=4, mode="mean_std", epsilon=1e-6, singleton_raw=False)
    np.testing.assert_allclose(np.asarray(raw), [5.0, -0.7071064, 0.7071064, 0.0], atol=1e-6)
    np.testing.assert_allclose(np.asarray(zero), [0.0, -0.7071064, 0.7071064, 0.0], atol=1e-6)
