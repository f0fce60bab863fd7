"""``nn.MultiheadAttention`` and the transformer modules against PyTorch: outputs, attention
weights and every gradient (inputs and parameters) from PyTorch's own state dict, in float64
and float32, over masks (bool and float, attention and key padding, the causal hint),
``batch_first``, ``norm_first``, activations, ``kdim``/``vdim``, ``add_bias_kv``,
``add_zero_attn``; finite differences and every checkpointing strategy; state-dict layout,
initialisation, dropout, and errors."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812
from backends import inner_backend
from nn_testing import check_finite_differences, compare_module_with_torch
from retrograd import nn

torch = pytest.importorskip("torch")
# PyTorch's deprecation notice for a bool key-padding mask beside a float attention mask
pytestmark = pytest.mark.filterwarnings("ignore:Support for mismatched")

rng = np.random.default_rng(21)


def normal(*shape):
    return rng.standard_normal(shape)


def pair(name, dtype, *args, **kwargs):
    """PyTorch's module and ours with its state dict loaded unchanged (dropout 0 unless
    given)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch's nested-tensor notices
        theirs = getattr(torch.nn, name)(*args, **kwargs).to(getattr(torch, dtype))
    ours = getattr(nn, name)(*args, **kwargs, dtype=dtype)
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    return theirs, ours


# -- MultiheadAttention --------------------------------------------------------------------------
def _key_padding(batch, source, kind):
    hidden = rng.random((batch, source)) > 0.6
    hidden[:, 0] = False  # no query left without keys
    return hidden if kind == "bool" else np.where(hidden, -1e9, 0.0) + normal(batch, source) * 0.1


MHA_CASES = {
    "plain": dict(),
    "batch first": dict(batch_first=True),
    "kdim vdim": dict(kdim=5, vdim=3),
    "bias kv": dict(add_bias_kv=True),
    "zero attn": dict(add_zero_attn=True),
    "no bias": dict(bias=False),
}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("case", list(MHA_CASES))
def test_multihead_attention_matches_torch(case, need_weights, dtype):
    options = MHA_CASES[case]
    theirs, ours = pair("MultiheadAttention", dtype, 8, 2, **options)
    length, source, batch = 5, 7, 3
    kdim, vdim = options.get("kdim", 8), options.get("vdim", 8)
    first = options.get("batch_first")
    shape = (lambda s, e: (batch, s, e)) if first else (lambda s, e: (s, batch, e))
    inputs = [normal(*shape(length, 8)), normal(*shape(source, kdim)), normal(*shape(source, vdim))]
    masks = (normal(length, source), _key_padding(batch, source, "bool"))

    def call(module, q, k, v, attn_mask, key_padding_mask):
        return module(
            q,
            k,
            v,
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            need_weights=need_weights,
        )

    compare_module_with_torch(theirs, ours, inputs, dtype, call, masks)


@pytest.mark.parametrize("average", [True, False])
@pytest.mark.parametrize("masks", ["none", "bool attn", "float padding", "3-d attn", "both bool"])
def test_multihead_self_attention_masks_match_torch(masks, average):
    theirs, ours = pair("MultiheadAttention", "float64", 12, 3)
    length, batch = 6, 2
    attn = key_padding = None
    if masks in ("bool attn", "both bool"):
        attn = np.triu(np.ones((length, length), bool), 1)
    if masks == "3-d attn":
        attn = normal(batch * 3, length, length)
    if masks in ("float padding", "both bool"):
        key_padding = _key_padding(batch, length, "float" if masks == "float padding" else "bool")

    def call(module, x, attn_mask, key_padding_mask):
        return module(
            x,
            x,
            x,
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            average_attn_weights=average,
        )

    compare_module_with_torch(
        theirs, ours, [normal(length, batch, 12)], "float64", call, (attn, key_padding)
    )


def test_multihead_attention_causal_hint_and_unbatched_inputs_match_torch():
    theirs, ours = pair("MultiheadAttention", "float64", 8, 4)
    mask = np.triu(np.full((5, 5), -np.inf), 1)

    def causal(module, x, attn_mask):
        return module(x, x, x, attn_mask=attn_mask, is_causal=True, need_weights=False)

    compare_module_with_torch(theirs, ours, [normal(5, 2, 8)], "float64", causal, (mask,))
    compare_module_with_torch(theirs, ours, [normal(5, 8)], "float64", causal, (mask,))
    compare_module_with_torch(theirs, ours, [normal(5, 8), normal(6, 8), normal(6, 8)], "float64")


def test_multihead_attention_finite_differences_and_strategies():
    def fn(q, kv, w_in, b_in, w_out, b_out):
        mask = rg.tensor(np.array([[False, True, False, False]] * 3))
        out, weights = F.multi_head_attention_forward(
            q, kv, kv, 4, 2, w_in, b_in, None, None, False, 0.0, w_out, b_out, attn_mask=mask
        )
        return rg.cat([out.reshape((-1,)), weights.reshape((-1,))], 0)

    arrays = [normal(3, 2, 4), normal(4, 2, 4), normal(12, 4), normal(12), normal(4, 4), normal(4)]
    check_finite_differences(fn, arrays)


# -- transformer layers and stacks ---------------------------------------------------------------
LAYER_CASES = {
    "post-norm relu": dict(),
    "pre-norm": dict(norm_first=True),
    "gelu batch first": dict(activation="gelu", batch_first=True),
    "callable, no bias": dict(activation=torch.nn.functional.silu, bias=False),
}


def _options(case, library):
    options = dict(LAYER_CASES[case], dropout=0.0)
    if callable(options.get("activation")):
        options["activation"] = torch.nn.functional.silu if library is torch else F.silu
    return options


def _pair_with(name, case, dtype, *args):
    theirs = getattr(torch.nn, name)(*args, **_options(case, torch)).to(getattr(torch, dtype))
    ours = getattr(nn, name)(*args, **_options(case, rg), dtype=dtype)
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    return theirs, ours


def _sequence(length, batch, width, batch_first):
    return normal(batch, length, width) if batch_first else normal(length, batch, width)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", list(LAYER_CASES))
def test_encoder_layer_matches_torch(case, dtype):
    theirs, ours = _pair_with("TransformerEncoderLayer", case, dtype, 8, 2, 16)
    first = LAYER_CASES[case].get("batch_first", False)
    mask = np.triu(np.ones((5, 5), bool), 1)
    padding = _key_padding(3, 5, "bool")

    def call(module, x, src_mask, src_key_padding_mask):
        return module(x, src_mask=src_mask, src_key_padding_mask=src_key_padding_mask)

    compare_module_with_torch(
        theirs, ours, [_sequence(5, 3, 8, first)], dtype, call, (mask, padding)
    )


@pytest.mark.parametrize("case", list(LAYER_CASES))
def test_decoder_layer_matches_torch(case):
    theirs, ours = _pair_with("TransformerDecoderLayer", case, "float64", 8, 2, 16)
    first = LAYER_CASES[case].get("batch_first", False)
    tgt_mask = np.triu(np.full((4, 4), -np.inf), 1)
    memory_padding = _key_padding(3, 6, "bool")

    def call(module, tgt, memory, tgt_mask, memory_key_padding_mask):
        return module(
            tgt, memory, tgt_mask=tgt_mask, memory_key_padding_mask=memory_key_padding_mask
        )

    inputs = [_sequence(4, 3, 8, first), _sequence(6, 3, 8, first)]
    compare_module_with_torch(theirs, ours, inputs, "float64", call, (tgt_mask, memory_padding))


@pytest.mark.parametrize("case", ["post-norm relu", "pre-norm", "gelu batch first"])
def test_transformer_matches_torch_with_the_causal_mask_detected(case):
    options = _options(case, torch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = torch.nn.Transformer(8, 2, 2, 2, 16, **options).double()
    ours = nn.Transformer(8, 2, 2, 2, 16, **_options(case, rg), dtype="float64")
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    first = options.get("batch_first", False)
    tgt_mask = torch.nn.Transformer.generate_square_subsequent_mask(4, dtype=torch.float64)
    ours_mask = nn.Transformer.generate_square_subsequent_mask(4, dtype="float64")
    assert np.array_equal(ours_mask.numpy(), tgt_mask.numpy())

    def call(module, src, tgt):
        mask = tgt_mask if module is theirs else ours_mask
        return module(src, tgt, tgt_mask=mask)

    inputs = [_sequence(6, 3, 8, first), _sequence(4, 3, 8, first)]
    compare_module_with_torch(theirs, ours, inputs, "float64", call)


def test_encoder_stack_with_norm_and_padding_matches_torch():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t_layer = torch.nn.TransformerEncoderLayer(8, 4, 12, dropout=0.0).double()
        theirs = torch.nn.TransformerEncoder(t_layer, 3, torch.nn.LayerNorm(8).double())
    ours = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(8, 4, 12, dropout=0.0, dtype="float64"),
        3,
        nn.LayerNorm(8, dtype="float64"),
    )
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    mask = np.triu(np.full((5, 5), -np.inf), 1)

    def call(module, x, mask, src_key_padding_mask):
        return module(x, mask=mask, src_key_padding_mask=src_key_padding_mask)

    padding = _key_padding(2, 5, "bool")
    compare_module_with_torch(theirs, ours, [normal(5, 2, 8)], "float64", call, (mask, padding))
    compare_module_with_torch(theirs, ours, [normal(5, 2, 8)], "float64", call, (mask, None))


def test_stacks_hold_independent_copies_of_their_layer():
    layer = nn.TransformerEncoderLayer(8, 2, 16)
    encoder = nn.TransformerEncoder(layer, 2)
    first, second = encoder.layers[0], encoder.layers[1]
    assert first is not layer and first.linear1.weight is not second.linear1.weight
    assert np.array_equal(first.linear1.weight.numpy(), layer.linear1.weight.numpy())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch's nested-tensor notice
        theirs = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(8, 2, 16), 2)
    assert list(encoder.state_dict()) == list(theirs.state_dict())


def test_a_transformer_block_under_every_checkpointing_strategy():
    rg.seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, dtype="float64")
    x = normal(5, 2, 8)
    results = []
    for strategy in (
        rg.NoCheckpointing(),
        rg.BalancedCheckpointing(),
        rg.BudgetCheckpointing(4000),
    ):
        backend = rg.Autodiff(inner_backend(), checkpointing=strategy)
        with rg.use_backend(backend):
            module = layer.replicate(backend=backend)
            mask = nn.Transformer.generate_square_subsequent_mask(5, dtype="float64")
            inputs = rg.tensor(x).require_grad()
            grads = (module(inputs, src_mask=mask, is_causal=True) ** 2).sum().backward()
            results.append(
                [inputs.grad(grads).numpy()] + [p.grad(grads).numpy() for p in module.parameters()]
            )
    for other in results[1:]:
        for a, b in zip(results[0], other):
            np.testing.assert_array_equal(a, b)


# -- layout, initialisation, dropout, errors -----------------------------------------------------
def test_multihead_attention_layout_and_initialisation_are_torchs():
    for options in ({}, dict(kdim=5, vdim=3, add_bias_kv=True), dict(bias=False)):
        theirs = torch.nn.MultiheadAttention(16, 4, **options)
        rg.seed(2)
        ours = nn.MultiheadAttention(16, 4, **options)
        assert list(ours.state_dict()) == list(theirs.state_dict())
        for name, value in theirs.state_dict().items():
            assert ours.state_dict()[name].shape == tuple(value.shape), name
    ours = nn.MultiheadAttention(16, 4)
    bound = math.sqrt(6.0 / (16 + 48))  # Xavier-uniform of the [48, 16] packed weight
    weights = ours.in_proj_weight.numpy()
    assert np.abs(weights).max() <= bound and weights.std() > 0.5 * bound / math.sqrt(3)
    assert not ours.in_proj_bias.numpy().any() and not ours.out_proj.bias.numpy().any()


def test_transformer_matrices_are_xavier_uniform():
    rg.seed(4)
    model = nn.Transformer(16, 2, 1, 1, 32)
    weight = model.encoder.layers[0].linear1.weight.numpy()
    bound = math.sqrt(6.0 / (16 + 32))
    assert np.abs(weight).max() <= bound and abs(weight.std() - bound / math.sqrt(3)) < 0.1 * bound


def test_dropout_applies_in_training_only_and_follows_the_seed():
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.5)
    x = rg.tensor(normal(5, 2, 8).astype(np.float32))
    rg.seed(7)
    first = layer(x).numpy()
    rg.seed(7)
    assert np.array_equal(layer(x).numpy(), first)
    layer.eval()
    evaluated = layer(x).numpy()
    assert not np.allclose(first, evaluated)
    attention = nn.MultiheadAttention(8, 2, dropout=0.5).eval()
    weights = attention(x, x, x)[1].numpy()
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-5)


def test_errors_name_the_module_and_the_shapes():
    with pytest.raises(rg.InvalidArgumentError, match="divisible"):
        nn.MultiheadAttention(10, 3)
    with pytest.raises(rg.InvalidArgumentError, match="relu/gelu"):
        nn.TransformerEncoderLayer(8, 2, activation="tanh")
    attention = nn.MultiheadAttention(8, 2)
    x = rg.ones((5, 2, 8))
    with pytest.raises(rg.ShapeError, match="embedding dimension of 8"):
        attention(rg.ones((5, 2, 6)), x, x)
    with pytest.raises(rg.ShapeError, match="attn_mask should be"):
        attention(x, x, x, attn_mask=rg.zeros((4, 5)))
    with pytest.raises(rg.ShapeError, match="key_padding_mask should be"):
        attention(x, x, x, key_padding_mask=rg.zeros((2, 4)))
    with pytest.raises(rg.InvalidArgumentError, match="is_causal"):
        attention(x, x, x, is_causal=True)
    with pytest.raises(rg.DTypeError, match="attn_mask"):
        attention(x, x, x, attn_mask=rg.zeros((5, 5), dtype="int64"))
    model = nn.Transformer(8, 2, 1, 1, 16)
    with pytest.raises(rg.ShapeError, match="batch number"):
        model(rg.ones((5, 2, 8)), rg.ones((4, 3, 8)))
    with pytest.raises(rg.ShapeError, match="d_model"):
        model(rg.ones((5, 2, 8)), rg.ones((4, 2, 6)))
    assert attention(x, x, x)[0].shape == (5, 2, 8)  # still usable


def test_the_causal_mask_is_read_once_per_mask_and_a_captured_step_replays():
    from retrograd import optim

    rg.seed(1)
    model = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0), 1)
    optimizer = optim.SGD(model, lr=0.1)
    mask = nn.Transformer.generate_square_subsequent_mask(5)
    x = rg.tensor(normal(5, 2, 8).astype(np.float32))

    def step(x):
        loss = (model(x, mask=mask) ** 2).mean()
        optimizer.step(loss.backward())
        return loss

    first = step(x).item()  # reads the mask once
    captured = rg.capture(step, x, state=[optimizer])  # no host read while recording
    assert captured(x).item() < first
    other = nn.Transformer.generate_square_subsequent_mask(5)
    other_values = other.numpy().copy()
    other_values[0, 1] = 0.0  # no longer causal: a new mask is read again
    assert model._causal(rg.tensor(other_values), None, 5) is False
    assert model._causal(mask, None, 5) is True
