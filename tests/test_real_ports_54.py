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
- the Neural Turing Machine of loudinthecloud/pytorch-ntm (``ntm/memory.py``, ``head.py``,
  ``controller.py``, ``ntm.py``, ``aio.py``, ``tasks/copytask.py``'s ``dataloader`` and
  ``train.py``'s ``clip_grads``/``train_batch``) on the copy task, smaller (4-bit sequences of
  length 1 to 3, a 16-unit LSTM controller, an 8x5 memory, batches of 2): content addressing by
  ``F.cosine_similarity(self.memory + 1e-16, k + 1e-16, dim=-1)``, the circular shift by
  ``torch.cat([w[-1:], w, w[:1]])`` and ``F.conv1d`` written row by row into ``torch.zeros(
  wg.size())``, sharpening by ``ŵ ** γ``, erase/add writes by ``torch.matmul(w.unsqueeze(-1),
  e.unsqueeze(1))``, ``self.memory = torch.Tensor(...)`` replaced at once, ``_split_cols`` by
  ``np.cumsum`` slice bounds, a memory module shared by the heads (so its buffer is in the
  state dict three times), ``register_buffer("read0_bias", init_r_bias.data)`` with the
  tensor also kept in a list (loaded through the buffer), learned LSTM initial states by
  ``Parameter(...).clone().repeat(1, batch_size, 1)``, ``y_out[i], _ = net()`` into
  ``torch.zeros(Y.size())``, ``nn.BCELoss``, ``p.grad.data.clamp_(-10, 10)``, RMSprop with
  momentum, and the error bits by ``y_out.clone().data.apply_(lambda x: 0 if x < 0.5 else
  1)``. The ``attrs`` classes of ``copytask.py`` (``attrs`` is not installed) are spelled out
  as the objects they build, and ``evaluate`` is left out (its ``loss.data[0]`` fails on
  torch 2).

The lines changed: the gradient lines (``grads = loss.backward()``, ``optim.step(grads)``,
``p.grad(grads)``) and the ``import`` lines naming ``torch``.
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


# -- the Neural Turing Machine --------------------------------------------------------------------
NTM_SOURCE = """
import random

from torch import nn
from torch import optim
import torch.nn.functional as F
from torch.nn import Parameter


# -- ntm/memory.py --
def _convolve(w, s):
    \"\"\"Circular convolution implementation.\"\"\"
    assert s.size(0) == 3
    t = torch.cat([w[-1:], w, w[:1]])
    c = F.conv1d(t.view(1, 1, -1), s.view(1, 1, -1)).view(-1)
    return c


class NTMMemory(nn.Module):
    \"\"\"Memory bank for NTM.\"\"\"
    def __init__(self, N, M):
        \"\"\"Initialize the NTM Memory matrix. (docstring shortened)\"\"\"
        super(NTMMemory, self).__init__()

        self.N = N
        self.M = M

        # The memory bias allows the heads to learn how to initially address
        # memory locations by content
        self.register_buffer('mem_bias', torch.Tensor(N, M))

        # Initialize memory bias
        stdev = 1 / (np.sqrt(N + M))
        nn.init.uniform_(self.mem_bias, -stdev, stdev)

    def reset(self, batch_size):
        \"\"\"Initialize memory from bias, for start-of-sequence.\"\"\"
        self.batch_size = batch_size
        self.memory = self.mem_bias.clone().repeat(batch_size, 1, 1)

    def size(self):
        return self.N, self.M

    def read(self, w):
        \"\"\"Read from memory (according to section 3.1).\"\"\"
        return torch.matmul(w.unsqueeze(1), self.memory).squeeze(1)

    def write(self, w, e, a):
        \"\"\"write to memory (according to section 3.2).\"\"\"
        self.prev_mem = self.memory
        self.memory = torch.Tensor(self.batch_size, self.N, self.M)
        erase = torch.matmul(w.unsqueeze(-1), e.unsqueeze(1))
        add = torch.matmul(w.unsqueeze(-1), a.unsqueeze(1))
        self.memory = self.prev_mem * (1 - erase) + add

    def address(self, k, β, g, s, γ, w_prev):
        \"\"\"NTM Addressing (according to section 3.3). (docstring shortened)\"\"\"
        # Content focus
        wc = self._similarity(k, β)

        # Location focus
        wg = self._interpolate(w_prev, wc, g)
        ŵ = self._shift(wg, s)
        w = self._sharpen(ŵ, γ)

        return w

    def _similarity(self, k, β):
        k = k.view(self.batch_size, 1, -1)
        w = F.softmax(β * F.cosine_similarity(self.memory + 1e-16, k + 1e-16, dim=-1), dim=1)
        return w

    def _interpolate(self, w_prev, wc, g):
        return g * wc + (1 - g) * w_prev

    def _shift(self, wg, s):
        result = torch.zeros(wg.size())
        for b in range(self.batch_size):
            result[b] = _convolve(wg[b], s[b])
        return result

    def _sharpen(self, ŵ, γ):
        w = ŵ ** γ
        w = torch.div(w, torch.sum(w, dim=1).view(-1, 1) + 1e-16)
        return w


# -- ntm/head.py --
def _split_cols(mat, lengths):
    \"\"\"Split a 2D matrix to variable length columns.\"\"\"
    assert mat.size()[1] == sum(lengths), "Lengths must be summed to num columns"
    l = np.cumsum([0] + lengths)
    results = []
    for s, e in zip(l[:-1], l[1:]):
        results += [mat[:, s:e]]
    return results


class NTMHeadBase(nn.Module):
    \"\"\"An NTM Read/Write Head.\"\"\"

    def __init__(self, memory, controller_size):
        \"\"\"Initilize the read/write head. (docstring shortened)\"\"\"
        super(NTMHeadBase, self).__init__()

        self.memory = memory
        self.N, self.M = memory.size()
        self.controller_size = controller_size

    def create_new_state(self, batch_size):
        raise NotImplementedError

    def register_parameters(self):
        raise NotImplementedError

    def is_read_head(self):
        return NotImplementedError

    def _address_memory(self, k, β, g, s, γ, w_prev):
        # Handle Activations
        k = k.clone()
        β = F.softplus(β)
        g = F.sigmoid(g)
        s = F.softmax(s, dim=1)
        γ = 1 + F.softplus(γ)

        w = self.memory.address(k, β, g, s, γ, w_prev)

        return w


class NTMReadHead(NTMHeadBase):
    def __init__(self, memory, controller_size):
        super(NTMReadHead, self).__init__(memory, controller_size)

        # Corresponding to k, β, g, s, γ sizes from the paper
        self.read_lengths = [self.M, 1, 1, 3, 1]
        self.fc_read = nn.Linear(controller_size, sum(self.read_lengths))
        self.reset_parameters()

    def create_new_state(self, batch_size):
        # The state holds the previous time step address weightings
        return torch.zeros(batch_size, self.N)

    def reset_parameters(self):
        # Initialize the linear layers
        nn.init.xavier_uniform_(self.fc_read.weight, gain=1.4)
        nn.init.normal_(self.fc_read.bias, std=0.01)

    def is_read_head(self):
        return True

    def forward(self, embeddings, w_prev):
        \"\"\"NTMReadHead forward function. (docstring shortened)\"\"\"
        o = self.fc_read(embeddings)
        k, β, g, s, γ = _split_cols(o, self.read_lengths)

        # Read from memory
        w = self._address_memory(k, β, g, s, γ, w_prev)
        r = self.memory.read(w)

        return r, w


class NTMWriteHead(NTMHeadBase):
    def __init__(self, memory, controller_size):
        super(NTMWriteHead, self).__init__(memory, controller_size)

        # Corresponding to k, β, g, s, γ, e, a sizes from the paper
        self.write_lengths = [self.M, 1, 1, 3, 1, self.M, self.M]
        self.fc_write = nn.Linear(controller_size, sum(self.write_lengths))
        self.reset_parameters()

    def create_new_state(self, batch_size):
        return torch.zeros(batch_size, self.N)

    def reset_parameters(self):
        # Initialize the linear layers
        nn.init.xavier_uniform_(self.fc_write.weight, gain=1.4)
        nn.init.normal_(self.fc_write.bias, std=0.01)

    def is_read_head(self):
        return False

    def forward(self, embeddings, w_prev):
        \"\"\"NTMWriteHead forward function. (docstring shortened)\"\"\"
        o = self.fc_write(embeddings)
        k, β, g, s, γ, e, a = _split_cols(o, self.write_lengths)

        # Handle activations
        e = F.sigmoid(e)

        # Write to memory
        w = self._address_memory(k, β, g, s, γ, w_prev)
        self.memory.write(w, e, a)

        return w


# -- ntm/controller.py --
class LSTMController(nn.Module):
    \"\"\"An NTM controller based on LSTM.\"\"\"
    def __init__(self, num_inputs, num_outputs, num_layers):
        super(LSTMController, self).__init__()

        self.num_inputs = num_inputs
        self.num_outputs = num_outputs
        self.num_layers = num_layers

        self.lstm = nn.LSTM(input_size=num_inputs,
                            hidden_size=num_outputs,
                            num_layers=num_layers)

        # The hidden state is a learned parameter
        self.lstm_h_bias = Parameter(torch.randn(self.num_layers, 1, self.num_outputs) * 0.05)
        self.lstm_c_bias = Parameter(torch.randn(self.num_layers, 1, self.num_outputs) * 0.05)

        self.reset_parameters()

    def create_new_state(self, batch_size):
        # Dimension: (num_layers * num_directions, batch, hidden_size)
        lstm_h = self.lstm_h_bias.clone().repeat(1, batch_size, 1)
        lstm_c = self.lstm_c_bias.clone().repeat(1, batch_size, 1)
        return lstm_h, lstm_c

    def reset_parameters(self):
        for p in self.lstm.parameters():
            if p.dim() == 1:
                nn.init.constant_(p, 0)
            else:
                stdev = 5 / (np.sqrt(self.num_inputs +  self.num_outputs))
                nn.init.uniform_(p, -stdev, stdev)

    def size(self):
        return self.num_inputs, self.num_outputs

    def forward(self, x, prev_state):
        x = x.unsqueeze(0)
        outp, state = self.lstm(x, prev_state)
        return outp.squeeze(0), state


# -- ntm/ntm.py --
class NTM(nn.Module):
    \"\"\"A Neural Turing Machine.\"\"\"
    def __init__(self, num_inputs, num_outputs, controller, memory, heads):
        \"\"\"Initialize the NTM. (docstring shortened)\"\"\"
        super(NTM, self).__init__()

        # Save arguments
        self.num_inputs = num_inputs
        self.num_outputs = num_outputs
        self.controller = controller
        self.memory = memory
        self.heads = heads

        self.N, self.M = memory.size()
        _, self.controller_size = controller.size()

        # Initialize the initial previous read values to random biases
        self.num_read_heads = 0
        self.init_r = []
        for head in heads:
            if head.is_read_head():
                init_r_bias = torch.randn(1, self.M) * 0.01
                self.register_buffer("read{}_bias".format(self.num_read_heads), init_r_bias.data)
                self.init_r += [init_r_bias]
                self.num_read_heads += 1

        assert self.num_read_heads > 0, "heads list must contain at least a single read head"

        # Initialize a fully connected layer to produce the actual output:
        #   [controller_output; previous_reads ] -> output
        self.fc = nn.Linear(self.controller_size + self.num_read_heads * self.M, num_outputs)
        self.reset_parameters()

    def create_new_state(self, batch_size):
        init_r = [r.clone().repeat(batch_size, 1) for r in self.init_r]
        controller_state = self.controller.create_new_state(batch_size)
        heads_state = [head.create_new_state(batch_size) for head in self.heads]

        return init_r, controller_state, heads_state

    def reset_parameters(self):
        # Initialize the linear layer
        nn.init.xavier_uniform_(self.fc.weight, gain=1)
        nn.init.normal_(self.fc.bias, std=0.01)

    def forward(self, x, prev_state):
        \"\"\"NTM forward function. (docstring shortened)\"\"\"
        # Unpack the previous state
        prev_reads, prev_controller_state, prev_heads_states = prev_state

        # Use the controller to get an embeddings
        inp = torch.cat([x] + prev_reads, dim=1)
        controller_outp, controller_state = self.controller(inp, prev_controller_state)

        # Read/Write from the list of heads
        reads = []
        heads_states = []
        for head, prev_head_state in zip(self.heads, prev_heads_states):
            if head.is_read_head():
                r, head_state = head(controller_outp, prev_head_state)
                reads += [r]
            else:
                head_state = head(controller_outp, prev_head_state)
            heads_states += [head_state]

        # Generate Output
        inp2 = torch.cat([controller_outp] + reads, dim=1)
        o = F.sigmoid(self.fc(inp2))

        # Pack the current state
        state = (reads, controller_state, heads_states)

        return o, state


# -- ntm/aio.py --
class EncapsulatedNTM(nn.Module):

    def __init__(self, num_inputs, num_outputs,
                 controller_size, controller_layers, num_heads, N, M):
        \"\"\"Initialize an EncapsulatedNTM. (docstring shortened)\"\"\"
        super(EncapsulatedNTM, self).__init__()

        # Save args
        self.num_inputs = num_inputs
        self.num_outputs = num_outputs
        self.controller_size = controller_size
        self.controller_layers = controller_layers
        self.num_heads = num_heads
        self.N = N
        self.M = M

        # Create the NTM components
        memory = NTMMemory(N, M)
        controller = LSTMController(num_inputs + M*num_heads, controller_size, controller_layers)
        heads = nn.ModuleList([])
        for i in range(num_heads):
            heads += [
                NTMReadHead(memory, controller_size),
                NTMWriteHead(memory, controller_size)
            ]

        self.ntm = NTM(num_inputs, num_outputs, controller, memory, heads)
        self.memory = memory

    def init_sequence(self, batch_size):
        \"\"\"Initializing the state.\"\"\"
        self.batch_size = batch_size
        self.memory.reset(batch_size)
        self.previous_state = self.ntm.create_new_state(batch_size)

    def forward(self, x=None):
        if x is None:
            x = torch.zeros(self.batch_size, self.num_inputs)

        o, self.previous_state = self.ntm(x, self.previous_state)
        return o, self.previous_state

    def calculate_num_params(self):
        \"\"\"Returns the total number of parameters.\"\"\"
        num_params = 0
        for p in self.parameters():
            num_params += p.data.view(-1).size(0)
        return num_params


# -- tasks/copytask.py --
def dataloader(num_batches,
               batch_size,
               seq_width,
               min_len,
               max_len):
    \"\"\"Generator of random sequences for the copy task. (docstring shortened)\"\"\"
    for batch_num in range(num_batches):

        # All batches have the same sequence length
        seq_len = random.randint(min_len, max_len)
        seq = np.random.binomial(1, 0.5, (seq_len, batch_size, seq_width))
        seq = torch.from_numpy(seq)

        # The input includes an additional channel used for the delimiter
        inp = torch.zeros(seq_len + 1, batch_size, seq_width + 1)
        inp[:seq_len, :, :seq_width] = seq
        inp[seq_len, :, seq_width] = 1.0 # delimiter in our control channel
        outp = seq.clone()

        yield batch_num+1, inp.float(), outp.float()


# -- train.py --
def clip_grads(net):
    \"\"\"Gradient clipping to the range [10, 10].\"\"\"
    parameters = list(filter(lambda p: p.grad is not None, net.parameters()))
    for p in parameters:
        p.grad.data.clamp_(-10, 10)


def train_batch(net, criterion, optimizer, X, Y):
    \"\"\"Trains a single batch.\"\"\"
    optimizer.zero_grad()
    inp_seq_len = X.size(0)
    outp_seq_len, batch_size, _ = Y.size()

    # New sequence
    net.init_sequence(batch_size)

    # Feed the sequence + delimiter
    for i in range(inp_seq_len):
        net(X[i])

    # Read the output (no input given)
    y_out = torch.zeros(Y.size())
    for i in range(outp_seq_len):
        y_out[i], _ = net()

    loss = criterion(y_out, Y)
    loss.backward()
    clip_grads(net)
    optimizer.step()

    y_out_binarized = y_out.clone().data
    y_out_binarized.apply_(lambda x: 0 if x < 0.5 else 1)

    # The cost is the number of error bits per sequence
    cost = torch.sum(torch.abs(y_out_binarized - Y.data))

    return loss.item(), cost.item() / batch_size


# the objects copytask.py's CopyTaskModelTraining(params=CopyTaskParams(...)) builds
random.seed(1000)
np.random.seed(1000)
net = EncapsulatedNTM(4 + 1, 4, 16, 1, 1, 8, 5)
initialize(net)
criterion = nn.BCELoss()
optimizer = optim.RMSprop(net.parameters(), momentum=0.9, alpha=0.95, lr=3e-3)
record.append(net.calculate_num_params())
for batch_num, x, y in dataloader(4, 2, 4, 1, 3):
    loss, cost = train_batch(net, criterion, optimizer, x, y)
    print("Batch %d Loss: %.6f Cost: %.2f" % (batch_num, loss, cost))
    record.append([loss, cost])
    record.append(params_of(net))
record.append(net.ntm.init_r[0].numpy())
"""

NTM_STEPS = [
    (
        "from torch import nn\nfrom torch import optim\nimport torch.nn.functional as F",
        "from retrograd import nn\nfrom retrograd import optim\nimport retrograd.nn.functional as F",
    ),
    (
        "    loss.backward()\n    clip_grads(net)\n    optimizer.step()",
        "    grads = loss.backward()\n    clip_grads(net, grads)\n    optimizer.step(grads)",
    ),
    ("def clip_grads(net):", "def clip_grads(net, grads):"),
    ("lambda p: p.grad is not None", "lambda p: p.grad(grads) is not None"),
    ("        p.grad.data.clamp_(-10, 10)", "        p.grad(grads).data.clamp_(-10, 10)"),
]


def test_neural_turing_machine_trains_as_torch(capsys):
    records, logs = _runs(
        NTM_SOURCE,
        NTM_STEPS,
        capsys,
        seed=55,
        initialize=_initializer(),
        params_of=params_of,
    )
    ours, theirs = records[1], records[0]
    assert logs[0].count("Loss:") == 4
    assert_records_agree(ours, theirs, rtol=2e-5, atol=2e-6)
