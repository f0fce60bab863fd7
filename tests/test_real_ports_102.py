"""Real-port tests (the harness: ``tests/real_ports.py``): programs written here in the style of
ermongroup/sliced_score_matching, Megatron-LM's fused bias-GeLU, meijieru/crnn.pytorch,
torchtune's LoRA on packed batches and pytorch-labs/gpt-fast, each run against torch's run of
the same program from the same weights and draws.

- Sliced score matching, twice: the Hutchinson term by ``autograd.grad(..., create_graph=True)``
  on inputs made ``requires_grad_(True)`` (``torch.randn_like`` projections), and by a forward
  Jacobian-vector product (``torch.autograd.forward_ad``'s ``dual_level``/``make_dual``/
  ``unpack_dual``); each trains its own score network with Adam. Guards: retrograd's
  ``unpack_dual`` gave a tangent cut from the graph, so the forward-mode objective's gradient
  missed its whole Hutchinson term (torch's tangent is differentiable in reverse mode).
- A fused bias-GeLU registered by ``torch.library.custom_op`` with ``register_fake`` and
  ``register_autograd`` (its backward returning a full-shaped gradient for a broadcast bias), in
  an MLP of bias-returning linears (``torch.nn.init.normal_(..., mean=, std=)``), trained with
  AdamW and ``clip_grad_norm_``, its FLOPs counted by ``torch.utils.flop_counter
  .FlopCounterMode``.
- A CRNN for OCR: a CNN grown by ``add_module`` from a closure (``BatchNorm2d``,
  ``LeakyReLU(0.2, inplace=True)``, ``ReLU(True)``, ``MaxPool2d((2, 2), (2, 1), (0, 1))``), two
  bidirectional ``LSTM`` layers; a label codec building ``torch.IntTensor`` from Python lists
  and from a tensor, its greedy decode indexing a string and slicing by 0-d tensors; weights
  initialised through ``apply`` by ``m.weight.data.normal_``; ``Variable`` buffers refilled by
  ``v.resize_(data.size()).copy_(data)`` under ``no_grad``; ``CTCLoss(zero_infinity=True)`` on
  the log-softmax; ``Adadelta``. Guards: retrograd refused an alias's ``resize_`` outright,
  where torch shrinks it within the storage (crnn.pytorch resizes ``v.data``; checked apart).
- LoRA on a packed batch: document ids by ``torch.full((n,), ...)`` of 0-d tensors, a
  document-causal ``mask_mod`` for ``create_block_mask`` or a ``torch.block_diag`` of ``tril``s,
  an attention call choosing ``flex_attention`` for a ``BlockMask`` and SDPA otherwise;
  ``register_parameter``, ``kaiming_uniform_``/``zeros_``, adapters found by ``adapter_params``
  and ``named_modules``, the rest frozen by ``requires_grad_``; trained with AdamW: retrograd's
  flex path against torch's SDPA path (torch's CPU flex_attention has no backward), and both
  SDPA paths.
- Cached decoding: a ``@dataclass`` config with ``__post_init__``; a bfloat16 key/value cache
  written by ``k_cache[:, :, pos] = k``; ``causal[None, None, pos]``; rotary tables by
  ``torch.polar``, ``torch.outer`` and ``.real``/``.imag``; grouped-query heads by
  ``repeat_interleave``; a prefill and greedy decode steps with ``pos += 1``; then the whole
  sequence's forward and a chunked prefill's queries against the cache with
  ``torch.nn.attention.bias.causal_lower_right``.

The lines the port changes: the ``import`` lines and the gradient lines (``grads =
loss.backward()``, ``p.grad(grads)``, ``opt.step(grads)``, ``clip_grad_norm_(grads, ...)``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

SCORE_MATCHING_SOURCE = """
import torch
import torch.nn as nn
from torch import autograd
from torch.autograd import forward_ad as fwAD


def replicate(x, copies):
    # `copies` random projections per sample: the batch stacked that many times
    return x.unsqueeze(0).expand(copies, *x.shape).contiguous().view(-1, *x.shape[1:])


def objective_terms(scores, directional, copies):
    # 0.5 |s(x)|^2 + v . (ds/dx) v, averaged over each sample's projections
    n = scores.shape[0]
    half_norm = torch.sum(scores.view(n, -1) ** 2, dim=-1) / 2.0
    trace = torch.sum(directional.view(n, -1), dim=-1)
    half_norm = half_norm.view(copies, -1).mean(dim=0)
    trace = trace.view(copies, -1).mean(dim=0)
    return (half_norm + trace).mean(), half_norm.mean(), trace.mean()


def by_double_backward(net, x, copies=1):
    x = replicate(x, copies)
    x.requires_grad_(True)
    v = torch.randn_like(x)
    s = net(x)
    vjp = autograd.grad(torch.sum(s * v), x, create_graph=True)[0]  # kept differentiable
    return objective_terms(s, v * vjp, copies)


def by_forward_mode(net, x, copies=1):
    x = replicate(x, copies)
    v = torch.randn_like(x)
    with fwAD.dual_level():
        s, jvp = fwAD.unpack_dual(net(fwAD.make_dual(x, v)))  # (ds/dx) v in the same pass
    return objective_terms(s, v * jvp, copies)


for objective in (by_double_backward, by_forward_mode):
    net = nn.Sequential(
        nn.Linear(2, 16), nn.Softplus(), nn.Linear(16, 16), nn.Softplus(), nn.Linear(16, 2)
    )
    initialize(net)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    for step in range(3):
        x = torch.randn(8, 2) * 0.5 + 1.0
        loss, first, second = objective(net, x, copies=2)
        opt.zero_grad()
        loss.backward()
        record.append([loss.item(), first.item(), second.item()])
        record.append({k: w.grad.numpy().copy() for k, w in net.named_parameters()})
        opt.step()
    record.append(params_of(net))
"""

SCORE_MATCHING_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "        loss.backward()\n"
        "        record.append([loss.item(), first.item(), second.item()])\n"
        "        record.append({k: w.grad.numpy()",
        "        grads = loss.backward()\n"
        "        record.append([loss.item(), first.item(), second.item()])\n"
        "        record.append({k: w.grad(grads).numpy()",
    ),
    ("        opt.step()\n", "        opt.step(grads)\n"),
]


def test_sliced_score_matching_by_double_backward_and_by_forward_ad_as_torch(capsys):
    (theirs, ours), _ = runs_with_draws(
        SCORE_MATCHING_SOURCE, SCORE_MATCHING_STEPS, capsys, 10201,
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


BIAS_GELU_SOURCE = """
import torch
from torch.utils import flop_counter

F = torch.nn.functional

SQRT_2_OVER_PI = 0.79788456


@torch.library.custom_op("ours::bias_gelu", mutates_args=())
def fused_bias_gelu(bias: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    # the tanh approximation of GeLU applied to y + bias, as one op
    x = bias + y
    return x * 0.5 * (1.0 + torch.tanh(SQRT_2_OVER_PI * x * (1 + 0.044715 * x * x)))


@fused_bias_gelu.register_fake
def _(bias, y):
    return torch.empty_like(y)


def gelu_slope(x):
    t = torch.tanh(SQRT_2_OVER_PI * x * (1 + 0.044715 * x * x))
    # 0.1070322243 = 3 * 0.044715 * sqrt(2 / pi)
    return 0.5 * x * (1 - t * t) * (SQRT_2_OVER_PI + 0.1070322243 * x * x) + 0.5 * (1 + t)


def keep_inputs(ctx, inputs, output):
    bias, y = inputs
    ctx.save_for_backward(bias, y)


def fused_backward(ctx, grad_out):
    bias, y = ctx.saved_tensors
    g = gelu_slope(bias + y) * grad_out
    return g, g  # the bias's is full-shaped: autograd sums it down to the bias


fused_bias_gelu.register_autograd(fused_backward, setup_context=keep_inputs)


class LinearNoBias(torch.nn.Module):
    # hands its bias back instead of adding it, so that the next op can fuse the add
    def __init__(self, fan_in, fan_out):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(fan_out, fan_in))
        self.bias = torch.nn.Parameter(torch.zeros(fan_out))
        torch.nn.init.normal_(self.weight, mean=0.0, std=0.02)  # GPT-style init

    def forward(self, x):
        return F.linear(x, self.weight), self.bias


class FusedMLP(torch.nn.Module):
    def __init__(self, width, inner, fuse=True):
        super().__init__()
        self.up, self.down = LinearNoBias(width, inner), LinearNoBias(inner, width)
        self.fuse, self.act = fuse, F.gelu

    def forward(self, x):
        h, b = self.up(x)
        if self.fuse:
            assert self.act == F.gelu
            h = fused_bias_gelu(b, h)
        else:
            h = self.act(h + b)
        return self.down(h)


def add_bias_dropout_residual(x, bias, residual, p, training):
    if bias is not None:
        x = x + bias
    return residual + torch.nn.functional.dropout(x, p=p, training=training)


mlp = FusedMLP(8, 32)
initialize(mlp)
with torch.no_grad():  # away from the tiny init, where the GeLU is nearly linear
    for w in mlp.parameters():
        w.add_(torch.randn(*w.shape) * 0.5)
opt = torch.optim.AdamW(mlp.parameters(), lr=1e-2, weight_decay=0.1)
for step in range(3):
    x, target = torch.randn(5, 2, 8), torch.randn(5, 2, 8)  # (sequence, batch, hidden)
    counter = flop_counter.FlopCounterMode(display=False)
    with counter:
        out, out_bias = mlp(x)
        loss = F.mse_loss(add_bias_dropout_residual(out, out_bias, x, 0.0, True), target)
        opt.zero_grad()
        loss.backward()
    record.append(loss.item())
    record.append(counter.get_total_flops())
    record.append({k: w.grad.numpy().copy() for k, w in mlp.named_parameters()})
    norm = torch.nn.utils.clip_grad_norm_(mlp.parameters(), 1.0)
    record.append(norm.item())
    opt.step()
    record.append(params_of(mlp))
"""

BIAS_GELU_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    (
        "        loss.backward()\n    record.append(loss.item())\n"
        "    record.append(counter.get_total_flops())\n    record.append({k: w.grad.numpy()",
        "        grads = loss.backward()\n    record.append(loss.item())\n"
        "    record.append(counter.get_total_flops())\n    record.append({k: w.grad(grads).numpy()",
    ),
    ("clip_grad_norm_(mlp.parameters(), 1.0)", "clip_grad_norm_(grads, mlp.parameters(), 1.0)"),
    ("    opt.step()\n", "    opt.step(grads)\n"),
]


def test_fused_bias_gelu_custom_op_mlp_as_torch(capsys):
    (theirs, ours), _ = runs_with_draws(
        BIAS_GELU_SOURCE, BIAS_GELU_STEPS, capsys, 10202,
        initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


OCR_SOURCE = """
import collections.abc
import random
import torch
import torch.nn as nn
from torch.autograd import Variable  # (old scripts wrap every input)


class LabelCodec(object):
    # characters <-> CTC labels; label 0 is the blank
    def __init__(self, alphabet):
        self.alphabet = alphabet + '-'
        self.index = {ch: i + 1 for i, ch in enumerate(alphabet)}

    def encode(self, text):
        if isinstance(text, str):
            labels, lengths = [self.index[ch] for ch in text], [len(text)]
        elif isinstance(text, collections.abc.Iterable):  # a batch of strings
            lengths = [len(s) for s in text]
            labels, _ = self.encode(''.join(text))
        return torch.IntTensor(labels), torch.IntTensor(lengths)

    def decode(self, labels, length, raw=False):
        t = labels
        if length.numel() == 1:
            n = length[0]
            assert t.numel() == n, "{} labels for a declared length {}".format(t.numel(), n)
            if raw:
                return ''.join([self.alphabet[c - 1] for c in t])
            # greedy CTC: drop blanks and repeats
            kept = [self.alphabet[t[i] - 1] for i in range(n)
                    if t[i] != 0 and not (i > 0 and t[i - 1] == t[i])]
            return ''.join(kept)
        texts, start = [], 0
        for n in length:  # 0-d lengths
            texts.append(self.decode(t[start:start + n], torch.IntTensor([n]), raw=raw))
            start += n
        return texts


def load_into(v, data):
    with torch.no_grad():
        v.resize_(data.size()).copy_(data)  # the buffer takes the batch's shape


class BiLSTM(nn.Module):
    def __init__(self, n_in, hidden, n_out):
        super().__init__()
        self.rnn = nn.LSTM(n_in, hidden, bidirectional=True)
        self.proj = nn.Linear(hidden * 2, n_out)

    def forward(self, seq):
        out, _ = self.rnn(seq)
        T, b, h = out.size()
        return self.proj(out.view(T * b, h)).view(T, b, -1)


class TinyCRNN(nn.Module):
    def __init__(self, height, channels, n_classes, hidden):
        super().__init__()
        assert height % 16 == 0, 'the image height must be a multiple of 16'
        widths = [4, 8, 8, 8]
        cnn = nn.Sequential()

        def conv_relu(i, bn=False, leaky=False, kernel=3, pad=1):
            c_in = channels if i == 0 else widths[i - 1]
            cnn.add_module('conv{0}'.format(i), nn.Conv2d(c_in, widths[i], kernel, 1, pad))
            if bn:
                cnn.add_module('batchnorm{0}'.format(i), nn.BatchNorm2d(widths[i]))
            act = nn.LeakyReLU(0.2, inplace=True) if leaky else nn.ReLU(True)
            cnn.add_module('relu{0}'.format(i), act)

        conv_relu(0)
        cnn.add_module('pooling0', nn.MaxPool2d(2, 2))
        conv_relu(1, bn=True, leaky=True)
        cnn.add_module('pooling1', nn.MaxPool2d((2, 2), (2, 1), (0, 1)))  # halve the height only
        conv_relu(2)
        cnn.add_module('pooling2', nn.MaxPool2d((2, 2), (2, 1), (0, 1)))
        conv_relu(3, bn=True, kernel=2, pad=0)  # one row high
        self.cnn = cnn
        self.rnn = nn.Sequential(
            BiLSTM(widths[3], hidden, hidden), BiLSTM(hidden, hidden, n_classes)
        )

    def forward(self, images):
        feats = self.cnn(images)
        b, c, h, w = feats.size()
        assert h == 1, "the conv features must be one row high"
        return self.rnn(feats.squeeze(2).permute(2, 0, 1))  # (width, batch, classes)


def init_weights(m):
    kind = m.__class__.__name__
    if kind.find('Conv') != -1:
        m.weight.data.normal_(0.0, 0.02)  # narrow filters
    elif kind.find('BatchNorm') != -1:
        m.weight.data.normal_(1.0, 0.02)  # gains near one
        m.bias.data.fill_(0)


alphabet = '0123456789abc'
codec = LabelCodec(alphabet)
ctc = torch.nn.CTCLoss(zero_infinity=True)
net = TinyCRNN(16, 1, len(alphabet) + 1, 8)
net.apply(init_weights)
initialize(net)
images = Variable(torch.FloatTensor(4, 1, 16, 16))  # buffers refilled for every batch
labels = Variable(torch.IntTensor(4 * 5))
lengths = Variable(torch.IntTensor(4))
opt = torch.optim.Adadelta(net.parameters())


def train_step(batch):
    pixels, texts = batch
    n = pixels.size(0)
    load_into(images, pixels)
    encoded, sizes = codec.encode(texts)
    load_into(labels, encoded)
    load_into(lengths, sizes)
    log_probs = net(images).log_softmax(2)
    steps = Variable(torch.IntTensor([log_probs.size(0)] * n))
    cost = ctc(log_probs, labels, steps, lengths) / n
    net.zero_grad()
    cost.backward()
    record.append({k: w.grad.numpy().copy() for k, w in net.named_parameters()})
    opt.step()
    return cost


for _ in range(2):
    texts = [''.join(random.choice(alphabet) for _ in range(random.randint(1, 3)))
             for _ in range(4)]
    cost = train_step((torch.randn(4, 1, 16, 16), texts))
    record.extend([cost.item(), params_of(net)])

net.eval()
with torch.no_grad():
    scores = net(images)
steps = Variable(torch.IntTensor([scores.size(0)] * 4))
_, best = scores.max(2)
best = best.transpose(1, 0).contiguous().view(-1)
record.append(codec.decode(best.data, steps.data, raw=False))
record.append(codec.decode(best.data, steps.data, raw=True))
"""

OCR_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "    cost.backward()\n    record.append({k: w.grad.numpy()",
        "    grads = cost.backward()\n    record.append({k: w.grad(grads).numpy()",
    ),
    ("    opt.step()\n", "    opt.step(grads)\n"),
]


def test_crnn_ctc_ocr_training_and_greedy_decoding_as_torch(capsys):
    (theirs, ours), _ = runs_with_draws(
        OCR_SOURCE, OCR_STEPS, capsys, 10203, initialize=initializer(), params_of=params_of
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


LORA_PACKED_SOURCE = """
import math
from typing import List
import torch
from torch import nn
from torch.nn.attention import flex_attention as flex


def document_ids(seq_lens: List[torch.Tensor]) -> torch.Tensor:
    # per packed row: the document each position belongs to
    rows = []
    for lens in seq_lens:
        rows.append(torch.cat([
            torch.full((n,), d, dtype=torch.long, device=n.device) for d, n in enumerate(lens)
        ]))
    return torch.stack(rows)


def block_causal_dense(seq_lens: List[torch.Tensor]) -> torch.Tensor:
    return torch.stack([
        torch.block_diag(*[torch.tril(torch.ones(n, n, dtype=torch.bool, device=n.device))
                           for n in lens])
        for lens in seq_lens
    ])


def packed_mask(seq_lens):
    if not use_flex:
        return block_causal_dense(seq_lens)
    docs = document_ids(seq_lens)
    rows, length = docs.shape

    def same_doc_causal(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (docs[b, q_idx] == docs[b, kv_idx])

    return flex.create_block_mask(same_doc_causal, rows, None, length, length, device="cpu")


def attend(q, k, v, mask, dropout_p=0.0):
    if isinstance(mask, flex.BlockMask):
        if dropout_p > 0.0:
            raise ValueError("flex attention takes no dropout")
        return flex.flex_attention(q, k, v, block_mask=mask)
    if mask is not None:
        mask = mask[:, None, :, :]  # one mask for every head
    sdpa = nn.functional.scaled_dot_product_attention
    return sdpa(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=mask is None)


class LoRALinear(nn.Module):
    # a frozen linear plus a trainable low-rank update scaled by alpha / rank
    def __init__(self, d_in, d_out, rank, alpha, dropout=0.0, use_bias=False):
        super().__init__()
        base = nn.Linear(in_features=d_in, out_features=d_out, bias=use_bias)
        self.register_parameter("weight", nn.Parameter(base.weight))
        self.register_parameter("bias", nn.Parameter(base.bias) if use_bias else None)
        self.rank, self.alpha = rank, alpha
        self.dropout = nn.Identity() if dropout <= 0.0 else nn.Dropout(p=dropout)
        self.lora_a = nn.Linear(in_features=d_in, out_features=rank, bias=False)
        self.lora_b = nn.Linear(in_features=rank, out_features=d_out, bias=False)
        nn.init.kaiming_uniform_(self.lora_a.weight, a=math.sqrt(5))  # nn.Linear's own
        nn.init.zeros_(self.lora_b.weight)  # the update starts at zero

    def adapter_params(self):  # the names a LoRA recipe trains
        return ["lora_a.weight", "lora_b.weight"]

    def forward(self, x):
        update = self.lora_b(self.lora_a(self.dropout(x)))
        return nn.functional.linear(x, self.weight, self.bias) + (self.alpha / self.rank) * update


class PackedAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.q_proj = LoRALinear(dim, dim, rank=4, alpha=8.0)
        self.k_proj = nn.Linear(dim, dim, bias=False)
        self.v_proj = LoRALinear(dim, dim, rank=4, alpha=8.0)
        self.output_proj = nn.Linear(dim, dim, bias=False)

    def forward(self, x, mask=None):  # mask: a BlockMask, a bool tensor or None
        b, s, _ = x.shape
        q, k, v = (f(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
                   for f in (self.q_proj, self.k_proj, self.v_proj))
        return self.output_proj(attend(q, k, v, mask).transpose(1, 2).contiguous().view(b, s, -1))


def adapter_parameters(model):
    found = {}
    for prefix, module in model.named_modules():
        if hasattr(module, "adapter_params") and callable(module.adapter_params):
            wanted = module.adapter_params()
            for name, p in module.named_parameters(recurse=True):
                if name in wanted:
                    found[f"{prefix}.{name}" if prefix else name] = p
                    wanted.remove(name)
            assert wanted == [], f"adapter parameters {wanted} not found"
    return found


model = PackedAttention(16, 2)
initialize(model)
with torch.no_grad():  # as if the adapters had trained a while
    for adapted in (model.q_proj, model.v_proj):
        adapted.lora_b.weight.copy_(torch.randn(16, 4))
adapters = adapter_parameters(model)
for name, p in model.named_parameters():
    p.requires_grad_(name in adapters)
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
mask = packed_mask([torch.tensor([3, 5, 4]), torch.tensor([7, 5])])
for step in range(3):
    loss = model(torch.randn(2, 12, 16), mask=mask).pow(2).mean()
    loss.backward()
    record.append(loss.item())
    record.append({k: w.grad.numpy().copy() for k, w in adapters.items()})
    opt.step()
    opt.zero_grad()
record.extend([params_of(model), sorted(adapters)])
"""

LORA_PACKED_STEPS = [
    (
        "import torch\nfrom torch import nn\n",
        "import retrograd as torch\nfrom retrograd import nn\n",
    ),
    (
        "    loss.backward()\n    record.append(loss.item())\n    record.append({k: w.grad.numpy()",
        "    grads = loss.backward()\n    record.append(loss.item())\n"
        "    record.append({k: w.grad(grads).numpy()",
    ),
    ("    opt.step()\n", "    opt.step(grads)\n"),
]


def test_lora_on_a_packed_batch_flex_attention_as_torchs_block_causal_sdpa(capsys):
    # torch's CPU flex_attention has no backward: torch's run takes the SDPA path
    # (``block_diag`` of ``tril``s), retrograd's the flex one (``create_block_mask`` of the
    # ``mask_mod`` over the document ids): they must agree
    (theirs, ours), _ = runs_with_draws(
        LORA_PACKED_SOURCE, LORA_PACKED_STEPS, capsys, 10204,
        initialize=initializer(), params_of=params_of, make_use_flex=lambda lib: lib is rg,
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


def test_lora_block_causal_mask_sdpa_path_as_torch(capsys):
    (theirs, ours), _ = runs_with_draws(
        LORA_PACKED_SOURCE, LORA_PACKED_STEPS, capsys, 10205,
        initialize=initializer(), params_of=params_of, use_flex=False,
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


CACHED_DECODE_SOURCE = """
import dataclasses
from typing import Optional
import torch
import torch.nn as nn
from torch import Tensor
import torch.nn.functional as nnf
from torch.nn.attention import bias as attn_bias


def round_up(n: int, k: int) -> int:
    return n if n % k == 0 else n + k - n % k


@dataclasses.dataclass
class Config:
    max_len: int = 16
    vocab: int = 32
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    dim: int = 16
    hidden: int = None
    head_dim: int = 4
    rope_base: float = 10000
    eps: float = 1e-5

    def __post_init__(self):
        if self.hidden is None:
            self.hidden = round_up(int(2 * 4 * self.dim / 3), 8)  # SwiGLU: 2/3 of 4x, rounded
        self.head_dim = self.dim // self.heads


class KVCache(nn.Module):
    def __init__(self, batch, length, heads, head_dim, dtype=torch.bfloat16):
        super().__init__()
        shape = (batch, heads, length, head_dim)
        self.register_buffer("k_cache", torch.zeros(shape, dtype=dtype))
        self.register_buffer("v_cache", torch.zeros(shape, dtype=dtype))

    def update(self, pos, k, v):
        assert pos.shape[0] == k.shape[2]
        self.k_cache[:, :, pos] = k
        self.v_cache[:, :, pos] = v
        return self.k_cache, self.v_cache


def rope_table(length: int, dim: int, base: int = 10000,
               dtype: torch.dtype = torch.bfloat16) -> Tensor:
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2)[: dim // 2].float() / dim))
    angles = torch.outer(torch.arange(length, device=freqs.device), freqs)
    unit = torch.polar(torch.ones_like(angles), angles)
    return torch.stack([unit.real, unit.imag], dim=-1).to(dtype=dtype)


def rotate(x: Tensor, table: Tensor) -> Tensor:
    pairs = x.float().reshape(*x.shape[:-1], -1, 2)
    table = table.view(1, pairs.size(1), 1, pairs.size(3), 2)
    re = pairs[..., 0] * table[..., 0] - pairs[..., 1] * table[..., 1]
    im = pairs[..., 1] * table[..., 0] + pairs[..., 0] * table[..., 1]
    return torch.stack([re, im], -1).flatten(3).type_as(x)


class RMSNorm(nn.Module):
    def __init__(self, width: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(width))  # a per-channel gain

    def forward(self, x: Tensor):
        xf = x.float()
        scaled = xf * torch.rsqrt(torch.mean(xf * xf, dim=-1, keepdim=True) + self.eps)
        return scaled.type_as(x) * self.weight


class Attention(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.c = c
        self.wqkv = nn.Linear(c.dim, (c.heads + 2 * c.kv_heads) * c.head_dim, bias=False)
        self.wo = nn.Linear(c.dim, c.dim, bias=False)
        self.kv_cache = None

    def forward(self, x: Tensor, table: Tensor, mask: Tensor, pos: Optional[Tensor] = None):
        c = self.c
        b, t, _ = x.shape
        kv = c.kv_heads * c.head_dim
        q, k, v = self.wqkv(x).split([c.dim, kv, kv], dim=-1)
        q = rotate(q.view(b, t, c.heads, c.head_dim), table)
        k = rotate(k.view(b, t, c.kv_heads, c.head_dim), table)
        q, k, v = map(lambda a: a.transpose(1, 2), (q, k, v.view(b, t, c.kv_heads, c.head_dim)))
        if self.kv_cache is not None:
            k, v = self.kv_cache.update(pos, k, v)
        k = k.repeat_interleave(c.heads // c.kv_heads, dim=1)
        v = v.repeat_interleave(c.heads // c.kv_heads, dim=1)
        y = nnf.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0)
        return self.wo(y.transpose(1, 2).contiguous().view(b, t, c.dim))


class Block(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.attention = Attention(c)
        self.w1 = nn.Linear(c.dim, c.hidden, bias=False)
        self.w3 = nn.Linear(c.dim, c.hidden, bias=False)
        self.w2 = nn.Linear(c.hidden, c.dim, bias=False)
        self.attention_norm, self.ffn_norm = RMSNorm(c.dim, c.eps), RMSNorm(c.dim, c.eps)

    def forward(self, x, pos, table, mask):
        h = x + self.attention(self.attention_norm(x), table, mask, pos)
        n = self.ffn_norm(h)
        return h + self.w2(nnf.silu(self.w1(n)) * self.w3(n))


class Decoder(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.c = c
        self.tok_embeddings = nn.Embedding(c.vocab, c.dim)
        self.layers = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.norm = RMSNorm(c.dim, eps=c.eps)
        self.output = nn.Linear(c.dim, c.vocab, bias=False)
        self.rope: Optional[Tensor] = None
        self.cached_len = -1

    def setup_caches(self, batch, length):
        if self.cached_len >= length:
            return
        length = round_up(length, 8)
        self.cached_len = length
        kind = self.output.weight.dtype
        for layer in self.layers:
            c = self.c
            layer.attention.kv_cache = KVCache(batch, length, c.kv_heads, c.head_dim, kind)
        self.rope = rope_table(self.c.max_len, self.c.head_dim, self.c.rope_base, kind)
        self.causal = torch.tril(torch.ones(length, length, dtype=torch.bool))

    def forward(self, ids: Tensor, pos: Optional[Tensor] = None) -> Tensor:
        assert self.rope is not None, "call setup_caches first"
        mask, table = self.causal[None, None, pos], self.rope[pos]
        x = self.tok_embeddings(ids)
        for layer in self.layers:
            x = layer(x, pos, table, mask)
        return self.output(self.norm(x))


def greedy_next(model, ids, pos):
    logits = model(ids, pos)
    best = logits[0, -1].argmax(dim=-1, keepdim=True)
    return best, logits


def decode(model, token, pos, n):
    tokens, dists = [], []
    for _ in range(n):
        token, logits = greedy_next(model, token, pos)
        pos += 1  # in place: the next position
        tokens.append(token.clone())
        dists.append(logits.softmax(-1).numpy().copy())
        token = token.view(1, -1)
    return tokens, dists


model = Decoder(Config())
initialize(model)
model.eval()
prompt = torch.randint(0, Config().vocab, (5,))
n_prompt = prompt.size(0)
total = n_prompt + 6
with torch.no_grad():
    model.setup_caches(batch=1, length=total)
    seq = torch.empty(total, dtype=prompt.dtype)
    seq[:n_prompt] = prompt
    first, logits = greedy_next(model, prompt.view(1, -1), torch.arange(0, n_prompt))  # prefill
    record.append(logits.numpy().copy())  # prefill: every prompt position at once
    seq[n_prompt] = first
    rest, dists = decode(model, first.view(1, -1), torch.tensor([n_prompt], dtype=torch.int), 5)
    seq[n_prompt + 1 :] = torch.cat(rest)
    record.append(seq.tolist())
    record.extend(dists)
    cache = model.layers[0].attention.kv_cache
    record.append(cache.k_cache.numpy().copy())
    record.append(model(seq.view(1, -1), torch.arange(0, total)).numpy().copy())  # all at once
    # a chunked prefill's last 3 queries against every cached key: lower-right causal
    q = torch.randn(1, 4, 3, 4)
    k = cache.k_cache[:, :, :total].repeat_interleave(2, dim=1)
    v = cache.v_cache[:, :, :total].repeat_interleave(2, dim=1)
    lower_right = attn_bias.causal_lower_right(3, total)
    out = nnf.scaled_dot_product_attention(q, k, v, attn_mask=lower_right)
    record.append(out.numpy().copy())
"""

CACHED_DECODE_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nfrom torch import Tensor\n"
        "import torch.nn.functional as nnf\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nfrom retrograd import Tensor\n"
        "import retrograd.nn.functional as nnf\n",
    ),
]


def test_cached_prefill_and_decode_as_torch(capsys):
    (theirs, ours), _ = runs_with_draws(
        CACHED_DECODE_SOURCE, CACHED_DECODE_STEPS, capsys, 10206, initialize=initializer(),
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)
    # the cache's decode steps gave the probabilities of the whole sequence's forward
    full = torch.tensor(ours[-2][0, 5:10]).softmax(-1).numpy()
    np.testing.assert_allclose(
        np.concatenate([p[0] for p in ours[2:7]]), full, rtol=1e-4, atol=1e-6
    )
