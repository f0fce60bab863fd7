"""A program written here in the style of ashawkey/torch-ngp's early NeRF on its pure-torch path,
run under torch and, ported, under retrograd from the same weights and draws (the harness:
``tests/real_ports.py``): neural fields, continued.

- a truncated exponential as a ``torch.autograd.Function`` whose ``forward`` is decorated by
  ``torch.cuda.amp.custom_fwd(cast_inputs=torch.float32)`` and ``backward`` by
  ``custom_bwd``, the gradient taken at ``x.clamp(-15, 15)``;
- a frequency encoder (``2.0 ** torch.linspace(...)`` turned into a list by
  ``.numpy().tolist()``, ``**kwargs`` taking the caller's ``size=``) built by a factory;
- a field of two bias-free MLPs (a pure-torch stand-in for torch-ngp's ``FFMLP`` CUDA
  extension) with the colour input padded by hand with ``torch.zeros_like``; rays clipped to
  the cube (``torch.where(tmin < tmax, tmin, tmax).max(dim=-1, keepdim=True)[0]``), jittered
  samples clamped by tensor bounds ``z.clamp(near, far)`` and ``pts.clamp(-bound, bound)``;
  importance samples by inverting the CDF (``torch.searchsorted(..., right=True)``,
  ``torch.gather`` of expanded tensors, ``torch.where`` on the denominators) under
  ``torch.no_grad()``, merged by ``torch.sort`` and ``torch.gather(..., index=order.unsqueeze(
  -1).expand_as(rgb))``; alpha compositing with ``torch.cumprod`` and a white background;
- a density grid refreshed over ``torch.linspace(...).split(n)`` chunks and
  ``torch.meshgrid(..., indexing="ij")``, slices of a buffer written, ``.item()`` and a print;
  rendering staged in ``eval()`` (``depth[b:b + 1, head:tail] = part``) and not.

The training step is the test's: the mean squared error and Adam with ``eps=1e-15``. The
jitter draws from one seeded stream in both runs; ``initialize`` gives the port torch's
initial weights. The port changes the import lines and the gradient lines (``grads =
loss.backward()``, ``optimizer.step(grads)``).
"""

from __future__ import annotations

import numpy as np
import pytest

from real_ports import (
    assert_records_agree,
    global_streams_restored,  # noqa: F401 (a fixture: the runs seed every stream)
    initializer,
    runs_with_draws,
)

NGP_SOURCE = r"""
import torch
import torch.nn as nn
from torch import autograd
from torch.cuda import amp
from torch.nn import functional as F


class BiasFreeMLP(nn.Module):  # stand-in for torch-ngp's fully fused MLP extension
    def __init__(self, d_in, d_out, width, depth):
        super().__init__()
        sizes = [d_in] + [width] * (depth - 1) + [d_out]
        self.layers = nn.ModuleList(nn.Linear(i, o, bias=False) for i, o in zip(sizes, sizes[1:]))

    def forward(self, x):
        *hidden, last = self.layers
        for layer in hidden:
            x = F.relu(layer(x))
        return last(x)


class ClampedExp(autograd.Function):
    # exp forward; the backward evaluates exp at a clamped input so it cannot overflow
    @staticmethod
    @amp.custom_fwd(cast_inputs=torch.float32)
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.exp(x)

    @staticmethod
    @amp.custom_bwd
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * torch.exp(x.clamp(-15, 15))


clamped_exp = ClampedExp.apply


class Fourier(nn.Module):
    def __init__(self, dims, octaves, fns=(torch.sin, torch.cos)):
        super().__init__()
        self.fns = fns
        self.freqs = (2.0 ** torch.linspace(0.0, octaves - 1, octaves)).numpy().tolist()
        self.output_dim = dims * (1 + octaves * len(fns))

    def forward(self, x, **kwargs):  # kwargs: what hash encoders take (size=...)
        return torch.cat([x] + [fn(x * f) for f in self.freqs for fn in self.fns], dim=-1)


def make_encoder(kind, dims=3, octaves=3, **kwargs):
    if kind == "none":
        return (lambda x, **kw: x), dims
    if kind != "frequency":
        raise NotImplementedError(kind)
    enc = Fourier(dims, octaves)
    return enc, enc.output_dim


def invert_cdf(bins, weights, n, det=False):
    pdf = (weights + 1e-5) / torch.sum(weights + 1e-5, -1, keepdim=True)
    cdf = torch.cat([torch.zeros_like(pdf[..., :1]), torch.cumsum(pdf, -1)], -1)
    if det:
        u = torch.linspace(0.5 / n, 1.0 - 0.5 / n, steps=n).expand(list(cdf.shape[:-1]) + [n])
    else:
        u = torch.rand(list(cdf.shape[:-1]) + [n])
    u = u.contiguous()
    idx = torch.searchsorted(cdf, u, right=True)
    lo = torch.max(torch.zeros_like(idx), idx - 1)
    hi = torch.min(torch.ones_like(idx) * (cdf.shape[-1] - 1), idx)
    pair = torch.stack([lo, hi], -1)
    wide = [pair.shape[0], pair.shape[1], cdf.shape[-1]]
    c = torch.gather(cdf.unsqueeze(1).expand(wide), 2, pair)
    z = torch.gather(bins.unsqueeze(1).expand(wide), 2, pair)
    span = c[..., 1] - c[..., 0]
    span = torch.where(span < 1e-5, torch.ones_like(span), span)
    return z[..., 0] + (u - c[..., 0]) / span * (z[..., 1] - z[..., 0])


def cube_hits(origins, dirs, bound):
    t0 = (-bound - origins) / dirs
    t1 = (bound - origins) / dirs
    enter = torch.where(t0 < t1, t0, t1).max(dim=-1, keepdim=True)[0]
    leave = torch.where(t0 > t1, t0, t1).min(dim=-1, keepdim=True)[0]
    return torch.clamp(enter, min=0.05), leave


def composite(z, sigma, rgb):
    gaps = z[..., 1:] - z[..., :-1]
    gaps = torch.cat([gaps, 1e10 * torch.ones_like(gaps[..., :1])], dim=-1)
    alpha = 1 - torch.exp(-gaps * sigma)
    through = torch.cumprod(torch.cat([torch.ones_like(alpha[..., :1]), 1 - alpha + 1e-7], -1), -1)
    return gaps, alpha * through[..., :-1]


class Field(nn.Module):
    def __init__(self, width=16, geo=7, grid=-1):
        super().__init__()
        self.encode_x, d_x = make_encoder("frequency")
        self.encode_d, d_d = make_encoder("frequency")
        self.geo = geo
        self.sigma_net = BiasFreeMLP(d_x, 1 + geo, width, 2)
        self.color_net = BiasFreeMLP(d_d + geo + 1, 3, width, 3)  # +1: a zero pad column
        if grid > 0:
            self.register_buffer("density_grid", torch.zeros([grid + 1] * 3))
            self.mean_density, self.grid_updates = 0, 0
        else:
            self.density_grid = None

    def forward(self, pts, view, bound):
        b, n = pts.shape[:2]
        h = self.sigma_net(self.encode_x(pts.reshape(b * n, -1), size=bound))
        sigma, geo = F.relu(h[..., 0]), h[..., 1:]
        pad = torch.zeros_like(geo[..., :1])
        colour_in = torch.cat([self.encode_d(view.reshape(b * n, -1)), geo, pad], -1)
        rgb = torch.sigmoid(self.color_net(colour_in))
        return sigma.reshape(b, n), rgb.reshape(b, n, -1)

    def density(self, x, bound):
        b, n = x.shape[:2]
        h = self.sigma_net(self.encode_x(x.reshape(b * n, -1), size=bound))
        return F.relu(h[..., 0]).reshape(b, n)

    def march(self, origins, dirs, steps, bound, extra):
        b, n = origins.shape[:2]
        near, far = cube_hits(origins, dirs, bound)
        z = near + (far - near) * torch.linspace(0.0, 1.0, steps)[None, None].expand((b, n, steps))
        if self.training:
            z = (z + (torch.rand(z.shape) - 0.5) * (far - near) / steps).clamp(near, far)
        pts = (origins.unsqueeze(-2) + dirs.unsqueeze(-2) * z.unsqueeze(-1)).clamp(-bound, bound)
        views = dirs.unsqueeze(-2).expand_as(pts).reshape(b, -1, 3)
        sigma, rgb = self(pts.reshape(b, -1, 3), views, bound)
        sigma, rgb = sigma.reshape(b, n, steps), rgb.reshape(b, n, steps, 3)
        if extra > 0:
            with torch.no_grad():
                gaps, w = composite(z, sigma, rgb)
                mids = (z[..., :-1] + 0.5 * gaps[..., :-1]).reshape(b * n, -1)
                inner = w.reshape(b * n, -1)[:, 1:-1]
                z_new = invert_cdf(mids, inner, extra, det=not self.training)
                z_new = z_new.detach().reshape(b, n, extra)
                more = origins.unsqueeze(-2) + dirs.unsqueeze(-2) * z_new.unsqueeze(-1)
            views = dirs.unsqueeze(-2).expand_as(more).reshape(b, -1, 3)
            s2, c2 = self(more.reshape(b, -1, 3), views, bound)
            z, order = torch.sort(torch.cat([z, z_new], -1), dim=-1)
            sigma = torch.cat([sigma, s2.reshape(b, n, extra)], -1)
            sigma = torch.gather(sigma, dim=-1, index=order)
            rgb = torch.cat([rgb, c2.reshape(b, n, extra, 3)], dim=-2)
            rgb = torch.gather(rgb, dim=-2, index=order.unsqueeze(-1).expand_as(rgb))
        _, w = composite(z, sigma, rgb)
        total = w.sum(dim=-1)
        rel = ((z - near) / (far - near)).clamp(0, 1)
        depth = (torch.sum(w * rel, -1) + 1e-7) / (total + 1e-7)
        image = torch.sum(w.unsqueeze(-1) * rgb, dim=-2) + (1 - total).unsqueeze(-1)  # white bg
        return depth, image

    def refresh_grid(self, bound, chunk=64):
        if self.density_grid is None:
            return
        side = self.density_grid.shape[0]
        axis = torch.linspace(-bound, bound, side).split(chunk)
        fresh = torch.zeros_like(self.density_grid)
        with torch.no_grad():
            for i, xs in enumerate(axis):
                for j, ys in enumerate(axis):
                    for k, zs in enumerate(axis):
                        gx, gy, gz = torch.meshgrid(xs, ys, zs, indexing="ij")
                        pts = torch.stack([g.reshape(-1) for g in (gx, gy, gz)], -1)[None]
                        block = self.density(pts, bound).reshape(len(xs), len(ys), len(zs))
                        fresh[i * chunk:i * chunk + len(xs), j * chunk:j * chunk + len(ys),
                              k * chunk:k * chunk + len(zs)] = block
        self.density_grid = fresh
        self.mean_density = torch.mean(fresh).item()
        self.grid_updates += 1
        peak = fresh.max().item()
        print(f"grid update {self.grid_updates}: mean={self.mean_density:.6f} max={peak:.6f}")

    def render(self, origins, dirs, steps, bound, extra, staged=False, max_rays=4096):
        b, n = origins.shape[:2]
        if not staged:
            depth, rgb = self.march(origins, dirs, steps, bound, extra)
            return {"depth": depth, "rgb": rgb}
        depth, rgb = torch.zeros((b, n)), torch.zeros((b, n, 3))
        for i in range(b):
            for head in range(0, n, max_rays):
                tail = min(head + max_rays, n)
                o, d = origins[i:i + 1, head:tail], dirs[i:i + 1, head:tail]
                part_d, part_c = self.march(o, d, steps, bound, extra)
                depth[i:i + 1, head:tail] = part_d
                rgb[i:i + 1, head:tail] = part_c
        return {"depth": depth, "rgb": rgb}
"""

NGP_TRAIN = """
model = Field(width=16, geo=7, grid=3)
initialize(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, eps=1e-15, betas=(0.9, 0.99))
mse = torch.nn.MSELoss()
origins = torch.tensor(ray_origins).float()[None]
dirs = torch.tensor(ray_directions).float()[None]
target = torch.tensor(ray_colours).float()[None]
model.train()
for step in range(2):
    out = model.render(origins, dirs, steps=6, bound=1, extra=3)
    loss = mse(out["rgb"], target)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    weights = {k: v.detach().numpy().copy() for k, v in model.named_parameters()}
    record.append({"loss": loss.item(), "depth": out["depth"].detach().numpy(), **weights})
model.refresh_grid(bound=1, chunk=3)
model.eval()
with torch.no_grad():
    out = model.render(origins, dirs, steps=6, bound=1, extra=3, staged=True, max_rays=4)
grid = model.density_grid.numpy()
record.append({"depth": out["depth"].numpy(), "rgb": out["rgb"].numpy(), "grid": grid})
x = torch.tensor([-30.0, -1.0, 2.0, 30.0], requires_grad=True)
y = clamped_exp(x)
(y * torch.tensor([0.5, 1.0, 1.5, 2.0])).sum().backward()
record.append({"y": y.detach().numpy(), "x.grad": x.grad.numpy()})
"""

NGP_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    ("    loss.backward()\n", "    grads = loss.backward()\n"),
    ("    optimizer.step()\n", "    optimizer.step(grads)\n"),
    (
        "(y * torch.tensor([0.5, 1.0, 1.5, 2.0])).sum().backward()\n",
        "x_grads = (y * torch.tensor([0.5, 1.0, 1.5, 2.0])).sum().backward()\n",
    ),
    ('"x.grad": x.grad.numpy()', '"x.grad": x.grad(x_grads).numpy()'),
]


@pytest.mark.usefixtures("global_streams_restored")
def test_torch_ngp_pure_torch_nerf_trains_and_renders_as_torch(capsys):
    rng = np.random.default_rng(395)
    origins = np.array([0.1, -0.1, 2.2]) + 0.15 * rng.standard_normal((9, 3))
    directions = np.column_stack([0.3 * rng.standard_normal((9, 2)), -np.ones(9)])
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        NGP_SOURCE + NGP_TRAIN,
        NGP_STEPS,
        capsys,
        395,
        initialize=initializer(),
        ray_origins=origins,
        ray_directions=directions,
        ray_colours=rng.uniform(0, 1, (9, 3)),
    )
    assert their_log.startswith("grid update 1: mean=")
    assert our_log.split("mean=")[0] == their_log.split("mean=")[0]
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
