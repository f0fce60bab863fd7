"""Real-port tests (the harness: ``tests/real_ports.py``): neural fields.

- a hash-grid radiance field written here in the style of yashbhalgat/HashNeRF-pytorch
  (instant-ngp's multiresolution hash encoding in plain torch; nothing is copied from it): a
  spatial hash (``h ^= ijk[..., d] * PRIMES[d]`` on ``int32`` coordinates, the products wrapping
  around as torch's do, then ``torch.tensor((1 << bits) - 1) & h``) of voxel corners
  (``torch.floor(...).int()``, a ``CORNERS`` tensor made with ``device="cpu"`` broadcast over the
  eight corners, ``torch.all`` bounds checks and ``torch.clamp`` with tensor bounds for the
  samples outside the box); a ``HashGrid`` of ``nn.Embedding`` tables gathered by the hashed keys
  (``nn.init.uniform_(..., a=, b=)``, the level resolutions from 0-d tensors, trilinear
  blending); spherical harmonics written into ``torch.empty(...)`` by ``out[..., k] = ...``
  (tuple targets too) after ``unbind``; a bias-free field (``torch.split`` by sizes,
  ``F.relu(h, inplace=True)``); camera rays by ``torch.meshgrid`` (its default ``ij`` indexing)
  and ``dirs[..., np.newaxis, :] * c2w[:3, :3]``; importance samples by ``cumsum``,
  ``torch.searchsorted(..., right=True)``, ``gather`` of expanded tensors and ``torch.where``; a
  grid smoothness loss (``math.log`` of 0-d tensors, ``torch.clip`` with a tensor bound,
  ``torch.randint`` with a 0-d tensor high, ``torch.arange`` of one, ``torch.meshgrid`` of a
  hashed cube, ``narrow``); coarse-to-fine volume rendering in chunks
  (``torch.Tensor([1e10]).expand``, ``torch.cumprod``, density noise from ``torch.randn``, the
  ``Categorical(probs=...).entropy()`` spread loss, ``torch.sort``, ``torch.std(...,
  unbiased=False)``, ``isnan``/``isinf`` checks); trained by ``RAdam`` with two parameter groups
  (``weight_decay`` and ``eps`` per group) and the learning-rate decay written into
  ``param_groups``, rays picked by ``np.random.choice`` and advanced indexing.

The data is a small synthetic image seen from two cameras, made by the test. The random draws
(stratified samples, the density noise, the smoothness cubes, the rays chosen) are one seeded
stream in both runs; ``initialize`` gives the port torch's initial weights. The lines changed:
the gradient lines (``grads = loss.backward()``, ``radam.step(grads)``).
"""

from __future__ import annotations

import numpy as np
import torch

from real_ports import assert_records_agree, initializer, runs_with_draws

HASHNERF_SOURCE = r"""
import math

import numpy as np
import torch
import torch.nn as nn

F = nn.functional

# A hash-grid radiance field in the style of HashNeRF-pytorch (instant-ngp's multiresolution hash
# encoding written in plain torch): hashed voxel corners, trilinear blending, spherical harmonics
# for view directions, a small bias-free field, coarse-to-fine volume rendering.

CORNERS = torch.tensor([[[a, b, c] for a in (0, 1) for b in (0, 1) for c in (0, 1)]], device="cpu")
PRIMES = (1, 2654435761, 805459861, 3674653429, 2097192037)


def spatial_hash(ijk, table_bits):
    # int32 coordinates: the products wrap around, as in the CUDA original
    h = torch.zeros_like(ijk)[..., 0]
    for d in range(ijk.shape[-1]):
        h ^= ijk[..., d] * PRIMES[d]
    mask = torch.tensor((1 << table_bits) - 1).to(h.device)
    return mask & h


def voxel_of(points, box, resolution, table_bits):
    lo, hi = box
    if not torch.all(points <= hi) or not torch.all(points >= lo):
        points = torch.clamp(points, min=lo, max=hi)
    cell = (hi - lo) / resolution
    corner = torch.floor((points - lo) / cell).int()
    v_min = corner * cell + lo
    v_max = v_min + torch.tensor([1.0, 1.0, 1.0]) * cell
    return v_min, v_max, spatial_hash(corner.unsqueeze(1) + CORNERS, table_bits)


class HashGrid(nn.Module):
    def __init__(self, box, levels=16, features=2, table_bits=19, coarsest=16, finest=512):
        super().__init__()
        self.box, self.levels, self.table_bits = box, levels, table_bits
        self.coarsest, self.finest = torch.tensor(coarsest), torch.tensor(finest)
        self.growth = torch.exp((torch.log(self.finest) - torch.log(self.coarsest)) / (levels - 1))
        self.tables = nn.ModuleList([nn.Embedding(2**table_bits, features) for _ in range(levels)])
        for table in self.tables:
            nn.init.uniform_(table.weight, a=-1e-4, b=1e-4)
        self.out_dim = levels * features

    @staticmethod
    def blend(points, v_min, v_max, corner_feats):
        # corner k = 4a + 2b + c for offsets (a, b, c): collapse x, then y, then z
        w = (points - v_min) / (v_max - v_min)
        wx, wy, wz = w[:, 0:1], w[:, 1:2], w[:, 2:3]
        x_pairs = [corner_feats[:, k] * (1 - wx) + corner_feats[:, k + 4] * wx for k in range(4)]
        y_pairs = [x_pairs[k] * (1 - wy) + x_pairs[k + 2] * wy for k in range(2)]
        return y_pairs[0] * (1 - wz) + y_pairs[1] * wz

    def forward(self, points):
        per_level = []
        for level, table in enumerate(self.tables):
            resolution = torch.floor(self.coarsest * self.growth**level)
            v_min, v_max, keys = voxel_of(points, self.box, resolution, self.table_bits)
            per_level.append(self.blend(points, v_min, v_max, table(keys)))
        return torch.cat(per_level, dim=-1)


class SphericalHarmonics(nn.Module):
    # real spherical harmonics up to degree 3 (16 terms) of unit directions
    C0, C1 = 0.28209479177387814, 0.4886025119029199
    C2 = (1.0925484305920792, -1.0925484305920792, 0.31539156525252005, -1.0925484305920792,
          0.5462742152960396)
    C3 = (-0.5900435899266435, 2.890611442640554, -0.4570457994644658, 0.3731763325901154,
          -0.4570457994644658, 1.445305721320277, -0.5900435899266435)

    def __init__(self, degree=4):
        super().__init__()
        self.degree, self.out_dim = degree, degree**2

    def forward(self, dirs):
        out = torch.empty((*dirs.shape[:-1], self.out_dim), dtype=dirs.dtype, device=dirs.device)
        x, y, z = dirs.unbind(-1)
        out[..., 0] = self.C0
        out[..., 1], out[..., 2], out[..., 3] = -self.C1 * y, self.C1 * z, -self.C1 * x
        if self.degree > 2:
            xx, yy, zz = (c * c for c in (x, y, z))
            out[..., 4] = self.C2[0] * x * y
            out[..., 5] = self.C2[1] * y * z
            out[..., 6] = self.C2[2] * (2.0 * zz - xx - yy)
            out[..., 7] = self.C2[3] * x * z
            out[..., 8] = self.C2[4] * (xx - yy)
        if self.degree > 3:
            out[..., 9] = self.C3[0] * y * (3 * xx - yy)
            out[..., 10] = self.C3[1] * x * y * z
            out[..., 11] = self.C3[2] * y * (4 * zz - xx - yy)
            out[..., 12] = self.C3[3] * z * (2 * zz - 3 * xx - 3 * yy)
            out[..., 13] = self.C3[4] * x * (4 * zz - xx - yy)
            out[..., 14] = self.C3[5] * z * (xx - yy)
            out[..., 15] = self.C3[6] * x * (xx - 3 * yy)
        return out


def mlp(sizes):
    return nn.ModuleList([nn.Linear(a, b, bias=False) for a, b in zip(sizes[:-1], sizes[1:])])


class TinyField(nn.Module):
    # density and a geometry code from the position features; colour from the code and the view
    def __init__(self, pos_dim, dir_dim, width=16, code=15, depth=2, color_depth=3):
        super().__init__()
        self.pos_dim, self.dir_dim = pos_dim, dir_dim
        self.density = mlp([pos_dim] + [width] * (depth - 1) + [1 + code])
        self.color = mlp([dir_dim + code] + [width] * (color_depth - 1) + [3])

    @staticmethod
    def run(layers, h):
        for k, layer in enumerate(layers):
            h = layer(h)
            if k < len(layers) - 1:
                h = F.relu(h, inplace=True)
        return h

    def forward(self, features):
        pos, view = torch.split(features, [self.pos_dim, self.dir_dim], dim=-1)
        h = self.run(self.density, pos)
        rgb = self.run(self.color, torch.cat([view, h[..., 1:]], dim=-1))
        return torch.cat([rgb, h[..., 0].unsqueeze(dim=-1)], -1)


def camera_rays(H, W, K, c2w):
    u, v = torch.meshgrid(torch.linspace(0, W - 1, W), torch.linspace(0, H - 1, H))  # "ij": [W, H]
    u, v = u.t(), v.t()
    dirs = torch.stack([(u - K[0][2]) / K[0][0], -(v - K[1][2]) / K[1][1], -torch.ones_like(u)], -1)
    d = torch.sum(dirs[..., np.newaxis, :] * c2w[:3, :3], -1)
    return c2w[:3, -1].expand(d.shape), d


def importance_samples(edges, weights, n, deterministic=False):
    pdf = (weights + 1e-5) / torch.sum(weights + 1e-5, -1, keepdim=True)
    cdf = torch.cumsum(pdf, -1)
    cdf = torch.cat([torch.zeros_like(cdf[..., :1]), cdf], -1)
    if deterministic:
        u = torch.linspace(0.0, 1.0, steps=n).expand(list(cdf.shape[:-1]) + [n])
    else:
        u = torch.rand(list(cdf.shape[:-1]) + [n])
    u = u.contiguous()
    idx = torch.searchsorted(cdf, u, right=True)
    lo = torch.max(torch.zeros_like(idx - 1), idx - 1)
    hi = torch.min((cdf.shape[-1] - 1) * torch.ones_like(idx), idx)
    pair = torch.stack([lo, hi], -1)  # [rays, n, 2]
    shape = [pair.shape[0], pair.shape[1], cdf.shape[-1]]
    cdf_pair = torch.gather(cdf.unsqueeze(1).expand(shape), 2, pair)
    edge_pair = torch.gather(edges.unsqueeze(1).expand(shape), 2, pair)
    span = cdf_pair[..., 1] - cdf_pair[..., 0]
    span = torch.where(span < 1e-5, torch.ones_like(span), span)
    frac = (u - cdf_pair[..., 0]) / span
    return edge_pair[..., 0] + frac * (edge_pair[..., 1] - edge_pair[..., 0])


def grid_smoothness(table, coarsest, finest, level, table_bits, levels):
    # squared differences of neighbouring features in a random cube of one level's grid
    growth = math.exp((math.log(finest) - math.log(coarsest)) / (levels - 1))
    resolution = torch.tensor(math.floor(coarsest * growth**level))
    side = torch.floor(torch.clip(resolution / 10.0, coarsest - 1, 50)).int()
    start = torch.randint(0, resolution - side, (3,))
    axis = torch.arange(side + 1)
    idx = start + torch.stack([axis, axis, axis], dim=-1)
    cube = torch.stack(torch.meshgrid(idx[:, 0], idx[:, 1], idx[:, 2]), dim=-1)
    f = table(spatial_hash(cube, table_bits))
    steps = (f.narrow(d, 1, f.shape[d] - 1) - f.narrow(d, 0, f.shape[d] - 1) for d in range(3))
    tv = sum(torch.pow(step, 2).sum() for step in steps)
    return tv / side


def in_chunks(fn, chunk):
    return lambda x: torch.cat([fn(x[s : s + chunk]) for s in range(0, x.shape[0], chunk)], 0)


def query(points, view_dirs, field, pos_enc, dir_enc, chunk=64):
    flat = torch.reshape(points, [-1, points.shape[-1]])
    dirs = torch.reshape(view_dirs[:, None].expand(points.shape), [-1, 3])
    out = in_chunks(field, chunk)(torch.cat([pos_enc(flat), dir_enc(dirs)], -1))
    return torch.reshape(out, list(points.shape[:-1]) + [out.shape[-1]])


def composite(raw, z, ray_d, noise_std=0.0, white=False):
    gaps = z[..., 1:] - z[..., :-1]
    gaps = torch.cat([gaps, torch.Tensor([1e10]).expand(gaps[..., :1].shape)], -1)
    gaps = gaps * torch.norm(ray_d[..., None, :], dim=-1)
    rgb = torch.sigmoid(raw[..., :3])
    noise = torch.randn(raw[..., 3].shape) * noise_std if noise_std > 0.0 else 0.0
    alpha = 1.0 - torch.exp(-F.relu(raw[..., 3] + noise) * gaps)
    passing = torch.cat([torch.ones((alpha.shape[0], 1)), 1.0 - alpha + 1e-10], -1)
    through = torch.cumprod(passing, -1)
    w = alpha * through[:, :-1]
    acc = torch.sum(w, -1)
    color = torch.sum(w[..., None] * rgb, -2)
    if white:
        color = color + (1.0 - acc[..., None])
    depth = torch.sum(w * z, -1) / acc
    # how spread the ray's mass is (over the samples and "missed")
    missed = 1.0 - w.sum(-1, keepdim=True) + 1e-6
    spread = torch.distributions.Categorical(probs=torch.cat([w, missed], dim=-1)).entropy()
    return {"rgb": color, "depth": depth, "acc": acc, "weights": w, "spread": spread}


def march(rays, coarse, fine, n_coarse, n_fine, jitter=1.0, noise_std=0.0, white=False):
    o, d, view = rays[:, 0:3], rays[:, 3:6], rays[:, 8:11]
    near, far = rays[:, 6:7], rays[:, 7:8]
    t = torch.linspace(0.0, 1.0, steps=n_coarse)
    z = (near * (1.0 - t) + far * t).expand([rays.shape[0], n_coarse])
    if jitter > 0.0:  # one uniform draw inside each interval
        mids = 0.5 * (z[..., 1:] + z[..., :-1])
        lower, upper = torch.cat([z[..., :1], mids], -1), torch.cat([mids, z[..., -1:]], -1)
        z = lower + (upper - lower) * torch.rand(z.shape)
    along = lambda depths: o[..., None, :] + d[..., None, :] * depths[..., :, None]
    first = composite(coarse(along(z), view), z, d, noise_std, white)
    mids = 0.5 * (z[..., 1:] + z[..., :-1])
    fixed = jitter == 0.0  # no jitter: evenly spaced fine samples too
    extra = importance_samples(mids, first["weights"][..., 1:-1], n_fine, deterministic=fixed)
    extra = extra.detach()
    z_all, _ = torch.sort(torch.cat([z, extra], -1), -1)
    raw = fine(along(z_all), view)
    out = composite(raw, z_all, d, noise_std, white)
    out.update(raw=raw, rgb0=first["rgb"], spread0=first["spread"])
    out["z_std"] = torch.std(extra, dim=-1, unbiased=False)
    for key, value in out.items():
        if torch.isnan(value).any() or torch.isinf(value).any():
            print("non-finite", key)
    return out


def render_batch(ray_o, ray_d, near, far, chunk, **kw):
    view = ray_d / torch.norm(ray_d, dim=-1, keepdim=True)
    o, d = torch.reshape(ray_o, [-1, 3]).float(), torch.reshape(ray_d, [-1, 3]).float()
    rays = torch.cat([o, d, near * torch.ones_like(d[..., :1]), far * torch.ones_like(d[..., :1]),
                      torch.reshape(view, [-1, 3]).float()], -1)
    parts = [march(rays[s : s + chunk], **kw) for s in range(0, rays.shape[0], chunk)]
    return {k: torch.cat([p[k] for p in parts], 0) for k in parts[0]}
"""

HASHNERF_TRAIN = """
mse = lambda a, b: torch.mean((a - b) ** 2)
psnr_of = lambda m: -10.0 * torch.log(m) / torch.log(torch.Tensor([10.0]))

box = (torch.tensor([-1.5, -1.5, -1.5]), torch.tensor([1.5, 1.5, 1.5]))  # some samples fall outside
grid = HashGrid(box, levels=3, table_bits=8, coarsest=4, finest=16)
sh = SphericalHarmonics()
coarse_field = TinyField(grid.out_dim, sh.out_dim)
fine_field = TinyField(grid.out_dim, sh.out_dim)
for module in (grid, coarse_field, fine_field):
    initialize(module)
network = {
    name: (lambda f: lambda pts, view: query(pts, view, f, grid, sh))(f)
    for name, f in (("coarse", coarse_field), ("fine", fine_field))
}
radam = torch.optim.RAdam(
    [
        {"params": [*coarse_field.parameters(), *fine_field.parameters()], "weight_decay": 1e-6},
        {"params": list(grid.parameters()), "eps": 1e-15},
    ],
    lr=1e-2,
    betas=(0.9, 0.99),
)
H, W, focal, n_rays = 6, 6, 5.0, 8
K = np.array([[focal, 0, 0.5 * W], [0, focal, 0.5 * H], [0, 0, 1]])
photos = torch.tensor(scene_images).float()
pixels = torch.stack(torch.meshgrid(torch.linspace(0, H - 1, H), torch.linspace(0, W - 1, W)), -1)
pixels = torch.reshape(pixels, [-1, 2])
for step in range(3):
    view_k = np.random.choice([0, 1])
    ray_o, ray_d = camera_rays(H, W, K, torch.Tensor(scene_poses[view_k, :3, :4]))
    pick = pixels[np.random.choice(pixels.shape[0], size=[n_rays], replace=False)].long()
    rows, cols = pick[:, 0], pick[:, 1]
    out = render_batch(ray_o[rows, cols], ray_d[rows, cols], near=1.0, far=3.0, chunk=5,
                       coarse=network["coarse"], fine=network["fine"], n_coarse=5, n_fine=4,
                       noise_std=1.0, white=True)
    target = photos[view_k][rows, cols]
    radam.zero_grad()
    fine_mse = mse(out["rgb"], target)
    loss = fine_mse + mse(out["rgb0"], target) + 1e-4 * (out["spread"].sum() + out["spread0"].sum())
    smooth = sum(
        grid_smoothness(table, grid.coarsest, grid.finest, k, grid.table_bits, grid.levels)
        for k, table in enumerate(grid.tables)
    )
    loss = loss + 1e-6 * smooth
    loss.backward()
    radam.step()
    for group in radam.param_groups:  # exponential decay, a tenth every 1000 steps
        group["lr"] = 1e-2 * 0.1 ** ((step + 1) / 1000)
    print(f"step {step}: loss {loss.item():.5f}, psnr {psnr_of(fine_mse).item():.4f}")
    record.append({"loss": loss.item(), "z_std": out["z_std"].detach().numpy(),
                   "depth": out["depth"].detach().numpy(),
                   "smooth_millionths": 1e6 * float(smooth)})  # (about 2e-6: under atol as it is)
    named = [*coarse_field.named_parameters(), *fine_field.named_parameters()]
    named += list(grid.named_parameters())
    record.append({k: p.detach().numpy().copy() for k, p in named})
"""

IMPORTS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
]
HASHNERF_STEPS = [
    *IMPORTS,
    ("    loss.backward()\n", "    grads = loss.backward()\n"),
    ("    radam.step()\n", "    radam.step(grads)\n"),
]


def _scene():
    rng = np.random.default_rng(390)
    images = rng.uniform(0.2, 0.9, (2, 6, 6, 3))
    poses = np.zeros((2, 3, 4))
    for k, angle in enumerate((0.3, -0.4)):
        c, s = np.cos(angle), np.sin(angle)
        poses[k, :3, :3] = [[c, 0, s], [0, 1, 0], [-s, 0, c]]
        poses[k, :3, 3] = [1.6 * s, 0.1, 1.6 * c]
    return images.astype(np.float32), poses.astype(np.float32)


def test_hashnerf_style_hash_grid_field_trains_as_torch(capsys):
    torch.manual_seed(0)
    np.random.seed(0)
    images, poses = _scene()
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        HASHNERF_SOURCE + HASHNERF_TRAIN,
        HASHNERF_STEPS,
        capsys,
        390,
        initialize=initializer(),
        scene_images=images,
        scene_poses=poses,
    )
    assert our_log == their_log
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-6)
