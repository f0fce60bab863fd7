# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- mamba-minimal (github.com/johnma2006/mamba-minimal ``model.py`` and the ``generate`` of its
  ``demo.ipynb``), small: ``ModelArgs`` as a ``@dataclass`` with ``__post_init__`` (``dt_rank
  = math.ceil(d_model / 16)``, the vocabulary padded to a multiple of 8), the tied
  ``self.lm_head.weight = self.embedding.weight``, ``RMSNorm`` by ``torch.rsqrt(x.pow(2).mean(-1,
  keepdim=True) + self.eps)``, the depthwise causal ``nn.Conv1d(groups=d_inner,
  padding=d_conv - 1)`` cut by ``[:, :, :l]``, ``x_and_res.split(split_size=[d_inner,
  d_inner], dim=1)`` (torch's keyword), ``F.silu``, ``A_log = nn.Parameter(torch.log(A))`` of
  an int64 ``arange`` and ``A = -torch.exp(self.A_log.float())``, ``F.softplus`` of the step
  sizes, the selective scan (``deltaA[:, :, i] * x + deltaB_u[:, :, i]`` over a Python loop
  from ``torch.zeros((b, d_in, n))``, ``torch.stack(ys, dim=2)``), AdamW training on
  ``cross_entropy`` of shifted tokens, and ``generate`` under ``torch.no_grad()``:
  ``torch.topk(probs, k=top_k)``, ``probs[probs < values[:, -1, None]] = 0``,
  ``probs.sum(axis=1, keepdims=True)`` (NumPy's keywords, which torch takes) and
  ``torch.argmax(probs, dim=-1)[:, None]``.

einops' ``rearrange``/``repeat``/``einsum`` lines are as written (``from einops import
rearrange, repeat, einsum``), the same text in both runs.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, both

pytest.importorskip("einops", minversion="0.8")

MAMBA_SOURCE = '''
from __future__ import annotations
from dataclasses import dataclass
from typing import Union
from einops import rearrange, repeat, einsum


@dataclass
class ModelArgs:
    d_model: int
    n_layer: int
    vocab_size: int
    d_state: int = 16
    expand: int = 2
    dt_rank: Union[int, str] = 'auto'
    d_conv: int = 4
    pad_vocab_size_multiple: int = 8
    conv_bias: bool = True
    bias: bool = False

    def __post_init__(self):
        self.d_inner = int(self.expand * self.d_model)

        if self.dt_rank == 'auto':
            self.dt_rank = math.ceil(self.d_model / 16)

        if self.vocab_size % self.pad_vocab_size_multiple != 0:
            self.vocab_size += (self.pad_vocab_size_multiple
                                - self.vocab_size % self.pad_vocab_size_multiple)


class Mamba(nn.Module):
    def __init__(self, args: ModelArgs):
        """Full Mamba model."""
        super().__init__()
        self.args = args

        self.embedding = nn.Embedding(args.vocab_size, args.d_model)
        self.layers = nn.ModuleList([ResidualBlock(args) for _ in range(args.n_layer)])
        self.norm_f = RMSNorm(args.d_model)

        self.lm_head = nn.Linear(args.d_model, args.vocab_size, bias=False)
        self.lm_head.weight = self.embedding.weight  # Tie output projection to embedding weights.

    def forward(self, input_ids):
        x = self.embedding(input_ids)

        for layer in self.layers:
            x = layer(x)

        x = self.norm_f(x)
        logits = self.lm_head(x)

        return logits


class ResidualBlock(nn.Module):
    def __init__(self, args: ModelArgs):
        """Simple block wrapping Mamba block with normalization and residual connection."""
        super().__init__()
        self.args = args
        self.mixer = MambaBlock(args)
        self.norm = RMSNorm(args.d_model)

    def forward(self, x):
        output = self.mixer(self.norm(x)) + x

        return output


class MambaBlock(nn.Module):
    def __init__(self, args: ModelArgs):
        """A single Mamba block, as described in Figure 3 in Section 3.4 in the Mamba paper [1]."""
        super().__init__()
        self.args = args

        self.in_proj = nn.Linear(args.d_model, args.d_inner * 2, bias=args.bias)

        self.conv1d = nn.Conv1d(
            in_channels=args.d_inner,
            out_channels=args.d_inner,
            bias=args.conv_bias,
            kernel_size=args.d_conv,
            groups=args.d_inner,
            padding=args.d_conv - 1,
        )

        # x_proj takes in `x` and outputs the input-specific delta, B, C
        self.x_proj = nn.Linear(args.d_inner, args.dt_rank + args.d_state * 2, bias=False)

        # dt_proj projects delta from dt_rank to d_in
        self.dt_proj = nn.Linear(args.dt_rank, args.d_inner, bias=True)

        A = repeat(torch.arange(1, args.d_state + 1), 'n -> d n', d=args.d_inner)
        self.A_log = nn.Parameter(torch.log(A))
        self.D = nn.Parameter(torch.ones(args.d_inner))
        self.out_proj = nn.Linear(args.d_inner, args.d_model, bias=args.bias)

    def forward(self, x):
        (b, l, d) = x.shape

        x_and_res = self.in_proj(x)  # shape (b, l, 2 * d_in)
        x_and_res = rearrange(x_and_res, 'b l x -> b x l')
        (x, res) = x_and_res.split(split_size=[self.args.d_inner, self.args.d_inner], dim=1)

        x = self.conv1d(x)[:, :, :l]
        x = F.silu(x)

        y = self.ssm(x)

        y = y * F.silu(res)

        output = self.out_proj(rearrange(y, 'b d_model l -> b l d_model'))

        return output

    def ssm(self, x):
        (d_in, n) = self.A_log.shape

        A = -torch.exp(self.A_log.float())  # shape (d_in, n)
        D = self.D.float()

        x_dbl = rearrange(x, 'b d l -> b l d')
        x_dbl = self.x_proj(x_dbl)  # (b, l, dt_rank + 2*n)

        (delta, B, C) = x_dbl.split(split_size=[self.args.dt_rank, n, n], dim=-1)  # delta: (b, l, dt_rank). B, C: (b, l, n)
        delta = F.softplus(self.dt_proj(delta))  # (b, l, d_in)

        y = self.selective_scan(x, delta, A, B, C, D)  # This is similar to run_SSM(A, B, C, u) in The Annotated S4 [2]

        return y

    def selective_scan(self, u, delta, A, B, C, D):
        (b, d_in, l) = u.shape
        n = A.shape[1]

        # Discretize continuous parameters (delta, A, B) using zero-order hold (ZOH) discretization
        deltaA = torch.exp(einsum(delta, A, 'b l d_in, d_in n -> b d_in l n'))
        deltaB_u = einsum(delta, B, u, 'b l d_in, b l n, b d_in l -> b d_in l n')

        # Perform selective scan (see scan_SSM() in The Annotated S4 [2])
        x = torch.zeros((b, d_in, n))
        ys = []
        for i in range(l):
            x = deltaA[:, :, i] * x + deltaB_u[:, :, i]
            y = einsum(x, C[:, i, :], 'b d_in n, b n -> b d_in')
            ys.append(y)
        y = torch.stack(ys, dim=2) # (b d_in l)

        if D is not None:
            y = y + u * rearrange(D, 'd_in -> d_in 1')

        return y


class RMSNorm(nn.Module):
    def __init__(self,
                 d_model: int,
                 eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x):
        output = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

        return output


def generate(model, input_ids, n_tokens_to_gen=50, sample=True, top_k=40):
    model.eval()

    for token_n in range(n_tokens_to_gen):
        with torch.no_grad():
            indices_to_input = input_ids
            next_token_logits = model(indices_to_input)[:, -1]

        probs = F.softmax(next_token_logits, dim=-1)
        (batch, vocab_size) = probs.shape

        if top_k is not None:
            (values, indices) = torch.topk(probs, k=top_k)
            probs[probs < values[:, -1, None]] = 0
            probs = probs / probs.sum(axis=1, keepdims=True)

        if sample:
            next_indices = torch.multinomial(probs, num_samples=1)
        else:
            next_indices = torch.argmax(probs, dim=-1)[:, None]

        input_ids = torch.cat([input_ids, next_indices], dim=1)

    return input_ids, probs


def train(model, data, steps, lr):
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    losses = []
    for step in range(steps):
        x, y = data[:, :-1], data[:, 1:]
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses
'''

MAMBA_STEP = [
    (
        "        loss.backward()\n        optimizer.step()",
        "        grads = loss.backward()\n        optimizer.step(grads)",
    )
]


@pytest.mark.parametrize("d_model", [16, 20])
def test_mamba_minimal_training_and_generation_match_torch(d_model):
    theirs, ours = both(MAMBA_SOURCE, MAMBA_STEP)
    data = np.random.default_rng(34).integers(0, 29, (3, 9))
    records, initial = [], None
    for lib, names in ((torch, theirs), (rg, ours)):
        torch.manual_seed(0)
        args = names["ModelArgs"](d_model=d_model, n_layer=2, vocab_size=29, d_state=4, d_conv=3)
        assert args.vocab_size == 32 and args.dt_rank == (1 if d_model == 16 else 2)
        model = names["Mamba"](args)
        assert model.lm_head.weight is model.embedding.weight
        if initial is None:
            initial = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
        else:
            model.load_state_dict({k: rg.tensor(v) for k, v in initial.items()})
        assert model.lm_head.weight is model.embedding.weight
        losses = names["train"](model, lib.tensor(data), steps=3, lr=1e-2)
        ids, probs = names["generate"](
            model, lib.tensor(data[:2, :3]), n_tokens_to_gen=4, sample=False, top_k=5
        )
        records.append(
            [
                losses,
                ids.numpy(),
                probs.numpy(),
                {n: p.detach().numpy().copy() for n, p in model.named_parameters()},
            ]
        )
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)
