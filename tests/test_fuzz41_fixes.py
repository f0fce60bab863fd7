"""Regressions from round 41 of the fuzzer (``rg.func`` against ``torch.func``): ``vmap``'s
keyword arguments, nested in_dims, out_dim None, empty batches, ``randomness="same"``, and
the errors torch raises for bad in_dims, out_dims, randomness, chunk_size and outputs. The
expected values were read from torch 2.13 (or are the loop's own arithmetic, by hand)."""

from __future__ import annotations

import pytest

import retrograd as rg
from retrograd.func import vmap

X = rg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=rg.float64)
Y = rg.tensor([10.0, 20.0, 30.0], dtype=rg.float64)


def test_keyword_arguments_pass_through_unmapped():
    # torch.func.vmap(lambda a, scale=1.0: a * scale)(x, scale=2.0) == x * 2
    out = vmap(lambda a, scale=1.0: a * scale)(X, scale=2.0)
    assert out.tolist() == [[2.0, 4.0, 6.0], [8.0, 10.0, 12.0]]


def test_in_dims_nested_in_a_tuple_map_leaf_by_leaf():
    out = vmap(lambda p: p[0] + p[1], in_dims=((0, None),))((X, Y))
    assert out.tolist() == [[11.0, 22.0, 33.0], [14.0, 25.0, 36.0]]


def test_in_dims_nested_in_a_dict_map_leaf_by_leaf():
    out = vmap(lambda p: p["x"] * p["y"], in_dims=({"x": 1, "y": None},))({"x": X, "y": Y[:2]})
    # column j of X times Y[:2]: torch gives [[10, 80], [20, 100], [30, 120]]
    assert out.tolist() == [[10.0, 80.0], [20.0, 100.0], [30.0, 120.0]]


def test_in_dims_not_matching_the_input_structure_raise():
    with pytest.raises(rg.InvalidArgumentError, match="vmap"):
        vmap(lambda p: p[0], in_dims=((0, None, 0),))((X, Y))


def test_out_dim_none_returns_an_unbatched_output_as_it_is():
    out, same = vmap(lambda a: (a * 2, Y), out_dims=(0, None))(X)
    assert out.shape == (2, 3) and same.tolist() == Y.tolist()


def test_out_dim_none_for_an_output_that_varies_over_the_batch_raises():
    with pytest.raises(rg.InvalidArgumentError, match=r"vmap.*out_dim None"):
        vmap(lambda a: a * 2, out_dims=None)(X)


@pytest.mark.parametrize("out_dims, shape", [(0, (0, 3)), (1, (3, 0)), (-1, (3, 0))])
def test_an_empty_batch_gives_empty_results_of_torchs_shape(out_dims, shape):
    empty = rg.zeros(0, 3, dtype=rg.float64)
    out = vmap(lambda a, b: a + b, in_dims=(0, None), out_dims=out_dims)(empty, Y)
    assert tuple(out.shape) == shape


def test_randomness_same_draws_the_same_numbers_for_every_element():
    rg.manual_seed(0)
    out = vmap(lambda a: a + rg.rand(3, dtype=rg.float64), randomness="same")(rg.zeros(4, 3))
    assert all(out[k].tolist() == out[0].tolist() for k in range(4))
    # and the stream moves on: the next draw differs from the batch's
    assert rg.rand(3, dtype=rg.float64).tolist() != out[0].tolist()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"randomness": "sometimes"}, "randomness"),
        ({"chunk_size": 0}, "chunk_size"),
        ({"chunk_size": -1}, "chunk_size"),
        ({"chunk_size": 1.5}, "chunk_size"),
        ({"in_dims": [0]}, "in_dims"),
        ({"in_dims": None}, "in_dims"),
    ],
)
def test_bad_arguments_raise_naming_vmap(kwargs, match):
    with pytest.raises(rg.InvalidArgumentError, match=rf"vmap.*{match}"):
        vmap(lambda a: a, **kwargs)(X)


def test_a_number_mapped_over_raises():
    with pytest.raises(rg.InvalidArgumentError, match=r"vmap.*float"):
        vmap(lambda a, b: a * b)(X, 2.0)


def test_a_number_returned_raises():
    with pytest.raises(rg.InvalidArgumentError, match=r"vmap.*only return tensors"):
        vmap(lambda a: 1.5)(X)  # (a.sum().item() raises torch's .item() error first)


def test_an_out_dim_out_of_range_raises_naming_vmap():
    with pytest.raises(rg.ShapeError, match=r"vmap.*out_dim 5"):
        vmap(lambda a: a, out_dims=5)(X)


def test_no_inputs_raise():
    with pytest.raises(rg.InvalidArgumentError, match=r"vmap.*no inputs"):
        vmap(lambda: Y)()


def test_vmap_stays_usable_after_an_error():
    mapped = vmap(lambda a, b: a + b)
    with pytest.raises(rg.ShapeError, match="vmap"):
        mapped(X, Y[:2].reshape(2, 1)[:1])
    assert mapped(X, X).tolist() == (X * 2).tolist()


@pytest.mark.parametrize("chunk_size", [0, -3, 2.0])
def test_jacrev_refuses_a_chunk_size_torch_refuses(chunk_size):
    with pytest.raises(rg.InvalidArgumentError, match=r"jacrev.*chunk_size"):
        rg.func.jacrev(lambda a: a * 2, chunk_size=chunk_size)


def test_jacrev_with_a_chunk_size_gives_the_jacobian():
    jacobian = rg.func.jacrev(lambda a: a * a, chunk_size=1)(Y)
    assert jacobian.tolist() == [[20.0, 0.0, 0.0], [0.0, 40.0, 0.0], [0.0, 0.0, 60.0]]


def test_linearize_of_a_number_raises_naming_linearize():
    with pytest.raises(rg.DTypeError, match=r"linearize.*float"):
        rg.func.linearize(lambda a: a.sin(), 3.0)
