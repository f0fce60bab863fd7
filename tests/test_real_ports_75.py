# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued from ``tests/test_real_ports_74.py`` (the
harness: ``tests/real_ports.py``): structured prediction and scientific machine learning.

- a BiLSTM-CRF tagger over kmkurn/pytorch-crf's ``CRF`` (``torchcrf/__init__.py``, v0.7.2),
  the batched CRF most taggers use: ``nn.Parameter(torch.empty(num_tags))`` filled by
  ``nn.init.uniform_(-0.1, 0.1)``, ``_validate``'s ``not self.batch_first and mask[0].all()``
  on 0-d tensors, the default mask ``torch.ones_like(tags, dtype=torch.uint8)``, the gold path
  score gathered by ``emissions[0, torch.arange(batch_size), tags[0]]`` and
  ``self.transitions[tags[i - 1], tags[i]] * mask[i]`` summed into ``score += ...`` in place,
  ``tags[seq_ends, torch.arange(batch_size)]`` at ``mask.long().sum(dim=0) - 1``, the forward
  algorithm by ``torch.logsumexp(broadcast_score + self.transitions + broadcast_emissions,
  dim=1)`` kept or passed over by ``torch.where(mask[i].unsqueeze(1), next_score, score)``
  (a bool mask, and a uint8 one as its docstring's ``ByteTensor``), the reductions
  ``'none'``/``'sum'``/``'mean'``/``'token_mean'`` (``llh.sum() / mask.float().sum()``), and
  Viterbi decoding by ``next_score.max(dim=1)`` with a list of backpointer tensors traced back by
  ``reversed(history[:seq_ends[idx]])`` (a list sliced by a 0-d tensor) and
  ``hist[idx][best_tags[-1]]``; the tagger (``nn.Embedding(padding_idx=0)``, a bidirectional
  ``nn.LSTM`` over ``pack_padded_sequence(..., enforce_sorted=False)`` and
  ``pad_packed_sequence(total_length=)``) trained by Adam on ``-crf(...)``, batch-first and
  time-first.
- AllenNLP's ``ConditionalRandomField`` (``allennlp/modules/conditional_random_field.py`` of
  the 2.x releases: ``allowed_transitions("BIO", labels)`` and ``is_transition_allowed``, the
  constraints held as ``torch.nn.Parameter(constraint_mask, requires_grad=False)`` among the
  parameters Adam is given, ``torch.nn.Parameter(torch.Tensor(num_tags))`` filled by
  ``init.normal_``, the forward algorithm's ``logsumexp(inner, 1) * mask[i].view(batch_size, 1) +
  alpha * (~mask[i]).view(batch_size, 1)`` (floats times bools), the gold score by
  ``self.transitions[current_tag.view(-1), next_tag.view(-1)]``, ``index_select``, ``gather`` and
  ``score = 0.0`` grown into a tensor, ``mask.to(torch.bool)``, ``viterbi_tags`` building the
  augmented transitions by slice writes of ``.detach()``/``.data`` products into ``torch.full``,
  ``prediction_mask.nonzero(as_tuple=False).squeeze()`` and ``torch.index_select``, a reused
  ``torch.empty`` ``tag_sequence`` refilled by ``fill_`` and slice writes; ``allennlp/nn/util.py``'s
  ``logsumexp`` (a ``max`` then the stabilised sum) and ``viterbi_decode`` with ``top_k``
  (``torch.topk`` of ``path_scores[timestep - 1].unsqueeze(2) + transition_matrix`` viewed flat,
  ``viterbi_path = [best_paths[i]]`` then ``int(backward_timestep.view(-1)[viterbi_path[-1]])``
  indexed by a 0-d tensor, ``j % num_tags`` of a tensor and of ints) under a GRU tagger written
  after ``CrfTagger``, with and without the start and end transitions, the top two paths decoded.
- the continuous normalizing flow of rtqichen/torchdiffeq (``examples/cnf.py``) on torchdiffeq's
  own fixed-grid solvers (``_impl/rk_common.py``'s ``rk4_alt_step_func``, the 3/8 rule;
  ``solvers.py``'s ``FixedGridODESolver`` with ``_grid_constructor_from_step_size`` and
  ``_linear_interp``; ``fixed_grid.py``'s ``Euler``, ``Midpoint``, ``RK4``; ``misc.py``'s
  ``_check_inputs``, ``_TupleFunc``, ``_ReverseFunc``, ``_PerturbFunc`` and ``_flat_to_shape``),
  shortened to what the fixed-grid path runs: a tuple state flattened by ``torch.cat([y0_.reshape(
  -1) ...])`` and cut back by ``tensor[..., total:next_total].view((*length, *shape))`` with
  ``shape.numel()`` of a ``torch.Size``, time integrated backwards (``t[0] > t[1]``: ``t = -t`` and
  a ``-1.0 *`` field), the grid by ``torch.ceil(...).item()`` and ``torch.arange(0, niters) *
  step_size + start_time`` with ``t_infer[-1] = t[-1]``, the solution written into
  ``torch.empty(len(t), *self.y0.shape)`` row by row (``solution[j] = ...``), 0-d time tensors
  compared with ``>=`` and ``==``; the flow's ``HyperNetwork`` (``params[:self.blocksize].reshape(
  ...)``, ``U * torch.sigmoid(G)``), ``torch.unsqueeze(z, 0).repeat(self.width, 1, 1)``, the
  trace of the Jacobian by ``torch.autograd.grad(f[:, i].sum(), z, create_graph=True)[0]
  .contiguous()[:, i]`` summed into ``sum_diag = 0.``, ``z.requires_grad_(True)`` under ``with
  torch.set_grad_enabled(True)`` (also when the density is integrated under ``torch.no_grad()``),
  ``MultivariateNormal(...).log_prob``, Adam, ``RunningAverageMeter``, rk4 and midpoint.
  scikit-learn's ``make_circles`` is written out by the test (importing scikit-learn takes
  seconds).

All ran unchanged but for the gradient lines and the ``import`` lines naming ``torch``.
"""

from __future__ import annotations

import random
import types

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, params_of, runs_with_draws


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


# -- pytorch-crf ---------------------------------------------------------------------------------------
CRF_SOURCE = """
from typing import List, Optional

import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


# -- torchcrf/__init__.py ---------------------------------------------------------------------
class CRF(nn.Module):
    \"\"\"Conditional random field.\"\"\"

    def __init__(self, num_tags: int, batch_first: bool = False) -> None:
        if num_tags <= 0:
            raise ValueError(f'invalid number of tags: {num_tags}')
        super().__init__()
        self.num_tags = num_tags
        self.batch_first = batch_first
        self.start_transitions = nn.Parameter(torch.empty(num_tags))
        self.end_transitions = nn.Parameter(torch.empty(num_tags))
        self.transitions = nn.Parameter(torch.empty(num_tags, num_tags))

        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.uniform_(self.start_transitions, -0.1, 0.1)
        nn.init.uniform_(self.end_transitions, -0.1, 0.1)
        nn.init.uniform_(self.transitions, -0.1, 0.1)

    def __repr__(self) -> str:
        return f'{self.__class__.__name__}(num_tags={self.num_tags})'

    def forward(self, emissions: torch.Tensor, tags: torch.LongTensor,
                mask: Optional[torch.ByteTensor] = None, reduction: str = 'sum') -> torch.Tensor:
        self._validate(emissions, tags=tags, mask=mask)
        if reduction not in ('none', 'sum', 'mean', 'token_mean'):
            raise ValueError(f'invalid reduction: {reduction}')
        if mask is None:
            mask = torch.ones_like(tags, dtype=torch.uint8)

        if self.batch_first:
            emissions = emissions.transpose(0, 1)
            tags = tags.transpose(0, 1)
            mask = mask.transpose(0, 1)

        # shape: (batch_size,)
        numerator = self._compute_score(emissions, tags, mask)
        denominator = self._compute_normalizer(emissions, mask)
        llh = numerator - denominator

        if reduction == 'none':
            return llh
        if reduction == 'sum':
            return llh.sum()
        if reduction == 'mean':
            return llh.mean()
        assert reduction == 'token_mean'
        return llh.sum() / mask.float().sum()

    def decode(self, emissions: torch.Tensor,
               mask: Optional[torch.ByteTensor] = None) -> List[List[int]]:
        self._validate(emissions, mask=mask)
        if mask is None:
            mask = emissions.new_ones(emissions.shape[:2], dtype=torch.uint8)

        if self.batch_first:
            emissions = emissions.transpose(0, 1)
            mask = mask.transpose(0, 1)

        return self._viterbi_decode(emissions, mask)

    def _validate(self, emissions: torch.Tensor, tags: Optional[torch.LongTensor] = None,
                  mask: Optional[torch.ByteTensor] = None) -> None:
        if emissions.dim() != 3:
            raise ValueError(f'emissions must have dimension of 3, got {emissions.dim()}')
        if emissions.size(2) != self.num_tags:
            raise ValueError(
                f'expected last dimension of emissions is {self.num_tags}, '
                f'got {emissions.size(2)}')

        if tags is not None:
            if emissions.shape[:2] != tags.shape:
                raise ValueError(
                    'the first two dimensions of emissions and tags must match, '
                    f'got {tuple(emissions.shape[:2])} and {tuple(tags.shape)}')

        if mask is not None:
            if emissions.shape[:2] != mask.shape:
                raise ValueError(
                    'the first two dimensions of emissions and mask must match, '
                    f'got {tuple(emissions.shape[:2])} and {tuple(mask.shape)}')
            no_empty_seq = not self.batch_first and mask[0].all()
            no_empty_seq_bf = self.batch_first and mask[:, 0].all()
            if not no_empty_seq and not no_empty_seq_bf:
                raise ValueError('mask of the first timestep must all be on')

    def _compute_score(self, emissions: torch.Tensor, tags: torch.LongTensor,
                       mask: torch.ByteTensor) -> torch.Tensor:
        # emissions: (seq_length, batch_size, num_tags), tags and mask: (seq_length, batch_size)
        assert emissions.dim() == 3 and tags.dim() == 2
        assert emissions.shape[:2] == tags.shape
        assert emissions.size(2) == self.num_tags
        assert mask.shape == tags.shape
        assert mask[0].all()

        seq_length, batch_size = tags.shape
        mask = mask.float()

        # start transition and first emission, shape: (batch_size,)
        score = self.start_transitions[tags[0]]
        score += emissions[0, torch.arange(batch_size), tags[0]]

        for i in range(1, seq_length):
            # added only where the next timestep is valid (mask == 1)
            score += self.transitions[tags[i - 1], tags[i]] * mask[i]
            score += emissions[i, torch.arange(batch_size), tags[i]] * mask[i]

        # end transition score
        seq_ends = mask.long().sum(dim=0) - 1
        last_tags = tags[seq_ends, torch.arange(batch_size)]
        score += self.end_transitions[last_tags]

        return score

    def _compute_normalizer(self, emissions: torch.Tensor, mask: torch.ByteTensor) -> torch.Tensor:
        assert emissions.dim() == 3 and mask.dim() == 2
        assert emissions.shape[:2] == mask.shape
        assert emissions.size(2) == self.num_tags
        assert mask[0].all()

        seq_length = emissions.size(0)

        # shape: (batch_size, num_tags), column j the score of the first timestep having tag j
        score = self.start_transitions + emissions[0]

        for i in range(1, seq_length):
            # shape: (batch_size, num_tags, 1)
            broadcast_score = score.unsqueeze(2)
            # shape: (batch_size, 1, num_tags)
            broadcast_emissions = emissions[i].unsqueeze(1)
            # shape: (batch_size, num_tags, num_tags): from tag i to tag j, then emitting
            next_score = broadcast_score + self.transitions + broadcast_emissions
            # a sum over the current tags, in log space
            next_score = torch.logsumexp(next_score, dim=1)
            # the next score only where this timestep is valid (mask == 1)
            score = torch.where(mask[i].unsqueeze(1), next_score, score)

        score += self.end_transitions

        return torch.logsumexp(score, dim=1)

    def _viterbi_decode(self, emissions: torch.FloatTensor,
                        mask: torch.ByteTensor) -> List[List[int]]:
        assert emissions.dim() == 3 and mask.dim() == 2
        assert emissions.shape[:2] == mask.shape
        assert emissions.size(2) == self.num_tags
        assert mask[0].all()

        seq_length, batch_size = mask.shape

        score = self.start_transitions + emissions[0]
        history = []

        for i in range(1, seq_length):
            broadcast_score = score.unsqueeze(2)
            broadcast_emission = emissions[i].unsqueeze(1)
            next_score = broadcast_score + self.transitions + broadcast_emission
            # the best score over the current tags, and where it came from
            next_score, indices = next_score.max(dim=1)
            score = torch.where(mask[i].unsqueeze(1), next_score, score)
            history.append(indices)

        score += self.end_transitions

        seq_ends = mask.long().sum(dim=0) - 1
        best_tags_list = []

        for idx in range(batch_size):
            _, best_last_tag = score[idx].max(dim=0)
            best_tags = [best_last_tag.item()]

            # trace the best last tag back through the backpointers
            for hist in reversed(history[:seq_ends[idx]]):
                best_last_tag = hist[idx][best_tags[-1]]
                best_tags.append(best_last_tag.item())

            best_tags.reverse()
            best_tags_list.append(best_tags)

        return best_tags_list


# -- the tagger, as taggers built on torchcrf write it --------------------------------------------
class BiLSTM_CRF(nn.Module):
    def __init__(self, vocab_size, num_tags, embedding_dim, hidden_dim, batch_first=True):
        super(BiLSTM_CRF, self).__init__()
        self.batch_first = batch_first
        self.embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx=0)
        self.lstm = nn.LSTM(embedding_dim, hidden_dim // 2, num_layers=1, bidirectional=True, batch_first=batch_first)
        self.hidden2tag = nn.Linear(hidden_dim, num_tags)
        self.crf = CRF(num_tags, batch_first=batch_first)

    def _get_emissions(self, sentences, lengths):
        embeds = self.embedding(sentences)
        packed = pack_padded_sequence(embeds, lengths, batch_first=self.batch_first, enforce_sorted=False)
        lstm_out, _ = self.lstm(packed)
        lstm_out, _ = pad_packed_sequence(lstm_out, batch_first=self.batch_first, total_length=sentences.size(1 if self.batch_first else 0))
        return self.hidden2tag(lstm_out)

    def forward(self, sentences, lengths, tags, mask, reduction='mean'):
        emissions = self._get_emissions(sentences, lengths)
        return -self.crf(emissions, tags, mask=mask, reduction=reduction)

    def predict(self, sentences, lengths, mask):
        emissions = self._get_emissions(sentences, lengths)
        return self.crf.decode(emissions, mask=mask)


def make_batch(sentences, tag_seqs, batch_first):
    lengths = torch.tensor([len(s) for s in sentences])
    max_len = max(len(s) for s in sentences)
    words = torch.zeros(len(sentences), max_len, dtype=torch.long)
    tags = torch.zeros(len(sentences), max_len, dtype=torch.long)
    for i, (s, t) in enumerate(zip(sentences, tag_seqs)):
        words[i, :len(s)] = torch.tensor(s)
        tags[i, :len(t)] = torch.tensor(t)
    mask = words != 0
    if mask_dtype == 'uint8':
        mask = mask.byte()
    if not batch_first:
        words, tags, mask = words.t(), tags.t(), mask.t()
    return words, lengths, tags, mask


model = BiLSTM_CRF(vocab_size, num_tags, embedding_dim=6, hidden_dim=8, batch_first=batch_first)
initialize(model)
print(model.crf)
optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
batches = [make_batch(s, t, batch_first) for s, t in data]

for epoch in range(3):
    for words, lengths, tags, mask in batches:
        model.zero_grad()
        loss = model(words, lengths, tags, mask, reduction=reduction)
        loss.backward()
        optimizer.step()
        record.append(loss.item())
    record.append(params_of(model))

with torch.no_grad():
    for words, lengths, tags, mask in batches:
        record.append(model.predict(words, lengths, mask))
        record.append((-model(words, lengths, tags, mask, reduction='none')).numpy().copy())
        emissions = model._get_emissions(words, lengths)
        record.append(model.crf.decode(emissions))
        record.append(model.crf(emissions, tags).item())
try:
    model.crf(emissions, tags, mask=torch.zeros_like(tags, dtype=torch.bool))
except ValueError as e:
    record.append(str(e))
"""

CRF_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()",
        "        grads = loss.backward()\n        optimizer.step(grads)",
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
    assert theirs[-1] == "mask of the first timestep must all be on"
    assert theirs[6] < theirs[0]
    assert_records_agree(ours, theirs, rtol=2e-5, atol=2e-6)


# -- torchdiffeq's continuous normalizing flow ---------------------------------------------------------
CNF_SOURCE = """
import abc
import random
import types

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim


# -- torchdiffeq/_impl (misc.py, rk_common.py, solvers.py, fixed_grid.py, odeint.py): the fixed-grid
# -- solvers and odeint's input handling (tuple states flattened, time reversed by negation)
_one_third = 1 / 3
_two_thirds = 2 / 3
_one_sixth = 1 / 6


def rk4_alt_step_func(func, t0, dt, t1, y0, f0=None):
    # the 3/8 rule, the more accurate of the fourth-order Runge-Kutta steps
    k1 = f0
    if k1 is None:
        k1 = func(t0, y0)
    k2 = func(t0 + dt * _one_third, y0 + dt * k1 * _one_third)
    k3 = func(t0 + dt * _two_thirds, y0 + dt * (k2 - k1 * _one_third))
    k4 = func(t1, y0 + dt * (k1 - k2 + k3))
    return (k1 + 3 * (k2 + k3) + k4) * dt * 0.125


class FixedGridODESolver(metaclass=abc.ABCMeta):
    order: int

    def __init__(self, func, y0, step_size=None, grid_constructor=None, **unused_kwargs):
        unused_kwargs.pop('rtol', None)
        unused_kwargs.pop('atol', None)
        self.func = func
        self.y0 = y0
        self.dtype = y0.dtype
        self.device = y0.device

        if step_size is None:
            if grid_constructor is None:
                self.grid_constructor = lambda f, y0, t: t
            else:
                self.grid_constructor = grid_constructor
        else:
            if grid_constructor is None:
                self.grid_constructor = self._grid_constructor_from_step_size(step_size)
            else:
                raise ValueError("step_size and grid_constructor are mutually exclusive arguments.")

    @staticmethod
    def _grid_constructor_from_step_size(step_size):
        def _grid_constructor(func, y0, t):
            start_time = t[0]
            end_time = t[-1]

            niters = torch.ceil((end_time - start_time) / step_size + 1).item()
            t_infer = torch.arange(0, niters, dtype=t.dtype, device=t.device) * step_size + start_time
            if t_infer[-1] > t[-1]:
                t_infer[-1] = t[-1]

            return t_infer
        return _grid_constructor

    @abc.abstractmethod
    def _step_func(self, func, t0, dt, t1, y0):
        pass

    def integrate(self, t):
        time_grid = self.grid_constructor(self.func, self.y0, t)
        assert time_grid[0] == t[0] and time_grid[-1] == t[-1]

        solution = torch.empty(len(t), *self.y0.shape, dtype=self.y0.dtype, device=self.y0.device)
        solution[0] = self.y0

        j = 1
        y0 = self.y0
        for t0, t1 in zip(time_grid[:-1], time_grid[1:]):
            dt = t1 - t0
            dy = self._step_func(self.func, t0, dt, t1, y0)
            y1 = y0 + dy

            while j < len(t) and t1 >= t[j]:
                solution[j] = self._linear_interp(t0, t1, y0, y1, t[j])
                j += 1
            y0 = y1

        return solution

    def _linear_interp(self, t0, t1, y0, y1, t):
        if t == t0:
            return y0
        if t == t1:
            return y1
        slope = (t - t0) / (t1 - t0)
        return y0 + slope * (y1 - y0)


class Euler(FixedGridODESolver):
    order = 1

    def _step_func(self, func, t0, dt, t1, y0):
        return dt * func(t0, y0)


class Midpoint(FixedGridODESolver):
    order = 2

    def _step_func(self, func, t0, dt, t1, y0):
        half_dt = 0.5 * dt
        y_mid = y0 + func(t0, y0) * half_dt
        return dt * func(t0 + half_dt, y_mid)


class RK4(FixedGridODESolver):
    order = 4

    def _step_func(self, func, t0, dt, t1, y0):
        return rk4_alt_step_func(func, t0, dt, t1, y0)


SOLVERS = {
    'euler': Euler,
    'midpoint': Midpoint,
    'rk4': RK4,
}


def _flat_to_shape(tensor, length, shapes):
    tensor_list = []
    total = 0
    for shape in shapes:
        next_total = total + shape.numel()
        # It's important that this be view((...)), not view(...). Else when length=(), shape=() it fails.
        tensor_list.append(tensor[..., total:next_total].view((*length, *shape)))
        total = next_total
    return tuple(tensor_list)


class _TupleFunc(torch.nn.Module):
    def __init__(self, base_func, shapes):
        super(_TupleFunc, self).__init__()
        self.base_func = base_func
        self.shapes = shapes

    def forward(self, t, y):
        f = self.base_func(t, _flat_to_shape(y, (), self.shapes))
        return torch.cat([f_.reshape(-1) for f_ in f])


class _ReverseFunc(torch.nn.Module):
    def __init__(self, base_func, mul=1.0):
        super(_ReverseFunc, self).__init__()
        self.base_func = base_func
        self.mul = mul

    def forward(self, t, y):
        return self.mul * self.base_func(-t, y)


class _PerturbFunc(torch.nn.Module):
    def __init__(self, base_func):
        super(_PerturbFunc, self).__init__()
        self.base_func = base_func

    def forward(self, t, y):
        # the time follows the state's dtype (t may be given as float64)
        t = t.to(y.abs().dtype)
        return self.base_func(t, y)


def _check_inputs(func, y0, t, method, options):
    shapes = None
    is_tuple = not isinstance(y0, torch.Tensor)
    if is_tuple:
        assert isinstance(y0, tuple), 'y0 must be either a torch.Tensor or a tuple'
        shapes = [y0_.shape for y0_ in y0]
        func = _TupleFunc(func, shapes)
        y0 = torch.cat([y0_.reshape(-1) for y0_ in y0])

    if options is None:
        options = {}
    else:
        options = options.copy()
    if method not in SOLVERS:
        raise ValueError('Invalid method "{}". Must be one of {}'.format(method,
                                                                        '{"' + '", "'.join(SOLVERS.keys()) + '"}.'))

    # Backward compatibility: Allow t and y0 to be on different devices
    if t.device != y0.device:
        t = t.to(y0.device)

    t_is_reversed = False
    if len(t) > 1 and t[0] > t[1]:
        t_is_reversed = True

    if t_is_reversed:
        # Change the integration times to ascending order.
        # We do this by negating the time values and all associated arguments.
        t = -t
        func = _ReverseFunc(func, mul=-1.0)

    func = _PerturbFunc(func)

    return shapes, func, y0, t, method, options


def odeint(func, y0, t, *, rtol=1e-7, atol=1e-9, method=None, options=None):
    shapes, func, y0, t, method, options = _check_inputs(func, y0, t, method, options)

    solver = SOLVERS[method](func=func, y0=y0, rtol=rtol, atol=atol, **options)
    solution = solver.integrate(t)

    if shapes is not None:
        solution = _flat_to_shape(solution, (len(t),), shapes)
    return solution


# -- examples/cnf.py ------------------------------------------------------------------------------------
class CNF(nn.Module):
    \"\"\"Adapted from the NumPy implementation at:
    https://gist.github.com/rtqichen/91924063aa4cc95e7ef30b3a5491cc52
    \"\"\"

    def __init__(self, in_out_dim, hidden_dim, width):
        super().__init__()
        self.in_out_dim = in_out_dim
        self.hidden_dim = hidden_dim
        self.width = width
        self.hyper_net = HyperNetwork(in_out_dim, hidden_dim, width)

    def forward(self, t, states):
        z = states[0]
        logp_z = states[1]

        batchsize = z.shape[0]

        with torch.set_grad_enabled(True):
            z.requires_grad_(True)

            W, B, U = self.hyper_net(t)

            Z = torch.unsqueeze(z, 0).repeat(self.width, 1, 1)

            h = torch.tanh(torch.matmul(Z, W) + B)
            dz_dt = torch.matmul(h, U).mean(0)

            dlogp_z_dt = -trace_df_dz(dz_dt, z).view(batchsize, 1)

        return (dz_dt, dlogp_z_dt)


def trace_df_dz(f, z):
    \"\"\"Calculates the trace of the Jacobian df/dz.
    Stolen from: https://github.com/rtqichen/ffjord/blob/master/lib/layers/odefunc.py#L13
    \"\"\"
    sum_diag = 0.
    for i in range(z.shape[1]):
        sum_diag += torch.autograd.grad(f[:, i].sum(), z, create_graph=True)[0].contiguous()[:, i].contiguous()

    return sum_diag.contiguous()


class HyperNetwork(nn.Module):
    \"\"\"Hyper-network allowing f(z(t), t) to change with time.\"\"\"

    def __init__(self, in_out_dim, hidden_dim, width):
        super().__init__()

        blocksize = width * in_out_dim

        self.fc1 = nn.Linear(1, hidden_dim)
        self.fc2 = nn.Linear(hidden_dim, hidden_dim)
        self.fc3 = nn.Linear(hidden_dim, 3 * blocksize + width)

        self.in_out_dim = in_out_dim
        self.hidden_dim = hidden_dim
        self.width = width
        self.blocksize = blocksize

    def forward(self, t):
        # predict params
        params = t.reshape(1, 1)
        params = torch.tanh(self.fc1(params))
        params = torch.tanh(self.fc2(params))
        params = self.fc3(params)

        # restructure
        params = params.reshape(-1)
        W = params[:self.blocksize].reshape(self.width, self.in_out_dim, 1)

        U = params[self.blocksize:2 * self.blocksize].reshape(self.width, 1, self.in_out_dim)

        G = params[2 * self.blocksize:3 * self.blocksize].reshape(self.width, 1, self.in_out_dim)
        U = U * torch.sigmoid(G)

        B = params[3 * self.blocksize:].reshape(self.width, 1, 1)
        return [W, B, U]


class RunningAverageMeter(object):
    \"\"\"Computes and stores the average and current value\"\"\"

    def __init__(self, momentum=0.99):
        self.momentum = momentum
        self.reset()

    def reset(self):
        self.val = None
        self.avg = 0

    def update(self, val):
        if self.val is None:
            self.avg = val
        else:
            self.avg = self.avg * self.momentum + val * (1 - self.momentum)
        self.val = val


def get_batch(num_samples):
    points, _ = make_circles(n_samples=num_samples, noise=0.06, factor=0.5)
    x = torch.tensor(points).type(torch.float32).to(device)
    logp_diff_t1 = torch.zeros(num_samples, 1).type(torch.float32).to(device)

    return (x, logp_diff_t1)


if __name__ == '__main__':
    t0 = 0
    t1 = 1
    device = torch.device('cpu')

    # model
    func = CNF(in_out_dim=2, hidden_dim=args.hidden_dim, width=args.width).to(device)
    initialize(func)
    optimizer = optim.Adam(func.parameters(), lr=args.lr)
    p_z0 = torch.distributions.MultivariateNormal(
        loc=torch.tensor([0.0, 0.0]).to(device),
        covariance_matrix=torch.tensor([[0.1, 0.0], [0.0, 0.1]]).to(device)
    )
    loss_meter = RunningAverageMeter()

    for itr in range(1, args.niters + 1):
        optimizer.zero_grad()

        x, logp_diff_t1 = get_batch(args.num_samples)

        z_t, logp_diff_t = odeint(
            func,
            (x, logp_diff_t1),
            torch.tensor([t1, t0]).type(torch.float32).to(device),
            atol=1e-5,
            rtol=1e-5,
            method=args.method,
            options=dict(step_size=args.step_size),
        )

        z_t0, logp_diff_t0 = z_t[-1], logp_diff_t[-1]

        logp_x = p_z0.log_prob(z_t0).to(device) - logp_diff_t0.view(-1)
        loss = -logp_x.mean(0)

        loss.backward()
        optimizer.step()

        loss_meter.update(loss.item())

        print('Iter: {}, running avg loss: {:.4f}'.format(itr, loss_meter.avg))
        record.append(loss.item())
        record.append(params_of(func))

    with torch.no_grad():
        # the evolution of the density, from a grid of points back to the base distribution
        x = np.linspace(-1.5, 1.5, 4)
        y = np.linspace(-1.5, 1.5, 4)
        points = np.vstack(np.meshgrid(x, y)).reshape([2, -1]).T

        z_t1 = torch.tensor(points).type(torch.float32).to(device)
        logp_diff_t1 = torch.zeros(z_t1.shape[0], 1).type(torch.float32).to(device)

        z_t_density, logp_diff_t = odeint(
            func,
            (z_t1, logp_diff_t1),
            torch.tensor(np.linspace(t1, t0, 3)).to(device),
            atol=1e-5,
            rtol=1e-5,
            method=args.method,
            options=dict(step_size=args.step_size),
        )
        for (t, z_density, logp_diff) in zip(np.linspace(t0, t1, 3), z_t_density, logp_diff_t):
            logp = p_z0.log_prob(z_density) - logp_diff.view(-1)
            record.append(np.exp(logp.detach().cpu().numpy()))
        record.append(z_t_density.requires_grad)
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


# -- AllenNLP's ConditionalRandomField ----------------------------------------------------------------
ALLENNLP_SOURCE = """
from typing import Dict, List, Optional, Tuple, Union

import torch
import torch.nn as nn


# -- allennlp/nn/util.py ------------------------------------------------------------------------------
def logsumexp(tensor: torch.Tensor, dim: int = -1, keepdim: bool = False) -> torch.Tensor:
    max_score, _ = tensor.max(dim, keepdim=keepdim)
    if keepdim:
        stable_vec = tensor - max_score
    else:
        stable_vec = tensor - max_score.unsqueeze(dim)
    return max_score + (stable_vec.exp().sum(dim, keepdim=keepdim)).log()


def viterbi_decode(
    tag_sequence: torch.Tensor,
    transition_matrix: torch.Tensor,
    tag_observations: Optional[List[int]] = None,
    top_k: int = None,
):
    if top_k is None:
        top_k = 1
        flatten_output = True
    elif top_k >= 1:
        flatten_output = False
    else:
        raise ValueError(f"top_k must be either None or an integer >=1. Instead received {top_k}")

    sequence_length, num_tags = list(tag_sequence.size())

    if tag_observations:
        if len(tag_observations) != sequence_length:
            raise ValueError(
                "Observations were provided, but they were not the same length "
                "as the sequence. Found sequence of length: {} and evidence: {}".format(
                    sequence_length, tag_observations
                )
            )
    else:
        tag_observations = [-1 for _ in range(sequence_length)]

    path_scores = []
    path_indices = []

    if tag_observations[0] != -1:
        one_hot = torch.zeros(num_tags)
        one_hot[tag_observations[0]] = 100000.0
        path_scores.append(one_hot.unsqueeze(0))
    else:
        path_scores.append(tag_sequence[0, :].unsqueeze(0))

    # Evaluate the scores for all possible paths.
    for timestep in range(1, sequence_length):
        # Add pairwise potentials to current scores.
        summed_potentials = path_scores[timestep - 1].unsqueeze(2) + transition_matrix
        summed_potentials = summed_potentials.view(-1, num_tags)

        # Best pairwise potential path score from the previous timestep.
        max_k = min(summed_potentials.size()[0], top_k)
        scores, paths = torch.topk(summed_potentials, k=max_k, dim=0)

        # If we have an observation for this timestep, use it
        # instead of the distribution over tags.
        observation = tag_observations[timestep]
        if observation != -1:
            one_hot = torch.zeros(num_tags)
            one_hot[observation] = 100000.0
            path_scores.append(one_hot.unsqueeze(0))
        else:
            path_scores.append(tag_sequence[timestep, :] + scores)
        path_indices.append(paths.squeeze())

    # Construct the most likely sequence backwards.
    path_scores_v = path_scores[-1].view(-1)
    max_k = min(path_scores_v.size()[0], top_k)
    viterbi_scores, best_paths = torch.topk(path_scores_v, k=max_k, dim=0)
    viterbi_paths = []
    for i in range(max_k):
        viterbi_path = [best_paths[i]]
        for backward_timestep in reversed(path_indices):
            viterbi_path.append(int(backward_timestep.view(-1)[viterbi_path[-1]]))
        # Reverse the backward path.
        viterbi_path.reverse()

        # Viterbi paths uses (num_tags * n_permutations) nodes; therefore, we need to modulo.
        viterbi_path = [j % num_tags for j in viterbi_path]
        viterbi_paths.append(viterbi_path)

    if flatten_output:
        return viterbi_paths[0], viterbi_scores[0]

    return viterbi_paths, viterbi_scores


# -- allennlp/modules/conditional_random_field.py ---------------------------------------------------
VITERBI_DECODING = Tuple[List[int], float]  # a list of tags, and a viterbi score


def allowed_transitions(constraint_type: str, labels: Dict[int, str]) -> List[Tuple[int, int]]:
    num_labels = len(labels)
    start_tag = num_labels
    end_tag = num_labels + 1
    labels_with_boundaries = list(labels.items()) + [(start_tag, "START"), (end_tag, "END")]

    allowed = []
    for from_label_index, from_label in labels_with_boundaries:
        if from_label in ("START", "END"):
            from_tag = from_label
            from_entity = ""
        else:
            from_tag = from_label[0]
            from_entity = from_label[1:]
        for to_label_index, to_label in labels_with_boundaries:
            if to_label in ("START", "END"):
                to_tag = to_label
                to_entity = ""
            else:
                to_tag = to_label[0]
                to_entity = to_label[1:]
            if is_transition_allowed(constraint_type, from_tag, from_entity, to_tag, to_entity):
                allowed.append((from_label_index, to_label_index))
    return allowed


def is_transition_allowed(constraint_type: str, from_tag: str, from_entity: str, to_tag: str, to_entity: str):
    if to_tag == "START" or from_tag == "END":
        # Cannot transition into START or from END
        return False

    if constraint_type == "BIO":
        if from_tag == "START":
            return to_tag in ("O", "B")
        if to_tag == "END":
            return from_tag in ("O", "B", "I")
        return any(
            [
                # Can always transition to O or B-x
                to_tag in ("O", "B"),
                # Can only transition to I-x from B-x or I-x
                to_tag == "I" and from_tag in ("B", "I") and from_entity == to_entity,
            ]
        )
    raise ValueError(f"Unknown constraint type: {constraint_type}")


class ConditionalRandomField(torch.nn.Module):
    def __init__(
        self,
        num_tags: int,
        constraints: List[Tuple[int, int]] = None,
        include_start_end_transitions: bool = True,
    ) -> None:
        super().__init__()
        self.num_tags = num_tags

        # transitions[i, j] is the logit for transitioning from state i to state j.
        self.transitions = torch.nn.Parameter(torch.empty(num_tags, num_tags))

        # _constraint_mask indicates valid transitions (based on supplied constraints).
        # Include special start of sequence (num_tags + 1) and end of sequence tags (num_tags + 2)
        if constraints is None:
            # All transitions are valid.
            constraint_mask = torch.full((num_tags + 2, num_tags + 2), 1.0)
        else:
            constraint_mask = torch.full((num_tags + 2, num_tags + 2), 0.0)
            for i, j in constraints:
                constraint_mask[i, j] = 1.0

        self._constraint_mask = torch.nn.Parameter(constraint_mask, requires_grad=False)

        # Also need logits for transitioning from "start" state and to "end" state.
        self.include_start_end_transitions = include_start_end_transitions
        if include_start_end_transitions:
            self.start_transitions = torch.nn.Parameter(torch.Tensor(num_tags))
            self.end_transitions = torch.nn.Parameter(torch.Tensor(num_tags))

        self.reset_parameters()

    def reset_parameters(self):
        torch.nn.init.xavier_normal_(self.transitions)
        if self.include_start_end_transitions:
            torch.nn.init.normal_(self.start_transitions)
            torch.nn.init.normal_(self.end_transitions)

    def _input_likelihood(self, logits: torch.Tensor, mask: torch.BoolTensor) -> torch.Tensor:
        batch_size, sequence_length, num_tags = logits.size()

        # Transpose batch size and sequence dimensions
        mask = mask.transpose(0, 1).contiguous()
        logits = logits.transpose(0, 1).contiguous()

        # Initial alpha is the (batch_size, num_tags) tensor of likelihoods combining the
        # transitions to the initial states and the logits for the first timestep.
        if self.include_start_end_transitions:
            alpha = self.start_transitions.view(1, num_tags) + logits[0]
        else:
            alpha = logits[0]

        # For each i we compute logits for the transitions from timestep i-1 to timestep i.
        for i in range(1, sequence_length):
            # The emit scores are for time i ("next_tag") so we broadcast along the current_tag axis.
            emit_scores = logits[i].view(batch_size, 1, num_tags)
            # Transition scores are (current_tag, next_tag) so we broadcast along the instance axis.
            transition_scores = self.transitions.view(1, num_tags, num_tags)
            # Alpha is for the current_tag, so we broadcast along the next_tag axis.
            broadcast_alpha = alpha.view(batch_size, num_tags, 1)

            # Add all the scores together and logexp over the current_tag axis.
            inner = broadcast_alpha + emit_scores + transition_scores

            # In valid positions (mask == True) we want to take the logsumexp over the current_tag dimension
            # of `inner`. Otherwise (mask == False) we want to retain the previous alpha.
            alpha = logsumexp(inner, 1) * mask[i].view(batch_size, 1) + alpha * (~mask[i]).view(
                batch_size, 1
            )

        # Every sequence needs to end with a transition to the stop_tag.
        if self.include_start_end_transitions:
            stops = alpha + self.end_transitions.view(1, num_tags)
        else:
            stops = alpha

        # Finally we log_sum_exp along the num_tags dim, result is (batch_size,)
        return logsumexp(stops)

    def _joint_likelihood(self, logits: torch.Tensor, tags: torch.Tensor, mask: torch.BoolTensor) -> torch.Tensor:
        batch_size, sequence_length, _ = logits.data.shape

        # Transpose batch size and sequence dimensions:
        logits = logits.transpose(0, 1).contiguous()
        mask = mask.transpose(0, 1).contiguous()
        tags = tags.transpose(0, 1).contiguous()

        # Start with the transition scores from start_tag to the first tag in each input
        if self.include_start_end_transitions:
            score = self.start_transitions.index_select(0, tags[0])
        else:
            score = 0.0

        # Add up the scores for the observed transitions and all the inputs but the last
        for i in range(sequence_length - 1):
            # Each is shape (batch_size,)
            current_tag, next_tag = tags[i], tags[i + 1]

            # The scores for transitioning from current_tag to next_tag
            transition_score = self.transitions[current_tag.view(-1), next_tag.view(-1)]

            # The score for using current_tag
            emit_score = logits[i].gather(1, current_tag.view(batch_size, 1)).squeeze(1)

            # Include transition score if next element is unmasked,
            # input_score if this element is unmasked.
            score = score + transition_score * mask[i + 1] + emit_score * mask[i]

        # Transition from last state to "stop" state. To start with, we need to find the last tag
        # for each instance.
        last_tag_index = mask.sum(0).long() - 1
        last_tags = tags.gather(0, last_tag_index.view(1, batch_size)).squeeze(0)

        # Compute score of transitioning to `stop_tag` from each "last tag".
        if self.include_start_end_transitions:
            last_transition_score = self.end_transitions.index_select(0, last_tags)
        else:
            last_transition_score = 0.0

        # Add the last input if it's not masked.
        last_inputs = logits[-1]  # (batch_size, num_tags)
        last_input_score = last_inputs.gather(1, last_tags.view(-1, 1))  # (batch_size, 1)
        last_input_score = last_input_score.squeeze()  # (batch_size,)

        score = score + last_transition_score + last_input_score * mask[-1]

        return score

    def forward(self, inputs: torch.Tensor, tags: torch.Tensor, mask: torch.BoolTensor = None) -> torch.Tensor:
        if mask is None:
            mask = torch.ones(*tags.size(), dtype=torch.bool, device=inputs.device)
        else:
            # The code below fails in weird ways if this isn't a bool tensor, so we make sure.
            mask = mask.to(torch.bool)

        log_denominator = self._input_likelihood(inputs, mask)
        log_numerator = self._joint_likelihood(inputs, tags, mask)

        return torch.sum(log_numerator - log_denominator)

    def viterbi_tags(
        self, logits: torch.Tensor, mask: torch.BoolTensor = None, top_k: int = None
    ) -> Union[List[VITERBI_DECODING], List[List[VITERBI_DECODING]]]:
        if mask is None:
            mask = torch.ones(*logits.shape[:2], dtype=torch.bool, device=logits.device)

        if top_k is None:
            top_k = 1
            flatten_output = True
        else:
            flatten_output = False

        _, max_seq_length, num_tags = logits.size()

        # Get the tensors out of the variables
        logits, mask = logits.data, mask.data

        # Augment transitions matrix with start and end transitions
        start_tag = num_tags
        end_tag = num_tags + 1
        transitions = torch.full((num_tags + 2, num_tags + 2), -10000.0, device=logits.device)

        # Apply transition constraints
        constrained_transitions = self.transitions * self._constraint_mask[
            :num_tags, :num_tags
        ] + -10000.0 * (1 - self._constraint_mask[:num_tags, :num_tags])
        transitions[:num_tags, :num_tags] = constrained_transitions.data

        if self.include_start_end_transitions:
            transitions[
                start_tag, :num_tags
            ] = self.start_transitions.detach() * self._constraint_mask[
                start_tag, :num_tags
            ].data + -10000.0 * (
                1 - self._constraint_mask[start_tag, :num_tags].detach()
            )
            transitions[:num_tags, end_tag] = self.end_transitions.detach() * self._constraint_mask[
                :num_tags, end_tag
            ].data + -10000.0 * (1 - self._constraint_mask[:num_tags, end_tag].detach())
        else:
            transitions[start_tag, :num_tags] = -10000.0 * (
                1 - self._constraint_mask[start_tag, :num_tags].detach()
            )
            transitions[:num_tags, end_tag] = -10000.0 * (
                1 - self._constraint_mask[:num_tags, end_tag].detach()
            )

        best_paths = []
        # Pad the max sequence length by 2 to account for start_tag + end_tag.
        tag_sequence = torch.empty(max_seq_length + 2, num_tags + 2, device=logits.device)

        for prediction, prediction_mask in zip(logits, mask):
            mask_indices = prediction_mask.nonzero(as_tuple=False).squeeze()
            masked_prediction = torch.index_select(prediction, 0, mask_indices)
            sequence_length = masked_prediction.shape[0]

            # Start with everything totally unlikely
            tag_sequence.fill_(-10000.0)
            # At timestep 0 we must have the START_TAG
            tag_sequence[0, start_tag] = 0.0
            # At steps 1, ..., sequence_length we just use the incoming prediction
            tag_sequence[1 : (sequence_length + 1), :num_tags] = masked_prediction
            # And at the last timestep we must have the END_TAG
            tag_sequence[sequence_length + 1, end_tag] = 0.0

            # We pass the tags and the transitions to `viterbi_decode`.
            viterbi_paths, viterbi_scores = viterbi_decode(
                tag_sequence=tag_sequence[: (sequence_length + 2)],
                transition_matrix=transitions,
                top_k=top_k,
            )
            top_k_paths = []
            for viterbi_path, viterbi_score in zip(viterbi_paths, viterbi_scores):
                # Get rid of START and END sentinels and append.
                viterbi_path = viterbi_path[1:-1]
                top_k_paths.append((viterbi_path, viterbi_score.item()))
            best_paths.append(top_k_paths)

        if flatten_output:
            return [top_k_paths[0] for top_k_paths in best_paths]

        return best_paths


# -- a tagger over it (allennlp's CrfTagger, its text field embedder an Embedding, its encoder a GRU)
labels = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}


class CrfTagger(nn.Module):
    def __init__(self, vocab_size, constrain_crf_decoding=True):
        super().__init__()
        self.embedder = nn.Embedding(vocab_size, 6, padding_idx=0)
        self.encoder = nn.GRU(6, 5, batch_first=True, bidirectional=True)
        self.tag_projection_layer = nn.Linear(10, len(labels))
        constraints = allowed_transitions("BIO", labels) if constrain_crf_decoding else None
        self.crf = ConditionalRandomField(len(labels), constraints, include_start_end_transitions=include_start_end_transitions)

    def forward(self, tokens, tags=None, top_k=None):
        mask = tokens != 0
        encoded_text, _ = self.encoder(self.embedder(tokens))
        logits = self.tag_projection_layer(encoded_text)
        best_paths = self.crf.viterbi_tags(logits, mask, top_k=top_k)
        output = {"logits": logits, "mask": mask, "best_paths": best_paths}
        if tags is not None:
            log_likelihood = self.crf(logits, tags, mask)
            output["loss"] = -log_likelihood
        return output


model = CrfTagger(vocab_size=9)
initialize(model)
optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
for epoch in range(3):
    for tokens, tags in batches:
        optimizer.zero_grad()
        output = model(tokens, tags)
        loss = output["loss"]
        loss.backward()
        optimizer.step()
        record.append(loss.item())
        record.append([[tag for tag in path] for path, score in output["best_paths"]])
        record.append([score for path, score in output["best_paths"]])
record.append(params_of(model))
with torch.no_grad():
    output = model(batches[0][0], top_k=2)
    record.append([[path for path, score in paths] for paths in output["best_paths"]])
    record.append(np.array([[score for path, score in paths] for paths in output["best_paths"]]))
record.append(sorted(allowed_transitions("BIO", labels)))
"""

ALLENNLP_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()",
        "        grads = loss.backward()\n        optimizer.step(grads)",
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
