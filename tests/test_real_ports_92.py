# ruff: noqa: E501, W291, W293  (the programs are kept as their authors wrote them: long lines, trailing blanks)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
meta-learning, implicit layers and sparse mixtures of experts, each trained a few steps against
torch's run of the same code from the same weights and draws.

- Reptile on sine regression as openai's ``reptile-sinewaves-demo.py`` (the blog post's
  script) writes it: ``ag.Variable(torch.Tensor(x))``, ``model.zero_grad()``, the inner SGD
  as ``param.data -= innerstepsize * param.grad.data``, the outer step as
  ``model.load_state_dict({name: weights_before[name] + (weights_after[name] -
  weights_before[name]) * outerstepsize ...})`` of a ``deepcopy(model.state_dict())``, the
  evaluation's snapshot restored the same way; matplotlib's calls are no-ops. And a PyTorch port
  of openai/supervised-reptile's ``Reptile``: the inner loop on ``copy.deepcopy(self.model)``
  (SGD) or on a new model given ``load_state_dict(self.model.state_dict())`` (Adam with
  ``betas=(0.0, 0.999)``), the outer update by torch's deprecated ``p.data.add_(eps,
  p_inner.data - p.data)`` and by the average of the clones' weights.
- a deep equilibrium layer as the locuslab/deq tutorial (chapter 4) writes it:
  ``ResNetLayer`` of ``GroupNorm``s, ``forward_iteration`` and ``anderson`` (Anderson
  acceleration: slice assignments ``X[:,0], F[:,0] = ...``, ``H[:,0,1:] = H[:,1:,0] = 1``,
  ``torch.linalg.solve`` of the bordered system), ``DEQFixedPoint`` solving the fixed point
  under ``torch.no_grad()``, re-engaging the tape by ``z = self.f(z, x)``, and the implicit
  backward in ``z.register_hook(backward_hook)``: a fixed-point solve of the adjoint by
  ``autograd.grad(f0, z0, y, retain_graph=True)`` from inside the running backward. That
  inner ``autograd.grad`` reaches the input ``x``'s graph, which the outer backward (not
  retaining it) had claimed: it failed on a ``KeyError`` of the checkpointer, reported as an
  ``UnboundLocalError`` of the backward's cleanup.
- Mixtral's sparse mixture of experts as Hugging Face transformers writes it
  (``modeling_mixtral.py``: ``MixtralSparseMoeBlock`` with ``F.softmax(router_logits, dim=1,
  dtype=torch.float)``, ``torch.topk``, ``routing_weights /= ...sum(dim=-1, keepdim=True)``,
  ``torch.nn.functional.one_hot(selected_experts, num_classes=...).permute(2, 1, 0)``,
  ``torch.where(expert_mask[expert_idx])``, ``hidden_states[None, top_x]`` and
  ``final_hidden_states.index_add_(0, top_x, ...)``; ``MixtralBlockSparseTop2MLP``,
  ``MixtralRMSNorm`` and ``load_balancing_loss_func`` with and without the attention mask),
  in a small causal LM whose loss adds ``router_aux_loss_coef * aux_loss``, trained by AdamW.

The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``,
``optimizer.step(grads)``; in the blog script, ``param.grad(grads).data``).
"""

from __future__ import annotations

import random
import sys
import types

import numpy as np
import pytest
import torch

import backends
import retrograd as rg
from real_ports import assert_records_agree, initializer, params_of, runs_with_draws


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


# -- Reptile ----------------------------------------------------------------------------------------
REPTILE_SOURCE = """
import numpy as np
import torch
from torch import nn, autograd as ag
import matplotlib.pyplot as plt
from copy import deepcopy

seed = 0
plot = True
innerstepsize = 0.02 # stepsize in inner SGD
innerepochs = 1 # number of epochs of each inner SGD
outerstepsize0 = 0.1 # stepsize of outer optimization, i.e., meta-optimization
niterations = 2 # number of outer updates; each iteration we sample one task and update on it

rng = np.random.RandomState(seed)
torch.manual_seed(seed)

# Define task distribution
x_all = np.linspace(-5, 5, 50)[:,None] # All of the x points
ntrain = 10 # Size of training minibatches
def gen_task():
    "Generate classification problem"
    phase = rng.uniform(low=0, high=2*np.pi)
    ampl = rng.uniform(0.1, 5)
    f_randomsine = lambda x : np.sin(x + phase) * ampl
    return f_randomsine

# Define model. Reptile paper uses ReLU, but Tanh gives slightly better results
model = nn.Sequential(
    nn.Linear(1, 64),
    nn.Tanh(),
    nn.Linear(64, 64),
    nn.Tanh(),
    nn.Linear(64, 1),
)
initialize(model)

def totorch(x):
    return ag.Variable(torch.Tensor(x))

def train_on_batch(x, y):
    x = totorch(x)
    y = totorch(y)
    model.zero_grad()
    ypred = model(x)
    loss = (ypred - y).pow(2).mean()
    loss.backward()
    for param in model.parameters():
        param.data -= innerstepsize * param.grad.data

def predict(x):
    x = totorch(x)
    return model(x).data.numpy()

# Choose a fixed task and minibatch for visualization
f_plot = gen_task()
xtrain_plot = x_all[rng.choice(len(x_all), size=ntrain)]

# Reptile training loop
for iteration in range(niterations):
    weights_before = deepcopy(model.state_dict())
    # Generate task
    f = gen_task()
    y_all = f(x_all)
    # Do SGD on this task
    inds = rng.permutation(len(x_all))
    for _ in range(innerepochs):
        for start in range(0, len(x_all), ntrain):
            mbinds = inds[start:start+ntrain]
            train_on_batch(x_all[mbinds], y_all[mbinds])
    # Interpolate between current weights and trained weights from this task
    # I.e. (weights_before - weights_after) is the meta-gradient
    weights_after = model.state_dict()
    outerstepsize = outerstepsize0 * (1 - iteration / niterations) # linear schedule
    model.load_state_dict({name : 
        weights_before[name] + (weights_after[name] - weights_before[name]) * outerstepsize 
        for name in weights_before})

    # Periodically plot the results on a particular task and minibatch
    if plot and iteration==0 or (iteration+1) % 1 == 0:
        plt.cla()
        f = f_plot
        weights_before = deepcopy(model.state_dict()) # save snapshot before evaluation
        plt.plot(x_all, predict(x_all), label="pred after 0", color=(0,0,1))
        for inneriter in range(2):
            train_on_batch(xtrain_plot, f(xtrain_plot))
            if (inneriter+1) % 1 == 0:
                frac = (inneriter+1) / 2
                plt.plot(x_all, predict(x_all), label="pred after %i"%(inneriter+1), color=(frac, 0, 1-frac))
        plt.plot(x_all, f(x_all), label="true", color=(0,1,0))
        lossval = np.square(predict(x_all) - f(x_all)).mean()
        plt.plot(xtrain_plot, f(xtrain_plot), "x", label="train", color="k")
        plt.ylim(-4,4)
        plt.legend(loc="lower right")
        plt.pause(0.01)
        model.load_state_dict(weights_before) # restore from snapshot
        print(f"-----------------------------")
        print(f"iteration               {iteration+1}")
        print(f"loss on plotted curve   {lossval:.3f}") # would be better to average loss over a set of examples, but this is optimized for brevity
        record.append(lossval)
        record.append(params_of(model))
"""

REPTILE_STEPS = [
    (
        "\nimport torch\nfrom torch import nn, autograd as ag\n",
        "\nimport retrograd as torch\nfrom retrograd import nn, autograd as ag\n",
    ),
    (
        "    loss.backward()\n    for param in model.parameters():\n        param.data -= innerstepsize * param.grad.data\n",
        "    grads = loss.backward()\n    for param in model.parameters():\n        param.data -= innerstepsize * param.grad(grads).data\n",
    ),
]

CLONE_SOURCE = """
import copy
import torch
import torch.nn as nn
import torch.optim as optim


# -- a PyTorch port of supervised-reptile's Reptile class on sine regression: the inner loop on a
#    clone of the meta-model, the outer step interpolating the parameters in place --
class SineModel(nn.Module):
    def __init__(self):
        super(SineModel, self).__init__()
        self.hidden1 = nn.Linear(1, 40)
        self.hidden2 = nn.Linear(40, 40)
        self.out = nn.Linear(40, 1)

    def forward(self, x):
        x = torch.relu(self.hidden1(x))
        x = torch.relu(self.hidden2(x))
        return self.out(x)


class Reptile:
    def __init__(self, model, inner_lr=0.02, inner_steps=3, meta_step_size=0.1, meta_batch_size=2):
        self.model = model
        self.inner_lr = inner_lr
        self.inner_steps = inner_steps
        self.meta_step_size = meta_step_size
        self.meta_batch_size = meta_batch_size

    def inner_train(self, task):
        x, y = task
        clone = copy.deepcopy(self.model)
        inner_optimizer = optim.SGD(clone.parameters(), lr=self.inner_lr)
        for _ in range(self.inner_steps):
            loss = nn.functional.mse_loss(clone(x), y)
            inner_optimizer.zero_grad()
            loss.backward()
            inner_optimizer.step()
        return clone, loss.item()

    def meta_step(self, tasks, frac_done):
        cur_meta_step_size = frac_done * self.meta_step_size + (1 - frac_done) * self.meta_step_size * 0.1
        new_weights = [torch.zeros_like(p) for p in self.model.parameters()]
        losses = []
        for task in tasks:
            clone, loss = self.inner_train(task)
            losses.append(loss)
            for w, p_inner in zip(new_weights, clone.parameters()):
                w.add_(p_inner.data)
        for p, w in zip(self.model.parameters(), new_weights):
            p.data.add_(cur_meta_step_size, w / len(tasks) - p.data)
        return sum(losses) / len(losses)

    def serial_meta_step(self, tasks, frac_done):
        cur_meta_step_size = frac_done * self.meta_step_size + (1 - frac_done) * self.meta_step_size * 0.1
        losses = []
        for task in tasks:
            clone = SineModel()
            clone.load_state_dict(self.model.state_dict())
            inner_optimizer = optim.Adam(clone.parameters(), lr=self.inner_lr, betas=(0.0, 0.999))
            for _ in range(self.inner_steps):
                loss = nn.functional.mse_loss(clone(task[0]), task[1])
                inner_optimizer.zero_grad()
                loss.backward()
                inner_optimizer.step()
            losses.append(loss.item())
            for p, p_inner in zip(self.model.parameters(), clone.parameters()):
                p.data.add_(cur_meta_step_size, p_inner.data - p.data)
        return sum(losses) / len(losses)


model = SineModel()
initialize(model)
reptile = Reptile(model)
for step, batch in enumerate(meta_batches):
    tasks = [(torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.float32)) for x, y in batch]
    frac_done = step / len(meta_batches)
    meta_step = reptile.serial_meta_step if step % 2 else reptile.meta_step
    record.append(meta_step(tasks, frac_done))
    record.append(params_of(model))
"""

CLONE_STEPS = [
    (
        "\nimport torch\nimport torch.nn as nn\nimport torch.optim as optim\n",
        "\nimport retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.optim as optim\n",
    ),
    (
        "            loss.backward()\n            inner_optimizer.step()\n",
        "            grads = loss.backward()\n            inner_optimizer.step(grads)\n",
    ),
    (
        "                loss.backward()\n                inner_optimizer.step()\n",
        "                grads = loss.backward()\n                inner_optimizer.step(grads)\n",
    ),
]


class _NoPlots(types.ModuleType):
    """``matplotlib.pyplot`` whose every call does nothing."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


@pytest.fixture
def _no_plots(monkeypatch):
    pyplot = _NoPlots("matplotlib.pyplot")
    matplotlib = types.ModuleType("matplotlib")
    matplotlib.pyplot = pyplot
    monkeypatch.setitem(sys.modules, "matplotlib", matplotlib)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", pyplot)


def test_reptile_sine_demo_trains_as_torch(capsys, _no_plots):
    (theirs, ours), logs = runs_with_draws(
        REPTILE_SOURCE, REPTILE_STEPS, capsys, 9201, initialize=initializer(), params_of=params_of
    )
    assert len(theirs) == 4
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
    assert logs[1] == logs[0]


def test_reptile_on_cloned_models_trains_as_torch(capsys):
    rng = np.random.default_rng(9202)
    meta_batches = []
    for _ in range(2):
        batch = []
        for _ in range(2):
            x = rng.uniform(-5, 5, (10, 1))
            batch.append((x, rng.uniform(0.1, 5) * np.sin(x + rng.uniform(0, np.pi))))
        meta_batches.append(batch)
    (theirs, ours), _ = runs_with_draws(
        CLONE_SOURCE, CLONE_STEPS, capsys, 9202, meta_batches=meta_batches,
        initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert len(theirs) == 4
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


# -- deq tutorial -----------------------------------------------------------------------------------
DEQ_SOURCE = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.autograd as autograd
import torch.optim as optim


class ResNetLayer(nn.Module):
    def __init__(self, n_channels, n_inner_channels, kernel_size=3, num_groups=8):
        super().__init__()
        self.conv1 = nn.Conv2d(n_channels, n_inner_channels, kernel_size, padding=kernel_size//2, bias=False)
        self.conv2 = nn.Conv2d(n_inner_channels, n_channels, kernel_size, padding=kernel_size//2, bias=False)
        self.norm1 = nn.GroupNorm(num_groups, n_inner_channels)
        self.norm2 = nn.GroupNorm(num_groups, n_channels)
        self.norm3 = nn.GroupNorm(num_groups, n_channels)
        self.conv1.weight.data.normal_(0, 0.01)
        self.conv2.weight.data.normal_(0, 0.01)
        
    def forward(self, z, x):
        y = self.norm1(F.relu(self.conv1(z)))
        return self.norm3(F.relu(z + self.norm2(x + self.conv2(y))))


def forward_iteration(f, x0, max_iter=50, tol=1e-2):
    f0 = f(x0)
    res = []
    for k in range(max_iter):
        x = f0
        f0 = f(x)
        res.append((f0 - x).norm().item() / (1e-5 + f0.norm().item()))
        if (res[-1] < tol):
            break
    return f0, res


def anderson(f, x0, m=5, lam=1e-4, max_iter=50, tol=1e-2, beta = 1.0):
    """ Anderson acceleration for fixed point iteration. """
    bsz, d, H, W = x0.shape
    X = torch.zeros(bsz, m, d*H*W, dtype=x0.dtype, device=x0.device)
    F = torch.zeros(bsz, m, d*H*W, dtype=x0.dtype, device=x0.device)
    X[:,0], F[:,0] = x0.view(bsz, -1), f(x0).view(bsz, -1)
    X[:,1], F[:,1] = F[:,0], f(F[:,0].view_as(x0)).view(bsz, -1)
    
    H = torch.zeros(bsz, m+1, m+1, dtype=x0.dtype, device=x0.device)
    H[:,0,1:] = H[:,1:,0] = 1
    y = torch.zeros(bsz, m+1, 1, dtype=x0.dtype, device=x0.device)
    y[:,0] = 1
    
    res = []
    for k in range(2, max_iter):
        n = min(k, m)
        G = F[:,:n]-X[:,:n]
        H[:,1:n+1,1:n+1] = torch.bmm(G,G.transpose(1,2)) + lam*torch.eye(n, dtype=x0.dtype,device=x0.device)[None]
        alpha = torch.linalg.solve(H[:,:n+1,:n+1], y[:,:n+1])[:, 1:n+1, 0]   # (bsz x n)
        
        X[:,k%m] = beta * (alpha[:,None] @ F[:,:n])[:,0] + (1-beta)*(alpha[:,None] @ X[:,:n])[:,0]
        F[:,k%m] = f(X[:,k%m].view_as(x0)).view(bsz, -1)
        res.append((F[:,k%m] - X[:,k%m]).norm().item()/(1e-5 + F[:,k%m].norm().item()))
        if (res[-1] < tol):
            break
    return X[:,k%m].view_as(x0), res


class DEQFixedPoint(nn.Module):
    def __init__(self, f, solver, **kwargs):
        super().__init__()
        self.f = f
        self.solver = solver
        self.kwargs = kwargs
        
    def forward(self, x):
        # compute forward pass and re-engage autograd tape
        with torch.no_grad():
            z, self.forward_res = self.solver(lambda z : self.f(z, x), torch.zeros_like(x), **self.kwargs)
        z = self.f(z,x)
        
        # set up Jacobian vector product (without additional forward calls)
        z0 = z.clone().detach().requires_grad_()
        f0 = self.f(z0,x)
        def backward_hook(grad):
            g, self.backward_res = self.solver(lambda y : autograd.grad(f0, z0, y, retain_graph=True)[0] + grad,
                                               grad, **self.kwargs)
            return g
                
        z.register_hook(backward_hook)
        return z


torch.manual_seed(0)
chan = 8
solver = anderson if solver_name == "anderson" else forward_iteration
f = ResNetLayer(chan, 16, kernel_size=3, num_groups=4)
model = nn.Sequential(nn.Conv2d(1,chan, kernel_size=3, bias=True, padding=1),
                      nn.BatchNorm2d(chan),
                      DEQFixedPoint(f, solver, tol=1e-2, max_iter=25, m=5) if solver is anderson else DEQFixedPoint(f, solver, tol=1e-2, max_iter=25),
                      nn.BatchNorm2d(chan),
                      nn.AvgPool2d(4,4),
                      nn.Flatten(),
                      nn.Linear(chan*2*2,10))
initialize(model)
opt = optim.Adam(model.parameters(), lr=1e-3)
model.train()
for X, y in batches:
    X, y = torch.tensor(X, dtype=torch.float32), torch.tensor(y)
    yp = model(X)
    loss = nn.CrossEntropyLoss()(yp, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    record.append(loss.item())
    record.append(len(model[2].forward_res))
    record.append(len(model[2].backward_res))
    record.append(params_of(model))
'''

DEQ_STEPS = [
    (
        "\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nimport torch.autograd as autograd\nimport torch.optim as optim\n",
        "\nimport retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nimport retrograd.autograd as autograd\nimport retrograd.optim as optim\n",
    ),
    ("    loss.backward()\n    opt.step()\n", "    grads = loss.backward()\n    opt.step(grads)\n"),
]


@pytest.mark.parametrize("solver_name", ["anderson", "forward_iteration"])
def test_deq_with_implicit_backward_hook_trains_as_torch(capsys, solver_name):
    rng = np.random.default_rng(9203)
    batches = [(rng.standard_normal((2, 1, 8, 8)), rng.integers(0, 10, 2)) for _ in range(2)]
    if backends.CHECKPOINTING.startswith("budget"):
        # A known limit (docs/checkpointing.md, "Known limits"): the implicit backward's
        # autograd.grad, called from a hook of the consuming backward, reads values the budget
        # evicted, whose nodes that backward is consuming; refused by name
        with pytest.raises(rg.AutodiffError, match="being consumed by a backward"):
            runs_with_draws(
                DEQ_SOURCE, DEQ_STEPS, capsys, 9203, batches=batches, solver_name=solver_name,
                initialize=initializer(), params_of=params_of,
            )  # fmt: skip
        return
    (theirs, ours), _ = runs_with_draws(
        DEQ_SOURCE, DEQ_STEPS, capsys, 9203, batches=batches, solver_name=solver_name,
        initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert len(theirs) == 8
    # (the first convolution's bias feeds a BatchNorm: its true gradient is zero, and Adam's
    # first steps follow the rounding noise)
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5, skip=("0.0.bias",))


# -- Mixtral ----------------------------------------------------------------------------------------
MOE_SOURCE = '''
from typing import Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import nn

ACT2FN = {"silu": nn.SiLU()}


# -- transformers/models/mixtral/modeling_mixtral.py --
def load_balancing_loss_func(
    gate_logits: Union[torch.Tensor, Tuple[torch.Tensor], None],
    num_experts: Optional[int] = None,
    top_k=2,
    attention_mask: Optional[torch.Tensor] = None,
) -> Union[torch.Tensor, int]:
    r"""
    Computes auxiliary load balancing loss as in Switch Transformer - implemented in Pytorch.

    See Switch Transformer (https://arxiv.org/abs/2101.03961) for more details. This function implements the loss
    function presented in equations (4) - (6) of the paper. It aims at penalizing cases where the routing between
    experts is too unbalanced.
    """
    if gate_logits is None or not isinstance(gate_logits, tuple):
        return 0

    if isinstance(gate_logits, tuple):
        compute_device = gate_logits[0].device
        concatenated_gate_logits = torch.cat([layer_gate.to(compute_device) for layer_gate in gate_logits], dim=0)

    routing_weights = torch.nn.functional.softmax(concatenated_gate_logits, dim=-1)

    _, selected_experts = torch.topk(routing_weights, top_k, dim=-1)

    expert_mask = torch.nn.functional.one_hot(selected_experts, num_experts)

    if attention_mask is None:
        # Compute the percentage of tokens routed to each experts
        tokens_per_expert = torch.mean(expert_mask.float(), dim=0)

        # Compute the average probability of routing to these experts
        router_prob_per_expert = torch.mean(routing_weights, dim=0)
    else:
        batch_size, sequence_length = attention_mask.shape
        num_hidden_layers = concatenated_gate_logits.shape[0] // (batch_size * sequence_length)

        # Compute the mask that masks all padding tokens as 0 with the same shape of expert_mask
        expert_attention_mask = (
            attention_mask[None, :, :, None, None]
            .expand((num_hidden_layers, batch_size, sequence_length, top_k, num_experts))
            .reshape(-1, top_k, num_experts)
            .to(compute_device)
        )

        # Compute the percentage of tokens routed to each experts
        tokens_per_expert = torch.sum(expert_mask.float() * expert_attention_mask, dim=0) / torch.sum(
            expert_attention_mask, dim=0
        )

        # Compute the mask that masks all padding tokens as 0 with the same shape of tokens_per_expert
        router_per_expert_attention_mask = (
            attention_mask[None, :, :, None]
            .expand((num_hidden_layers, batch_size, sequence_length, num_experts))
            .reshape(-1, num_experts)
            .to(compute_device)
        )

        # Compute the average probability of routing to these experts
        router_prob_per_expert = torch.sum(routing_weights * router_per_expert_attention_mask, dim=0) / torch.sum(
            router_per_expert_attention_mask, dim=0
        )

    overall_loss = torch.sum(tokens_per_expert * router_prob_per_expert.unsqueeze(0))
    return overall_loss * num_experts


class MixtralRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        """
        MixtralRMSNorm is equivalent to T5LayerNorm
        """
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class MixtralBlockSparseTop2MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ffn_dim = config.intermediate_size
        self.hidden_dim = config.hidden_size

        self.w1 = nn.Linear(self.hidden_dim, self.ffn_dim, bias=False)
        self.w2 = nn.Linear(self.ffn_dim, self.hidden_dim, bias=False)
        self.w3 = nn.Linear(self.hidden_dim, self.ffn_dim, bias=False)

        self.act_fn = ACT2FN[config.hidden_act]

    def forward(self, hidden_states):
        current_hidden_states = self.act_fn(self.w1(hidden_states)) * self.w3(hidden_states)
        current_hidden_states = self.w2(current_hidden_states)
        return current_hidden_states


class MixtralSparseMoeBlock(nn.Module):
    """
    This implementation is
    strictly equivalent to standard MoE with full capacity (no
    dropped tokens). It's faster since it formulates MoE operations
    in terms of block-sparse operations to accommodate imbalanced
    assignments of tokens to experts, whereas standard MoE either
    (1) drop tokens at the cost of reduced performance or (2) set
    capacity factor to number of experts and thus waste computation
    and memory on padding.
    """

    def __init__(self, config):
        super().__init__()
        self.hidden_dim = config.hidden_size
        self.ffn_dim = config.intermediate_size
        self.num_experts = config.num_local_experts
        self.top_k = config.num_experts_per_tok

        # gating
        self.gate = nn.Linear(self.hidden_dim, self.num_experts, bias=False)

        self.experts = nn.ModuleList([MixtralBlockSparseTop2MLP(config) for _ in range(self.num_experts)])

        # Jitter parameters
        self.jitter_noise = config.router_jitter_noise

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """ """
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        if self.training and self.jitter_noise > 0:
            hidden_states *= torch.empty_like(hidden_states).uniform_(1.0 - self.jitter_noise, 1.0 + self.jitter_noise)
        hidden_states = hidden_states.view(-1, hidden_dim)
        # router_logits: (batch * sequence_length, n_experts)
        router_logits = self.gate(hidden_states)

        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
        routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        # we cast back to the input dtype
        routing_weights = routing_weights.to(hidden_states.dtype)

        final_hidden_states = torch.zeros(
            (batch_size * sequence_length, hidden_dim), dtype=hidden_states.dtype, device=hidden_states.device
        )

        # One hot encode the selected experts to create an expert mask
        # this will be used to easily index which expert is going to be sollicitated
        expert_mask = torch.nn.functional.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)

        # Loop over all available experts in the model and perform the computation on each expert
        for expert_idx in range(self.num_experts):
            expert_layer = self.experts[expert_idx]
            idx, top_x = torch.where(expert_mask[expert_idx])

            # Index the correct hidden states and compute the expert hidden state for
            # the current expert. We need to make sure to multiply the output hidden
            # states by `routing_weights` on the corresponding tokens (top-1 and top-2)
            current_state = hidden_states[None, top_x].reshape(-1, hidden_dim)
            current_hidden_states = expert_layer(current_state) * routing_weights[top_x, idx, None]

            # However `index_add_` only support torch tensors for indexing so we'll use
            # the `top_x` tensor here.
            final_hidden_states.index_add_(0, top_x, current_hidden_states.to(hidden_states.dtype))
        final_hidden_states = final_hidden_states.reshape(batch_size, sequence_length, hidden_dim)
        return final_hidden_states, router_logits


# -- a small causal LM of these blocks (attention left out), trained as MixtralForCausalLM's forward does --
class TinyMixtral(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([MixtralSparseMoeBlock(config) for _ in range(config.num_hidden_layers)])
        self.norms = nn.ModuleList([MixtralRMSNorm(config.hidden_size) for _ in range(config.num_hidden_layers)])
        self.norm = MixtralRMSNorm(config.hidden_size)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, input_ids, attention_mask=None, labels=None):
        hidden_states = self.embed_tokens(input_ids)
        all_router_logits = ()
        for norm, layer in zip(self.norms, self.layers):
            residual = hidden_states
            hidden_states, router_logits = layer(norm(hidden_states))
            hidden_states = residual + hidden_states
            all_router_logits += (router_logits,)
        logits = self.lm_head(self.norm(hidden_states)).float()
        # Shift so that tokens < n predict n
        shift_logits = logits[..., :-1, :].contiguous()
        shift_labels = labels[..., 1:].contiguous()
        # Flatten the tokens
        loss_fct = nn.CrossEntropyLoss()
        shift_logits = shift_logits.view(-1, self.config.vocab_size)
        shift_labels = shift_labels.view(-1)
        loss = loss_fct(shift_logits, shift_labels)
        aux_loss = load_balancing_loss_func(
            all_router_logits, self.config.num_local_experts, self.config.num_experts_per_tok, attention_mask
        )
        loss += self.config.router_aux_loss_coef * aux_loss.to(loss.device)
        return loss, aux_loss


model = TinyMixtral(config)
initialize(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for input_ids, attention_mask in batches:
    input_ids = torch.tensor(input_ids)
    attention_mask = None if attention_mask is None else torch.tensor(attention_mask)
    loss, aux_loss = model(input_ids, attention_mask=attention_mask, labels=input_ids)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append([loss.item(), aux_loss.item()])
    record.append(params_of(model))
'''

MOE_STEPS = [
    (
        "\nimport torch\nimport torch.nn.functional as F\nfrom torch import nn\n",
        "\nimport retrograd as torch\nimport retrograd.nn.functional as F\nfrom retrograd import nn\n",
    ),
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
]


def test_mixtral_sparse_moe_with_load_balancing_trains_as_torch(capsys):
    config = types.SimpleNamespace(
        vocab_size=11, hidden_size=8, intermediate_size=12, num_local_experts=4,
        num_experts_per_tok=2, router_jitter_noise=0.0, hidden_act="silu", num_hidden_layers=2,
        router_aux_loss_coef=0.02,
    )  # fmt: skip
    rng = np.random.default_rng(9204)
    padded = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    batches = [(rng.integers(0, 11, (2, 5)), mask) for mask in (None, padded, None)]
    (theirs, ours), _ = runs_with_draws(
        MOE_SOURCE, MOE_STEPS, capsys, 9204, config=config, batches=batches,
        initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert len(theirs) == 6
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
