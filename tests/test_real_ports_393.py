"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
neural fields, continued: a program written here in the style of kwea123/nerf_pl's early NeRF
(frequency encoding, the MLP with a skip, hierarchical volume rendering, a coarse/fine training
step).

Surface: the encoding's ``2**torch.linspace(0, n-1, n)`` (or a linear ``linspace`` band),
iterating a tensor's frequencies, ``[torch.sin, torch.cos]`` kept in a list; layers made by
``setattr(self, f"...{i}", ...)`` and read back by ``getattr``, ``nn.ReLU(True)``, the skip
``torch.cat``, ``torch.split(x, [n_xyz, n_dir], dim=-1)``, a ``sigma_only`` forward; chunked
inference; inverse-transform sampling (``searchsorted(cdf, u, side='right')``,
``torch.clamp_min``/``torch.clamp_max`` of the indices, ``torch.stack(...).view``,
``torch.gather``, ``denom[denom < eps] = 1``, deterministic ``linspace(...).expand(...)
.contiguous()`` or ``torch.rand`` draws); rendering (``torch.norm(..., dim=1, keepdim=True)``,
``torch.repeat_interleave(x, repeats=n, dim=0)``, the exclusive ``torch.cumprod``
transmittance, density noise by ``torch.randn(sigmas.shape, device=sigmas.device)``, a white
background, depth or disparity sampling, stratified jitter by ``torch.rand(shape, device=...)``);
the fine samples ``torch.sort``-ed in and ``.detach()``-ed; ``MSELoss(reduction='mean')`` with
``loss +=``, ``Adam(..., eps=...)`` and ``MultiStepLR(milestones=..., gamma=...)``.

``searchsorted`` (nerf_pl's era took it from the ``torchsearchsorted`` CUDA extension) is each
library's ``searchsorted(a, v, side=side)``. The rays are a small synthetic batch. Stratified
samples and density noise draw from one seeded stream in both runs; ``initialize`` gives the
port torch's initial weights. The lines changed: the ``import`` lines and the gradient lines
(``grads = loss.backward()``, ``optimizer.step(grads)``).
"""

from __future__ import annotations

import numpy as np

from real_ports import assert_records_agree, initializer, runs_with_draws

NERF_PL_SOURCE = """
import torch
from torch import nn


class FrequencyEncoding(nn.Module):
    # x -> (x, sin(f1 x), cos(f1 x), sin(f2 x), ...), octave-spaced or evenly spaced bands
    def __init__(self, channels, n_bands, octaves=True):
        super().__init__()
        self.waves = [torch.sin, torch.cos]
        last = n_bands - 1
        if octaves:
            self.bands = 2 ** torch.linspace(0, last, n_bands)
        else:
            self.bands = torch.linspace(1, 2 ** last, n_bands)
        self.out_channels = channels * (1 + 2 * n_bands)

    def forward(self, x):
        parts = [x]
        for band in self.bands:
            parts.extend(wave(band * x) for wave in self.waves)
        return torch.cat(parts, -1)


class RadianceField(nn.Module):
    def __init__(self, n_xyz, n_dir, depth=4, width=16, skip_at=(2,)):
        super().__init__()
        self.n_xyz, self.n_dir, self.depth, self.skip_at = n_xyz, n_dir, depth, skip_at
        for i in range(depth):
            fan_in = n_xyz if i == 0 else width + (n_xyz if i in skip_at else 0)
            setattr(self, f"trunk{i}", nn.Sequential(nn.Linear(fan_in, width), nn.ReLU(True)))
        self.feature = nn.Linear(width, width)
        self.density = nn.Linear(width, 1)
        self.view_branch = nn.Sequential(nn.Linear(width + n_dir, width // 2), nn.ReLU(True))
        self.colour = nn.Sequential(nn.Linear(width // 2, 3), nn.Sigmoid())

    def forward(self, inputs, sigma_only=False):
        if sigma_only:
            pos = inputs
        else:
            pos, view = torch.split(inputs, [self.n_xyz, self.n_dir], dim=-1)
        h = pos
        for i in range(self.depth):
            if i in self.skip_at:
                h = torch.cat([pos, h], -1)
            h = getattr(self, f"trunk{i}")(h)
        sigma = self.density(h)
        if sigma_only:
            return sigma
        rgb = self.colour(self.view_branch(torch.cat([self.feature(h), view], -1)))
        return torch.cat([rgb, sigma], -1)


def run_in_chunks(net, inputs, chunk):
    return torch.cat([net(inputs[s:s + chunk]) for s in range(0, inputs.shape[0], chunk)], 0)


def sample_from_weights(edges, weights, n_draws, deterministic=False, eps=1e-5):
    n_rays, n_bins = weights.shape
    weights = weights + eps
    cdf = torch.cumsum(weights / torch.sum(weights, -1, keepdim=True), -1)
    cdf = torch.cat([torch.zeros_like(cdf[:, :1]), cdf], -1)
    if deterministic:
        u = torch.linspace(0, 1, n_draws, device=edges.device).expand(n_rays, n_draws)
    else:
        u = torch.rand(n_rays, n_draws, device=edges.device)
    u = u.contiguous()
    idx = searchsorted(cdf, u, side='right')
    pair = torch.stack([torch.clamp_min(idx - 1, 0), torch.clamp_max(idx, n_bins)], -1)
    pair = pair.view(n_rays, 2 * n_draws)
    cdf_pair = torch.gather(cdf, 1, pair).view(n_rays, n_draws, 2)
    edge_pair = torch.gather(edges, 1, pair).view(n_rays, n_draws, 2)
    span = cdf_pair[..., 1] - cdf_pair[..., 0]
    span[span < eps] = 1  # an empty bin is never drawn from; any width will do
    t = (u - cdf_pair[..., 0]) / span
    return edge_pair[..., 0] + t * (edge_pair[..., 1] - edge_pair[..., 0])


def composite(net, encoders, points, dirs, depths, noise_std, chunk, white_bg):
    n_rays, n_pts = points.shape[:2]
    pos_code = encoders[0](points.view(-1, 3))
    dir_code = encoders[1](dirs / torch.norm(dirs, dim=1, keepdim=True))
    dir_code = torch.repeat_interleave(dir_code, repeats=n_pts, dim=0)
    raw = run_in_chunks(net, torch.cat([pos_code, dir_code], 1), chunk).view(n_rays, n_pts, 4)
    gaps = depths[:, 1:] - depths[:, :-1]
    gaps = torch.cat([gaps, 1e10 * torch.ones_like(gaps[:, :1])], -1)
    gaps = gaps * torch.norm(dirs.unsqueeze(1), dim=-1)
    sigmas = raw[..., 3]
    wobble = noise_std * torch.randn(sigmas.shape, device=sigmas.device)
    alpha = 1 - torch.exp(-gaps * torch.relu(sigmas + wobble))
    # light reaching each sample: the product of (1 - alpha) of the samples in front
    through = torch.cumprod(torch.cat([torch.ones_like(alpha[:, :1]), 1 - alpha + 1e-10], -1), -1)
    w = alpha * through[:, :-1]
    rgb = torch.sum(w.unsqueeze(-1) * raw[..., :3], -2)
    if white_bg:
        rgb = rgb + 1 - w.sum(1).unsqueeze(-1)
    return rgb, torch.sum(w * depths, -1), w


def render(nets, encoders, rays, n_coarse, n_fine, disparity=False, jitter=0.0, noise_std=1.0,
           chunk=1024, white_bg=False):
    origins, dirs = rays[:, :3], rays[:, 3:6]
    near, far = rays[:, 6:7], rays[:, 7:8]
    steps = torch.linspace(0, 1, n_coarse, device=rays.device)
    if disparity:
        depths = 1 / (1 / near * (1 - steps) + 1 / far * steps)
    else:
        depths = near * (1 - steps) + far * steps
    depths = depths.expand(rays.shape[0], n_coarse)
    if jitter > 0:
        mids = 0.5 * (depths[:, :-1] + depths[:, 1:])
        hi, lo = torch.cat([mids, depths[:, -1:]], -1), torch.cat([depths[:, :1], mids], -1)
        depths = lo + (hi - lo) * jitter * torch.rand(depths.shape, device=rays.device)
    out = {}
    for name, net in zip(("coarse", "fine"), nets):
        if name == "fine":
            mids = 0.5 * (depths[:, :-1] + depths[:, 1:])
            extra = sample_from_weights(mids, w[:, 1:-1], n_fine, deterministic=jitter == 0)
            depths, _ = torch.sort(torch.cat([depths, extra.detach()], -1), -1)
        points = origins.unsqueeze(1) + dirs.unsqueeze(1) * depths.unsqueeze(2)
        rgb, depth, w = composite(net, encoders, points, dirs, depths, noise_std, chunk,
                                  white_bg)
        out.update({f"rgb_{name}": rgb, f"depth_{name}": depth, f"opacity_{name}": w.sum(1)})
    return out


encoders = [FrequencyEncoding(3, 4), FrequencyEncoding(3, 2, octaves=False)]
coarse_net, fine_net = (RadianceField(encoders[0].out_channels, encoders[1].out_channels)
                        for _ in range(2))
nets = [coarse_net, fine_net]
for net in nets:
    initialize(net)
mse = nn.MSELoss(reduction='mean')
optimizer = torch.optim.Adam([p for net in nets for p in net.parameters()], lr=5e-3, eps=1e-8)
halving = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[2], gamma=0.5)
rays_all, colours_all = torch.tensor(ray_batch).float(), torch.tensor(rgb_batch).float()
for step in range(4):
    rays, target = rays_all[step % 2::2], colours_all[step % 2::2]
    out = render(nets, encoders, rays, 8, 6, disparity=step % 2 == 1, jitter=1.0, chunk=20,
                 white_bg=True)
    loss = mse(out["rgb_coarse"], target)
    loss += mse(out["rgb_fine"], target)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    halving.step()
    record.append({k: v.detach().numpy() for k, v in out.items()})
    weights = {f"{i}.{k}": p.detach().numpy().copy()
               for i, net in enumerate(nets) for k, p in net.named_parameters()}
    record.append({"loss": loss.item(), **weights})
with torch.no_grad():
    still = render(nets, encoders, rays_all[:6], 8, 6, noise_std=0, chunk=32)
    sigma = fine_net(encoders[0](rays_all[:6, :3]), sigma_only=True)
record.append({k: v.numpy() for k, v in still.items()})
record.append(sigma.numpy())
"""

NERF_PL_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("from torch import nn\n", "from retrograd import nn\n"),
    ("    loss.backward()\n", "    grads = loss.backward()\n"),
    ("    optimizer.step()\n", "    optimizer.step(grads)\n"),
]


def test_nerf_pl_renders_and_trains_as_torch(capsys):
    np.random.seed(393)
    rng = np.random.default_rng(393)
    origins = np.array([0.0, 0.0, 4.0]) + 0.1 * rng.standard_normal((12, 3))
    directions = np.column_stack([0.3 * rng.standard_normal((12, 2)), -np.ones(12)])
    bounds = np.column_stack([np.full(12, 2.0), np.full(12, 6.0)])
    (theirs, ours), _ = runs_with_draws(
        NERF_PL_SOURCE,
        NERF_PL_STEPS,
        capsys,
        393,
        initialize=initializer(),
        make_searchsorted=lambda lib: lambda a, v, side="left": lib.searchsorted(a, v, side=side),
        ray_batch=np.concatenate([origins, directions, bounds], 1),
        rgb_batch=rng.uniform(0, 1, (12, 3)),
    )
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
