"""API.md section 8, the module and optimizer half: each item written as PyTorch code would be,
checked against PyTorch (torch is installed with the dev extra) or against values computed here
by NumPy, never by the code under test.

Parameters, registration, buffers, weight tying, containers, traversal, ``apply``, ``to``,
``nn.init``, layers with torch's constructors and state dicts, batch / group / RMS norm (values,
running statistics, gradients vs finite differences and torch), optimizers with parameter
groups, ``state_dict``, RMSprop, ``clip_grad_norm_``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import retrograd as rg
from nn_testing import check_finite_differences, compare_with_torch
from retrograd import nn, optim
from retrograd.nn import functional as F  # noqa: N812

torch = pytest.importorskip("torch")


def to_torch_state(module: nn.Module) -> dict:
    return {k: torch.from_numpy(v.copy()) for k, v in module.state_dict().items()}


# -- Parameter -----------------------------------------------------------------------------------
def test_parameter_is_a_tensor_in_every_use():
    source = rg.tensor([1.0, 2.0, 3.0])
    p = nn.Parameter(source)
    assert isinstance(p, rg.Tensor) and p.is_require_grad()
    assert not source.requires_grad  # the source is not marked: the parameter is a new leaf
    np.testing.assert_array_equal(np.asarray(p), [1.0, 2.0, 3.0])
    doubled = p * 2
    assert type(doubled) is rg.Tensor and type(2 * p) is rg.Tensor and type(p + p) is rg.Tensor
    assert type(p.reshape((3, 1))) is rg.Tensor and type(p[1:]) is rg.Tensor
    assert type(p.double()) is rg.Tensor and type(F.linear(rg.ones((1, 3)), p[None])) is rg.Tensor
    grads = (p * p).sum().backward()
    assert p.grad(grads).tolist() == [2.0, 4.0, 6.0]
    frozen = nn.Parameter(source, requires_grad=False)
    assert not frozen.requires_grad
    with pytest.raises(rg.DTypeError, match="Parameter"):
        nn.Parameter(rg.tensor([1, 2], dtype="int64"))
    assert repr(p).startswith("Parameter containing:")


def test_attribute_assignment_registers_parameters_modules_and_buffers():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = nn.Parameter(rg.ones((2,)))
            self.plain = rg.zeros((2,))  # a plain tensor is a plain attribute, as in torch
            self.body = nn.Linear(2, 2)
            self.register_buffer("mask", rg.tensor([1.0, 0.0]))
            self.register_buffer("scratch", rg.zeros((1,)), persistent=False)

        def forward(self, x):
            return self.body(x) * self.scale * self.mask

    net = Net()
    assert [n for n, _ in net.named_parameters()] == ["scale", "body.weight", "body.bias"]
    assert [n for n, _ in net.named_buffers()] == ["mask", "scratch"]
    assert list(net.state_dict()) == ["scale", "mask", "body.weight", "body.bias"]
    assert "plain" not in dict(net.named_parameters()) and "plain" not in net.state_dict()
    # assigning a tensor to a buffer's name replaces the buffer
    net.mask = rg.tensor([0.0, 1.0])
    assert net.mask.tolist() == [0.0, 1.0] and net.state_dict()["mask"].tolist() == [0.0, 1.0]
    grads = net(rg.ones((3, 2))).sum().backward()
    assert net.mask.grad(grads) is None  # a buffer is not trained
    assert all(p.grad(grads) is not None for p in net.parameters())
    # a new Parameter assigned to the name replaces the registered one
    net.scale = nn.Parameter(rg.ones((3,)))
    assert dict(net.named_parameters())["scale"].shape == (3,)
    del net.scale
    assert "scale" not in dict(net.named_parameters())
    assert nn.Linear(3, 2, bias=False).bias is None
    assert list(nn.Linear(3, 2, bias=False).state_dict()) == ["weight"]
    with pytest.raises(AttributeError, match=r"before Module\.__init__"):

        class Broken(nn.Module):
            def __init__(self):
                self.weight = nn.Parameter(rg.ones((1,)))

        Broken()


def test_set_parameter_with_a_new_shape_is_a_clear_shape_error():
    model = nn.Linear(2, 3)
    with pytest.raises(rg.ShapeError, match=r"'weight' has shape \[3, 2\], got \[4, 2\]"):
        model.set_parameter("weight", rg.zeros((4, 2)))
    with pytest.raises(rg.ShapeError, match="weight"):
        model.weight = rg.zeros((4, 2))  # a tensor for a parameter goes through set_parameter


# -- weight tying --------------------------------------------------------------------------------
class Tied(nn.Module):
    """An embedding and an output head sharing one weight, nanoGPT's way."""

    def __init__(self, vocab=7, dim=4):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.wte.weight = self.lm_head.weight

    def forward(self, idx):
        return self.lm_head(self.wte(idx))


def test_a_tied_parameter_is_one_parameter_everywhere():
    rg.seed(0)
    model = Tied()
    assert model.wte.weight is model.lm_head.weight
    assert [n for n, _ in model.named_parameters()] == ["wte.weight"]  # first name met
    assert list(model.state_dict()) == ["wte.weight", "lm_head.weight"]  # torch's keys
    idx = rg.tensor([[1, 2, 3], [4, 5, 6]], dtype="int64")
    weight = model.lm_head.weight.numpy().astype(np.float64)
    grads = model(idx).sum().backward()
    # the gradient is the sum of both uses: embedding rows + head
    rows = np.zeros_like(weight)
    np.add.at(rows, idx.numpy().ravel(), weight.sum(axis=0))
    head = np.broadcast_to(weight[idx.numpy().ravel()].sum(axis=0), weight.shape)
    np.testing.assert_allclose(model.wte.weight.grad(grads).numpy(), rows + head, rtol=1e-5)
    # clipping counts it once
    norm = nn.utils.clip_grad_norm_(grads, model.parameters(), 1e9)
    assert norm == pytest.approx(float(np.linalg.norm(rows + head)), rel=1e-5)
    # one optimizer state, and still one object after steps and load_state_dict
    optimizer = optim.AdamW(model.parameters(), lr=0.1)
    optimizer.step(grads)
    optimizer.step(model(idx).sum().backward())
    assert len(optimizer.state) == 1
    assert model.wte.weight is model.lm_head.weight
    model.load_state_dict(Tied().state_dict())
    assert model.wte.weight is model.lm_head.weight
    model.double()
    assert model.wte.weight is model.lm_head.weight and model.wte.weight.dtype == "float64"
    replica = model.replicate()
    assert replica.wte.weight is replica.lm_head.weight
    assert replica.wte.weight is not model.wte.weight


def test_tied_model_matches_torch_including_the_tied_gradient():
    rg.seed(1)
    model = Tied().double()

    class TorchTied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = torch.nn.Embedding(7, 4)
            self.lm_head = torch.nn.Linear(4, 7, bias=False)
            self.wte.weight = self.lm_head.weight

    reference = TorchTied().double()
    reference.load_state_dict(to_torch_state(model))
    assert [n for n, _ in reference.named_parameters()] == ["wte.weight"]
    idx = np.array([[0, 3, 3, 6]])
    logits = model(rg.tensor(idx, dtype="int64"))
    expected = reference.lm_head(reference.wte(torch.from_numpy(idx)))
    np.testing.assert_allclose(logits.numpy(), expected.detach().numpy(), rtol=1e-12)
    target = np.array([1, 2, 0, 5])
    loss = F.cross_entropy(logits.reshape((4, 7)), rg.tensor(target, dtype="int64"))
    grads = loss.backward()
    torch.nn.functional.cross_entropy(expected.reshape(4, 7), torch.from_numpy(target)).backward()
    np.testing.assert_allclose(
        model.lm_head.weight.grad(grads).numpy(), reference.lm_head.weight.grad.numpy(), rtol=1e-10
    )


# -- containers, traversal, apply, to ----------------------------------------------------------
def test_containers_name_like_torch_and_load_torch_state_dicts():
    ours = nn.ModuleDict(
        {
            "h": nn.ModuleList([nn.Linear(3, 3), nn.Linear(3, 3)]),
            "seq": nn.Sequential(nn.Linear(3, 2), nn.ReLU(inplace=True), nn.Identity()),
        }
    )
    theirs = torch.nn.ModuleDict(
        {
            "h": torch.nn.ModuleList([torch.nn.Linear(3, 3), torch.nn.Linear(3, 3)]),
            "seq": torch.nn.Sequential(
                torch.nn.Linear(3, 2), torch.nn.ReLU(inplace=True), torch.nn.Identity()
            ),
        }
    )
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [n for n, _ in ours.named_modules()] == [n for n, _ in theirs.named_modules()]
    assert len(list(ours.modules())) == len(list(theirs.modules()))
    assert [n for n, _ in ours.named_children()] == ["h", "seq"]
    ours.load_state_dict(theirs.state_dict())  # torch tensors load as they are
    np.testing.assert_array_equal(
        ours["h"][1].weight.numpy(), theirs["h"][1].weight.detach().numpy()
    )
    assert len(ours["h"]) == 2 and isinstance(ours["h"][-1], nn.Linear)
    assert isinstance(ours["h"][0:1], nn.ModuleList) and len(ours["seq"][:2]) == 2
    assert "h" in ours and list(ours.keys()) == ["h", "seq"]
    ours["h"].append(nn.Linear(3, 3))
    assert "h.2.weight" in ours.state_dict()
    with pytest.raises(rg.DTypeError, match="not a Module"):
        nn.ModuleList([nn.Linear(1, 1), "nope"])


def test_apply_visits_children_first_and_initializes_in_place():
    model = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.Linear(4, 2)))
    weights = [model[0].weight, model[1][0].weight]
    visited = []

    def init(module):
        visited.append(type(module).__name__)
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            nn.init.zeros_(module.bias)

    assert model.apply(init) is model
    assert visited == ["Linear", "Linear", "Sequential", "Sequential"]
    assert [model[0].weight, model[1][0].weight] == weights or all(
        a is b for a, b in zip([model[0].weight, model[1][0].weight], weights)
    )
    assert model[0].bias.tolist() == [0.0] * 4 and model[0].weight.is_require_grad()


def test_to_double_and_float_cast_parameters_and_floating_buffers():
    model = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))
    weight = model[0].weight
    assert model.to("float64") is model
    assert weight is model[0].weight and weight.dtype == "float64" and weight.is_require_grad()
    assert model[1].running_mean.dtype == "float64"
    assert model[1].num_batches_tracked.dtype == "int64"
    model.float()
    assert weight.dtype == "float32" and model[1].running_var.dtype == "float32"
    model.to(dtype="float64")
    assert model[1].weight.dtype == "float64"
    out = model(rg.tensor(np.random.default_rng(0).standard_normal((5, 2))))
    assert out.dtype == "float64"
    with pytest.raises(rg.DTypeError):
        model.to("int64")


def test_train_eval_and_requires_grad():
    model = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5), nn.BatchNorm1d(2))
    assert all(m.training for m in model.modules())
    model.eval()
    assert not any(m.training for m in model.modules())
    model.requires_grad_(False)
    assert not any(p.requires_grad for p in model.parameters())
    model.requires_grad_(True)
    assert all(p.is_require_grad() for p in model.parameters())


def test_a_reassigned_name_keeps_its_place_as_in_torch():
    """siamese_network replaces ``resnet.conv1`` and then drops the last child with
    ``Sequential(*list(resnet.children())[:-1])``: the order must stay torch's."""

    def build(lib):
        model = lib.nn.Module()
        model.conv1 = lib.nn.Conv2d(3, 4, 3)
        model.bn = lib.nn.BatchNorm2d(4)
        model.fc = lib.nn.Linear(4, 2)
        model.scale = lib.nn.Parameter(lib.ones(1))
        model.shift = lib.nn.Parameter(lib.zeros(1))
        model.register_buffer("first", lib.zeros(1))
        model.register_buffer("second", lib.zeros(1))
        model.conv1 = lib.nn.Conv2d(1, 4, 3)
        model.scale = lib.nn.Parameter(lib.ones(2))
        model.register_buffer("first", lib.ones(2))
        model.add_module("bn", lib.nn.BatchNorm2d(4))
        model.register_parameter("scale", lib.nn.Parameter(lib.ones(3)))
        return model

    ours, theirs = build(rg), build(torch)
    assert [n for n, _ in ours.named_children()] == [n for n, _ in theirs.named_children()]
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    trimmed = nn.Sequential(*list(ours.children())[:-1])
    assert isinstance(trimmed[0], nn.Conv2d) and trimmed[0].in_channels == 1
    assert isinstance(trimmed[-1], nn.BatchNorm2d)


def test_setting_requires_grad_on_a_leaf_freezes_it_in_place_as_in_torch():
    """``for param in vgg.parameters(): param.requires_grad = False`` (fast_neural_style's
    frozen feature extractor) and ``t.requires_grad_(False)``: the same object, its values
    kept, no gradient from backward, skipped by the optimizer; a tracked intermediate refuses."""
    model = nn.Linear(2, 1).double()
    weight, bias = model.weight, model.bias
    before = weight.tolist()
    for param in model.parameters():
        param.requires_grad = False
    assert model.weight is weight and not weight.requires_grad and weight.tolist() == before
    t = rg.tensor([1.0, 2.0], dtype="float64").require_grad()
    assert t.requires_grad_(False) is t and not t.requires_grad and not t.is_require_grad()
    loss = (model(rg.tensor([[1.0, 2.0]], dtype="float64")) * t.sum()).sum()
    assert not loss.requires_grad
    bias.requires_grad = True
    bias_before = bias.tolist()
    grads = model(rg.tensor([[1.0, 2.0]], dtype="float64")).sum().backward()
    assert weight.grad(grads) is None and bias.grad(grads).tolist() == [1.0]
    rg.optim.SGD(model.parameters(), lr=0.5).step(grads)
    assert weight.tolist() == before and bias.tolist() == [bias_before[0] - 0.5]
    computed = bias * 2.0
    with pytest.raises(rg.AutodiffError, match=r"only a leaf.*detach"):
        computed.requires_grad = False
    computed.requires_grad = True  # already tracked: nothing to change
    assert computed.requires_grad and bias.is_require_grad()
    ints = rg.tensor([1, 2])
    ints.requires_grad = False
    with pytest.raises(rg.DTypeError, match="only float tensors"):
        ints.requires_grad = True


# -- init ------------------------------------------------------------------------------------------
def test_init_functions_follow_torch_formulas():
    rg.seed(3)
    w = nn.Parameter(rg.zeros((400, 300)))
    fan_in, fan_out = 300, 400
    assert nn.init.kaiming_uniform_(w, a=math.sqrt(5)) is w
    bound = math.sqrt(3) * math.sqrt(2 / (1 + 5)) / math.sqrt(fan_in)
    values = w.numpy()
    assert np.abs(values).max() <= bound and np.abs(values).max() > 0.98 * bound
    nn.init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu")
    assert w.numpy().std() == pytest.approx(math.sqrt(2) / math.sqrt(fan_out), rel=0.02)
    nn.init.xavier_uniform_(w, gain=2.0)
    bound = 2.0 * math.sqrt(6 / (fan_in + fan_out))
    assert np.abs(w.numpy()).max() <= bound and np.abs(w.numpy()).max() > 0.98 * bound
    nn.init.xavier_normal_(w)
    assert w.numpy().std() == pytest.approx(math.sqrt(2 / (fan_in + fan_out)), rel=0.02)
    nn.init.trunc_normal_(w, mean=0.5, std=1.0, a=0.0, b=1.0)
    assert w.numpy().min() >= 0.0 and w.numpy().max() <= 1.0
    nn.init.uniform_(w, -3.0, -2.0)
    assert w.numpy().min() >= -3.0 and w.numpy().max() <= -2.0
    nn.init.normal_(w, mean=1.0, std=0.02)
    assert w.numpy().mean() == pytest.approx(1.0, abs=1e-3)
    nn.init.constant_(w, 0.25)
    assert np.all(w.numpy() == 0.25)
    nn.init.ones_(w)
    assert np.all(w.numpy() == 1.0) and w.is_require_grad() and w.dtype == "float32"
    for name in ("linear", "conv2d", "sigmoid", "tanh", "relu", "selu"):
        assert nn.init.calculate_gain(name) == pytest.approx(torch.nn.init.calculate_gain(name))
    assert nn.init.calculate_gain("leaky_relu", 0.2) == pytest.approx(
        torch.nn.init.calculate_gain("leaky_relu", 0.2)
    )
    with pytest.raises(rg.ShapeError, match="xavier_uniform_"):
        nn.init.xavier_uniform_(nn.Parameter(rg.zeros((3,))))
    rg.seed(9)
    a = nn.init.normal_(nn.Parameter(rg.zeros((3,)))).tolist()
    rg.seed(9)
    assert nn.init.normal_(nn.Parameter(rg.zeros((3,)))).tolist() == a


# -- layers against torch from identical weights ---------------------------------------------------
def _compare_layer(ours: nn.Module, theirs, x: np.ndarray, rtol=1e-10, atol=1e-12):
    ours.double()
    theirs.double()
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict(theirs.state_dict())
    for (name, a), (_, b) in zip(ours.state_dict().items(), theirs.state_dict().items()):
        assert a.shape == tuple(b.shape), name
    xr = rg.tensor(x).require_grad()
    xt = torch.tensor(x, requires_grad=True)
    out = ours(xr)
    expected = theirs(xt)
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=rtol, atol=atol)
    seed = np.random.default_rng(5).standard_normal(expected.shape)
    grads = (out * rg.tensor(seed)).sum().backward()
    (expected * torch.from_numpy(seed)).sum().backward()
    np.testing.assert_allclose(xr.grad(grads).numpy(), xt.grad.numpy(), rtol=rtol, atol=atol)
    named = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        np.testing.assert_allclose(
            p.grad(grads).numpy(), named[name].grad.numpy(), rtol=rtol, atol=atol, err_msg=name
        )


LAYERS = {
    "conv1d": (
        lambda: (nn.Conv1d(3, 4, 3, stride=2, padding=1), torch.nn.Conv1d(3, 4, 3, 2, 1)),
        (2, 3, 9),
    ),
    "conv2d_groups_nobias": (
        lambda: (
            nn.Conv2d(4, 6, 3, padding=1, groups=2, bias=False),
            torch.nn.Conv2d(4, 6, 3, padding=1, groups=2, bias=False),
        ),
        (2, 4, 5, 5),
    ),
    "conv_transpose2d": (
        lambda: (
            nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2),
            torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2),
        ),
        (2, 4, 4, 4),
    ),
    "maxpool_avgpool_adaptive": (
        lambda: (
            nn.Sequential(nn.MaxPool2d(3, 2, 1), nn.AvgPool2d(2), nn.AdaptiveAvgPool2d((1, 1))),
            torch.nn.Sequential(
                torch.nn.MaxPool2d(3, 2, 1),
                torch.nn.AvgPool2d(2),
                torch.nn.AdaptiveAvgPool2d((1, 1)),
            ),
        ),
        (2, 3, 9, 9),
    ),
    "upsample_flatten": (
        lambda: (
            nn.Sequential(nn.Upsample(scale_factor=2, mode="bilinear"), nn.Flatten()),
            torch.nn.Sequential(
                torch.nn.Upsample(scale_factor=2, mode="bilinear"), torch.nn.Flatten()
            ),
        ),
        (2, 3, 3, 4),
    ),
    "activations_dropout_eval": (
        lambda: (
            nn.Sequential(
                nn.Linear(5, 6),
                nn.GELU(),
                nn.Linear(6, 6),
                nn.GELU(approximate="tanh"),
                nn.SiLU(),
                nn.Tanh(),
                nn.Dropout(0.3),
            ).eval(),
            torch.nn.Sequential(
                torch.nn.Linear(5, 6),
                torch.nn.GELU(),
                torch.nn.Linear(6, 6),
                torch.nn.GELU(approximate="tanh"),
                torch.nn.SiLU(),
                torch.nn.Tanh(),
                torch.nn.Dropout(0.3),
            ).eval(),
        ),
        (4, 5),
    ),
    "layer_group_rms_norm": (
        lambda: (
            nn.Sequential(nn.GroupNorm(2, 4), nn.LayerNorm(5), nn.RMSNorm(5)),
            torch.nn.Sequential(
                torch.nn.GroupNorm(2, 4), torch.nn.LayerNorm(5), torch.nn.RMSNorm(5)
            ),
        ),
        (3, 4, 5),
    ),
}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_matches_torch_from_its_state_dict(name):
    make, shape = LAYERS[name]
    torch.manual_seed(0)
    ours, theirs = make()
    # non-trivial affine parameters for the normalizations
    with torch.no_grad():
        for p in theirs.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    x = np.random.default_rng(0).standard_normal(shape)
    _compare_layer(ours, theirs, x)


def test_default_initialization_has_torch_bounds_and_layouts():
    rg.seed(0)
    for ours, theirs in [
        (nn.Linear(7, 3), torch.nn.Linear(7, 3)),
        (nn.Conv1d(4, 6, 5, groups=2), torch.nn.Conv1d(4, 6, 5, groups=2)),
        (nn.Conv2d(3, 8, 3), torch.nn.Conv2d(3, 8, 3)),
        (nn.ConvTranspose2d(6, 4, 3, groups=2), torch.nn.ConvTranspose2d(6, 4, 3, groups=2)),
    ]:
        for (name, a), (_, b) in zip(ours.named_parameters(), theirs.named_parameters()):
            assert a.shape == tuple(b.shape), name
            # the bound torch uses is the max it can draw: ours must stay within it and
            # reach close to it (U(-k, k), k from torch's fan_in)
            torch_bound = 1 / math.sqrt(
                torch.nn.init._calculate_fan_in_and_fan_out(theirs.weight)[0]
            )
            assert np.abs(a.numpy()).max() <= torch_bound + 1e-7, name


def test_losses_match_torch():
    rng = np.random.default_rng(2)
    logits, target = rng.standard_normal((6, 4)), rng.integers(0, 4, 6)
    target[2] = -100
    ours = nn.CrossEntropyLoss(label_smoothing=0.1)(rg.tensor(logits), rg.tensor(target))
    theirs = torch.nn.CrossEntropyLoss(label_smoothing=0.1)(
        torch.from_numpy(logits), torch.from_numpy(target)
    )
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-12)
    weights = rng.random(4)
    ours = nn.CrossEntropyLoss(weight=rg.tensor(weights), reduction="sum")
    assert list(ours.state_dict()) == ["weight"]
    value = ours(rg.tensor(logits), rg.tensor(target)).item()
    expected = torch.nn.CrossEntropyLoss(weight=torch.from_numpy(weights), reduction="sum")(
        torch.from_numpy(logits), torch.from_numpy(target)
    )
    assert value == pytest.approx(expected.item(), rel=1e-12)
    a, b = rng.standard_normal((3, 5)), rng.standard_normal((3, 5))
    assert nn.MSELoss()(rg.tensor(a), rg.tensor(b)).item() == pytest.approx(
        float(((a - b) ** 2).mean()), rel=1e-12
    )


# -- batch norm ------------------------------------------------------------------------------------
@pytest.mark.parametrize("momentum", [0.1, None])
@pytest.mark.parametrize("rank", [2, 3, 4])
def test_batch_norm_training_running_stats_and_eval_match_torch(rank, momentum):
    shape = {2: (8, 3), 3: (4, 3, 5), 4: (4, 3, 5, 2)}[rank]
    ours = (nn.BatchNorm2d if rank == 4 else nn.BatchNorm1d)(3, momentum=momentum).double()
    theirs = (torch.nn.BatchNorm2d if rank == 4 else torch.nn.BatchNorm1d)(
        3, momentum=momentum
    ).double()
    with torch.no_grad():
        theirs.weight.add_(torch.randn(3, dtype=torch.float64))
        theirs.bias.add_(torch.randn(3, dtype=torch.float64))
    ours.load_state_dict(theirs.state_dict())
    rng = np.random.default_rng(rank)
    running_mean = ours.running_mean
    for step in range(3):
        x = rng.standard_normal(shape) * (step + 1) + step
        xr = rg.tensor(x).require_grad()
        xt = torch.tensor(x, requires_grad=True)
        out, expected = ours(xr), theirs(xt)
        np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-10, atol=1e-12)
        grads = out.square().sum().backward()
        expected.square().sum().backward()
        np.testing.assert_allclose(xr.grad(grads).numpy(), xt.grad.numpy(), rtol=1e-9, atol=1e-11)
        np.testing.assert_allclose(
            ours.weight.grad(grads).numpy(), theirs.weight.grad.numpy(), rtol=1e-10
        )
        theirs.zero_grad()
    assert ours.running_mean is running_mean  # updated in place, as torch
    assert not running_mean.requires_grad and not ours.running_var.requires_grad  # no graph
    for name, value in theirs.state_dict().items():
        np.testing.assert_allclose(ours.state_dict()[name], value.numpy(), rtol=1e-12, err_msg=name)
    assert ours.state_dict()["num_batches_tracked"].dtype == np.int64
    assert int(ours.num_batches_tracked.item()) == 3
    ours.eval()
    theirs.eval()
    x = rng.standard_normal(shape)
    np.testing.assert_allclose(
        ours(rg.tensor(x)).numpy(), theirs(torch.from_numpy(x)).detach().numpy(), rtol=1e-10
    )


def test_batch_norm_without_running_stats_and_errors():
    ours = nn.BatchNorm1d(2, track_running_stats=False, affine=False).eval()
    theirs = torch.nn.BatchNorm1d(2, track_running_stats=False, affine=False).eval()
    assert ours.state_dict() == {} and list(theirs.state_dict()) == []
    x = np.random.default_rng(0).standard_normal((5, 2))
    np.testing.assert_allclose(
        ours(rg.tensor(x)).numpy(), theirs(torch.from_numpy(x)).numpy(), rtol=1e-10
    )
    with pytest.raises(rg.ShapeError, match="BatchNorm2d"):
        nn.BatchNorm2d(2)(rg.zeros((2, 2)))
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        nn.BatchNorm1d(2)(rg.zeros((1, 2)))
    with pytest.raises(rg.ShapeError, match=r"batch_norm: running_mean must have shape \[3\]"):
        F.batch_norm(rg.zeros((2, 3)), rg.zeros((2,)), rg.ones((2,)))


RUNNING = (np.array([0.3, -0.2, 0.1]), np.array([0.5, 1.5, 2.0]))
NORMS = {
    "batch_norm_train": (
        lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
        lambda x, w, b: torch.nn.functional.batch_norm(x, None, None, w, b, training=True),
        (4, 3, 2, 2),
    ),
    "batch_norm_eval": (
        lambda x, w, b: F.batch_norm(
            x, rg.tensor(RUNNING[0], dtype=x.dtype), rg.tensor(RUNNING[1], dtype=x.dtype), w, b
        ),
        lambda x, w, b: torch.nn.functional.batch_norm(
            x,
            torch.from_numpy(RUNNING[0]).to(x.dtype),
            torch.from_numpy(RUNNING[1]).to(x.dtype),
            w,
            b,
        ),
        (4, 3, 5),
    ),
    "group_norm": (
        lambda x, w, b: F.group_norm(x, 3, w, b),
        lambda x, w, b: torch.nn.functional.group_norm(x, 3, w, b),
        (2, 6, 2, 3),
    ),
    "rms_norm": (
        lambda x, w, b: F.rms_norm(x, (2, 3), w.reshape((2, 3)), eps=1e-6) + b.sum(),
        lambda x, w, b: (
            torch.nn.functional.rms_norm(x, (2, 3), w.reshape(2, 3), eps=1e-6) + b.sum()
        ),
        (3, 2, 3),
    ),
}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", sorted(NORMS))
def test_normalization_functions_gradients(name, dtype):
    ours, theirs, shape = NORMS[name]
    rng = np.random.default_rng(11)
    channels = 6 if name == "rms_norm" else shape[1]
    arrays = [
        rng.standard_normal(shape),
        rng.standard_normal(channels) + 1.0,
        rng.standard_normal(channels),
    ]
    compare_with_torch(ours, theirs, arrays, dtype)
    if dtype == "float64":
        check_finite_differences(ours, arrays, rtol=1e-5, atol=1e-7)


# -- optimizers ------------------------------------------------------------------------------------
def _linear_pair(seed=0):
    rg.seed(seed)
    ours = nn.Sequential(nn.Linear(4, 3), nn.LayerNorm(3), nn.Linear(3, 2)).double()
    theirs = torch.nn.Sequential(
        torch.nn.Linear(4, 3), torch.nn.LayerNorm(3), torch.nn.Linear(3, 2)
    ).double()
    theirs.load_state_dict(to_torch_state(ours))
    return ours, theirs


def _groups(model, named):
    decay = [p for n, p in named(model) if p.dim() >= 2] if hasattr(rg.Tensor, "dim") else None
    if decay is None:
        decay = [p for n, p in named(model) if len(p.shape) >= 2]
    rest = [p for n, p in named(model) if len(p.shape) < 2]
    return [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]


@pytest.mark.parametrize(
    "kind",
    ["adamw_groups", "sgd_momentum_nesterov_groups", "rmsprop_centered_momentum", "rmsprop"],
)
def test_optimizers_with_groups_and_scheduled_lr_match_torch(kind):
    ours, theirs = _linear_pair()
    groups_ours = _groups(ours, lambda m: m.named_parameters())
    groups_theirs = _groups(theirs, lambda m: m.named_parameters())
    if kind == "adamw_groups":
        opt_ours = optim.AdamW(groups_ours, lr=3e-2, betas=(0.9, 0.95))
        opt_theirs = torch.optim.AdamW(groups_theirs, lr=3e-2, betas=(0.9, 0.95))
    elif kind == "sgd_momentum_nesterov_groups":
        opt_ours = optim.SGD(groups_ours, lr=0.05, momentum=0.9, nesterov=True)
        opt_theirs = torch.optim.SGD(groups_theirs, lr=0.05, momentum=0.9, nesterov=True)
    elif kind == "rmsprop_centered_momentum":
        args = {"lr": 1e-2, "alpha": 0.9, "momentum": 0.5, "centered": True, "weight_decay": 0.01}
        opt_ours = optim.RMSprop(ours.parameters(), **args)
        opt_theirs = torch.optim.RMSprop(theirs.parameters(), **args)
    else:
        opt_ours = optim.RMSprop(ours.parameters(), lr=1e-2)
        opt_theirs = torch.optim.RMSprop(theirs.parameters(), lr=1e-2)
    rng = np.random.default_rng(4)
    for step in range(6):
        lr = 0.02 * (1 + math.cos(math.pi * step / 6))  # a schedule through param_groups
        for g in opt_ours.param_groups:
            g["lr"] = lr
        for g in opt_theirs.param_groups:
            g["lr"] = lr
        x, y = rng.standard_normal((5, 4)), rng.standard_normal((5, 2))
        loss = F.mse_loss(ours(rg.tensor(x)), rg.tensor(y))
        opt_ours.step(loss.backward())
        opt_theirs.zero_grad()
        torch.nn.functional.mse_loss(theirs(torch.from_numpy(x)), torch.from_numpy(y)).backward()
        opt_theirs.step()
    for name, value in theirs.state_dict().items():
        np.testing.assert_allclose(
            ours.state_dict()[name], value.numpy(), rtol=1e-11, atol=1e-13, err_msg=name
        )


def test_optimizer_state_dict_round_trip_resumes_exactly():
    def run(steps, resume_at=None):
        ours, _ = _linear_pair(seed=2)
        optimizer = optim.AdamW(_groups(ours, lambda m: m.named_parameters()), lr=1e-2)
        rng = np.random.default_rng(8)
        for step in range(steps):
            if step == resume_at:  # a fresh model and optimizer from the saved states
                saved_model, saved_opt = ours.state_dict(), optimizer.state_dict()
                ours, _ = _linear_pair(seed=5)
                optimizer = optim.AdamW(_groups(ours, lambda m: m.named_parameters()), lr=1.0)
                ours.load_state_dict(saved_model)
                optimizer.load_state_dict(saved_opt)
                assert optimizer.param_groups[0]["lr"] == 1e-2
            x = rng.standard_normal((3, 4))
            optimizer.step(ours(rg.tensor(x)).square().sum().backward())
        return ours.state_dict(), optimizer

    straight, optimizer = run(5)
    resumed, _ = run(5, resume_at=3)
    for name in straight:
        np.testing.assert_array_equal(straight[name], resumed[name], err_msg=name)
    saved = optimizer.state_dict()
    assert sorted(saved["state"]) == list(range(6))
    assert saved["param_groups"][0]["params"] == [0, 1]
    assert saved["state"][0]["step"] == 5 and isinstance(saved["state"][0]["exp_avg"], rg.Tensor)
    with pytest.raises(ValueError, match="groups"):
        optim.AdamW(nn.Linear(2, 2).parameters()).load_state_dict(saved)


def test_optimizer_accepts_modules_lists_and_groups_and_checks_them():
    model = nn.Linear(2, 2)
    assert optim.SGD(model, lr=0.1).param_groups[0]["params"] == model.parameters() or all(
        a is b
        for a, b in zip(optim.SGD(model, lr=0.1).param_groups[0]["params"], model.parameters())
    )
    opt = optim.Adam(model.parameters(), lr=0.1)
    assert opt.param_groups[0]["betas"] == (0.9, 0.999) and opt.lr == 0.1
    opt.lr = 0.5
    assert opt.param_groups[0]["lr"] == 0.5
    with pytest.raises(ValueError, match="more than one group"):
        optim.SGD([{"params": [model.weight]}, {"params": [model.weight]}], lr=0.1)
    with pytest.raises(ValueError, match="empty"):
        optim.SGD([], lr=0.1)
    with pytest.raises(ValueError, match="single tensor"):
        optim.SGD(model.weight, lr=0.1)
    # a plain leaf tensor is updated in place too, as in torch
    w = rg.tensor([1.0, 2.0]).require_grad()
    optim.SGD([w], lr=0.5).step((w * w).sum().backward())
    assert w.tolist() == [0.0, 0.0] and w.is_require_grad()
    opt.zero_grad()
    model.zero_grad()


@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf")])
def test_clip_grad_norm_is_the_torch_function(norm_type):
    assert optim.clip_grad_norm is nn.utils.clip_grad_norm_
    ours, theirs = _linear_pair()
    x = np.random.default_rng(0).standard_normal((4, 4))
    grads = ours(rg.tensor(x)).square().sum().backward()
    theirs(torch.from_numpy(x)).square().sum().backward()
    norm = nn.utils.clip_grad_norm_(grads, ours.parameters(), 0.5, norm_type)
    expected = torch.nn.utils.clip_grad_norm_(theirs.parameters(), 0.5, norm_type)
    assert norm == pytest.approx(expected.item(), rel=1e-12)
    for p, q in zip(ours.parameters(), theirs.parameters()):
        np.testing.assert_allclose(p.grad(grads).numpy(), q.grad.numpy(), rtol=1e-12)


# -- data parallel ---------------------------------------------------------------------------------
def test_a_tied_parameter_is_one_distributed_parameter():
    """Two replicas of a tied model, gradients mean-reduced during backward, AdamW steps: the
    same training as one device on the whole batch, and the tie holds on every replica."""
    import threading

    from retrograd import distributed as dist

    rg.seed(4)
    template = Tied().double()
    rng = np.random.default_rng(0)
    batches = [(rng.integers(0, 7, (4, 3)), rng.integers(0, 7, (4, 3))) for _ in range(3)]

    def loss_of(model, idx, target, backend, device):
        logits = model(rg.tensor(idx, backend=backend, device=device))
        target = rg.tensor(target.reshape(-1), backend=backend, device=device)
        return F.cross_entropy(logits.reshape((-1, 7)), target)

    reference = template.replicate()
    optimizer = optim.AdamW(reference.parameters(), lr=0.05)
    for idx, target in batches:
        optimizer.step(loss_of(reference, idx, target, None, rg.Device("cpu", 0)).backward())

    devices = [rg.Device("cpu", 0), rg.Device("cpu", 1)]
    results: list = [None, None]

    def train(index, device):
        try:
            backend = rg.Autodiff(rg.NumpyBackend())
            model = template.replicate(backend=backend, device=device).set_distributed()
            assert [n for n, _ in model.named_parameters()] == ["wte.weight"]
            opt = optim.AdamW(model.parameters(), lr=0.05)
            for idx, target in batches:
                shard = slice(2 * index, 2 * index + 2)
                loss = loss_of(model, idx[shard], target[shard], backend, device)
                opt.step(loss.backward())
            assert model.wte.weight is model.lm_head.weight and model.wte.weight.is_distributed()
            results[index] = model.state_dict()
        except BaseException as error:  # handed back to the test
            results[index] = error

    config = dist.DistributedConfig(dist.ReduceOperation.MEAN, timeout=20.0)
    with dist.DistributedContext(devices, config):
        threads = [threading.Thread(target=train, args=(i, d)) for i, d in enumerate(devices)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60.0)
    for result in results:
        if isinstance(result, BaseException):
            raise result
        for name, value in reference.state_dict().items():
            np.testing.assert_allclose(result[name], value, rtol=1e-10, atol=1e-12, err_msg=name)


def test_load_state_dict_takes_arrays_retrograd_and_torch_tensors_and_checks_first():
    model = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))
    weight = model[0].weight
    state = {k: rg.tensor(v) for k, v in model.state_dict().items()}
    state["0.weight"] = rg.ones((3, 2))
    state["1.num_batches_tracked"] = torch.tensor(7)
    model.load_state_dict(state)
    assert model[0].weight is weight and weight.tolist() == [[1.0, 1.0]] * 3
    assert int(model[1].num_batches_tracked.item()) == 7
    bad = dict(model.state_dict(), **{"1.running_var": np.zeros(4)})
    bad["0.weight"] = np.zeros((3, 2))
    with pytest.raises(rg.ShapeError, match="running_var"):
        model.load_state_dict(bad)
    assert weight.tolist() == [[1.0, 1.0]] * 3  # nothing changed: checked before writing


@pytest.mark.parametrize("kind", ["adamw", "sgd", "rmsprop"])
def test_optimizer_resumes_from_torchs_state_dict(kind):
    """Three steps in torch, then its model and optimizer state dicts loaded into ours: the
    next steps agree (torch's state keys: exp_avg, exp_avg_sq, momentum_buffer, square_avg)."""
    ours, theirs = _linear_pair(seed=6)
    make = {
        "adamw": lambda lib, ps: lib.AdamW(ps, lr=1e-2, weight_decay=0.1),
        "sgd": lambda lib, ps: lib.SGD(ps, lr=1e-2, momentum=0.9),
        "rmsprop": lambda lib, ps: lib.RMSprop(ps, lr=1e-2, momentum=0.5, centered=True),
    }[kind]
    opt_theirs = make(torch.optim, _groups(theirs, lambda m: m.named_parameters()))
    rng = np.random.default_rng(3)
    batches = [(rng.standard_normal((5, 4)), rng.standard_normal((5, 2))) for _ in range(6)]

    def torch_step(x, y):
        opt_theirs.zero_grad()
        torch.nn.functional.mse_loss(theirs(torch.from_numpy(x)), torch.from_numpy(y)).backward()
        opt_theirs.step()

    for x, y in batches[:3]:
        torch_step(x, y)
    ours.load_state_dict(theirs.state_dict())
    opt_ours = make(optim, _groups(ours, lambda m: m.named_parameters()))
    opt_ours.load_state_dict(opt_theirs.state_dict())
    for x, y in batches[3:]:
        torch_step(x, y)
        opt_ours.step(F.mse_loss(ours(rg.tensor(x)), rg.tensor(y)).backward())
    for name, value in theirs.state_dict().items():
        np.testing.assert_allclose(
            ours.state_dict()[name], value.numpy(), rtol=1e-11, atol=1e-13, err_msg=name
        )


# -- torch's positional factory arguments (found porting mnist_forward_forward/main.py) ----------
_REQUIRED = {
    "in_features": 3, "out_features": 2, "in1_features": 3, "in2_features": 2,
    "in_channels": 2, "out_channels": 4, "kernel_size": 3, "num_features": 4,
    "normalized_shape": 4, "num_groups": 2, "num_channels": 4, "input_size": 3,
    "hidden_size": 4, "embed_dim": 4, "num_heads": 2, "d_model": 4, "nhead": 2,
    "num_embeddings": 5, "embedding_dim": 3, "n_classes": 6, "cutoffs": [2, 4],
}  # fmt: skip


def _torch_positional_factory_modules() -> list[str]:
    import inspect

    import torch

    names = []
    for name in sorted(dir(torch.nn)):
        cls = getattr(torch.nn, name)
        if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)) or name.startswith(
            ("Lazy", "RNNBase", "RNNCellBase", "_")
        ):
            continue
        try:
            parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]
        except (TypeError, ValueError):
            continue
        positional = [p.name for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD]
        if positional[-2:] == ["device", "dtype"] and hasattr(nn, name):
            names.append(name)
    return names


#: Sizes passed in place of torch's defaults where those make a large model (the full
#: ``Transformer``, 44M float64 parameters made twice, took 20 s of a CI run)
_SMALLER = {
    "Transformer": {
        "d_model": 16,
        "nhead": 2,
        "num_encoder_layers": 2,
        "num_decoder_layers": 2,
        "dim_feedforward": 24,
    },
}


@pytest.mark.parametrize("name", _torch_positional_factory_modules())
def test_modules_take_device_and_dtype_positionally_where_torch_does(name):
    """``class Layer(nn.Linear)`` calling ``super().__init__(in_features, out_features, bias,
    device, dtype)``: every module whose torch signature ends in positional ``device, dtype``
    takes them there too, each argument before them at torch's position (torch's defaults
    passed positionally), and makes float64 parameters of torch's shapes."""
    import inspect

    import torch

    theirs_cls, ours_cls = getattr(torch.nn, name), getattr(nn, name)
    parameters = [
        p
        for p in list(inspect.signature(theirs_cls.__init__).parameters.values())[1:]
        if p.kind is p.POSITIONAL_OR_KEYWORD and p.name not in ("device", "dtype")
    ]
    args = []
    for p in parameters:
        value = _REQUIRED[p.name] if p.default is p.empty else p.default
        value = _SMALLER.get(name, {}).get(p.name, value)
        args.append("relu" if callable(value) else value)
    theirs = theirs_cls(*args, "cpu", torch.float64)
    ours = ours_cls(*args, "cpu", rg.float64)
    mine, reference = ours.state_dict(), theirs.state_dict()
    assert {k: tuple(v.shape) for k, v in mine.items()} == {
        k: tuple(v.shape) for k, v in reference.items()
    }
    floating = [k for k, v in reference.items() if v.dtype.is_floating_point]
    assert all(reference[k].dtype == torch.float64 for k in floating)
    assert all(mine[k].dtype == rg.float64 for k in floating)


def test_embedding_takes_torchs_arguments_and_from_pretrained():
    """torch's ``Embedding`` signature whole: ``_weight``/``_freeze`` and ``from_pretrained``
    hold the table given (frozen or not)."""
    import torch

    table = np.random.default_rng(0).standard_normal((5, 3))
    indices = np.array([[0, 4], [2, 2]])
    for make in (
        lambda lib, t: lib.nn.Embedding(5, 3, None, None, 2.0, False, False, t),
        lambda lib, t: lib.nn.Embedding.from_pretrained(t, freeze=False, padding_idx=1),
        lambda lib, t: lib.nn.Embedding.from_pretrained(t),
    ):
        theirs, ours = make(torch, torch.tensor(table)), make(rg, rg.tensor(table))
        assert ours.weight.requires_grad == theirs.weight.requires_grad
        out = theirs(torch.tensor(indices))
        np.testing.assert_array_equal(ours(rg.tensor(indices)).numpy(), out.detach().numpy())
    with pytest.raises(rg.ShapeError, match="_weight"):
        nn.Embedding(5, 3, _weight=rg.ones((4, 3)))


def test_a_sparse_embedding_gives_the_dense_form_of_torchs_sparse_gradient():
    """``sparse=True`` (word2vec, DLRM, recommender scripts that step ``SparseAdam``): the
    gradient is dense here, with the values of torch's sparse one, repeated rows summed."""
    import torch

    rng = np.random.default_rng(0)
    table = rng.standard_normal((6, 3))
    indices = np.array([[0, 4, 4], [2, 5, 0]])
    offsets = np.array([0, 2, 5])
    scale = rng.standard_normal((2, 3, 3))
    theirs = torch.nn.Embedding(6, 3, padding_idx=5, sparse=True, _weight=torch.tensor(table))
    (theirs(torch.tensor(indices)) * torch.tensor(scale)).sum().backward()
    assert theirs.weight.grad.is_sparse
    ours = nn.Embedding(6, 3, padding_idx=5, sparse=True, _weight=rg.tensor(table))
    grads = (ours(rg.tensor(indices)) * rg.tensor(scale)).sum().backward()
    expected = theirs.weight.grad.to_dense().numpy()
    np.testing.assert_allclose(ours.weight.grad(grads).numpy(), expected, rtol=1e-15)

    flat = indices.reshape(-1)
    bag = torch.nn.EmbeddingBag(6, 3, mode="mean", sparse=True, _weight=torch.tensor(table))
    (bag(torch.tensor(flat), torch.tensor(offsets)) ** 2).sum().backward()
    ours_bag = nn.EmbeddingBag(6, 3, mode="mean", sparse=True, _weight=rg.tensor(table))
    grads = (ours_bag(rg.tensor(flat), rg.tensor(offsets)) ** 2).sum().backward()
    expected = bag.weight.grad.to_dense().numpy()
    np.testing.assert_allclose(ours_bag.weight.grad(grads).numpy(), expected, rtol=1e-14)


@pytest.mark.parametrize(
    "options",
    [{"max_norm": 1.0}, {"max_norm": 2.0, "norm_type": 1.0}, {"scale_grad_by_freq": True},
     {"max_norm": 1.5, "scale_grad_by_freq": True, "padding_idx": 2}],
    ids=["max_norm", "max_norm_l1", "scale_grad_by_freq", "all"],
)  # fmt: skip
def test_embedding_max_norm_and_scale_grad_by_freq_as_torchs(options):
    """``max_norm`` renormalizes the looked-up rows of the weight in place (untracked) before
    the lookup, ``scale_grad_by_freq`` divides each row's gradient by its index's count in
    the batch: values, the weight left behind, and gradients equal torch's, functional and
    module forms, over two steps (the second sees the first's renormalized rows)."""
    import torch

    table = np.random.default_rng(1).standard_normal((5, 3)) * 3
    batches = [np.array([[0, 2], [2, 4]]), np.array([[1, 2, 2]])]
    theirs = torch.nn.Embedding(5, 3, _weight=torch.tensor(table), **options)
    ours = nn.Embedding(5, 3, _weight=rg.tensor(table), **options)
    for indices in batches:
        weights = np.arange(indices.size * 3, dtype=np.float64).reshape(*indices.shape, 3)
        out = theirs(torch.tensor(indices))
        theirs.weight.grad = None
        (out * torch.tensor(weights)).sum().backward()
        mine = ours(rg.tensor(indices))
        grads = (mine * rg.tensor(weights)).sum().backward()
        np.testing.assert_allclose(mine.numpy(), out.detach().numpy(), rtol=1e-12)
        np.testing.assert_allclose(ours.weight.numpy(), theirs.weight.detach().numpy(), rtol=1e-12)
        np.testing.assert_allclose(
            ours.weight.grad(grads).numpy(), theirs.weight.grad.numpy(), rtol=1e-12
        )
    functional = F.embedding(rg.tensor([[3]]), rg.tensor(table), max_norm=0.5)
    assert float(functional.norm()) == pytest.approx(0.5, rel=1e-6)
