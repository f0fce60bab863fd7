"""Real-port tests (the harness: ``tests/real_ports.py``): a program written here in the style of
pytorch/tutorials' scaled dot product attention tutorial (torch 2.0's), small.

The surface it exercises: ``torch.cuda.is_available()`` choosing the device; ``torch.randn`` and
``torch.rand`` with ``device=``/``dtype=``; ``F.scaled_dot_product_attention`` with its defaults
and ``is_causal``; ``from torch.backends.cuda import SDPBackend, sdp_kernel`` and a table of
keyword flags per ``SDPBackend`` entered by ``with sdp_kernel(**table[...])`` (a flash-only block
inside ``try``/``except RuntimeError``); ``torch.backends.cuda.flash_sdp_enabled()``,
``mem_efficient_sdp_enabled()`` and ``math_sdp_enabled()`` read inside each block; a
self-attention module (``chunk(3, -1)``, ``view``/``transpose``, causal masking and dropout in
training only, ``transpose(1, 2).contiguous().view``) moved by ``.to(device).to(dtype).eval()``,
printed, then trained two AdamW steps inside a math-only block. A timer is replaced by a call
that keeps the result; the memory-efficient block is left out (torch has no CPU kernel for it,
where retrograd's one kernel computes).

The regressions it guards: ``rg.backends.cuda`` had no ``sdp_kernel`` (torch's deprecated form of
``nn.attention.sdpa_kernel``, still in code copied from the tutorial) and no ``SDPBackend``, so
the import line failed; and ``flash_sdp_enabled()``, ``math_sdp_enabled()``... answered True
whatever ``sdpa_kernel`` or ``enable_flash_sdp(False)`` had selected, where torch's read the
selection.

The lines the port changes: the ``import`` lines and the gradient lines.
"""

from __future__ import annotations

import warnings

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

ATTENTION_DEMO_SOURCE = """
import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.backends.cuda import SDPBackend, sdp_kernel

on_gpu = torch.cuda.is_available()
device = "cuda" if on_gpu else "cpu"
kernels = torch.backends.cuda


def timed(fn, *args, **kwargs):
    # stands in for a benchmark timer: keeps what the kernel computed and which kernels were on
    out = fn(*args, **kwargs)
    flags = [
        kernels.flash_sdp_enabled(), kernels.mem_efficient_sdp_enabled(), kernels.math_sdp_enabled()
    ]
    record.extend([out.float().numpy(), flags])
    return 0.0


q, k, v = (torch.randn(2, 3, 8, device=device) for _ in range(3))
record.append(F.scaled_dot_product_attention(q, k, v).numpy())

shape = (2, 2, 6, 4)  # batch, heads, tokens, head size
q, k, v = (torch.rand(*shape, device=device, dtype=torch.float32) for _ in range(3))
print(f"default kernel: {timed(F.scaled_dot_product_attention, q, k, v):.3f} us")

none_on = dict(enable_math=False, enable_flash=False, enable_mem_efficient=False)
only = {
    SDPBackend.MATH: {**none_on, "enable_math": True},
    SDPBackend.FLASH_ATTENTION: {**none_on, "enable_flash": True},
    SDPBackend.EFFICIENT_ATTENTION: {**none_on, "enable_mem_efficient": True},
}
for backend in (SDPBackend.MATH, SDPBackend.FLASH_ATTENTION):
    with sdp_kernel(**only[backend]):
        try:
            took = timed(F.scaled_dot_product_attention, q, k, v, is_causal=True)
            print(f"{backend.name}: {took:.3f} us")
        except RuntimeError:
            print(f"{backend.name} cannot run here")


class SelfAttention(nn.Module):
    def __init__(self, heads, width, bias=False, causal=False, dropout=0.0):
        super().__init__()
        assert width % heads == 0
        self.qkv = nn.Linear(width, 3 * width, bias=bias)
        self.proj = nn.Linear(width, width, bias=bias)
        self.heads, self.causal, self.dropout = heads, causal, dropout
        self.out_drop = nn.Dropout(dropout)

    def forward(self, x):
        fused = self.qkv(x)
        b, head_size = fused.size(0), fused.size(2) // (3 * self.heads)
        q, k, v = (t.view(b, -1, self.heads, head_size).transpose(1, 2) for t in fused.chunk(3, -1))
        # causal masking and dropout while training only
        p, causal = (self.dropout, self.causal) if self.training else (0.0, False)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=p, is_causal=causal)
        y = y.transpose(1, 2).contiguous().view(b, -1, self.heads * head_size)
        return self.out_drop(self.proj(y))


model = SelfAttention(heads=2, width=8, causal=True).to(device).to(torch.float32).eval()
initialize(model)
print(model)
x = torch.rand(2, 6, 8, device=device, dtype=torch.float32)
y_eval = model(x)
record.append(y_eval.detach().numpy())

model.train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
with sdp_kernel(**only[SDPBackend.MATH]):
    for _ in range(2):
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        record.extend([loss.item(), params_of(model)])
record.append([kernels.flash_sdp_enabled(), kernels.math_sdp_enabled()])
"""

ATTENTION_DEMO_STEPS = [
    (
        "\nimport torch\nimport torch.nn as nn\n",
        "\nimport retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "        loss.backward()\n        opt.step()\n",
        "        grads = loss.backward()\n        opt.step(grads)\n",
    ),
]


def test_sdpa_demo_sdp_kernel_blocks_and_flags_as_torch(capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # sdp_kernel's deprecation, in both runs
        (theirs, ours), logs = runs_with_draws(
            ATTENTION_DEMO_SOURCE, ATTENTION_DEMO_STEPS, capsys, 10001,
            initialize=initializer(), params_of=params_of,
        )  # fmt: skip
    assert theirs[4] == [False, False, True]  # the math block's flags, as torch reads them
    assert theirs[6] == [True, False, False]  # the flash block's
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)
    assert logs[0].count(" us\n") == logs[1].count(" us\n") == 3


def test_sdp_flag_queries_read_the_selection_as_torchs_do():
    from torch.nn.attention import SDPBackend as TheirBackend
    from torch.nn.attention import sdpa_kernel as their_kernel

    from retrograd.nn.attention import SDPBackend, sdpa_kernel

    def flags(lib):
        cuda = lib.backends.cuda
        return [
            cuda.flash_sdp_enabled(),
            cuda.mem_efficient_sdp_enabled(),
            cuda.math_sdp_enabled(),
            cuda.cudnn_sdp_enabled(),
        ]

    with their_kernel([TheirBackend.MATH, TheirBackend.CUDNN_ATTENTION]):
        expected = flags(torch)
    with sdpa_kernel([SDPBackend.MATH, SDPBackend.CUDNN_ATTENTION]):
        assert flags(rg) == expected == [False, False, True, True]
    assert flags(rg) == flags(torch) == [True] * 4
    try:
        torch.backends.cuda.enable_mem_efficient_sdp(False)
        rg.backends.cuda.enable_mem_efficient_sdp(False)
        assert flags(rg) == flags(torch) == [True, False, True, True]
    finally:
        torch.backends.cuda.enable_mem_efficient_sdp(True)
        rg.backends.cuda.enable_mem_efficient_sdp(True)
    assert flags(rg) == [True] * 4
    with pytest.warns(FutureWarning, match="sdp_kernel"):
        block = rg.backends.cuda.sdp_kernel(enable_flash=False)
    with block:
        assert flags(rg) == [False, True, True, True]
