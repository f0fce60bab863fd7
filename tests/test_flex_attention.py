"""FlexAttention (``rg.nn.attention.flex_attention``) against torch 2.13's.

torch's CPU FlexAttention runs forward only, so values, log-sum-exps and block masks are
compared with torch's own, and gradients with torch's autograd through the same attention
written out (scores, the mods, a masked softmax) in float64.
"""

import math

import numpy as np
import pytest
import torch
from torch.nn.attention import flex_attention as torch_flex

import retrograd as rg
from retrograd.errors import InvalidArgumentError, ShapeError
from retrograd.nn.attention import flex_attention as flex

B, H, L, E = 2, 4, 10, 8


DOCUMENTS = [0, 0, 0, 1, 1, 2, 2, 2, 2, 3]
SLOPES = [0.5, 0.25, 0.125, 0.0625]
PREFIX = [3, 6]


def _mods(lib):
    """The same mods, written against torch (``lib=torch``) or retrograd."""
    documents = lib.tensor(DOCUMENTS)
    slopes = lib.tensor(SLOPES)
    prefix = lib.tensor(PREFIX)

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    def same_document(b, h, q_idx, kv_idx):
        return documents[q_idx] == documents[kv_idx]

    def window(b, h, q_idx, kv_idx):
        return (q_idx - kv_idx).abs() <= 2

    def prefix_lm(b, h, q_idx, kv_idx):
        return kv_idx <= prefix[b]

    def nothing_for_row_4(b, h, q_idx, kv_idx):
        return (q_idx != 4) & (q_idx >= kv_idx)

    def alibi(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)

    def softcap(score, b, h, q_idx, kv_idx):
        return 5.0 * lib.tanh(score / 5.0)

    def relative(score, b, h, q_idx, kv_idx):
        return lib.where(q_idx >= kv_idx, score + (q_idx - kv_idx) * 0.1, -math.inf)

    return {
        "causal": causal,
        "documents": torch_flex.and_masks(causal, same_document)
        if lib is torch
        else flex.and_masks(causal, same_document),
        "window_or_prefix": torch_flex.or_masks(window, prefix_lm)
        if lib is torch
        else flex.or_masks(window, prefix_lm),
        "prefix_lm": prefix_lm,
        "empty_row": nothing_for_row_4,
        "alibi": alibi,
        "softcap": softcap,
        "relative": relative,
    }


def _inputs(dtype=np.float32, kv_heads=H, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, H, L, E)).astype(dtype)
    k = rng.standard_normal((B, kv_heads, L, E)).astype(dtype)
    v = rng.standard_normal((B, kv_heads, L, E)).astype(dtype)
    return q, k, v


CASES = [
    ("causal", None, None),
    ("documents", None, None),
    ("window_or_prefix", None, None),
    ("prefix_lm", None, "per_batch"),
    ("empty_row", None, None),
    (None, "alibi", None),
    ("causal", "softcap", None),
    (None, "relative", None),
    ("documents", "alibi", "per_batch_and_head"),
]


def _masks(mask_name, sizes, block=4):
    batch, heads = {"per_batch": (B, None), "per_batch_and_head": (B, H)}.get(sizes, (None, None))
    if mask_name is None:
        return None, None
    theirs = torch_flex.create_block_mask(
        _mods(torch)[mask_name], batch, heads, L, L, device="cpu", BLOCK_SIZE=block
    )
    ours = flex.create_block_mask(_mods(rg)[mask_name], batch, heads, L, L, BLOCK_SIZE=block)
    return theirs, ours


@pytest.mark.parametrize(("mask_name", "score_name", "sizes"), CASES)
def test_values_and_lse_match_torchs_eager_attention(mask_name, score_name, sizes):
    # torch's eager FlexAttention (math_attention) written out: its CPU calls take a second
    # each, so two cases below call it and these compare with the same arithmetic
    q, k, v = _inputs()
    mask_t, mask_r = _masks(mask_name, sizes)
    score_t, score_r = _mods(torch).get(score_name), _mods(rg).get(score_name)
    expected, expected_lse = _torch_reference(
        *map(torch.from_numpy, (q, k, v)), mask_t and mask_t.mask_mod, score_t, 1 / math.sqrt(E),
        with_lse=True,
    )  # fmt: skip
    got, lse = flex.flex_attention(
        *map(rg.tensor, (q, k, v)), score_mod=score_r, block_mask=mask_r, return_lse=True
    )
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(lse.numpy(), expected_lse.numpy(), rtol=1e-5, atol=2e-6)
    if mask_name == "empty_row":  # a row with no key: zeros and -inf, as torch's
        assert not got.numpy()[:, :, 4].any() and np.isneginf(lse.numpy()[:, :, 4]).all()


@pytest.mark.parametrize(
    ("mask_name", "score_name", "sizes", "kv_heads"),
    [("documents", "alibi", "per_batch_and_head", H), ("empty_row", "softcap", None, 2)],
)
def test_torchs_flex_attention_itself(mask_name, score_name, sizes, kv_heads):
    q, k, v = _inputs(kv_heads=kv_heads)
    mask_t, mask_r = _masks(mask_name, sizes, block=16)
    gqa = kv_heads != H
    expected, expected_lse = torch_flex.flex_attention(
        *map(torch.from_numpy, (q, k, v)), score_mod=_mods(torch)[score_name],
        block_mask=mask_t, enable_gqa=gqa, return_lse=True,
    )  # fmt: skip
    got, lse = flex.flex_attention(
        *map(rg.tensor, (q, k, v)), score_mod=_mods(rg)[score_name], block_mask=mask_r,
        enable_gqa=gqa, return_lse=True,
    )  # fmt: skip
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(lse.numpy(), expected_lse.numpy(), rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("name", ["causal", "documents", "window_or_prefix", "prefix_lm"])
@pytest.mark.parametrize("block", [3, 4, (2, 5)])
def test_block_masks_equal_torchs(name, block):
    batch = B if name == "prefix_lm" else None
    theirs = torch_flex.create_block_mask(
        _mods(torch)[name], batch, None, L, L, device="cpu", BLOCK_SIZE=block
    )
    ours = flex.create_block_mask(_mods(rg)[name], batch, None, L, L, BLOCK_SIZE=block)
    assert ours.shape == theirs.shape and tuple(ours.BLOCK_SIZE) == tuple(theirs.BLOCK_SIZE)
    for field in (
        "kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices",
        "q_num_blocks", "q_indices", "full_q_num_blocks", "full_q_indices",
    ):  # fmt: skip
        mine, expected = getattr(ours, field), getattr(theirs, field)
        assert mine.dtype == "int32", field
        np.testing.assert_array_equal(mine.numpy(), expected.numpy(), err_msg=field)
    np.testing.assert_array_equal(ours.to_dense().numpy(), theirs.to_dense().numpy())
    assert ours.sparsity() == pytest.approx(theirs.sparsity())
    assert ours.to_string() == theirs.to_string()
    mask = flex.create_mask(_mods(rg)[name], batch, None, L, L)
    expected = torch_flex.create_mask(_mods(torch)[name], batch, None, L, L, device="cpu")
    np.testing.assert_array_equal(mask.numpy(), expected.numpy())


def _torch_reference(q, k, v, mask, score_mod, scale, with_lse=False):
    """torch's eager FlexAttention (``math_attention``) written out: its CPU calls are slow
    and have no backward."""
    scores = q @ k.transpose(-1, -2) * scale
    b, h, qi, ki = (torch.arange(n).reshape(s) for n, s in zip(
        (B, H, L, L), ((B, 1, 1, 1), (1, H, 1, 1), (1, 1, L, 1), (1, 1, 1, L))))  # fmt: skip
    if score_mod is not None:
        scores = score_mod(scores, b, h, qi, ki)
    if mask is not None:
        scores = scores.masked_fill(~mask(b, h, qi, ki), -math.inf)
    empty = torch.isneginf(scores).all(-1, keepdim=True)
    weights = torch.where(empty, 0.0, torch.where(empty, 0.0, scores).softmax(-1))
    return (weights @ v, scores.logsumexp(-1)) if with_lse else weights @ v


@pytest.mark.parametrize(("mask_name", "score_name"), [
    ("causal", "alibi"), ("empty_row", None), ("documents", "softcap"), (None, "relative"),
])  # fmt: skip
def test_gradients_match_torch_autograd(mask_name, score_name):
    q, k, v = _inputs(np.float64, seed=1)
    theirs, ours = _mods(torch), _mods(rg)
    tq, tk, tv = (torch.from_numpy(a).requires_grad_() for a in (q, k, v))
    expected = _torch_reference(
        tq, tk, tv, theirs.get(mask_name), theirs.get(score_name), 1 / math.sqrt(E)
    )
    probe = np.random.default_rng(2).standard_normal(expected.shape)
    (expected * torch.from_numpy(probe)).sum().backward()
    rq, rk, rv = (rg.tensor(a).require_grad() for a in (q, k, v))
    block_mask = None
    if mask_name is not None:
        block_mask = flex.create_block_mask(ours[mask_name], None, None, L, L, BLOCK_SIZE=4)
    out = flex.flex_attention(rq, rk, rv, score_mod=ours.get(score_name), block_mask=block_mask)
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-12, atol=1e-12)
    grads = (out * rg.tensor(probe)).sum().backward()
    for mine, their in zip((rq, rk, rv), (tq, tk, tv)):
        np.testing.assert_allclose(
            mine.grad(grads).numpy(), their.grad.numpy(), rtol=1e-10, atol=1e-12
        )
        assert np.isfinite(mine.grad(grads).numpy()).all()


def test_a_learned_bias_in_score_mod_gets_its_gradient():
    q, k, v = _inputs(np.float64, seed=3)
    table = np.random.default_rng(4).standard_normal((H, 2 * L - 1))
    t_table = torch.from_numpy(table).requires_grad_()
    r_table = rg.tensor(table).require_grad()

    def bias(lib_table):
        return lambda score, b, h, q_idx, kv_idx: score + lib_table[h, q_idx - kv_idx + L - 1]

    t_out = _torch_reference(*map(torch.from_numpy, (q, k, v)), None, bias(t_table), 0.5)
    t_out.pow(2).sum().backward()
    r_out = flex.flex_attention(*map(rg.tensor, (q, k, v)), score_mod=bias(r_table), scale=0.5)
    grads = r_out.pow(2).sum().backward()
    np.testing.assert_allclose(r_table.grad(grads).numpy(), t_table.grad.numpy(), rtol=1e-10)


def test_bad_input_is_refused_by_name():
    q, k, v = map(rg.tensor, _inputs(kv_heads=2))
    with pytest.raises(ShapeError, match="flex_attention: query has 4 heads and key/value 2"):
        flex.flex_attention(q, k, v)
    q, k, v = map(rg.tensor, _inputs())
    mask = flex.create_block_mask(_mods(rg)["causal"], None, None, L + 2, L, BLOCK_SIZE=4)
    with pytest.raises(ShapeError, match=r"flex_attention: the block mask is for sequence"):
        flex.flex_attention(q, k, v, block_mask=mask)
    with pytest.raises(InvalidArgumentError, match="create_block_mask: expected a mask_mod"):
        flex.create_block_mask(_mods(rg)["alibi"], None, None, L, L)
    with pytest.raises(ShapeError, match="flex_attention: query must be a 4-d tensor"):
        flex.flex_attention(q[0], k, v)
    assert flex.flex_attention(q, k, v).shape == (B, H, L, E)  # the inputs stay usable


@pytest.mark.parametrize("variant", ["causal_lower_right", "causal_upper_left"])
@pytest.mark.parametrize(("q_len", "kv_len"), [(3, 7), (7, 7), (1, 5)])
def test_causal_bias_in_scaled_dot_product_attention_matches_torch(variant, q_len, kv_len):
    from torch.nn.attention import bias as torch_bias

    from retrograd.nn.attention import bias as rg_bias

    rng = np.random.default_rng(6)
    q = rng.standard_normal((2, 3, q_len, 4))
    k, v = rng.standard_normal((2, 2, 3, kv_len, 4))
    tq, tk, tv = (torch.from_numpy(a).requires_grad_() for a in (q, k, v))
    expected = torch.nn.functional.scaled_dot_product_attention(
        tq, tk, tv, attn_mask=getattr(torch_bias, variant)(q_len, kv_len)
    )
    expected.pow(2).sum().backward()
    rq, rk, rv = (rg.tensor(a).require_grad() for a in (q, k, v))
    mask = getattr(rg_bias, variant)(q_len, kv_len)
    np.testing.assert_array_equal(
        mask.materialize().numpy(),
        getattr(torch_bias, variant)(q_len, kv_len)._materialize().numpy(),
    )
    got = rg.nn.functional.scaled_dot_product_attention(rq, rk, rv, attn_mask=mask)
    grads = got.pow(2).sum().backward()
    np.testing.assert_allclose(got.numpy(), expected.detach().numpy(), rtol=1e-12, atol=1e-12)
    for mine, theirs in zip((rq, rk, rv), (tq, tk, tv)):
        # (a query that sees one key has a zero gradient: both sides give rounding noise)
        np.testing.assert_allclose(
            mine.grad(grads).numpy(), theirs.grad.numpy(), rtol=1e-10, atol=1e-12
        )
