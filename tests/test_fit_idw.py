"""Inverse distance weighting (gmm_volunteer/fitting/idw.py; paper 2.2, ref. [22])."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gmm_volunteer.fitting.idw import idw


def test_exact_at_knots():
    knots = np.array([1.0, 2.0, 5.0, 10.0, 20.0, 50.0])
    vals = np.array([3.0, -1.0, 7.5, 0.0, 2.0, 9.0])
    np.testing.assert_array_equal(idw(knots, knots, vals), vals)
    assert idw(5.0, knots, vals) == 7.5


def test_midpoint_of_two_knots_is_their_mean():
    assert idw(1.5, [1.0, 2.0], [10.0, 20.0]) == pytest.approx(15.0)


def test_weights_follow_inverse_square_distance():
    # query 1 from knot a, 3 from knot b: weights 1 and 1/9
    assert idw(1.0, [0.0, 4.0], [0.0, 10.0]) == pytest.approx(10.0 * (1 / 9) / (1 + 1 / 9))
    # power 1: weights 1 and 1/3
    assert idw(1.0, [0.0, 4.0], [0.0, 10.0], power=1.0) == pytest.approx(10.0 * (1 / 3) / (1 + 1 / 3))


def test_matrix_values_and_2d_knots():
    out = idw([1.0, 3.0], [1.0, 3.0], np.array([[1.0, 2.0], [3.0, 4.0]]))
    np.testing.assert_array_equal(out, [[1.0, 2.0], [3.0, 4.0]])
    knots2 = np.array([[0.0, 0.0], [1.0, 1.0]])
    assert idw(np.array([[0.0, 0.0]]), knots2, [5.0, 6.0])[0] == 5.0


def test_rejects_mismatched_values():
    with pytest.raises(ValueError):
        idw(1.0, [1.0, 2.0], [1.0])


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.floats(0.1, 100.0), min_size=2, max_size=6, unique=True),
    st.lists(st.floats(-1e3, 1e3), min_size=6, max_size=6),
    st.floats(0.0, 200.0),
)
def test_result_within_knot_value_range(knots, values, q):
    v = np.array(values[: len(knots)])
    out = idw(q, knots, v)
    assert v.min() - 1e-9 <= out <= v.max() + 1e-9
