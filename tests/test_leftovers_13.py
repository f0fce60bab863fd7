"""Gaps against torch found by other rounds, each checked against torch:

- ``rg.compile(module)`` returns an ``OptimizedModule`` as ``torch.compile`` does (its
  ``_orig_mod``, the ``_orig_mod.`` prefix of its state dict, attributes and modes forwarded),
  so nanoGPT-style checkpoint code runs unchanged; a function compiled stays a function;
- ``grad_fn._saved_*`` of linear, matmul, div, softmax, log_softmax, conv and the scalar forms;
- forward-mode AD: tangents under ``no_grad``, ``Function.jvp`` called where a ``backward``
  is defined too, and the cost of ``unpack_dual``;
- complex ``stft``/``istft``: a complex signal's two-sided spectrum, ``istft`` of a two-sided
  spectrum with ``return_complex=True``, with gradients.
"""

import copy
import io
import pickle

import numpy as np
import pytest
import torch

import retrograd as rg
from retrograd import nn

# -- compile -------------------------------------------------------------------------------------


def _pair(lib):
    lib.manual_seed(0)
    return lib.nn.Sequential(lib.nn.Linear(3, 4), lib.nn.Dropout(0.5), lib.nn.Linear(4, 2))


def _same_weights(ours, theirs):
    for (name, value), (their_name, their_value) in zip(
        ours.state_dict().items(), theirs.state_dict().items(), strict=True
    ):
        assert name == their_name
        their_value.data.copy_(torch.from_numpy(value.numpy().copy()))


def test_compile_wraps_a_module_in_an_optimized_module_as_torchs():
    ours, theirs = _pair(rg), _pair(torch)
    _same_weights(ours, theirs)
    compiled, their_compiled = rg.compile(ours), torch.compile(theirs)
    assert type(compiled).__name__ == type(their_compiled).__name__ == "OptimizedModule"
    assert isinstance(compiled, nn.Module) and compiled._orig_mod is ours
    assert list(compiled.state_dict()) == list(their_compiled.state_dict())
    assert [n for n, _ in compiled.named_parameters()] == [
        n for n, _ in their_compiled.named_parameters()
    ]
    assert [n for n, _ in compiled.named_modules()] == [
        n for n, _ in their_compiled.named_modules()
    ]
    assert [n for n, _ in compiled.named_children()] == ["_orig_mod"]
    assert repr(compiled) == repr(their_compiled)
    assert len(compiled) == len(their_compiled) == 3
    assert next(iter(compiled.parameters())) is ours[0].weight
    # the modes are the model's, both ways
    assert compiled.training is their_compiled.training is True
    compiled.eval(), their_compiled.eval()
    assert (ours.training, ours[1].training, compiled.training) == (False, False, False)
    assert (theirs.training, theirs[1].training) == (False, False)
    ours.train()
    assert compiled.training is True
    # attributes are read and written on the model
    compiled.note, their_compiled.note = 3, 3
    assert ours.note == theirs.note == 3 and "note" not in compiled.__dict__
    del compiled.note
    assert not hasattr(ours, "note")
    with pytest.raises(AttributeError):
        compiled.not_there  # noqa: B018
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    compiled.eval(), their_compiled.eval()
    np.testing.assert_allclose(
        compiled(rg.tensor(x)).numpy(), their_compiled(torch.from_numpy(x)).detach().numpy(),
        rtol=1e-5, atol=1e-6,
    )  # fmt: skip


def test_compiled_module_refuses_the_models_own_keys_and_nanogpt_strips_the_prefix():
    ours, theirs = _pair(rg), _pair(torch)
    compiled, their_compiled = rg.compile(ours), torch.compile(theirs)
    with pytest.raises(RuntimeError, match=r"_orig_mod\.0\.weight"):
        compiled.load_state_dict(ours.state_dict())
    with pytest.raises(RuntimeError, match=r"_orig_mod\.0\.weight"):
        their_compiled.load_state_dict(theirs.state_dict())
    # nanoGPT's train.py saves the compiled model's state dict; sample.py strips the prefix
    buffer = io.BytesIO()
    rg.save({"model": compiled.state_dict()}, buffer)
    buffer.seek(0)
    state_dict = rg.load(buffer)["model"]
    unwanted_prefix = "_orig_mod."
    for k in list(state_dict):
        if k.startswith(unwanted_prefix):
            state_dict[k[len(unwanted_prefix) :]] = state_dict.pop(k)
    fresh = _pair(rg)
    fresh.load_state_dict(state_dict)
    for (name, value), mine in zip(fresh.state_dict().items(), ours.state_dict().values()):
        assert np.array_equal(value.numpy(), mine.numpy()), name
    # the compiled model loads its own keys back
    rg.compile(fresh).load_state_dict(compiled.state_dict())


def test_compiled_module_trains_its_models_parameters():
    model = nn.Linear(3, 1)
    compiled = rg.compile(model, mode="max-autotune")
    optimizer = rg.optim.SGD(compiled.parameters(), lr=0.1)
    x, y = rg.ones(4, 3), rg.zeros(4, 1)
    before = model.weight.numpy().copy()
    grads = ((compiled(x) - y) ** 2).mean().backward()
    optimizer.step(grads)
    assert not np.array_equal(model.weight.numpy(), before)


def test_compiled_module_copies_and_pickles_with_its_model():
    compiled = rg.compile(_pair(rg))
    compiled.eval()
    for copied in (copy.deepcopy(compiled), pickle.loads(pickle.dumps(compiled))):
        assert type(copied) is type(compiled)
        assert copied._orig_mod is not compiled._orig_mod and copied.training is False
        assert list(copied.state_dict()) == list(compiled.state_dict())


def test_compiled_module_runs_the_models_hooks_and_methods():
    calls = []

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 2)

        def forward(self, x):
            return self.fc(x)

        def configure_optimizers(self, lr):  # nanoGPT's raw_model.configure_optimizers
            return rg.optim.AdamW(self.parameters(), lr=lr)

    model = Net()
    model.register_forward_hook(lambda module, args, out: calls.append(type(module).__name__))
    compiled = rg.compile(model)
    compiled(rg.ones(1, 2))
    assert calls == ["Net"]
    assert isinstance(compiled.configure_optimizers(1e-3), rg.optim.AdamW)
    assert compiled.fc is model.fc
    compiled.fc = nn.Linear(2, 3)  # set on the model
    assert model.fc.out_features == 3 and compiled(rg.ones(1, 2)).shape == (1, 3)


def test_compile_keeps_functions_and_disable_and_the_decorator_forms():
    def double(x):
        return x * 2

    assert rg.compile(double) is double
    assert torch.compile(double).__wrapped__ is double  # torch's wrapper calls it unchanged
    model = nn.Linear(2, 2)
    assert rg.compile(model, disable=True) is model
    assert torch.compile(torch.nn.Linear(2, 2), disable=True).__class__ is torch.nn.Linear
    decorate = rg.compile(mode="reduce-overhead")
    assert decorate(double) is double
    assert type(decorate(model)).__name__ == "OptimizedModule"
    assert type(rg._dynamo.optimize("eager")(model)).__name__ == "OptimizedModule"
    from retrograd._dynamo.eval_frame import OptimizedModule

    assert isinstance(rg.compile(model), OptimizedModule)
    # Module.compile compiles in place, as torch's: the keys keep no prefix
    assert model.compile() is None and list(model.state_dict()) == ["weight", "bias"]
    with pytest.raises(rg.InvalidArgumentError, match="compile"):
        rg.compile(3)


# -- grad_fn._saved_* ----------------------------------------------------------------------------


def _inputs(lib, shapes, seed=13):
    rng = np.random.default_rng(seed)
    return [lib.tensor(rng.standard_normal(s) + 2.5, requires_grad=True) for s in shapes]


_MATRICES = [(2, 3), (4, 3), (4,)]
_IMAGES = [(1, 2, 5, 5), (3, 2, 3, 3), (3,)]


@pytest.mark.parametrize(
    ("make", "shapes", "tensors", "values"),
    [
        # F.linear is torch's addmm(bias, input, weight.t()) with a bias, mm without
        (lambda f, x, w, b: f.linear(x, w, b), _MATRICES, ["mat1", "mat2"], ["alpha", "beta"]),
        (lambda f, x, w, b: f.linear(x, w), _MATRICES, ["self", "mat2"], []),
        (lambda f, x, w, b: x.matmul(w.t()), _MATRICES, ["self", "mat2"], []),
        (lambda f, x, w, b: x / w[:2], _MATRICES, ["other"], []),
        (lambda f, x, w, b: x / 4.0, _MATRICES, ["other"], []),
        (lambda f, x, w, b: x * 3.0, _MATRICES, ["other"], []),
        (lambda f, x, w, b: x.pow(w[:2]), _MATRICES, ["self", "exponent", "result"], []),
        (lambda f, x, w, b: x**2.5, _MATRICES, ["self"], ["exponent"]),
        (lambda f, x, w, b: 2.0**x, _MATRICES, ["exponent", "result"], ["self"]),
        (lambda f, x, w, b: x.exp(), _MATRICES, ["result"], []),
        (lambda f, x, w, b: x.log(), _MATRICES, ["self"], []),
        (lambda f, x, w, b: x.sqrt(), _MATRICES, ["result"], []),
        (lambda f, x, w, b: x.tanh(), _MATRICES, ["result"], []),
        (lambda f, x, w, b: x.sigmoid(), _MATRICES, ["result"], []),
        (lambda f, x, w, b: f.relu(x - 2.5), _MATRICES, ["result"], []),
        (lambda f, x, w, b: x.softmax(1), _MATRICES, ["result"], ["dim"]),
        (lambda f, x, w, b: f.log_softmax(x, dim=0), _MATRICES, ["result"], ["dim"]),
        (
            lambda f, x, w, b: f.conv2d(x, w, b, stride=2, padding=1),
            _IMAGES,
            ["input", "weight"],
            ["stride", "padding", "dilation", "groups", "transposed", "output_padding"],
        ),
        (
            lambda f, x, w, b: f.conv2d(x, w, b, padding="same", dilation=2),
            _IMAGES,
            ["input", "weight"],
            ["stride", "padding", "dilation", "groups", "transposed", "output_padding"],
        ),
        (
            lambda f, x, w, b: f.conv_transpose2d(
                x, w, None, stride=2, padding=1, output_padding=1
            ),
            [(1, 3, 4, 4), (3, 2, 3, 3), (3,)],
            ["input"],
            ["stride", "padding", "dilation", "groups", "transposed", "output_padding"],
        ),
    ],
)
def test_grad_fn_saved_values_of_more_ops_are_torchs(make, shapes, tensors, values):
    their_node = make(torch.nn.functional, *_inputs(torch, shapes)).grad_fn
    our_node = make(rg.nn.functional, *_inputs(rg, shapes)).grad_fn
    their_names = {a for a in dir(their_node) if a.startswith("_saved_")}
    for name in tensors:
        theirs, ours = getattr(their_node, f"_saved_{name}"), getattr(our_node, f"_saved_{name}")
        assert tuple(ours.shape) == tuple(theirs.shape), name
        assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1], name
        np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=1e-12, err_msg=name)
        assert f"_saved_{name}" in their_names and f"_saved_{name}" in dir(our_node)
    for name in values:
        assert getattr(our_node, f"_saved_{name}") == getattr(their_node, f"_saved_{name}"), name
        assert f"_saved_{name}" in dir(our_node)
        with pytest.raises(AttributeError):
            getattr(our_node, f"_raw_saved_{name}")


def test_grad_fn_saved_transposed_weight_and_unkept_values_are_torchs():
    (x, w, b), (tx, tw, tb) = _inputs(rg, _MATRICES), _inputs(torch, _MATRICES)
    # torch's mat2 is the weight's transpose, made by a recorded transpose: gradients reach w
    mat2 = rg.nn.functional.linear(x, w, b).grad_fn._saved_mat2
    their_mat2 = torch.nn.functional.linear(tx, tw, tb).grad_fn._saved_mat2
    assert mat2.grad_fn is not None and their_mat2.grad_fn is not None
    grads = mat2.sum().backward()
    their_mat2.sum().backward()
    np.testing.assert_array_equal(w.grad(grads).numpy(), tw.grad.numpy())
    # a number torch saves is a 0-d tensor of the number's dtype (a double for a float)
    their_scaled = (tx.float() / 4.0).grad_fn._saved_other
    our_scaled = (x.float() / 4.0).grad_fn._saved_other
    assert our_scaled.dtype == rg.float64 and their_scaled.dtype == torch.float64
    # what the gradient never reads is not kept: None, as torch's
    assert (tx / 4.0).grad_fn._saved_self is None and (x / 4.0).grad_fn._saved_self is None
    constant = np.full((2, 3), 2.0)
    assert (torch.tensor(constant) / tx).grad_fn._saved_self is not None
    assert (tx / torch.tensor(constant)).grad_fn._saved_self is None
    assert (x / rg.tensor(constant)).grad_fn._saved_self is None


# -- forward-mode AD -----------------------------------------------------------------------------


def _tangent_under_no_grad(lib, fw):
    lib.manual_seed(0)
    layer = lib.nn.Linear(3, 2).double()
    with lib.no_grad():
        layer.weight.copy_(lib.tensor(np.arange(6.0).reshape(2, 3) / 7 - 0.3))
        layer.bias.copy_(lib.tensor([0.1, -0.2]))
    primal = lib.tensor(np.linspace(-1.0, 1.0, 12).reshape(4, 3))
    tangent = lib.tensor(np.linspace(0.5, -0.7, 12).reshape(4, 3))
    with fw.dual_level():
        dual = fw.make_dual(primal, tangent)
        before = dual.sin()  # recorded, then used under no_grad
        with lib.no_grad():
            out = layer(before).tanh() * dual[:, :2]
            plain = layer(primal)  # no dual reaches it: no tangent
        return (
            fw.unpack_dual(out).tangent.detach().numpy(),
            fw.unpack_dual(plain).tangent,
            out.detach().numpy(),
        )


def test_forward_ad_tangents_flow_under_no_grad_as_torchs():
    ours = _tangent_under_no_grad(rg, rg.autograd.forward_ad)
    theirs = _tangent_under_no_grad(torch, torch.autograd.forward_ad)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-12)
    assert ours[1] is None and theirs[1] is None
    np.testing.assert_allclose(ours[2], theirs[2], rtol=1e-12)


def _custom_with_backward_and_jvp(lib, fw, calls):
    class Cube(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x, scale):
            ctx.save_for_backward(x)
            ctx.save_for_forward(x)
            ctx.scale = scale
            return x**3 * scale

        @staticmethod
        def backward(ctx, grad):
            calls.append("backward")
            (x,) = ctx.saved_tensors
            return grad * 3 * x**2 * ctx.scale, None

        @staticmethod
        def jvp(ctx, tangent, scale_tangent):
            calls.append("jvp")
            (x,) = ctx.saved_tensors
            # not the derivative on purpose: only a call of jvp gives this tangent
            return tangent * 100.0 + x

    primal = lib.tensor([1.0, 2.0, -0.5], dtype=lib.float64)
    with fw.dual_level():
        dual = fw.make_dual(primal, lib.tensor([1.0, 0.5, 2.0], dtype=lib.float64))
        out = Cube.apply(dual.exp(), 2.0).sin()
        tangent = fw.unpack_dual(out).tangent.numpy()
    leaf = lib.tensor([1.0, 2.0], dtype=lib.float64, requires_grad=True)
    total = Cube.apply(leaf, 2.0).sum()
    if lib is torch:
        total.backward()
        grad = leaf.grad.numpy()
    else:
        grad = leaf.grad(total.backward()).numpy()
    return tangent, grad


def test_forward_ad_calls_a_functions_jvp_where_it_has_a_backward_too():
    our_calls, their_calls = [], []
    ours = _custom_with_backward_and_jvp(rg, rg.autograd.forward_ad, our_calls)
    theirs = _custom_with_backward_and_jvp(torch, torch.autograd.forward_ad, their_calls)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-12)  # jvp's tangent
    np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-12)  # backward's gradient
    assert "jvp" in our_calls and their_calls == ["jvp", "backward"]


# -- complex stft / istft ------------------------------------------------------------------------

_RNG = np.random.default_rng(4)
_SIGNAL = _RNG.standard_normal((2, 40)) + 1j * _RNG.standard_normal((2, 40))
_WINDOW = np.hanning(12) + 0.1
_WEIGHTS = _RNG.standard_normal((2, 12, 11)) + 1j * _RNG.standard_normal((2, 12, 11))


@pytest.mark.parametrize(
    "options",
    [{}, {"normalized": True}, {"center": False}, {"pad_mode": "constant"}, {"win_length": 8}],
)
def test_stft_of_a_complex_signal_is_torchs_two_sided_spectrum(options):
    window = _WINDOW[: options.get("win_length", 12)]
    theirs = torch.stft(torch.tensor(_SIGNAL), 12, 4, window=torch.tensor(window), **options)
    ours = rg.stft(rg.tensor(_SIGNAL), 12, 4, window=rg.tensor(window), **options)
    assert ours.dtype == rg.complex128 and theirs.dtype == torch.complex128
    assert ours.shape == tuple(theirs.shape)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12, atol=1e-12)


def test_stft_complex_forms_and_refusals_are_torchs():
    signal, window = _SIGNAL[0], _WINDOW
    as_real = torch.stft(
        torch.tensor(signal), 12, 4, window=torch.tensor(window), return_complex=False
    )
    ours = rg.stft(rg.tensor(signal), 12, 4, window=rg.tensor(window), return_complex=False)
    np.testing.assert_allclose(ours.numpy(), as_real.numpy(), rtol=1e-12, atol=1e-12)
    # a complex window makes a real signal's spectrum two-sided too
    complex_window = window + 0.5j
    theirs = torch.stft(
        torch.tensor(signal.real), 12, 4, window=torch.tensor(complex_window), return_complex=True
    )
    ours = rg.stft(
        rg.tensor(signal.real), 12, 4, window=rg.tensor(complex_window), return_complex=True
    )
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12, atol=1e-12)
    # complex64 meeting a float64 window: complex128, as torch's
    single = rg.stft(rg.tensor(signal, dtype=rg.complex64), 12, 4, window=rg.tensor(window))
    their_single = torch.stft(
        torch.tensor(signal, dtype=torch.complex64), 12, 4, window=torch.tensor(window)
    )
    assert single.dtype == rg.complex128 and their_single.dtype == torch.complex128
    with pytest.raises(RuntimeError, match="Cannot have onesided output"):
        torch.stft(torch.tensor(signal), 12, 4, onesided=True, return_complex=True)
    with pytest.raises(rg.InvalidArgumentError, match="Cannot have onesided output"):
        rg.stft(rg.tensor(signal), 12, 4, onesided=True, return_complex=True)


def _complex_loss(lib, out):
    """A real loss that reads both parts of a complex result."""
    weights = lib.tensor(np.resize(_WEIGHTS.ravel(), tuple(out.shape)))
    return (out * weights).real.sum() + (out.abs() ** 2).sum()


def _stft_loss(lib, signal, window):
    return _complex_loss(lib, lib.stft(signal, 12, 4, window=window, return_complex=True))


def _istft_loss(lib, spectrum, window):
    out = lib.istft(spectrum, 12, 4, window=window, return_complex=True, onesided=False)
    return _complex_loss(lib, out)


def _central_difference(function, values, index, step=1e-6):
    plus, minus = values.copy(), values.copy()
    plus[index] += step
    minus[index] -= step
    return (function(plus) - function(minus)) / (2 * step)


@pytest.mark.parametrize("transform", ["stft", "istft"])
def test_complex_stft_and_istft_gradients_are_torchs_and_finite_differences(transform):
    loss = _stft_loss if transform == "stft" else _istft_loss
    if transform == "stft":
        data = _SIGNAL
    else:
        data = torch.stft(
            torch.tensor(_SIGNAL), 12, 4, window=torch.tensor(_WINDOW), return_complex=True
        ).numpy()
    their_data = torch.tensor(data, requires_grad=True)
    their_window = torch.tensor(_WINDOW, requires_grad=True)
    loss(torch, their_data, their_window).backward()
    our_data, our_window = rg.tensor(data).require_grad(), rg.tensor(_WINDOW).require_grad()
    grads = loss(rg, our_data, our_window).backward()
    np.testing.assert_allclose(
        our_data.grad(grads).numpy(), their_data.grad.numpy(), rtol=1e-9, atol=1e-9
    )
    np.testing.assert_allclose(
        our_window.grad(grads).numpy(), their_window.grad.numpy(), rtol=1e-9, atol=1e-9
    )

    # finite differences of the real and imaginary parts (torch's convention: the gradient
    # of a real loss is d/dre + i d/dim)
    def at(values):
        return loss(rg, rg.tensor(values), rg.tensor(_WINDOW)).item()

    index = (1, 3, 2) if transform == "istft" else (1, 7)
    real_part = _central_difference(at, data.astype(np.complex128), index)

    def along_imaginary(imaginary):
        return at(data.real + 1j * imaginary)

    imag_part = _central_difference(along_imaginary, data.imag.copy(), index)
    expected = our_data.grad(grads).numpy()[index]
    assert abs(real_part - expected.real) < 1e-5 * max(1.0, abs(expected))
    assert abs(imag_part - expected.imag) < 1e-5 * max(1.0, abs(expected))


def test_istft_return_complex_round_trips_and_refuses_a_one_sided_spectrum():
    signal = torch.tensor(_SIGNAL)
    window = torch.tensor(_WINDOW)
    spectrum = torch.stft(signal, 12, 4, window=window, return_complex=True)
    theirs = torch.istft(spectrum, 12, 4, window=window, return_complex=True, length=40)
    ours = rg.istft(
        rg.tensor(spectrum.numpy()), 12, 4, window=rg.tensor(_WINDOW), return_complex=True,
        length=40,
    )  # fmt: skip
    assert ours.dtype == rg.complex128 and theirs.dtype == torch.complex128
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ours.numpy(), _SIGNAL, rtol=1e-10, atol=1e-10)
    one_sided = torch.stft(signal.real, 12, 4, window=window, return_complex=True)
    with pytest.raises(RuntimeError, match="Cannot have onesided output"):
        torch.istft(one_sided, 12, 4, window=window, return_complex=True)
    with pytest.raises(rg.InvalidArgumentError, match="Cannot have onesided output"):
        rg.istft(rg.tensor(one_sided.numpy()), 12, 4, return_complex=True)


def test_unpack_dual_of_the_same_tensor_again_gives_the_stored_tangent_as_torchs():
    def run(lib, fw):
        with fw.dual_level():
            dual = fw.make_dual(
                lib.tensor([0.5, -1.0], dtype=lib.float64),
                lib.tensor([2.0, 3.0], dtype=lib.float64),
            )
            out = dual.sin() * dual
            first, second = fw.unpack_dual(out).tangent, fw.unpack_dual(out).tangent
            same, before = first is second, first.numpy().copy()
            out.mul_(2.0)  # changed in place: a new tangent
            return same, before, fw.unpack_dual(out).tangent.numpy().copy()

    ours = run(rg, rg.autograd.forward_ad)
    theirs = run(torch, torch.autograd.forward_ad)
    assert ours[0] and theirs[0]
    np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-12)
    np.testing.assert_allclose(ours[2], theirs[2], rtol=1e-12)
    np.testing.assert_allclose(ours[2], 2 * ours[1], rtol=1e-12)
