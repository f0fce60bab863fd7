"""The keywords the signature audit (tests/signature_audit.py) found missing or different,
each checked against torch 2.13 doing the same call."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import retrograd as rg
from surface_testing import same_gradients, same_values


def _rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


# -- out= on the function forms ------------------------------------------------------------------
OUT_CASES = {
    "hstack": lambda lib, a, b: lib.hstack([a, b], out=lib.empty(0, dtype=a.dtype)),
    "vstack": lambda lib, a, b: lib.vstack([a, b], out=lib.empty(0, dtype=a.dtype)),
    "dstack": lambda lib, a, b: lib.dstack([a, b], out=lib.empty(0, dtype=a.dtype)),
    "row_stack": lambda lib, a, b: lib.row_stack([a, b], out=lib.empty(0, dtype=a.dtype)),
    "column_stack": lambda lib, a, b: lib.column_stack([a, b], out=lib.empty(0, dtype=a.dtype)),
    "concat": lambda lib, a, b: lib.concat([a, b], 1, out=lib.empty(0, dtype=a.dtype)),
    "concatenate": lambda lib, a, b: lib.concatenate([a, b], out=lib.empty(0, dtype=a.dtype)),
    "pow": lambda lib, a, b: lib.pow(a, 2, out=lib.empty(0, dtype=a.dtype)),
    "float_power": lambda lib, a, b: lib.float_power(a, 2, out=lib.empty(0, dtype=a.dtype)),
    "tensordot": lambda lib, a, b: lib.tensordot(a, b.T, 1, out=lib.empty(0, dtype=a.dtype)),
    "inner": lambda lib, a, b: lib.inner(a, b, out=lib.empty(0, dtype=a.dtype)),
    "chain_matmul": lambda lib, a, b: lib.chain_matmul(a, b.T, out=lib.empty(0, dtype=a.dtype)),
    "cummax": lambda lib, a, b: lib.cummax(
        a, 1, out=(lib.empty(0, dtype=a.dtype), lib.empty(0, dtype=lib.int64))
    ),
    "cummin": lambda lib, a, b: lib.cummin(
        a, 0, out=(lib.empty(0, dtype=a.dtype), lib.empty(0, dtype=lib.int64))
    ),
    "nonzero": lambda lib, a, b: lib.nonzero(a > 0, out=lib.empty(0, dtype=lib.int64)),
    "searchsorted": lambda lib, a, b: lib.searchsorted(
        a.flatten().sort().values, b, out=lib.empty(0, dtype=lib.int64)
    ),
    "bucketize": lambda lib, a, b: lib.bucketize(
        b, a.flatten().sort().values, out=lib.empty(0, dtype=lib.int64)
    ),
    "angle": lambda lib, a, b: lib.angle(a, out=lib.empty(0, dtype=a.dtype)),
    "conj_physical": lambda lib, a, b: lib.conj_physical(a, out=lib.empty(0, dtype=a.dtype)),
    "polygamma": lambda lib, a, b: lib.polygamma(1, a.abs() + 1, out=lib.empty(0, dtype=a.dtype)),
    "special.polygamma": lambda lib, a, b: lib.special.polygamma(
        1, a.abs() + 1, out=lib.empty(0, dtype=a.dtype)
    ),
    "fft.fft": lambda lib, a, b: lib.fft.fft(a, out=lib.empty(0, dtype=lib.complex128)),
    "fft.rfft2": lambda lib, a, b: lib.fft.rfft2(a, out=lib.empty(0, dtype=lib.complex128)),
    "fft.irfft": lambda lib, a, b: lib.fft.irfft(a, out=lib.empty(0, dtype=a.dtype)),
}


@pytest.mark.parametrize("name", sorted(OUT_CASES))
def test_out_keyword_writes_the_result_as_torch(name: str) -> None:
    same_values(OUT_CASES[name], [_rand(2, 3), _rand(2, 3, seed=1)])


def test_out_returns_the_given_tensor() -> None:
    out = rg.empty(0)
    result = rg.hstack([rg.ones(2), rg.zeros(1)], out=out)
    assert result is out and out.tolist() == [1.0, 1.0, 0.0]


FACTORY_OUT_CASES = {
    "eye": lambda lib, dtype: lib.eye(3, 2, out=lib.empty(0, dtype=dtype)),
    "full": lambda lib, dtype: lib.full((2, 3), 7, out=lib.empty(0, dtype=dtype)),
    "linspace": lambda lib, dtype: lib.linspace(0, 1, 7, out=lib.empty(0, dtype=dtype)),
}


@pytest.mark.parametrize("name", sorted(FACTORY_OUT_CASES))
@pytest.mark.parametrize("dtype", ["float64", "int64"])
def test_factories_make_their_values_in_outs_dtype(name: str, dtype: str) -> None:
    if name == "linspace" and dtype == "int64":
        dtype = "float64"  # (torch's integer linspace rounds differently on CPU: not this op)
    mine = FACTORY_OUT_CASES[name](rg, getattr(rg, dtype))
    theirs = FACTORY_OUT_CASES[name](torch, getattr(torch, dtype))
    assert str(mine.dtype) == str(theirs.dtype).removeprefix("torch.")
    np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-15, atol=0)


@pytest.mark.parametrize("name", ["rand", "randn", "empty"])
def test_random_factories_take_out(name: str) -> None:
    out = rg.empty(0, dtype=rg.float64)
    result = getattr(rg, name)(2, 3, out=out)
    assert result is out and out.shape == (2, 3) and out.dtype == rg.float64
    permutation = rg.randperm(5, out=rg.empty(0, dtype=rg.int32))
    assert permutation.dtype == rg.int32 and sorted(permutation.tolist()) == list(range(5))


# -- layout= and pin_memory= on the factories ---------------------------------------------------
FACTORY_CALLS = {
    "zeros": lambda lib, **kw: lib.zeros(2, 3, **kw),
    "ones": lambda lib, **kw: lib.ones(2, **kw),
    "empty": lambda lib, **kw: lib.empty(2, **kw).zero_(),
    "full": lambda lib, **kw: lib.full((2,), 3.0, **kw),
    "arange": lambda lib, **kw: lib.arange(4, **kw),
    "linspace": lambda lib, **kw: lib.linspace(0, 1, 5, **kw),
    "eye": lambda lib, **kw: lib.eye(3, **kw),
    "zeros_like": lambda lib, **kw: lib.zeros_like(lib.ones(2), **kw),
    "full_like": lambda lib, **kw: lib.full_like(lib.ones(2), 4.0, **kw),
    "tril_indices": lambda lib, **kw: lib.tril_indices(3, 3, **kw),
    "new_zeros": lambda lib, **kw: lib.ones(2).new_zeros(3, **kw),
    "new_full": lambda lib, **kw: lib.ones(2).new_full((2,), 5.0, **kw),
}


@pytest.mark.parametrize("name", sorted(FACTORY_CALLS))
def test_factories_take_torchs_layout_and_pin_memory(name: str) -> None:
    mine = FACTORY_CALLS[name](rg, layout=rg.strided, pin_memory=False)
    theirs = FACTORY_CALLS[name](torch, layout=torch.strided, pin_memory=False)
    np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
    assert FACTORY_CALLS[name](rg, layout=None).shape == tuple(theirs.shape)


@pytest.mark.parametrize("name", sorted(FACTORY_CALLS))
def test_factories_refuse_another_layout_by_name(name: str) -> None:
    with pytest.raises(rg.InvalidArgumentError, match=r"layout=retrograd\.sparse_coo"):
        FACTORY_CALLS[name](rg, layout=rg.sparse_coo)
    with pytest.raises(rg.InvalidArgumentError, match=r"layout must be an rg\.layout"):
        FACTORY_CALLS[name](rg, layout="strided")


def test_unknown_factory_keywords_are_refused() -> None:
    """``tril_indices`` used to swallow any keyword (``**_``)."""
    with pytest.raises(rg.RetrogradError, match="tril_indices"):
        rg.tril_indices(3, 3, colour=1)


# -- tensor methods --------------------------------------------------------------------------------
CASTS = ["float", "double", "long", "int", "bool", "byte", "short", "char", "cfloat", "cdouble"]


@pytest.mark.parametrize("cast", CASTS)
def test_casts_take_memory_format(cast: str) -> None:
    values = _rand(2, 3, 4, 5) * 3
    mine = getattr(rg.tensor(values), cast)(memory_format=rg.channels_last)
    theirs = getattr(torch.tensor(values), cast)(memory_format=torch.channels_last)
    assert str(mine.dtype) == str(theirs.dtype).removeprefix("torch.")
    np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
    assert getattr(rg.tensor(values), cast)(memory_format=rg.preserve_format).shape == mine.shape
    with pytest.raises(rg.ShapeError, match=f"{cast}: required rank 4"):
        getattr(rg.ones(3), cast)(memory_format=rg.channels_last)
    with pytest.raises(RuntimeError, match="required rank 4"):
        getattr(torch.ones(3), cast)(memory_format=torch.channels_last)


@pytest.mark.parametrize(
    ("a", "b"), [((3,), (3,)), ((2, 4), (3, 4)), ((2, 3, 4), (4,)), ((), (2,))]
)
def test_tensor_inner_with_other_is_torchs_inner(a: tuple, b: tuple) -> None:
    same_gradients(lambda lib, x, y: x.inner(y), [_rand(*a), _rand(*b, seed=1)])
    same_gradients(lambda lib, x, y: lib.inner(x, y), [_rand(*a), _rand(*b, seed=1)])


def test_tensor_inner_alone_is_still_the_inner_backends_tensor() -> None:
    x = rg.tensor([1.0, 2.0], requires_grad=True)
    inner = x.inner()
    assert not inner.requires_grad and inner.tolist() == [1.0, 2.0]


def test_torch_parameter_names_of_methods() -> None:
    values = _rand(2, 3)
    mine, theirs = rg.tensor(values), torch.tensor(values)
    assert mine.swapaxes_(axis0=0, axis1=1).shape == tuple(theirs.swapaxes_(axis0=0, axis1=1).shape)
    vector = _rand(3)
    assert np.isclose(
        rg.tensor(vector).dot(tensor=rg.tensor(vector)).item(),
        torch.tensor(vector).dot(tensor=torch.tensor(vector)).item(),
    )
    assert np.isclose(
        rg.dot(rg.tensor(vector), tensor=rg.tensor(vector)).item(),
        torch.dot(torch.tensor(vector), tensor=torch.tensor(vector)).item(),
    )
    leaf = rg.tensor(values, requires_grad=True)
    np.testing.assert_array_equal(leaf.numpy(force=True), values)
    assert rg.ones(2).is_pinned(device="cpu") is False
    same_values(lambda lib, x: lib.rsub(x, 3.0, 2), [values])


@pytest.mark.parametrize(
    "call",
    [
        lambda x: x.flatten(1),
        lambda x: x.flatten(start_dim=1),
        lambda x: x.flatten(0, 1),
        lambda x: x.flatten(end_dim=-2),
        lambda x: x.flatten(start_dim=1, end_dim=2),
    ],
)
def test_flatten_under_torchs_names(call) -> None:
    values = _rand(2, 3, 4)
    assert call(rg.tensor(values)).shape == tuple(call(torch.tensor(values)).shape)


def test_flatten_keeps_burns_keywords() -> None:
    assert rg.ones(2, 3, 4).flatten(start=1).shape == (2, 12)
    with pytest.raises(TypeError, match="multiple values"):
        rg.ones(2, 3, 4).flatten(1, start=1)


def test_backward_retains_the_graph_exactly_when_recording_it_by_default() -> None:
    """torch's ``retain_graph=None``: kept when ``create_graph``; consumed otherwise."""
    for lib in (rg, torch):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        y = (x**3).sum()
        y.backward(create_graph=True)
        y.backward()  # the graph is still there
        z = (x**3).sum()
        z.backward()
        with pytest.raises((RuntimeError, rg.AutodiffError)):
            z.backward()


def test_hardtanh_takes_torchs_deprecated_names() -> None:
    values = _rand(3, 4) * 3
    with pytest.warns(FutureWarning, match="min_value"):
        mine = rg.nn.Hardtanh(min_value=-0.5, max_value=2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        theirs = torch.nn.Hardtanh(min_value=-0.5, max_value=2.0)
    assert (mine.min_val, mine.max_val) == (theirs.min_val, theirs.max_val)
    np.testing.assert_array_equal(
        mine(rg.tensor(values)).numpy(), theirs(torch.tensor(values)).numpy()
    )


# -- functions ------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
def test_pad_value_none_is_torchs_default(mode: str) -> None:
    same_gradients(lambda lib, x: lib.nn.functional.pad(x, (1, 2), mode, None), [_rand(2, 3, 4)])


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_pad_refuses_a_value_where_torch_does(mode: str) -> None:
    with pytest.raises(RuntimeError, match="doesn't take in value"):
        torch.nn.functional.pad(torch.ones(1, 2, 3), (1, 1), mode, 2.0)
    with pytest.raises(rg.InvalidArgumentError, match=f'pad: padding mode "{mode}"'):
        rg.nn.functional.pad(rg.ones(1, 2, 3), (1, 1), mode, 2.0)
    # a value of 0 goes through, as torch lets it
    same_values(lambda lib, x: lib.nn.functional.pad(x, (1, 1), mode, 0.0), [_rand(1, 2, 3)])


@pytest.mark.parametrize("win_length", [9, 12, 16])
@pytest.mark.parametrize("align", [None, False, True])
def test_stft_align_to_window_as_torch(win_length: int, align: bool | None) -> None:
    def stft(lib, signal, window):
        return lib.view_as_real(
            lib.stft(
                signal,
                16,
                hop_length=4,
                win_length=win_length,
                window=window,
                center=False,
                return_complex=True,
                align_to_window=align,
            )
        )

    same_gradients(stft, [_rand(2, 64), np.hanning(win_length)])


def test_stft_align_to_window_needs_center_false() -> None:
    with pytest.raises(RuntimeError, match="only be set when center = false"):
        torch.stft(torch.ones(64), 16, return_complex=True, align_to_window=True)
    with pytest.raises(rg.InvalidArgumentError, match="only be set when center=False"):
        rg.stft(rg.ones(64), 16, return_complex=True, align_to_window=True)


@pytest.mark.parametrize("name", ["mm", "bmm"])
def test_matrix_products_refuse_out_dtype_by_name(name: str) -> None:
    shape = (2, 3, 3) if name == "bmm" else (3, 3)
    same_values(lambda lib, a: getattr(lib, name)(a, a), [_rand(*shape)])
    assert getattr(rg, name)(rg.ones(shape), rg.ones(shape), None).shape == shape
    same_values(lambda lib, a: getattr(lib, name)(input=a, mat2=a), [_rand(*shape)])
    with pytest.raises(NotImplementedError):  # torch's CPU kernels have no out_dtype form
        getattr(torch, name)(torch.ones(shape), torch.ones(shape), out_dtype=torch.float32)
    with pytest.raises(rg.InvalidArgumentError, match=f"{name}: out_dtype="):
        getattr(rg, name)(rg.ones(shape), rg.ones(shape), out_dtype=rg.float32)


def test_householder_functions_take_torchs_parser_names() -> None:
    values = _rand(4, 3)
    a_mine, tau_mine = rg.geqrf(input=rg.tensor(values))
    a_theirs, tau_theirs = torch.geqrf(input=torch.tensor(values))
    np.testing.assert_allclose(a_mine.numpy(), a_theirs.numpy(), atol=1e-12)
    other = _rand(4, 2, seed=1)
    np.testing.assert_allclose(
        rg.orgqr(input=a_mine, input2=tau_mine).numpy(),
        torch.orgqr(input=a_theirs, input2=tau_theirs).numpy(),
        atol=1e-12,
    )
    np.testing.assert_allclose(
        a_mine.ormqr(input2=tau_mine, input3=rg.tensor(other), transpose=True).numpy(),
        a_theirs.ormqr(input2=tau_theirs, input3=torch.tensor(other), transpose=True).numpy(),
        atol=1e-12,
    )


@pytest.mark.parametrize("name", ["chebyshev_polynomial_t", "hermite_polynomial_he"])
def test_special_polynomials_take_x_and_n(name: str) -> None:
    same_values(lambda lib, x: getattr(lib.special, name)(x=x, n=3), [_rand(5) * 0.9])


def test_special_bessel_functions_take_x() -> None:
    same_values(lambda lib, x: lib.special.airy_ai(x=x), [_rand(5)])
    same_values(lambda lib, x: lib.special.scaled_modified_bessel_k0(x=x), [np.abs(_rand(5)) + 0.1])


def test_torch_level_norms_take_the_cudnn_flags() -> None:
    same_gradients(
        lambda lib, x, w, b: lib.layer_norm(x, (4,), w, b, 1e-5, False),
        [_rand(2, 3, 4), _rand(4, seed=1), _rand(4, seed=2)],
    )
    same_gradients(
        lambda lib, x, w, b: lib.group_norm(x, 2, w, b, 1e-5, cudnn_enabled=False),
        [_rand(2, 4, 3), _rand(4, seed=1), _rand(4, seed=2)],
    )
