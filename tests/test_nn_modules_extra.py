"""The ``nn`` modules over :mod:`test_nn_functional_extra`'s functions, and the lazy layers:
torch's constructor arguments, state-dict keys, a torch state dict loading unchanged, outputs
and gradients against the same torch module (float64), and their errors."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from nn_testing import compare_module_with_torch
from retrograd import nn

torch = pytest.importorskip("torch")

rng = np.random.default_rng(77)


def _load_from_torch(ours, theirs):
    ours.load_state_dict({k: v.detach() for k, v in theirs.state_dict().items()})
    return ours


def _same_keys(ours, theirs):
    assert list(ours.state_dict()) == list(theirs.state_dict())


# -- modules with parameters or buffers ------------------------------------------------------------
@pytest.mark.parametrize("bias", [True, False])
def test_bilinear_module(bias):
    theirs = torch.nn.Bilinear(3, 4, 5, bias=bias, dtype=torch.float64)
    ours = nn.Bilinear(3, 4, 5, bias=bias, dtype="float64")
    _same_keys(ours, theirs)
    assert ours.weight.shape == (5, 3, 4) and (ours.bias is None) == (not bias)
    _load_from_torch(ours, theirs)
    for lead in [(1,), (6,), (2, 3)]:
        x1, x2 = rng.standard_normal((*lead, 3)), rng.standard_normal((*lead, 4))
        compare_module_with_torch(theirs, ours, [x1, x2], "float64")


def test_bilinear_initialization_is_torchs():
    rg.seed(0)
    weight = nn.Bilinear(16, 3, 200).weight.numpy()
    bound = 1.0 / np.sqrt(16)  # torch: 1/sqrt(in1_features), weight and bias alike
    assert np.abs(weight).max() <= bound and np.abs(weight).max() > 0.95 * bound
    assert abs(weight.std() - bound / np.sqrt(3)) < 0.01


@pytest.mark.parametrize(
    "name, kwargs",
    [("MultiMarginLoss", {"p": 2, "margin": 0.5}), ("MultiLabelSoftMarginLoss", {})],
)
def test_loss_weight_buffers(name, kwargs):
    weight = rng.random(4) + 0.5
    theirs = getattr(torch.nn, name)(weight=torch.tensor(weight), **kwargs)
    ours = getattr(nn, name)(weight=rg.tensor(weight), **kwargs)
    _same_keys(ours, theirs)
    _load_from_torch(ours, theirs)
    x = rng.standard_normal((5, 4))
    target = rng.integers(0, 4, 5) if name == "MultiMarginLoss" else (rng.random((5, 4)) < 0.5)
    target = target.astype(np.int64 if name == "MultiMarginLoss" else np.float64)
    compare_module_with_torch(theirs, ours, [x], "float64", constants=[target])


# -- losses ----------------------------------------------------------------------------------------
def _signs(shape):
    return np.where(rng.random(shape) < 0.5, 1.0, -1.0)


LOSSES = [
    ("MarginRankingLoss", {"margin": 0.2}, [(6,), (6,)], lambda: [_signs(6)]),
    ("CosineEmbeddingLoss", {"margin": 0.1}, [(6, 3), (6, 3)], lambda: [_signs(6)]),
    ("HingeEmbeddingLoss", {"margin": 0.7}, [(4, 3)], lambda: [_signs((4, 3))]),
    ("SoftMarginLoss", {}, [(4, 3)], lambda: [_signs((4, 3))]),
    ("MultiLabelMarginLoss", {}, [(2, 4)], lambda: [np.array([[2, 0, -1, 1], [3, -1, 0, 0]])]),
    ("MultiMarginLoss", {}, [(5, 4)], lambda: [rng.integers(0, 4, 5)]),
    ("TripletMarginLoss", {"margin": 0.5, "p": 1.0, "swap": True}, [(5, 3)] * 3, lambda: []),
    ("TripletMarginWithDistanceLoss", {"swap": True}, [(5, 3)] * 3, lambda: []),
    ("PoissonNLLLoss", {"full": True}, [(4, 3)], lambda: [rng.random((4, 3)) * 3]),
    ("PoissonNLLLoss", {"log_input": False}, [(4, 3)], lambda: [rng.random((4, 3)) * 3]),
    (
        "GaussianNLLLoss",
        {"full": True},
        [(4, 3)],
        lambda: [rng.standard_normal((4, 3)), rng.random((4, 1)) + 0.1],
    ),
    ("MultiLabelSoftMarginLoss", {}, [(4, 3)], lambda: [(rng.random((4, 3)) < 0.5) * 1.0]),
    ("NLLLoss2d", {}, [(2, 3, 4, 4)], lambda: [rng.integers(0, 3, (2, 4, 4))]),
]


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("name, kwargs, shapes, constants", LOSSES, ids=[c[0] for c in LOSSES])
def test_loss_modules(name, kwargs, shapes, constants, reduction):
    if name == "NLLLoss2d":
        theirs = torch.nn.NLLLoss(reduction=reduction)  # torch's NLLLoss2d warns, same loss
    else:
        theirs = getattr(torch.nn, name)(reduction=reduction, **kwargs)
    ours = getattr(nn, name)(reduction=reduction, **kwargs)
    inputs = [rng.standard_normal(s) for s in shapes]
    if name == "PoissonNLLLoss" and not kwargs.get("log_input", True):
        inputs = [np.abs(a) + 0.1 for a in inputs]
    compare_module_with_torch(theirs, ours, inputs, "float64", constants=constants())
    _same_keys(ours, theirs)


def test_loss_modules_keep_legacy_reduction_arguments():
    loss = nn.MarginRankingLoss(size_average=False)
    x = rg.tensor([1.0, 2.0])
    assert loss(x, x * 0.0, rg.tensor([-1.0, -1.0])).item() == 3.0


# -- parameter-free layers -------------------------------------------------------------------------
LAYERS = [
    ("CosineSimilarity", (0,), [(4, 3), (4, 3)]),
    ("PairwiseDistance", (1.5, 1e-3, True), [(4, 3), (4, 3)]),
    ("Hardshrink", (0.3,), [(3, 5)]),
    ("Softshrink", (0.3,), [(3, 5)]),
    ("LocalResponseNorm", (3, 0.1, 0.8, 2.0), [(2, 6, 3, 3)]),
    ("LPPool1d", (2, 3, 2), [(2, 3, 8)]),
    ("LPPool2d", (1.5, (2, 3)), [(2, 3, 6, 6)]),
    ("UpsamplingNearest2d", (None, 2), [(1, 2, 3, 4)]),
    ("UpsamplingBilinear2d", ((5, 7),), [(1, 2, 3, 4)]),
]


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name, args, shapes", LAYERS, ids=[c[0] for c in LAYERS])
def test_layers(name, args, shapes):
    inputs = [rng.standard_normal(s) for s in shapes]
    if name.startswith("LPPool") and args[0] != 2:
        inputs = [np.abs(a) + 0.1 for a in inputs]
    theirs, ours = getattr(torch.nn, name)(*args), getattr(nn, name)(*args)
    compare_module_with_torch(theirs, ours, inputs, "float64")
    assert ours.state_dict() == {}


def test_rrelu_module_modes():
    x = rng.standard_normal((4, 5))
    compare_module_with_torch(torch.nn.RReLU(0.1, 0.3).eval(), nn.RReLU(0.1, 0.3).eval(), [x],
                              "float64")  # fmt: skip
    layer = nn.RReLU(0.1, 0.3)
    rg.seed(4)
    slopes = layer(rg.tensor(x)).numpy()[x < 0] / x[x < 0]
    assert slopes.min() >= 0.1 and slopes.max() <= 0.3 and len(np.unique(slopes)) > 3


def test_alpha_dropout_modules_follow_train_and_eval():
    x = rg.tensor(rng.standard_normal((100, 8, 2)))
    for name in ("AlphaDropout", "FeatureAlphaDropout"):
        layer = getattr(nn, name)(0.4)
        assert not np.array_equal(layer(x).numpy(), x.numpy())
        assert layer.eval()(x) is x


def test_channel_shuffle_module():
    x = rng.standard_normal((2, 6, 3))
    expected = torch.nn.ChannelShuffle(3)(torch.tensor(x)).numpy()
    np.testing.assert_array_equal(nn.ChannelShuffle(3)(rg.tensor(x)).numpy(), expected)


def test_cross_map_lrn2d_values_are_torchs():
    x = rng.standard_normal((2, 8, 3, 3))
    for size in (1, 3, 5):
        theirs = torch.nn.CrossMapLRN2d(size, 0.5, 0.75, 1)(torch.tensor(x)).numpy()
        ours = nn.CrossMapLRN2d(size, 0.5, 0.75, 1)(rg.tensor(x)).numpy()
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("spatial", [1, 2, 3])
def test_max_unpool_modules(spatial):
    shape = (2, 3, *(4,) * spatial)
    x = torch.tensor(rng.standard_normal(shape))
    pool = getattr(torch.nn, f"MaxPool{spatial}d")(2, return_indices=True)
    values, indices = pool(x)
    theirs = getattr(torch.nn, f"MaxUnpool{spatial}d")(2)
    ours = getattr(nn, f"MaxUnpool{spatial}d")(2)
    compare_module_with_torch(theirs, ours, [values.numpy()], "float64",
                              constants=[indices.numpy()])  # fmt: skip
    sized = ours(rg.tensor(values.numpy()), rg.tensor(indices.numpy()), output_size=x.shape)
    assert sized.shape == tuple(x.shape)


# -- lazy layers -----------------------------------------------------------------------------------
LAZY = [
    ("LazyLinear", (5,), {}, (3, 4)),
    ("LazyLinear", (5,), {"bias": False}, (2, 3, 4)),
    ("LazyConv1d", (4, 3), {"padding": 1}, (2, 3, 7)),
    ("LazyConv2d", (4, 3), {"stride": 2, "groups": 2}, (2, 6, 7, 7)),
    ("LazyConv3d", (2, 2), {"bias": False}, (1, 3, 4, 4, 4)),
    ("LazyConvTranspose1d", (4, 3), {"stride": 2}, (2, 3, 5)),
    ("LazyConvTranspose2d", (4, 3), {"output_padding": 1, "stride": 2}, (2, 3, 4, 4)),
    ("LazyConvTranspose3d", (2, 2), {}, (1, 3, 3, 3, 3)),
    ("LazyBatchNorm1d", (), {}, (5, 3)),
    ("LazyBatchNorm2d", (), {"momentum": 0.3}, (4, 3, 2, 2)),
    ("LazyBatchNorm3d", (), {"affine": False}, (2, 3, 2, 2, 2)),
    ("LazyInstanceNorm1d", (), {}, (2, 3, 6)),
    ("LazyInstanceNorm2d", (), {"affine": True, "track_running_stats": True}, (2, 3, 4, 4)),
    ("LazyInstanceNorm3d", (), {"affine": True}, (2, 3, 2, 3, 2)),
]


@pytest.mark.parametrize("name, args, kwargs, shape", LAZY, ids=[f"{c[0]}-{c[2]}" for c in LAZY])
def test_lazy_layers_become_their_layer_and_match_torch(name, args, kwargs, shape):
    theirs = getattr(torch.nn, name)(*args, **kwargs, dtype=torch.float64)
    ours = getattr(nn, name)(*args, **kwargs, dtype="float64")
    _same_keys(ours, theirs)
    held = dict(ours.named_parameters())
    x = rng.standard_normal(shape)
    theirs(torch.tensor(x))  # materialize torch's, then load its (random) initialization
    ours(rg.tensor(x))
    assert type(ours).__name__ == type(theirs).__name__
    assert type(ours) is getattr(nn, type(theirs).__name__)
    _same_keys(ours, theirs)
    for key, value in theirs.state_dict().items():
        assert ours.state_dict()[key].shape == tuple(value.shape), key
    for key, parameter in ours.named_parameters():
        assert parameter is held[key]  # the objects an optimizer may already hold
    _load_from_torch(ours, theirs)
    compare_module_with_torch(theirs, ours, [x], "float64")


@pytest.mark.parametrize("name, args, kwargs, shape", LAZY, ids=[f"{c[0]}-{c[2]}" for c in LAZY])
def test_lazy_layers_load_a_torch_state_dict_before_their_first_call(name, args, kwargs, shape):
    theirs = getattr(torch.nn, name)(*args, **kwargs, dtype=torch.float64)
    x = rng.standard_normal(shape)
    theirs(torch.tensor(x))
    model = nn.Sequential(getattr(nn, name)(*args, **kwargs, dtype="float64"))
    model.load_state_dict({f"0.{k}": v for k, v in theirs.state_dict().items()})
    assert type(model[0]).__name__ == type(theirs).__name__
    compare_module_with_torch(theirs, model[0], [x], "float64")


def test_an_optimizer_built_before_the_first_call_trains_the_lazy_parameters():
    model = nn.Sequential(nn.LazyLinear(4), nn.ReLU(), nn.LazyLinear(1))
    optimizer = rg.optim.SGD(model.parameters(), lr=0.1)
    # float32 data, as the lazy layers' weights (a float64 input is refused, as torch's)
    x = rg.tensor(rng.standard_normal((8, 3)).astype(np.float32))
    y = rg.tensor(rng.standard_normal((8, 1)).astype(np.float32))
    losses = []
    for _ in range(5):
        loss = ((model(x) - y) ** 2).mean()
        losses.append(loss.item())
        optimizer.step(loss.backward())
    assert model[0].weight.shape == (4, 3) and losses[-1] < losses[0]


def test_unbatched_lazy_convolution_reads_channels_from_dimension_0():
    conv = nn.LazyConv1d(4, 3)
    assert conv(rg.ones((5, 9))).shape == (4, 7) and conv.in_channels == 5


def test_lazy_errors():
    with pytest.raises(rg.ShapeError, match=r"LazyBatchNorm2d.*at least 2 dimensions"):
        nn.LazyBatchNorm2d()(rg.ones((3,)))
    with pytest.raises(rg.InvalidArgumentError, match=r"divisible by groups"):
        nn.LazyConv2d(4, 3, groups=2)(rg.ones((1, 3, 5, 5)))


def test_module_errors():
    with pytest.raises(rg.InvalidArgumentError, match=r"TripletMarginLoss.*margin"):
        nn.TripletMarginLoss(margin=0.0)
    with pytest.raises(rg.InvalidArgumentError, match=r"MultiMarginLoss.*p == 1"):
        nn.MultiMarginLoss(p=3)
    with pytest.raises(rg.ShapeError, match=r"bilinear.*\[2, 3\]"):
        nn.Bilinear(3, 4, 5)(rg.ones((2, 3)), rg.ones((2, 5)))


def test_full_backward_hooks_see_and_replace_gradients_as_torchs():
    """A hook on the first layer (whose input needs no gradient: ``(None,)``), one on the
    last (its result doubles the input gradient) and a pre-hook (tripling the output
    gradient) on the activation: the gradients each sees and the weights' gradients after
    the replacements, against torch."""
    import warnings

    def build(lib):
        torch.manual_seed(0)
        return lib.nn.Sequential(
            lib.nn.Conv2d(1, 2, 3), lib.nn.ReLU(), lib.nn.Flatten(), lib.nn.Linear(8, 3)
        )

    theirs, ours = build(torch), build(rg)
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((2, 1, 4, 4))
    seen: dict[str, list] = {"torch": [], "rg": []}

    def hooks(key):
        def full(module, grad_input, grad_output):
            inputs = [None if g is None else np.array(g.detach().numpy()) for g in grad_input]
            seen[key].append((inputs, np.array(grad_output[0].detach().numpy())))
            return None if grad_input[0] is None else (grad_input[0] * 2,)

        def pre(module, grad_output):
            return (grad_output[0] * 3,)

        return full, pre

    for key, model in (("torch", theirs.double()), ("rg", ours.double())):
        full, pre = hooks(key)
        model[0].register_full_backward_hook(full)
        model[3].register_full_backward_hook(full)
        model[1].register_full_backward_pre_hook(pre)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns of the (None,) input gradient
        theirs(torch.tensor(x)).sum().backward()
    grads = ours(rg.tensor(x)).sum().backward()
    assert len(seen["rg"]) == len(seen["torch"]) == 2
    for (mine_in, mine_out), (their_in, their_out) in zip(seen["rg"], seen["torch"]):
        np.testing.assert_allclose(mine_out, their_out, rtol=1e-12)
        assert [g is None for g in mine_in] == [g is None for g in their_in]
        for a, b in zip(mine_in, their_in):
            if b is not None:
                np.testing.assert_allclose(a, b, rtol=1e-12)
    for name, p in theirs.named_parameters():
        mine = dict(ours.named_parameters())[name]
        np.testing.assert_allclose(mine.grad(grads).numpy(), p.grad.numpy(), rtol=1e-12)


def _hooked_calls(lib):
    """Modules called with several arguments and returning tuples, under full backward hooks
    and pre-hooks: what each hook saw (gradients as lists, ``None`` kept) and the inputs'
    gradients after a hook replaced some."""
    seen = []

    def listed(grads):
        return [None if g is None else g.detach().numpy().tolist() for g in grads]

    def full(tag):
        return lambda module, gi, go: seen.append((tag, listed(gi), listed(go)))

    class Scaled(lib.nn.Module):  # a tensor, an int, a tensor in; a tensor, a 0-d, an int out
        def forward(self, x, k, z):
            return x * k, (z * 2).sum(), 3

    bilinear = lib.nn.Bilinear(2, 3, 1)
    with lib.no_grad():
        bilinear.weight.copy_(lib.tensor(np.linspace(-1, 1, 6, dtype=np.float32).reshape(1, 2, 3)))
        bilinear.bias.fill_(0.5)
    bilinear.register_full_backward_hook(full("bilinear"))
    bilinear.register_full_backward_pre_hook(lambda m, go: seen.append(("pre", listed(go))))
    scaled = Scaled()
    scaled.register_full_backward_hook(full("scaled"))
    lstm = lib.nn.LSTM(2, 2)  # returns (output, (h, c)): the inner tuple is no tensor
    with lib.no_grad():
        for parameter in lstm.parameters():
            values = np.linspace(-0.5, 0.5, parameter.numel(), dtype=np.float32)
            parameter.copy_(lib.tensor(values.reshape(tuple(parameter.shape))))
    lstm.register_full_backward_hook(full("lstm"))
    a = lib.tensor([[1.0, 2.0]], requires_grad=True)
    b = lib.tensor([[0.5, -1.0, 2.0]], requires_grad=True)
    fixed = lib.tensor([[0.5, -1.0, 2.0]])  # needs no gradient: torch's hook sees zeros
    x = lib.tensor([1.0, 2.0], requires_grad=True)
    z = lib.tensor([3.0, 4.0], requires_grad=True)
    p, q, _ = scaled(x, 5, z)
    losses = [bilinear(a, b).sum(), bilinear(a, fixed).sum(), p.sum() * 2 + q]
    losses.append(lstm(lib.ones(3, 1, 2, requires_grad=True))[0].sum())

    class Product(lib.nn.Module):
        def forward(self, x, z):
            return x * z

    product = Product()
    product.register_full_backward_hook(lambda m, gi, go: (gi[0] * 0 + 7, None))
    replaced = product(x, z).sum()
    if lib is torch:
        for loss in losses:
            loss.backward()
        x.grad, z.grad = None, None
        replaced.backward()
        return seen, (x.grad.tolist(), z.grad)
    for loss in losses:
        loss.backward()
    grads = replaced.backward()
    return seen, (x.grad(grads).tolist(), z.grad(grads))


def test_full_backward_hooks_of_modules_with_several_arguments_and_outputs_as_torchs():
    """Until 6 December a module called with two tensors (``nn.Bilinear``), or returning a
    tuple, refused backward hooks. As torch's, the hooks now get one gradient per positional
    argument (``None`` for an int, zeros for a tensor that needs none) and one per output
    (``None`` for an int or a nested tuple), and a hook's tuple replaces them."""
    ours, theirs = _hooked_calls(rg), _hooked_calls(torch)

    def agree(mine: object, their: object) -> None:
        if isinstance(their, list | tuple):
            assert isinstance(mine, list | tuple) and len(mine) == len(their), (mine, their)
            for m, t in zip(mine, their):
                agree(m, t)
        elif their is None or isinstance(their, str):
            assert mine == their
        else:
            np.testing.assert_allclose(mine, their, rtol=1e-5, atol=1e-7)

    agree(ours, theirs)
    product = rg.nn.Linear(2, 2)
    product.register_full_backward_hook(lambda m, gi, go: (gi[0], gi[0]))
    with pytest.raises(rg.InvalidArgumentError, match="got 2, but expected 1"):
        product(rg.ones(1, 2, requires_grad=True)).sum().backward()
