"""Round 73's defects in attention and the transformer layers, each against torch.

- ``nn.MultiheadAttention``/``F.multi_head_attention_forward``'s refusals torch makes with
  ``AssertionError`` (an ``embed_dim`` not divisible by ``num_heads``, in the constructor and
  the function; a query of another width than ``embed_dim``, through the encoder layers too;
  keys and values of other shapes; a key padding mask of another shape or rank; a 3-d mask of
  an unbatched query of another shape) were ``ShapeError``s or ``InvalidArgumentError``s
  alone; now ``AssertedShapeError`` (also an ``AssertionError``);
- its attention mask of another shape (torch's ``RuntimeError``) was a ``ShapeError`` alone,
  now a ``SizeMismatchError``; its ``is_causal`` hint without a mask (torch's
  ``RuntimeError``) an ``InvalidArgumentError`` alone, now an ``ArgumentConflictError``, and
  refused before the shapes of the keys and values are, as torch's;
- ``F.scaled_dot_product_attention``'s shape refusals (keys of another width, values of
  another length, leading dimensions that do not broadcast, key/value heads that do not
  divide the query's with ``enable_gqa``, a mask that does not broadcast, fewer than 2 dims)
  were ``ShapeError``s alone (torch: ``RuntimeError``), now ``SizeMismatchError``s; query,
  key and value of other dtypes a ``DTypeError`` alone, now a ``MixedDTypeError``;
- it refused query, key and value of different ranks, which torch broadcasts (as matmul);
- it took a float mask of any float dtype (cast to the query's), and refused an integer one
  with a ``TypeError``: torch takes bool, float32 or the query's dtype and refuses the others
  with ``RuntimeError`` (a float64 mask of a float32 query): now ``MixedDTypeError``;
- ``nn.Transformer``'s batch and width checks of ``src``/``tgt`` (torch's ``RuntimeError``)
  were ``ShapeError``s alone, now ``SizeMismatchError``s; an unknown ``activation`` of the
  encoder/decoder layers (torch's ``RuntimeError``) an ``InvalidArgumentError`` alone, now an
  ``UnsupportedModeError``; ``generate_square_subsequent_mask`` of a negative size (torch's
  ``RuntimeError``) or a float (``TypeError``) an ``InvalidArgumentError``, now a
  ``SizeMismatchError`` and an ``ArgumentTypeError``;
- ``F.scaled_dot_product_attention`` of a float mask that requires a gradient (its composed
  path) gave NaN in a row whose keys the mask hides all (-inf), and NaN gradients everywhere;
  torch's math kernel's safe softmax gives zeros there, as its fused kernel and retrograd's;
- ``nn.MultiheadAttention`` took float masks of any float dtype (cast to the query's); torch
  adds them in their own dtypes and refuses (``RuntimeError``) a combined mask of another
  dtype than the query's (with ``need_weights``) or than float32 or the query's (without):
  now ``MixedDTypeError``, the 64 combinations of query, mask and padding mask dtypes and
  ``need_weights`` as torch's;
- its two float32 masks beside a float64 query (without ``need_weights``) were each cast to
  float64 then added; torch adds them in float32 (the sum rounded there), then the attention
  casts it: 6e-9 apart;
- on the torch inner backend, ``F.scaled_dot_product_attention`` of an empty 3-d batch
  (``[0, L, E]``) killed the process (SIGFPE): torch's fused CPU kernel, given it as zero
  heads, divides by them; the composed path computes it now;
- ``F.layer_norm``/``F.rms_norm`` (so ``nn.LayerNorm`` and the transformer layers) of an input
  whose trailing dimensions are not ``normalized_shape`` raised a ``ShapeError`` alone (torch:
  ``RuntimeError``), now ``SizeMismatchError``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import retrograd as rg
import retrograd.errors as errors

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(73)


def _x(*shape, dtype="float64"):
    return RNG.standard_normal(shape).astype(dtype)


def _refusal(lib, make):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            make(lib)
        except Exception as error:  # (the class is what is compared)
            return error
    return None


def _same_refusal(make, expected_class, ours_class):
    theirs = _refusal(torch, make)
    assert type(theirs) is expected_class, theirs
    mine = _refusal(rg, make)
    assert isinstance(mine, expected_class), f"{type(mine).__name__}: {mine}"
    assert isinstance(mine, getattr(errors, ours_class)), f"{type(mine).__name__}: {mine}"
    assert isinstance(mine, rg.RetrogradError)


def _mha(lib, e=4, h=2, **ctor):
    return lib.nn.MultiheadAttention(e, h, **ctor).double()


def _t(lib, a):
    return lib.tensor(a.copy())


Q, K, V = _x(3, 2, 4), _x(5, 2, 4), _x(5, 2, 4)
Q1 = _x(3, 4)

ASSERTIONS = {
    "MultiheadAttention(5, 2)": lambda lib: _mha(lib, 5, 2),
    "multi_head_attention_forward embed_dim 5 heads 2": lambda lib: (
        lib.nn.functional.multi_head_attention_forward(
            _t(lib, _x(3, 2, 5)),
            _t(lib, _x(3, 2, 5)),
            _t(lib, _x(3, 2, 5)),
            5,
            2,
            _t(lib, _x(15, 5)),
            None,
            None,
            None,
            False,
            0.0,
            _t(lib, _x(5, 5)),
            None,
        )
    ),
    "query width 5 of embed_dim 4": lambda lib: _mha(lib)(
        _t(lib, _x(3, 2, 5)), _t(lib, _x(5, 2, 5)), _t(lib, _x(5, 2, 5))
    ),
    "key and value lengths differ": lambda lib: _mha(lib)(
        _t(lib, Q), _t(lib, K), _t(lib, _x(6, 2, 4))
    ),
    "kdim/vdim key and value lengths differ": lambda lib: _mha(lib, kdim=2, vdim=3)(
        _t(lib, Q), _t(lib, _x(5, 2, 2)), _t(lib, _x(6, 2, 3))
    ),
    "key_padding_mask of another batch": lambda lib: _mha(lib)(
        _t(lib, Q), _t(lib, K), _t(lib, V), key_padding_mask=_t(lib, np.zeros((3, 5), bool))
    ),
    "key_padding_mask 1-d of a batched query": lambda lib: _mha(lib)(
        _t(lib, Q), _t(lib, K), _t(lib, V), key_padding_mask=_t(lib, np.zeros(5, bool))
    ),
    "attn_mask 4-d": lambda lib: _mha(lib)(
        _t(lib, Q), _t(lib, K), _t(lib, V), attn_mask=_t(lib, np.zeros((1, 4, 3, 5), bool))
    ),
    "unbatched 3-d attn_mask of other heads": lambda lib: _mha(lib)(
        _t(lib, Q1), _t(lib, Q1), _t(lib, Q1), attn_mask=_t(lib, np.zeros((3, 3, 3), bool))
    ),
    "encoder layer of another width": lambda lib: lib.nn.TransformerEncoderLayer(
        4, 2, 8, dropout=0.0
    ).double()(_t(lib, _x(3, 2, 5))),
}


@pytest.mark.parametrize("name", list(ASSERTIONS))
def test_mha_asserts_as_torch(name):
    _same_refusal(ASSERTIONS[name], AssertionError, "AssertedShapeError")


RUNTIME_REFUSALS = {
    "MHA attn_mask of another key length": lambda lib: _mha(lib)(
        _t(lib, Q), _t(lib, K), _t(lib, V), attn_mask=_t(lib, np.zeros((3, 4), bool))
    ),
    "MHA 3-d attn_mask of another batch": lambda lib: _mha(lib)(
        _t(lib, Q), _t(lib, K), _t(lib, V), attn_mask=_t(lib, np.zeros((2, 3, 5)))
    ),
    "sdpa key width": lambda lib: lib.nn.functional.scaled_dot_product_attention(
        _t(lib, _x(2, 3, 4)), _t(lib, _x(2, 5, 3)), _t(lib, _x(2, 5, 4))
    ),
    "sdpa 3-d value length": lambda lib: lib.nn.functional.scaled_dot_product_attention(
        _t(lib, _x(2, 3, 4)), _t(lib, _x(2, 5, 4)), _t(lib, _x(2, 6, 4))
    ),
    "sdpa leading dims": lambda lib: lib.nn.functional.scaled_dot_product_attention(
        _t(lib, _x(2, 3, 4)), _t(lib, _x(3, 3, 4)), _t(lib, _x(3, 3, 4))
    ),
    "sdpa gqa heads": lambda lib: lib.nn.functional.scaled_dot_product_attention(
        _t(lib, _x(1, 4, 3, 2)),
        _t(lib, _x(1, 3, 3, 2)),
        _t(lib, _x(1, 3, 3, 2)),
        enable_gqa=True,
    ),
    "sdpa mask shape": lambda lib: lib.nn.functional.scaled_dot_product_attention(
        _t(lib, _x(2, 3, 4)),
        _t(lib, _x(2, 5, 4)),
        _t(lib, _x(2, 5, 4)),
        attn_mask=_t(lib, np.ones((3, 7), bool)),
    ),
    "sdpa 1-d": lambda lib: lib.nn.functional.scaled_dot_product_attention(
        _t(lib, _x(4)), _t(lib, _x(4)), _t(lib, _x(4))
    ),
    "layer_norm trailing dims": lambda lib: lib.nn.functional.layer_norm(_t(lib, _x(2, 3)), (4,)),
    "rms_norm trailing dims": lambda lib: lib.nn.functional.rms_norm(_t(lib, _x(2, 3)), (4,)),
    "LayerNorm of another width": lambda lib: lib.nn.LayerNorm(4)(_t(lib, _x(2, 3))),
    "Transformer batch of src and tgt": lambda lib: lib.nn.Transformer(4, 2, 1, 1, 8, 0.0).double()(
        _t(lib, _x(3, 2, 4)), _t(lib, _x(3, 3, 4))
    ),
    "Transformer width of tgt": lambda lib: lib.nn.Transformer(4, 2, 1, 1, 8, 0.0).double()(
        _t(lib, _x(3, 2, 4)), _t(lib, _x(3, 2, 5))
    ),
    "generate_square_subsequent_mask(-1)": lambda lib: (
        lib.nn.Transformer.generate_square_subsequent_mask(-1)
    ),
}


@pytest.mark.parametrize("name", list(RUNTIME_REFUSALS))
def test_size_refusals_are_runtime_errors(name):
    _same_refusal(RUNTIME_REFUSALS[name], RuntimeError, "SizeMismatchError")


DTYPE_REFUSALS = {
    "sdpa float64 mask of float32 query": lambda lib: (
        lib.nn.functional.scaled_dot_product_attention(
            *(_t(lib, _x(1, 2, 3, 4, dtype="float32")) for _ in range(3)),
            attn_mask=_t(lib, _x(3, 3)),
        )
    ),
    "sdpa int64 mask": lambda lib: lib.nn.functional.scaled_dot_product_attention(
        *(_t(lib, _x(2, 3, 4)) for _ in range(3)), attn_mask=_t(lib, np.ones((3, 3), np.int64))
    ),
    "sdpa key of another dtype": lambda lib: lib.nn.functional.scaled_dot_product_attention(
        _t(lib, _x(2, 3, 4, dtype="float32")), _t(lib, _x(2, 3, 4)), _t(lib, _x(2, 3, 4))
    ),
}


@pytest.mark.parametrize("name", list(DTYPE_REFUSALS))
def test_sdpa_dtype_refusals(name):
    _same_refusal(DTYPE_REFUSALS[name], RuntimeError, "MixedDTypeError")


def test_unknown_activation_is_a_runtime_error():
    def make(lib):
        return lib.nn.TransformerDecoderLayer(4, 2, activation="tanh")

    _same_refusal(make, RuntimeError, "UnsupportedModeError")


def test_float_mask_size_is_a_type_error():
    def make(lib):
        return lib.nn.Transformer.generate_square_subsequent_mask(2.0)

    _same_refusal(make, TypeError, "ArgumentTypeError")


def test_mha_is_causal_without_mask_refused_first():
    """torch refuses the hint without a mask before it looks at the keys' and values' shapes
    (here of other lengths)."""

    def make(lib):
        return _mha(lib)(_t(lib, Q), _t(lib, K), _t(lib, _x(6, 2, 4)), is_causal=True)

    _same_refusal(make, RuntimeError, "ArgumentConflictError")
    assert isinstance(_refusal(rg, make), rg.errors.InvalidArgumentError)


def _both(make):
    outs = []
    for lib in (torch, rg):
        leaves = []
        out = make(lib, leaves)
        grads = lib.autograd.grad(out.sum(), leaves)
        outs.append((out, grads))
    (e, eg), (o, og) = outs
    assert tuple(o.shape) == tuple(e.shape)
    assert str(o.dtype).rpartition(".")[2] == str(e.dtype).rpartition(".")[2]
    np.testing.assert_allclose(o.detach().numpy(), e.detach().numpy(), rtol=1e-10, atol=1e-12)
    for g, ge in zip(og, eg, strict=True):
        np.testing.assert_allclose(g.numpy(), ge.numpy(), rtol=1e-10, atol=1e-12)


def _leaf(lib, a, leaves):
    t = lib.tensor(a.copy(), requires_grad=True)
    leaves.append(t)
    return t


@pytest.mark.parametrize(
    "shapes",
    [
        ((1, 2, 3, 4), (5, 4), (5, 4)),
        ((2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 4)),
        ((3, 4), (2, 5, 4), (2, 5, 4)),
    ],
)
def test_sdpa_broadcasts_ranks(shapes):
    qs, ks, vs = shapes
    arrays = _x(*qs), _x(*ks), _x(*vs)

    def make(lib, leaves):
        q, k, v = (_leaf(lib, a, leaves) for a in arrays)
        return lib.nn.functional.scaled_dot_product_attention(q, k, v)

    _both(make)


def test_sdpa_float32_mask_of_float64_query():
    """torch takes a float32 mask beside any query (added in the query's dtype), its gradient
    float32."""
    arrays = _x(1, 2, 3, 4), _x(1, 2, 5, 4), _x(1, 2, 5, 4)
    mask = _x(3, 5, dtype="float32")

    def make(lib, leaves):
        q, k, v = (_leaf(lib, a, leaves) for a in arrays)
        m = _leaf(lib, mask, leaves)
        return lib.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m)

    _both(make)


def test_sdpa_float_mask_with_gradient_hiding_a_row():
    arrays = _x(1, 2, 3, 4), _x(1, 2, 4, 4), _x(1, 2, 4, 3)
    mask = _x(3, 4)
    mask[1] = -np.inf
    mask[2, 1:] = -np.inf

    def make(lib, leaves):
        q, k, v = (_leaf(lib, a, leaves) for a in arrays)
        m = _leaf(lib, mask, leaves)
        out = lib.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m)
        return out * out

    _both(make)


def _mha_masks(qd, md, need_weights, kpm):
    x = _x(3, 2, 4)

    def make(lib):
        m = _mha(lib)
        m = m.double() if qd == "float64" else m.float()
        t = lib.tensor(x.astype(qd))
        kw = {} if kpm is None else {"key_padding_mask": lib.tensor(np.zeros((2, 3), kpm))}
        am = None if md is None else lib.tensor(np.zeros((3, 3), md))
        return m(t, t, t, attn_mask=am, need_weights=need_weights, **kw)

    return make


@pytest.mark.parametrize("qd", ["float32", "float64"])
@pytest.mark.parametrize("md", [None, "float32", "float64", "bool"])
@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("kpm", [None, "float32", "float64", "bool"])
def test_mha_mask_dtypes_as_torch(qd, md, need_weights, kpm):
    make = _mha_masks(qd, md, need_weights, kpm)
    theirs = _refusal(torch, make)
    mine = _refusal(rg, make)
    if theirs is None:
        assert mine is None, f"{type(mine).__name__}: {mine}"
    else:
        assert type(theirs) is RuntimeError, theirs
        assert isinstance(mine, RuntimeError), f"{type(mine).__name__}: {mine}"
        assert isinstance(mine, errors.MixedDTypeError)


@pytest.mark.parametrize("mask", [False, True])
def test_sdpa_of_an_empty_3d_batch(mask):
    """(A crash of the process on the torch inner backend before: run it there.)"""
    arrays = _x(0, 2, 3), _x(0, 4, 3), _x(0, 4, 3)

    def make(lib, leaves):
        q, k, v = (_leaf(lib, a, leaves) for a in arrays)
        m = lib.tensor(np.ones((0, 2, 4), bool)) if mask else None
        return lib.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m)

    _both(make)


def test_mha_float32_masks_added_in_float32():
    x = _x(3, 5, 2)
    am, kpm = _x(5, 5, dtype="float32"), _x(3, 5, dtype="float32")
    weights = {
        k: _x(*v)
        for k, v in {
            "in_proj_weight": (6, 2),
            "in_proj_bias": (6,),
            "out_proj.weight": (2, 2),
            "out_proj.bias": (2,),
        }.items()
    }

    def make(lib, leaves):
        m = lib.nn.MultiheadAttention(2, 1, batch_first=True).double()
        m.load_state_dict({k: lib.tensor(v.copy()) for k, v in weights.items()})
        t = _leaf(lib, x, leaves)
        mask, padding = lib.tensor(am.copy()), lib.tensor(kpm.copy())
        return m(t, t, t, attn_mask=mask, key_padding_mask=padding, need_weights=False)[0]

    _both(make)
