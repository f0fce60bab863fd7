"""The last of Burn's tensor-op tests (``crates/burn-backend-tests/tests/tensor/{float,int,bool}/
ops``, tracel-ai/burn at 2c06be351006851d42fdb6df16b976f4a82d9747; ``burn-tensor/src/tests/ops``
before the move) that a coverage audit of those 1,031 tests found without a port with Burn's
values: int/ops/comparison.rs's broadcast comparisons, int/ops/roll.rs's empty roll,
bool/ops/select.rs's ``select_assign`` with ``update="add"`` (a logical or, where a true entry
stays true) and its ``*_vs_default`` twins (the same through the int path), and the draws of
float/ops/random.rs (``Bernoulli(1.)``) and int/ops/random.rs (``Uniform(0, 5)``), under every
checkpointing strategy on the chosen inner backend. Expected values are Burn's as its test
source writes them.

Burn's forms map to ours (API.md sections 2 and 10): ``select_assign(d, indices, values,
IndexingUpdateOp::Add)`` is ``select_assign(d, indices, values, update="add")``;
``roll(&shifts, &dims)`` is ``roll(shifts, dims)``; ``random(shape, Distribution::Bernoulli(p))``
is torch's ``rg.bernoulli(rg.full(shape, p))``; an int ``random(shape,
Distribution::Uniform(low, high))`` is torch's ``rg.randint(low, high, shape)``.
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from test_burn_ports import backend  # noqa: F401 (the autouse fixture: every strategy)

# ---- int/ops/comparison.rs --------------------------------------------------------------------


def test_int_not_equal_broadcast():
    lhs, rhs = rg.tensor([[1], [2], [3]]), rg.tensor([[1, 2, 3]])
    expected = [[False, True, True], [True, False, True], [True, True, False]]
    assert lhs.not_equal(rhs).tolist() == expected
    assert (lhs != rhs).tolist() == expected


def test_int_greater_broadcast():
    lhs, rhs = rg.tensor([[1, 2, 3]]), rg.tensor([[0], [2], [4]])
    expected = [[True, True, True], [False, False, True], [False, False, False]]
    assert lhs.greater(rhs).tolist() == expected
    assert (lhs > rhs).tolist() == expected


def test_int_lower_equal_broadcast():
    lhs, rhs = rg.tensor([[2], [4]]), rg.tensor([[1, 2, 3]])
    expected = [[False, True, True], [False, False, False]]
    assert lhs.lower_equal(rhs).tolist() == expected
    assert (lhs <= rhs).tolist() == expected


# ---- int/ops/roll.rs --------------------------------------------------------------------------


def test_roll_empty():
    empty = rg.zeros((12, 0), dtype="int64")
    out = empty.roll([1, 2], [0, 1])
    assert out.shape == (12, 0) and out.dtype == "int64"


# ---- bool/ops/select.rs -----------------------------------------------------------------------

BOOL_SELECT_ADD_CASES = [
    # (tensor, indices, values, Burn's expected)
    ([True, False, True], [0, 2], [False, True], [True, False, True]),
    ([False, True], [0, 0], [True, False], [True, True]),  # overlapping indices
    ([False], [0], [True], [True]),  # false to true
    ([True, False], [0, 0, 0], [True, True, True], [True, False]),  # true or true accumulates
    ([True], [0], [False], [True]),  # should_fail_if_replacement_semantics_were_used
    # should_match_default_implementation_behavior (Burn compares the two paths only; the
    # value is by hand: index 0 gathers true | false | true, index 1 false | true)
    ([True, False, True], [0, 1, 0], [False, True, True], [True, True, True]),
]


@pytest.mark.parametrize(("tensor", "indices", "update", "expected"), BOOL_SELECT_ADD_CASES)
def test_bool_select_assign_add_is_a_logical_or(tensor, indices, update, expected):
    out = rg.tensor(tensor).select_assign(0, rg.tensor(indices), rg.tensor(update), update="add")
    assert out.dtype == "bool"
    assert out.tolist() == expected


@pytest.mark.parametrize(("tensor", "indices", "update", "expected"), BOOL_SELECT_ADD_CASES)
def test_bool_select_assign_add_matches_the_int_path(tensor, indices, update, expected):
    # Burn's *_vs_default twins: the default implementation casts to int, adds, and compares
    # with 0; the bool path must agree with it
    index = rg.tensor(indices)
    direct = rg.tensor(tensor).select_assign(0, index, rg.tensor(update), update="add")
    through_int = rg.tensor(tensor).int().select_assign(0, index, rg.tensor(update).int())
    assert direct.tolist() == through_int.greater_elem(0).tolist() == expected


# ---- float/ops/random.rs, int/ops/random.rs ---------------------------------------------------


@pytest.fixture
def restored_rng():
    """The draws below advance the generator: hand the next test the state it had."""
    state = rg.get_rng_state()
    yield
    rg.set_rng_state(state)


def test_rand_bernoulli_of_probability_one(restored_rng):
    drawn = rg.bernoulli(rg.full((20,), 1.0))
    assert drawn.dtype == "float32"
    assert drawn.tolist() == [1.0] * 20


def test_rand_uniform_int(restored_rng):
    drawn = rg.randint(0, 5, (100_000,))
    assert drawn.dtype == "int64"
    values = np.asarray(drawn.numpy())
    assert values.min() >= 0 and values.max() < 5
    assert set(np.unique(values)) == {0, 1, 2, 3, 4}  # 100,000 draws reach every value
