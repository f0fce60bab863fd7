"""Regressions found by the round-52 reduction, scan and sorting programs
(tests/test_random_reductions_52.py); expected values and refusals from torch."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")

INF, NAN = float("inf"), float("nan")


def _same(got, want) -> None:
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_array_equal(got.detach().numpy(), want.detach().numpy())


# -- var_mean/std_mean: torch's mean is Welford's running one --------------------------------
@pytest.mark.parametrize("function", ["var_mean", "std_mean"])
@pytest.mark.parametrize(
    ("data", "kwargs"),
    [
        ([1.0, INF, 2.0], {}),  # an infinity with a value after it: NaN
        ([1.0, 2.0, INF], {}),  # the last value, alone: inf
        ([INF], {}),
        ([INF, INF], {"correction": 0}),
        ([-INF, 3.0], {}),
        ([[1.0, INF], [INF, 3.0]], {"dim": 1}),
        ([[1.0, INF], [INF, 3.0]], {"dim": 0, "keepdim": True}),
        ([[1.0, INF, 2.0], [-INF, 0.0, 3.0]], {"dim": (0, 1)}),
        ([[1.0, 0.0], [2.0, -INF]], {"dim": [1, 0], "keepdim": True}),
    ],
)
def test_var_mean_mean_of_an_infinity_is_nan_unless_it_comes_last(function, data, kwargs):
    # retrograd's mean was the plain one (inf); torch's var_mean accumulates x - mean
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch: degrees of freedom <= 0)
        want = getattr(torch, function)(torch.tensor(data, dtype=torch.float64), **kwargs)
    got = getattr(rg, function)(rg.tensor(data, dtype=rg.float64), **kwargs)
    for ours, theirs in zip(got, want, strict=True):
        _same(ours, theirs)


def test_var_mean_gradient_of_finite_data_unchanged() -> None:
    torch.manual_seed(0)
    data = torch.randn(3, 4, dtype=torch.float64)
    weights = torch.randn(3, dtype=torch.float64)
    x_t = data.clone().requires_grad_()
    var_t, mean_t = torch.var_mean(x_t, dim=1)
    ((var_t + mean_t) * weights).sum().backward()
    x_r = rg.tensor(data.numpy(), requires_grad=True)
    var_r, mean_r = rg.var_mean(x_r, dim=1)
    grads = rg.autograd.grad(((var_r + mean_r) * rg.tensor(weights.numpy())).sum(), x_r)
    np.testing.assert_allclose(grads[0].numpy(), x_t.grad.numpy(), rtol=1e-12, atol=1e-12)


# -- quantile's dtypes -------------------------------------------------------------------------
def test_quantile_refuses_a_q_tensor_of_another_dtype() -> None:
    x = [1.0, 2.0, 4.0]
    with pytest.raises(RuntimeError, match="same dtype"):
        torch.quantile(torch.tensor(x, dtype=torch.float64), torch.tensor(0.5))
    data = rg.tensor(x, dtype=rg.float64)
    for op in (rg.quantile, rg.nanquantile):
        with pytest.raises(rg.DTypeError, match=r"quantile.*float32"):
            op(data, rg.tensor(0.5))
    # usable afterwards, and the same dtype still accepted
    _same(
        rg.quantile(data, rg.tensor([0.5], dtype=rg.float64)),
        torch.quantile(torch.tensor(x, dtype=torch.float64), torch.tensor([0.5]).double()),
    )


def test_quantile_refuses_half_precision() -> None:
    with pytest.raises(RuntimeError, match="float or double"):
        torch.quantile(torch.tensor([1.0, 2.0], dtype=torch.float16), 0.5)
    data = rg.tensor([1.0, 2.0], backend=rg.Autodiff(rg.TorchBackend("cpu"))).half()
    for op in (rg.quantile, rg.nanquantile):
        with pytest.raises(rg.DTypeError, match=r"quantile.*float16"):
            op(data, 0.5)


# -- bincount of an empty input ----------------------------------------------------------------
@pytest.mark.parametrize("weights_dtype", ["float32", "float64", "int64"])
def test_bincount_of_an_empty_input_with_weights_is_int64_zeros(weights_dtype) -> None:
    # retrograd gave the weights' dtype; torch returns early with int64 zeros
    want = torch.bincount(
        torch.tensor([], dtype=torch.int64),
        weights=torch.tensor([], dtype=getattr(torch, weights_dtype)),
        minlength=3,
    )
    got = rg.bincount(
        rg.tensor([], dtype=rg.int64),
        weights=rg.tensor([], dtype=getattr(rg, weights_dtype)),
        minlength=3,
    )
    _same(got, want)


# -- searchsorted's sorter ---------------------------------------------------------------------
def test_searchsorted_refuses_a_sorter_not_int64_or_not_the_sequence_shape() -> None:
    sequence, values = [3.0, 1.0, 2.0], [2.5, 0.0]
    for sorter in (torch.tensor([1, 2, 0], dtype=torch.int32), torch.tensor([1, 2])):
        with pytest.raises(RuntimeError, match="sorter"):
            torch.searchsorted(torch.tensor(sequence), torch.tensor(values), sorter=sorter)
    ours = rg.tensor(sequence)
    with pytest.raises(rg.DTypeError, match=r"searchsorted.*int64"):
        rg.searchsorted(ours, rg.tensor(values), sorter=rg.tensor([1, 2, 0], dtype=rg.int32))
    with pytest.raises(rg.ShapeError, match=r"searchsorted.*\[2\]"):
        rg.searchsorted(ours, rg.tensor(values), sorter=rg.tensor([1, 2]))
    _same(
        rg.searchsorted(ours, rg.tensor(values), sorter=rg.tensor([1, 2, 0])),
        torch.searchsorted(
            torch.tensor(sequence), torch.tensor(values), sorter=torch.tensor([1, 2, 0])
        ),
    )
