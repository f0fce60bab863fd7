"""Small divergences from torch 2.13, each checked against torch (the reference).

- ``t.numpy()`` of a tensor that requires grad was a writable view: a write into it changed
  values saved for backward silently (torch refuses ``numpy()`` there). It is a read-only
  view now (NumPy's ``ValueError``); ``detach().numpy()`` and ``.data.numpy()`` stay writable.
- ``meshgrid`` without ``indexing=`` and indexing with a uint8 mask give torch's UserWarnings.
- ``clamp``/``clip`` with one bound a number and the other a tensor raise a ``TypeError`` as
  torch's (a 0-d tensor beside a number is taken, as torch takes it).
- ``linalg.ldl_factor``/``ldl_factor_ex``/``ldl_solve`` exist, with torch's layout, pivots,
  ``info``, dtypes and refused backward.
- A NaN upstream gradient of ``adaptive_avg_pool*d`` (NumPy backend) and of
  ``scatter_reduce``'s ``amin``/``amax`` reaches the elements torch's reaches, no more, no
  fewer.
- First derivatives at the points where torch's double backward is NaN (a zero vector's norm,
  ``sinc`` at 0) or 0 (``std`` at zero variance) are torch's; ``sinc``'s second derivative at
  0 is the true ``-pi^2/3`` (torch's NaN, retrograd's 0 before).
"""

import warnings

import numpy as np
import pytest
import torch

import retrograd as rg


def _tracked(values: np.ndarray):
    return rg.tensor(values, requires_grad=True), torch.tensor(values, requires_grad=True)


# -- (1) numpy() of a tensor that requires grad -------------------------------------------------
# -- (2) torch's UserWarnings ------------------------------------------------------------------
#: torch 2.13's warning, as it printed it (its TORCH_WARN_ONCE fires once per process, so a
#: test that ran earlier in the worker may have taken it: then nothing is caught below)
MESHGRID_WARNING = (
    "torch.meshgrid: in an upcoming release, it will be required to pass the indexing argument."
)


def test_meshgrid_without_indexing_warns_as_torch():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.meshgrid(torch.arange(2), torch.arange(3))
    assert [str(w.message).split(" (Triggered")[0] for w in caught] in ([], [MESHGRID_WARNING])
    expected = MESHGRID_WARNING
    with pytest.warns(UserWarning, match="required to pass the indexing argument") as record:
        grids = rg.meshgrid(rg.arange(2), rg.arange(3))
    assert [str(w.message) for w in record] == [expected]
    assert record[0].filename == __file__  # attributed to the caller's line
    assert [tuple(g.shape) for g in grids] == [(2, 3), (2, 3)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rg.meshgrid(rg.arange(2), rg.arange(3), indexing="xy")


def test_uint8_mask_indexing_warns_as_torch():
    values = np.arange(4.0)
    mask = np.array([1, 0, 1, 0], dtype=np.uint8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        expected_get = torch.tensor(values)[torch.tensor(mask)]
        written = torch.tensor(values)
        written[torch.tensor(mask)] = torch.tensor([7.0, 8.0], dtype=torch.float64)
        expected = {str(w.message).split(" (Triggered")[0] for w in caught}
        count = len(caught)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = rg.tensor(values)[rg.tensor(mask)]
        ours = rg.tensor(values)
        ours[rg.tensor(mask)] = rg.tensor([7.0, 8.0], dtype="float64")
    assert {str(w.message) for w in caught} == expected
    assert len(caught) == count == 2  # one per indexing, as torch's
    assert all(w.filename == __file__ for w in caught)
    np.testing.assert_array_equal(got.numpy(), expected_get.numpy())
    np.testing.assert_array_equal(ours.numpy(), written.numpy())


# -- (3) clamp with a number and a tensor -------------------------------------------------------
@pytest.mark.parametrize("number_first", [True, False])
def test_clamp_of_a_number_and_a_tensor_raises_a_type_error_as_torch(number_first):
    def bounds(lib):
        return (0.5, lib.ones(3)) if number_first else (lib.zeros(3), 1.5)

    for call in ("clamp", "clip"):
        with pytest.raises(TypeError):
            getattr(torch, call)(torch.arange(3.0), *bounds(torch))
        with pytest.raises(TypeError, match="clamp"):
            getattr(rg, call)(rg.arange(3.0), *bounds(rg))
        with pytest.raises(TypeError):
            getattr(rg.arange(3.0), call + "_")(*bounds(rg))

    # a 0-d tensor beside a number is taken, as torch takes it
    def bounds_0d(lib):
        return (0.5, lib.tensor(1.0)) if number_first else (lib.tensor(0.0), 1.5)

    np.testing.assert_array_equal(
        rg.clamp(rg.arange(3.0), *bounds_0d(rg)).numpy(),
        torch.clamp(torch.arange(3.0), *bounds_0d(torch)).numpy(),
    )


# -- (4) LDL ------------------------------------------------------------------------------------
def test_ldl_factor_and_solve_match_torch():
    torch.manual_seed(0)
    a = torch.randn(2, 5, 5, dtype=torch.float64)
    a = a + a.mT
    a[1, 0, 0] = 0.0  # (a 2x2 pivot block)
    rhs = torch.randn(2, 5, 3, dtype=torch.float64)
    factors, pivots = torch.linalg.ldl_factor(a)
    ours = rg.linalg.ldl_factor(rg.tensor(a.numpy()))
    assert ours.pivots.dtype == rg.int32
    np.testing.assert_array_equal(ours.pivots.numpy(), pivots.numpy())
    np.testing.assert_allclose(ours.LD.numpy(), factors.numpy(), rtol=1e-10, atol=1e-12)
    solved = rg.linalg.ldl_solve(ours.LD, ours.pivots, rg.tensor(rhs.numpy()))
    expected = torch.linalg.ldl_solve(factors, pivots, rhs)
    np.testing.assert_allclose(solved.numpy(), expected.numpy(), rtol=1e-9, atol=1e-12)
    # complex Hermitian and float32
    c = torch.randn(4, 4, dtype=torch.complex128)
    c = c + c.mH
    for hermitian in (True, False):
        expected_c = torch.linalg.ldl_factor(c, hermitian=hermitian)
        got_c = rg.linalg.ldl_factor(rg.tensor(c.numpy()), hermitian=hermitian)
        np.testing.assert_array_equal(got_c.pivots.numpy(), expected_c.pivots.numpy())
        np.testing.assert_allclose(got_c.LD.numpy(), expected_c.LD.numpy(), atol=1e-12)
    single = rg.linalg.ldl_factor(rg.tensor(a[0].float().numpy()))
    assert single.LD.dtype == rg.float32


def test_ldl_factor_ex_info_errors_and_refused_backward():
    torch.manual_seed(0)
    singular = torch.zeros(2, 3, 3, dtype=torch.float64)
    singular[1] = torch.eye(3, dtype=torch.float64)
    expected = torch.linalg.ldl_factor_ex(singular)
    got = rg.linalg.ldl_factor_ex(rg.tensor(singular.numpy()))
    assert type(got).__name__ == "linalg_ldl_factor_ex"
    assert got.info.dtype == rg.int32
    np.testing.assert_array_equal(got.info.numpy(), expected.info.numpy())
    np.testing.assert_array_equal(got.pivots.numpy(), expected.pivots.numpy())
    with pytest.raises(rg.linalg.LinAlgError, match="ldl_factor"):
        rg.linalg.ldl_factor(rg.tensor(singular.numpy()))
    with pytest.raises(rg.linalg.LinAlgError, match="ldl_factor_ex"):
        rg.linalg.ldl_factor_ex(rg.tensor(singular.numpy()), check_errors=True)
    with pytest.raises(rg.ShapeError, match="square"):
        rg.linalg.ldl_factor(rg.zeros(3, 4))
    with pytest.raises(rg.DTypeError, match="floating point"):
        rg.linalg.ldl_factor(rg.arange(9).reshape(3, 3))
    with pytest.raises(rg.ShapeError, match="2 dimensions"):
        rg.linalg.ldl_factor(rg.zeros(3))
    # torch has no derivative for either: recorded, then refused in backward
    a = rg.tensor([[4.0, 1.0], [1.0, 3.0]], dtype="float64", requires_grad=True)
    factors, pivots = rg.linalg.ldl_factor(a)
    assert factors.requires_grad
    with pytest.raises(rg.AutodiffError, match="not implemented"):
        factors.sum().backward()
    b = rg.ones(2, 1, dtype="float64", requires_grad=True)
    solved = rg.linalg.ldl_solve(factors.detach(), pivots, b)
    with pytest.raises(rg.AutodiffError, match="not implemented"):
        solved.sum().backward()
    assert a.numpy().tolist() == [[4.0, 1.0], [1.0, 3.0]]  # usable after


# -- (5) NaN upstream gradients -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("shape", "size"), [((2, 3, 5, 7), (3, 3)), ((1, 2, 9), (4,)), ((1, 2, 4, 5, 6), (3, 2, 4))]
)
def test_adaptive_avg_pool_nan_gradient_reaches_torch_s_elements(shape, size):
    torch.manual_seed(0)
    values = torch.randn(*shape, dtype=torch.float64).numpy()
    ours, theirs = _tracked(values)
    name = f"adaptive_avg_pool{len(size)}d"
    expected = getattr(torch.nn.functional, name)(theirs, size)
    got = getattr(rg.nn.functional, name)(ours, size)
    upstream = torch.randn_like(expected)
    upstream[0, 1, ..., 0] = float("nan")
    (grad_theirs,) = torch.autograd.grad(expected, theirs, upstream)
    (grad_ours,) = rg.autograd.grad(got, ours, rg.tensor(upstream.numpy()))
    assert np.isnan(grad_theirs.numpy()).any() and not np.isnan(grad_theirs.numpy()).all()
    np.testing.assert_allclose(grad_ours.numpy(), grad_theirs.numpy(), rtol=1e-12, equal_nan=True)
    np.testing.assert_allclose(got.detach().numpy(), expected.detach().numpy(), rtol=1e-12)


@pytest.mark.parametrize("reduce", ["amin", "amax"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_extreme_nan_gradients_match_torch(reduce, include_self):
    nan = float("nan")
    src = np.array([1.0, nan, 3.0, 0.5, 2.0, nan, 4.0, 4.0])
    base = np.array([2.0, 0.2, nan, 5.0, 4.0])
    index = [0, 0, 1, 1, 2, 3, 3, 4]
    upstream = np.array([1.0, 2.0, 3.0, nan, 5.0])
    results = []
    for lib in (torch, rg):
        s = lib.tensor(src, requires_grad=True)
        b = lib.tensor(base, requires_grad=True)
        out = b.scatter_reduce(0, lib.tensor(index), s, reduce, include_self=include_self)
        grads = lib.autograd.grad(out, (b, s), lib.tensor(upstream))
        results.append([out.detach().numpy(), *(g.numpy() for g in grads)])
    for got, expected in zip(results[1], results[0]):
        np.testing.assert_array_equal(got, expected)


# -- (6) first derivatives where torch's second is NaN ------------------------------------------
def test_first_derivatives_at_masked_divisions_are_torch_s():
    cases = [
        (lambda lib, x: lib.nn.functional.normalize(x, dim=0), np.zeros(3)),
        (
            lambda lib, x: lib.nn.functional.cosine_similarity(
                x, lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64), dim=0
            ),
            np.zeros(3),
        ),
        (lambda lib, x: lib.dist(x, lib.zeros(3, dtype=lib.float64)), np.zeros(3)),
        (lambda lib, x: lib.linalg.vector_norm(x), np.zeros(3)),
        (lambda lib, x: x.std(), np.ones(3)),
        (lambda lib, x: lib.sinc(x), np.zeros(2)),
    ]
    for f, values in cases:
        ours, theirs = _tracked(values)
        (expected,) = torch.autograd.grad(f(torch, theirs).sum(), theirs)
        (got,) = rg.autograd.grad(f(rg, ours).sum(), ours)
        np.testing.assert_array_equal(got.numpy(), expected.numpy())


def test_sinc_second_derivative_at_zero_is_the_true_one():
    # torch's is NaN there (0 * inf in its masked division); the true value is -pi^2 / 3,
    # which the first derivative's central difference around 0 confirms
    x = rg.tensor([0.0, 0.25], dtype="float64", requires_grad=True)
    (first,) = rg.autograd.grad(x.sinc().sum(), x, create_graph=True)
    (second,) = rg.autograd.grad(first.sum(), x)
    step = 1e-3  # (truncation ~ pi^4 step^2 / 30; a smaller step loses digits)
    near = rg.tensor([-step, step], dtype="float64", requires_grad=True)
    (slopes,) = rg.autograd.grad(near.sinc().sum(), near)
    difference = (slopes[1] - slopes[0]).item() / (2 * step)
    assert second.tolist()[0] == pytest.approx(-(np.pi**2) / 3, rel=1e-12)
    assert difference == pytest.approx(-(np.pi**2) / 3, rel=1e-5)
    theirs = torch.tensor([0.25], dtype=torch.float64, requires_grad=True)
    (their_first,) = torch.autograd.grad(theirs.sinc().sum(), theirs, create_graph=True)
    (their_second,) = torch.autograd.grad(their_first.sum(), theirs)
    assert second.tolist()[1] == pytest.approx(their_second.item(), rel=1e-12)
