"""The GPT of ``retrograd train --model gpt`` (app/models.py) against the same model written in
torch, from identical weights: logits, loss, every parameter's gradient, and sampling."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn as tnn

import retrograd as rg
from retrograd.app.models import GPT, GPTConfig

CONFIG = GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=16)


class TorchBlock(tnn.Module):
    def __init__(self, c: GPTConfig):
        super().__init__()
        self.ln_1, self.ln_2 = tnn.LayerNorm(c.n_embd), tnn.LayerNorm(c.n_embd)
        self.attn = tnn.Module()
        self.attn.c_attn = tnn.Linear(c.n_embd, 3 * c.n_embd)
        self.attn.c_proj = tnn.Linear(c.n_embd, c.n_embd)
        self.mlp = tnn.Module()
        self.mlp.c_fc = tnn.Linear(c.n_embd, 4 * c.n_embd)
        self.mlp.c_proj = tnn.Linear(4 * c.n_embd, c.n_embd)
        self.n_head = c.n_head

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.attn.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn.c_proj(y.transpose(1, 2).reshape(b, t, c))
        h = self.mlp.c_proj(torch.nn.functional.gelu(self.mlp.c_fc(self.ln_2(x))))
        return x + h


class TorchGPT(tnn.Module):
    def __init__(self, c: GPTConfig):
        super().__init__()
        self.wte, self.wpe = (
            tnn.Embedding(c.vocab_size, c.n_embd),
            tnn.Embedding(c.block_size, c.n_embd),
        )
        self.h = tnn.ModuleList([TorchBlock(c) for _ in range(c.n_layer)])
        self.ln_f = tnn.LayerNorm(c.n_embd)
        self.lm_head = tnn.Linear(c.n_embd, c.vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight  # tied, as in nanoGPT

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return logits, torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())


@pytest.mark.parametrize("fused", [False, True])
def test_gpt_matches_torch_from_identical_weights(fused):
    rg.seed(0)
    model = GPT(CONFIG)
    for block in model.h:
        block.attn.flash = fused and block.attn.flash  # the manual path, and the fused if any
    reference = TorchGPT(CONFIG)
    state = {k: torch.tensor(np.asarray(v)) for k, v in model.state_dict().items()}
    reference.load_state_dict(state, strict=True)
    rng = np.random.default_rng(0)
    idx = rng.integers(0, CONFIG.vocab_size, (3, 7))
    targets = rng.integers(0, CONFIG.vocab_size, (3, 7))
    logits, loss = model(rg.tensor(idx), rg.tensor(targets))
    t_logits, t_loss = reference(torch.tensor(idx), torch.tensor(targets))
    t_loss.backward()
    np.testing.assert_allclose(logits.numpy(), t_logits.detach().numpy(), rtol=1e-4, atol=1e-5)
    assert loss.item() == pytest.approx(t_loss.item(), rel=1e-5)
    grads = loss.backward()
    t_params = dict(reference.named_parameters())
    assert len(t_params) == len(list(model.parameters())) == 28  # the tied weight listed once
    assert model.wte.weight is model.lm_head.weight
    for name, p in model.named_parameters():
        np.testing.assert_allclose(
            p.grad(grads).numpy(), t_params[name].grad.numpy(), rtol=2e-3, atol=2e-6, err_msg=name
        )


def test_gpt_starts_near_a_uniform_guess_and_generates_reproducibly():
    rg.seed(1)
    model = GPT(CONFIG)
    idx = rg.tensor(np.arange(8).reshape(1, 8) % CONFIG.vocab_size)
    # targets differ from the inputs: with tied weights, predicting the input token itself
    # starts out favoured
    _, loss = model(idx, (idx + 3) % CONFIG.vocab_size)
    assert loss.item() == pytest.approx(math.log(CONFIG.vocab_size), abs=0.1)
    rg.seed(5)
    first = model.generate(idx[:, :2], 10, temperature=0.9, top_k=3)
    rg.seed(5)
    assert model.generate(idx[:, :2], 10, temperature=0.9, top_k=3).tolist() == first.tolist()
    assert first.shape == (1, 12) and not first.requires_grad  # nothing was recorded
    assert first.numpy().max() < CONFIG.vocab_size
    with pytest.raises(rg.InvalidArgumentError, match="longer than block_size 8"):
        model(rg.zeros(1, 9, dtype="int64"))
