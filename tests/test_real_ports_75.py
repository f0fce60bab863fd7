"""Real PyTorch programs ported to retrograd, continued from ``tests/test_real_ports_74.py`` (the
harness: ``tests/real_ports.py``): structured prediction and scientific machine learning. The
programs are written here, in the style of the public projects named, and run on torch and,
ported, on retrograd from the same weights and draws.

- a BiLSTM-CRF tagger over a batched linear-chain CRF written in the style of
  kmkurn/pytorch-crf (``torchcrf``), the CRF most taggers use: ``nn.Parameter(torch.empty(
  num_tags))`` filled by ``nn.init.uniform_(-0.1, 0.1)``, the mask check ``not self.batch_first
  and mask[0].all()`` on 0-d tensors, the default mask ``torch.ones_like(tags,
  dtype=torch.uint8)``, the gold path score gathered by ``emissions[0, torch.arange(batch),
  tags[0]]`` and ``self.transitions[tags[t - 1], tags[t]] * on[t]`` summed into ``total += ...``
  in place, ``tags[last, rows]`` at ``mask.long().sum(dim=0) - 1``, the forward algorithm by
  ``torch.logsumexp(alpha.unsqueeze(2) + self.transitions + emissions[t].unsqueeze(1), dim=1)``
  kept or passed over by ``torch.where(mask[t].unsqueeze(1), stepped, alpha)`` (a bool mask,
  and a uint8 one as older code passes), the reductions ``'none'``/``'sum'``/``'mean'``/
  ``'token_mean'`` (``llh.sum() / mask.float().sum()``), and Viterbi decoding by
  ``stepped.max(dim=1)`` with a list of backpointer tensors walked back by
  ``reversed(pointers[:lengths[b]])`` (a list sliced by a 0-d tensor) and
  ``step_pointers[b][path[-1]]``; the tagger (``nn.Embedding(padding_idx=0)``, a bidirectional
  ``nn.LSTM`` over ``pack_padded_sequence(..., enforce_sorted=False)`` and
  ``pad_packed_sequence(total_length=)``) trained by Adam on ``-crf(...)``, batch-first and
  time-first.
- a constrained CRF written in the style of AllenNLP's ``ConditionalRandomField`` (2.x): the BIO
  transitions allowed between labels and START/END, the constraints held as
  ``torch.nn.Parameter(allowed, requires_grad=False)`` among the parameters Adam is given,
  ``torch.nn.Parameter(torch.Tensor(num_tags))`` filled by ``init.normal_``, the forward
  algorithm's ``logsumexp(inner, 1) * mask[t].view(batch, 1) + alpha * (~mask[t]).view(batch, 1)``
  (floats times bools), the gold score by ``self.pairwise[here.view(-1), there.view(-1)]``,
  ``index_select``, ``gather`` and ``total = 0.0`` grown into a tensor, ``mask.to(torch.bool)``,
  the decoding building the augmented transitions by slice writes of ``.detach()``/``.data``
  products into ``torch.full``, ``present.nonzero(as_tuple=False).squeeze()`` and
  ``torch.index_select``, a reused ``torch.empty`` lattice refilled by ``fill_`` and slice
  writes; a stabilised ``logsumexp`` (a ``max`` then the shifted sum) and a k-best Viterbi
  (``torch.topk`` of ``path_scores[t - 1].unsqueeze(2) + transitions`` viewed flat, ``walk =
  [ends[rank]]`` then ``int(pointers.view(-1)[walk[-1]])`` indexed by a 0-d tensor, ``state %
  n_tags`` of a tensor and of ints) under a GRU tagger, with and without the start and end
  transitions, the top two paths decoded.
- a continuous normalizing flow written in the style of rtqichen/torchdiffeq's
  ``examples/cnf.py``, on fixed-grid solvers written in the style of torchdiffeq's own (the 3/8
  Runge-Kutta rule, midpoint and Euler steps on a grid from a step size, linear interpolation
  at the requested times; ``odeint``'s handling of its inputs): a tuple state flattened by
  ``torch.cat([part.reshape(-1) ...])`` and cut back by ``flat[..., start:stop].view((*lead,
  *shape))`` with ``shape.numel()`` of a ``torch.Size``, time integrated backwards (``t[0] >
  t[1]``: ``t = -t`` and a ``-1.0 *`` field), the grid by ``torch.ceil(...).item()`` and
  ``torch.arange(0, count) * step_size + start`` with ``points[-1] = t[-1]``, the solution
  written into ``torch.empty(len(t), *self.y0.shape)`` row by row (``out[k] = ...``), 0-d time
  tensors compared with ``>=`` and ``==``, float64 times cast to the state's dtype; the flow's
  time-conditioned weights (``p[:b].reshape(...)``, ``U * torch.sigmoid(gate)``),
  ``torch.unsqueeze(z, 0).repeat(self.width, 1, 1)``, the trace of the Jacobian by
  ``torch.autograd.grad(f[:, i].sum(), z, create_graph=True)[0].contiguous()[:, i]`` summed into
  ``trace = 0.``, ``z.requires_grad_(True)`` under ``with torch.set_grad_enabled(True)`` (also
  when the density is integrated under ``torch.no_grad()``), ``MultivariateNormal(...)
  .log_prob``, Adam, a running average, rk4 and midpoint. scikit-learn's ``make_circles`` is
  written out by the test (importing scikit-learn takes seconds).

All ran unchanged but for the gradient lines and the ``import`` lines naming ``torch``.
"""

from __future__ import annotations

import types

import numpy as np
import pytest

from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

# -- a BiLSTM-CRF tagger ---------------------------------------------------------------------------
CRF_SOURCE = """
from typing import Optional, List

import torch
import torch.nn as nn
from torch.nn.utils.rnn import pad_packed_sequence, pack_padded_sequence


# -- a batched linear-chain CRF ---------------------------------------------------------------
class CRF(nn.Module):
    # log p(tags | emissions) = score(tags) - log Z; the time axis first inside

    def __init__(self, num_tags: int, *, batch_first: bool = False) -> None:
        if num_tags < 1:
            raise ValueError(f'need at least one tag, got {num_tags}')
        super().__init__()
        self.num_tags, self.batch_first = num_tags, batch_first
        self.start_scores = nn.Parameter(torch.empty(num_tags))
        self.end_scores = nn.Parameter(torch.empty(num_tags))
        self.transitions = nn.Parameter(torch.empty(num_tags, num_tags))  # [from, to]
        for weight in (self.start_scores, self.end_scores, self.transitions):
            nn.init.uniform_(weight, -0.1, 0.1)

    def __repr__(self) -> str:
        return f'{type(self).__name__}(num_tags={self.num_tags})'

    def time_first(self, *tensors):
        return [t.transpose(0, 1) for t in tensors] if self.batch_first else list(tensors)

    def check(self, emissions, tags=None, mask=None):
        if emissions.dim() != 3 or emissions.size(2) != self.num_tags:
            shape = tuple(emissions.shape)
            raise ValueError(f'emissions must be (.., .., {self.num_tags}), got {shape}')
        for name, other in (('tags', tags), ('mask', mask)):
            if other is not None and other.shape != emissions.shape[:2]:
                raise ValueError(f'{name} of shape {tuple(other.shape)} do not fit the emissions')
        if mask is not None:
            # 0-d tensors in a boolean expression
            first_on = (not self.batch_first and mask[0].all()) or (
                self.batch_first and mask[:, 0].all()
            )
            if not first_on:
                raise ValueError('every sequence must start unmasked')

    def forward(self, emissions, gold, mask=None, reduction='sum'):
        self.check(emissions, gold, mask)
        if mask is None:
            mask = torch.ones_like(gold, dtype=torch.uint8)
        emissions, gold, mask = self.time_first(emissions, gold, mask)
        llh = self.path_score(emissions, gold, mask) - self.log_partition(emissions, mask)
        reducers = {
            'none': lambda: llh,
            'sum': lambda: llh.sum(),
            'mean': lambda: llh.mean(),
            'token_mean': lambda: llh.sum() / mask.float().sum(),
        }
        if reduction not in reducers:
            raise ValueError(f'unknown reduction {reduction!r}')
        return reducers[reduction]()

    def path_score(self, emissions, tags, mask):
        steps, batch = tags.shape
        rows = torch.arange(batch)
        on = mask.float()
        total = self.start_scores[tags[0]]
        total += emissions[0, rows, tags[0]]
        for t in range(1, steps):
            # only where step t is inside the sentence
            total += self.transitions[tags[t - 1], tags[t]] * on[t]
            total += emissions[t, rows, tags[t]] * on[t]
        last = on.long().sum(dim=0) - 1
        total += self.end_scores[tags[last, rows]]
        return total

    def log_partition(self, emissions, mask):
        # alpha[b, j]: log of the summed scores of all prefixes ending in tag j
        alpha = self.start_scores + emissions[0]
        for t in range(1, emissions.size(0)):
            stepped = alpha.unsqueeze(2) + self.transitions + emissions[t].unsqueeze(1)
            stepped = torch.logsumexp(stepped, dim=1)
            alpha = torch.where(mask[t].unsqueeze(1), stepped, alpha)
        alpha += self.end_scores
        return torch.logsumexp(alpha, dim=1)

    def decode(self, scores: torch.Tensor, mask: Optional[torch.Tensor] = None) -> List[List[int]]:
        self.check(scores, mask=mask)
        if mask is None:
            mask = scores.new_ones(scores.shape[:2], dtype=torch.uint8)
        scores, mask = self.time_first(scores, mask)
        best = self.start_scores + scores[0]
        pointers = []
        for t in range(1, scores.size(0)):
            stepped = best.unsqueeze(2) + self.transitions + scores[t].unsqueeze(1)
            stepped, came_from = stepped.max(dim=1)
            best = torch.where(mask[t].unsqueeze(1), stepped, best)
            pointers.append(came_from)
        best += self.end_scores
        lengths = mask.long().sum(dim=0) - 1
        paths = []
        for b in range(mask.size(1)):
            path = [best[b].max(dim=0)[1].item()]
            # a list sliced by a 0-d tensor, walked backwards
            for step_pointers in reversed(pointers[:lengths[b]]):
                path.append(step_pointers[b][path[-1]].item())
            paths.append(path[::-1])
        return paths


class Tagger(nn.Module):
    def __init__(self, vocab_size, num_tags, embedding_dim, hidden_dim, *, batch_first=True):
        super().__init__()
        self.batch_first, self.time_axis = batch_first, (1 if batch_first else 0)
        self.embed = nn.Embedding(vocab_size, embedding_dim, padding_idx=0)
        self.lstm = nn.LSTM(embedding_dim, hidden_dim // 2, num_layers=1, bidirectional=True,
                            batch_first=batch_first)
        self.to_tags = nn.Linear(hidden_dim, num_tags)
        self.crf = CRF(num_tags=num_tags, batch_first=batch_first)

    def emissions(self, words, lengths):
        packed = pack_padded_sequence(self.embed(words), lengths, batch_first=self.batch_first,
                                      enforce_sorted=False)
        states, _ = self.lstm(packed)
        states, _ = pad_packed_sequence(states, batch_first=self.batch_first,
                                        total_length=words.size(self.time_axis))
        return self.to_tags(states)

    def forward(self, words, lengths, tags, mask, reduction='mean'):
        return -self.crf(self.emissions(words, lengths), tags, mask=mask, reduction=reduction)


def pad(sentences, tag_seqs, batch_first):
    lengths = torch.tensor([len(sentence) for sentence in sentences])
    width = int(lengths.max())
    words = torch.zeros(len(sentences), width, dtype=torch.long)
    labels = torch.zeros(len(sentences), width, dtype=torch.long)
    for row, (sentence, tag_seq) in enumerate(zip(sentences, tag_seqs)):
        words[row, :len(sentence)] = torch.tensor(sentence)
        labels[row, :len(tag_seq)] = torch.tensor(tag_seq)
    mask = words != 0
    if mask_dtype == 'uint8':
        mask = mask.byte()  # the ByteTensor masks older code passes
    if batch_first:
        return words, lengths, labels, mask
    return words.t(), lengths, labels.t(), mask.t()


tagger = Tagger(vocab_size, num_tags, embedding_dim=6, hidden_dim=8, batch_first=batch_first)
initialize(tagger)
print(tagger.crf)
opt = torch.optim.Adam(tagger.parameters(), lr=0.05)
padded = [pad(sentences, tag_seqs, batch_first) for sentences, tag_seqs in data]

for epoch in range(3):
    for words, lengths, tags, mask in padded:
        tagger.zero_grad()
        loss = tagger(words, lengths, tags, mask, reduction=reduction)
        loss.backward()
        opt.step()
        record.append(loss.item())
    record.append(params_of(tagger))

with torch.no_grad():
    for words, lengths, tags, mask in padded:
        scores = tagger.emissions(words, lengths)
        record.append(tagger.crf.decode(scores, mask=mask))
        record.append((-tagger(words, lengths, tags, mask, reduction='none')).numpy().copy())
        record.append(tagger.crf.decode(scores))  # no mask: every position counts
        record.append(tagger.crf(scores, tags).item())
try:
    tagger.crf(scores, tags, mask=torch.zeros_like(tags, dtype=torch.bool))
except ValueError as error:
    record.append(str(error))
"""

CRF_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "        loss.backward()\n        opt.step()",
        "        grads = loss.backward()\n        opt.step(grads)",
    ),
]


def crf_data(seed: int, vocab_size: int, num_tags: int) -> list:
    """Two batches of sentences of random lengths, tagged by a rule the CRF can learn (a tag
    follows from the word and the previous tag)."""
    rng = np.random.default_rng(seed)
    data = []
    for _ in range(2):
        sentences, tag_seqs = [], []
        for length in rng.permutation([5, 3, 4, 2]):
            words = [int(w) for w in rng.integers(1, vocab_size, length)]
            tags, previous = [], 0
            for w in words:
                previous = (w + previous) % num_tags
                tags.append(previous)
            sentences.append(words)
            tag_seqs.append(tags)
        data.append((sentences, tag_seqs))
    return data


@pytest.mark.parametrize(
    "batch_first, mask_dtype, reduction",
    [(True, "bool", "mean"), (False, "uint8", "token_mean")],
    ids=["batch-first-bool-mean", "time-first-uint8-token-mean"],
)
def test_bilstm_crf_over_torchcrf_trains_and_decodes_as_torch(
    capsys, batch_first, mask_dtype, reduction
):
    records, logs = runs_with_draws(
        CRF_SOURCE,
        CRF_STEPS,
        capsys,
        seed=7501,
        initialize=initializer(),
        params_of=params_of,
        data=crf_data(7502, vocab_size=7, num_tags=3),
        vocab_size=7,
        num_tags=3,
        batch_first=batch_first,
        mask_dtype=mask_dtype,
        reduction=reduction,
    )
    ours, theirs = records[1], records[0]
    assert logs[0] == logs[1] == "CRF(num_tags=3)\n"
    assert theirs[-1] == "every sequence must start unmasked"
    assert theirs[6] < theirs[0]
    assert_records_agree(ours, theirs, rtol=2e-5, atol=2e-6)


# -- a continuous normalizing flow on fixed-grid solvers ---------------------------------------
CNF_SOURCE = """
import abc
import types

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim


# -- a fixed-grid ODE solver package: steppers, the grid, odeint's handling of its inputs ----------
def rk4_38_step(func, t0, dt, t1, y0):
    # Kutta's 3/8 rule
    f1 = func(t0, y0)
    f2 = func(t0 + dt / 3, y0 + dt * f1 / 3)
    f3 = func(t0 + dt * 2 / 3, y0 + dt * (f2 - f1 / 3))
    f4 = func(t1, y0 + dt * (f1 - f2 + f3))
    return (f1 + 3 * (f2 + f3) + f4) * dt * 0.125


class GridSolver(metaclass=abc.ABCMeta):
    def __init__(self, func, y0, step_size=None, **tolerances):
        self.func, self.y0 = func, y0
        self.step_size = step_size  # (fixed-grid methods take no tolerances)

    def grid(self, t):
        if self.step_size is None:
            return t
        start, end = t[0], t[-1]
        count = torch.ceil((end - start) / self.step_size + 1).item()
        points = torch.arange(0, count, dtype=t.dtype, device=t.device) * self.step_size + start
        if points[-1] > t[-1]:
            points[-1] = t[-1]  # the last step shortened to land on the end
        return points

    @abc.abstractmethod
    def step(self, func, t0, dt, t1, y0):
        ...

    def integrate(self, t):
        grid = self.grid(t)
        assert grid[0] == t[0] and grid[-1] == t[-1]
        out = torch.empty(len(t), *self.y0.shape, dtype=self.y0.dtype, device=self.y0.device)
        out[0] = self.y0
        k, y = 1, self.y0
        for t_a, t_b in zip(grid[:-1], grid[1:]):
            y_next = y + self.step(self.func, t_a, t_b - t_a, t_b, y)
            # every requested time inside this step, by linear interpolation
            while k < len(t) and t_b >= t[k]:
                out[k] = self.between(t_a, t_b, y, y_next, t[k])
                k += 1
            y = y_next
        return out

    @staticmethod
    def between(t_a, t_b, y_a, y_b, t):
        if t == t_a:
            return y_a
        if t == t_b:
            return y_b
        return y_a + (t - t_a) / (t_b - t_a) * (y_b - y_a)


class Euler(GridSolver):
    def step(self, func, t0, dt, t1, y0):
        return dt * func(t0, y0)


class Midpoint(GridSolver):
    def step(self, func, t0, dt, t1, y0):
        half = 0.5 * dt
        return dt * func(t0 + half, y0 + func(t0, y0) * half)


class RK4(GridSolver):
    def step(self, func, t0, dt, t1, y0):
        return rk4_38_step(func, t0, dt, t1, y0)


METHODS = {'euler': Euler, 'midpoint': Midpoint, 'rk4': RK4}


def unflatten(flat, lead, shapes):
    # cut the last axis back into tensors of the given shapes (after leading axes `lead`)
    parts, start = [], 0
    for shape in shapes:
        stop = start + shape.numel()
        parts.append(flat[..., start:stop].view((*lead, *shape)))
        start = stop
    return tuple(parts)


class FlatField(torch.nn.Module):
    # a field over a tuple of tensors, seen as a field over one flat vector
    def __init__(self, field, shapes):
        super().__init__()
        self.field, self.shapes = field, shapes

    def forward(self, t, y):
        derivatives = self.field(t, unflatten(y, (), self.shapes))
        return torch.cat([d.reshape(-1) for d in derivatives])


class NegatedTime(torch.nn.Module):
    # integrating over decreasing times: t -> -t and the field's sign flipped
    def __init__(self, field):
        super().__init__()
        self.field = field

    def forward(self, t, y):
        return -1.0 * self.field(-t, y)


class TimeInStateDtype(torch.nn.Module):
    def __init__(self, field):
        super().__init__()
        self.field = field

    def forward(self, t, y):
        return self.field(t.to(y.abs().dtype), y)


def odeint(func, y0, t, *, method=None, options=None, rtol=1e-7, atol=1e-9):
    shapes = None
    if not isinstance(y0, torch.Tensor):
        assert isinstance(y0, tuple), 'the state is a tensor or a tuple of tensors'
        shapes = [part.shape for part in y0]
        func = FlatField(func, shapes)
        y0 = torch.cat([part.reshape(-1) for part in y0])
    if method not in METHODS:
        raise ValueError(f'unknown method {method!r}; one of {sorted(METHODS)}')
    if t.device != y0.device:
        t = t.to(y0.device)
    if len(t) >= 2 and t[0] > t[1]:
        t, func = -t, NegatedTime(func)
    solver = METHODS[method](TimeInStateDtype(func), y0, rtol=rtol, atol=atol, **(options or {}))
    path = solver.integrate(t)
    return path if shapes is None else unflatten(path, (len(t),), shapes)


# -- a continuous normalizing flow in two dimensions ---------------------------------------------
class TimeConditionedWeights(nn.Module):
    # a small net mapping t to the weights of a width-many-unit layer
    def __init__(self, dim, hidden, width):
        super().__init__()
        self.dim, self.width, self.block = dim, width, width * dim
        self.fc1 = nn.Linear(1, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, 3 * self.block + width)

    def forward(self, t):
        p = torch.tanh(self.fc1(t.reshape(1, 1)))
        p = self.fc3(torch.tanh(self.fc2(p))).reshape(-1)
        b = self.block
        W = p[:b].reshape(self.width, self.dim, 1)
        U = p[b:2 * b].reshape(self.width, 1, self.dim)
        gate = p[2 * b:3 * b].reshape(self.width, 1, self.dim)
        bias = p[3 * b:].reshape(self.width, 1, 1)
        return W, bias, U * torch.sigmoid(gate)


def jacobian_trace(f, z):
    # exact: one backward per coordinate, each kept differentiable
    trace = 0.
    for i in range(z.shape[1]):
        row = torch.autograd.grad(f[:, i].sum(), z, create_graph=True)[0]
        trace += row.contiguous()[:, i].contiguous()
    return trace.contiguous()


class DensityFlow(nn.Module):
    def __init__(self, dim, hidden, width):
        super().__init__()
        self.width = width
        self.weights = TimeConditionedWeights(dim, hidden, width)

    def forward(self, t, state):
        z, _ = state
        with torch.set_grad_enabled(True):  # the trace needs a graph, under no_grad too
            z.requires_grad_(True)
            W, bias, U = self.weights(t)
            copies = torch.unsqueeze(z, 0).repeat(self.width, 1, 1)
            dz = torch.matmul(torch.tanh(torch.matmul(copies, W) + bias), U).mean(0)
            dlogp = -jacobian_trace(dz, z).view(z.shape[0], 1)
        return dz, dlogp


class Smoothed:
    def __init__(self, decay=0.99):
        self.decay, self.value, self.average = decay, None, 0

    def update(self, value):
        if self.value is None:
            self.average = value
        else:
            self.average = self.decay * self.average + (1 - self.decay) * value
        self.value = value


def sample_batch(n):
    points, _ = make_circles(n_samples=n, noise=0.06, factor=0.5)
    return torch.tensor(points).type(torch.float32), torch.zeros(n, 1).type(torch.float32)


if __name__ == '__main__':
    t_start, t_end = 0, 1
    flow = DensityFlow(dim=2, hidden=args.hidden_dim, width=args.width)
    initialize(flow)
    optimizer = optim.Adam(flow.parameters(), lr=args.lr)
    base = torch.distributions.MultivariateNormal(
        loc=torch.tensor([0.0, 0.0]), covariance_matrix=torch.tensor([[0.1, 0.0], [0.0, 0.1]])
    )
    meter = Smoothed()
    solve = dict(atol=1e-5, rtol=1e-5, method=args.method, options=dict(step_size=args.step_size))

    for iteration in range(1, args.niters + 1):
        optimizer.zero_grad()
        x, zero_logp = sample_batch(args.num_samples)
        # from the data at t_end back to the base distribution at t_start
        times = torch.tensor([t_end, t_start]).type(torch.float32)
        z_path, dlogp_path = odeint(flow, (x, zero_logp), times, **solve)
        log_px = base.log_prob(z_path[-1]) - dlogp_path[-1].view(-1)
        loss = -log_px.mean(0)
        loss.backward()
        optimizer.step()
        meter.update(loss.item())
        print(f'iteration {iteration}: smoothed loss {meter.average:.4f}')
        record.append(loss.item())
        record.append(params_of(flow))

    with torch.no_grad():
        # the learned density on a grid, at three times (float64 times, cast to the state's dtype)
        axis = np.linspace(-1.5, 1.5, 4)
        grid = np.vstack(np.meshgrid(axis, axis)).reshape([2, -1]).T
        z_end = torch.tensor(grid).type(torch.float32)
        z_path, dlogp_path = odeint(
            flow, (z_end, torch.zeros(z_end.shape[0], 1).type(torch.float32)),
            torch.tensor(np.linspace(t_end, t_start, 3)), **solve
        )
        for z_t, dlogp_t in zip(z_path, dlogp_path):
            density = torch.exp(base.log_prob(z_t) - dlogp_t.view(-1))
            record.append(density.detach().cpu().numpy())
        record.append(z_path.requires_grad)
"""

CNF_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.optim as optim\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.optim as optim\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()",
        "        grads = loss.backward()\n        optimizer.step(grads)",
    ),
]


def make_circles(n_samples, noise, factor):
    """scikit-learn's ``sklearn.datasets.make_circles`` (shuffle off), its noise from NumPy's global
    stream (importing scikit-learn takes seconds)."""
    n_out = n_samples // 2
    angles_out = np.linspace(0, 2 * np.pi, n_out, endpoint=False)
    angles_in = np.linspace(0, 2 * np.pi, n_samples - n_out, endpoint=False)
    outer = np.stack([np.cos(angles_out), np.sin(angles_out)], 1)
    inner = np.stack([np.cos(angles_in), np.sin(angles_in)], 1) * factor
    points = np.vstack([outer, inner]) + np.random.normal(scale=noise, size=(n_samples, 2))
    return points, np.hstack([np.zeros(n_out, np.int64), np.ones(n_samples - n_out, np.int64)])


@pytest.mark.parametrize("method, step_size", [("rk4", 0.5), ("midpoint", 0.4)])
def test_torchdiffeq_cnf_on_fixed_grid_solvers_trains_as_torch(capsys, method, step_size):
    args = types.SimpleNamespace(
        niters=3, lr=5e-2, num_samples=24, width=4, hidden_dim=6, method=method, step_size=step_size
    )
    records, logs = runs_with_draws(
        CNF_SOURCE,
        CNF_STEPS,
        capsys,
        seed=7511,
        initialize=initializer(),
        params_of=params_of,
        args=args,
        make_make_circles=lambda lib: make_circles,  # make_<name>(lib) gives <name>
        __name__="__main__",
    )
    ours, theirs = records[1], records[0]
    assert logs[0] == logs[1]
    assert theirs[-1] is False and ours[-1] is False
    assert_records_agree(ours[:-1], theirs[:-1], rtol=5e-5, atol=5e-6)


# -- a constrained CRF tagger ------------------------------------------------------------------
ALLENNLP_SOURCE = """
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn

NEG = -10000.0  # the score of a forbidden transition


def stable_logsumexp(x: torch.Tensor, dim: int = -1, keepdim: bool = False) -> torch.Tensor:
    top, _ = x.max(dim, keepdim=keepdim)
    shifted = x - (top if keepdim else top.unsqueeze(dim))
    return top + shifted.exp().sum(dim, keepdim=keepdim).log()


def k_best_viterbi(scores: torch.Tensor, transitions: torch.Tensor, top_k: Optional[int] = None):
    # scores: [steps, tags]; the k best paths through a lattice whose states are (tag, rank)
    flat = top_k is None
    k = 1 if flat else top_k
    if k < 1:
        raise ValueError(f'top_k must be at least 1, got {top_k}')
    steps, n_tags = list(scores.size())
    path_scores = [scores[0, :].unsqueeze(0)]  # [ranks, tags]
    back = []
    for t in range(1, steps):
        # [ranks * tags (from), tags (to)]
        through = (path_scores[t - 1].unsqueeze(2) + transitions).view(-1, n_tags)
        best, came_from = torch.topk(through, k=min(through.size()[0], k), dim=0)
        path_scores.append(scores[t, :] + best)
        back.append(came_from.squeeze())
    final = path_scores[-1].view(-1)
    best_scores, ends = torch.topk(final, k=min(final.size()[0], k), dim=0)
    paths = []
    for rank in range(len(best_scores)):
        walk = [ends[rank]]
        for pointers in reversed(back):
            walk.append(int(pointers.view(-1)[walk[-1]]))  # indexed by a 0-d tensor first
        # lattice states are rank * n_tags + tag: the tag is the remainder
        paths.append([state % n_tags for state in walk[::-1]])
    return (paths[0], best_scores[0]) if flat else (paths, best_scores)


def bio_transitions(labels: Dict[int, str]) -> List[Tuple[int, int]]:
    # the (from, to) pairs BIO allows; START and END are the indices after the labels
    n = len(labels)
    nodes = list(labels.items()) + [(n, 'START'), (n + 1, 'END')]

    def split(label):
        return (label, '') if label in ('START', 'END') else (label[0], label[1:])

    def allowed(a, a_type, b, b_type):
        if b == 'START' or a == 'END':
            return False
        if a == 'START':
            return b in ('O', 'B')
        if b == 'END':
            return a in ('O', 'B', 'I')
        return b in ('O', 'B') or (b == 'I' and a in ('B', 'I') and a_type == b_type)

    return [(i, j) for i, a in nodes for j, b in nodes if allowed(*split(a), *split(b))]


class ChainCRF(torch.nn.Module):
    def __init__(self, num_tags: int, constraints: Optional[List[Tuple[int, int]]] = None,
                 include_start_end_transitions: bool = True) -> None:
        super().__init__()
        self.num_tags = num_tags
        self.pairwise = torch.nn.Parameter(torch.empty(num_tags, num_tags))  # [from, to]
        # allowed[i, j] over the tags plus START (num_tags) and END (num_tags + 1)
        allowed = torch.full((num_tags + 2, num_tags + 2), 1.0 if constraints is None else 0.0)
        for i, j in constraints or []:
            allowed[i, j] = 1.0
        # a parameter without a gradient: the optimizer is given it and leaves it alone
        self.allowed = torch.nn.Parameter(allowed, requires_grad=False)
        self.with_ends = include_start_end_transitions
        if self.with_ends:
            self.from_start = torch.nn.Parameter(torch.Tensor(num_tags))
            self.to_end = torch.nn.Parameter(torch.Tensor(num_tags))
        torch.nn.init.xavier_normal_(self.pairwise)
        if self.with_ends:
            torch.nn.init.normal_(self.from_start)
            torch.nn.init.normal_(self.to_end)

    def log_partition(self, logits, mask):
        batch, steps, n = logits.size()
        logits, mask = logits.transpose(0, 1).contiguous(), mask.transpose(0, 1).contiguous()
        alpha = logits[0]
        if self.with_ends:
            alpha = self.from_start.view(1, n) + alpha
        for t in range(1, steps):
            inner = alpha.view(batch, n, 1) + logits[t].view(batch, 1, n)
            inner = inner + self.pairwise.view(1, n, n)
            # float scores times a bool mask: the new alpha where step t exists, else the old one
            alpha = (stable_logsumexp(inner, 1) * mask[t].view(batch, 1)
                     + alpha * (~mask[t]).view(batch, 1))
        if self.with_ends:
            alpha = alpha + self.to_end.view(1, n)
        return stable_logsumexp(alpha)

    def gold_score(self, logits, tags, mask):
        batch, steps, _ = logits.data.shape
        emit = logits.transpose(0, 1).contiguous()
        mask, tags = mask.transpose(0, 1).contiguous(), tags.transpose(0, 1).contiguous()
        total = self.from_start.index_select(0, tags[0]) if self.with_ends else 0.0
        for t in range(steps - 1):
            here, there = tags[t], tags[t + 1]
            moved = self.pairwise[here.view(-1), there.view(-1)]
            emitted = emit[t].gather(1, here.view(batch, 1)).squeeze(1)
            total = total + moved * mask[t + 1] + emitted * mask[t]
        last = tags.gather(0, (mask.sum(0).long() - 1).view(1, batch)).squeeze(0)
        closing = self.to_end.index_select(0, last) if self.with_ends else 0.0
        final_emit = emit[-1].gather(1, last.view(-1, 1)).squeeze()
        return total + closing + final_emit * mask[-1]

    def forward(self, logits, tags, mask=None):
        if mask is None:
            mask = torch.ones(*tags.size(), dtype=torch.bool, device=logits.device)
        mask = mask.to(torch.bool)
        return torch.sum(self.gold_score(logits, tags, mask) - self.log_partition(logits, mask))

    def best_paths(self, logits, mask=None, top_k=None):
        if mask is None:
            mask = torch.ones(*logits.shape[:2], device=logits.device, dtype=torch.bool)
        _, steps, n = logits.size()
        values, mask = logits.data, mask.data
        start, end = n, n + 1
        ok = self.allowed
        # transitions with START and END, the forbidden ones at NEG
        full = torch.full((n + 2, n + 2), NEG, device=logits.device)
        full[:n, :n] = (self.pairwise * ok[:n, :n] + NEG * (1 - ok[:n, :n])).data
        if self.with_ends:
            full[start, :n] = (self.from_start.detach() * ok[start, :n].data
                               + NEG * (1 - ok[start, :n].detach()))
            full[:n, end] = (self.to_end.detach() * ok[:n, end].data
                             + NEG * (1 - ok[:n, end].detach()))
        else:
            full[start, :n] = NEG * (1 - ok[start, :n].detach())
            full[:n, end] = NEG * (1 - ok[:n, end].detach())
        lattice = torch.empty(steps + 2, n + 2, device=logits.device)  # reused for every sentence
        found = []
        for scores, present in zip(values, mask):
            kept = torch.index_select(scores, 0, present.nonzero(as_tuple=False).squeeze())
            length = kept.shape[0]
            lattice.fill_(NEG)
            lattice[0, start] = 0.0
            lattice[1:length + 1, :n] = kept
            lattice[length + 1, end] = 0.0
            paths, path_scores = k_best_viterbi(lattice[:length + 2], full, top_k=top_k or 1)
            found.append([(path[1:-1], value.item()) for path, value in zip(paths, path_scores)])
        return [ranked[0] for ranked in found] if top_k is None else found


# -- a tagger: embeddings, a bidirectional GRU, a projection to tag scores, the CRF ---------------
labels = {0: 'O', 1: 'B-PER', 2: 'I-PER', 3: 'B-LOC', 4: 'I-LOC'}


class Tagger(nn.Module):
    def __init__(self, vocab_size, constrained=True):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, 6, padding_idx=0)
        self.gru = nn.GRU(6, 5, batch_first=True, bidirectional=True)
        self.project = nn.Linear(10, len(labels))
        self.crf = ChainCRF(len(labels), bio_transitions(labels) if constrained else None,
                            include_start_end_transitions=include_start_end_transitions)

    def forward(self, tokens, gold=None, top_k=None):
        mask = tokens != 0
        states, _ = self.gru(self.embed(tokens))
        logits = self.project(states)
        out = {'best_paths': self.crf.best_paths(logits, mask, top_k=top_k)}
        if gold is not None:
            out['loss'] = -self.crf(logits, gold, mask)
        return out


tagger = Tagger(vocab_size=9)
initialize(tagger)
opt = torch.optim.Adam(tagger.parameters(), lr=0.05)
for epoch in range(3):
    for tokens, tags in batches:
        opt.zero_grad()
        out = tagger(tokens, tags)
        out['loss'].backward()
        opt.step()
        record.append(out['loss'].item())
        record.append([list(path) for path, _ in out['best_paths']])
        record.append([value for _, value in out['best_paths']])
record.append(params_of(tagger))
with torch.no_grad():
    ranked = tagger(batches[0][0], top_k=2)['best_paths']
    record.append([[path for path, _ in paths] for paths in ranked])
    record.append(np.array([[value for _, value in paths] for paths in ranked]))
record.append(sorted(bio_transitions(labels)))
"""

ALLENNLP_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "        out['loss'].backward()\n        opt.step()",
        "        grads = out['loss'].backward()\n        opt.step(grads)",
    ),
]


def bio_batches(seed: int, lib) -> list:
    """Two batches of padded token ids (0 pads) with BIO tags that follow the tokens: 1-2 open a
    person, 3-4 a location, 5-6 continue the open entity, 7-8 are outside."""
    rng = np.random.default_rng(seed)
    batches = []
    for lengths in ([5, 3, 4], [4, 5, 2]):
        tokens = np.zeros((len(lengths), max(lengths)), np.int64)
        tags = np.zeros_like(tokens)
        for b, n in enumerate(lengths):
            entity = 0
            for t in range(n):
                token = int(rng.integers(1, 9))
                if token in (5, 6) and entity == 0:
                    token = 7
                tokens[b, t] = token
                if token in (1, 2):
                    entity, tags[b, t] = 1, 1
                elif token in (3, 4):
                    entity, tags[b, t] = 2, 3
                elif token in (5, 6):
                    tags[b, t] = 2 if entity == 1 else 4
                else:
                    entity, tags[b, t] = 0, 0
        batches.append((lib.tensor(tokens), lib.tensor(tags)))
    return batches


@pytest.mark.parametrize(
    "include_start_end_transitions", [True, False], ids=["start-end", "no-start-end"]
)
def test_allennlp_crf_tagger_trains_and_decodes_top_k_as_torch(
    capsys, include_start_end_transitions
):
    records, _ = runs_with_draws(
        ALLENNLP_SOURCE,
        ALLENNLP_STEPS,
        capsys,
        seed=7521,
        initialize=initializer(),
        params_of=params_of,
        make_batches=lambda lib: bio_batches(7522, lib),
        include_start_end_transitions=include_start_end_transitions,
    )
    ours, theirs = records[1], records[0]
    assert theirs[12] < theirs[0]  # the first batch, last epoch
    assert_records_agree(ours, theirs, rtol=2e-5, atol=2e-5)
