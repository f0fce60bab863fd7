"""The zoo's round 73 against PyTorch: BERT, GPT-2, T5, Mixtral, Mamba and Whisper's encoder
of ``tests/zoo_models_73.py``, each built from the same text for both libraries, PyTorch's copy
loading our weights. In float64 the outputs, the model's own loss's gradient for every
parameter (none for Whisper's frozen positions) and the parameters after two AdamW steps equal
PyTorch's, in training mode (dropout off) and in evaluation mode (dropout at the model's rates,
other options: the tanh GELU, tied T5 embeddings with the ReLU feed-forward, GPT-2's inverse
layer scaling); GPT-2's greedy generation on its key/value cache picks PyTorch's tokens; the
initializations are compared on their own. Runs on either inner backend
(``RETROGRAD_INNER=torch``).
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
import zoo_models_73 as zoo
from backends import inner_backend, on_torch
from retrograd import nn as rnn
from retrograd import optim as roptim
from retrograd.nn import functional as RF  # noqa: N812
from test_model_zoo import TOL, _close, _optimizer, _tensor

torch = pytest.importorskip("torch")
tnn, TF = torch.nn, torch.nn.functional


def _bert_inputs(rng):
    ids = rng.integers(1, 50, (2, 8))
    token_types = np.repeat([[0] * 4 + [1] * 4], 2, axis=0)
    mask = np.ones((2, 8), dtype=np.int64)
    mask[1, 6:] = 0  # the second sentence padded
    labels = np.where(rng.random((2, 8)) < 0.4, rng.integers(1, 50, (2, 8)), -100)
    labels[0, 1] = 7  # at least one masked token
    return [ids, token_types, mask, labels, rng.integers(0, 2, (2,))]


def _gpt2_inputs(rng):
    ids = rng.integers(0, 50, (2, 8))
    return [ids, ids]


def _whisper_inputs(rng):
    return [rng.standard_normal((2, 6, 8)), rng.integers(0, 3, (2,))]


def _t5_inputs(rng):
    ids = rng.integers(1, 50, (2, 8))
    mask = np.ones((2, 8), dtype=np.int64)
    mask[0, 5:] = 0
    labels = rng.integers(1, 50, (2, 6))
    labels[1, 4:] = -100  # a shorter target
    return [ids, mask, labels]


NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
# name: (builder, options in training mode, options in evaluation mode, inputs)
MODELS = {
    "bert": (zoo.make_bert, NO_DROPOUT, {"hidden_act": "gelu_new"}, _bert_inputs),
    "gpt2": (
        zoo.make_gpt2,
        {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0},
        {"scale_attn_by_inverse_layer_idx": True},
        _gpt2_inputs,
    ),
    "t5": (
        zoo.make_t5,
        {"dropout_rate": 0.0},
        {"feed_forward_proj": "relu", "tie_word_embeddings": True},
        _t5_inputs,
    ),
    "mixtral": (zoo.make_mixtral, {}, {"tie_word_embeddings": True}, _gpt2_inputs),
    "mamba": (
        zoo.make_mamba,
        {},
        {"residual_in_fp32": True, "rescale_prenorm_residual": True},
        _gpt2_inputs,
    ),
    "whisper_encoder": (
        zoo.make_whisper_encoder,
        {"dropout": 0.0, "attention_dropout": 0.0, "activation_dropout": 0.0},
        {"activation_function": "gelu_new"},
        _whisper_inputs,
    ),
}


# T5, Mixtral and Mamba compute their RMS norms (T5: the variance) and softmaxes (Mixtral: its
# router's) in float32 whatever the model's dtype, as the originals do. On NumPy the float32
# sums and exponentials round in NumPy's order, one ulp from torch's (measured), which the
# float64 outputs carry at up to 2.4e-4 relative for an entry near zero, 5.6e-7 absolute (T5);
# on torch they round as torch's do and only Mixtral's float32 backward of its router (the
# in-place division of the top-k weights, softmax) rounds in its own order: its gradients at
# up to 1e-8 relative (measured), float32's tolerance all the same.
FLOAT32_INSIDE = {"mixtral"} if on_torch() else {"t5", "mixtral", "mamba"}


def _build(name, mode):
    build, train_options, eval_options, _ = MODELS[name]
    options = train_options if mode == "train" else eval_options
    rg.seed(1)
    model = build(rg, rnn, RF, **options).double()
    torch.manual_seed(1)
    reference = build(torch, tnn, TF, **options).double()
    reference.load_state_dict({k: _tensor(torch, v) for k, v in model.state_dict().items()})
    if mode == "eval":
        model.eval()
        reference.eval()
    return model, reference


def _tensors(out):
    return [o for o in out[1:] if o is not None]


@pytest.mark.own_checkpointing("a backend of its own, without checkpointing")
@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("name", MODELS)
def test_zoo73_model_matches_torch(name, mode):
    rtol, atol = TOL["float32" if name in FLOAT32_INSIDE else "float64"]
    rng = np.random.default_rng(7)
    with rg.use_backend(rg.Autodiff(inner_backend())):
        model, reference = _build(name, mode)
        ours = _optimizer(roptim, "adamw", model.parameters())
        theirs = _optimizer(torch.optim, "adamw", reference.parameters())
        assert [n for n, _ in model.named_parameters()] == [
            n for n, _ in reference.named_parameters()
        ]
        for _ in range(2):
            args = MODELS[name][3](rng)
            out = model(*[_tensor(rg, a) for a in args])
            expected = reference(*[_tensor(torch, a) for a in args])
            for o, e in zip(_tensors(out), _tensors(expected), strict=True):
                assert o.dtype == rg.float64
                _close(o.numpy(), e.detach().numpy(), rtol, atol, "output")
            _close(out[0].numpy(), expected[0].detach().numpy(), rtol, atol, "loss")
            grads = out[0].backward()
            theirs.zero_grad()
            expected[0].backward()
            theirs_by_name = dict(reference.named_parameters())
            for pname, p in model.named_parameters():
                expected_grad = theirs_by_name[pname].grad
                if expected_grad is None:  # (Whisper's frozen positions)
                    assert not p.requires_grad and p.grad(grads) is None, pname
                    continue
                _close(p.grad(grads).numpy(), expected_grad.numpy(), rtol, atol, pname)
            ours.step(grads)
            theirs.step()
            expected_state = reference.state_dict()
            got_state = model.state_dict()
            assert list(got_state) == list(expected_state)
            for key, value in expected_state.items():
                _close(got_state[key], value.numpy(), rtol, atol, key)


@pytest.mark.own_checkpointing("a backend of its own, without checkpointing")
def test_gpt2_greedy_generation_on_the_cache_picks_torchs_tokens():
    """Six tokens after a prompt of three, the prompt once and then one token a step on the
    ``past_key_values``; the cached logits also equal a full forward's over the same tokens."""
    prompt = np.random.default_rng(3).integers(0, 50, (2, 3))
    with rg.use_backend(rg.Autodiff(inner_backend())):
        model, reference = _build("gpt2", "eval")
        # a fresh model's logits are nearly flat and its argmax repeats itself: wider weights
        torch.manual_seed(0)
        with torch.no_grad():
            for p in reference.parameters():
                p.normal_(0.0, 0.5)
        model.load_state_dict(
            {k: _tensor(rg, v.numpy()) for k, v in reference.state_dict().items()}
        )
        got = model.generate(_tensor(rg, prompt), 6)
        expected = reference.generate(_tensor(torch, prompt), 6)
        np.testing.assert_array_equal(got.numpy(), expected.numpy())
        assert len(set(got.numpy()[:, 3:].ravel().tolist())) > 2  # not one repeated token
        _, full, _ = model(got)
        _, last, _ = model(got[:, -1:], past_key_values=model(got[:, :-1], use_cache=True)[2])
        _close(last.numpy()[:, -1], full.numpy()[:, -1], 1e-9, 1e-11, "cached logits")


@pytest.mark.own_checkpointing("a backend of its own, without checkpointing")
@pytest.mark.parametrize("name", MODELS)
def test_zoo73_initialization_matches_torch(name):
    """Constant initializations exactly, random ones by the spread of their values."""
    with rg.use_backend(rg.Autodiff(inner_backend())):
        build, _, eval_options, _ = MODELS[name]
        rg.seed(1)
        ours = build(rg, rnn, RF, **eval_options).state_dict()
        torch.manual_seed(1)
        theirs = build(torch, tnn, TF, **eval_options).state_dict()
        assert list(ours) == list(theirs)
        for key, value in theirs.items():
            expected, got = value.numpy(), np.asarray(ours[key])
            assert got.shape == expected.shape and got.dtype == expected.dtype, key
            if np.all(expected == expected.flat[0]):
                np.testing.assert_array_equal(got, expected, err_msg=key)
            elif expected.size >= 64:
                ratio = got.std() / expected.std()
                assert 0.6 < ratio < 1.6, (key, got.std(), expected.std())
