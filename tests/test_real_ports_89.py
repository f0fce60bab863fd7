# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
speech, graphs, Gaussian processes and asynchronous actor-critic, each trained a few steps
against torch's run of the same code from the same weights and draws.

- DeepSpeech2 as SeanNaren/deepspeech.pytorch writes it (``deepspeech_pytorch/model.py``, its
  ``loader/data_loader.py``'s ``_collate_fn``, ``decoder.py``'s ``GreedyDecoder`` and the
  older ``train.py``'s step), the convolutions and widths made small: ``SequenceWise``
  collapsing ``T*N*H`` by ``x.view(t * n, -1)``, ``MaskConv`` filling the padded frames of a
  ``torch.BoolTensor(x.size()).fill_(0)`` by ``mask[i].narrow(2, length, ...).fill_(1)`` and
  ``x.masked_fill(mask, 0)``, ``nn.Hardtanh(0, 20, inplace=True)``, ``BatchRNN`` through
  ``nn.utils.rnn.pack_padded_sequence``/``pad_packed_sequence`` on int32 lengths (a
  bidirectional LSTM whose directions are summed by ``x.view(..., 2, -1).sum(2)``, and a GRU
  with the ``Lookahead`` convolution: ``F.pad(x, pad=self.pad, value=0)`` and a depthwise
  ``nn.Conv1d(groups=n_features)``), ``get_seq_lens`` over ``self.conv.modules()`` with
  ``type(m) == nn.modules.conv.Conv2d``, the collate's ``inputs[x][0].narrow(1, 0,
  seq_length).copy_(tensor)`` and ``torch.FloatTensor(n)``/``torch.IntTensor(n)`` item
  assignment, ``input_percentages.mul_(int(inputs.size(3))).int()``, ``CTCLoss(blank=...,
  reduction='sum', zero_infinity=True)`` of ``out.transpose(0, 1).log_softmax(-1)``, SGD with
  Nesterov momentum and ``clip_grad_norm_``; evaluated with ``InferenceBatchSoftmax`` and
  the greedy decoder (``torch.max(probs, 2)``, ``torch.tensor(offsets, dtype=torch.int)``).
- GCN as tkipf/pygcn writes it (``pygcn/utils.py``, ``layers.py``, ``models.py``,
  ``train.py``), on a small citation graph written as ``cora.content``/``cora.cites`` files
  and read by ``np.genfromtxt``: ``encode_onehot``, the symmetric adjacency and the
  row-normalization by ``scipy.sparse``, ``Parameter(torch.FloatTensor(in, out))`` with
  ``self.weight.data.uniform_(-stdv, stdv)``, ``torch.mm`` then ``torch.spmm(adj, support)``,
  ``F.nll_loss(output[idx_train], labels[idx_train])`` over ``torch.LongTensor(range(...))``
  indices, ``output.max(1)[1].type_as(labels)``, Adam with ``weight_decay``, the log
  compared (its numbers masked: the records hold them). ``sparse_mx_to_torch_sparse_tensor`` ends in
  ``torch.sparse.FloatTensor(indices, values, shape)``, a sparse COO adjacency that
  ``torch.spmm`` multiplies: ported as it is (retrograd first refused the line, then, when it
  had no sparse layouts, the port built the dense matrix in its place).
- exact Gaussian-process regression written by hand (no GPyTorch): independent GPs over two
  tasks batched in one ``[2, n, n]`` kernel, softplus-parametrized length and output scales
  and a log noise, ``torch.linalg.cholesky``, ``torch.cholesky_solve`` and the log
  determinant as ``torch.log(torch.diagonal(L, dim1=-2, dim2=-1)).sum(-1)``, fitted by Adam
  then by ``optim.LBFGS`` (with and without ``line_search_fn="strong_wolfe"``); the
  predictive mean and variance by ``torch.linalg.solve_triangular``; and the posterior
  covariance of close test points factored by GPyTorch's ``psd_safe_cholesky`` (0.3), whose
  first ``torch.cholesky`` fails and whose ``except RuntimeError`` retries with jitter added
  through ``Aprime.diagonal(dim1=-2, dim2=-1).add_(...)``: retrograd raised a
  ``ValueError`` there, which the program does not catch (``rg.linalg.LinAlgError`` now, a
  ``RuntimeError`` as torch's).
- A3C as ikostrikov/pytorch-a3c writes it (``model.py``, ``my_optim.py``, ``train.py`` and
  ``main.py``), one worker run in this process on a small stand-in for the Atari
  environment (a 42x42 screen): ``normalized_columns_initializer`` (``out *= std /
  torch.sqrt(out.pow(2).sum(1, keepdim=True))``) assigned to ``weight.data``,
  ``weights_init`` by ``classname.find('Conv')``, ``nn.LSTMCell`` with ``(hx, cx)`` detached
  between rollouts, ``SharedAdam`` (an ``optim.Adam`` subclass whose state holds
  ``torch.zeros(1)`` steps and ``p.data.new().resize_as_(p.data).zero_()`` moments, stepped
  with torch's deprecated ``add_(1 - beta1, grad)``/``addcmul_(1 - beta2, grad, grad)``/
  ``addcdiv_(-step_size, exp_avg, denom)`` forms), ``prob.multinomial(num_samples=1)``,
  the GAE loop, ``clip_grad_norm_`` and ``ensure_shared_grads``; the shared and the plain
  Adam (``--no-shared``). Under torch 2, ``optimizer.zero_grad()`` sets the shared model's
  gradients to ``None`` and nothing zeroes the worker model's, which so accumulate over the
  updates: the port reproduces that.

The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``,
``clip_grad_norm_(grads, ...)``, ``optimizer.step(grads)``; in A3C, ``ensure_shared_grads``
copies the worker's gradients by ``shared_param.grad_replace(grads, param.grad(grads))``,
``SharedAdam.step`` reads ``p.grad(grads)``, the worker's gradients accumulate as torch's
``.grad`` does and ``zero_grad()`` drops the shared model's ones). ``share_memory()`` and
``share_memory_()`` are refused by design (a tensor is not shared between processes), so the
two calls are left out of the port (the worker runs in the same process).
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import re
import types

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import SharedDraws, assert_records_agree, initializer, params_of, port, run_source


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


@pytest.fixture
def default_dtype():
    """The default dtype restored after a program that sets it."""
    previous, our_previous = torch.get_default_dtype(), rg.get_default_dtype()
    yield
    torch.set_default_dtype(previous)
    rg.set_default_dtype(our_previous)


# -- DeepSpeech2 ----------------------------------------------------------------------------------
DEEPSPEECH_SOURCE = '''
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn import CTCLoss


class SequenceWise(nn.Module):
    def __init__(self, module):
        """
        Collapses input of dim T*N*H to (T*N)*H, and applies to a module.
        Allows handling of variable sequence lengths and minibatch sizes.
        :param module: Module to apply input to.
        """
        super(SequenceWise, self).__init__()
        self.module = module

    def forward(self, x):
        t, n = x.size(0), x.size(1)
        x = x.view(t * n, -1)
        x = self.module(x)
        x = x.view(t, n, -1)
        return x

    def __repr__(self):
        tmpstr = self.__class__.__name__ + ' (\\n'
        tmpstr += self.module.__repr__()
        tmpstr += ')'
        return tmpstr


class MaskConv(nn.Module):
    def __init__(self, seq_module):
        """
        Adds padding to the output of the module based on the given lengths. This is to ensure that the
        results of the model do not change when batch sizes change during inference.
        Input needs to be in the shape of (BxCxDxT)
        :param seq_module: The sequential module containing the conv stack.
        """
        super(MaskConv, self).__init__()
        self.seq_module = seq_module

    def forward(self, x, lengths):
        """
        :param x: The input of size BxCxDxT
        :param lengths: The actual length of each sequence in the batch
        :return: Masked output from the module
        """
        for module in self.seq_module:
            x = module(x)
            mask = torch.BoolTensor(x.size()).fill_(0)
            if x.is_cuda:
                mask = mask.cuda()
            for i, length in enumerate(lengths):
                length = length.item()
                if (mask[i].size(2) - length) > 0:
                    mask[i].narrow(2, length, mask[i].size(2) - length).fill_(1)
            x = x.masked_fill(mask, 0)
        return x, lengths


class InferenceBatchSoftmax(nn.Module):
    def forward(self, input_):
        if not self.training:
            return F.softmax(input_, dim=-1)
        else:
            return input_


class BatchRNN(nn.Module):
    def __init__(self, input_size, hidden_size, rnn_type=nn.LSTM, bidirectional=False, batch_norm=True):
        super(BatchRNN, self).__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bidirectional = bidirectional
        self.batch_norm = SequenceWise(nn.BatchNorm1d(input_size)) if batch_norm else None
        self.rnn = rnn_type(input_size=input_size, hidden_size=hidden_size,
                            bidirectional=bidirectional, bias=True)
        self.num_directions = 2 if bidirectional else 1

    def flatten_parameters(self):
        self.rnn.flatten_parameters()

    def forward(self, x, output_lengths):
        if self.batch_norm is not None:
            x = self.batch_norm(x)
        x = nn.utils.rnn.pack_padded_sequence(x, output_lengths)
        x, h = self.rnn(x)
        x, _ = nn.utils.rnn.pad_packed_sequence(x)
        if self.bidirectional:
            x = x.view(x.size(0), x.size(1), 2, -1).sum(2).view(x.size(0), x.size(1), -1)  # (TxNxH*2) -> (TxNxH) by sum
        return x


class Lookahead(nn.Module):
    # Wang et al 2016 - Lookahead Convolution Layer for Unidirectional Recurrent Neural Networks
    # input shape - sequence, batch, feature - TxNxH
    # output shape - same as input
    def __init__(self, n_features, context):
        super(Lookahead, self).__init__()
        assert context > 0
        self.context = context
        self.n_features = n_features
        self.pad = (0, self.context - 1)
        self.conv = nn.Conv1d(
            self.n_features,
            self.n_features,
            kernel_size=self.context,
            stride=1,
            groups=self.n_features,
            padding=0,
            bias=False
        )

    def forward(self, x):
        x = x.transpose(0, 1).transpose(1, 2)
        x = F.pad(x, pad=self.pad, value=0)
        x = self.conv(x)
        x = x.transpose(1, 2).transpose(0, 1).contiguous()
        return x

    def __repr__(self):
        return self.__class__.__name__ + '(' \\
               + 'n_features=' + str(self.n_features) \\
               + ', context=' + str(self.context) + ')'


class DeepSpeech(nn.Module):
    def __init__(self, labels, model_cfg, spect_cfg):
        super().__init__()
        self.model_cfg = model_cfg
        self.spect_cfg = spect_cfg
        self.bidirectional = True if model_cfg.rnn_type_bidirectional else False
        self.labels = labels
        num_classes = len(self.labels)

        self.conv = MaskConv(nn.Sequential(
            nn.Conv2d(1, 4, kernel_size=(5, 3), stride=(2, 2), padding=(2, 1)),
            nn.BatchNorm2d(4),
            nn.Hardtanh(0, 20, inplace=True),
            nn.Conv2d(4, 4, kernel_size=(3, 3), stride=(2, 1), padding=(1, 1)),
            nn.BatchNorm2d(4),
            nn.Hardtanh(0, 20, inplace=True)
        ))
        # Based on above convolutions and spectrogram size using conv formula (W - F + 2P)/ S+1
        rnn_input_size = int(math.floor((self.spect_cfg.sample_rate * self.spect_cfg.window_size) / 2) + 1)
        rnn_input_size = int(math.floor(rnn_input_size + 2 * 2 - 5) / 2 + 1)
        rnn_input_size = int(math.floor(rnn_input_size + 2 * 1 - 3) / 2 + 1)
        rnn_input_size *= 4

        self.rnns = nn.Sequential(
            BatchRNN(
                input_size=rnn_input_size,
                hidden_size=self.model_cfg.hidden_size,
                rnn_type=self.model_cfg.rnn_type,
                bidirectional=self.bidirectional,
                batch_norm=False
            ),
            *(
                BatchRNN(
                    input_size=self.model_cfg.hidden_size,
                    hidden_size=self.model_cfg.hidden_size,
                    rnn_type=self.model_cfg.rnn_type,
                    bidirectional=self.bidirectional
                ) for x in range(self.model_cfg.hidden_layers - 1)
            )
        )

        self.lookahead = nn.Sequential(
            # consider adding batch norm?
            Lookahead(self.model_cfg.hidden_size, context=self.model_cfg.lookahead_context),
            nn.Hardtanh(0, 20, inplace=True)
        ) if not self.bidirectional else None

        fully_connected = nn.Sequential(
            nn.BatchNorm1d(self.model_cfg.hidden_size),
            nn.Linear(self.model_cfg.hidden_size, num_classes, bias=False)
        )
        self.fc = nn.Sequential(
            SequenceWise(fully_connected),
        )
        self.inference_softmax = InferenceBatchSoftmax()
        self.criterion = CTCLoss(blank=self.labels.index('_'), reduction='sum', zero_infinity=True)

    def forward(self, x, lengths):
        lengths = lengths.cpu().int()
        output_lengths = self.get_seq_lens(lengths)
        x, _ = self.conv(x, output_lengths)

        sizes = x.size()
        x = x.view(sizes[0], sizes[1] * sizes[2], sizes[3])  # Collapse feature dimension
        x = x.transpose(1, 2).transpose(0, 1).contiguous()  # TxNxH

        for rnn in self.rnns:
            x = rnn(x, output_lengths)

        if not self.bidirectional:  # no need for lookahead layer in bidirectional
            x = self.lookahead(x)

        x = self.fc(x)
        x = x.transpose(0, 1)
        # identity in training mode, softmax in eval mode
        x = self.inference_softmax(x)
        return x, output_lengths

    def training_step(self, batch, batch_idx):
        inputs, targets, input_percentages, target_sizes = batch
        input_sizes = input_percentages.mul_(int(inputs.size(3))).int()
        out, output_sizes = self(inputs, input_sizes)
        out = out.transpose(0, 1)  # TxNxH
        out = out.log_softmax(-1)

        loss = self.criterion(out, targets, output_sizes, target_sizes)
        return loss

    def get_seq_lens(self, input_length):
        """
        Given a 1D Tensor or Variable containing integer sequence lengths, return a 1D tensor or variable
        containing the size sequences that will be output by the network.
        :param input_length: 1D Tensor
        :return: 1D Tensor scaled by model
        """
        seq_len = input_length
        for m in self.conv.modules():
            if type(m) == nn.modules.conv.Conv2d:
                seq_len = ((seq_len + 2 * m.padding[1] - m.dilation[1] * (m.kernel_size[1] - 1) - 1) // m.stride[1] + 1)
        return seq_len.int()


def _collate_fn(batch):
    def func(p):
        return p[0].size(1)

    batch = sorted(batch, key=lambda sample: sample[0].size(1), reverse=True)
    longest_sample = max(batch, key=func)[0]
    freq_size = longest_sample.size(0)
    minibatch_size = len(batch)
    max_seqlength = longest_sample.size(1)
    inputs = torch.zeros(minibatch_size, 1, freq_size, max_seqlength)
    input_percentages = torch.FloatTensor(minibatch_size)
    target_sizes = torch.IntTensor(minibatch_size)
    targets = []
    for x in range(minibatch_size):
        sample = batch[x]
        tensor = sample[0]
        target = sample[1]
        seq_length = tensor.size(1)
        inputs[x][0].narrow(1, 0, seq_length).copy_(tensor)
        input_percentages[x] = seq_length / float(max_seqlength)
        target_sizes[x] = len(target)
        targets.extend(target)
    targets = torch.tensor(targets, dtype=torch.long)
    return inputs, targets, input_percentages, target_sizes


class GreedyDecoder(object):
    def __init__(self, labels, blank_index=0):
        self.labels = labels
        self.int_to_char = dict([(i, c) for (i, c) in enumerate(labels)])
        self.blank_index = blank_index
        space_index = len(labels)  # To prevent errors in decode, we add an out of bounds index for the space
        if ' ' in labels:
            space_index = labels.index(' ')
        self.space_index = space_index

    def convert_to_strings(self,
                           sequences,
                           sizes=None,
                           remove_repetitions=False,
                           return_offsets=False):
        """Given a list of numeric sequences, returns the corresponding strings"""
        strings = []
        offsets = [] if return_offsets else None
        for x in range(len(sequences)):
            seq_len = sizes[x] if sizes is not None else len(sequences[x])
            string, string_offsets = self.process_string(sequences[x], seq_len, remove_repetitions)
            strings.append([string])  # We only return one path
            if return_offsets:
                offsets.append([string_offsets])
        if return_offsets:
            return strings, offsets
        else:
            return strings

    def process_string(self,
                       sequence,
                       size,
                       remove_repetitions=False):
        string = ''
        offsets = []
        for i in range(size):
            char = self.int_to_char[sequence[i].item()]
            if char != self.int_to_char[self.blank_index]:
                # if this char is a repetition and remove_repetitions=true, then skip
                if remove_repetitions and i != 0 and char == self.int_to_char[sequence[i - 1].item()]:
                    pass
                elif char == self.labels[self.space_index]:
                    string += ' '
                    offsets.append(i)
                else:
                    string = string + char
                    offsets.append(i)
        return string, torch.tensor(offsets, dtype=torch.int)

    def decode(self, probs, sizes=None):
        """
        Returns the argmax decoding given the probability matrix. Removes
        repeated elements in the sequence, as well as repetitions.
        Arguments:
            probs: Tensor of character probabilities, where probs[c,t]
                            is the probability of character c at time t
            sizes(optional): Size of each sequence in the mini-batch
        Returns:
            strings: sequences of the model's best guess for the transcription on inputs
            offsets: time step per character predicted
        """
        _, max_probs = torch.max(probs, 2)
        strings, offsets = self.convert_to_strings(max_probs.view(max_probs.size(0), max_probs.size(1)),
                                                   sizes,
                                                   remove_repetitions=True,
                                                   return_offsets=True)
        return strings, offsets


# -- the loop, after the repository's older train.py --
labels = "_'abcde "
model = DeepSpeech(labels, model_cfg, spect_cfg)
initialize(model)
record.append(repr(model.fc))
record.append(repr(model.lookahead))
parameters = model.parameters()
optimizer = torch.optim.SGD(parameters, lr=args.lr, momentum=args.momentum, nesterov=True, weight_decay=1e-5)
decoder = GreedyDecoder(labels, blank_index=labels.index('_'))

for i, samples in enumerate(train_samples):
    batch = _collate_fn([(torch.tensor(spect), list(target)) for spect, target in samples])
    model.train()
    loss = model.training_step(batch, i)
    loss = loss / batch[0].size(0)  # average the loss by minibatch
    loss_value = loss.item()
    record.append(loss_value)
    if not math.isinf(loss_value) and not math.isnan(loss_value):
        optimizer.zero_grad()
        # compute gradient
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_norm)
        record.append(grad_norm.item())
        optimizer.step()
    record.append(params_of(model))

model.eval()
with torch.no_grad():
    inputs, targets, input_percentages, target_sizes = _collate_fn(
        [(torch.tensor(spect), list(target)) for spect, target in train_samples[0]])
    input_sizes = input_percentages.mul_(int(inputs.size(3))).int()
    out, output_sizes = model(inputs, input_sizes)
    record.append(out.numpy().copy())
    record.append(output_sizes.tolist())
    decoded_output, decoded_offsets = decoder.decode(out, output_sizes)
    record.append([s[0] for s in decoded_output])
    record.append([o[0].tolist() for o in decoded_offsets])
record.append({k: v.numpy().copy() for k, v in model.state_dict().items() if "running" in k})
'''

DEEPSPEECH_STEPS = [
    (
        "\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "\nimport retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\n",
    ),
    ("        loss.backward()\n", "        grads = loss.backward()\n"),
    (
        "clip_grad_norm_(model.parameters(), args.max_norm)",
        "clip_grad_norm_(grads, model.parameters(), args.max_norm)",
    ),
    ("        optimizer.step()\n", "        optimizer.step(grads)\n"),
]


@pytest.mark.parametrize("bidirectional, rnn_type", [(True, "LSTM"), (False, "GRU")])
def test_deepspeech2_trains_and_decodes_as_torch(bidirectional, rnn_type):
    rng = np.random.default_rng(8901)
    train_samples = [
        [
            (
                rng.standard_normal((16, length)).astype(np.float32),
                list(rng.integers(1, 8, rng.integers(1, 4))),
            )
            for length in rng.integers(6, 13, 3)
        ]
        for _ in range(3)
    ]
    initialize = initializer()
    records = []
    for lib in (torch, rg):
        record = []
        text = (
            DEEPSPEECH_SOURCE
            if lib is torch
            else port(DEEPSPEECH_SOURCE, DEEPSPEECH_STEPS).replace("from torch.", "from retrograd.")
        )
        model_cfg = types.SimpleNamespace(
            rnn_type_bidirectional=bidirectional,
            rnn_type=getattr(lib.nn, rnn_type),
            hidden_size=6,
            hidden_layers=2,
            lookahead_context=3,
        )
        spect_cfg = types.SimpleNamespace(sample_rate=3000, window_size=0.01)  # 16 frequencies
        args = types.SimpleNamespace(lr=0.05, momentum=0.9, max_norm=2.0)
        run_source(
            text,
            lib,
            record=record,
            train_samples=train_samples,
            model_cfg=model_cfg,
            spect_cfg=spect_cfg,
            args=args,
            initialize=initialize,
            params_of=params_of,
        )
        records.append(record)
    theirs, ours = records
    assert len(theirs) == 2 + 3 * 3 + 5
    assert theirs[-4] == [6, 5, 5]  # the output lengths of the first batch
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


# -- pygcn ----------------------------------------------------------------------------------------
PYGCN_SOURCE = '''
import math
import time

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.nn.parameter import Parameter
from torch.nn.modules.module import Module


# -- pygcn/utils.py --
def encode_onehot(labels):
    classes = set(labels)
    classes_dict = {c: np.identity(len(classes))[i, :] for i, c in
                    enumerate(classes)}
    labels_onehot = np.array(list(map(classes_dict.get, labels)),
                             dtype=np.int32)
    return labels_onehot


def load_data(path="../data/cora/", dataset="cora"):
    """Load citation network dataset (cora only for now)"""
    print('Loading {} dataset...'.format(dataset))

    idx_features_labels = np.genfromtxt("{}{}.content".format(path, dataset),
                                        dtype=np.dtype(str))
    features = sp.csr_matrix(idx_features_labels[:, 1:-1], dtype=np.float32)
    labels = encode_onehot(idx_features_labels[:, -1])

    # build graph
    idx = np.array(idx_features_labels[:, 0], dtype=np.int32)
    idx_map = {j: i for i, j in enumerate(idx)}
    edges_unordered = np.genfromtxt("{}{}.cites".format(path, dataset),
                                    dtype=np.int32)
    edges = np.array(list(map(idx_map.get, edges_unordered.flatten())),
                     dtype=np.int32).reshape(edges_unordered.shape)
    adj = sp.coo_matrix((np.ones(edges.shape[0]), (edges[:, 0], edges[:, 1])),
                        shape=(labels.shape[0], labels.shape[0]),
                        dtype=np.float32)

    # build symmetric adjacency matrix
    adj = adj + adj.T.multiply(adj.T > adj) - adj.multiply(adj.T > adj)

    features = normalize(features)
    adj = normalize(adj + sp.eye(adj.shape[0]))

    idx_train = range(8)
    idx_val = range(8, 12)
    idx_test = range(12, 18)

    features = torch.FloatTensor(np.array(features.todense()))
    labels = torch.LongTensor(np.where(labels)[1])
    adj = sparse_mx_to_torch_sparse_tensor(adj)

    idx_train = torch.LongTensor(idx_train)
    idx_val = torch.LongTensor(idx_val)
    idx_test = torch.LongTensor(idx_test)

    return adj, features, labels, idx_train, idx_val, idx_test


def normalize(mx):
    """Row-normalize sparse matrix"""
    rowsum = np.array(mx.sum(1))
    r_inv = np.power(rowsum, -1).flatten()
    r_inv[np.isinf(r_inv)] = 0.
    r_mat_inv = sp.diags(r_inv)
    mx = r_mat_inv.dot(mx)
    return mx


def accuracy(output, labels):
    preds = output.max(1)[1].type_as(labels)
    correct = preds.eq(labels).double()
    correct = correct.sum()
    return correct / len(labels)


def sparse_mx_to_torch_sparse_tensor(sparse_mx):
    """Convert a scipy sparse matrix to a torch sparse tensor."""
    sparse_mx = sparse_mx.tocoo().astype(np.float32)
    indices = torch.from_numpy(
        np.vstack((sparse_mx.row, sparse_mx.col)).astype(np.int64))
    values = torch.from_numpy(sparse_mx.data)
    shape = torch.Size(sparse_mx.shape)
    return torch.sparse.FloatTensor(indices, values, shape)


# -- pygcn/layers.py --
class GraphConvolution(Module):
    """
    Simple GCN layer, similar to https://arxiv.org/abs/1609.02907
    """

    def __init__(self, in_features, out_features, bias=True):
        super(GraphConvolution, self).__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = Parameter(torch.FloatTensor(in_features, out_features))
        if bias:
            self.bias = Parameter(torch.FloatTensor(out_features))
        else:
            self.register_parameter('bias', None)
        self.reset_parameters()

    def reset_parameters(self):
        stdv = 1. / math.sqrt(self.weight.size(1))
        self.weight.data.uniform_(-stdv, stdv)
        if self.bias is not None:
            self.bias.data.uniform_(-stdv, stdv)

    def forward(self, input, adj):
        support = torch.mm(input, self.weight)
        output = torch.spmm(adj, support)
        if self.bias is not None:
            return output + self.bias
        else:
            return output

    def __repr__(self):
        return self.__class__.__name__ + ' (' \\
               + str(self.in_features) + ' -> ' \\
               + str(self.out_features) + ')'


# -- pygcn/models.py --
class GCN(nn.Module):
    def __init__(self, nfeat, nhid, nclass, dropout):
        super(GCN, self).__init__()

        self.gc1 = GraphConvolution(nfeat, nhid)
        self.gc2 = GraphConvolution(nhid, nclass)
        self.dropout = dropout

    def forward(self, x, adj):
        x = F.relu(self.gc1(x, adj))
        x = F.dropout(x, self.dropout, training=self.training)
        x = self.gc2(x, adj)
        return F.log_softmax(x, dim=1)


# -- pygcn/train.py --
np.random.seed(args.seed)
torch.manual_seed(args.seed)

# Load data
adj, features, labels, idx_train, idx_val, idx_test = load_data(path=data_path)

# Model and optimizer
model = GCN(nfeat=features.shape[1],
            nhid=args.hidden,
            nclass=labels.max().item() + 1,
            dropout=args.dropout)
initialize(model)
print(model.gc1, model.gc2)
optimizer = optim.Adam(model.parameters(),
                       lr=args.lr, weight_decay=args.weight_decay)


def train(epoch):
    t = time.time()
    model.train()
    optimizer.zero_grad()
    output = model(features, adj)
    loss_train = F.nll_loss(output[idx_train], labels[idx_train])
    acc_train = accuracy(output[idx_train], labels[idx_train])
    loss_train.backward()
    optimizer.step()
    record.append(params_of(model))

    if not args.fastmode:
        # Evaluate validation set performance separately,
        # deactivates dropout during validation run.
        model.eval()
        output = model(features, adj)

    loss_val = F.nll_loss(output[idx_val], labels[idx_val])
    acc_val = accuracy(output[idx_val], labels[idx_val])
    record.append([loss_train.item(), acc_train.item(), loss_val.item(), acc_val.item()])
    print('Epoch: {:04d}'.format(epoch+1),
          'loss_train: {:.4f}'.format(loss_train.item()),
          'acc_train: {:.4f}'.format(acc_train.item()),
          'loss_val: {:.4f}'.format(loss_val.item()),
          'acc_val: {:.4f}'.format(acc_val.item()),
          'time: {:.4f}s'.format(time.time() - t))


def test():
    model.eval()
    output = model(features, adj)
    loss_test = F.nll_loss(output[idx_test], labels[idx_test])
    acc_test = accuracy(output[idx_test], labels[idx_test])
    record.append([loss_test.item(), acc_test.item()])
    print("Test set results:",
          "loss= {:.4f}".format(loss_test.item()),
          "accuracy= {:.4f}".format(acc_test.item()))


# Train model
t_total = time.time()
for epoch in range(args.epochs):
    train(epoch)
print("Optimization Finished!")
print("Total time elapsed: {:.4f}s".format(time.time() - t_total))

# Testing
test()
'''

PYGCN_STEPS = [
    (
        "\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nimport torch.optim as optim\n",
        "\nimport retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nimport retrograd.optim as optim\n",
    ),
    (
        "    loss_train.backward()\n    optimizer.step()\n",
        "    grads = loss_train.backward()\n    optimizer.step(grads)\n",
    ),
]


def _write_cora(directory, rng, nodes=18, features=10, citations=30):
    """A small graph in Cora's two files: ``<id> <0/1 words...> <label>`` and ``<cited>
    <citing>`` lines, the ids not in order."""
    ids = rng.permutation(1000)[:nodes] + 30
    labels = ["Theory", "Neural_Networks", "Rule_Learning"]
    with open(os.path.join(directory, "cora.content"), "w") as f:
        for i in range(nodes):
            words = (rng.uniform(size=features) < 0.3).astype(int)
            words[i % features] = 1
            f.write("\t".join([str(ids[i]), *map(str, words), labels[rng.integers(0, 3)]]) + "\n")
    with open(os.path.join(directory, "cora.cites"), "w") as f:
        for _ in range(citations):
            a, b = rng.choice(nodes, 2, replace=False)
            f.write(f"{ids[a]}\t{ids[b]}\n")


def test_pygcn_trains_as_torch(tmp_path):
    _write_cora(tmp_path, np.random.default_rng(8902))
    initialize = initializer()
    records, logs = [], []
    for lib in (torch, rg):
        record = []
        text = (
            PYGCN_SOURCE
            if lib is torch
            else port(PYGCN_SOURCE, PYGCN_STEPS).replace("from torch.", "from retrograd.")
        )
        args = types.SimpleNamespace(
            seed=42, hidden=5, dropout=0.0, lr=0.05, weight_decay=5e-4, fastmode=False, epochs=4
        )
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            run_source(
                text,
                lib,
                record=record,
                args=args,
                data_path=f"{tmp_path}/",
                initialize=initialize,
                params_of=params_of,
            )
        records.append(record)
        # the timings masked, and the numbers (printed to 4 digits, the last of which may
        # round either way): the records hold them
        logs.append(re.sub(r"\d+\.\d+", "#", out.getvalue()))
    theirs, ours = records
    assert "Epoch: 0004 loss_train: # acc_train: #" in logs[0] and "Test set results:" in logs[0]
    assert logs[1] == logs[0]
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


def test_pygcn_sparse_tensor_line_builds_torchs_sparse_adjacency():
    """The line once refused: ``torch.sparse.FloatTensor(indices, values, shape)`` is the
    sparse COO tensor torch's is (its indices, values, size and dtype), and ``torch.spmm``
    of it is torch's product."""
    indices, values = [[0, 1, 1], [1, 0, 2]], [1.0, 2.0, -0.5]
    ours = rg.sparse.FloatTensor(rg.tensor(indices), rg.tensor(values), rg.Size([2, 3]))
    theirs = torch.sparse.FloatTensor(
        torch.tensor(indices), torch.tensor(values), torch.Size([2, 3])
    )
    assert ours.is_sparse and ours.dtype == "float32" and tuple(ours.shape) == (2, 3)
    assert isinstance(ours, rg.sparse.FloatTensor) and not isinstance(
        rg.tensor(values), rg.sparse.FloatTensor
    )
    np.testing.assert_array_equal(ours.to_dense().numpy(), theirs.to_dense().numpy())
    support = np.arange(6.0, dtype=np.float32).reshape(3, 2)
    np.testing.assert_allclose(
        rg.spmm(ours, rg.tensor(support)).numpy(), torch.spmm(theirs, torch.tensor(support)).numpy()
    )


# -- a Gaussian process -------------------------------------------------------------------------
GP_SOURCE = '''
import math
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)


# -- gpytorch/utils/cholesky.py (gpytorch 0.3) --
class NanError(RuntimeError):
    pass


def psd_safe_cholesky(A, upper=False, out=None, jitter=None):
    """Compute the Cholesky decomposition of A. If A is only p.s.d, add a small jitter to the diagonal.
    Args:
        :attr:`A` (Tensor):
            The tensor to compute the Cholesky decomposition of
        :attr:`upper` (bool, optional):
            See torch.cholesky
        :attr:`out` (Tensor, optional):
            See torch.cholesky
        :attr:`jitter` (float, optional):
            The jitter to add to the diagonal of A in case A is only p.s.d. If omitted, chosen
            as 1e-6 (float) or 1e-8 (double)
    """
    try:
        L = torch.cholesky(A, upper=upper, out=out)
        return L
    except RuntimeError as e:
        isnan = torch.isnan(A)
        if isnan.any():
            raise NanError(
                f"cholesky_cpu: {isnan.sum().item()} of {A.numel()} elements of the {A.shape} tensor are NaN."
            )

        if jitter is None:
            jitter = 1e-6 if A.dtype == torch.float32 else 1e-8
        Aprime = A.clone()
        jitter_prev = 0
        for i in range(3):
            jitter_new = jitter * (10 ** i)
            Aprime.diagonal(dim1=-2, dim2=-1).add_(jitter_new - jitter_prev)
            jitter_prev = jitter_new
            try:
                L = torch.cholesky(Aprime, upper=upper, out=out)
                warnings.warn(f"A not p.d., added jitter of {jitter_new} to the diagonal", RuntimeWarning)
                return L
            except RuntimeError:
                continue
        raise e


# -- the model, written by hand --
class BatchedExactGP(nn.Module):
    """Independent exact GPs, one per output task, sharing the inputs."""

    def __init__(self, train_x, train_y, jitter=1e-6):
        super().__init__()
        self.train_x = train_x                      # n x d
        self.train_y = train_y                      # t x n
        num_tasks = train_y.shape[0]
        self.raw_lengthscale = nn.Parameter(torch.zeros(num_tasks, 1, train_x.shape[-1]))
        self.raw_outputscale = nn.Parameter(torch.zeros(num_tasks, 1, 1))
        self.log_noise = nn.Parameter(torch.full((num_tasks, 1, 1), -2.0))
        self.mean_constant = nn.Parameter(torch.zeros(num_tasks, 1))
        self.jitter = jitter

    @property
    def lengthscale(self):
        return F.softplus(self.raw_lengthscale) + 1e-4

    @property
    def outputscale(self):
        return F.softplus(self.raw_outputscale)

    @property
    def noise(self):
        return self.log_noise.exp()

    def kernel(self, x1, x2):
        x1 = x1.unsqueeze(0) / self.lengthscale      # t x n x d
        x2 = x2.unsqueeze(0) / self.lengthscale      # t x m x d
        sq = (x1 ** 2).sum(-1, keepdim=True) + (x2 ** 2).sum(-1).unsqueeze(-2) - 2 * x1 @ x2.transpose(-1, -2)
        return self.outputscale * torch.exp(-0.5 * sq.clamp_min(0))

    def _cholesky(self):
        n = self.train_x.shape[0]
        K = self.kernel(self.train_x, self.train_x)
        K = K + (self.noise + self.jitter) * torch.eye(n, dtype=K.dtype)
        return torch.linalg.cholesky(K)

    def negative_marginal_log_likelihood(self):
        n = self.train_x.shape[0]
        L = self._cholesky()
        resid = (self.train_y - self.mean_constant).unsqueeze(-1)      # t x n x 1
        alpha = torch.cholesky_solve(resid, L)
        data_fit = 0.5 * (resid * alpha).sum(dim=(-2, -1))
        logdet = torch.log(torch.diagonal(L, dim1=-2, dim2=-1)).sum(-1)
        nll = data_fit + logdet + 0.5 * n * math.log(2 * math.pi)
        return nll.sum() / n

    @torch.no_grad()
    def predict(self, test_x):
        L = self._cholesky()
        resid = (self.train_y - self.mean_constant).unsqueeze(-1)
        alpha = torch.cholesky_solve(resid, L)
        Ks = self.kernel(self.train_x, test_x)                       # t x n x m
        mean = (Ks.transpose(-1, -2) @ alpha).squeeze(-1) + self.mean_constant
        v = torch.linalg.solve_triangular(L, Ks, upper=False)
        var = self.outputscale.squeeze(-1) - v.pow(2).sum(-2)
        return mean, var.clamp_min(1e-10)

    @torch.no_grad()
    def posterior_covariance(self, test_x):
        L = self._cholesky()
        Ks = self.kernel(self.train_x, test_x)
        v = torch.linalg.solve_triangular(L, Ks, upper=False)
        return self.kernel(test_x, test_x) - v.transpose(-1, -2) @ v


train_x = torch.tensor(data["x"])
train_y = torch.tensor(data["y"])
test_x = torch.tensor(data["test_x"])

model = BatchedExactGP(train_x, train_y)
optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
for i in range(args.adam_steps):
    optimizer.zero_grad()
    loss = model.negative_marginal_log_likelihood()
    loss.backward()
    optimizer.step()
    record.append(loss.item())
    record.append(params_of(model))

lbfgs = torch.optim.LBFGS(model.parameters(), lr=1, max_iter=args.lbfgs_iters, history_size=5, line_search_fn=args.line_search)


def closure():
    lbfgs.zero_grad()
    loss = model.negative_marginal_log_likelihood()
    loss.backward()
    return loss


for i in range(args.lbfgs_steps):
    loss = lbfgs.step(closure)
    record.append(loss.item())
    record.append(params_of(model))
record.append(lbfgs.state[lbfgs._params[0]]["n_iter"])

mean, var = model.predict(test_x)
record.append(mean.numpy().copy())
record.append(var.numpy().copy())
lower, upper = mean - 2 * var.sqrt(), mean + 2 * var.sqrt()
record.append((upper - lower).numpy().copy())
dense_x = torch.linspace(-0.01, 0.01, 8).unsqueeze(-1).repeat(1, 2)
cov = model.posterior_covariance(dense_x)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    L_post = psd_safe_cholesky(cov)
record.append([str(w.message) for w in caught if w.category is RuntimeWarning])
record.append(bool(((L_post @ L_post.transpose(-1, -2)) - cov).abs().max() < 1e-6))
record.append({"lengthscale": model.lengthscale.detach().numpy().copy(), "noise": model.noise.detach().numpy().copy()})
'''

GP_STEPS = [
    (
        "\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "\nimport retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\n",
    ),
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
    (
        "    loss.backward()\n    return loss\n",
        "    grads = loss.backward()\n    return loss, grads\n",
    ),
]


@pytest.mark.parametrize("line_search", ["strong_wolfe", None])
def test_exact_gaussian_process_fits_and_predicts_as_torch(default_dtype, line_search):
    rng = np.random.default_rng(8903)
    x = rng.uniform(-2, 2, (12, 2))
    y = np.stack(
        [
            np.sin(2 * x[:, 0]) + 0.1 * rng.standard_normal(12),
            x[:, 1] ** 2 - 1 + 0.1 * rng.standard_normal(12),
        ]
    )
    data = {"x": x, "y": y, "test_x": rng.uniform(-2, 2, (5, 2))}
    records = []
    for lib in (torch, rg):
        record = []
        text = GP_SOURCE if lib is torch else port(GP_SOURCE, GP_STEPS)
        args = types.SimpleNamespace(
            adam_steps=3, lbfgs_iters=6, lbfgs_steps=2, line_search=line_search
        )
        run_source(text, lib, record=record, data=data, args=args, params_of=params_of)
        records.append(record)
    theirs, ours = records
    # psd_safe_cholesky's first factorization failed, the first jitter sufficed
    assert theirs[-3] == ["A not p.d., added jitter of 1e-08 to the diagonal"]
    assert theirs[-2] is True
    assert_records_agree(ours, theirs, rtol=1e-7, atol=1e-9)


# -- A3C ------------------------------------------------------------------------------------------
A3C_SOURCE = '''
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.multiprocessing as mp


# -- model.py --
def normalized_columns_initializer(weights, std=1.0):
    out = torch.randn(weights.size())
    out *= std / torch.sqrt(out.pow(2).sum(1, keepdim=True))
    return out


def weights_init(m):
    classname = m.__class__.__name__
    if classname.find('Conv') != -1:
        weight_shape = list(m.weight.data.size())
        fan_in = np.prod(weight_shape[1:4])
        fan_out = np.prod(weight_shape[2:4]) * weight_shape[0]
        w_bound = np.sqrt(6. / (fan_in + fan_out))
        m.weight.data.uniform_(-w_bound, w_bound)
        m.bias.data.fill_(0)
    elif classname.find('Linear') != -1:
        weight_shape = list(m.weight.data.size())
        fan_in = weight_shape[1]
        fan_out = weight_shape[0]
        w_bound = np.sqrt(6. / (fan_in + fan_out))
        m.weight.data.uniform_(-w_bound, w_bound)
        m.bias.data.fill_(0)


class ActorCritic(torch.nn.Module):
    def __init__(self, num_inputs, action_space):
        super(ActorCritic, self).__init__()
        self.conv1 = nn.Conv2d(num_inputs, 32, 3, stride=2, padding=1)
        self.conv2 = nn.Conv2d(32, 32, 3, stride=2, padding=1)
        self.conv3 = nn.Conv2d(32, 32, 3, stride=2, padding=1)
        self.conv4 = nn.Conv2d(32, 32, 3, stride=2, padding=1)

        self.lstm = nn.LSTMCell(32 * 3 * 3, 256)

        num_outputs = action_space.n
        self.critic_linear = nn.Linear(256, 1)
        self.actor_linear = nn.Linear(256, num_outputs)

        self.apply(weights_init)
        self.actor_linear.weight.data = normalized_columns_initializer(
            self.actor_linear.weight.data, 0.01)
        self.actor_linear.bias.data.fill_(0)
        self.critic_linear.weight.data = normalized_columns_initializer(
            self.critic_linear.weight.data, 1.0)
        self.critic_linear.bias.data.fill_(0)

        self.lstm.bias_ih.data.fill_(0)
        self.lstm.bias_hh.data.fill_(0)

        self.train()

    def forward(self, inputs):
        inputs, (hx, cx) = inputs
        x = F.elu(self.conv1(inputs))
        x = F.elu(self.conv2(x))
        x = F.elu(self.conv3(x))
        x = F.elu(self.conv4(x))

        x = x.view(-1, 32 * 3 * 3)
        hx, cx = self.lstm(x, (hx, cx))
        x = hx

        return self.critic_linear(x), self.actor_linear(x), (hx, cx)


# -- my_optim.py --
class SharedAdam(optim.Adam):
    """Implements Adam algorithm with shared states.
    """

    def __init__(self,
                 params,
                 lr=1e-3,
                 betas=(0.9, 0.999),
                 eps=1e-8,
                 weight_decay=0):
        super(SharedAdam, self).__init__(params, lr, betas, eps, weight_decay)

        for group in self.param_groups:
            for p in group['params']:
                state = self.state[p]
                state['step'] = torch.zeros(1)
                state['exp_avg'] = p.data.new().resize_as_(p.data).zero_()
                state['exp_avg_sq'] = p.data.new().resize_as_(p.data).zero_()

    def share_memory(self):
        for group in self.param_groups:
            for p in group['params']:
                state = self.state[p]
                state['step'].share_memory_()
                state['exp_avg'].share_memory_()
                state['exp_avg_sq'].share_memory_()

    def step(self, closure=None):
        """Performs a single optimization step.
        Arguments:
            closure (callable, optional): A closure that reevaluates the model
                and returns the loss.
        """
        loss = None
        if closure is not None:
            loss = closure()

        for group in self.param_groups:
            for p in group['params']:
                if p.grad is None:
                    continue
                grad = p.grad.data
                state = self.state[p]

                exp_avg, exp_avg_sq = state['exp_avg'], state['exp_avg_sq']
                beta1, beta2 = group['betas']

                state['step'] += 1

                if group['weight_decay'] != 0:
                    grad = grad.add(group['weight_decay'], p.data)

                # Decay the first and second moment running average coefficient
                exp_avg.mul_(beta1).add_(1 - beta1, grad)
                exp_avg_sq.mul_(beta2).addcmul_(1 - beta2, grad, grad)

                denom = exp_avg_sq.sqrt().add_(group['eps'])

                bias_correction1 = 1 - beta1 ** state['step'].item()
                bias_correction2 = 1 - beta2 ** state['step'].item()
                step_size = group['lr'] * math.sqrt(
                    bias_correction2) / bias_correction1

                p.data.addcdiv_(-step_size, exp_avg, denom)

        return loss


# -- train.py --
def ensure_shared_grads(model, shared_model):
    for param, shared_param in zip(model.parameters(),
                                   shared_model.parameters()):
        if shared_param.grad is not None:
            return
        shared_param._grad = param.grad


def train(rank, args, shared_model, counter, lock, optimizer=None):
    torch.manual_seed(args.seed + rank)

    env = create_atari_env(args.env_name)
    env.seed(args.seed + rank)

    model = ActorCritic(env.observation_space.shape[0], env.action_space)

    if optimizer is None:
        optimizer = optim.Adam(shared_model.parameters(), lr=args.lr)

    model.train()

    state = env.reset()
    state = torch.from_numpy(state)
    done = True

    episode_length = 0
    for update in range(args.num_updates):
        # Sync with the shared model
        model.load_state_dict(shared_model.state_dict())
        if done:
            cx = torch.zeros(1, 256)
            hx = torch.zeros(1, 256)
        else:
            cx = cx.detach()
            hx = hx.detach()

        values = []
        log_probs = []
        rewards = []
        entropies = []

        for step in range(args.num_steps):
            episode_length += 1
            value, logit, (hx, cx) = model((state.unsqueeze(0),
                                            (hx, cx)))
            prob = F.softmax(logit, dim=-1)
            log_prob = F.log_softmax(logit, dim=-1)
            entropy = -(log_prob * prob).sum(1, keepdim=True)
            entropies.append(entropy)

            action = prob.multinomial(num_samples=1).detach()
            log_prob = log_prob.gather(1, action)

            state, reward, done, _ = env.step(action.numpy())
            done = done or episode_length >= args.max_episode_length
            reward = max(min(reward, 1), -1)

            with lock:
                counter.value += 1

            if done:
                episode_length = 0
                state = env.reset()

            state = torch.from_numpy(state)
            values.append(value)
            log_probs.append(log_prob)
            rewards.append(reward)

            if done:
                break

        R = torch.zeros(1, 1)
        if not done:
            value, _, _ = model((state.unsqueeze(0), (hx, cx)))
            R = value.detach()

        values.append(R)
        policy_loss = 0
        value_loss = 0
        gae = torch.zeros(1, 1)
        for i in reversed(range(len(rewards))):
            R = args.gamma * R + rewards[i]
            advantage = R - values[i]
            value_loss = value_loss + 0.5 * advantage.pow(2)

            # Generalized Advantage Estimation
            delta_t = rewards[i] + args.gamma * \\
                values[i + 1] - values[i]
            gae = gae * args.gamma * args.gae_lambda + delta_t

            policy_loss = policy_loss - \\
                log_probs[i] * gae.detach() - args.entropy_coef * entropies[i]

        optimizer.zero_grad()

        (policy_loss + args.value_loss_coef * value_loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)

        ensure_shared_grads(model, shared_model)
        optimizer.step()
        record.append([policy_loss.item(), value_loss.item(), len(rewards)])
        record.append(params_of(shared_model))


# -- main.py, one worker run in this process --
torch.manual_seed(args.seed)
env = create_atari_env(args.env_name)
shared_model = ActorCritic(
    env.observation_space.shape[0], env.action_space)
initialize(shared_model)
shared_model.share_memory()

if args.no_shared:
    optimizer = None
else:
    optimizer = SharedAdam(shared_model.parameters(), lr=args.lr)
    optimizer.share_memory()

counter = mp.Value('i', 0)
lock = mp.Lock()
train(0, args, shared_model, counter, lock, optimizer)
record.append(counter.value)
if optimizer is not None:
    record.append([optimizer.state[p]['step'].item() for p in shared_model.parameters()][:3])
    record.append({str(i): optimizer.state[p]['exp_avg_sq'].numpy().copy() for i, p in enumerate(shared_model.parameters()) if i > 7})
'''

A3C_STEPS = [
    (
        "\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nimport torch.optim as optim\nimport torch.multiprocessing as mp\n",
        "\nimport retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nimport retrograd.optim as optim\nimport retrograd.multiprocessing as mp\n",
    ),
    # share_memory: refused by design (no tensor is shared between processes)
    ("initialize(shared_model)\nshared_model.share_memory()\n", "initialize(shared_model)\n"),
    ("    optimizer.share_memory()\n", ""),
    ("    def step(self, closure=None):", "    def step(self, grads, closure=None):"),
    ("                if p.grad is None:", "                if p.grad(grads) is None:"),
    ("                grad = p.grad.data", "                grad = p.grad(grads).data"),
    (
        "def ensure_shared_grads(model, shared_model):",
        "def ensure_shared_grads(model, shared_model, grads):",
    ),
    (
        "        if shared_param.grad is not None:",
        "        if shared_param.grad(grads) is not None:",
    ),
    (
        "        shared_param._grad = param.grad",
        "        shared_param.grad_replace(grads, param.grad(grads))",
    ),
    (
        "    episode_length = 0\n    for update",
        "    episode_length = 0\n    grads = None\n    for update",
    ),
    (
        "        optimizer.zero_grad()\n\n        (policy_loss + args.value_loss_coef * value_loss).backward()\n",
        "        if grads is not None:  # optimizer.zero_grad(): the shared model's gradients to None\n"
        "            for p in shared_model.parameters():\n"
        "                p.grad_remove(grads)\n\n"
        "        g = (policy_loss + args.value_loss_coef * value_loss).backward()\n"
        "        grads = g if grads is None else grads + g\n",
    ),
    (
        "clip_grad_norm_(model.parameters(), args.max_grad_norm)",
        "clip_grad_norm_(grads, model.parameters(), args.max_grad_norm)",
    ),
    (
        "        ensure_shared_grads(model, shared_model)\n        optimizer.step()",
        "        ensure_shared_grads(model, shared_model, grads)\n        optimizer.step(grads)",
    ),
]


class _Space:
    def __init__(self, shape=None, n=None):
        self.shape, self.n = shape, n


class _ToyAtari:
    """A 42x42 one-channel screen (``create_atari_env``'s frames) with a paddle the agent
    moves left, right or not, towards a target; episodes of 7 steps."""

    def __init__(self):
        self.observation_space, self.action_space = _Space((1, 42, 42)), _Space(n=3)

    def seed(self, seed):
        self.rng = np.random.default_rng(seed)

    def reset(self):
        self.pos, self.t, self.target = 20, 0, int(self.rng.integers(4, 38))
        return self._frame()

    def _frame(self):
        frame = np.zeros((1, 42, 42), np.float32)
        frame[0, 30:34, self.pos : self.pos + 4] = 1.0
        frame[0, 4:8, self.target : self.target + 4] = 0.5
        return frame

    def step(self, action):
        self.pos = int(np.clip(self.pos + (int(np.asarray(action).reshape(-1)[0]) - 1) * 3, 0, 38))
        self.t += 1
        distance = abs(self.pos - self.target)
        reward = 2.0 if distance < 3 else -0.01 * distance
        return self._frame(), reward, self.t >= 7, {}


class _SharedMultinomial:
    """``Tensor.multinomial`` of a library drawing from one seeded stream (the inverse of
    the rows' cumulative sums), so both runs take the same actions."""

    def __init__(self, lib, seed):
        self.lib, self.rng = lib, np.random.default_rng(seed)

    def __enter__(self):
        lib, rng = self.lib, self.rng

        def multinomial(probs, num_samples=1, replacement=False, generator=None):
            p = np.asarray(probs.detach().numpy(), np.float64)
            cumulative = np.cumsum(p / p.sum(-1, keepdims=True), -1)
            u = rng.uniform(size=(*p.shape[:-1], num_samples))
            index = (u[..., :, None] > cumulative[..., None, :]).sum(-1)
            return lib.tensor(np.minimum(index, p.shape[-1] - 1), dtype=lib.int64)

        self.saved = lib.Tensor.multinomial
        lib.Tensor.multinomial = multinomial
        return self

    def __exit__(self, *exc):
        self.lib.Tensor.multinomial = self.saved
        return False


@pytest.mark.parametrize("no_shared", [False, True])
def test_a3c_worker_trains_the_shared_model_as_torch(no_shared):
    initialize = initializer()
    records = []
    for lib in (torch, rg):
        record = []
        text = A3C_SOURCE if lib is torch else port(A3C_SOURCE, A3C_STEPS)
        args = types.SimpleNamespace(
            seed=1, env_name="PongDeterministic-v4", lr=0.001, gamma=0.99, gae_lambda=1.0,
            entropy_coef=0.01, value_loss_coef=0.5, max_grad_norm=50, num_steps=5,
            max_episode_length=1000000, no_shared=no_shared, num_updates=3,
        )  # fmt: skip
        with SharedDraws(lib, 8904), _SharedMultinomial(lib, 8904):
            run_source(
                text,
                lib,
                record=record,
                args=args,
                create_atari_env=lambda name: _ToyAtari(),
                initialize=initialize,
                params_of=params_of,
            )
        records.append(record)
    theirs, ours = records
    assert [r[2] for r in theirs[0:6:2]] == [5, 2, 5]  # rollouts cut by the episode's end
    assert theirs[6] == 12  # the shared counter
    # Adam's first steps follow the rounding noise of near-zero gradients: atol of 1% of lr
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-5)
