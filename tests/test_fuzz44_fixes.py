"""Regressions found by ``test_random_programs_44.py`` (the callables no generator drew), each
checked against torch."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")


def _close(got: rg.Tensor, want, rtol: float = 1e-7) -> None:
    assert tuple(got.shape) == tuple(want.shape)
    assert str(got.dtype) == str(want.dtype).removeprefix("torch.")
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=rtol, atol=1e-9)


POLYNOMIALS = [
    "chebyshev_polynomial_t",
    "chebyshev_polynomial_u",
    "chebyshev_polynomial_v",
    "chebyshev_polynomial_w",
    "shifted_chebyshev_polynomial_t",
    "shifted_chebyshev_polynomial_u",
    "shifted_chebyshev_polynomial_v",
    "shifted_chebyshev_polynomial_w",
    "hermite_polynomial_h",
    "hermite_polynomial_he",
    "laguerre_polynomial_l",
    "legendre_polynomial_p",
]


@pytest.mark.parametrize("name", POLYNOMIALS)
def test_orthogonal_polynomials_take_torchs_keywords_x_and_n(name: str) -> None:
    values = np.array([-0.7, 0.1, 0.9])
    want = getattr(torch.special, name)(x=torch.tensor(values), n=3)
    _close(getattr(rg.special, name)(x=rg.tensor(values), n=3), want)
    _close(getattr(rg.special, name)(rg.tensor(values), n=3), want)


def test_swapaxes_in_place_takes_numpys_axis_names() -> None:
    values = np.arange(6.0).reshape(2, 3)
    got = rg.tensor(values).swapaxes_(axis0=0, axis1=1)
    _close(got, torch.tensor(values).swapaxes_(axis0=0, axis1=1))
    _close(rg.tensor(values).swapdims_(dim0=1, dim1=0), torch.tensor(values).swapdims_(1, 0))


@pytest.mark.parametrize("shape", [(3, 2, 2), (2, 3, 4, 2), (0, 2, 2)])
def test_nuclear_norm_without_dim_takes_the_last_two_dims_of_a_batch(shape: tuple) -> None:
    values = np.random.default_rng(0).standard_normal(shape)
    for keepdim in (False, True):
        want = torch.nuclear_norm(torch.tensor(values), keepdim=keepdim)
        _close(rg.nuclear_norm(rg.tensor(values), keepdim=keepdim), want)
    with pytest.raises(rg.ShapeError, match="nuclear_norm"):
        rg.nuclear_norm(rg.tensor([1.0, 2.0]))


@pytest.mark.parametrize("shape", [(0, 0, 0), (0, 2, 3), (2, 0, 3, 3)])
def test_svd_of_an_empty_batch(shape: tuple) -> None:
    """An empty batch reshaped with -1 had no size to infer: the SVD failed in the backend."""
    values = np.zeros(shape)
    want = torch.linalg.svd(torch.tensor(values), full_matrices=False)
    got = rg.linalg.svd(rg.tensor(values), full_matrices=False)
    for g, w in zip(got, want, strict=True):
        _close(g, w)
    _close(rg.linalg.svdvals(rg.tensor(values)), torch.linalg.svdvals(torch.tensor(values)))
    _close(
        rg.linalg.matrix_norm(rg.tensor(values), "nuc"),
        torch.linalg.matrix_norm(torch.tensor(values), "nuc"),
    )


def test_select_and_slice_scatter_cast_src_to_self_dtype() -> None:
    for lib_dtype in ("float32", "bool", "int32"):
        want = torch.select_scatter(
            torch.zeros(2, 3, dtype=getattr(torch, lib_dtype)), torch.tensor([3, 0, 1]), 0, 1
        )
        got = rg.select_scatter(
            rg.zeros(2, 3, dtype=getattr(rg, lib_dtype)), rg.tensor([3, 0, 1]), 0, 1
        )
        _close(got, want)
    want = torch.zeros(4).slice_scatter(torch.tensor([5, 6]), 0, 0, None, 2)
    _close(rg.zeros(4).slice_scatter(rg.tensor([5, 6]), 0, 0, None, 2), want)


def test_select_scatter_gradient_flows_through_the_cast_src() -> None:
    base = np.arange(6.0).reshape(2, 3)
    src = np.array([1.0, 2.0, 3.0])
    grads = []
    for lib in (torch, rg):
        x = lib.tensor(base, requires_grad=True)
        s = lib.tensor(src, dtype=lib.float32, requires_grad=True)
        out = lib.select_scatter(x, s, 0, 1)
        assert str(out.dtype).endswith("float64")
        grads.append(lib.autograd.grad((out * lib.tensor(base)).sum(), [x, s]))
    for g, w in zip(*reversed(grads), strict=True):
        np.testing.assert_allclose(g.numpy(), w.numpy())


@pytest.mark.parametrize("name", ["dropout2d", "dropout3d", "feature_alpha_dropout"])
def test_feature_dropout_checks_the_rank_only_when_it_draws_a_mask(name: str) -> None:
    values = np.array([1.0, -2.0, 3.0])
    for p, training in ((0.5, False), (0.0, True), (1.0, True)):
        want = getattr(torch.nn.functional, name)(torch.tensor(values), p, training)
        with pytest.warns(UserWarning) if name != "feature_alpha_dropout" else _no_warning():
            got = getattr(rg.nn.functional, name)(rg.tensor(values), p, training)
        _close(got, want)
    with pytest.raises(RuntimeError, match="2 dimensions"):
        getattr(torch.nn.functional, name)(torch.tensor(2.0), 0.5, True)
    with pytest.raises(rg.ShapeError, match="2 dimensions"):  # torch refuses here too
        getattr(rg.nn.functional, name)(rg.tensor(2.0), 0.5, True)


def test_torch_feature_dropout_in_eval_keeps_a_1d_input() -> None:
    values = np.array([1.0, 2.0])
    _close(rg.feature_dropout(rg.tensor(values), 0.5, False), torch.tensor(values))
    with pytest.raises(rg.ShapeError, match="feature_dropout"):
        rg.feature_dropout(rg.tensor(values), 0.5, True)


class _no_warning:  # noqa: N801 (a context manager read as a phrase)
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return False


@pytest.mark.parametrize("name", ["irfft2", "hfft2", "irfftn", "hfftn"])
@pytest.mark.parametrize("shape", [(0, 0), (2, 0), (3, 5)])
def test_inverse_real_transforms_resize_the_one_sided_spectrum_first(
    name: str, shape: tuple
) -> None:
    values = np.random.default_rng(1).standard_normal(shape)
    for s in ((2, 2), (3, 4)):
        want = getattr(torch.fft, name)(torch.tensor(values), s=s)
        _close(getattr(rg.fft, name)(rg.tensor(values), s=s), want, rtol=1e-6)


def test_inverse_real_transform_gradient_with_s_matches_torch() -> None:
    values = np.random.default_rng(2).standard_normal((3, 5))
    weights = np.random.default_rng(3).standard_normal((4, 6))
    grads = []
    for lib in (torch, rg):
        x = lib.tensor(values, requires_grad=True)
        out = lib.fft.irfftn(x, s=(4, 6), norm="ortho")
        grads.append(lib.autograd.grad((out * lib.tensor(weights)).sum(), [x])[0])
    np.testing.assert_allclose(grads[1].numpy(), grads[0].numpy(), rtol=1e-7, atol=1e-10)


@pytest.mark.parametrize("method", ["abs_", "absolute_"])
def test_in_place_abs_of_a_complex_tensor_is_refused(method: str) -> None:
    with pytest.raises(RuntimeError):
        getattr(torch.ones(2, dtype=torch.complex64), method)()
    x = rg.tensor(np.array([3 + 4j, 1j], dtype=np.complex64))
    with pytest.raises(rg.DTypeError, match=method):
        getattr(x, method)()
    _close(x, torch.tensor(np.array([3 + 4j, 1j], dtype=np.complex64)))  # left unchanged
    real = rg.tensor([-1.5, 2.0])
    _close(getattr(real, method)(), torch.tensor([1.5, 2.0]))


@pytest.mark.parametrize(
    ("name", "shape"),
    [("max_pool2d", (1, 0, 0)), ("avg_pool2d", (1, 0, 2)), ("max_pool1d", (1, 0)),
     ("avg_pool1d", (2, 1, 0)), ("max_pool3d", (1, 1, 0, 2))],
)  # fmt: skip
def test_pooling_refuses_an_empty_window_dim_even_with_padding(name: str, shape: tuple) -> None:
    with pytest.raises(RuntimeError):
        getattr(torch.nn.functional, name)(torch.zeros(shape), 2, padding=1)
    x = rg.zeros(shape)
    with pytest.raises(rg.ShapeError, match=rf"^{name}: .*non-zero sizes"):
        getattr(rg.nn.functional, name)(x, 2, padding=1)
    empty_batch = (0, 1) + (3,) * int(name[-2])
    want = getattr(torch.nn.functional, name)(torch.zeros(empty_batch), 2)
    got = getattr(rg.nn.functional, name)(rg.zeros(empty_batch), 2)
    assert tuple(got.shape) == tuple(want.shape)  # an empty batch is still pooled
