# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- the scaled dot product attention tutorial of pytorch/tutorials as torch 2.0 shipped it
  (``intermediate_source/scaled_dot_product_attention_tutorial.py``), smaller: ``from
  torch.backends.cuda import sdp_kernel, SDPBackend``, its ``backend_map`` of keyword flags
  entered by ``with sdp_kernel(**backend_map[...])``, and the ``CausalSelfAttention`` module
  (``chunk(3, -1)``, ``is_causal`` in training only; ``y.transpose(1, 2).contiguous().view``
  where the tutorial views without ``contiguous()``, which torch's CPU kernels refuse), then trained two AdamW steps inside a
  ``sdp_kernel`` block; ``torch.utils.benchmark``'s timer replaced by a call that keeps the
  result; the memory-efficient block left out (torch has no CPU kernel for it, where retrograd
  computes). Each block records ``torch.backends.cuda.flash_sdp_enabled()`` and its siblings.
  ``rg.backends.cuda`` had no ``sdp_kernel`` (torch's deprecated form of
  ``nn.attention.sdpa_kernel``, still in the code LLM repositories copied from this tutorial)
  and no ``SDPBackend``, so the import line failed; and its ``flash_sdp_enabled()``,
  ``math_sdp_enabled()``... answered True whatever ``sdpa_kernel`` or ``enable_flash_sdp(False)``
  had selected, where torch's read the selection.

The lines changed: the ``import`` lines and the gradient lines.
"""

from __future__ import annotations

import random
import warnings

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


SDPA_TUTORIAL_SOURCE = """
import torch
import torch.nn as nn
import torch.nn.functional as F
device = "cuda" if torch.cuda.is_available() else "cpu"

# Example Usage:
query, key, value = torch.randn(2, 3, 8, device=device), torch.randn(2, 3, 8, device=device), torch.randn(2, 3, 8, device=device)
record.append(F.scaled_dot_product_attention(query, key, value).numpy())


# Lets define a helpful benchmarking function (torch.utils.benchmark's timer left out: the call is kept):
def benchmark_torch_function_in_microseconds(f, *args, **kwargs):
    record.append(f(*args, **kwargs).float().numpy())
    record.append([torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.mem_efficient_sdp_enabled(), torch.backends.cuda.math_sdp_enabled()])
    return 0.0


# Lets define the hyper-parameters of our input
batch_size = 2
max_sequence_len = 6
num_heads = 2
embed_dimension = 4

dtype = torch.float32

query = torch.rand(batch_size, num_heads, max_sequence_len, embed_dimension, device=device, dtype=dtype)
key = torch.rand(batch_size, num_heads, max_sequence_len, embed_dimension, device=device, dtype=dtype)
value = torch.rand(batch_size, num_heads, max_sequence_len, embed_dimension, device=device, dtype=dtype)

print(f"The default implementation runs in {benchmark_torch_function_in_microseconds(F.scaled_dot_product_attention, query, key, value):.3f} microseconds")

# Lets explore the speed of each of the 3 implementations
from torch.backends.cuda import sdp_kernel, SDPBackend

# Helpful arguments mapper
backend_map = {
    SDPBackend.MATH: {"enable_math": True, "enable_flash": False, "enable_mem_efficient": False},
    SDPBackend.FLASH_ATTENTION: {"enable_math": False, "enable_flash": True, "enable_mem_efficient": False},
    SDPBackend.EFFICIENT_ATTENTION: {
        "enable_math": False, "enable_flash": False, "enable_mem_efficient": True}
}

with sdp_kernel(**backend_map[SDPBackend.MATH]):
    print(f"The math implementation runs in {benchmark_torch_function_in_microseconds(F.scaled_dot_product_attention, query, key, value):.3f} microseconds")


with sdp_kernel(**backend_map[SDPBackend.FLASH_ATTENTION]):
    try:
        print(f"The flash attention implementation runs in {benchmark_torch_function_in_microseconds(F.scaled_dot_product_attention, query, key, value):.3f} microseconds")
    except RuntimeError:
        print("FlashAttention is not supported. See warnings for reasons.")

# (the memory-efficient block left out: torch has no CPU kernel for it and prints "not supported",
# where retrograd's one kernel computes)


class CausalSelfAttention(nn.Module):

    def __init__(self, num_heads: int, embed_dimension: int, bias: bool=False, is_causal: bool=False, dropout:float=0.0):
        super().__init__()
        assert embed_dimension % num_heads == 0
        # key, query, value projections for all heads, but in a batch
        self.c_attn = nn.Linear(embed_dimension, 3 * embed_dimension, bias=bias)
        # output projection
        self.c_proj = nn.Linear(embed_dimension, embed_dimension, bias=bias)
        # regularization
        self.dropout = dropout
        self.resid_dropout = nn.Dropout(dropout)
        self.num_heads = num_heads
        self.embed_dimension = embed_dimension
        # Perform causal masking
        self.is_causal = is_causal

    def forward(self, x):
        # calculate query, key, values for all heads in batch and move head forward to be the batch dim
        query_projected = self.c_attn(x)

        batch_size = query_projected.size(0)
        embed_dim = query_projected.size(2)
        head_dim = embed_dim // (self.num_heads * 3)

        query, key, value = query_projected.chunk(3, -1)
        query = query.view(batch_size, -1, self.num_heads, head_dim).transpose(1, 2)
        key = key.view(batch_size, -1, self.num_heads, head_dim).transpose(1, 2)
        value = value.view(batch_size, -1, self.num_heads, head_dim).transpose(1, 2)

        if self.training:
            dropout = self.dropout
            is_causal = self.is_causal
        else:
            dropout = 0.0
            is_causal = False

        y = F.scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=dropout, is_causal=is_causal)
        y = y.transpose(1, 2).contiguous().view(batch_size, -1, self.num_heads * head_dim)

        y = self.resid_dropout(self.c_proj(y))
        return y


num_heads = 2
heads_per_dim = 4
embed_dimension = num_heads * heads_per_dim
dtype = torch.float32
model = CausalSelfAttention(num_heads=num_heads, embed_dimension=embed_dimension, bias=False, is_causal=True, dropout=0.0).to(device).to(dtype).eval()
initialize(model)
print(model)
x = torch.rand(batch_size, max_sequence_len, embed_dimension, device=device, dtype=dtype)
record.append(model(x).detach().numpy())

# (the tutorial's model, trained: two steps in a block that allows the math kernel alone)
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
with sdp_kernel(**backend_map[SDPBackend.MATH]):
    for _ in range(2):
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        record.append(loss.item())
        record.append(params_of(model))
record.append([torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.math_sdp_enabled()])
"""

SDPA_TUTORIAL_STEPS = [
    (
        "\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "\nimport retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


def test_sdpa_tutorial_sdp_kernel_blocks_and_flags_as_torch(capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # sdp_kernel's deprecation, in both runs
        (theirs, ours), logs = runs_with_draws(
            SDPA_TUTORIAL_SOURCE, SDPA_TUTORIAL_STEPS, capsys, 10001,
            initialize=initializer(), params_of=params_of,
        )  # fmt: skip
    assert theirs[4] == [False, False, True]  # the math block's flags, as torch reads them
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)
    assert logs[0].count("microseconds") == logs[1].count("microseconds") == 3


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
