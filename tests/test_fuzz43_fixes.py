"""Regressions found by the round-43 random programs (higher-order derivatives) against torch."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")


def _both(array):
    return (
        torch.tensor(array, requires_grad=True),
        rg.tensor(array, requires_grad=True),
    )


def test_materialized_zero_gradients_are_recorded_leaves_when_the_graph_is_created():
    """torch's ``materialize_grads`` zeros are ``zeros_like(input, requires_grad=create_graph)``:
    a penalty of the gradients may use them, and differentiates to None through them."""
    for create_graph in (True, False):
        flags = []
        for lib in (torch, rg):
            x = lib.tensor([1.0, 2.0], requires_grad=True)
            unused = lib.tensor([3.0, 4.0], requires_grad=True)
            gx, gu = lib.autograd.grad(
                (x**3).sum(), (x, unused), create_graph=create_graph, materialize_grads=True
            )
            flags.append((gu.requires_grad, gu.is_leaf, gu.tolist()))
            if create_graph:
                penalty = (gx * gx).sum() + (gu * gx).sum()
                hx, hu = lib.autograd.grad(penalty, (x, unused), allow_unused=True)
                assert hu is None
                assert hx.tolist() == [2 * 3 * 1.0 * 6 * 1.0, 2 * 3 * 4.0 * 6 * 2.0]
        assert flags[1] == flags[0]
        assert flags[1] == (create_graph, True, [0.0, 0.0])


@pytest.mark.parametrize("allow_unused", [None, True, False])
def test_grad_with_respect_to_a_tensor_that_does_not_require_grad_raises(allow_unused):
    """torch refuses such an input whatever ``allow_unused`` says; retrograd returned None."""
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    constant = torch.tensor([1.0, 2.0])
    with pytest.raises(RuntimeError, match="does not require grad"):
        torch.autograd.grad((x * x).sum(), (x, constant), allow_unused=allow_unused)
    x = rg.tensor([1.0, 2.0], requires_grad=True)
    constant = rg.tensor([1.0, 2.0])
    loss = (x * x).sum()
    with pytest.raises(rg.AutodiffError, match=r"does not require grad \(input 1, of shape \(2,\)"):
        rg.autograd.grad(loss, (x, constant), allow_unused=allow_unused)
    # the refusal leaves the graph usable
    assert rg.autograd.grad(loss, x)[0].tolist() == [2.0, 4.0]


@pytest.mark.parametrize("alpha", [1.3, 0.3, 2.7, 1.0, 0.5])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_celu_derivatives_match_torchs_to_the_last_bits(alpha, dtype):
    """torch's celu derivative divides by alpha rounded to float32 (its value by alpha
    itself): second derivatives differed from torch's by 2e-7 (relative) in float64."""
    array = np.array([-1.5, -0.7, -0.2, -1e-3, 0.0, 0.3, 2.0])
    weights = np.array([1.0, -2.0, 0.5, 1.5, 1.0, -1.0, 0.5])
    found = []
    for lib in (torch, rg):
        x = lib.tensor(array, dtype=getattr(lib, dtype), requires_grad=True)
        y = lib.nn.functional.celu(x, alpha)
        (g,) = lib.autograd.grad(
            (y * lib.tensor(weights, dtype=x.dtype)).sum(), x, create_graph=True
        )
        (h,) = lib.autograd.grad((g * g).sum(), x)
        found.append([t.detach().double().numpy() for t in (y, g, h)])
    tolerance = 1e-15 if dtype == "float64" else 1e-6
    for ours, theirs in zip(found[1], found[0]):
        np.testing.assert_allclose(ours, theirs, rtol=tolerance, atol=tolerance)


def test_celu_value_stays_exact_and_its_derivatives_agree_with_finite_differences():
    """The value divides by alpha itself (no float32 rounding in it), and the derivative is
    torch's (within 1e-7 of the exact one, finite differences agree at 1e-6)."""
    array = np.array([-1.5, -0.7, -0.2, 0.3, 2.0])
    x = rg.tensor(array, requires_grad=True)
    y = rg.nn.functional.celu(x, 1.3)
    exact = np.where(array > 0, array, 1.3 * np.expm1(array / 1.3))
    np.testing.assert_allclose(y.detach().numpy(), exact, rtol=1e-15, atol=0)
    (g,) = rg.autograd.grad(y.sum(), x)
    step = 1e-6
    numeric = (
        rg.nn.functional.celu(rg.tensor(array + step), 1.3).numpy()
        - rg.nn.functional.celu(rg.tensor(array - step), 1.3).numpy()
    ) / (2 * step)
    np.testing.assert_allclose(g.numpy(), numeric, rtol=1e-6, atol=1e-8)
    # the infinite ends keep finite derivatives (the torch-scaled branch adds no inf - inf)
    x = rg.tensor([-np.inf, np.inf, np.nan], dtype=rg.float64, requires_grad=True)
    y = rg.nn.functional.celu(x, 1.3)
    (g,) = rg.autograd.grad(y.sum(), x)
    assert y.detach().numpy()[:2].tolist() == [-1.3, np.inf]
    assert g.numpy()[:2].tolist() == [0.0, 1.0]


SPECTRAL = {
    "svdvals": lambda lib, a: lib.linalg.svdvals(a) * lib.tensor([1.0, -2.0, 0.5]),
    "svd": lambda lib, a: lib.linalg.svd(a, full_matrices=False)[1] * lib.tensor([1.0, -2.0, 0.5]),
    "eigvalsh": lambda lib, a: (
        lib.linalg.eigvalsh(a[:, :3] + a[:, :3].mT) * lib.tensor([1.0, -2.0, 0.5])
    ),
    "nuclear_norm": lambda lib, a: lib.linalg.matrix_norm(a, ord="nuc"),
}


@pytest.mark.parametrize("name", sorted(SPECTRAL))
def test_hvp_through_spectral_decompositions_matches_torch(name):
    """autograd.functional.hvp (torch's double-backward trick, zero dummy gradients) returned
    zeros through svd and eigh: their backward masked the 0 / gap where the numerator was zero
    in value, cutting its dependence on the dummy."""
    rng = np.random.default_rng(1)
    array, vector = rng.uniform(-1, 1, (3, 4)), rng.standard_normal((3, 4))
    found = []
    for lib in (torch, rg):

        def scalar(a, lib=lib):
            return SPECTRAL[name](lib, a).sum()

        _, hv = lib.autograd.functional.hvp(scalar, lib.tensor(array), lib.tensor(vector))
        _, vh = lib.autograd.functional.vhp(scalar, lib.tensor(array), lib.tensor(vector))
        found.append((hv.numpy(), vh.numpy()))
    (torch_hv, torch_vh), (hv, vh) = found
    assert np.abs(torch_hv).max() > 0.1  # (no test of zeros against zeros)
    np.testing.assert_allclose(hv, torch_hv, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(vh, torch_vh, rtol=1e-10, atol=1e-12)


def test_eigvalsh_of_repeated_values_keeps_an_exact_zero_where_no_vector_gradient_flows():
    """The mask still holds where it was meant to: a repeated eigenvalue with no gradient on
    the eigenvectors (0 / 0) gives finite gradients and second derivatives."""
    x = rg.tensor(np.eye(3) * 2.0, requires_grad=True)
    (g,) = rg.autograd.grad(
        (rg.linalg.eigvalsh(x) * rg.tensor([1.0, 2.0, 3.0])).sum(), x, create_graph=True
    )
    assert np.isfinite(g.detach().numpy()).all()
    (h,) = rg.autograd.grad((g * g).sum(), x)
    assert np.isfinite(h.numpy()).all()


@pytest.mark.parametrize("name", sorted(SPECTRAL))
def test_hvp_through_spectral_decompositions_matches_finite_differences(name):
    """``H v`` is the derivative of the gradient along ``v`` (central differences)."""
    rng = np.random.default_rng(2)
    array, vector = rng.uniform(-1, 1, (3, 4)), rng.standard_normal((3, 4))

    def scalar(a):
        return SPECTRAL[name](rg, a).sum()

    def gradient(at):
        x = rg.tensor(at, requires_grad=True)
        return rg.autograd.grad(scalar(x), x)[0].numpy()

    _, hv = rg.autograd.functional.hvp(scalar, rg.tensor(array), rg.tensor(vector))
    step = 1e-6
    numeric = (gradient(array + step * vector) - gradient(array - step * vector)) / (2 * step)
    np.testing.assert_allclose(hv.numpy(), numeric, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("options", ["causal", "float_mask", "bool_mask", "scale"])
def test_unbatched_attention_and_its_second_derivatives_match_torch(options):
    """torch's scaled_dot_product_attention takes unbatched ``[L, E]`` inputs; retrograd's
    kernel raised IndexOutOfRangeError ("too many indices") on them."""
    rng = np.random.default_rng(3)
    array, mask = rng.uniform(-1, 1, (3, 4)), rng.uniform(-1, 1, (3, 3))
    found = []
    for lib in (torch, rg):
        keywords = {
            "causal": {"is_causal": True},
            "float_mask": {"attn_mask": lib.tensor(mask)},
            "bool_mask": {"attn_mask": lib.tensor(mask > 0)},
            "scale": {"scale": 0.3},
        }[options]
        x = lib.tensor(array, requires_grad=True)
        out = lib.nn.functional.scaled_dot_product_attention(x, x * 2.0, x[:, :3].exp(), **keywords)
        (g,) = lib.autograd.grad((out * out).sum(), x, create_graph=True)
        (h,) = lib.autograd.grad((g * g).sum(), x)
        found.append([t.detach().numpy() for t in (out, g, h)])
    assert found[1][0].shape == (3, 3)
    for ours, theirs in zip(found[1], found[0]):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12)
