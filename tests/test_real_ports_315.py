# ruff: noqa: E501  (the program is kept as its authors wrote it: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
differentiable histograms, torch used as an array library.

- kornia's ``kornia/enhance/histogram.py`` as written (the docstrings left out):
  ``marginal_pdf`` (Gaussian kernel values of ``values - bins.unsqueeze(0).unsqueeze(0)``
  over a 0-d ``sigma``, the checks on ``dim()``), ``joint_pdf`` (``torch.matmul(
  kernel_values1.transpose(1, 2), kernel_values2)`` normalised over ``dim=(1, 2)``),
  ``histogram`` and ``histogram2d``, and ``image_hist2d`` with its four kernels (the default
  argument ``centers: torch.Tensor = torch.tensor([])`` made at definition, the builtin
  ``abs`` of a tensor, ``(u <= 1).float()`` masks, ``torch.ones_like(u, dtype=u.dtype,
  device=u.device)``, the sum over ``dim=(-2, -1)`` then ``.permute(1, 2, 0)``, ``return_pdf``);
  then the mutual information of two images from ``histogram2d`` as kornia's losses use it,
  differentiated back to the image in float64 against torch's autograd.

The lines changed: the ``import`` line and the gradient lines.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import port, run_source

KORNIA_HISTOGRAM_SOURCE = """
import math
from typing import Tuple

import torch

__all__ = ["histogram", "histogram2d"]


def marginal_pdf(
    values: torch.Tensor, bins: torch.Tensor, sigma: torch.Tensor, epsilon: float = 1e-10
) -> Tuple[torch.Tensor, torch.Tensor]:
    if not isinstance(values, torch.Tensor):
        raise TypeError("Input values type is not a torch.Tensor. Got {}".format(type(values)))

    if not isinstance(bins, torch.Tensor):
        raise TypeError("Input bins type is not a torch.Tensor. Got {}".format(type(bins)))

    if not isinstance(sigma, torch.Tensor):
        raise TypeError("Input sigma type is not a torch.Tensor. Got {}".format(type(sigma)))

    if not values.dim() == 3:
        raise ValueError("Input values must be a of the shape BxNx1." " Got {}".format(values.shape))

    if not bins.dim() == 1:
        raise ValueError("Input bins must be a of the shape NUM_BINS" " Got {}".format(bins.shape))

    if not sigma.dim() == 0:
        raise ValueError("Input sigma must be a of the shape 1" " Got {}".format(sigma.shape))

    residuals = values - bins.unsqueeze(0).unsqueeze(0)
    kernel_values = torch.exp(-0.5 * (residuals / sigma).pow(2))

    pdf = torch.mean(kernel_values, dim=1)
    normalization = torch.sum(pdf, dim=1).unsqueeze(1) + epsilon
    pdf = pdf / normalization

    return pdf, kernel_values


def joint_pdf(kernel_values1: torch.Tensor, kernel_values2: torch.Tensor, epsilon: float = 1e-10) -> torch.Tensor:
    if not isinstance(kernel_values1, torch.Tensor):
        raise TypeError("Input kernel_values1 type is not a torch.Tensor. Got {}".format(type(kernel_values1)))

    if not isinstance(kernel_values2, torch.Tensor):
        raise TypeError("Input kernel_values2 type is not a torch.Tensor. Got {}".format(type(kernel_values2)))

    if not kernel_values1.dim() == 3:
        raise ValueError("Input kernel_values1 must be a of the shape BxN." " Got {}".format(kernel_values1.shape))

    if not kernel_values2.dim() == 3:
        raise ValueError("Input kernel_values2 must be a of the shape BxN." " Got {}".format(kernel_values2.shape))

    if kernel_values1.shape != kernel_values2.shape:
        raise ValueError(
            "Inputs kernel_values1 and kernel_values2 must have the same shape."
            " Got {} and {}".format(kernel_values1.shape, kernel_values2.shape)
        )

    joint_kernel_values = torch.matmul(kernel_values1.transpose(1, 2), kernel_values2)
    normalization = torch.sum(joint_kernel_values, dim=(1, 2)).view(-1, 1, 1) + epsilon
    pdf = joint_kernel_values / normalization

    return pdf


def histogram(x: torch.Tensor, bins: torch.Tensor, bandwidth: torch.Tensor, epsilon: float = 1e-10) -> torch.Tensor:
    pdf, _ = marginal_pdf(x.unsqueeze(2), bins, bandwidth, epsilon)

    return pdf


def histogram2d(
    x1: torch.Tensor, x2: torch.Tensor, bins: torch.Tensor, bandwidth: torch.Tensor, epsilon: float = 1e-10
) -> torch.Tensor:
    pdf1, kernel_values1 = marginal_pdf(x1.unsqueeze(2), bins, bandwidth, epsilon)
    pdf2, kernel_values2 = marginal_pdf(x2.unsqueeze(2), bins, bandwidth, epsilon)

    pdf = joint_pdf(kernel_values1, kernel_values2)

    return pdf


def image_hist2d(
    image: torch.Tensor,
    min: float = 0.0,
    max: float = 255.0,
    n_bins: int = 256,
    bandwidth: float = -1.0,
    centers: torch.Tensor = torch.tensor([]),
    return_pdf: bool = False,
    kernel: str = "triangular",
):
    if not isinstance(image, torch.Tensor):
        raise TypeError(f"Input image type is not a torch.Tensor. Got {type(image)}.")

    if centers is not None and not isinstance(centers, torch.Tensor):
        raise TypeError(f"Bins' centers type is not a torch.Tensor. Got {type(centers)}.")

    if centers.numel() > 0 and centers.dim() != 1:
        raise ValueError(f"Bins' centers must be a torch.Tensor " "of the shape (n_bins,). Got {values.shape}.")

    if not isinstance(min, float):
        raise TypeError(f'Type of lower end of the range is not a float. Got {type(min)}.')

    if not isinstance(max, float):
        raise TypeError(f"Type of upper end of the range is not a float. Got {type(min)}.")

    if not isinstance(n_bins, int):
        raise TypeError(f"Type of number of bins is not an int. Got {type(n_bins)}.")

    if bandwidth != -1 and not isinstance(bandwidth, float):
        raise TypeError(f"Bandwidth type is not a float. Got {type(bandwidth)}.")

    if not isinstance(return_pdf, bool):
        raise TypeError(f"Return_pdf type is not a bool. Got {type(return_pdf)}.")

    if not isinstance(kernel, str):
        raise TypeError(f"Kernel type is not a str. Got {type(kernel)}.")

    device = image.device

    if image.dim() == 4:
        batch_size, n_channels, height, width = image.size()
    elif image.dim() == 3:
        batch_size = 1
        n_channels, height, width = image.size()
    elif image.dim() == 2:
        height, width = image.size()
        batch_size, n_channels = 1, 1
    else:
        raise ValueError(f"Input values must be a tensor of the shape " f"BxCxHxW, CxHxW or HxW. Got {image.shape}.")

    if bandwidth == -1.0:
        bandwidth = (max - min) / n_bins
    if centers.numel() == 0:
        centers = min + bandwidth * (torch.arange(n_bins, device=device).float() + 0.5)
    centers = centers.reshape(-1, 1, 1, 1, 1)
    u = abs(image.unsqueeze(0) - centers) / bandwidth
    if kernel == "triangular":
        mask = (u <= 1).float()
        kernel_values = (1 - u) * mask
    elif kernel == "gaussian":
        kernel_values = torch.exp(-0.5 * u ** 2) / math.sqrt(2 * math.pi)
    elif kernel == "uniform":
        mask = (u <= 1).float()
        kernel_values = torch.ones_like(u, dtype=u.dtype, device=u.device) * 0.5 * mask
    elif kernel == "epanechnikov":
        mask = (u <= 1).float()
        kernel_values = 0.75 * (1 - u ** 2) * mask
    else:
        raise ValueError(f"Kernel must be 'triangular', 'gaussian', " f"'uniform' or 'epanechnikov'. Got {kernel}.")

    hist = torch.sum(kernel_values, dim=(-2, -1)).permute(1, 2, 0)
    if return_pdf:
        normalization = torch.sum(hist, dim=-1).unsqueeze(0) + 1e-10
        pdf = hist / normalization
        return hist, pdf
    return hist, torch.zeros_like(hist, dtype=hist.dtype, device=device)


def mutual_information(img1, img2, bins, bandwidth):
    # kornia's mutual-information loss over the flattened images
    x1, x2 = img1.flatten(1), img2.flatten(1)
    p1 = histogram(x1, bins, bandwidth)
    p2 = histogram(x2, bins, bandwidth)
    p12 = histogram2d(x1, x2, bins, bandwidth)
    outer = p1.unsqueeze(2) * p2.unsqueeze(1)
    return (p12 * torch.log((p12 + 1e-10) / (outer + 1e-10))).sum(dim=(1, 2))
"""

STEPS = [("import torch\n\n__all__", "import retrograd as torch\n\n__all__")]


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
        ns = run_source(
            KORNIA_HISTOGRAM_SOURCE if lib is torch else port(KORNIA_HISTOGRAM_SOURCE, STEPS), lib
        )
        # kornia's pdf normalisation broadcasts for an (H, W) image only: torch refuses the
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
        ns = run_source(
            KORNIA_HISTOGRAM_SOURCE if lib is torch else port(KORNIA_HISTOGRAM_SOURCE, STEPS), lib
        )
        img1 = lib.tensor(first, dtype=lib.float64, requires_grad=True)
        img2 = lib.tensor(second, dtype=lib.float64, requires_grad=True)
        bins = lib.linspace(0, 1, 12, dtype=lib.float64)
        bandwidth = lib.tensor(0.08, dtype=lib.float64)
        info = ns["mutual_information"](img1, img2, bins, bandwidth)
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


def test_kornia_checks_refuse_as_written():
    ns = run_source(port(KORNIA_HISTOGRAM_SOURCE, STEPS), rg)
    with pytest.raises(ValueError, match="BxNx1"):
        ns["marginal_pdf"](rg.ones(2, 3), rg.ones(4), rg.tensor(0.1))
    with pytest.raises(ValueError, match="Kernel must be"):
        ns["image_hist2d"](rg.ones(3, 3), kernel="cosine")
