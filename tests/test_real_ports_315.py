"""Real ports, continued (the harness: ``tests/real_ports.py``): differentiable histograms
written here in the style of kornia's ``kornia.enhance`` histograms and its
mutual-information loss, torch used as an array library.

Surface: Gaussian kernel values of ``values - bins.unsqueeze(0).unsqueeze(0)`` over a 0-d
bandwidth with ``dim()`` checks, marginal densities normalised by ``sum(dim=1)``, a joint
density ``torch.matmul(k1.transpose(1, 2), k2)`` normalised over ``dim=(1, 2)``; an image
histogram with four kernels (a default argument ``centers=torch.tensor([])`` made at
definition, the builtin ``abs`` of a tensor, ``(u <= 1).float()`` masks,
``torch.ones_like(u, dtype=u.dtype, device=u.device)``, a sum over ``dim=(-2, -1)`` then
``.permute(1, 2, 0)``, ``return_pdf`` whose normalisation broadcasts for an (H, W) image
only); the mutual information of two images differentiated back to both in float64 against
torch's autograd.

Regressions guarded: each of those forms once failed or disagreed with torch (a 0-d tensor
made as a default argument, ``abs()`` of a tensor, ``ones_like`` with ``dtype``/``device``
keywords, sums over a tuple of dims, the gradient through ``matmul`` of transposed kernels
and ``log``); a broadcast torch refuses raises ``rg.ShapeError`` naming the shapes, and the
program's ``ValueError``s pass through a port unchanged.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import port, run_source

HISTOGRAM_SOURCE = """
import torch

KERNELS = ("triangular", "gaussian", "uniform", "epanechnikov")


def soft_counts(values, bins, bandwidth, eps=1e-10):
    # values: (B, N, 1); returns each sample's Gaussian weight on each bin and the density
    if values.dim() != 3 or values.shape[2] != 1:
        raise ValueError(f"values must have shape BxNx1, got {tuple(values.shape)}")
    if bins.dim() != 1 or bandwidth.dim() != 0:
        raise ValueError("bins must be 1-d and the bandwidth 0-d")
    weights = torch.exp(-0.5 * ((values - bins.unsqueeze(0).unsqueeze(0)) / bandwidth) ** 2)
    density = weights.mean(dim=1)
    return density / (density.sum(dim=1).unsqueeze(1) + eps), weights


def pair_density(weights_a, weights_b, eps=1e-10):
    joint = torch.matmul(weights_a.transpose(1, 2), weights_b)
    return joint / (joint.sum(dim=(1, 2)).view(-1, 1, 1) + eps)


def histogram(x, bins, bandwidth):
    density, _ = soft_counts(x.unsqueeze(2), bins, bandwidth)
    return density


def histogram2d(x1, x2, bins, bandwidth):
    _, weights_a = soft_counts(x1.unsqueeze(2), bins, bandwidth)
    _, weights_b = soft_counts(x2.unsqueeze(2), bins, bandwidth)
    return pair_density(weights_a, weights_b)


def image_hist2d(image, low=0.0, high=255.0, n_bins=256, bandwidth=-1.0,
                 centers=torch.tensor([]), return_pdf=False, kernel="triangular"):
    if kernel not in KERNELS:
        raise ValueError(f"Kernel must be one of {KERNELS}, not {kernel!r}")
    if centers.numel() == 0:
        if bandwidth <= 0:
            bandwidth = (high - low) / n_bins
        centers = low + bandwidth * (torch.arange(n_bins, dtype=image.dtype) + 0.5)
    elif bandwidth <= 0:
        bandwidth = (high - low) / centers.numel()
    while image.dim() < 4:
        image = image.unsqueeze(0)
    u = abs(image.unsqueeze(0) - centers.to(image).view(-1, 1, 1, 1, 1)) / bandwidth
    inside = (u <= 1).float()
    if kernel == "triangular":
        weights = (1.0 - u) * inside
    elif kernel == "gaussian":
        weights = torch.exp(-2.0 * u**2)
    elif kernel == "uniform":
        weights = torch.ones_like(u, dtype=u.dtype, device=u.device) * inside
    else:
        weights = 0.75 * (1.0 - u**2) * inside
    hist = weights.sum(dim=(-2, -1)).permute(1, 2, 0)  # (B, C, bins)
    if return_pdf:
        # no keepdim here: only a single (H, W) image broadcasts, as in the original
        return hist, hist / (hist.sum(-1) + 1e-10)
    return hist, torch.zeros_like(hist, dtype=hist.dtype, device=hist.device)


def mutual_info(first, second, bins, width):
    a, b = first.flatten(1), second.flatten(1)
    p_a, p_b = histogram(a, bins, width), histogram(b, bins, width)
    p_ab = histogram2d(a, b, bins, width)
    independent = p_a.unsqueeze(2) * p_b.unsqueeze(1)
    return (p_ab * torch.log((p_ab + 1e-10) / (independent + 1e-10))).sum(dim=(1, 2))
"""

STEPS = [("import torch\n", "import retrograd as torch\n")]


def _images(rng):
    image = rng.uniform(0.0, 255.0, (2, 3, 6, 5))
    image[0, 0, :2] = 127.5  # values on a bin centre's edge
    return image


@pytest.mark.parametrize("kernel", ["triangular", "gaussian", "uniform", "epanechnikov"])
@pytest.mark.parametrize("dims", [4, 3, 2])
def test_kornia_image_hist2d_as_torch(kernel, dims):
    image = _images(np.random.default_rng(3150)).astype(np.float32)
    image = image[(0,) * (4 - dims)]
    results = []
    for lib in (torch, rg):
        ns = run_source(HISTOGRAM_SOURCE if lib is torch else port(HISTOGRAM_SOURCE, STEPS), lib)
        # the pdf normalisation broadcasts for an (H, W) image only: torch refuses the
        # others, and so does the port (its ShapeError, API.md section 7)
        hist, pdf = ns["image_hist2d"](
            lib.tensor(image[(0,) * (dims - 2)]), 0.0, 255.0, 16, kernel=kernel, return_pdf=True
        )
        if dims > 2:
            with pytest.raises(
                RuntimeError if lib is torch else rg.ShapeError, match=r"size|shapes"
            ):
                ns["image_hist2d"](
                    lib.tensor(image), 0.0, 255.0, 16, kernel=kernel, return_pdf=True
                )
        plain, zeros = ns["image_hist2d"](
            lib.tensor(image), n_bins=8, bandwidth=40.0, kernel=kernel
        )
        centred, _ = ns["image_hist2d"](
            lib.tensor(image), centers=lib.tensor([10.0, 100.0, 127.5, 200.0]), kernel=kernel
        )
        results.append([x.numpy() for x in (hist, pdf, plain, zeros, centred)])
    for mine, reference in zip(results[1], results[0], strict=True):
        assert mine.shape == reference.shape and mine.dtype == reference.dtype
        np.testing.assert_allclose(mine, reference, rtol=1e-5, atol=1e-5)


def test_kornia_mutual_information_and_its_gradient_as_torch():
    rng = np.random.default_rng(3151)
    first = rng.uniform(0.0, 1.0, (2, 1, 5, 6))
    second = np.clip(first + 0.1 * rng.standard_normal(first.shape), 0.0, 1.0)
    results = []
    for lib in (torch, rg):
        ns = run_source(HISTOGRAM_SOURCE if lib is torch else port(HISTOGRAM_SOURCE, STEPS), lib)
        img1 = lib.tensor(first, dtype=lib.float64, requires_grad=True)
        img2 = lib.tensor(second, dtype=lib.float64, requires_grad=True)
        bins = lib.linspace(0, 1, 12, dtype=lib.float64)
        bandwidth = lib.tensor(0.08, dtype=lib.float64)
        info = ns["mutual_info"](img1, img2, bins, bandwidth)
        hist = ns["histogram"](img1.flatten(1), bins, bandwidth)
        loss = -info.sum() + (hist * lib.arange(12, dtype=lib.float64)).sum()
        if lib is torch:
            loss.backward()
            grads = [img1.grad, img2.grad]
        else:
            gradients = loss.backward()
            grads = [img1.grad(gradients), img2.grad(gradients)]
        results.append([info.detach().numpy(), hist.detach().numpy()] + [g.numpy() for g in grads])
    for mine, reference in zip(results[1], results[0], strict=True):
        np.testing.assert_allclose(mine, reference, rtol=1e-10, atol=1e-12)


def test_the_histogram_checks_refuse_bad_input():
    ns = run_source(port(HISTOGRAM_SOURCE, STEPS), rg)
    with pytest.raises(ValueError, match="BxNx1"):
        ns["soft_counts"](rg.ones(2, 3), rg.ones(4), rg.tensor(0.1))
    with pytest.raises(ValueError, match="Kernel must be"):
        ns["image_hist2d"](rg.ones(3, 3), kernel="cosine")
