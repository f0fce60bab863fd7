# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- Neural ODEs with the adjoint method as msurtsukov/neural-ode writes them (``Neural
  ODEs.ipynb``): the Euler ``ode_solve`` (``math.ceil((abs(t1 - t0)/h_max).max().item())``),
  ``ODEF.forward_with_grad`` taking ``torch.autograd.grad((out,), (z, t) +
  tuple(self.parameters()), grad_outputs=(a), allow_unused=True, retain_graph=True)`` (``None``
  for the unused time) and ``torch.cat([p_grad.flatten() ...]).unsqueeze(0).expand(batch_size,
  -1)``; ``ODEAdjoint``, an ``autograd.Function`` whose ``forward`` takes a module and the
  flattened parameters (``torch.zeros(...).to(z0)``, ``z[0] = z0`` under ``no_grad``,
  ``ctx.func = func``, ``ctx.save_for_backward(t, z.clone(), flat_parameters)``) and whose
  ``backward`` integrates the augmented system backwards in time under ``no_grad`` with
  ``torch.set_grad_enabled(True)`` inside for the vector-Jacobian products (``t_i.detach().
  requires_grad_(True)``), ``torch.bmm(torch.transpose(...))``, ``adj_z[:] = ...`` and ``adj_p[:]
  += ...`` slice writes, ``adj_t[i_t-1] = ...``, returning ``None`` for the module;
  ``NeuralODE`` defaulting ``t=Tensor([0., 1.])``; ``LinearODEF`` (``self.lin.weight =
  nn.Parameter(W)``), the spiral and random linear dynamics and ``NNODEF`` (``nn.ELU(inplace=
  True)``, time concatenated); ``conduct_experiment``'s data (``torch.from_numpy(times_np[:, :,
  None]).to(z0)``, ``obs + torch.randn_like(obs) * 0.01``), ``create_batch`` by NumPy masks and
  ``sorted(np.random.permutation(...))`` indexing tensors with a list, Adam and
  ``loss.backward(retain_graph=True)``. Smaller: fewer time points, a coarser Euler step, a few
  training steps; ``np.int`` (gone from NumPy) is ``int``;
- the capsule network of gram-ai/capsule-networks (``capsule_network.py``): the routing
  ``softmax`` by ``transpose(dim, len(input.size()) - 1)`` and ``contiguous().view``, the 5-d
  broadcast ``x[None, :, :, None, :] @ self.route_weights[:, None, :, :, :]``, ``squash``,
  primary capsules as an ``nn.ModuleList`` of convolutions concatenated on ``dim=-1``,
  ``.squeeze().transpose(0, 1)``, ``(x ** 2).sum(dim=-1) ** 0.5``, one-hot labels by
  ``torch.sparse.torch.eye(NUM_CLASSES).index_select(dim=0, index=labels)``, the masked
  decoder input ``(x * y[:, :, None]).view(x.size(0), -1)`` (as ``reshape``: torch's own
  ``view`` refuses the product of the transposed capsules, which keeps their strides), ``CapsuleLoss`` (``F.relu(0.9 -
  classes, inplace=True) ** 2``, ``nn.MSELoss(size_average=False)``, ``torch.numel``), the
  random-shift ``augmentation`` (``slice`` objects from ``np.random.randint``, written into
  ``torch.zeros(*x.size())``), Adam with its defaults, and the ``processor`` torchnet's
  ``Engine`` drives (its loop written out; ``.cuda()`` calls dropped, as the device is the CPU).

Both the neural ODE and the capsule network's model ran unchanged but for the gradient lines.
The defect found: retrograd had no ``torch.sparse`` namespace, so ``torch.sparse.torch.eye``
failed; ``rg.sparse`` now carries the package as ``torch`` (as torch's does), ``sparse.mm`` of
dense matrices, and refusals of the sparse-only reductions given a dense tensor.
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
from torch.autograd import Variable


def ode_solve(z0, t0, t1, f):
    """
    Simplest Euler ODE initial value solver
    """
    h_max = 0.25
    n_steps = math.ceil((abs(t1 - t0)/h_max).max().item())

    h = (t1 - t0)/n_steps
    t = t0
    z = z0

    for i_step in range(n_steps):
        z = z + h * f(z, t)
        t = t + h
    return z


class ODEF(nn.Module):
    def forward_with_grad(self, z, t, grad_outputs):
        """Compute f and a df/dz, a df/dp, a df/dt"""
        batch_size = z.shape[0]

        out = self.forward(z, t)

        a = grad_outputs
        adfdz, adfdt, *adfdp = torch.autograd.grad(
            (out,), (z, t) + tuple(self.parameters()), grad_outputs=(a),
            allow_unused=True, retain_graph=True
        )
        # grad method automatically sums gradients for batch items, we have to expand them back
        if adfdp is not None:
            adfdp = torch.cat([p_grad.flatten() for p_grad in adfdp]).unsqueeze(0)
            adfdp = adfdp.expand(batch_size, -1) / batch_size
        if adfdt is not None:
            adfdt = adfdt.expand(batch_size, 1) / batch_size
        return out, adfdz, adfdt, adfdp

    def flatten_parameters(self):
        p_shapes = []
        flat_parameters = []
        for p in self.parameters():
            p_shapes.append(p.size())
            flat_parameters.append(p.flatten())
        return torch.cat(flat_parameters)


class ODEAdjoint(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z0, t, flat_parameters, func):
        assert isinstance(func, ODEF)
        bs, *z_shape = z0.size()
        time_len = t.size(0)

        with torch.no_grad():
            z = torch.zeros(time_len, bs, *z_shape).to(z0)
            z[0] = z0
            for i_t in range(time_len - 1):
                z0 = ode_solve(z0, t[i_t], t[i_t+1], func)
                z[i_t+1] = z0

        ctx.func = func
        ctx.save_for_backward(t, z.clone(), flat_parameters)
        return z

    @staticmethod
    def backward(ctx, dLdz):
        """
        dLdz shape: time_len, batch_size, *z_shape
        """
        func = ctx.func
        t, z, flat_parameters = ctx.saved_tensors
        time_len, bs, *z_shape = z.size()
        n_dim = np.prod(z_shape)
        n_params = flat_parameters.size(0)

        # Dynamics of augmented system to be calculated backwards in time
        def augmented_dynamics(aug_z_i, t_i):
            """
            tensors here are temporal slices
            t_i - is tensor with size: bs, 1
            aug_z_i - is tensor with size: bs, n_dim*2 + n_params + 1
            """
            z_i, a = aug_z_i[:, :n_dim], aug_z_i[:, n_dim:2*n_dim]  # ignore parameters and time

            # Unflatten z and a
            z_i = z_i.view(bs, *z_shape)
            a = a.view(bs, *z_shape)
            with torch.set_grad_enabled(True):
                t_i = t_i.detach().requires_grad_(True)
                z_i = z_i.detach().requires_grad_(True)
                func_eval, adfdz, adfdt, adfdp = func.forward_with_grad(z_i, t_i, grad_outputs=a)  # bs, *z_shape
                adfdz = adfdz.to(z_i) if adfdz is not None else torch.zeros(bs, *z_shape).to(z_i)
                adfdp = adfdp.to(z_i) if adfdp is not None else torch.zeros(bs, n_params).to(z_i)
                adfdt = adfdt.to(z_i) if adfdt is not None else torch.zeros(bs, 1).to(z_i)

            # Flatten f and adfdz
            func_eval = func_eval.view(bs, n_dim)
            adfdz = adfdz.view(bs, n_dim)
            return torch.cat((func_eval, -adfdz, -adfdp, -adfdt), dim=1)

        dLdz = dLdz.view(time_len, bs, n_dim)  # flatten dLdz for convenience
        with torch.no_grad():
            ## Create placeholders for output gradients
            # Prev computed backwards adjoints to be adjusted by direct gradients
            adj_z = torch.zeros(bs, n_dim).to(dLdz)
            adj_p = torch.zeros(bs, n_params).to(dLdz)
            # In contrast to z and p we need to return gradients for all times
            adj_t = torch.zeros(time_len, bs, 1).to(dLdz)

            for i_t in range(time_len-1, 0, -1):
                z_i = z[i_t]
                t_i = t[i_t]
                f_i = func(z_i, t_i).view(bs, n_dim)

                # Compute direct gradients
                dLdz_i = dLdz[i_t]
                dLdt_i = torch.bmm(torch.transpose(dLdz_i.unsqueeze(-1), 1, 2), f_i.unsqueeze(-1))[:, 0]

                # Adjusting adjoints with direct gradients
                adj_z += dLdz_i
                adj_t[i_t] = adj_t[i_t] - dLdt_i

                # Pack augmented variable
                aug_z = torch.cat((z_i.view(bs, n_dim), adj_z, torch.zeros(bs, n_params).to(z), adj_t[i_t]), dim=-1)

                # Solve augmented system backwards
                aug_ans = ode_solve(aug_z, t_i, t[i_t-1], augmented_dynamics)

                # Unpack solved backwards augmented system
                adj_z[:] = aug_ans[:, n_dim:2*n_dim]
                adj_p[:] += aug_ans[:, 2*n_dim:2*n_dim + n_params]
                adj_t[i_t-1] = aug_ans[:, 2*n_dim + n_params:]

                del aug_z, aug_ans

            ## Adjust 0 time adjoint with direct gradients
            # Compute direct gradients
            dLdz_0 = dLdz[0]
            dLdt_0 = torch.bmm(torch.transpose(dLdz_0.unsqueeze(-1), 1, 2), f_i.unsqueeze(-1))[:, 0]

            # Adjust adjoints
            adj_z += dLdz_0
            adj_t[0] = adj_t[0] - dLdt_0
        return adj_z.view(bs, *z_shape), adj_t, adj_p, None


class NeuralODE(nn.Module):
    def __init__(self, func):
        super(NeuralODE, self).__init__()
        assert isinstance(func, ODEF)
        self.func = func

    def forward(self, z0, t=Tensor([0., 1.]), return_whole_sequence=False):
        t = t.to(z0)
        z = ODEAdjoint.apply(z0, t, self.func.flatten_parameters(), self.func)
        if return_whole_sequence:
            return z
        else:
            return z[-1]


class LinearODEF(ODEF):
    def __init__(self, W):
        super(LinearODEF, self).__init__()
        self.lin = nn.Linear(2, 2, bias=False)
        self.lin.weight = nn.Parameter(W)

    def forward(self, x, t):
        return self.lin(x)


class SpiralFunctionExample(LinearODEF):
    def __init__(self):
        super(SpiralFunctionExample, self).__init__(Tensor([[-0.1, -1.], [1., -0.1]]))


class RandomLinearODEF(LinearODEF):
    def __init__(self):
        super(RandomLinearODEF, self).__init__(torch.randn(2, 2)/2.)


class NNODEF(ODEF):
    def __init__(self, in_dim, hid_dim, time_invariant=False):
        super(NNODEF, self).__init__()
        self.time_invariant = time_invariant

        if time_invariant:
            self.lin1 = nn.Linear(in_dim, hid_dim)
        else:
            self.lin1 = nn.Linear(in_dim+1, hid_dim)
        self.lin2 = nn.Linear(hid_dim, hid_dim)
        self.lin3 = nn.Linear(hid_dim, in_dim)
        self.elu = nn.ELU(inplace=True)

    def forward(self, x, t):
        if not self.time_invariant:
            x = torch.cat((x, t), dim=-1)

        h = self.elu(self.lin1(x))
        h = self.elu(self.lin2(h))
        out = self.lin3(h)
        return out


def conduct_experiment(ode_true, ode_trained, n_steps, name, plot_freq=10):
    records = []
    # Create data
    z0 = Variable(torch.Tensor([[0.6, 0.3]]))

    t_max = 6.29*0.5
    n_points = 12

    index_np = np.arange(0, n_points, 1, dtype=int)
    index_np = np.hstack([index_np[:, None]])
    times_np = np.linspace(0, t_max, num=n_points)
    times_np = np.hstack([times_np[:, None]])

    times = torch.from_numpy(times_np[:, :, None]).to(z0)
    obs = ode_true(z0, times, return_whole_sequence=True).detach()
    obs = obs + torch.randn_like(obs) * 0.01

    # Get trajectory of random timespan
    min_delta_time = 0.5
    max_delta_time = 1.5
    max_points_num = 4
    def create_batch():
        t0 = np.random.uniform(0, t_max - max_delta_time)
        t1 = t0 + np.random.uniform(min_delta_time, max_delta_time)

        idx = sorted(np.random.permutation(index_np[(times_np > t0) & (times_np < t1)])[:max_points_num])

        obs_ = obs[idx]
        ts_ = times[idx]
        return obs_, ts_

    # Train Neural ODE
    optimizer = torch.optim.Adam(ode_trained.parameters(), lr=0.01)
    for i in range(n_steps):
        obs_, ts_ = create_batch()

        z_ = ode_trained(obs_[0], ts_, return_whole_sequence=True)
        loss = F.mse_loss(z_, obs_.detach())

        optimizer.zero_grad()
        loss.backward(retain_graph=True)
        optimizer.step()

        records.append(loss.item())
        records.append(z_.detach().numpy().copy())
    records.append(obs.numpy().copy())
    records.append({n: v.detach().numpy().copy() for n, v in ode_trained.state_dict().items()})
    return records
'''

NODE_STEP = [
    (
        "        loss.backward(retain_graph=True)\n        optimizer.step()",
        "        grads = loss.backward(retain_graph=True)\n        optimizer.step(grads)",
    )
]


@pytest.mark.parametrize("trained", ["RandomLinearODEF", "NNODEF"])
def test_neural_ode_adjoint_training_matches_torch(monkeypatch, trained):
    records, initial = [], None
    for lib in (torch, rg):
        with monkeypatch.context() as patch:
            SharedNormalDraws(60).patch(patch, lib)
            names = both(NODE_SOURCE, NODE_STEP)[0 if lib is torch else 1]
            torch.manual_seed(0)
            np.random.seed(61)
            random.seed(61)
            ode_true = names["NeuralODE"](names["SpiralFunctionExample"]())
            func = (
                names["RandomLinearODEF"]()
                if trained == "RandomLinearODEF"
                else names["NNODEF"](2, 6, time_invariant=False)
            )
            ode_trained = names["NeuralODE"](func)
            if initial is None:
                initial = {
                    k: v.detach().numpy().copy() for k, v in ode_trained.state_dict().items()
                }
            else:
                ode_trained.load_state_dict({k: rg.tensor(v) for k, v in initial.items()})
            records.append(names["conduct_experiment"](ode_true, ode_trained, 3, "spiral"))
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-6)


# -- capsule network -------------------------------------------------------------------------------
CAPSULE_SOURCE = """
from torch.autograd import Variable
from torch.optim import Adam

BATCH_SIZE = 3
NUM_CLASSES = 4
NUM_EPOCHS = 2
NUM_ROUTING_ITERATIONS = 3


def softmax(input, dim=1):
    transposed_input = input.transpose(dim, len(input.size()) - 1)
    softmaxed_output = F.softmax(transposed_input.contiguous().view(-1, transposed_input.size(-1)), dim=-1)
    return softmaxed_output.view(*transposed_input.size()).transpose(dim, len(input.size()) - 1)


def augmentation(x, max_shift=2):
    _, _, height, width = x.size()

    h_shift, w_shift = np.random.randint(-max_shift, max_shift + 1, size=2)
    source_height_slice = slice(max(0, h_shift), h_shift + height)
    source_width_slice = slice(max(0, w_shift), w_shift + width)
    target_height_slice = slice(max(0, -h_shift), -h_shift + height)
    target_width_slice = slice(max(0, -w_shift), -w_shift + width)

    shifted_image = torch.zeros(*x.size())
    shifted_image[:, :, source_height_slice, source_width_slice] = x[:, :, target_height_slice, target_width_slice]
    return shifted_image.float()


class CapsuleLayer(nn.Module):
    def __init__(self, num_capsules, num_route_nodes, in_channels, out_channels, kernel_size=None, stride=None,
                 num_iterations=NUM_ROUTING_ITERATIONS):
        super(CapsuleLayer, self).__init__()

        self.num_route_nodes = num_route_nodes
        self.num_iterations = num_iterations

        self.num_capsules = num_capsules

        if num_route_nodes != -1:
            self.route_weights = nn.Parameter(torch.randn(num_capsules, num_route_nodes, in_channels, out_channels))
        else:
            self.capsules = nn.ModuleList(
                [nn.Conv2d(in_channels, out_channels, kernel_size=kernel_size, stride=stride, padding=0) for _ in
                 range(num_capsules)])

    def squash(self, tensor, dim=-1):
        squared_norm = (tensor ** 2).sum(dim=dim, keepdim=True)
        scale = squared_norm / (1 + squared_norm)
        return scale * tensor / torch.sqrt(squared_norm)

    def forward(self, x):
        if self.num_route_nodes != -1:
            priors = x[None, :, :, None, :] @ self.route_weights[:, None, :, :, :]

            logits = Variable(torch.zeros(*priors.size()))
            for i in range(self.num_iterations):
                probs = softmax(logits, dim=2)
                outputs = self.squash((probs * priors).sum(dim=2, keepdim=True))

                if i != self.num_iterations - 1:
                    delta_logits = (priors * outputs).sum(dim=-1, keepdim=True)
                    logits = logits + delta_logits
        else:
            outputs = [capsule(x).view(x.size(0), -1, 1) for capsule in self.capsules]
            outputs = torch.cat(outputs, dim=-1)
            outputs = self.squash(outputs)

        return outputs


class CapsuleNet(nn.Module):
    def __init__(self):
        super(CapsuleNet, self).__init__()

        self.conv1 = nn.Conv2d(in_channels=1, out_channels=8, kernel_size=3, stride=1)
        self.primary_capsules = CapsuleLayer(num_capsules=4, num_route_nodes=-1, in_channels=8, out_channels=4,
                                             kernel_size=3, stride=2)
        self.digit_capsules = CapsuleLayer(num_capsules=NUM_CLASSES, num_route_nodes=4 * 4 * 4, in_channels=4,
                                           out_channels=6)

        self.decoder = nn.Sequential(
            nn.Linear(6 * NUM_CLASSES, 16),
            nn.ReLU(inplace=True),
            nn.Linear(16, 32),
            nn.ReLU(inplace=True),
            nn.Linear(32, 144),
            nn.Sigmoid()
        )

    def forward(self, x, y=None):
        x = F.relu(self.conv1(x), inplace=True)
        x = self.primary_capsules(x)
        x = self.digit_capsules(x).squeeze().transpose(0, 1)

        classes = (x ** 2).sum(dim=-1) ** 0.5
        classes = F.softmax(classes, dim=-1)

        if y is None:
            # In all batches, get the most active capsule.
            _, max_length_indices = classes.max(dim=1)
            y = Variable(torch.sparse.torch.eye(NUM_CLASSES)).index_select(dim=0, index=max_length_indices.data)

        reconstructions = self.decoder((x * y[:, :, None]).reshape(x.size(0), -1))

        return classes, reconstructions


class CapsuleLoss(nn.Module):
    def __init__(self):
        super(CapsuleLoss, self).__init__()
        self.reconstruction_loss = nn.MSELoss(size_average=False)

    def forward(self, images, labels, classes, reconstructions):
        left = F.relu(0.9 - classes, inplace=True) ** 2
        right = F.relu(classes - 0.1, inplace=True) ** 2

        margin_loss = labels * left + 0.5 * (1. - labels) * right
        margin_loss = margin_loss.sum()

        assert torch.numel(images) == torch.numel(reconstructions)
        images = images.view(reconstructions.size()[0], -1)
        reconstruction_loss = self.reconstruction_loss(reconstructions, images)

        return (margin_loss + 0.0005 * reconstruction_loss) / images.size(0)


def main(model, train_samples, test_samples):
    records = []
    optimizer = Adam(model.parameters())
    capsule_loss = CapsuleLoss()

    def processor(sample):
        data, labels, training = sample

        data = augmentation(data.unsqueeze(1).float() / 255.0)
        labels = torch.LongTensor(labels)

        labels = torch.sparse.torch.eye(NUM_CLASSES).index_select(dim=0, index=labels)

        data = Variable(data)
        labels = Variable(labels)

        if training:
            classes, reconstructions = model(data, labels)
        else:
            classes, reconstructions = model(data)

        loss = capsule_loss(data, labels, classes, reconstructions)

        return loss, classes

    # torchnet's Engine.train and Engine.test, as they drive the processor
    for epoch in range(NUM_EPOCHS):
        model.train()
        for data, labels in train_samples:
            optimizer.zero_grad()
            loss, output = processor((data, labels, True))
            loss.backward()
            optimizer.step()
            records.append(loss.item())
        model.eval()
        with torch.no_grad():
            for data, labels in test_samples:
                loss, output = processor((data, labels, False))
                records.append([loss.item(), output.numpy().copy()])
    records.append({n: v.detach().numpy().copy() for n, v in model.state_dict().items()})
    return records
"""

CAPSULE_STEP = [
    (
        "            loss.backward()\n            optimizer.step()",
        "            grads = loss.backward()\n            optimizer.step(grads)",
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
        model = names["CapsuleNet"]()
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
