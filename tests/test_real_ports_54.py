"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- a sparsely-gated mixture of experts written here in the style of davidmrau/mixture-of-experts
  (6 experts, ``k=2``, trained with noisy top-k gating, evaluated without): ``torch.nonzero(
  gates).sort(0)`` of an int64 matrix, ``split(1, dim=1)``, ``(gates > 0).sum(0).tolist()`` part
  sizes (an expert may get no row: an empty batch through its network, which the program
  records), ``torch.split(x, sizes, dim=0)``, ``torch.gather`` of the expanded gates,
  ``zeros.index_add(0, rows, ...)`` of a ``torch.zeros(..., requires_grad=True)``, ``total[total
  == 0] = np.finfo(float).eps``, ``logits.topk(...)``, ``zeros.scatter(1, idx, gates)`` of a
  ``torch.zeros_like(logits, requires_grad=True)``, the load by ``Normal(mu, sigma).cdf(...)`` of
  buffers and ``torch.where``, ``x.float().var()``, ``.to(device)`` and ``eval()``. The data
  (``torch.rand``, ``torch.randint``) and the gating noise (``torch.randn_like``) are one seeded
  stream in both runs.
- a Neural Turing Machine on the copy task written here in the style of
  loudinthecloud/pytorch-ntm (3-bit sequences of length 1 to 2, a 12-unit LSTM controller, a 6x4
  memory, one read and one write head, batches of 2): content addressing by
  ``F.cosine_similarity(memory + 1e-16, key + 1e-16, dim=-1)``, the circular shift by
  ``torch.cat([w[-1:], w, w[:1]])`` and ``F.conv1d`` written row by row into ``torch.zeros(
  w.size())``, sharpening by ``w ** gamma`` (a tensor exponent), erase/add writes by
  ``torch.matmul(w.unsqueeze(-1), e.unsqueeze(1))``, the memory attribute replaced by a fresh
  ``torch.Tensor(b, n, m)`` and then at once by the new value, split bounds by ``np.cumsum``, a
  memory module shared by the heads (so its buffer is in the state dict three times),
  ``register_buffer(name, t.data)`` with the tensor also kept in a list, learned LSTM initial
  states by ``Parameter(...).clone().repeat(1, batch, 1)``, ``out[t], _ = net()`` into
  ``torch.zeros(Y.size())``, ``torch.from_numpy`` of int64 bits assigned into a float slice,
  ``nn.BCELoss``, ``p.grad.data.clamp_(-10, 10)``, RMSprop with momentum and ``alpha``, the error
  bits by ``out.clone().data.apply_(lambda v: ...)`` and the parameter count by
  ``p.data.view(-1).size(0)``.
- a Kolmogorov-Arnold network written here in the style of Blealtan/efficient-kan (a ``[2, 3,
  1]`` network of spline layers fitting ``u * v``, three L-BFGS steps of at most 4 iterations):
  B-spline bases by ``(x >= grid[:, :-1]) & (x < grid[:, 1:])`` and the Cox-de Boor recursion
  over slices of a ``register_buffer`` grid, coefficients by ``torch.linalg.lstsq(A,
  B).solution`` of batched systems (at construction, from ``torch.rand`` noise, so the initial
  spline weights are compared too), a ``@torch.no_grad()`` regrid (``torch.sort(x, dim=0)[0]``
  indexed by ``torch.linspace(..., dtype=torch.int64)``, ``torch.concatenate``,
  ``self.grid.copy_(g.T)``, ``self.coef.data.copy_(...)``, ``torch.bmm``), a property, the
  entropy penalty, annotations naming ``torch.Tensor``, and ``optim.LBFGS(params, lr=1)``
  stepped with a closure that draws its own batch by ``torch.rand`` and regrids every other
  step inside it (``nonlocal`` losses, ``tqdm`` with ``set_postfix``, ``print`` of a
  parameter). ``t.numpy()`` of retrograd copies (torch's shares the buffer), so the grids are
  recorded by ``.numpy().copy()``.

The lines changed: the gradient lines (``grads = loss.backward()``, ``optim.step(grads)``,
``p.grad(grads)``) and the ``import`` lines naming ``torch``.
"""

from __future__ import annotations

import io

import numpy as np

from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

# -- the mixture of experts -----------------------------------------------------------------------
MOE_SOURCE = """
from torch.distributions import Normal
from torch.optim import Adam


class Router(object):
    # sends each row to the experts its gate picked, and sums their answers back
    def __init__(self, gates):
        self.gates = gates
        picked = torch.nonzero(gates)  # (row, expert) pairs, row-major
        by_expert, order = picked.sort(0)
        _, self.expert_of = by_expert.split(1, dim=1)
        self.row_of = picked[order[:, 1], 0]
        self.counts = (gates > 0).sum(0).tolist()  # an expert may get no row at all
        self.weights = torch.gather(gates[self.row_of.flatten()], 1, self.expert_of)

    def scatter_rows(self, x):
        return torch.split(x[self.row_of].squeeze(1), self.counts, dim=0)

    def gather_rows(self, outputs):
        probs = torch.cat(outputs, 0).exp().mul(self.weights)
        total = torch.zeros(self.gates.size(0), outputs[-1].size(1), requires_grad=True)
        total = total.index_add(0, self.row_of, probs.float())
        total[total == 0] = np.finfo(float).eps  # a row no expert answered: log(eps), not -inf
        return total.log()


class Expert(nn.Module):
    def __init__(self, n_in, n_out, width):
        super(Expert, self).__init__()
        self.net = nn.Sequential(nn.Linear(n_in, width), nn.ReLU(), nn.Linear(width, n_out))

    def forward(self, x):
        return torch.log_softmax(self.net(x), dim=1)


class SparseMixture(nn.Module):
    def __init__(self, n_in, n_out, n_experts, width, k=2):
        super(SparseMixture, self).__init__()
        self.k = k
        self.experts = nn.ModuleList([Expert(n_in, n_out, width) for _ in range(n_experts)])
        self.gate = nn.Parameter(torch.zeros(n_in, n_experts))
        self.noise = nn.Parameter(torch.zeros(n_in, n_experts))
        self.register_buffer("mu", torch.tensor([0.0]))
        self.register_buffer("sigma", torch.tensor([1.0]))

    @staticmethod
    def spread(v):
        # squared coefficient of variation: small when every expert is used alike
        return v.float().var() / (v.float().mean() ** 2 + 1e-10)

    def chance_in_top_k(self, clean, noisy, scale, top):
        # how likely each clean logit stays in the top k under fresh noise
        flat = top.flatten()
        at = torch.arange(clean.size(0)) * top.size(1) + self.k
        bar_in = torch.unsqueeze(torch.gather(flat, 0, at), 1)
        bar_out = torch.unsqueeze(torch.gather(flat, 0, at - 1), 1)
        normal = Normal(self.mu, self.sigma)
        inside = torch.gt(noisy, bar_in)
        return torch.where(
            inside, normal.cdf((clean - bar_in) / scale), normal.cdf((clean - bar_out) / scale)
        )

    def forward(self, x):
        clean = x @ self.gate
        if self.training:
            scale = F.softplus(x @ self.noise) + 1e-2
            logits = clean + torch.randn_like(clean) * scale
        else:
            logits = clean
        top, where = logits.topk(self.k + 1, dim=1)
        gates = torch.zeros_like(logits, requires_grad=True)
        gates = gates.scatter(1, where[:, : self.k], F.softmax(top[:, : self.k], dim=1))
        if self.training:
            load = self.chance_in_top_k(clean, logits, scale, top).sum(0)
        else:
            load = (gates > 0).sum(0)
        balance = 0.01 * (self.spread(gates.sum(0)) + self.spread(load))
        router = Router(gates)
        self.rows_per_expert = router.counts
        parts = router.scatter_rows(x)
        answers = [expert(part) for expert, part in zip(self.experts, parts)]
        return router.gather_rows(answers), balance


device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
moe = SparseMixture(10, 4, 6, 8, k=2).to(device)
initialize(moe)
criterion = nn.CrossEntropyLoss()
opt = Adam(moe.parameters(), lr=0.05)

for step in range(3):
    inputs = torch.rand(4, 10).to(device)
    targets = torch.randint(4, (4, 1)).squeeze(1).to(device)
    log_probs, balance = moe(inputs.float())
    fit = criterion(log_probs, targets)
    opt.zero_grad()
    (fit + balance).backward()
    opt.step()
    print(f"train {step}: fit {fit.item():.3f} balance {balance.item():.4f}")
    record.append([fit.item(), balance.item()])
    record.append(params_of(moe))
    record.append(moe.rows_per_expert)

moe.eval()
log_probs, balance = moe(torch.rand(4, 10))
record.append([balance.item()])
record.append(log_probs.detach().numpy())
"""

MOE_STEPS = [
    (
        "    (fit + balance).backward()\n    opt.step()",
        "    grads = (fit + balance).backward()\n    opt.step(grads)",
    ),
]


def test_mixture_of_experts_trains_as_torch(capsys):
    records, logs = runs_with_draws(
        MOE_SOURCE,
        MOE_STEPS,
        capsys,
        seed=54,
        initialize=initializer(),
        params_of=params_of,
    )
    ours, theirs = records[1], records[0]
    assert logs[0].count("train ") == 3
    assert any(0 in counts for counts in theirs[2::3][:3])  # an expert got no row
    assert_records_agree(ours, theirs, rtol=2e-5, atol=2e-6)


# -- the Neural Turing Machine --------------------------------------------------------------------
NTM_SOURCE = """
import random

from torch import nn
from torch import optim
from torch.nn import LSTM, Parameter
from torch.nn import functional as F


def rotate(weights, kernel):
    # circular 3-tap shift of one addressing row: wrap the ends, then a valid convolution
    padded = torch.cat([weights[-1:], weights, weights[:1]])
    return F.conv1d(padded.view(1, 1, -1), kernel.view(1, 1, -1)).view(-1)


def cut(row_block, widths):
    # the controller's projection, split into its named pieces by cumulative bounds
    bounds = np.cumsum([0] + widths)
    return [row_block[:, lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:])]


class Tape(nn.Module):
    def __init__(self, slots, width):
        super(Tape, self).__init__()
        self.slots, self.width = slots, width
        self.register_buffer("start", torch.Tensor(slots, width))
        bound = 1 / np.sqrt(slots + width)
        nn.init.uniform_(self.start, -bound, bound)

    def clear(self, batch):
        self.batch = batch
        self.cells = self.start.clone().repeat(batch, 1, 1)

    def focus(self, key, strength, blend, kernel, sharpness, previous):
        match = F.cosine_similarity(self.cells + 1e-16, key.view(self.batch, 1, -1) + 1e-16, dim=-1)
        by_content = F.softmax(strength * match, dim=1)
        mixed = blend * by_content + (1 - blend) * previous
        shifted = torch.zeros(mixed.size())
        for b in range(self.batch):
            shifted[b] = rotate(mixed[b], kernel[b])
        peaked = shifted ** sharpness
        return torch.div(peaked, torch.sum(peaked, dim=1).view(-1, 1) + 1e-16)

    def read(self, where):
        return torch.matmul(where.unsqueeze(1), self.cells).squeeze(1)

    def write(self, where, erase, add):
        old = self.cells
        self.cells = torch.Tensor(self.batch, self.slots, self.width)  # replaced whole below
        self.cells = old * (1 - torch.matmul(where.unsqueeze(-1), erase.unsqueeze(1)))
        self.cells = self.cells + torch.matmul(where.unsqueeze(-1), add.unsqueeze(1))


class Head(nn.Module):
    def __init__(self, tape, hidden, writes):
        super(Head, self).__init__()
        self.tape, self.writes = tape, writes
        w = tape.width
        self.widths = [w, 1, 1, 3, 1] + ([w, w] if writes else [])
        self.proj = nn.Linear(hidden, sum(self.widths))
        nn.init.xavier_uniform_(self.proj.weight, gain=1.4)
        nn.init.normal_(self.proj.bias, std=0.01)

    def forward(self, h, previous):
        key, strength, blend, kernel, sharpness, *rest = cut(self.proj(h), self.widths)
        where = self.tape.focus(
            key.clone(),
            F.softplus(strength),
            F.sigmoid(blend),
            F.softmax(kernel, dim=1),
            1 + F.softplus(sharpness),
            previous,
        )
        if self.writes:
            self.tape.write(where, F.sigmoid(rest[0]), rest[1])
            return None, where
        return self.tape.read(where), where


class CopyMachine(nn.Module):
    def __init__(self, bits, hidden, slots, width):
        super(CopyMachine, self).__init__()
        self.bits = bits
        self.tape = Tape(slots, width)
        self.heads = nn.ModuleList([Head(self.tape, hidden, False), Head(self.tape, hidden, True)])
        self.lstm = LSTM(input_size=bits + 1 + width, hidden_size=hidden, num_layers=1)
        for name, p in self.lstm.named_parameters():
            if name.startswith("bias"):
                nn.init.constant_(p, 0)
            else:
                nn.init.uniform_(p, -0.5, 0.5)
        self.h0 = Parameter(torch.randn(1, 1, hidden) * 0.05)
        self.c0 = Parameter(torch.randn(1, 1, hidden) * 0.05)
        first_read = torch.randn(1, width) * 0.01
        self.register_buffer("first_read", first_read.data)
        self.first_reads = [first_read]  # (the same tensor: loading the buffer fills it)
        self.out = nn.Linear(hidden + width, bits)

    def begin(self, batch):
        self.batch = batch
        self.tape.clear(batch)
        self.reads = [r.clone().repeat(batch, 1) for r in self.first_reads]
        self.lstm_state = (self.h0.clone().repeat(1, batch, 1), self.c0.clone().repeat(1, batch, 1))
        self.focus = [torch.zeros(batch, self.tape.slots) for _ in self.heads]

    def forward(self, x=None):
        if x is None:
            x = torch.zeros(self.batch, self.bits + 1)
        step_in = torch.cat([x] + self.reads, dim=1).unsqueeze(0)
        h, self.lstm_state = self.lstm(step_in, self.lstm_state)
        h = h.squeeze(0)
        reads = []
        for i, head in enumerate(self.heads):
            got, self.focus[i] = head(h, self.focus[i])
            if got is not None:
                reads.append(got)
        self.reads = reads
        return F.sigmoid(self.out(torch.cat([h] + reads, dim=1))), self.focus


def copy_batches(count, batch, bits, shortest, longest):
    for n in range(count):
        length = random.randint(shortest, longest)
        pattern = torch.from_numpy(np.random.binomial(1, 0.5, (length, batch, bits)))
        shown = torch.zeros(length + 1, batch, bits + 1)
        shown[:length, :, :bits] = pattern
        shown[length, :, bits] = 1.0  # the end-of-input marker
        yield n, shown.float(), pattern.clone().float()


def clamp_grads(model):
    for p in filter(lambda p: p.grad is not None, model.parameters()):
        p.grad.data.clamp_(-10, 10)


random.seed(3)
np.random.seed(3)
machine = CopyMachine(3, 12, 6, 4)
initialize(machine)
bce = nn.BCELoss()
opt = optim.RMSprop(machine.parameters(), lr=3e-3, alpha=0.95, momentum=0.9)
record.append(sum(p.data.view(-1).size(0) for p in machine.parameters()))
for n, shown, wanted in copy_batches(3, 2, 3, 1, 2):
    opt.zero_grad()
    machine.begin(shown.size(1))
    for t in range(shown.size(0)):
        machine(shown[t])
    recalled = torch.zeros(wanted.size())
    for t in range(wanted.size(0)):
        recalled[t], _ = machine()
    loss = bce(recalled, wanted)
    loss.backward()
    clamp_grads(machine)
    opt.step()
    bits = recalled.clone().data
    bits.apply_(lambda v: 0 if v < 0.5 else 1)
    wrong = torch.sum(torch.abs(bits - wanted.data)).item() / wanted.size(1)
    print("batch %d loss %.5f wrong bits %.1f" % (n, loss.item(), wrong))
    record.append([loss.item(), wrong])
    record.append(params_of(machine))
record.append(machine.first_reads[0].numpy())
record.append(sorted(k for k in machine.state_dict() if k.endswith("start")))
"""

NTM_STEPS = [
    (
        "    loss.backward()\n    clamp_grads(machine)\n    opt.step()",
        "    grads = loss.backward()\n    clamp_grads(machine, grads)\n    opt.step(grads)",
    ),
    ("def clamp_grads(model):", "def clamp_grads(model, grads):"),
    ("lambda p: p.grad is not None", "lambda p: p.grad(grads) is not None"),
    ("        p.grad.data.clamp_(-10, 10)", "        p.grad(grads).data.clamp_(-10, 10)"),
]


def test_neural_turing_machine_trains_as_torch(capsys):
    records, logs = runs_with_draws(
        NTM_SOURCE,
        NTM_STEPS,
        capsys,
        seed=55,
        initialize=initializer(),
        params_of=params_of,
    )
    ours, theirs = records[1], records[0]
    assert logs[0].count("wrong bits") == 3
    assert theirs[-1] == ["heads.0.tape.start", "heads.1.tape.start", "tape.start"]
    assert_records_agree(ours, theirs, rtol=1e-4, atol=5e-5)  # RMSprop: near-zero gradients


# -- the Kolmogorov-Arnold network ----------------------------------------------------------------
KAN_SOURCE = """
import math

import torch
from torch.nn import functional as F


class SplineLinear(torch.nn.Module):
    # y = W_base act(x) + sum over inputs of a learned cubic B-spline of each input
    def __init__(self, n_in, n_out, knots=4, degree=3, noise=0.1, act=torch.nn.SiLU, lo=-1.0):
        super().__init__()
        self.n_in, self.n_out, self.knots, self.degree = n_in, n_out, knots, degree
        step = 2.0 / knots  # knots over [lo, lo + 2]
        edges = torch.arange(-degree, knots + degree + 1) * step + lo
        self.register_buffer("grid", edges.expand(n_in, -1).contiguous())
        self.base_weight = torch.nn.Parameter(torch.Tensor(n_out, n_in))
        self.coef = torch.nn.Parameter(torch.Tensor(n_out, n_in, knots + degree))
        self.coef_scale = torch.nn.Parameter(torch.Tensor(n_out, n_in))
        self.act = act()
        torch.nn.init.kaiming_uniform_(self.base_weight, a=math.sqrt(5))
        torch.nn.init.kaiming_uniform_(self.coef_scale, a=math.sqrt(5))
        with torch.no_grad():
            wiggle = (torch.rand(knots + 1, n_in, n_out) - 0.5) * noise / knots
            inner = self.grid.T[degree:-degree]
            self.coef.data.copy_(self.fit_coef(inner, wiggle))

    def bases(self, x: torch.Tensor) -> torch.Tensor:
        g: torch.Tensor = self.grid
        x = x.unsqueeze(-1)
        b = ((x >= g[:, :-1]) & (x < g[:, 1:])).to(x.dtype)  # degree 0: the knot interval
        for d in range(1, self.degree + 1):  # Cox-de Boor, one degree at a time
            rise = (x - g[:, : -(d + 1)]) / (g[:, d:-1] - g[:, : -(d + 1)]) * b[:, :, :-1]
            fall = (g[:, d + 1 :] - x) / (g[:, d + 1 :] - g[:, 1:-d]) * b[:, :, 1:]
            b = rise + fall
        return b.contiguous()

    def fit_coef(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        # least squares per input: bases (in, n, coef) against targets (in, n, out)
        design = self.bases(x).transpose(0, 1)
        solved = torch.linalg.lstsq(design, y.transpose(0, 1)).solution
        return solved.permute(2, 0, 1).contiguous()

    @property
    def scaled_coef(self):
        return self.coef * self.coef_scale.unsqueeze(-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, self.n_in)
        straight = F.linear(self.act(x), self.base_weight)
        curved = F.linear(self.bases(x).view(x.size(0), -1), self.scaled_coef.view(self.n_out, -1))
        return (straight + curved).reshape(*shape[:-1], self.n_out)

    @torch.no_grad()
    def regrid(self, x: torch.Tensor, margin=0.01, uniform_share=0.05):
        # move the knots to the data's quantiles, refitting the splines to what they gave
        per_input = self.bases(x).permute(1, 0, 2)
        before = torch.bmm(per_input, self.scaled_coef.permute(1, 2, 0)).permute(1, 0, 2)
        ordered = torch.sort(x, dim=0)[0]
        picks = torch.linspace(0, x.size(0) - 1, self.knots + 1, dtype=torch.int64)
        step = (ordered[-1] - ordered[0] + 2 * margin) / self.knots
        ticks = torch.arange(self.knots + 1, dtype=torch.float32).unsqueeze(1)
        even = ticks * step + ordered[0] - margin
        g = uniform_share * even + (1 - uniform_share) * ordered[picks]
        below = g[:1] - step * torch.arange(self.degree, 0, -1).unsqueeze(1)
        above = g[-1:] + step * torch.arange(1, self.degree + 1).unsqueeze(1)
        self.grid.copy_(torch.concatenate([below, g, above], dim=0).T)
        self.coef.data.copy_(self.fit_coef(x, before))

    def penalty(self):
        size = self.coef.abs().mean(-1)
        share = size / size.sum()
        return size.sum() - torch.sum(share * share.log())


import torch.nn as nn
from tqdm import tqdm


def net(x, regrid=False):
    for layer in layers:
        if regrid:
            layer.regrid(x)
        x = layer(x)
    return x


layers = nn.ModuleList([SplineLinear(2, 3, act=nn.Identity), SplineLinear(3, 1, act=nn.Identity)])
record.append({str(i): l.coef.detach().numpy().copy() for i, l in enumerate(layers)})
initialize(layers)


def fit_product(steps=3):
    lbfgs = torch.optim.LBFGS(layers.parameters(), lr=1, max_iter=4)
    with tqdm(range(steps), file=log) as bar:
        for it in bar:
            fit = extra = None

            def closure():
                nonlocal fit, extra
                lbfgs.zero_grad()
                x = torch.rand(128, 2)
                y = net(x, regrid=(it % 2 == 1))
                fit = F.mse_loss(y.squeeze(-1), x[:, 0] * x[:, 1])
                extra = sum(layer.penalty() for layer in layers)
                (fit + 1e-5 * extra).backward()
                return fit + extra

            lbfgs.step(closure)
            bar.set_postfix(fit=fit.item(), extra=extra.item())
            record.append([fit.item(), extra.item()])
            record.append(params_of(layers))
            record.append({str(i): l.grid.numpy().copy() for i, l in enumerate(layers)})


fit_product()
for layer in layers:
    print(layer.coef)
"""

KAN_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    (
        "                (fit + 1e-5 * extra).backward()\n                return fit + extra",
        "                grads = (fit + 1e-5 * extra).backward()\n"
        "                return fit + extra, grads",
    ),
]


def test_efficient_kan_trains_as_torch(capsys):
    log = io.StringIO()
    records, logs = runs_with_draws(
        KAN_SOURCE,
        KAN_STEPS,
        capsys,
        seed=56,
        initialize=initializer(),
        params_of=params_of,
        log=log,
    )
    ours, theirs = records[1], records[0]
    assert logs[0].count("Parameter containing") == 2
    assert theirs[-3][0] < theirs[1][0]
    assert not np.array_equal(theirs[3]["0"], theirs[-1]["0"])  # the regrid moved the knots
    assert_records_agree(ours, theirs, rtol=1e-3, atol=2e-4)
