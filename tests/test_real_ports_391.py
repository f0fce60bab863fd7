"""Real ports, continued (the harness: ``tests/real_ports.py``): differentiable graphics, a
2D Gaussian splatting fit with densification written here in the style of
OutofAi/2D-Gaussian-Splatting, run on torch and, ported, on retrograd from the same draws.

The program renders Gaussians whose covariances are built by nested ``torch.stack``, inverted
by ``torch.inverse`` and normalised by ``torch.det`` of a batch of 2x2 matrices, evaluated by
``torch.einsum('b...i,b...ij,b...j->b...')`` over a ``linspace`` grid, peak-normalised by
``max(dim=-1, keepdim=True)`` twice, tiled by ``repeat(1, 3, 1).view(...)``, ``F.pad``-ded to
the image and moved by ``F.affine_grid``/``F.grid_sample`` (``align_corners=True``) with a
``theta`` whose column is written by ``theta[:, :, 2] = coords`` and carries the gradient. The
loss is ``nn.L1Loss`` plus a D-SSIM by grouped ``F.conv2d`` with a window made through
``torch.autograd.Variable``, ``window.type_as(img)`` and an ``img.is_cuda`` check. Training
holds every Gaussian in one ``nn.Parameter`` ``W`` indexed by a boolean mask:
``W.grad.data[~mask] = 0.0`` before ``optimizer.step()``, pruning by ``(...).nonzero(as_tuple
=True)[0]``, splitting and cloning by ``torch.sort(..., descending=True)``, ``torch.isin`` and
``W.data[a:b, :] = W.data[idx, :]`` / ``W.data[idx, 0:2] /= 1.6``, ``torch.cuda
.empty_cache()``, and a statistics file.

The original port exposed no defect of its own (it passed when added); the file guards that
this surface trains as torch does. The image is a small synthetic one made by the test (16x16,
a 9-pixel kernel, 8 + 24 Gaussians, 7 epochs, densifying every 3). ``np.random.randint`` and
``torch.rand`` draw from one seeded stream in both runs. The lines changed: the gradient lines
(``grads = loss.backward()``, ``W.grad(grads)`` for ``W.grad``, ``optimizer.step(grads)``).
"""

from __future__ import annotations

import numpy as np

from real_ports import assert_records_agree, runs_with_draws

SPLAT_SOURCE = r"""
# Fit an image with 2D Gaussians, growing and pruning the set as training goes.
import os

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.optim import Adam

KERNEL, SIZE = 9, (16, 16, 3)
ACTIVE, SPARE = 8, 24
EPOCHS, DENSIFY_EVERY = 7, 3
GRAD_MIN, SCALE_MIN = 0.002, 0.002
os.makedirs(output_directory, exist_ok=True)
log_path = os.path.join(output_directory, "statistics.txt")
with open(log_path, "w") as log:
    log.write(f"kernel {KERNEL}, image {SIZE}, {ACTIVE}+{SPARE} gaussians\n")


def splat(sx, sy, corr, centres, rgb, size):
    n = rgb.shape[0]
    sx, sy, corr = sx.view(n, 1, 1), sy.view(n, 1, 1), corr.view(n, 1, 1)
    off = corr * sx * sy
    rows = [torch.stack([sx**2, off], dim=-1), torch.stack([off, sy**2], dim=-1)]
    cov = torch.stack(rows, dim=-2)
    axis = torch.tensor([-5.0]).view(-1, 1) + 10.0 * torch.linspace(0, 1, steps=KERNEL)
    across = axis.unsqueeze(-1).expand(-1, -1, KERNEL)
    down = axis.unsqueeze(1).expand(-1, KERNEL, -1)
    grid = torch.stack([across, down], dim=-1)
    expo = torch.einsum("b...i,b...ij,b...j->b...", grid, -0.5 * torch.inverse(cov), grid)
    density = torch.exp(expo) / (2 * torch.tensor(np.pi) * torch.sqrt(torch.det(cov)).view(n, 1, 1))
    peak, _ = density.max(dim=-1, keepdim=True)
    peak, _ = peak.max(dim=-2, keepdim=True)
    tiles = (density / peak).repeat(1, 3, 1).view(n * 3, KERNEL, KERNEL)
    tiles = tiles.reshape(n, 3, KERNEL, KERNEL)
    dh, dw = size[0] - KERNEL, size[1] - KERNEL
    tiles = F.pad(tiles, (dw // 2, dw - dw // 2, dh // 2, dh - dh // 2), "constant", 0)
    theta = torch.zeros(n, 2, 3, dtype=torch.float32)
    theta[:, 0, 0] = 1.0
    theta[:, 1, 1] = 1.0
    theta[:, :, 2] = centres  # the shift keeps the centres' gradient
    where = F.affine_grid(theta, size=tuple(tiles.shape), align_corners=True)
    moved = F.grid_sample(tiles, where, align_corners=True)
    image = (rgb[:, :, None, None] * moved).sum(dim=0)
    return torch.clamp(image, 0, 1).permute(1, 2, 0)


def ssim_window(width, channels, sigma=1.5):
    g = torch.exp(torch.tensor([-((i - width // 2) ** 2) / (2 * sigma**2) for i in range(width)]))
    g = (g / g.sum()).unsqueeze(1)
    plane = g.mm(g.t()).float()[None, None]
    return torch.autograd.Variable(plane.expand(channels, 1, width, width).contiguous())


def dssim(a, b, width=5):
    channels = a.size()[-1]
    a, b = a.permute(2, 0, 1)[None], b.permute(2, 0, 1)[None]
    window = ssim_window(width, channels)
    if a.is_cuda:
        window = window.cuda(a.get_device())
    window = window.type_as(a)
    blur = lambda x: F.conv2d(x, window, padding=width // 2, groups=channels)
    ma, mb = blur(a), blur(b)
    va, vb, cab = blur(a * a) - ma**2, blur(b * b) - mb**2, blur(a * b) - ma * mb
    c1, c2 = 0.01**2, 0.03**2
    score = (2 * ma * mb + c1) * (2 * cab + c2) / ((ma**2 + mb**2 + c1) * (va + vb + c2))
    return torch.clamp((1 - score) / 2, 0, 1).mean()


target = torch.tensor(picture, dtype=torch.float32)
picks = np.random.randint(0, [SIZE[0], SIZE[1]], size=(ACTIVE + SPARE, 2))
colour = torch.tensor(np.array([picture[r, c] for r, c in picks])).float()
unit = torch.tensor(picks / [SIZE[0], SIZE[1]]).float()
centre = torch.atanh((torch.tensor([0.5, 0.5]) - unit) * 2.0 * 0.95)  # 0.95: atanh stays finite
start = torch.cat([torch.rand(ACTIVE + SPARE, 2), 2 * torch.rand(ACTIVE + SPARE, 1) - 1,
                   torch.ones(ACTIVE + SPARE, 1), colour, centre], dim=1)
W = nn.Parameter(start)
live = torch.cat([torch.ones(ACTIVE, dtype=bool), torch.zeros(SPARE, dtype=bool)])
filled = ACTIVE
optimizer = Adam([W], lr=0.01)
l1 = nn.L1Loss()

for epoch in range(EPOCHS):
    if epoch > 0 and epoch % (DENSIFY_EVERY + 1) == 0:
        faint = (torch.sigmoid(W[:, 3]) < 0.01).nonzero(as_tuple=True)[0]
        live[faint] = False
        W.data[~live] = 0.0
    torch.cuda.empty_cache()

    g = W[live]
    n = g.shape[0]
    rgb = torch.sigmoid(g[:, 4:7]) * torch.sigmoid(g[:, 3]).view(n, 1)
    sx, sy, corr = torch.sigmoid(g[:, 0]), torch.sigmoid(g[:, 1]), torch.tanh(g[:, 2])
    render = splat(sx, sy, corr, torch.tanh(g[:, 7:9]), rgb, SIZE)
    loss = 0.8 * l1(render, target) + 0.2 * dssim(render, target)
    optimizer.zero_grad()
    loss.backward()
    W.grad.data[~live] = 0.0  # spare rows stay put

    if epoch > 0 and epoch % DENSIFY_EVERY == 0:
        moving, by_move = torch.sort(torch.norm(W.grad[live][:, 7:9], dim=1, p=2), descending=True)
        widths = torch.norm(torch.sigmoid(W.data[live][:, 0:2]), dim=1, p=2)
        wide, by_width = torch.sort(widths, descending=True)
        movers = by_move[moving > GRAD_MIN]
        both = torch.isin(movers, by_width[wide > SCALE_MIN])
        for chosen, shrink in ((movers[both], True), (movers[~both], False)):
            if len(chosen) == 0 or filled + len(chosen) > ACTIVE + SPARE:
                continue
            new = slice(filled, filled + len(chosen))
            live[new] = True
            W.data[new, :] = W.data[chosen, :]
            if shrink:  # split: both copies get narrower
                W.data[new, 0:2] /= 1.6
                W.data[chosen, 0:2] /= 1.6
            filled += len(chosen)
            with open(log_path, "a") as log:
                log.write(f"{'split' if shrink else 'cloned'}: {len(chosen)}\n")
    optimizer.step()
    print(f"epoch {epoch + 1}: loss {loss.item():.6f} over {n} gaussians")
    record.append({"loss": loss.item(), "W": W.detach().numpy().copy(), "live": live.numpy().copy(),
                   "render": render.detach().numpy()})

with open(log_path, "a") as log:
    log.write(f"final loss {loss.item()}\n")
"""

SPLAT_STEPS = [
    ("import torch\nimport torch.nn", "import retrograd as torch\nimport retrograd.nn"),
    ("    loss.backward()\n", "    grads = loss.backward()\n"),
    ("W.grad.data[~live]", "W.grad(grads).data[~live]"),
    ("torch.norm(W.grad[live]", "torch.norm(W.grad(grads)[live]"),
    ("    optimizer.step()\n", "    optimizer.step(grads)\n"),
]


def test_2d_gaussian_splatting_densifies_and_trains_as_torch(capsys, tmp_path):
    np.random.seed(391)
    rows, cols = np.mgrid[0:16, 0:16] / 15.0
    image = np.stack([rows, cols, 0.5 + 0.4 * np.sin(6 * rows * cols)], axis=-1)
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        SPLAT_SOURCE,
        SPLAT_STEPS,
        capsys,
        391,
        picture=image,
        make_output_directory=lambda lib: str(tmp_path / lib.__name__),
    )
    their_stats = (tmp_path / "torch" / "statistics.txt").read_text().splitlines()
    our_stats = (tmp_path / "retrograd" / "statistics.txt").read_text().splitlines()
    assert our_stats[:-1] == their_stats[:-1]  # the split and cloned counts
    assert any(line.startswith(("split", "cloned")) for line in their_stats)
    np.testing.assert_allclose(
        float(our_stats[-1].split()[-1]), float(their_stats[-1].split()[-1]), rtol=1e-5
    )
    assert our_log.count("epoch") == their_log.count("epoch") == 7
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-6)
