"""Real ports, continued (the harness: ``tests/real_ports.py``): programs written here in the
style of msurtsukov/neural-ode (neural ODEs trained by the adjoint method) and of
gram-ai/capsule-networks (dynamic routing between capsules).

- neural ODE: an Euler solver stepping ``math.ceil((abs(t1 - t0) / h_max).max().item())``
  times; ``torch.autograd.grad((f,), (z, t) + tuple(self.parameters()), grad_outputs=(a),
  allow_unused=True, retain_graph=True)`` (``None`` for an unused time) and
  ``torch.cat([g.flatten() ...]).unsqueeze(0).expand(n, -1)``; an ``autograd.Function`` whose
  ``forward`` takes a module and the flattened parameters (``torch.zeros(...).to(z0)``,
  ``path[0] = z0`` under ``no_grad``, ``ctx.dynamics = dynamics``,
  ``ctx.save_for_backward(t, path.clone(), theta)``) and whose ``backward`` integrates the
  augmented system backwards under ``no_grad`` with ``torch.set_grad_enabled(True)`` inside
  for the vector-Jacobian products (``t_i.detach().requires_grad_(True)``),
  ``torch.bmm(torch.transpose(...))``, ``adj_z[:] = ...`` and ``adj_p[:] += ...`` slice
  writes, ``adj_t[i - 1] = ...``, returning ``None`` for the module; a block defaulting
  ``t=Tensor([0., 1.])``; linear dynamics by ``self.map.weight = nn.Parameter(A)`` and an MLP
  with ``nn.ELU(inplace=True)`` and time concatenated; data by ``torch.from_numpy(grid[:, :,
  None]).to(z0)`` and ``obs + torch.randn_like(obs) * 0.01``; windows chosen by NumPy masks and
  ``sorted(np.random.permutation(...))`` indexing tensors with a list; Adam and
  ``loss.backward(retain_graph=True)``;
- capsule network: a softmax over any dim by ``transpose(dim, len(x.size()) - 1)`` and
  ``contiguous().view``, the 5-d broadcast ``u[None, :, :, None, :] @ W[:, None, :, :, :]``,
  ``squash``, primary capsules as an ``nn.ModuleList`` of convolutions concatenated on
  ``dim=-1``, ``.squeeze().transpose(0, 1)``, ``(x ** 2).sum(dim=-1) ** 0.5``, one-hot labels
  by ``torch.sparse.torch.eye(n).index_select(dim=0, index=labels)`` with
  ``torch.LongTensor``, the masked decoder input (``reshape``: torch's own ``view`` refuses
  the product of the transposed capsules), a margin loss with ``F.relu(0.9 - x,
  inplace=True) ** 2``, ``nn.MSELoss(size_average=False)`` and ``torch.numel``, a random
  shift written through ``slice`` objects into ``torch.zeros(*x.size())``, ``Adam`` with its
  defaults, ``autograd.Variable``, and the train/test loop torchnet's ``Engine`` runs.

Both run unchanged but for the gradient lines. The regression guarded: retrograd had no
``torch.sparse`` namespace, so ``torch.sparse.torch.eye`` failed; ``rg.sparse`` carries the
package as ``torch`` (as torch's does), ``sparse.mm`` of dense matrices, and refusals of the
sparse-only reductions given a dense tensor.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, both
from test_real_ports_21 import SharedNormalDraws

NODE_SOURCE = '''
from torch import Tensor
from torch.autograd import Function, Variable


def euler(z, t0, t1, f, h_max=0.25):
    n = math.ceil((abs(t1 - t0) / h_max).max().item())
    h = (t1 - t0) / n
    t = t0
    for _ in range(n):
        z = z + h * f(z, t)
        t = t + h
    return z


class Dynamics(nn.Module):
    def vjps(self, z, t, a):
        """f(z, t) with a^T df/dz, a^T df/dt and a^T df/dp, one row per batch item."""
        n = z.shape[0]
        f = self.forward(z, t)
        a_dz, a_dt, *a_dp = torch.autograd.grad(
            (f,), (z, t) + tuple(self.parameters()), grad_outputs=(a),
            allow_unused=True, retain_graph=True,
        )
        # grad sums over the batch: spread the parameter and time parts back over its rows
        a_dp = torch.cat([g.flatten() for g in a_dp]).unsqueeze(0).expand(n, -1) / n
        if a_dt is not None:
            a_dt = a_dt.expand(n, 1) / n
        return f, a_dz, a_dt, a_dp

    def flat_params(self):
        return torch.cat([p.flatten() for p in self.parameters()])


class AdjointSolve(Function):
    @staticmethod
    def forward(ctx, z0, t, theta, dynamics):
        assert isinstance(dynamics, Dynamics)
        batch, *shape = z0.size()
        with torch.no_grad():
            path = torch.zeros(t.size(0), batch, *shape).to(z0)
            path[0] = z0
            for i in range(t.size(0) - 1):
                z0 = euler(z0, t[i], t[i + 1], dynamics)
                path[i + 1] = z0
        ctx.dynamics = dynamics
        ctx.save_for_backward(t, path.clone(), theta)
        return path

    @staticmethod
    def backward(ctx, grad_path):
        dynamics = ctx.dynamics
        t, path, theta = ctx.saved_tensors
        steps, batch, *shape = path.size()
        d, m = int(np.prod(shape)), theta.size(0)

        def augmented(state, t_i):
            # state rows are [z, a, a_p, a_t]; only z and a drive the system
            z_i = state[:, :d].view(batch, *shape)
            a = state[:, d : 2 * d].view(batch, *shape)
            with torch.set_grad_enabled(True):  # backward itself runs under no_grad
                t_i, z_i = t_i.detach().requires_grad_(True), z_i.detach().requires_grad_(True)
                f, a_dz, a_dt, a_dp = dynamics.vjps(z_i, t_i, a)
                a_dz = a_dz.to(z_i) if a_dz is not None else torch.zeros(batch, *shape).to(z_i)
                a_dt = a_dt.to(z_i) if a_dt is not None else torch.zeros(batch, 1).to(z_i)
            return torch.cat((f.view(batch, d), -a_dz.view(batch, d), -a_dp.to(z_i), -a_dt), dim=1)

        def direct_dt(g, f):  # the loss's own pull on the time point: g . f
            return torch.bmm(torch.transpose(g.unsqueeze(-1), 1, 2), f.unsqueeze(-1))[:, 0]

        grad_path = grad_path.view(steps, batch, d)
        with torch.no_grad():
            adj_z = torch.zeros(batch, d).to(grad_path)
            adj_p = torch.zeros(batch, m).to(grad_path)
            adj_t = torch.zeros(steps, batch, 1).to(grad_path)
            for i in range(steps - 1, 0, -1):
                f_i = dynamics(path[i], t[i]).view(batch, d)
                adj_z += grad_path[i]
                adj_t[i] = adj_t[i] - direct_dt(grad_path[i], f_i)
                zeros_p = torch.zeros(batch, m).to(path)
                state = torch.cat((path[i].view(batch, d), adj_z, zeros_p, adj_t[i]), dim=-1)
                back = euler(state, t[i], t[i - 1], augmented)
                adj_z[:] = back[:, d : 2 * d]
                adj_p[:] += back[:, 2 * d : 2 * d + m]
                adj_t[i - 1] = back[:, 2 * d + m :]
            f_0 = dynamics(path[0], t[0]).view(batch, d)
            adj_z += grad_path[0]
            adj_t[0] = adj_t[0] - direct_dt(grad_path[0], f_0)
        return adj_z.view(batch, *shape), adj_t, adj_p, None


class ODEBlock(nn.Module):
    def __init__(self, dynamics):
        super(ODEBlock, self).__init__()
        assert isinstance(dynamics, Dynamics)
        self.dynamics = dynamics

    def forward(self, z0, t=Tensor([0.0, 1.0]), whole_path=False):
        path = AdjointSolve.apply(z0, t.to(z0), self.dynamics.flat_params(), self.dynamics)
        return path if whole_path else path[-1]


class LinearDynamics(Dynamics):
    def __init__(self, A):
        super(LinearDynamics, self).__init__()
        self.map = nn.Linear(2, 2, bias=False)
        self.map.weight = nn.Parameter(A)

    def forward(self, z, t):
        return self.map(z)


class Spiral(LinearDynamics):
    def __init__(self):
        super(Spiral, self).__init__(Tensor([[-0.1, -1.0], [1.0, -0.1]]))


class RandomLinear(LinearDynamics):
    def __init__(self):
        super(RandomLinear, self).__init__(torch.randn(2, 2) / 2.0)


class MLPDynamics(Dynamics):
    def __init__(self, dim, hidden, autonomous=False):
        super(MLPDynamics, self).__init__()
        self.autonomous = autonomous
        self.net = nn.Sequential(
            nn.Linear(dim if autonomous else dim + 1, hidden), nn.ELU(inplace=True),
            nn.Linear(hidden, hidden), nn.ELU(inplace=True), nn.Linear(hidden, dim),
        )

    def forward(self, z, t):
        if not self.autonomous:
            z = torch.cat((z, t), dim=-1)  # time as one more input
        return self.net(z)


def fit_trajectory(true_block, block, n_steps):
    records = []
    start = Variable(torch.Tensor([[0.6, 0.3]]))
    t_end, n_points = 3.1, 12
    grid = np.linspace(0, t_end, num=n_points)[:, None]
    index = np.arange(n_points)[:, None]
    times = torch.from_numpy(grid[:, :, None]).to(start)
    observed = true_block(start, times, whole_path=True).detach()
    observed = observed + torch.randn_like(observed) * 0.01

    def random_window(shortest=0.5, longest=1.5, most=4):
        t0 = np.random.uniform(0, t_end - longest)
        t1 = t0 + np.random.uniform(shortest, longest)
        picked = sorted(np.random.permutation(index[(grid > t0) & (grid < t1)])[:most])
        return observed[picked], times[picked]

    optimizer = torch.optim.Adam(block.parameters(), lr=0.01)
    for _ in range(n_steps):
        obs_w, t_w = random_window()
        pred = block(obs_w[0], t_w, whole_path=True)
        loss = F.mse_loss(pred, obs_w.detach())
        optimizer.zero_grad()
        loss.backward(retain_graph=True)  # the observed path's graph is reused
        optimizer.step()
        records += [loss.item(), pred.detach().numpy().copy()]
    records.append(observed.numpy().copy())
    records.append({k: v.detach().numpy().copy() for k, v in block.state_dict().items()})
    return records
'''

NODE_STEP = [
    (
        "        loss.backward(retain_graph=True)  #",
        "        grads = loss.backward(retain_graph=True)  #",
    ),
    (
        "        optimizer.step()",
        "        optimizer.step(grads)",
    ),
]


@pytest.mark.parametrize("trained", ["RandomLinear", "MLPDynamics"])
def test_neural_ode_adjoint_training_matches_torch(monkeypatch, trained):
    records, initial = [], None
    for lib in (torch, rg):
        with monkeypatch.context() as patch:
            SharedNormalDraws(60).patch(patch, lib)
            names = both(NODE_SOURCE, NODE_STEP)[0 if lib is torch else 1]
            torch.manual_seed(0)
            np.random.seed(61)
            random.seed(61)
            true_block = names["ODEBlock"](names["Spiral"]())
            dynamics = (
                names["RandomLinear"]() if trained == "RandomLinear" else names["MLPDynamics"](2, 6)
            )
            block = names["ODEBlock"](dynamics)
            if initial is None:
                initial = {k: v.detach().numpy().copy() for k, v in block.state_dict().items()}
            else:
                block.load_state_dict({k: rg.tensor(v) for k, v in initial.items()})
            records.append(names["fit_trajectory"](true_block, block, 3))
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-6)


# -- capsule network -------------------------------------------------------------------------------
CAPSULE_SOURCE = """
from torch import autograd
from torch.optim import Adam

N_CLASSES = 4
ROUTING_ROUNDS = 3


def softmax_along(x, dim=1):
    # a softmax over any dim: move it last, flatten, and move it back
    last = len(x.size()) - 1
    moved = x.transpose(dim, last)
    flat = F.softmax(moved.contiguous().view(-1, moved.size(-1)), dim=-1)
    return flat.view(*moved.size()).transpose(dim, last)


def random_shift(images, max_shift=2):
    _, _, H, W = images.size()
    dy, dx = np.random.randint(-max_shift, max_shift + 1, size=2)
    into = (slice(max(0, dy), dy + H), slice(max(0, dx), dx + W))
    out_of = (slice(max(0, -dy), -dy + H), slice(max(0, -dx), -dx + W))
    shifted = torch.zeros(*images.size())
    shifted[:, :, into[0], into[1]] = images[:, :, out_of[0], out_of[1]]
    return shifted.float()


def squash(s, dim=-1):
    norm2 = (s ** 2).sum(dim=dim, keepdim=True)
    return norm2 / (1 + norm2) * s / torch.sqrt(norm2)


class PrimaryCaps(nn.Module):
    def __init__(self, n_caps, c_in, c_out, kernel, stride):
        super(PrimaryCaps, self).__init__()
        self.convs = nn.ModuleList(
            nn.Conv2d(c_in, c_out, kernel_size=kernel, stride=stride, padding=0)
            for _ in range(n_caps)
        )

    def forward(self, x):
        return squash(torch.cat([conv(x).view(x.size(0), -1, 1) for conv in self.convs], dim=-1))


class RoutedCaps(nn.Module):
    def __init__(self, n_caps, n_inputs, d_in, d_out, rounds=ROUTING_ROUNDS):
        super(RoutedCaps, self).__init__()
        self.rounds = rounds
        self.W = nn.Parameter(torch.randn(n_caps, n_inputs, d_in, d_out))

    def forward(self, u):
        votes = u[None, :, :, None, :] @ self.W[:, None, :, :, :]
        agreement = autograd.Variable(torch.zeros(*votes.size()))
        for r in range(self.rounds):
            v = squash((softmax_along(agreement, dim=2) * votes).sum(dim=2, keepdim=True))
            if r < self.rounds - 1:
                agreement = agreement + (votes * v).sum(dim=-1, keepdim=True)
        return v


class CapsNet(nn.Module):
    def __init__(self):
        super(CapsNet, self).__init__()
        self.stem = nn.Conv2d(in_channels=1, out_channels=8, kernel_size=3, stride=1)
        self.primary = PrimaryCaps(4, 8, 4, kernel=3, stride=2)
        self.digits = RoutedCaps(N_CLASSES, 4 * 4 * 4, 4, 6)
        self.decoder = nn.Sequential(
            nn.Linear(6 * N_CLASSES, 32), nn.ReLU(inplace=True), nn.Linear(32, 144), nn.Sigmoid()
        )

    def forward(self, images, onehot=None):
        caps = self.digits(self.primary(F.relu(self.stem(images), inplace=True)))
        caps = caps.squeeze().transpose(0, 1)  # (batch, classes, pose)
        lengths = F.softmax((caps ** 2).sum(dim=-1) ** 0.5, dim=-1)
        if onehot is None:  # reconstruct from the most active capsule
            _, best = lengths.max(dim=1)
            eye = autograd.Variable(torch.sparse.torch.eye(N_CLASSES))
            onehot = eye.index_select(dim=0, index=best.data)
        masked = (caps * onehot[:, :, None]).reshape(caps.size(0), -1)
        return lengths, self.decoder(masked)


class MarginReconLoss(nn.Module):
    def __init__(self):
        super(MarginReconLoss, self).__init__()
        self.recon = nn.MSELoss(size_average=False)

    def forward(self, images, onehot, lengths, recon):
        present = F.relu(0.9 - lengths, inplace=True) ** 2
        absent = F.relu(lengths - 0.1, inplace=True) ** 2
        margin = (onehot * present + 0.5 * (1.0 - onehot) * absent).sum()
        assert torch.numel(images) == torch.numel(recon)
        flat = images.view(recon.size()[0], -1)
        return (margin + 0.0005 * self.recon(recon, flat)) / images.size(0)


def main(model, train_batches, test_batches, epochs=2):
    records = []
    opt = Adam(model.parameters())  # its defaults
    criterion = MarginReconLoss()

    def run_batch(batch, training):
        pixels, labels = batch
        images = autograd.Variable(random_shift(pixels.unsqueeze(1).float() / 255.0))
        eye = torch.sparse.torch.eye(N_CLASSES)
        onehot = autograd.Variable(eye.index_select(dim=0, index=torch.LongTensor(labels)))
        lengths, recon = model(images, onehot) if training else model(images)
        return criterion(images, onehot, lengths, recon), lengths

    for _ in range(epochs):  # the loop torchnet's Engine runs
        model.train()
        for batch in train_batches:
            opt.zero_grad()
            loss, _ = run_batch(batch, True)
            loss.backward()
            opt.step()
            records.append(loss.item())
        model.eval()
        with torch.no_grad():
            for batch in test_batches:
                loss, lengths = run_batch(batch, False)
                records.append([loss.item(), lengths.numpy().copy()])
    records.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
    return records
"""

CAPSULE_STEP = [
    (
        "            loss.backward()\n            opt.step()",
        "            grads = loss.backward()\n            opt.step(grads)",
    )
]


def test_capsule_network_with_dynamic_routing_matches_torch(capsys):
    rng = np.random.default_rng(70)
    train = [(rng.integers(0, 256, (3, 12, 12)), rng.integers(0, 4, 3).tolist()) for _ in range(2)]
    test = [(rng.integers(0, 256, (3, 12, 12)), rng.integers(0, 4, 3).tolist())]
    theirs, ours = both(CAPSULE_SOURCE, CAPSULE_STEP)
    records, initial = [], None
    for lib, names in ((torch, theirs), (rg, ours)):
        torch.manual_seed(0)
        np.random.seed(71)
        model = names["CapsNet"]()
        if initial is None:
            initial = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
        else:
            model.load_state_dict({k: rg.tensor(v) for k, v in initial.items()})

        def samples(batches, lib=lib):
            return [(lib.tensor(x, dtype=lib.int64), y) for x, y in batches]

        records.append(names["main"](model, samples(train), samples(test)))
    flat = [[x for r in rec for x in (r if isinstance(r, list) else [r])] for rec in records]
    assert_records_agree(flat[1], flat[0], rtol=2e-4, atol=2e-6)


def test_sparse_namespace_carries_the_package_as_torch_s_does():
    """``torch.sparse.torch`` is ``torch`` (the capsule network's one-hot labels);
    ``sparse.mm`` of dense matrices is the product; the sparse-only reductions refuse a
    dense tensor, as torch's do (a sparse one they sum: tests/test_sparse.py)."""
    assert torch.sparse.torch is torch and rg.sparse.torch is rg
    labels = [2, 0, 3]
    np.testing.assert_array_equal(
        rg.sparse.torch.eye(4).index_select(dim=0, index=rg.tensor(labels)).numpy(),
        torch.sparse.torch.eye(4).index_select(dim=0, index=torch.tensor(labels)).numpy(),
    )
    a, b = np.arange(6.0).reshape(2, 3), np.arange(3.0).reshape(3, 1)
    np.testing.assert_array_equal(
        rg.sparse.mm(rg.tensor(a), rg.tensor(b)).numpy(),
        torch.sparse.mm(torch.tensor(a), torch.tensor(b)).numpy(),
    )
    with pytest.raises(RuntimeError):
        torch.sparse.sum(torch.tensor(a))
    with pytest.raises(rg.errors.InvalidArgumentError, match=r"sparse\.sum of a dense tensor"):
        rg.sparse.sum(rg.tensor(a))
    with pytest.raises(rg.ShapeError, match=r"sparse\.mm"):
        rg.sparse.mm(rg.tensor(a), rg.tensor(a))
