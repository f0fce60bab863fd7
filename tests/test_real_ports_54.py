# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- the sparsely-gated mixture of experts of davidmrau/mixture-of-experts (``moe.py`` and
  ``example.py``), smaller (12 inputs, 6 experts of width 8, ``k=2``), trained with noisy top-k
  gating and evaluated without: ``torch.nonzero(gates).sort(0)`` of an int64 matrix,
  ``split(1, dim=1)``, ``(gates > 0).sum(0).tolist()`` part sizes (an expert may get none: an
  empty batch through its ``MLP``), ``torch.split(inp_exp, self._part_sizes, dim=0)``,
  ``torch.gather`` of the expanded gates, ``zeros.index_add(0, self._batch_index, ...)`` of a
  ``torch.zeros(..., requires_grad=True)``, ``combined[combined == 0] = np.finfo(float).eps``,
  ``logits.topk(...)``, ``zeros.scatter(1, top_k_indices, top_k_gates)`` of a
  ``torch.zeros_like(logits, requires_grad=True)``, the load by ``Normal(self.mean,
  self.std).cdf(...)`` of buffers and ``torch.where``, and ``cv_squared`` by ``x.float().var()``.
  The data (``torch.rand``, ``torch.randint``) and the gating noise (``torch.randn_like``) are
  one seeded stream in both runs.

The lines changed: the gradient lines only (``grads = loss.backward()``,
``optim.step(grads)``).
"""

from __future__ import annotations

import numpy as np
import torch

import retrograd as rg
from real_ports import assert_records_agree, params_of, port, run_source


def _runs(source, steps, capsys, seed, **names):
    """The records and logs of ``source`` under torch and of its port under retrograd, each
    run with ``torch.rand``/``randn``/``randn_like``/``randint`` drawing from one stream seeded
    by ``seed`` (the same in both runs)."""
    records, logs = [], []
    for lib in (torch, rg):
        record = []
        torch.manual_seed(0)
        text = (
            source
            if lib is torch
            else port(source, steps).replace("from torch.", "from retrograd.")
        )
        with _SharedDraws(lib, seed):
            run_source(text, lib, record=record, **names)
        records.append(record)
        logs.append(capsys.readouterr().out)
    return records, logs


class _SharedDraws:
    """``torch.rand``, ``randn``, ``randn_like`` and ``randint`` of a library drawing from one
    seeded stream."""

    NAMES = ("rand", "randn", "randn_like", "randint")

    def __init__(self, lib, seed):
        self.lib, self.rng = lib, np.random.default_rng(seed)

    def __enter__(self):
        lib, rng = self.lib, self.rng

        def shape_of(size):
            return tuple(size[0] if len(size) == 1 and not isinstance(size[0], int) else size)

        def rand(*size, dtype=None, **_):
            return lib.tensor(rng.uniform(size=shape_of(size)), dtype=dtype or lib.float32)

        def randn(*size, dtype=None, **_):
            return lib.tensor(rng.standard_normal(shape_of(size)), dtype=dtype or lib.float32)

        def randn_like(t, **_):
            return randn(*t.shape, dtype=t.dtype)

        def randint(*args, **_):
            low, high, size = (0, *args) if len(args) == 2 else args
            return lib.tensor(rng.integers(low, high, tuple(size)), dtype=lib.int64)

        self.saved = [getattr(lib, name) for name in self.NAMES]
        for name, f in zip(self.NAMES, (rand, randn, randn_like, randint)):
            setattr(lib, name, f)
        return self

    def __exit__(self, *exc):
        for name, f in zip(self.NAMES, self.saved):
            setattr(self.lib, name, f)
        return False


# -- the mixture of experts -----------------------------------------------------------------------
MOE_SOURCE = '''
from torch.distributions.normal import Normal
from torch.optim import Adam


# -- moe.py --
class SparseDispatcher(object):
    """Helper for implementing a mixture of experts.
    (docstring shortened)
    """

    def __init__(self, num_experts, gates):
        """Create a SparseDispatcher."""

        self._gates = gates
        self._num_experts = num_experts
        # sort experts
        sorted_experts, index_sorted_experts = torch.nonzero(gates).sort(0)
        # drop indices
        _, self._expert_index = sorted_experts.split(1, dim=1)
        # get according batch index for each expert
        self._batch_index = torch.nonzero(gates)[index_sorted_experts[:, 1], 0]
        # calculate num samples that each expert gets
        self._part_sizes = (gates > 0).sum(0).tolist()
        # expand gates to match with self._batch_index
        gates_exp = gates[self._batch_index.flatten()]
        self._nonzero_gates = torch.gather(gates_exp, 1, self._expert_index)

    def dispatch(self, inp):
        """Create one input Tensor for each expert."""

        # assigns samples to experts whose gate is nonzero

        # expand according to batch index so we can just split by _part_sizes
        inp_exp = inp[self._batch_index].squeeze(1)
        return torch.split(inp_exp, self._part_sizes, dim=0)

    def combine(self, expert_out, multiply_by_gates=True):
        """Sum together the expert output, weighted by the gates."""
        # apply exp to expert outputs, so we are not longer in log space
        stitched = torch.cat(expert_out, 0).exp()

        if multiply_by_gates:
            stitched = stitched.mul(self._nonzero_gates)
        zeros = torch.zeros(self._gates.size(0), expert_out[-1].size(1), requires_grad=True, device=stitched.device)
        # combine samples that have been processed by the same k experts
        combined = zeros.index_add(0, self._batch_index, stitched.float())
        # add eps to all zero values in order to avoid nans when going back to log space
        combined[combined == 0] = np.finfo(float).eps
        # back to log space
        return combined.log()

    def expert_to_gates(self):
        """Gate values corresponding to the examples in the per-expert `Tensor`s."""
        # split nonzero gates for each expert
        return torch.split(self._nonzero_gates, self._part_sizes, dim=0)

class MLP(nn.Module):
    def __init__(self, input_size, output_size, hidden_size):
        super(MLP, self).__init__()
        self.fc1 = nn.Linear(input_size, hidden_size)
        self.fc2 = nn.Linear(hidden_size, output_size)
        self.relu = nn.ReLU()
        self.soft = nn.Softmax(1)

    def forward(self, x):
        out = self.fc1(x)
        out = self.relu(out)
        out = self.fc2(out)
        out = self.soft(out)
        return out


class MoE(nn.Module):

    """Call a Sparsely gated mixture of experts layer with 1-layer Feed-Forward networks as experts.
    (docstring shortened)
    """

    def __init__(self, input_size, output_size, num_experts, hidden_size, noisy_gating=True, k=4):
        super(MoE, self).__init__()
        self.noisy_gating = noisy_gating
        self.num_experts = num_experts
        self.output_size = output_size
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.k = k
        # instantiate experts
        self.experts = nn.ModuleList([MLP(self.input_size, self.output_size, self.hidden_size) for i in range(self.num_experts)])
        self.w_gate = nn.Parameter(torch.zeros(input_size, num_experts), requires_grad=True)
        self.w_noise = nn.Parameter(torch.zeros(input_size, num_experts), requires_grad=True)

        self.softplus = nn.Softplus()
        self.softmax = nn.Softmax(1)
        self.register_buffer("mean", torch.tensor([0.0]))
        self.register_buffer("std", torch.tensor([1.0]))
        assert(self.k <= self.num_experts)

    def cv_squared(self, x):
        """The squared coefficient of variation of a sample."""
        eps = 1e-10
        # if only num_experts = 1

        if x.shape[0] == 1:
            return torch.tensor([0], device=x.device, dtype=x.dtype)
        return x.float().var() / (x.float().mean()**2 + eps)

    def _gates_to_load(self, gates):
        """Compute the true load per expert, given the gates."""
        return (gates > 0).sum(0)

    def _prob_in_top_k(self, clean_values, noisy_values, noise_stddev, noisy_top_values):
        """Helper function to NoisyTopKGating."""
        batch = clean_values.size(0)
        m = noisy_top_values.size(1)
        top_values_flat = noisy_top_values.flatten()

        threshold_positions_if_in = torch.arange(batch, device=clean_values.device) * m + self.k
        threshold_if_in = torch.unsqueeze(torch.gather(top_values_flat, 0, threshold_positions_if_in), 1)
        is_in = torch.gt(noisy_values, threshold_if_in)
        threshold_positions_if_out = threshold_positions_if_in - 1
        threshold_if_out = torch.unsqueeze(torch.gather(top_values_flat, 0, threshold_positions_if_out), 1)
        # is each value currently in the top k.
        normal = Normal(self.mean, self.std)
        prob_if_in = normal.cdf((clean_values - threshold_if_in)/noise_stddev)
        prob_if_out = normal.cdf((clean_values - threshold_if_out)/noise_stddev)
        prob = torch.where(is_in, prob_if_in, prob_if_out)
        return prob

    def noisy_top_k_gating(self, x, train, noise_epsilon=1e-2):
        """Noisy top-k gating."""
        clean_logits = x @ self.w_gate
        if self.noisy_gating and train:
            raw_noise_stddev = x @ self.w_noise
            noise_stddev = ((self.softplus(raw_noise_stddev) + noise_epsilon))
            noisy_logits = clean_logits + (torch.randn_like(clean_logits) * noise_stddev)
            logits = noisy_logits
        else:
            logits = clean_logits

        # calculate topk + 1 that will be needed for the noisy gates
        top_logits, top_indices = logits.topk(min(self.k + 1, self.num_experts), dim=1)
        top_k_logits = top_logits[:, :self.k]
        top_k_indices = top_indices[:, :self.k]
        top_k_gates = self.softmax(top_k_logits)

        zeros = torch.zeros_like(logits, requires_grad=True)
        gates = zeros.scatter(1, top_k_indices, top_k_gates)

        if self.noisy_gating and self.k < self.num_experts and train:
            load = (self._prob_in_top_k(clean_logits, noisy_logits, noise_stddev, top_logits)).sum(0)
        else:
            load = self._gates_to_load(gates)
        return gates, load

    def forward(self, x, loss_coef=1e-2):
        """(docstring shortened)"""
        gates, load = self.noisy_top_k_gating(x, self.training)
        # calculate importance loss
        importance = gates.sum(0)
        #
        loss = self.cv_squared(importance) + self.cv_squared(load)
        loss *= loss_coef

        dispatcher = SparseDispatcher(self.num_experts, gates)
        expert_inputs = dispatcher.dispatch(x)
        gates = dispatcher.expert_to_gates()
        expert_outputs = [self.experts[i](expert_inputs[i]) for i in range(self.num_experts)]
        y = dispatcher.combine(expert_outputs)
        return y, loss


# -- example.py --
def train(x, y, model, loss_fn, optim):
    # model returns the prediction and the loss that encourages all experts to have equal importance and load
    y_hat, aux_loss = model(x.float())
    # calculate prediction loss
    loss = loss_fn(y_hat, y)
    # combine losses
    total_loss = loss + aux_loss
    optim.zero_grad()
    total_loss.backward()
    optim.step()

    print("Training Results - loss: {:.2f}, aux_loss: {:.3f}".format(loss.item(), aux_loss.item()))
    record.append([loss.item(), aux_loss.item()])
    record.append(params_of(model))
    return model


def eval(x, y, model, loss_fn):
    model.eval()
    # model returns the prediction and the loss that encourages all experts to have equal importance and load
    y_hat, aux_loss = model(x.float())
    loss = loss_fn(y_hat, y)
    total_loss = loss + aux_loss
    print("Evaluation Results - loss: {:.2f}, aux_loss: {:.3f}".format(loss.item(), aux_loss.item()))
    record.append([loss.item(), aux_loss.item()])
    record.append(y_hat.detach().numpy())


def dummy_data(batch_size, input_size, num_classes):
    # dummy input
    x = torch.rand(batch_size, input_size)

    # dummy target
    y = torch.randint(num_classes, (batch_size, 1)).squeeze(1)
    return x, y


# arguments
input_size = 12
num_classes = 5
num_experts = 6
hidden_size = 8
batch_size = 7
k = 2

# determine device
if torch.cuda.is_available():
    device = torch.device('cuda')
else:
    device = torch.device('cpu')

# instantiate the MoE layer
model = MoE(input_size, num_classes, num_experts, hidden_size, k=k, noisy_gating=True)
model = model.to(device)
initialize(model)
loss_fn = nn.CrossEntropyLoss()
optim = Adam(model.parameters(), lr=0.05)

for _ in range(4):
    x, y = dummy_data(batch_size, input_size, num_classes)

    # train
    model = train(x.to(device), y.to(device), model, loss_fn, optim)
# evaluate
x, y = dummy_data(batch_size, input_size, num_classes)
eval(x.to(device), y.to(device), model, loss_fn)
'''

MOE_STEPS = [
    (
        "    total_loss.backward()\n    optim.step()",
        "    grads = total_loss.backward()\n    optim.step(grads)",
    ),
]


def _initializer():
    """``initialize(model)``: torch's run keeps its weights, the port loads them."""
    states = []

    def initialize(module):
        if not states:
            states.append({k: v.detach().numpy().copy() for k, v in module.state_dict().items()})
        else:
            module.load_state_dict(states[0])

    return initialize


def test_mixture_of_experts_trains_as_torch(capsys):
    records, logs = _runs(
        MOE_SOURCE,
        MOE_STEPS,
        capsys,
        seed=54,
        initialize=_initializer(),
        params_of=params_of,
    )
    ours, theirs = records[1], records[0]
    assert logs[0].count("Training Results") == 4
    assert_records_agree(ours, theirs, rtol=2e-5, atol=2e-6)
