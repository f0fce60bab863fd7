"""``scaled_dot_product_attention`` given both ``attn_mask`` and ``is_causal``: torch 2.13's
docs say it raises, but on its fused CPU path (4-d inputs, the values' features as many as the
keys', no dropout, a mask without grad) it applies both, the causal triangle on top of the
mask, and real programs rely on that (DeepSeek-V3's prefill). Ours applies both everywhere
(torch's other paths raise): values and float64 gradients against torch's fused path, and
against torch given the combined mask where its path raises."""

import numpy as np
import pytest
import torch
import torch.nn.functional as TF  # noqa: N812

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812


@pytest.mark.parametrize("mask_kind", ["bool", "float", "float_grad"])
@pytest.mark.parametrize("lengths", [(4, 4), (3, 5), (5, 3)])
def test_mask_and_causal_apply_both_as_torch(mask_kind, lengths):
    rng = np.random.default_rng(7)
    length, source = lengths
    q = rng.standard_normal((2, 2, length, 6))
    k = rng.standard_normal((2, 2, source, 6))
    v = rng.standard_normal((2, 2, source, 6))  # torch applies both on its flash path: Ev == E
    if mask_kind == "bool":
        mask = rng.random((length, source)) > 0.3
        mask[:, 0] = True  # every query keeps a key: no all-masked rows
    else:
        mask = rng.standard_normal((length, source))
    seed = rng.standard_normal((2, 2, length, 6))
    mask_grad = mask_kind == "float_grad"

    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    tmask = torch.tensor(mask, requires_grad=mask_grad)
    if mask_grad:  # torch's composite path raises here: the mask with the triangle applied
        causal = torch.ones(length, source, dtype=torch.bool).tril()
        combined = tmask.masked_fill(~causal, float("-inf"))
        tout = TF.scaled_dot_product_attention(tq, tk, tv, attn_mask=combined)
    else:
        tout = TF.scaled_dot_product_attention(tq, tk, tv, attn_mask=tmask, is_causal=True)
    (tout * torch.tensor(seed)).sum().backward()

    rq, rk, rv = (rg.tensor(a).require_grad() for a in (q, k, v))
    rmask = rg.tensor(mask)
    if mask_grad:
        rmask = rmask.require_grad()
    out = F.scaled_dot_product_attention(rq, rk, rv, attn_mask=rmask, is_causal=True)
    grads = (out * rg.tensor(seed)).sum().backward()

    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-12, atol=1e-12)
    for ours, theirs in ((rq, tq), (rk, tk), (rv, tv)):
        np.testing.assert_allclose(
            ours.grad(grads).numpy(), theirs.grad.numpy(), rtol=1e-10, atol=1e-12
        )
    if mask_grad:
        np.testing.assert_allclose(
            rmask.grad(grads).numpy(), tmask.grad.numpy(), rtol=1e-10, atol=1e-12
        )
