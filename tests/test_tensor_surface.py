"""The tensor-level surface of API.md section 8, each item against torch's semantics.

Expected values come from torch (installed in the test environment) or from central finite
differences (``nn_testing``), never from the code under test.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

import retrograd as rg
from backends import on_torch
from nn_testing import check_finite_differences, compare_with_torch
from retrograd.nn import functional as F  # noqa: N812

RNG = np.random.default_rng(7)


def _array(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape)


# -- triangles ------------------------------------------------------------------------------------
@pytest.mark.parametrize("diagonal", [-2, -1, 0, 1, 3])
@pytest.mark.parametrize("shape", [(4, 4), (3, 5), (2, 5, 3)])
def test_tril_triu_match_torch(shape, diagonal):
    a = _array(*shape)
    for name in ("tril", "triu"):
        expected = getattr(torch, name)(torch.tensor(a), diagonal).numpy()
        np.testing.assert_array_equal(getattr(rg, name)(rg.tensor(a), diagonal).numpy(), expected)
        np.testing.assert_array_equal(getattr(rg.tensor(a), name)(diagonal).numpy(), expected)


def test_tril_of_ones_is_the_causal_mask_and_keeps_int_and_bool_dtypes():
    mask = rg.tril(rg.ones(3, 3, dtype="bool"))
    assert mask.dtype == "bool"
    np.testing.assert_array_equal(mask.numpy(), torch.tril(torch.ones(3, 3, dtype=bool)).numpy())
    assert rg.ones(2, 2, dtype="int64").triu().tolist() == [[1, 1], [0, 1]]


def test_tril_triu_gradients():
    check_finite_differences(lambda x: x.tril(-1) * x, [_array(3, 4)])
    compare_with_torch(
        lambda x: x.triu(1).exp(), lambda x: x.triu(1).exp(), [_array(2, 3, 3)], "float64"
    )


def test_tril_errors():
    with pytest.raises(rg.ShapeError, match=r"tril.*2 dimensions.*\[3\]"):
        rg.ones(3).tril()
    with pytest.raises(rg.ShapeError, match="triu: diagonal"):
        rg.ones(3, 3).triu(0.5)


# -- masks, views, shapes -------------------------------------------------------------------------
def test_masked_fill_is_mask_fill_with_gradient():
    a = _array(3, 4)
    mask = a > 0.3
    compare_with_torch(
        lambda x: x.masked_fill(rg.tensor(mask), -1e9).softmax(-1),
        lambda x: x.masked_fill(torch.tensor(mask), -1e9).softmax(-1),
        [a],
        "float64",
    )
    with pytest.raises(rg.DTypeError, match="masked_fill"):
        rg.tensor(a).masked_fill(rg.ones(3, 4), 0.0)


def test_view_and_reshape_take_separate_ints_or_a_sequence():
    x = rg.tensor(_array(2, 3, 4))
    for shape in [(6, 4), (-1, 2), (24,), (2, 12)]:
        assert x.view(*shape).shape == torch.zeros(2, 3, 4).view(*shape).shape
        assert x.reshape(*shape).shape == x.reshape(shape).shape == x.view(shape).shape
    assert x.reshape(-1).shape == (24,)
    with pytest.raises(rg.ShapeError, match=r"view: cannot reshape \[2, 3, 4\]"):
        x.view(5, -1)
    with pytest.raises(rg.ShapeError, match="reshape: expected a shape"):
        x.reshape(2, "a")


def test_transpose_with_two_dims_swaps_them_and_without_the_last_two():
    a = _array(2, 3, 4)
    compare_with_torch(lambda x: x.transpose(0, 2), lambda x: x.transpose(0, 2), [a], "float64")
    compare_with_torch(lambda x: x.transpose(-1, 1), lambda x: x.transpose(-1, 1), [a], "float64")
    assert rg.tensor(a).transpose().shape == (2, 4, 3)
    with pytest.raises(rg.ShapeError, match="transpose: give both"):
        rg.tensor(a).transpose(0)
    with pytest.raises(rg.ShapeError, match="swap_dims"):
        rg.tensor(a).transpose(0, 3)


def test_metadata_methods():
    x = rg.tensor(_array(2, 3, 4)).require_grad()
    t = torch.zeros(2, 3, 4)
    assert x.size() == tuple(t.size()) and x.size(1) == t.size(1) and x.size(-1) == t.size(-1)
    assert x.dim() == t.dim() and x.numel() == t.numel()
    assert x.contiguous() is x
    assert x.requires_grad and (x * 2).requires_grad and not rg.ones(2).requires_grad
    with pytest.raises(rg.ShapeError, match="size"):
        x.size(3)


def test_flatten_function_and_split_with_dim_keyword():
    a = _array(2, 3, 4, 5)
    for start, end in [(0, -1), (1, 2), (1, -1), (-2, -1)]:
        expected = torch.flatten(torch.tensor(a), start, end).shape
        assert rg.flatten(rg.tensor(a), start, end).shape == tuple(expected)
    pieces = rg.tensor(a).split(2, dim=2)
    expected = torch.tensor(a).split(2, dim=2)
    assert [p.shape for p in pieces] == [tuple(p.shape) for p in expected]
    np.testing.assert_array_equal(pieces[-1].numpy(), expected[-1].numpy())
    pieces = rg.tensor(a).split(5, dim=-1)[0].split(1, dim=1)
    assert [p.shape for p in pieces] == [(2, 1, 4, 5)] * 3


def test_sum_and_mean_with_dim_and_keepdim():
    a = _array(2, 3, 4)
    for dim in [0, -1, (0, 2), [1]]:
        for keepdim in (False, True):
            compare_with_torch(
                lambda x, d=dim, k=keepdim: x.sum(dim=d, keepdim=k) + x.mean(d, k),
                lambda x, d=dim, k=keepdim: x.sum(dim=d, keepdim=k) + x.mean(d, k),
                [a],
                "float64",
            )
    with pytest.raises(rg.ShapeError, match="sum"):
        rg.tensor(a).sum(dim=3)


# -- list indices with negative entries -----------------------------------------------------------
def test_list_indices_with_negative_entries_as_torch():
    a = _array(2, 5, 3)
    for index in [(slice(None), [-1], slice(None)), ([-1, 0],), (slice(None), [-5, 4, -2])]:
        compare_with_torch(lambda x, i=index: x[i], lambda x, i=index: x[i], [a], "float64")
    with pytest.raises(rg.IndexOutOfRangeError, match="index -6 is out of range for dimension 1"):
        rg.tensor(a)[:, [-6]]
    with pytest.raises(rg.IndexOutOfRangeError, match="index 5 is out of range"):
        rg.tensor(a)[:, [5]]


# -- sampling, top-k ------------------------------------------------------------------------------
def test_multinomial_is_reproducible_and_follows_the_probabilities():
    probs = rg.tensor([[0.1, 0.0, 0.6, 0.3], [0.0, 0.0, 1.0, 0.0]])
    rg.seed(3)
    first = rg.multinomial(probs, num_samples=1)
    rg.seed(3)
    assert rg.multinomial(probs, 1).tolist() == first.tolist()
    assert first.shape == (2, 1) and first.dtype == "int64"
    rg.seed(5)
    draws = rg.multinomial(probs, 4000, replacement=True).numpy()
    assert draws.shape == (2, 4000)
    assert not (draws == 1).any() and (draws[1] == 2).all()
    frequencies = np.bincount(draws[0], minlength=4) / 4000
    np.testing.assert_allclose(frequencies, [0.1, 0.0, 0.6, 0.3], atol=0.03)


def test_multinomial_without_replacement_draws_distinct_categories():
    rg.seed(0)
    weights = rg.tensor([1.0, 2.0, 0.0, 3.0, 4.0])  # unnormalised, as torch accepts
    drawn = rg.multinomial(weights, 4).tolist()
    assert sorted(drawn) == [0, 1, 3, 4]
    # First draws follow p: over many seeds the first sample is category 4 about 40% of the time.
    firsts = []
    for seed in range(400):
        rg.seed(seed)
        firsts.append(rg.multinomial(weights, 2).tolist()[0])
    assert abs(firsts.count(4) / 400 - 0.4) < 0.07


def test_multinomial_errors():
    with pytest.raises(rg.DTypeError, match="multinomial: probs must be a float"):
        rg.multinomial(rg.tensor([1, 2], dtype="int64"))
    with pytest.raises(rg.ShapeError, match=r"multinomial.*\[2, 2, 2\]"):
        rg.multinomial(rg.ones(2, 2, 2))
    with pytest.raises(rg.InvalidArgumentError, match="without replacement from 3"):
        rg.multinomial(rg.ones(3), 4)


def test_topk_function_returns_values_and_indices_as_torch():
    a = RNG.permutation(24).reshape(2, 3, 4).astype(np.float64)
    for dim in (-1, 0, 1):
        for largest in (True, False):
            values, indices = rg.topk(rg.tensor(a), 2, dim=dim, largest=largest)
            expected = torch.topk(torch.tensor(a), 2, dim=dim, largest=largest)
            np.testing.assert_array_equal(values.numpy(), expected.values.numpy())
            np.testing.assert_array_equal(indices.numpy(), expected.indices.numpy())
    assert rg.tensor(a).topk(2, 1).values.shape == (2, 2, 4)  # torch's (values, indices)
    compare_with_torch(
        lambda x: rg.topk(x, 2)[0], lambda x: torch.topk(x, 2)[0], [_array(3, 5)], "float64"
    )


# -- no_grad --------------------------------------------------------------------------------------
def test_no_grad_records_nothing_and_restores_on_exit():
    x = rg.tensor([1.0, 2.0]).require_grad()
    with rg.no_grad():
        y = (x * 2).exp()
        assert not rg.is_grad_enabled()
        assert x.requires_grad  # leaves keep requiring grad
    assert not y.requires_grad
    assert rg.is_grad_enabled() and (x * 2).requires_grad


def test_no_grad_nests_with_enable_grad_and_survives_exceptions():
    x = rg.tensor([1.0]).require_grad()
    with rg.no_grad():
        with rg.no_grad():
            pass
        assert not rg.is_grad_enabled()
        with rg.enable_grad():
            assert (x * 2).requires_grad
        assert not (x * 2).requires_grad
    with pytest.raises(ValueError), rg.no_grad():
        raise ValueError
    assert rg.is_grad_enabled()
    mode = rg.no_grad()
    with mode, mode:  # one object entered twice
        pass
    assert rg.is_grad_enabled()
    # The count of threads with recording off, which the recording path reads first, is
    # back to zero.
    from retrograd.autodiff.grad_mode import DISABLED_THREADS

    assert DISABLED_THREADS[0] == 0


def test_no_grad_as_a_decorator():
    @rg.no_grad()
    def double(t):
        return t * 2

    x = rg.tensor([1.0]).require_grad()
    assert not double(x).requires_grad and double.__name__ == "double"
    assert (x * 2).requires_grad


def test_no_grad_is_per_thread():
    x = rg.tensor([1.0]).require_grad()
    inside, outside = threading.Event(), threading.Event()
    seen = {}

    def other():
        inside.wait()
        seen["tracked"] = (x * 2).requires_grad  # this thread never entered no_grad
        outside.set()

    thread = threading.Thread(target=other)
    thread.start()
    with rg.no_grad():
        inside.set()
        outside.wait()
    thread.join()
    assert seen["tracked"] is True


def test_set_grad_enabled():
    x = rg.tensor([1.0]).require_grad()
    with rg.set_grad_enabled(False):
        assert not (x * 2).requires_grad
    assert (x * 2).requires_grad


# -- creation varargs, dim keywords ---------------------------------------------------------------
def test_creation_functions_take_torch_varargs_and_the_shape_tuple():
    assert rg.ones(3, 3).shape == (3, 3) and rg.zeros(2, 3, dtype="float64").dtype == "float64"
    assert rg.zeros((2, 3), "int64").dtype == "int64"  # the positional form kept
    assert rg.ones(4).shape == (4,) and rg.zeros(()).shape == ()
    assert rg.randn(2, 5).shape == (2, 5) and rg.rand((3,)).shape == (3,)
    with pytest.raises(rg.ShapeError, match="zeros: negative dimension"):
        rg.zeros(2, -1)
    with pytest.raises(rg.ShapeError, match="ones: missing the shape"):
        rg.ones()


def test_dim_keywords():
    a, b = _array(2, 3), _array(2, 3)
    assert rg.cat([rg.tensor(a), rg.tensor(b)], dim=1).shape == (2, 6)
    assert rg.stack([rg.tensor(a), rg.tensor(b)], dim=-1).shape == (2, 3, 2)
    compare_with_torch(
        lambda x: F.softmax(x, dim=-1) + F.log_softmax(x, dim=0),
        lambda x: torch.softmax(x, dim=-1) + torch.log_softmax(x, dim=0),
        [a],
        "float64",
    )


# -- F.pad ----------------------------------------------------------------------------------------
PADS = [
    ((1, 2), "constant"),
    ((0, 1, 2, 0), "constant"),
    ((-1, 2, 1, -2), "constant"),
    ((1, 1, 1, 1, 1, 0), "constant"),
    ((2, 1), "reflect"),
    ((1, 2, 2, 1), "replicate"),
    ((2, 1, 1, 2), "circular"),
    ((-1, 2), "replicate"),
]


@pytest.mark.parametrize("amounts,mode", PADS)
def test_pad_matches_torch(amounts, mode):
    # torch pads n dims in non-constant modes only for inputs of n + 1 or n + 2 dims
    a = _array(2, 3, 4, 5) if len(amounts) > 2 or mode == "constant" else _array(3, 4, 5)
    value = 0.5 if mode == "constant" else 0.0
    extra = {"value": value} if mode == "constant" else {}
    compare_with_torch(
        lambda x: F.pad(x, amounts, mode=mode, **extra),
        lambda x: torch.nn.functional.pad(x, amounts, mode=mode, **extra),
        [a],
        "float64",
    )


def test_pad_gradients_by_finite_differences():
    check_finite_differences(lambda x: F.pad(x, (1, -1, 2, 1), value=3.0).tanh(), [_array(3, 4)])
    check_finite_differences(lambda x: F.pad(x, (2, 1), mode="reflect") ** 2, [_array(2, 4)])


def test_pad_errors():
    x = rg.ones(2, 3)
    with pytest.raises(rg.ShapeError, match=r"pad: pad \[1\] must hold"):
        F.pad(x, (1,))
    with pytest.raises(rg.ShapeError, match="pad: pad"):
        F.pad(x, (1, 1, 1, 1, 1, 1))
    with pytest.raises(rg.ShapeError, match="crops more than dimension 1 of size 3"):
        F.pad(x, (-2, -2))
    with pytest.raises(rg.ShapeError, match="reflect padding"):
        F.pad(x, (3, 0), mode="reflect")
    with pytest.raises(rg.InvalidArgumentError, match="pad: mode"):
        F.pad(x, (1, 1), mode="wrap")


# -- Gradients arithmetic -------------------------------------------------------------------------
def test_gradient_accumulation_equals_the_full_batch_gradient():
    w = rg.tensor(_array(3, 2)).require_grad()
    data = _array(4, 3)
    full = ((rg.tensor(data) @ w).tanh().sum() * 0.25).backward()
    halves = [((rg.tensor(data[i : i + 2]) @ w).tanh().sum() * 0.5).backward() for i in (0, 2)]
    accumulated = (halves[0] + halves[1]) * 0.5
    np.testing.assert_allclose(w.grad(accumulated).numpy(), w.grad(full).numpy(), rtol=1e-6)
    np.testing.assert_allclose(w.grad(sum(halves) / 2).numpy(), w.grad(full).numpy(), rtol=1e-6)
    np.testing.assert_allclose(w.grad(0.5 * halves[0]).numpy(), w.grad(halves[0]).numpy() * 0.5)
    assert w.grad(halves[0] * 1.0).dtype == w.dtype


def test_gradients_add_keeps_the_union_of_parameters():
    a = rg.tensor([1.0, 2.0]).require_grad()
    b = rg.tensor([3.0]).require_grad()
    ga = (a * a).sum().backward()
    gb = (b * 3).sum().backward()
    both = ga + gb
    assert a.grad(both).tolist() == [2.0, 4.0] and b.grad(both).tolist() == [3.0]
    assert b.grad(ga) is None  # the operands are unchanged


def test_gradients_arithmetic_errors():
    a = rg.tensor([1.0]).require_grad()
    grads = (a * 2).sum().backward()
    # (a plain backward's gradients and a create_graph one's of the same inner backend add:
    # test_reliability_regressions_27; these are of another inner backend)
    other_inner = rg.NumpyBackend() if on_torch() else rg.TorchBackend("cpu")
    with rg.use_backend(rg.Autodiff(other_inner)):
        b = rg.tensor([1.0]).require_grad()
        other = (b * 2).sum().backward(create_graph=True)
    with pytest.raises(rg.AutodiffError, match="different backends"):
        grads + other
    with pytest.raises(TypeError):
        grads * "2"
    with pytest.raises(rg.AutodiffError, match="division by zero"):
        grads / 0
