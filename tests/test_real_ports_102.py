# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- sliced score matching as ermongroup/sliced_score_matching writes it (``losses/
  sliced_sm.py``'s ``sliced_score_estimation_vr``: ``dup_samples.requires_grad_(True)``,
  ``torch.randn_like``, the Hutchinson term by ``autograd.grad(gradv, dup_samples,
  create_graph=True)``), beside the same objective with the Jacobian-vector product taken
  forward (``torch.autograd.forward_ad``'s ``dual_level``/``make_dual``/``unpack_dual``, as
  later score-matching code writes it), each training its own copy of the score network with
  Adam. retrograd's ``unpack_dual`` gave a tangent cut from the graph, so the forward-mode
  objective's gradient missed its whole Hutchinson term (torch's tangent is differentiable in
  reverse mode).
- Megatron-LM's fused bias-GeLU (``megatron/core/fusions/fused_bias_gelu.py``: ``bias_gelu``,
  ``bias_gelu_back`` with its ``0.1070322243`` constant, the backward returning ``tmp, tmp``
  for an input and a broadcast bias) registered as a ``torch.library.custom_op`` with
  ``register_fake`` and ``register_autograd`` (the 2024 form of its ``GeLUFunction``), in
  ``ParallelMLP``'s ``bias_gelu_fusion`` path (``skip_bias_add`` linears) trained with AdamW and
  ``clip_grad_norm_``, its FLOPs counted by ``torch.utils.flop_counter.FlopCounterMode``.
- CRNN for OCR as meijieru/crnn.pytorch writes it (``models/crnn.py``'s ``CRNN`` with its
  ``convRelu`` closure, ``MaxPool2d((2, 2), (2, 1), (0, 1))`` and ``BidirectionalLSTM``;
  ``utils.py``'s ``strLabelConverter`` (``torch.IntTensor`` of Python lists, the greedy
  ``decode`` indexing a string by 0-d tensors) and ``loadData``; ``train.py``'s
  ``weights_init`` by ``m.weight.data.normal_``, ``Variable``s and ``trainBatch`` with
  ``CTCLoss(zero_infinity=True)`` on the log-softmax, the ``--adadelta`` optimizer), smaller
  (channels 4 and 8 where it has 64 to 512, 32x16 images). ``loadData``'s ``v.data.resize_(data.size())
  .copy_(data)`` resizes only the ``.data`` alias in today's torch (``text`` keeps its 20
  elements and CTC refuses it), so it resizes ``v`` under ``no_grad`` here; retrograd refused
  the alias's ``resize_`` outright, where torch shrinks it within the storage (checked
  apart).
- torchtune's LoRA on a packed batch (``modules/peft/lora.py``'s ``LoRALinear`` with its
  ``adapter_params``, ``modules/peft/_utils.py``'s ``get_adapter_params``/
  ``set_trainable_params``, ``modules/attention_utils.py``'s ``_get_document_ids_from_seq_lens``
  (``torch.full((seq_len,), ...)`` of 0-d tensors), ``packed_block_causal_mask``'s
  document-causal ``mask_mod`` for ``create_block_mask``, ``create_block_causal_mask``'s
  ``torch.block_diag`` of ``tril``s, and ``_sdpa_or_flex_attention``'s ``_attention_call``),
  q/v adapters over a frozen attention trained with AdamW: retrograd's flex path against
  torch's SDPA path (torch's CPU flex_attention has no backward), and both SDPA paths.
- gpt-fast's inference (``model.py``'s ``KVCache`` written by ``k_out[:, :, input_pos] =
  k_val``, ``setup_caches``, ``causal_mask[None, None, input_pos]``, ``precompute_freqs_cis``'s
  ``torch.polar`` and ``apply_rotary_emb``, grouped-query heads by ``repeat_interleave``;
  ``generate.py``'s ``prefill`` and ``decode_n_tokens`` with ``input_pos += 1``, greedy where it
  samples), then the whole sequence's forward and a chunked prefill's query block against the
  cache with ``torch.nn.attention.bias.causal_lower_right``.

The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``,
``p.grad(grads)``, ``optimizer.step(grads)``, ``clip_grad_norm_(..., grads)``).
"""

from __future__ import annotations

import random

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


SLICED_SCORE_MATCHING_SOURCE = """
import torch
import torch.autograd as autograd
import torch.autograd.forward_ad as fwAD
import torch.nn as nn


def sliced_score_estimation_vr(score_net, samples, n_particles=1):
    dup_samples = samples.unsqueeze(0).expand(n_particles, *samples.shape).contiguous().view(-1, *samples.shape[1:])
    dup_samples.requires_grad_(True)
    vectors = torch.randn_like(dup_samples)

    grad1 = score_net(dup_samples)
    gradv = torch.sum(grad1 * vectors)
    grad2 = autograd.grad(gradv, dup_samples, create_graph=True)[0]

    grad1 = grad1.view(dup_samples.shape[0], -1)
    loss1 = torch.sum(grad1 * grad1, dim=-1) / 2.

    loss2 = torch.sum((vectors * grad2).view(dup_samples.shape[0], -1), dim=-1)

    loss1 = loss1.view(n_particles, -1).mean(dim=0)
    loss2 = loss2.view(n_particles, -1).mean(dim=0)

    loss = loss1 + loss2
    return loss.mean(), loss1.mean(), loss2.mean()


def sliced_score_estimation_forward(score_net, samples, n_particles=1):
    dup_samples = samples.unsqueeze(0).expand(n_particles, *samples.shape).contiguous().view(-1, *samples.shape[1:])
    vectors = torch.randn_like(dup_samples)
    with fwAD.dual_level():
        dual_samples = fwAD.make_dual(dup_samples, vectors)
        grad1, jvp = fwAD.unpack_dual(score_net(dual_samples))
    grad1 = grad1.view(dup_samples.shape[0], -1)
    loss1 = torch.sum(grad1 * grad1, dim=-1) / 2.
    loss2 = torch.sum((vectors * jvp).view(dup_samples.shape[0], -1), dim=-1)
    loss1 = loss1.view(n_particles, -1).mean(dim=0)
    loss2 = loss2.view(n_particles, -1).mean(dim=0)
    loss = loss1 + loss2
    return loss.mean(), loss1.mean(), loss2.mean()


class ScoreNet(nn.Module):
    def __init__(self, dim=2, hidden=16):
        super().__init__()
        self.main = nn.Sequential(nn.Linear(dim, hidden), nn.Softplus(), nn.Linear(hidden, hidden), nn.Softplus(), nn.Linear(hidden, dim))

    def forward(self, x):
        return self.main(x)


for estimator in (sliced_score_estimation_vr, sliced_score_estimation_forward):
    score_net = ScoreNet()
    initialize(score_net)
    optimizer = torch.optim.Adam(score_net.parameters(), lr=1e-2)
    for step in range(3):
        samples = torch.randn(8, 2) * 0.5 + 1.0
        loss, loss1, loss2 = estimator(score_net, samples, n_particles=2)
        optimizer.zero_grad()
        loss.backward()
        record.append([loss.item(), loss1.item(), loss2.item()])
        record.append({n: p.grad.numpy().copy() for n, p in score_net.named_parameters()})
        optimizer.step()
    record.append(params_of(score_net))
"""

SLICED_SCORE_MATCHING_STEPS = [
    (
        "import torch\nimport torch.autograd as autograd\nimport torch.autograd.forward_ad as fwAD\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.autograd as autograd\nimport retrograd.autograd.forward_ad as fwAD\nimport retrograd.nn as nn\n",
    ),
    (
        "        loss.backward()\n        record.append([loss.item(), loss1.item(), loss2.item()])\n        record.append({n: p.grad.numpy()",
        "        grads = loss.backward()\n        record.append([loss.item(), loss1.item(), loss2.item()])\n        record.append({n: p.grad(grads).numpy()",
    ),
    ("        optimizer.step()\n", "        optimizer.step(grads)\n"),
]


def test_sliced_score_matching_by_double_backward_and_by_forward_ad_as_torch(capsys):
    (theirs, ours), _ = runs_with_draws(
        SLICED_SCORE_MATCHING_SOURCE, SLICED_SCORE_MATCHING_STEPS, capsys, 10201,
        initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


def test_unpack_dual_tangent_records_only_when_something_requires_grad():
    import retrograd.autograd.forward_ad as fwAD  # noqa: N812 (torch's tutorial name)

    weight = rg.tensor([[1.0, 2.0], [0.5, -1.0]], requires_grad=True)
    x, v = rg.tensor([[0.3, -0.2]]), rg.tensor([[1.0, 0.0]])
    with fwAD.dual_level():
        dual = fwAD.make_dual(x, v)
        through_weight = fwAD.unpack_dual(rg.tanh(dual @ weight)).tangent
        constant = fwAD.unpack_dual(rg.tanh(dual * 2.0)).tangent
    assert through_weight.requires_grad and not constant.requires_grad
    np.testing.assert_allclose(
        constant.numpy(), 2.0 / np.cosh([[0.6, -0.4]]) ** 2 * [[1.0, 0.0]], rtol=1e-6
    )
    expected = (1.0 - np.tanh(x.numpy() @ weight.detach().numpy()) ** 2) * (
        v.numpy() @ weight.detach().numpy()
    )
    np.testing.assert_allclose(through_weight.detach().numpy(), expected, rtol=1e-6)


MEGATRON_BIAS_GELU_SOURCE = """
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

###### BIAS GELU FUSION/ NO AUTOGRAD ################
# 1/sqrt(2*pi)-> 0.3989423
# 1/sqrt(2)   -> 0.70710678
# sqrt(2/pi)  -> 0.79788456
# this function is tanh approximation of gelu
# actual gelu is:
# x * 0.5 * (1.0 + torch.erf(x * 0.70710678))


@torch.library.custom_op("megatron::bias_gelu", mutates_args=())
def bias_gelu(bias: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x = bias + y
    return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))


@bias_gelu.register_fake
def _(bias, y):
    return torch.empty_like(y)


# gradient of tanh approximation of gelu
# gradient of actual gelu is:
# 0.5 * (1. + torch.erf(x * 0.70710678)) + 0.3989423 * x * torch.exp(-0.5 * x * x)
def bias_gelu_back(g, bias, y):
    x = bias + y
    tanh_out = torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x))
    # sqrt(2/pi) * 3 * 0.044715 -> 0.1070322243
    ff = 0.5 * x * ((1 - tanh_out * tanh_out) * (0.79788456 + 0.1070322243 * x * x)) + 0.5 * (
        1 + tanh_out
    )
    return ff * g


def setup_context(ctx, inputs, output):
    bias, input = inputs
    ctx.save_for_backward(input, bias)


def backward(ctx, grad_output):
    input, bias = ctx.saved_tensors
    tmp = bias_gelu_back(grad_output, bias, input)
    return tmp, tmp


bias_gelu.register_autograd(backward, setup_context=setup_context)


def bias_gelu_impl(input, bias):
    return bias_gelu(bias, input)


class SkipBiasLinear(torch.nn.Module):
    # ColumnParallelLinear / RowParallelLinear on one rank with skip_bias_add=True
    def __init__(self, input_size, output_size):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(output_size, input_size))
        self.bias = torch.nn.Parameter(torch.zeros(output_size))
        torch.nn.init.normal_(self.weight, mean=0.0, std=0.02)

    def forward(self, input_):
        output = F.linear(input_, self.weight)
        return output, self.bias


class ParallelMLP(torch.nn.Module):
    def __init__(self, hidden_size, ffn_hidden_size):
        super().__init__()
        self.dense_h_to_4h = SkipBiasLinear(hidden_size, ffn_hidden_size)
        self.bias_gelu_fusion = True
        self.activation_func = F.gelu
        self.dense_4h_to_h = SkipBiasLinear(ffn_hidden_size, hidden_size)

    def forward(self, hidden_states):
        # [s, b, 4hp]
        intermediate_parallel, bias_parallel = self.dense_h_to_4h(hidden_states)

        if self.bias_gelu_fusion:
            assert self.activation_func == F.gelu
            intermediate_parallel = bias_gelu_impl(intermediate_parallel, bias_parallel)
        else:
            if bias_parallel is not None:
                intermediate_parallel = intermediate_parallel + bias_parallel
            intermediate_parallel = self.activation_func(intermediate_parallel)

        # [s, b, h]
        output, output_bias = self.dense_4h_to_h(intermediate_parallel)
        return output, output_bias


def bias_dropout_add(x, bias, residual, prob, training):
    # type: (Tensor, Optional[Tensor], Tensor, float, bool) -> Tensor
    if bias is not None:
        x = x + bias
    out = torch.nn.functional.dropout(x, p=prob, training=training)
    out = residual + out
    return out


mlp = ParallelMLP(8, 32)
initialize(mlp)
with torch.no_grad():
    for p in mlp.parameters():
        p.add_(torch.randn(*p.shape) * 0.5)
optimizer = torch.optim.AdamW(mlp.parameters(), lr=1e-2, weight_decay=0.1)
for step in range(3):
    hidden_states = torch.randn(5, 2, 8)
    target = torch.randn(5, 2, 8)
    flop_counter = FlopCounterMode(display=False)
    with flop_counter:
        output, output_bias = mlp(hidden_states)
        output = bias_dropout_add(output, output_bias, hidden_states, 0.0, True)
        loss = F.mse_loss(output, target)
        optimizer.zero_grad()
        loss.backward()
    record.append(loss.item())
    record.append(flop_counter.get_total_flops())
    record.append({n: p.grad.numpy().copy() for n, p in mlp.named_parameters()})
    record.append(torch.nn.utils.clip_grad_norm_(mlp.parameters(), 1.0).item())
    optimizer.step()
    record.append(params_of(mlp))
"""

MEGATRON_BIAS_GELU_STEPS = [
    (
        "import torch\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn.functional as F\n",
    ),
    (
        "        loss.backward()\n    record.append(loss.item())\n    record.append(flop_counter.get_total_flops())\n    record.append({n: p.grad.numpy()",
        "        grads = loss.backward()\n    record.append(loss.item())\n    record.append(flop_counter.get_total_flops())\n    record.append({n: p.grad(grads).numpy()",
    ),
    ("clip_grad_norm_(mlp.parameters(), 1.0)", "clip_grad_norm_(grads, mlp.parameters(), 1.0)"),
    ("    optimizer.step()\n", "    optimizer.step(grads)\n"),
]


def test_megatron_fused_bias_gelu_custom_op_mlp_as_torch(capsys):
    (theirs, ours), _ = runs_with_draws(
        MEGATRON_BIAS_GELU_SOURCE, MEGATRON_BIAS_GELU_STEPS, capsys, 10202,
        initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


CRNN_SOURCE = """
import collections.abc
import random
import torch
import torch.nn as nn
from torch.autograd import Variable


class strLabelConverter(object):
    def __init__(self, alphabet, ignore_case=False):
        self._ignore_case = ignore_case
        if self._ignore_case:
            alphabet = alphabet.lower()
        self.alphabet = alphabet + '-'  # for `-1` index

        self.dict = {}
        for i, char in enumerate(alphabet):
            # NOTE: 0 is reserved for 'blank' required by wrap_ctc
            self.dict[char] = i + 1

    def encode(self, text):
        if isinstance(text, str):
            text = [
                self.dict[char.lower() if self._ignore_case else char]
                for char in text
            ]
            length = [len(text)]
        elif isinstance(text, collections.abc.Iterable):
            length = [len(s) for s in text]
            text = ''.join(text)
            text, _ = self.encode(text)
        return (torch.IntTensor(text), torch.IntTensor(length))

    def decode(self, t, length, raw=False):
        if length.numel() == 1:
            length = length[0]
            assert t.numel() == length, "text with length: {} does not match declared length: {}".format(t.numel(), length)
            if raw:
                return ''.join([self.alphabet[i - 1] for i in t])
            else:
                char_list = []
                for i in range(length):
                    if t[i] != 0 and (not (i > 0 and t[i - 1] == t[i])):
                        char_list.append(self.alphabet[t[i] - 1])
                return ''.join(char_list)
        else:
            # batch mode
            assert t.numel() == length.sum(), "texts with length: {} does not match declared length: {}".format(t.numel(), length.sum())
            texts = []
            index = 0
            for i in range(length.numel()):
                l = length[i]
                texts.append(
                    self.decode(
                        t[index:index + l], torch.IntTensor([l]), raw=raw))
                index += l
            return texts


def loadData(v, data):
    with torch.no_grad():
        v.resize_(data.size()).copy_(data)


class BidirectionalLSTM(nn.Module):

    def __init__(self, nIn, nHidden, nOut):
        super(BidirectionalLSTM, self).__init__()

        self.rnn = nn.LSTM(nIn, nHidden, bidirectional=True)
        self.embedding = nn.Linear(nHidden * 2, nOut)

    def forward(self, input):
        recurrent, _ = self.rnn(input)
        T, b, h = recurrent.size()
        t_rec = recurrent.view(T * b, h)

        output = self.embedding(t_rec)  # [T * b, nOut]
        output = output.view(T, b, -1)

        return output


class CRNN(nn.Module):

    def __init__(self, imgH, nc, nclass, nh, n_rnn=2, leakyRelu=False):
        super(CRNN, self).__init__()
        assert imgH % 16 == 0, 'imgH has to be a multiple of 16'

        ks = [3, 3, 3, 3, 3, 3, 2]
        ps = [1, 1, 1, 1, 1, 1, 0]
        ss = [1, 1, 1, 1, 1, 1, 1]
        nm = [4, 8, 8, 8, 8, 8, 8]

        cnn = nn.Sequential()

        def convRelu(i, batchNormalization=False):
            nIn = nc if i == 0 else nm[i - 1]
            nOut = nm[i]
            cnn.add_module('conv{0}'.format(i),
                           nn.Conv2d(nIn, nOut, ks[i], ss[i], ps[i]))
            if batchNormalization:
                cnn.add_module('batchnorm{0}'.format(i), nn.BatchNorm2d(nOut))
            if leakyRelu:
                cnn.add_module('relu{0}'.format(i),
                               nn.LeakyReLU(0.2, inplace=True))
            else:
                cnn.add_module('relu{0}'.format(i), nn.ReLU(True))

        convRelu(0)
        cnn.add_module('pooling{0}'.format(0), nn.MaxPool2d(2, 2))  # 64x16x64
        convRelu(1)
        cnn.add_module('pooling{0}'.format(1), nn.MaxPool2d(2, 2))  # 128x8x32
        convRelu(2, True)
        convRelu(3)
        cnn.add_module('pooling{0}'.format(2),
                       nn.MaxPool2d((2, 2), (2, 1), (0, 1)))  # 256x4x16
        convRelu(4, True)
        convRelu(5)
        cnn.add_module('pooling{0}'.format(3),
                       nn.MaxPool2d((2, 2), (2, 1), (0, 1)))  # 512x2x16
        convRelu(6, True)  # 512x1x16

        self.cnn = cnn
        self.rnn = nn.Sequential(
            BidirectionalLSTM(nm[6], nh, nh),
            BidirectionalLSTM(nh, nh, nclass))

    def forward(self, input):
        # conv features
        conv = self.cnn(input)
        b, c, h, w = conv.size()
        assert h == 1, "the height of conv must be 1"
        conv = conv.squeeze(2)
        conv = conv.permute(2, 0, 1)  # [w, b, c]

        # rnn features
        output = self.rnn(conv)

        return output


def weights_init(m):
    classname = m.__class__.__name__
    if classname.find('Conv') != -1:
        m.weight.data.normal_(0.0, 0.02)
    elif classname.find('BatchNorm') != -1:
        m.weight.data.normal_(1.0, 0.02)
        m.bias.data.fill_(0)


alphabet = '0123456789abc'
nclass = len(alphabet) + 1
converter = strLabelConverter(alphabet)
criterion = torch.nn.CTCLoss(zero_infinity=True)
crnn = CRNN(32, 1, nclass, 8)
crnn.apply(weights_init)
initialize(crnn)

image = torch.FloatTensor(4, 1, 32, 16)
text = torch.IntTensor(4 * 5)
length = torch.IntTensor(4)
image = Variable(image)
text = Variable(text)
length = Variable(length)

optimizer = torch.optim.Adadelta(crnn.parameters())  # train.py's --adadelta


def trainBatch(net, criterion, optimizer, data):
    cpu_images, cpu_texts = data
    batch_size = cpu_images.size(0)
    loadData(image, cpu_images)
    t, l = converter.encode(cpu_texts)
    loadData(text, t)
    loadData(length, l)

    preds = crnn(image).log_softmax(2)
    preds_size = Variable(torch.IntTensor([preds.size(0)] * batch_size))
    cost = criterion(preds, text, preds_size, length) / batch_size
    crnn.zero_grad()
    cost.backward()
    record.append({n: p.grad.numpy().copy() for n, p in crnn.named_parameters()})
    optimizer.step()
    return cost


for i in range(2):
    cpu_texts = [''.join(random.choice(alphabet) for _ in range(random.randint(1, 3))) for _ in range(4)]
    data = (torch.randn(4, 1, 32, 16), cpu_texts)
    cost = trainBatch(crnn, criterion, optimizer, data)
    record.append(cost.item())
    record.append(params_of(crnn))

crnn.eval()
with torch.no_grad():
    preds = crnn(image)
preds_size = Variable(torch.IntTensor([preds.size(0)] * 4))
_, preds = preds.max(2)
preds = preds.transpose(1, 0).contiguous().view(-1)
sim_preds = converter.decode(preds.data, preds_size.data, raw=False)
raw_preds = converter.decode(preds.data, preds_size.data, raw=True)
record.append(sim_preds)
record.append(raw_preds)
"""

CRNN_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nfrom torch.autograd import Variable\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nfrom retrograd.autograd import Variable\n",
    ),
    (
        "    cost.backward()\n    record.append({n: p.grad.numpy()",
        "    grads = cost.backward()\n    record.append({n: p.grad(grads).numpy()",
    ),
    ("    optimizer.step()\n", "    optimizer.step(grads)\n"),
]


def test_crnn_ctc_ocr_training_and_greedy_decoding_as_torch(capsys):
    (theirs, ours), _ = runs_with_draws(
        CRNN_SOURCE, CRNN_STEPS, capsys, 10203, initialize=initializer(), params_of=params_of
    )
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


def test_resize_of_an_alias_that_fits_keeps_aliasing_as_torchs():
    # crnn.pytorch's utils.loadData, `v.data.resize_(data.size()).copy_(data)`, and its
    # relatives: a view or a tensor with views shrunk in place, as torch keeps them
    def run(lib):
        v = lib.IntTensor(20).zero_()
        loaded = v.data.resize_(lib.IntTensor([1, 2, 3]).size()).copy_(lib.IntTensor([1, 2, 3]))
        a = lib.zeros(6)
        b = a.view(2, 3)
        b.resize_(4)
        b.fill_(1.0)
        c = lib.arange(6.0)
        view_of_c = c[1:]
        c.resize_(2)
        c.mul_(10)
        e = lib.arange(6.0)
        tail = e[2:]
        tail.resize_(2, 1)
        tail.add_(100)
        return [v.tolist(), loaded.tolist(), a.tolist(), list(b.shape), c.tolist(),
                view_of_c.tolist(), e.tolist(), tail.tolist()]  # fmt: skip

    assert run(rg) == run(torch)
    with pytest.raises(rg.errors.InvalidArgumentError, match="resize_"):
        rg.zeros(6)[1:].resize_(8)  # torch would reallocate the shared storage


TORCHTUNE_LORA_PACKED_SOURCE = """
import math
from typing import List
import torch
from torch import nn
import torch.nn.functional as F
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention


def _get_document_ids_from_seq_lens(seq_lens: List[torch.Tensor]) -> torch.Tensor:
    batch_size = len(seq_lens)
    batch_document_ids = []
    for sample_idx in range(batch_size):
        # We assume seq lens sum to max seq lens, so document_ids should be of
        # shape (max_seq_len, )
        document_ids = torch.cat(
            [
                torch.full((seq_len,), i, dtype=torch.long, device=seq_len.device)
                for i, seq_len in enumerate(seq_lens[sample_idx])
            ]
        )
        batch_document_ids.append(document_ids)
    batch_document_ids = torch.stack(batch_document_ids)
    return batch_document_ids


def create_block_causal_mask(seq_lens: List[torch.Tensor]) -> torch.Tensor:
    batch_block_attn_masks = []
    batch_size = len(seq_lens)
    for sample_idx in range(batch_size):
        block_attn_masks = [
            torch.tril(
                torch.ones(seq_len, seq_len, dtype=torch.bool, device=seq_len.device)
            )
            for i, seq_len in enumerate(seq_lens[sample_idx])
        ]

        batch_block_attn_masks.append(torch.block_diag(*block_attn_masks))
    return torch.stack(batch_block_attn_masks)


def packed_block_causal_mask(seq_lens: List[torch.Tensor]):
    if _SUPPORTS_FLEX_ATTENTION:
        document_ids = _get_document_ids_from_seq_lens(seq_lens)
        batch_size, max_seq_len = document_ids.shape

        # Instead of passing a tensor mask, flex attention requires a mask_mod function
        # that determines which elements of QK^T should be included in the attention
        # computation prior to the softmax. For sample packing, we need both the
        # logic for both causal mask and document mask. See PyTorch's official
        # blog post for more details: https://pytorch.org/blog/flexattention/#mask-mods
        def mask_mod(b, h, q_idx, kv_idx):
            causal_mask = q_idx >= kv_idx
            document_mask = document_ids[b, q_idx] == document_ids[b, kv_idx]
            return causal_mask & document_mask

        return create_block_mask(
            mask_mod,
            batch_size,
            None,
            max_seq_len,
            max_seq_len,
            device="cpu",
        )
    else:
        return create_block_causal_mask(seq_lens=seq_lens)


def _attention_call(q, k, v, mask, dropout_p, is_causal):
    # Flex attention uses the BlockMask
    # (https://github.com/pytorch/pytorch/blob/main/torch/nn/attention/flex_attention.py#L168)
    # instead of a traditional boolean tensor mask. If this is passed in,
    # we assume the user wants to use flex attention instead of traditional SDPA.
    # This will use flash attention under the hood with support for custom masks.
    # Currently, it is used when sample packing is enabled (see torchtune.datasets.PackedDataset)
    if isinstance(mask, BlockMask):
        if dropout_p > 0.0:
            raise ValueError(
                "Flex attention does not support dropout. Please set dropout to 0.0."
            )
        return flex_attention(q, k, v, block_mask=mask)
    # If mask is a standard boolean tensor or None, then use SDPA
    else:
        # shape: [b, 1, s, s]
        if mask is not None:
            mask = mask[:, None, :, :]

        # Flash attention from https://pytorch.org/blog/accelerating-large-language-models/
        return nn.functional.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=dropout_p,
            is_causal=is_causal,
        )


class LoRALinear(nn.Module):
    def __init__(self, in_dim: int, out_dim: int, rank: int, alpha: float, dropout: float = 0.0, use_bias: bool = False):
        super().__init__()
        self.in_dim = in_dim
        self.out_dim = out_dim
        self.rank = rank
        self.alpha = alpha
        self.use_bias = use_bias
        linear = nn.Linear(in_features=in_dim, out_features=out_dim, bias=self.use_bias)
        weight = linear.weight
        bias = linear.bias if self.use_bias else None
        self.disabled = False
        self.register_parameter("weight", nn.Parameter(weight))
        self.register_parameter(
            "bias", nn.Parameter(bias) if bias is not None else None
        )
        self.dropout = nn.Dropout(p=dropout) if dropout > 0.0 else nn.Identity()
        self.lora_a = nn.Linear(in_features=in_dim, out_features=rank, bias=False)
        self.lora_b = nn.Linear(in_features=rank, out_features=out_dim, bias=False)
        self.merged = False
        self.initialize_parameters()

    def initialize_parameters(self):
        # Initialize as in
        # https://github.com/microsoft/LoRA/blob/4c0333854cb905966f8cc4e9a74068c1e507c7b7/loralib/layers.py#L119
        nn.init.kaiming_uniform_(self.lora_a.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_b.weight)

    def adapter_params(self) -> List[str]:
        adapter_params = ["lora_a.weight", "lora_b.weight"]
        return adapter_params

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.linear(x, self.weight, self.bias)
        if self.disabled:
            return out
        lora_out = self.lora_a(self.dropout(x))
        lora_out = (self.alpha / self.rank) * self.lora_b(lora_out)
        return out + lora_out


class Attention(nn.Module):
    def __init__(self, embed_dim, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.q_proj = LoRALinear(embed_dim, embed_dim, rank=4, alpha=8.0)
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.v_proj = LoRALinear(embed_dim, embed_dim, rank=4, alpha=8.0)
        self.output_proj = nn.Linear(embed_dim, embed_dim, bias=False)

    def forward(self, x, mask=None):
        b, s_x, _ = x.shape
        q = self.q_proj(x).view(b, s_x, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s_x, self.num_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s_x, self.num_heads, self.head_dim).transpose(1, 2)
        output = _attention_call(q, k, v, mask=mask, dropout_p=0.0, is_causal=mask is None)
        output = output.transpose(1, 2).contiguous().view(b, s_x, -1)
        return self.output_proj(output)


def get_adapter_params(model: nn.Module):
    adapter_params = {}
    for k, v in model.named_modules():
        if hasattr(v, "adapter_params") and callable(v.adapter_params):
            current_adapter_params = v.adapter_params()
            for n, p in v.named_parameters(recurse=True):
                if n in current_adapter_params:
                    full_key = f"{k}.{n}" if k else n
                    adapter_params.update({full_key: p})
                    current_adapter_params.remove(n)
            assert current_adapter_params == [], f"Adapter params {current_adapter_params} not converted"
    return adapter_params


def set_trainable_params(model: nn.Module, adapter_params) -> None:
    for k, v in model.named_parameters():
        v.requires_grad_(k in adapter_params)


model = Attention(16, 2)
initialize(model)
with torch.no_grad():
    model.q_proj.lora_b.weight.copy_(torch.randn(16, 4))  # as if trained a while
    model.v_proj.lora_b.weight.copy_(torch.randn(16, 4))
adapter_params = get_adapter_params(model)
set_trainable_params(model, adapter_params)
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
seq_lens = [torch.tensor([3, 5, 4]), torch.tensor([7, 5])]
mask = packed_block_causal_mask(seq_lens)
for step in range(3):
    x = torch.randn(2, 12, 16)
    loss = model(x, mask=mask).pow(2).mean()
    loss.backward()
    record.append(loss.item())
    record.append({n: p.grad.numpy().copy() for n, p in adapter_params.items()})
    optimizer.step()
    optimizer.zero_grad()
record.append(params_of(model))
record.append(sorted(adapter_params))
"""

TORCHTUNE_LORA_PACKED_STEPS = [
    (
        "import torch\nfrom torch import nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nfrom retrograd import nn\nimport retrograd.nn.functional as F\n",
    ),
    (
        "    loss.backward()\n    record.append(loss.item())\n    record.append({n: p.grad.numpy()",
        "    grads = loss.backward()\n    record.append(loss.item())\n    record.append({n: p.grad(grads).numpy()",
    ),
    ("    optimizer.step()\n", "    optimizer.step(grads)\n"),
]


def test_torchtune_lora_on_a_packed_batch_flex_attention_as_torchs_block_causal_sdpa(capsys):
    # torch's CPU flex_attention has no backward: torch's run takes torchtune's SDPA path
    # (``create_block_causal_mask``'s ``block_diag`` of ``tril``s), retrograd's the flex one
    # (``create_block_mask`` of the ``mask_mod`` over ``document_ids``): they must agree
    (theirs, ours), _ = runs_with_draws(
        TORCHTUNE_LORA_PACKED_SOURCE, TORCHTUNE_LORA_PACKED_STEPS, capsys, 10204,
        initialize=initializer(), params_of=params_of,
        make__SUPPORTS_FLEX_ATTENTION=lambda lib: lib is rg,
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


def test_torchtune_block_causal_mask_sdpa_path_as_torch(capsys):
    (theirs, ours), _ = runs_with_draws(
        TORCHTUNE_LORA_PACKED_SOURCE, TORCHTUNE_LORA_PACKED_STEPS, capsys, 10205,
        initialize=initializer(), params_of=params_of, _SUPPORTS_FLEX_ATTENTION=False,
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


GPT_FAST_SOURCE = """
from dataclasses import dataclass
from typing import Optional
import torch
import torch.nn as nn
from torch import Tensor
from torch.nn import functional as F
from torch.nn.attention.bias import causal_lower_right


def find_multiple(n: int, k: int) -> int:
    if n % k == 0:
        return n
    return n + k - (n % k)


@dataclass
class ModelArgs:
    block_size: int = 16
    vocab_size: int = 32
    n_layer: int = 2
    n_head: int = 4
    dim: int = 16
    intermediate_size: int = None
    n_local_heads: int = 2
    head_dim: int = 4
    rope_base: float = 10000
    norm_eps: float = 1e-5

    def __post_init__(self):
        if self.n_local_heads == -1:
            self.n_local_heads = self.n_head
        if self.intermediate_size is None:
            hidden_dim = 4 * self.dim
            n_hidden = int(2 * hidden_dim / 3)
            self.intermediate_size = find_multiple(n_hidden, 8)
        self.head_dim = self.dim // self.n_head


class KVCache(nn.Module):
    def __init__(self, max_batch_size, max_seq_length, n_heads, head_dim, dtype=torch.bfloat16):
        super().__init__()
        cache_shape = (max_batch_size, n_heads, max_seq_length, head_dim)
        self.register_buffer('k_cache', torch.zeros(cache_shape, dtype=dtype))
        self.register_buffer('v_cache', torch.zeros(cache_shape, dtype=dtype))

    def update(self, input_pos, k_val, v_val):
        # input_pos: [S], k_val: [B, H, S, D]
        assert input_pos.shape[0] == k_val.shape[2]

        k_out = self.k_cache
        v_out = self.v_cache
        k_out[:, :, input_pos] = k_val
        v_out[:, :, input_pos] = v_val

        return k_out, v_out


class Transformer(nn.Module):
    def __init__(self, config: ModelArgs) -> None:
        super().__init__()
        self.config = config

        self.tok_embeddings = nn.Embedding(config.vocab_size, config.dim)
        self.layers = nn.ModuleList(TransformerBlock(config) for _ in range(config.n_layer))
        self.norm = RMSNorm(config.dim, eps=config.norm_eps)
        self.output = nn.Linear(config.dim, config.vocab_size, bias=False)

        self.freqs_cis: Optional[Tensor] = None
        self.mask_cache: Optional[Tensor] = None
        self.max_batch_size = -1
        self.max_seq_length = -1

    def setup_caches(self, max_batch_size, max_seq_length):
        if self.max_seq_length >= max_seq_length and self.max_batch_size >= max_batch_size:
            return
        head_dim = self.config.dim // self.config.n_head
        max_seq_length = find_multiple(max_seq_length, 8)
        self.max_seq_length = max_seq_length
        self.max_batch_size = max_batch_size
        dtype = self.output.weight.dtype
        for b in self.layers:
            b.attention.kv_cache = KVCache(max_batch_size, max_seq_length, self.config.n_local_heads, head_dim, dtype)

        self.freqs_cis = precompute_freqs_cis(self.config.block_size, self.config.dim // self.config.n_head, self.config.rope_base, dtype)
        self.causal_mask = torch.tril(torch.ones(self.max_seq_length, self.max_seq_length, dtype=torch.bool))

    def forward(self, idx: Tensor, input_pos: Optional[Tensor] = None) -> Tensor:
        assert self.freqs_cis is not None, "Caches must be initialized first"
        mask = self.causal_mask[None, None, input_pos]
        freqs_cis = self.freqs_cis[input_pos]
        x = self.tok_embeddings(idx)

        for i, layer in enumerate(self.layers):
            x = layer(x, input_pos, freqs_cis, mask)
        x = self.norm(x)
        logits = self.output(x)
        return logits


class TransformerBlock(nn.Module):
    def __init__(self, config: ModelArgs) -> None:
        super().__init__()
        self.attention = Attention(config)
        self.feed_forward = FeedForward(config)
        self.ffn_norm = RMSNorm(config.dim, config.norm_eps)
        self.attention_norm = RMSNorm(config.dim, config.norm_eps)

    def forward(self, x: Tensor, input_pos: Tensor, freqs_cis: Tensor, mask: Tensor) -> Tensor:
        h = x + self.attention(self.attention_norm(x), freqs_cis, mask, input_pos)
        out = h + self.feed_forward(self.ffn_norm(h))
        return out


class Attention(nn.Module):
    def __init__(self, config: ModelArgs):
        super().__init__()
        assert config.dim % config.n_head == 0

        total_head_dim = (config.n_head + 2 * config.n_local_heads) * config.head_dim
        # key, query, value projections for all heads, but in a batch
        self.wqkv = nn.Linear(config.dim, total_head_dim, bias=False)
        self.wo = nn.Linear(config.dim, config.dim, bias=False)
        self.kv_cache = None

        self.n_head = config.n_head
        self.head_dim = config.head_dim
        self.n_local_heads = config.n_local_heads
        self.dim = config.dim

    def forward(self, x: Tensor, freqs_cis: Tensor, mask: Tensor, input_pos: Optional[Tensor] = None) -> Tensor:
        bsz, seqlen, _ = x.shape

        kv_size = self.n_local_heads * self.head_dim
        q, k, v = self.wqkv(x).split([self.dim, kv_size, kv_size], dim=-1)

        q = q.view(bsz, seqlen, self.n_head, self.head_dim)
        k = k.view(bsz, seqlen, self.n_local_heads, self.head_dim)
        v = v.view(bsz, seqlen, self.n_local_heads, self.head_dim)

        q = apply_rotary_emb(q, freqs_cis)
        k = apply_rotary_emb(k, freqs_cis)

        q, k, v = map(lambda x: x.transpose(1, 2), (q, k, v))

        if self.kv_cache is not None:
            k, v = self.kv_cache.update(input_pos, k, v)

        k = k.repeat_interleave(self.n_head // self.n_local_heads, dim=1)
        v = v.repeat_interleave(self.n_head // self.n_local_heads, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0)

        y = y.transpose(1, 2).contiguous().view(bsz, seqlen, self.dim)

        y = self.wo(y)
        return y


class FeedForward(nn.Module):
    def __init__(self, config: ModelArgs) -> None:
        super().__init__()
        self.w1 = nn.Linear(config.dim, config.intermediate_size, bias=False)
        self.w3 = nn.Linear(config.dim, config.intermediate_size, bias=False)
        self.w2 = nn.Linear(config.intermediate_size, config.dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        return x * torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + self.eps)

    def forward(self, x: Tensor) -> Tensor:
        output = self._norm(x.float()).type_as(x)
        return output * self.weight


def precompute_freqs_cis(
    seq_len: int, n_elem: int, base: int = 10000,
    dtype: torch.dtype = torch.bfloat16
) -> Tensor:
    freqs = 1.0 / (base ** (torch.arange(0, n_elem, 2)[: (n_elem // 2)].float() / n_elem))
    t = torch.arange(seq_len, device=freqs.device)
    freqs = torch.outer(t, freqs)
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)
    cache = torch.stack([freqs_cis.real, freqs_cis.imag], dim=-1)
    return cache.to(dtype=dtype)


def apply_rotary_emb(x: Tensor, freqs_cis: Tensor) -> Tensor:
    xshaped = x.float().reshape(*x.shape[:-1], -1, 2)
    freqs_cis = freqs_cis.view(1, xshaped.size(1), 1, xshaped.size(3), 2)
    x_out2 = torch.stack(
        [
            xshaped[..., 0] * freqs_cis[..., 0] - xshaped[..., 1] * freqs_cis[..., 1],
            xshaped[..., 1] * freqs_cis[..., 0] + xshaped[..., 0] * freqs_cis[..., 1],
        ],
        -1,
    )

    x_out2 = x_out2.flatten(3)
    return x_out2.type_as(x)


# generate.py, greedy (argmax where it samples by exponential_ draws)
def prefill(model: Transformer, x: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
    # input_pos: [B, S]
    logits = model(x, input_pos)
    return logits[0, -1].argmax(dim=-1, keepdim=True), logits

def decode_one_token(model: Transformer, x: torch.Tensor, input_pos: torch.Tensor):
    # input_pos: [B, 1]
    assert input_pos.shape[-1] == 1
    logits = model(x, input_pos)
    return logits[0, -1].argmax(dim=-1, keepdim=True), logits

def decode_n_tokens(model: Transformer, cur_token: torch.Tensor, input_pos: torch.Tensor, num_new_tokens: int):
    new_tokens, new_probs = [], []
    for i in range(num_new_tokens):
        next_token, logits = decode_one_token(model, cur_token, input_pos)
        input_pos += 1
        new_tokens.append(next_token.clone())
        new_probs.append(logits.softmax(-1).numpy().copy())
        cur_token = next_token.view(1, -1)
    return new_tokens, new_probs


model = Transformer(ModelArgs())
initialize(model)
model.eval()
prompt = torch.randint(0, 32, (5,))
T = prompt.size(0)
T_new = T + 6
with torch.no_grad():
    model.setup_caches(max_batch_size=1, max_seq_length=T_new)
    empty = torch.empty(T_new, dtype=prompt.dtype)
    empty[:T] = prompt
    seq = empty
    input_pos = torch.arange(0, T)
    next_token, logits = prefill(model, prompt.view(1, -1), input_pos)
    record.append(logits.numpy().copy())
    seq[T] = next_token
    input_pos = torch.tensor([T], dtype=torch.int)
    generated_tokens, probs = decode_n_tokens(model, next_token.view(1, -1), input_pos, 5)
    seq[T + 1:] = torch.cat(generated_tokens)
    record.append(seq.tolist())
    record.extend(probs)
    record.append(model.layers[0].attention.kv_cache.k_cache.numpy().copy())

    # the whole sequence again without the cache's decode steps: the same logits
    full_logits = model(seq.view(1, -1), torch.arange(0, T_new))
    record.append(full_logits.numpy().copy())

    # a chunked prefill: the last 3 queries against all keys, lower-right causal
    layer = model.layers[0].attention
    q = torch.randn(1, 4, 3, 4)
    k = layer.kv_cache.k_cache[:, :, :T_new].repeat_interleave(2, dim=1)
    v = layer.kv_cache.v_cache[:, :, :T_new].repeat_interleave(2, dim=1)
    record.append(F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(3, T_new)).numpy().copy())
"""

GPT_FAST_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nfrom torch import Tensor\nfrom torch.nn import functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nfrom retrograd import Tensor\nfrom retrograd.nn import functional as F\n",
    ),
]


def test_gpt_fast_kv_cache_prefill_and_decode_as_torch(capsys):
    (theirs, ours), _ = runs_with_draws(
        GPT_FAST_SOURCE, GPT_FAST_STEPS, capsys, 10206, initialize=initializer(),
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)
    # the cache's decode steps gave the probabilities of the whole sequence's forward
    full = torch.tensor(ours[-2][0, 5:10]).softmax(-1).numpy()
    np.testing.assert_allclose(
        np.concatenate([p[0] for p in ours[2:7]]), full, rtol=1e-4, atol=1e-6
    )
