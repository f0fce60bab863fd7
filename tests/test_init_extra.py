"""nn.init: torch's deprecated spellings (orthogonal, eye, dirac, sparse) and sparse_."""

from __future__ import annotations

import math

import numpy as np
import pytest

import retrograd as rg
from retrograd import nn

torch = pytest.importorskip("torch")


def test_deterministic_aliases_match_torch():
    for shape, name, kwargs in [((3, 5), "eye", {}), ((4, 2, 3, 3), "dirac", {"groups": 2})]:
        ours = nn.Parameter(rg.zeros(shape, dtype="float64"))
        theirs = torch.zeros(shape, dtype=torch.float64)
        assert getattr(nn.init, name)(ours, **kwargs) is ours
        getattr(torch.nn.init, name + "_")(theirs, **kwargs)
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_random_aliases_draw_what_the_underscore_forms_draw():
    for name, args in [("orthogonal", (1.5,)), ("sparse", (0.3, 0.05))]:
        rg.seed(7)
        first = getattr(nn.init, name)(rg.zeros((6, 4), dtype="float64"), *args)
        rg.seed(7)
        second = getattr(nn.init, name + "_")(rg.zeros((6, 4), dtype="float64"), *args)
        np.testing.assert_array_equal(first.numpy(), second.numpy())
    q = nn.init.orthogonal(rg.zeros((6, 4), dtype="float64"), 1.5).numpy()
    np.testing.assert_allclose(q.T @ q, 2.25 * np.eye(4), atol=1e-12)


@pytest.mark.parametrize(("rows", "sparsity"), [(10, 0.1), (7, 0.5), (5, 0.0), (4, 1.0)])
def test_sparse_zeros_per_column_as_torch(rows, sparsity):
    theirs = torch.nn.init.sparse_(torch.empty(rows, 300, dtype=torch.float64), sparsity, 0.2)
    rg.seed(3)
    ours = nn.init.sparse_(nn.Parameter(rg.zeros((rows, 300), dtype="float64")), sparsity, 0.2)
    zeros = math.ceil(sparsity * rows)
    assert ((theirs == 0).sum(0) == zeros).all()
    np.testing.assert_array_equal((ours.numpy() == 0).sum(0), np.full(300, zeros))
    kept = ours.numpy()[ours.numpy() != 0]
    if kept.size > 500:
        assert abs(kept.std() - 0.2) < 0.02 and abs(kept.mean()) < 0.02
    rows_hit = (ours.numpy() == 0).any(1)
    assert rows_hit.all() or zeros == 0  # the zeros fall on every row somewhere


def test_sparse_refuses_other_than_2d():
    with pytest.raises(rg.ShapeError, match="2 dimensions"):
        nn.init.sparse_(rg.zeros((2, 3, 4)), 0.5)
