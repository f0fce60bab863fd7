# ruff: noqa: E501, W291, W293  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
neural fields, continued.

- ashawkey/torch-ngp's early NeRF as its pure-torch path writes it: ``activation.py``'s
  ``trunc_exp`` (a ``torch.autograd.Function`` whose ``forward`` is decorated by
  ``torch.cuda.amp.custom_fwd(cast_inputs=torch.float32)`` and ``backward`` by ``custom_bwd``,
  the gradient clamped by ``x.clamp(-15, 15)``), ``encoding.py``'s ``FreqEncoder``
  (``2. ** torch.linspace(...)`` turned into a list by ``.numpy().tolist()``, ``**kwargs``
  taking the encoder's ``size=``) and ``get_encoder``, and ``nerf/network_ff.py``'s
  ``sample_pdf``, ``near_far_from_bound`` (the cube's ``torch.where(tmin < tmax, tmin, tmax)
  .max(dim=-1, keepdim=True)[0]``), ``NeRFNetwork.forward``/``density``/``run`` (``z_vals.clamp(
  near, far)`` with tensor bounds, ``pts.clamp(-bound, bound)``, the upsampled samples merged by
  ``torch.sort`` and ``torch.gather(..., index=z_index.unsqueeze(-1).expand_as(rgbs))`` under
  ``torch.no_grad()``, the manual zero padding of the colour input), ``update_density_grid``
  (``torch.linspace(...).split(N)``, ``torch.meshgrid(..., indexing='ij')``, slices of a
  buffer written, ``.item()`` and its print) and ``render`` staged (``depth[b:b+1,
  head:tail] = depth_`` in ``eval()``) and not.

``FFMLP`` (a CUDA extension: a bias-free MLP with ReLU between its layers) is a pure-torch
stand-in of that shape written by the test; ``mcubes``, ``trimesh`` and ``raymarching`` (used
only by ``plot_pointcloud`` and ``run_cuda``) are not imported. The training step (its
``Trainer``) is the test's: ``render`` with ``cuda_raymarching=False``, the mean squared error,
Adam with ``eps=1e-15``. The stratified jitter draws from one seeded stream in both runs;
``initialize`` gives the port torch's initial weights. The lines changed: the import lines and
the gradient lines (``grads = loss.backward()``, ``optimizer.step(grads)``).
"""

from __future__ import annotations

import numpy as np

from real_ports import assert_records_agree, initializer, runs_with_draws

NGP_SOURCE = r"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import Function
from torch.cuda.amp import custom_bwd, custom_fwd 
from numpy import log2


class FFMLP(nn.Module):  # the test's stand-in for the ffmlp CUDA extension
    def __init__(self, input_dim, output_dim, hidden_dim, num_layers):
        super().__init__()
        dims = [input_dim] + [hidden_dim] * (num_layers - 1) + [output_dim]
        self.layers = nn.ModuleList([nn.Linear(a, b, bias=False) for a, b in zip(dims[:-1], dims[1:])])

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i != len(self.layers) - 1:
                x = F.relu(x)
        return x


# activation.py
class _trunc_exp(Function):
    @staticmethod
    @custom_fwd(cast_inputs=torch.float32) # cast to float32
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.exp(x)

    @staticmethod
    @custom_bwd
    def backward(ctx, g):
        x = ctx.saved_tensors[0]
        return g * torch.exp(x.clamp(-15, 15))

trunc_exp = _trunc_exp.apply


# encoding.py
class FreqEncoder(nn.Module):
    def __init__(self, input_dim, max_freq_log2, N_freqs,
                 log_sampling=True, include_input=True,
                 periodic_fns=(torch.sin, torch.cos)):
    
        super().__init__()

        self.input_dim = input_dim
        self.include_input = include_input
        self.periodic_fns = periodic_fns

        self.output_dim = 0
        if self.include_input:
            self.output_dim += self.input_dim

        self.output_dim += self.input_dim * N_freqs * len(self.periodic_fns)

        if log_sampling:
            self.freq_bands = 2. ** torch.linspace(0., max_freq_log2, N_freqs)
        else:
            self.freq_bands = torch.linspace(2. ** 0., 2. ** max_freq_log2, N_freqs)

        self.freq_bands = self.freq_bands.numpy().tolist()

    def forward(self, input, **kwargs):

        out = []
        if self.include_input:
            out.append(input)

        for i in range(len(self.freq_bands)):
            freq = self.freq_bands[i]
            for p_fn in self.periodic_fns:
                out.append(p_fn(input * freq))

        out = torch.cat(out, dim=-1)


        return out

def get_encoder(encoding, input_dim=3, 
                multires=6, 
                degree=4,
                num_levels=16, level_dim=2, base_resolution=16, log2_hashmap_size=19,
                **kwargs):

    if encoding == 'None':
        return lambda x, **kwargs: x, input_dim
    
    elif encoding == 'frequency':
        encoder = FreqEncoder(input_dim=input_dim, max_freq_log2=multires-1, N_freqs=multires, log_sampling=True)

    else:
        raise NotImplementedError()

    return encoder, encoder.output_dim


# nerf/network_ff.py
def sample_pdf(bins, weights, n_samples, det=False):
    # This implementation is from NeRF
    # bins: [B, T], old_z_vals
    # weights: [B, T - 1], bin weights.
    # return: [B, n_samples], new_z_vals

    # Get pdf
    weights = weights + 1e-5  # prevent nans
    pdf = weights / torch.sum(weights, -1, keepdim=True)
    cdf = torch.cumsum(pdf, -1)
    cdf = torch.cat([torch.zeros_like(cdf[..., :1]), cdf], -1)
    # Take uniform samples
    if det:
        u = torch.linspace(0. + 0.5 / n_samples, 1. - 0.5 / n_samples, steps=n_samples).to(weights.device)
        u = u.expand(list(cdf.shape[:-1]) + [n_samples])
    else:
        u = torch.rand(list(cdf.shape[:-1]) + [n_samples]).to(weights.device)

    # Invert CDF
    u = u.contiguous()
    inds = torch.searchsorted(cdf, u, right=True)
    below = torch.max(torch.zeros_like(inds - 1), inds - 1)
    above = torch.min((cdf.shape[-1] - 1) * torch.ones_like(inds), inds)
    inds_g = torch.stack([below, above], -1)  # (B, n_samples, 2)

    matched_shape = [inds_g.shape[0], inds_g.shape[1], cdf.shape[-1]]
    cdf_g = torch.gather(cdf.unsqueeze(1).expand(matched_shape), 2, inds_g)
    bins_g = torch.gather(bins.unsqueeze(1).expand(matched_shape), 2, inds_g)

    denom = (cdf_g[..., 1] - cdf_g[..., 0])
    denom = torch.where(denom < 1e-5, torch.ones_like(denom), denom)
    t = (u - cdf_g[..., 0]) / denom
    samples = bins_g[..., 0] + t * (bins_g[..., 1] - bins_g[..., 0])

    return samples


def near_far_from_bound(rays_o, rays_d, bound, type='cube'):
    # rays: [B, N, 3], [B, N, 3]
    # bound: int, radius for ball or half-edge-length for cube
    # return near [B, N, 1], far [B, N, 1]

    radius = rays_o.norm(dim=-1, keepdim=True)

    if type == 'sphere':
        near = radius - bound # [B, N, 1]
        far = radius + bound

    elif type == 'cube':
        tmin = (-bound - rays_o) / rays_d # [B, N, 3]
        tmax = (bound - rays_o) / rays_d
        near = torch.where(tmin < tmax, tmin, tmax).max(dim=-1, keepdim=True)[0]
        far = torch.where(tmin > tmax, tmin, tmax).min(dim=-1, keepdim=True)[0]
        near = torch.clamp(near, min=0.05)

    return near, far


# NeRF-SH
class NeRFNetwork(nn.Module):
    def __init__(self,
                 encoding="hashgrid",
                 encoding_dir="sphere_harmonics",
                 num_layers=2,
                 hidden_dim=64,
                 geo_feat_dim=15,
                 num_layers_color=3,
                 hidden_dim_color=64,
                 density_grid_size=-1, # density grid size
                 ):
        super().__init__()

        # sigma network
        self.num_layers = num_layers
        self.hidden_dim = hidden_dim
        self.geo_feat_dim = geo_feat_dim
        self.encoder, self.in_dim = get_encoder(encoding)

        self.sigma_net = FFMLP(
            input_dim=self.in_dim, 
            output_dim=1 + self.geo_feat_dim,
            hidden_dim=self.hidden_dim,
            num_layers=self.num_layers,
        )

        # color network
        self.num_layers_color = num_layers_color        
        self.hidden_dim_color = hidden_dim_color
        self.encoder_dir, self.in_dim_color = get_encoder(encoding_dir)
        self.in_dim_color += self.geo_feat_dim + 1 # a manual fixing to make it 32, as done in nerf_network.h#178
        
        self.color_net = FFMLP(
            input_dim=self.in_dim_color, 
            output_dim=3,
            hidden_dim=self.hidden_dim_color,
            num_layers=self.num_layers_color,
        )

        # density grid
        if density_grid_size > 0:
            # buffer is like parameter but never requires_grad
            density_grid = torch.zeros([density_grid_size + 1] * 3) # +1 because we save values at grid
            self.register_buffer('density_grid', density_grid)
            self.mean_density = 0
            self.iter_density = 0
        else:
            self.density_grid = None
    
    def forward(self, x, d, bound):
        # x: [B, N, 3], in [-bound, bound]
        # d: [B, N, 3], nomalized in [-1, 1]

        B, N = x.shape[:2]
        x = x.reshape(B*N, -1)
        d = d.reshape(B*N, -1)

        # sigma
        x = self.encoder(x, size=bound)
        h = self.sigma_net(x)

        sigma = F.relu(h[..., 0])
        geo_feat = h[..., 1:]

        # color        
        d = self.encoder_dir(d)

        p = torch.zeros_like(geo_feat[..., :1]) # manual input padding
        h = torch.cat([d, geo_feat, p], dim=-1)
        h = self.color_net(h)
        
        # sigmoid activation for rgb
        color = torch.sigmoid(h)
    
        sigma = sigma.reshape(B, N)
        color = color.reshape(B, N, -1)

        return sigma, color

    def density(self, x, bound):
        # x: [B, N, 3], in [-bound, bound]

        B, N = x.shape[:2]
        x = x.reshape(B*N, -1)

        x = self.encoder(x, size=bound)
        h = self.sigma_net(x)

        #sigma = torch.exp(torch.clamp(h[..., 0], -15, 15))
        sigma = F.relu(h[..., 0])

        sigma = sigma.reshape(B, N)

        return sigma

    def run(self, rays_o, rays_d, num_steps, bound, upsample_steps):
        # rays_o, rays_d: [B, N, 3], assumes B == 1
        # return: image: [B, N, 3], depth: [B, N]

        B, N = rays_o.shape[:2]
        device = rays_o.device

        # sample steps
        near, far = near_far_from_bound(rays_o, rays_d, bound, type='cube')

        #print(f'near = {near.min().item()} ~ {near.max().item()}, far = {far.min().item()} ~ {far.max().item()}')

        z_vals = torch.linspace(0.0, 1.0, num_steps).unsqueeze(0).unsqueeze(0).to(device) # [1, 1, T]
        z_vals = z_vals.expand((B, N, num_steps)) # [B, N, T]
        z_vals = near + (far - near) * z_vals # [B, N, T], in [near, far]

        # pertube z_vals
        sample_dist = (far - near) / num_steps
        if self.training:
            z_vals = z_vals + (torch.rand(z_vals.shape, device=device) - 0.5) * sample_dist
            z_vals = z_vals.clamp(near, far) # avoid out of bounds pts.

        # generate pts
        pts = rays_o.unsqueeze(-2) + rays_d.unsqueeze(-2) * z_vals.unsqueeze(-1) # [B, N, 1, 3] * [B, N, T, 3] -> [B, N, T, 3]
        pts = pts.clamp(-bound, bound) # must be strictly inside the bounds, else lead to nan in hashgrid encoder!

        #print(f'pts {pts.shape} {pts.min().item()} ~ {pts.max().item()}')

        #plot_pointcloud(pts.reshape(-1, 3).detach().cpu().numpy())

        # query SDF and RGB
        dirs = rays_d.unsqueeze(-2).expand_as(pts)

        sigmas, rgbs = self(pts.reshape(B, -1, 3), dirs.reshape(B, -1, 3), bound=bound)


        rgbs = rgbs.reshape(B, N, num_steps, 3) # [B, N, T, 3]
        sigmas = sigmas.reshape(B, N, num_steps) # [B, N, T]

        # upsample z_vals (nerf-like)
        if upsample_steps > 0:
            with torch.no_grad():

                deltas = z_vals[:, :, 1:] - z_vals[:, :, :-1] # [B, N, T-1]
                deltas = torch.cat([deltas, 1e10 * torch.ones_like(deltas[:, :, :1])], dim=-1)

                alphas = 1 - torch.exp(-deltas * sigmas) # [B, N, T]
                alphas_shifted = torch.cat([torch.ones_like(alphas[:, :, :1]), 1 - alphas + 1e-7], dim=-1) # [B, N, T+1]
                weights = alphas * torch.cumprod(alphas_shifted, dim=-1)[:, :, :-1] # [B, N, T]

                # sample new z_vals
                z_vals_mid = (z_vals[:, :, :-1] + 0.5 * deltas[:, :, :-1]) # [B, N, T-1]
                new_z_vals = sample_pdf(z_vals_mid.reshape(B*N, -1), weights.reshape(B*N, -1)[:, 1:-1], upsample_steps, det=not self.training).detach() # [BN, t]
                new_z_vals = new_z_vals.reshape(B, N, upsample_steps)

                new_pts = rays_o.unsqueeze(-2) + rays_d.unsqueeze(-2) * new_z_vals.unsqueeze(-1) # [B, N, 1, 3] * [B, N, t, 3] -> [B, N, t, 3]

            # only forward new points to save computation
            new_dirs = rays_d.unsqueeze(-2).expand_as(new_pts)
            new_sigmas, new_rgbs = self(new_pts.reshape(B, -1, 3), new_dirs.reshape(B, -1, 3), bound=bound)
            new_rgbs = new_rgbs.reshape(B, N, upsample_steps, 3) # [B, N, t, 3]
            new_sigmas = new_sigmas.reshape(B, N, upsample_steps) # [B, N, t]

            # re-order
            z_vals = torch.cat([z_vals, new_z_vals], dim=-1) # [B, N, T+t]
            z_vals, z_index = torch.sort(z_vals, dim=-1)

            sigmas = torch.cat([sigmas, new_sigmas], dim=-1) # [B, N, T+t]
            sigmas = torch.gather(sigmas, dim=-1, index=z_index)

            rgbs = torch.cat([rgbs, new_rgbs], dim=-2) # [B, N, T+t, 3]
            rgbs = torch.gather(rgbs, dim=-2, index=z_index.unsqueeze(-1).expand_as(rgbs))

        ### render core
        deltas = z_vals[:, :, 1:] - z_vals[:, :, :-1] # [B, N, T-1]
        deltas = torch.cat([deltas, 1e10 * torch.ones_like(deltas[:, :, :1])], dim=-1)

        alphas = 1 - torch.exp(-deltas * sigmas) # [B, N, T]
        alphas_shifted = torch.cat([torch.ones_like(alphas[:, :, :1]), 1 - alphas + 1e-7], dim=-1) # [B, N, T+1]
        weights = alphas * torch.cumprod(alphas_shifted, dim=-1)[:, :, :-1] # [B, N, T]

        # calculate weight_sum (mask)
        weights_sum = weights.sum(dim=-1) # [B, N]
        
        # calculate depth 
        ori_z_vals = ((z_vals - near) / (far - near)).clamp(0, 1)
        depth = (torch.sum(weights * ori_z_vals, dim=-1) + 1e-7) / (weights_sum + 1e-7) # [B, N], in [0, 1] (infinite is 1)

        # calculate color
        image = torch.sum(weights.unsqueeze(-1) * rgbs, dim=-2) # [B, N, 3], in [0, 1]
        image = image + (1 - weights_sum).unsqueeze(-1) # white background (infinite depth)

        return depth, image

    def update_density_grid(self, bound, decay=0.95, chunk_size=64):
        # call before run_cuda, prepare a coarse density grid.

        if self.density_grid is None:
            return 
        
        resolution = self.density_grid.shape[0]

        N = chunk_size # chunk to avoid OOM
        
        X = torch.linspace(-bound, bound, resolution).split(N)
        Y = torch.linspace(-bound, bound, resolution).split(N)
        Z = torch.linspace(-bound, bound, resolution).split(N)

        tmp_grid = torch.zeros_like(self.density_grid)
        with torch.no_grad():
            for xi, xs in enumerate(X):
                for yi, ys in enumerate(Y):
                    for zi, zs in enumerate(Z):
                        lx, ly, lz = len(xs), len(ys), len(zs)
                        xx, yy, zz = torch.meshgrid(xs, ys, zs, indexing='ij')
                        pts = torch.cat([xx.reshape(-1, 1), yy.reshape(-1, 1), zz.reshape(-1, 1)], dim=-1).to(tmp_grid.device).unsqueeze(0) # [1, N, 3]
                        density = self.density(pts, bound).reshape(lx, ly, lz).detach()
                        tmp_grid[xi * N: xi * N + lx, yi * N: yi * N + ly, zi * N: zi * N + lz] = density
        
        self.density_grid = tmp_grid

        self.mean_density = torch.mean(self.density_grid).item()
        self.iter_density += 1

        print(f'[density grid] iter={self.iter_density} min={self.density_grid.min().item()}, max={self.density_grid.max().item()}, mean={self.mean_density}, write to {self.iter_density}.ply')


    def render(self, rays_o, rays_d, num_steps, bound, upsample_steps, staged=False, max_ray_batch=256000, **kwargs):
        # rays_o, rays_d: [B, N, 3], assumes B == 1
        # return: pred_rgb: [B, N, 3]

        _run = self.run if not kwargs['cuda_raymarching'] else self.run_cuda

        B, N = rays_o.shape[:2]
        device = rays_o.device

        if staged:
            depth = torch.zeros((B, N), device=device)
            image = torch.zeros((B, N, 3), device=device)

            for b in range(B):
                head = 0
                while head < N:
                    tail = min(head + max_ray_batch, N)

                    depth_, image_ = _run(rays_o[b:b+1, head:tail], rays_d[b:b+1, head:tail], num_steps, bound, upsample_steps)
                    
                    depth[b:b+1, head:tail] = depth_
                    image[b:b+1, head:tail] = image_

                    head += max_ray_batch

        else:
            depth, image = _run(rays_o, rays_d, num_steps, bound, upsample_steps)

        results = {}
        results['depth'] = depth
        results['rgb'] = image
            
        return results
"""

NGP_TRAIN = """
model = NeRFNetwork(encoding='frequency', encoding_dir='frequency', num_layers=2, hidden_dim=16,
                    geo_feat_dim=15, num_layers_color=3, hidden_dim_color=16, density_grid_size=4)
initialize(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, betas=(0.9, 0.99), eps=1e-15)
criterion = torch.nn.MSELoss()
rays_o = torch.tensor(ray_origins).float()[None]
rays_d = torch.tensor(ray_directions).float()[None]
gt_rgb = torch.tensor(ray_colours).float()[None]
model.train()
for step in range(3):
    outputs = model.render(rays_o, rays_d, num_steps=8, bound=1, upsample_steps=4, staged=False, cuda_raymarching=False)
    loss = criterion(outputs['rgb'], gt_rgb)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append({'loss': loss.item(), 'depth': outputs['depth'].detach().numpy(), **{k: v.detach().numpy().copy() for k, v in model.named_parameters()}})
model.update_density_grid(bound=1, chunk_size=3)
model.eval()
with torch.no_grad():
    outputs = model.render(rays_o, rays_d, num_steps=8, bound=1, upsample_steps=4, staged=True, max_ray_batch=5, cuda_raymarching=False)
record.append({'depth': outputs['depth'].numpy(), 'rgb': outputs['rgb'].numpy(), 'grid': model.density_grid.numpy()})
x = torch.tensor([-20.0, 0.5, 3.0, 20.0], requires_grad=True)
y = trunc_exp(x)
(y * torch.tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
record.append({'y': y.detach().numpy(), 'x.grad': x.grad.numpy()})
"""

NGP_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    ("import torch.nn.functional as F\n", "import retrograd.nn.functional as F\n"),
    ("    loss.backward()\n", "    grads = loss.backward()\n"),
    ("    optimizer.step()\n", "    optimizer.step(grads)\n"),
    (
        "(y * torch.tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()\n",
        "x_grads = (y * torch.tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()\n",
    ),
    ("'x.grad': x.grad.numpy()", "'x.grad': x.grad(x_grads).numpy()"),
]


def test_torch_ngp_pure_torch_nerf_trains_and_renders_as_torch(capsys):
    np.random.seed(395)
    rng = np.random.default_rng(395)
    origins = np.array([0.0, 0.2, 2.5]) + 0.2 * rng.standard_normal((12, 3))
    directions = np.column_stack([0.25 * rng.standard_normal((12, 2)), -np.ones(12)])
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        NGP_SOURCE + NGP_TRAIN,
        NGP_STEPS,
        capsys,
        395,
        initialize=initializer(),
        ray_origins=origins,
        ray_directions=directions,
        ray_colours=rng.uniform(0, 1, (12, 3)),
    )
    assert their_log.startswith("[density grid] iter=1 min=")
    assert our_log.split("min=")[0] == their_log.split("min=")[0]
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
