# ruff: noqa: E501, W291, W293  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
neural fields, continued.

- kwea123/nerf_pl's NeRF as its first releases write it: ``models/nerf.py``'s ``Embedding``
  (``2**torch.linspace(0, N_freqs-1, N_freqs)``, iterating a tensor's frequencies, the functions
  kept in a list) and ``NeRF`` (layers made by ``setattr(self, f"xyz_encoding_{i+1}", ...)`` and
  read back by ``getattr``, ``nn.ReLU(True)``, the skip ``torch.cat``, ``torch.split`` of the
  embedded input by ``[in_channels_xyz, in_channels_dir]``, ``sigma_only``) and
  ``models/rendering.py``'s ``render_rays``: ``batched_inference`` by chunks, ``sample_pdf`` (the
  ``torchsearchsorted`` package's ``searchsorted(cdf, u, side='right')``, ``torch.clamp_min``/
  ``torch.clamp_max`` of the indices, ``torch.gather`` of the stacked neighbours,
  ``denom[denom<eps] = 1``), and ``inference`` (``torch.repeat_interleave(dir_embedded,
  repeats=N_samples_, dim=0)``, the exclusive ``torch.cumprod`` transmittance, the density noise
  by ``torch.randn(sigmas.shape, device=sigmas.device)``, the white background), the fine
  samples ``torch.sort``-ed in and ``.detach()``-ed.

``torchsearchsorted.searchsorted`` (a CUDA extension of its time) is each library's
``searchsorted(a, v, side=side)``. The training step (``train.py``'s pytorch-lightning
``NeRFSystem``: ``MSELoss`` of the coarse and fine colours, Adam, ``MultiStepLR``) is written by
the test around the author's functions; the rays are a small synthetic batch. Stratified samples
and density noise draw from one seeded stream in both runs; ``initialize`` gives the port
torch's initial weights. The lines changed: the gradient lines (``grads = loss.backward()``,
``optimizer.step(grads)``).
"""

from __future__ import annotations

import numpy as np

from real_ports import assert_records_agree, initializer, runs_with_draws

NERF_PL_SOURCE = r'''
import torch
from torch import nn

# models/nerf.py
class Embedding(nn.Module):
    def __init__(self, in_channels, N_freqs, logscale=True):
        """
        Defines a function that embeds x to (x, sin(2^k x), cos(2^k x), ...)
        in_channels: number of input channels (3 for both xyz and direction)
        """
        super(Embedding, self).__init__()
        self.N_freqs = N_freqs
        self.in_channels = in_channels
        self.funcs = [torch.sin, torch.cos]
        self.out_channels = in_channels*(len(self.funcs)*N_freqs+1)

        if logscale:
            self.freq_bands = 2**torch.linspace(0, N_freqs-1, N_freqs)
        else:
            self.freq_bands = torch.linspace(1, 2**(N_freqs-1), N_freqs)

    def forward(self, x):
        """
        Embeds x to (x, sin(2^k x), cos(2^k x), ...) 
        Different from the paper, "x" is also in the output
        See https://github.com/bmild/nerf/issues/12
        """
        out = [x]
        for freq in self.freq_bands:
            for func in self.funcs:
                out += [func(freq*x)]

        return torch.cat(out, -1)


class NeRF(nn.Module):
    def __init__(self,
                 D=8, W=256,
                 in_channels_xyz=63, in_channels_dir=27, 
                 skips=[4]):
        super(NeRF, self).__init__()
        self.D = D
        self.W = W
        self.in_channels_xyz = in_channels_xyz
        self.in_channels_dir = in_channels_dir
        self.skips = skips

        # xyz encoding layers
        for i in range(D):
            if i == 0:
                layer = nn.Linear(in_channels_xyz, W)
            elif i in skips:
                layer = nn.Linear(W+in_channels_xyz, W)
            else:
                layer = nn.Linear(W, W)
            layer = nn.Sequential(layer, nn.ReLU(True))
            setattr(self, f"xyz_encoding_{i+1}", layer)
        self.xyz_encoding_final = nn.Linear(W, W)

        # direction encoding layers
        self.dir_encoding = nn.Sequential(
                                nn.Linear(W+in_channels_dir, W//2),
                                nn.ReLU(True))

        # output layers
        self.sigma = nn.Linear(W, 1)
        self.rgb = nn.Sequential(
                        nn.Linear(W//2, 3),
                        nn.Sigmoid())

    def forward(self, x, sigma_only=False):
        if not sigma_only:
            input_xyz, input_dir = \
                torch.split(x, [self.in_channels_xyz, self.in_channels_dir], dim=-1)
        else:
            input_xyz = x

        xyz_ = input_xyz
        for i in range(self.D):
            if i in self.skips:
                xyz_ = torch.cat([input_xyz, xyz_], -1)
            xyz_ = getattr(self, f"xyz_encoding_{i+1}")(xyz_)

        sigma = self.sigma(xyz_)
        if sigma_only:
            return sigma

        xyz_encoding_final = self.xyz_encoding_final(xyz_)

        dir_encoding_input = torch.cat([xyz_encoding_final, input_dir], -1)
        dir_encoding = self.dir_encoding(dir_encoding_input)
        rgb = self.rgb(dir_encoding)

        out = torch.cat([rgb, sigma], -1)

        return out


# models/rendering.py
def batched_inference(model, inputs, chunk=1024*32):
    B = inputs.shape[0]
    out_chunks = [model(inputs[i:i+chunk]) for i in range(0, B, chunk)]
    out = torch.cat(out_chunks, 0)

    return out


def sample_pdf(bins, weights, N_importance, det=False, eps=1e-5):
    N_rays, N_samples_ = weights.shape
    weights = weights + eps # prevent division by zero (don't do inplace op!)
    pdf = weights / torch.sum(weights, -1, keepdim=True) # (N_rays, N_samples_)
    cdf = torch.cumsum(pdf, -1) # (N_rays, N_samples), cumulative distribution function
    cdf = torch.cat([torch.zeros_like(cdf[: ,:1]), cdf], -1)  # (N_rays, N_samples_+1) 
                                                               # padded to 0~1 inclusive

    if det:
        u = torch.linspace(0, 1, N_importance, device=bins.device)
        u = u.expand(N_rays, N_importance)
    else:
        u = torch.rand(N_rays, N_importance, device=bins.device)
    u = u.contiguous()

    inds = searchsorted(cdf, u, side='right')
    below = torch.clamp_min(inds-1, 0)
    above = torch.clamp_max(inds, N_samples_)

    inds_sampled = torch.stack([below, above], -1).view(N_rays, 2*N_importance)
    cdf_g = torch.gather(cdf, 1, inds_sampled).view(N_rays, N_importance, 2)
    bins_g = torch.gather(bins, 1, inds_sampled).view(N_rays, N_importance, 2)

    denom = cdf_g[...,1]-cdf_g[...,0]
    denom[denom<eps] = 1 # denom equals 0 means a bin has weight 0, in which case it will not be sampled
                         # anyway, therefore any value for it is fine (set to 1 here)

    samples = bins_g[...,0] + (u-cdf_g[...,0])/denom * (bins_g[...,1]-bins_g[...,0])
    return samples


def render_rays(models,
                embeddings,
                rays,
                N_samples=64,
                use_disp=False,
                perturb=0,
                noise_std=1,
                N_importance=0,
                chunk=1024*32,
                white_back=False
                ):

    def inference(model, embedding_xyz, embedding_dir, xyz_, dir_, z_vals):
        N_samples_ = xyz_.shape[1]
        # Embed positions and directions
        xyz_ = xyz_.view(-1, 3) # (N_rays*N_samples_, 3)
        xyz_embedded = embedding_xyz(xyz_) # (N_rays*N_samples_, embed_xyz_channels)
        dir_normalized = dir_/torch.norm(dir_, dim=1, keepdim=True) # (N_rays, 3)
        dir_embedded = embedding_dir(dir_normalized) # (N_rays, embed_dir_channels)
        dir_embedded = torch.repeat_interleave(dir_embedded, repeats=N_samples_, dim=0)
                       # (N_rays*N_samples_, embed_dir_channels)

        xyzdir_embedded = torch.cat([xyz_embedded, dir_embedded], 1)

        # Perform model inference to get raw rgb sigma
        rgbsigma = batched_inference(model, xyzdir_embedded, chunk)
        rgbsigma = rgbsigma.view(N_rays, N_samples_, 4)

        # Convert these values using volume rendering (Section 4)
        rgbs = rgbsigma[..., :3] # (N_rays, N_samples_, 3)
        sigmas = rgbsigma[..., 3] # (N_rays, N_samples_)
        deltas = z_vals[:, 1:] - z_vals[:, :-1] # (N_rays, N_samples_-1)
        delta_inf = 1e10 * torch.ones_like(deltas[:, :1]) # (N_rays, 1) the last delta is infinity
        deltas = torch.cat([deltas, delta_inf], -1)  # (N_rays, N_samples_)

        # Multiply each distance by the norm of its corresponding direction ray
        # to convert to real world distance (accounts for non-unit directions).
        deltas = deltas * torch.norm(dir_.unsqueeze(1), dim=-1)

        noise = torch.randn(sigmas.shape, device=sigmas.device) * noise_std

        # compute alpha by the formula (3)
        alphas = 1-torch.exp(-deltas*torch.relu(sigmas+noise)) # (N_rays, N_samples_)
        alphas_shifted = \
            torch.cat([torch.ones_like(alphas[:, :1]), 1-alphas+1e-10], -1) # [1, a1, a2, ...]
        weights = \
            alphas * torch.cumprod(alphas_shifted, -1)[:, :-1] # (N_rays, N_samples_)
        weights_sum = weights.sum(1) # (N_rays), the accumulated opacity along the rays
                                     # equals "1 - (1-a1)(1-a2)...(1-an)" mathematically

        # compute final weighted outputs
        rgb_final = torch.sum(weights.unsqueeze(-1)*rgbs, -2) # (N_rays, 3)
        depth_final = torch.sum(weights*z_vals, -1) # (N_rays)

        if white_back:
            rgb_final = rgb_final + 1-weights_sum.unsqueeze(-1)

        return rgb_final, depth_final, weights


    # Extract models from lists
    model_coarse = models[0]
    embedding_xyz = embeddings[0]
    embedding_dir = embeddings[1]

    # Decompose the inputs
    N_rays = rays.shape[0]
    rays_o, rays_d = rays[:, 0:3], rays[:, 3:6] # both (N_rays, 3)
    near, far = rays[:, 6:7], rays[:, 7:8] # both (N_rays, 1)

    # Sample depth points
    z_steps = torch.linspace(0, 1, N_samples, device=rays.device) # (N_samples)
    if not use_disp: # use linear sampling in depth space
        z_vals = near * (1-z_steps) + far * z_steps
    else: # use linear sampling in disparity space
        z_vals = 1/(1/near * (1-z_steps) + 1/far * z_steps)

    z_vals = z_vals.expand(N_rays, N_samples)
    
    if perturb > 0: # perturb sampling depths (z_vals)
        z_vals_mid = 0.5 * (z_vals[: ,:-1] + z_vals[: ,1:]) # (N_rays, N_samples-1) interval mid points
        # get intervals between samples
        upper = torch.cat([z_vals_mid, z_vals[: ,-1:]], -1)
        lower = torch.cat([z_vals[: ,:1], z_vals_mid], -1)
        
        perturb_rand = perturb * torch.rand(z_vals.shape, device=rays.device)
        z_vals = lower + (upper - lower) * perturb_rand

    xyz_coarse_sampled = rays_o.unsqueeze(1) + \
                         rays_d.unsqueeze(1) * z_vals.unsqueeze(2) # (N_rays, N_samples, 3)

    rgb_coarse, depth_coarse, weights_coarse = \
        inference(model_coarse, embedding_xyz, embedding_dir,
                  xyz_coarse_sampled, rays_d, z_vals)

    result = {'rgb_coarse': rgb_coarse,
              'depth_coarse': depth_coarse,
              'opacity_coarse': weights_coarse.sum(1)
              }

    if N_importance > 0: # sample points for fine model
        z_vals_mid = 0.5 * (z_vals[: ,:-1] + z_vals[: ,1:]) # (N_rays, N_samples-1) interval mid points
        z_vals_ = sample_pdf(z_vals_mid, weights_coarse[:, 1:-1],
                             N_importance, det=(perturb==0)).detach()
                  # detach so that grad doesn't propogate to weights_coarse from here

        z_vals, _ = torch.sort(torch.cat([z_vals, z_vals_], -1), -1)
                    # values are interleaved actually, so maybe can do better than sort?

        xyz_fine_sampled = rays_o.unsqueeze(1) + \
                           rays_d.unsqueeze(1) * z_vals.unsqueeze(2)
                           # (N_rays, N_samples+N_importance, 3)

        model_fine = models[1]
        rgb_fine, depth_fine, weights_fine = \
            inference(model_fine, embedding_xyz, embedding_dir,
                      xyz_fine_sampled, rays_d, z_vals)

        result['rgb_fine'] = rgb_fine
        result['depth_fine'] = depth_fine
        result['opacity_fine'] = weights_fine.sum(1)

    return result
'''

NERF_PL_TRAIN = """
embedding_xyz = Embedding(3, 4)
embedding_dir = Embedding(3, 2)
embeddings = [embedding_xyz, embedding_dir]
nerf_coarse = NeRF(D=4, W=16, in_channels_xyz=embedding_xyz.out_channels,
                   in_channels_dir=embedding_dir.out_channels, skips=[2])
nerf_fine = NeRF(D=4, W=16, in_channels_xyz=embedding_xyz.out_channels,
                 in_channels_dir=embedding_dir.out_channels, skips=[2])
models = [nerf_coarse, nerf_fine]
for model in models:
    initialize(model)
loss_fn = nn.MSELoss(reduction='mean')
optimizer = torch.optim.Adam([p for model in models for p in model.parameters()], lr=5e-3, eps=1e-8)
scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[2], gamma=0.5)
all_rays = torch.tensor(ray_batch).float()
all_rgbs = torch.tensor(rgb_batch).float()
for step in range(4):
    rays, rgbs = all_rays[step % 2::2], all_rgbs[step % 2::2]
    results = render_rays(models, embeddings, rays, N_samples=8, use_disp=step % 2 == 1,
                          perturb=1.0, noise_std=1.0, N_importance=6, chunk=20, white_back=True)
    loss = loss_fn(results['rgb_coarse'], rgbs)
    loss += loss_fn(results['rgb_fine'], rgbs)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    record.append({k: v.detach().numpy() for k, v in results.items()})
    record.append({'loss': loss.item(), **{f'{i}.{k}': p.detach().numpy().copy() for i, model in enumerate(models) for k, p in model.named_parameters()}})
with torch.no_grad():
    test_results = render_rays(models, embeddings, all_rays[:6], N_samples=8, perturb=0, noise_std=0,
                               N_importance=6, chunk=32)
    sigma = nerf_fine(embedding_xyz(all_rays[:6, :3]), sigma_only=True)
record.append({k: v.numpy() for k, v in test_results.items()})
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
        NERF_PL_SOURCE + NERF_PL_TRAIN,
        NERF_PL_STEPS,
        capsys,
        393,
        initialize=initializer(),
        make_searchsorted=lambda lib: lambda a, v, side="left": lib.searchsorted(a, v, side=side),
        ray_batch=np.concatenate([origins, directions, bounds], 1),
        rgb_batch=rng.uniform(0, 1, (12, 3)),
    )
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
