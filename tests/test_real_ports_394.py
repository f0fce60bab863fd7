"""Real ports, continued (the harness: ``tests/real_ports.py``): neural fields, continued: a
SIREN fitting a signed distance function, a program written here in the style of
vsitzmann/siren (sine layers with their initialisation, differential operators by
``torch.autograd.grad``, the SDF loss of surface, off-surface, normal and eikonal terms).

The surface it exercises: sine layers initialised by ``weight.uniform_(...)`` under
``torch.no_grad()`` with ``np.sqrt`` bounds, a linear last layer; inputs taken as
``coords.clone().detach().requires_grad_(True)``; the gradient by
``torch.autograd.grad(y, [x], grad_outputs=..., create_graph=True)``, the divergence summed
from a float of ``[..., i:i + 1]`` slices, the Laplacian, a Hessian written into
``torch.zeros(...).to(y.device)`` by ``h[..., i, j, :] = grad(...)[0][..., :]`` and a Jacobian by
``jac[:, :, i, :] = grad(y[..., i].view(-1, 1), x, ...)``, with their ``torch.any(torch.isnan
(...))`` status; the SDF loss by ``torch.where(sdf != -1, ...)``, ``torch.exp(-1e2 *
torch.abs(...))``, ``1 - F.cosine_similarity(g, normals, dim=-1)[..., None]`` and
``torch.abs(g.norm(dim=-1) - 1)``; the terms summed into a float (``total += term``),
``clip_grad_norm_(..., max_norm=1.0)``, ``Adam(lr=..., params=...)``; after training the
Laplacian, Hessian and Jacobian of the field and their gradient (third derivatives).

Regressions guarded: index writes of graph-carrying gradients into a zeros tensor and
derivatives through them (double and triple backward through ``sin``, ``linear``, ``where``,
``cosine_similarity`` and ``norm``). The point cloud is a sphere sampled by the test: surface
points with sdf 0 and their normals, off-surface points with sdf -1 and normals -1.
``initialize(model)`` gives the port torch's initial weights. The lines changed: the import
lines and the gradient lines (``grads = total.backward()``, ``clip_grad_norm_(grads, ...)``,
``opt.step(grads)``).
"""

from __future__ import annotations

import numpy as np

from real_ports import assert_records_agree, initializer, runs_with_draws

SIREN_SDF_SOURCE = r"""
import numpy as np
import torch
from torch import autograd, nn
from torch.nn import functional as F


class Sine(nn.Module):
    # sin(w0 * (Wx + b)); later layers shrink W by w0 so activations keep their spread
    def __init__(self, n_in, n_out, w0=30.0, first=False):
        super().__init__()
        self.w0 = w0
        self.fc = nn.Linear(n_in, n_out)
        bound = 1 / n_in if first else np.sqrt(6 / n_in) / w0
        with torch.no_grad():
            self.fc.weight.uniform_(-bound, bound)

    def forward(self, x):
        return torch.sin(self.w0 * self.fc(x))


class Field(nn.Module):
    def __init__(self, dims=3, width=16, depth=2, w0=30.0):
        super().__init__()
        layers = [Sine(dims, width, w0, first=True)]
        layers += [Sine(width, width, w0) for _ in range(depth)]
        last = nn.Linear(width, 1)
        with torch.no_grad():
            edge = np.sqrt(6 / width) / w0
            last.weight.uniform_(-edge, edge)
        self.body = nn.Sequential(*layers, last)

    def forward(self, points):
        points = points.clone().detach().requires_grad_(True)  # derivatives w.r.t. the input
        return self.body(points), points


def grad_of(y, x, weights=None):
    weights = torch.ones_like(y) if weights is None else weights
    return torch.autograd.grad(y, [x], grad_outputs=weights, create_graph=True)[0]


def div_of(v, x):
    total = 0.0
    for k in range(v.shape[-1]):
        total += grad_of(v[..., k], x)[..., k : k + 1]
    return total


def laplacian(y, x):
    return div_of(grad_of(y, x), x)


def hessian_of(y, x):
    batch, count = y.shape[:2]
    dims = x.shape[-1]
    out = torch.zeros(batch, count, y.shape[-1], dims, dims).to(y.device)
    ones = torch.ones_like(y[..., 0])
    for c in range(y.shape[-1]):
        first = autograd.grad(y[..., c], x, ones, create_graph=True)[0]
        for j in range(dims):
            out[..., c, j, :] = autograd.grad(first[..., j], x, ones, create_graph=True)[0][..., :]
    return out, -1 if torch.any(torch.isnan(out)) else 0


def jacobian_of(y, x):
    batch, count = y.shape[:2]
    out = torch.zeros(batch, count, y.shape[-1], x.shape[-1]).to(y.device)
    for c in range(y.shape[-1]):
        column = y[..., c].view(-1, 1)
        out[:, :, c, :] = autograd.grad(column, x, torch.ones_like(column), create_graph=True)[0]
    return out, -1 if torch.any(torch.isnan(out)) else 0


def sdf_terms(pred, points, truth):
    on_surface = truth["sdf"] != -1
    g = grad_of(pred, points)
    zero = torch.zeros_like(pred)
    surface = torch.where(on_surface, pred, zero)
    off = torch.where(on_surface, zero, torch.exp(-1e2 * torch.abs(pred)))  # no stray zeros
    facing = 1 - F.cosine_similarity(g, truth["normals"], dim=-1)[..., None]
    normals = torch.where(on_surface, facing, torch.zeros_like(g[..., :1]))
    eikonal = torch.abs(g.norm(dim=-1) - 1)  # |grad sdf| = 1 everywhere
    return {
        "surface": torch.abs(surface).mean() * 3e3,
        "off_surface": off.mean() * 1e2,
        "normals": normals.mean() * 1e2,
        "eikonal": eikonal.mean() * 5e1,
    }
"""

SIREN_SDF_TRAIN = """
model = Field()
initialize(model)
opt = torch.optim.Adam(lr=1e-4, params=model.parameters())
cloud = torch.tensor(cloud_coords).float()[None]
truth = {"sdf": torch.tensor(cloud_sdf).float()[None]}
truth["normals"] = torch.tensor(cloud_normals).float()[None]
for step in range(3):
    pred, points = model(cloud)
    terms = sdf_terms(pred, points, truth)
    total = 0.0
    for term in terms.values():
        total += term.mean()
    opt.zero_grad()
    total.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    opt.step()
    record.append({name: float(term) for name, term in terms.items()})
    record.append({n: p.detach().numpy().copy() for n, p in model.named_parameters()})

pred, points = model(cloud[:, :5])
lap = laplacian(pred, points)
hess, hess_status = hessian_of(pred, points)
jac, jac_status = jacobian_of(grad_of(pred, points), points)
third = torch.autograd.grad(lap.sum() + hess.sum() + jac.sum(), [points])[0]
fields = [lap, hess, jac, third]
record.append([f.detach().numpy() for f in fields] + [hess_status, jac_status])
"""

SIREN_SDF_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("    total.backward()\n", "    grads = total.backward()\n"),
    ("clip_grad_norm_(model.parameters(),", "clip_grad_norm_(grads, model.parameters(),"),
    ("    opt.step()\n", "    opt.step(grads)\n"),
]


def test_siren_fits_a_signed_distance_function_as_torch(capsys):
    np.random.seed(394)
    rng = np.random.default_rng(394)
    on_surface = rng.standard_normal((24, 3))
    on_surface /= np.linalg.norm(on_surface, axis=1, keepdims=True) * 2
    off_surface = rng.uniform(-1, 1, (24, 3))
    (theirs, ours), _ = runs_with_draws(
        SIREN_SDF_SOURCE + SIREN_SDF_TRAIN,
        SIREN_SDF_STEPS,
        capsys,
        394,
        initialize=initializer(),
        cloud_coords=np.concatenate([on_surface, off_surface]),
        cloud_sdf=np.concatenate([np.zeros((24, 1)), -np.ones((24, 1))]),
        cloud_normals=np.concatenate([2 * on_surface, -np.ones((24, 3))]),
    )
    *steps, (their_lap, their_h, their_jac, their_third, *their_status) = theirs
    *our_steps, (our_lap, our_h, our_jac, our_third, *our_status) = ours
    assert our_status == their_status == [0, 0]
    assert_records_agree(our_steps, steps, rtol=2e-4, atol=2e-5)
    assert_records_agree(
        [our_lap, our_h, our_jac, our_third],
        [their_lap, their_h, their_jac, their_third],
        rtol=2e-4,
        atol=1e-4,
    )
