"""nn modules: shapes, named parameters, modes, state dicts, replacement, replicas, PyTorch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from backends import inner_backend
from retrograd import nn
from retrograd.nn import functional as F  # noqa: N812


def small_cnn() -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(4, 6, 3, padding=1),
        nn.GELU(),
        nn.AvgPool2d(2),
        nn.Flatten(),
        nn.LayerNorm(6 * 2 * 2),
        nn.Dropout(0.25),
        nn.Linear(24, 3),
    )


def test_layer_output_shapes():
    x = rg.random((2, 3, 8, 8))
    assert nn.Conv2d(3, 5, 3)(x).shape == (2, 5, 6, 6)
    assert nn.Conv2d(3, 6, 3, stride=2, padding=1, groups=3)(x).shape == (2, 6, 4, 4)
    assert nn.MaxPool2d(2)(x).shape == (2, 3, 4, 4)
    assert nn.AvgPool2d(3, stride=1, padding=1)(x).shape == (2, 3, 8, 8)
    assert nn.Flatten()(x).shape == (2, 192)
    assert nn.Flatten(0, 1)(x).shape == (6, 8, 8)
    assert nn.LayerNorm((8, 8))(x).shape == (2, 3, 8, 8)
    assert nn.Linear(8, 4)(x).shape == (2, 3, 8, 4)
    assert nn.ReLU()(x).shape == nn.GELU()(x).shape == x.shape
    indices = rg.tensor([[0, 4], [9, 2]], dtype="int64")
    assert nn.Embedding(10, 7)(indices).shape == (2, 2, 7)
    assert small_cnn()(x[:, :1]).shape == (2, 3)


def test_named_parameters_are_dotted_and_ordered():
    model = small_cnn()
    names = [name for name, _ in model.named_parameters()]
    assert names == [
        "0.weight",
        "0.bias",
        "3.weight",
        "3.bias",
        "7.weight",
        "7.bias",
        "9.weight",
        "9.bias",
    ]
    assert [p.shape for p in model.parameters()] == [
        (4, 1, 3, 3),
        (4,),
        (6, 4, 3, 3),
        (6,),
        (24,),
        (24,),
        (3, 24),
        (3,),
    ]
    assert all(p.is_require_grad() for p in model.parameters())
    assert model.num_parameters() == sum(p.numel() for p in model.parameters())
    assert [name for name, _ in nn.Linear(2, 2, bias=False).named_parameters()] == ["weight"]
    assert [name for name, _ in nn.LayerNorm(3, elementwise_affine=False).named_parameters()] == []


def test_nested_modules_and_attribute_access():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
            self.head = nn.Linear(3, 1)
            self.register_parameter("scale", rg.nn.Parameter(rg.ones((1,))))

        def forward(self, x):
            return self.head(self.body(x)) * self.scale

    block = Block()
    assert [n for n, _ in block.named_parameters()] == [
        "scale",
        "body.0.weight",
        "body.0.bias",
        "head.weight",
        "head.bias",
    ]
    assert block.get_parameter("body.0.bias") is block.body[0].bias
    assert block(rg.ones((4, 3))).shape == (4, 1)
    with pytest.raises(KeyError, match="no parameter"):
        block.get_parameter("body.0.nothing")
    with pytest.raises(AttributeError):
        _ = block.missing


def test_gradients_reach_every_parameter():
    model = small_cnn()
    loss = F.cross_entropy(model(rg.random((4, 1, 8, 8))), rg.tensor([0, 1, 2, 0], dtype="int64"))
    grads = loss.backward()
    for name, parameter in model.named_parameters():
        gradient = parameter.grad(grads)
        assert gradient is not None, name
        assert gradient.shape == parameter.shape


def test_set_parameter_replaces_and_keeps_distributed_mark():
    model = nn.Sequential(nn.Linear(2, 2))
    model.set_distributed()
    old = model.get_parameter("0.weight")
    assert old.is_distributed()
    param_id = old.backend.param_id(old.primitive)
    old_node = old.primitive.node
    new = model.set_parameter("0.weight", rg.zeros((2, 2)))
    # API.md section 8: the Parameter object stays, its value (a fresh leaf) is replaced
    assert model[0].weight is new and new is old and new.primitive.node is not old_node
    assert new.tolist() == [[0.0, 0.0], [0.0, 0.0]]
    assert new.is_require_grad() and new.is_distributed()
    assert new.backend.param_id(new.primitive) == param_id == rg.ParamId("0.weight")
    with pytest.raises(rg.ShapeError, match=r"0\.weight.*\[2, 2\].*\[3, 2\]"):
        model.set_parameter("0.weight", rg.zeros((3, 2)))
    # a tracked intermediate becomes a fresh leaf, cut from its graph
    tracked = model.set_parameter("0.bias", model[0].bias * 2.0)
    assert tracked.is_require_grad()
    # attribute assignment goes through set_parameter too
    model[0].bias = rg.ones((2,))
    assert model[0].bias.is_distributed() and model[0].bias.tolist() == [1.0, 1.0]


def test_train_eval_switches_dropout():
    model = nn.Sequential(nn.Linear(50, 50), nn.Dropout(0.5))
    x = rg.ones((4, 50))
    assert model.training and model[1].training
    rg.seed(0)
    a, b = model(x).numpy(), model(x).numpy()
    assert (a == 0).mean() > 0.2 and not np.array_equal(a, b)  # random masks in training
    model.eval()
    assert not model[1].training
    expected = np.ones((4, 50)) @ model[0].weight.numpy().T + model[0].bias.numpy()
    np.testing.assert_allclose(model(x).numpy(), expected, rtol=1e-5, atol=1e-6)
    assert model.train() is model and model[1].training


def test_state_dict_round_trip_through_npz(tmp_path):
    rg.seed(1)
    model = small_cnn().eval()
    x = rg.random((2, 1, 8, 8))
    expected = model(x).numpy()
    path = tmp_path / "model.npz"
    model.save(path)
    with np.load(path) as archive:
        assert sorted(archive.files) == sorted(model.state_dict())
    rg.seed(2)
    other = small_cnn().eval()
    assert not np.allclose(other(x).numpy(), expected)
    assert repr(other.load_state_dict(path)) == "<All keys matched successfully>"
    np.testing.assert_array_equal(other(x).numpy(), expected)
    for (name, a), (_, b) in zip(model.named_parameters(), other.named_parameters()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)
        assert b.is_require_grad()
    # a clone of the state is a copy: changing it does not touch the model; the state's own
    # values write through, as torch's state-dict tensors share the module's storage
    state = model.state_dict()
    copy = state["0.bias"].clone()
    copy[:] = 99.0
    assert not np.any(model[0].bias.numpy() == 99.0)
    state["0.bias"][:] = 99.0
    assert np.all(model[0].bias.numpy() == 99.0)


def test_state_dict_takes_torchs_keywords():
    model = nn.Sequential(nn.Linear(3, 2))
    reference = torch.nn.Sequential(torch.nn.Linear(3, 2))
    ours = model.state_dict(prefix="net.")
    assert list(ours) == list(reference.state_dict(prefix="net.")) == ["net.0.weight", "net.0.bias"]
    target = {"other": 1}
    assert model.state_dict(destination=target) is target and list(target)[1:] == [
        "0.weight",
        "0.bias",
    ]
    assert model.state_dict(keep_vars=True)["0.weight"] is model[0].weight


def test_load_state_dict_reports_mismatches():
    model = nn.Linear(3, 2)
    state = model.state_dict()
    with pytest.raises(KeyError, match="missing parameters \\['bias'\\]"):
        model.load_state_dict({"weight": state["weight"]})
    result = model.load_state_dict({"weight": state["weight"] * 0, "extra": 1}, strict=False)
    assert model.weight.numpy().sum() == 0
    missing, unexpected = result  # torch's named tuple
    assert (missing, unexpected) == (result.missing_keys, result.unexpected_keys)
    assert (missing, unexpected) == (["bias"], ["extra"])
    with pytest.raises(RuntimeError, match="missing parameters"):  # what torch raises
        model.load_state_dict({"weight": state["weight"]})
    with pytest.raises(rg.ShapeError, match="weight"):
        model.load_state_dict({"weight": np.zeros((2, 2)), "bias": state["bias"]})
    with pytest.raises(KeyError, match="unexpected \\['extra'\\]"):
        model.load_state_dict({**state, "extra": np.zeros(1)})


def test_replicate_shares_nothing_and_evaluates_without_a_graph():
    model = small_cnn().eval()
    device = rg.Device("cpu", 3)
    replica = model.replicate(device=device)
    for (name, a), (_, b) in zip(model.named_parameters(), replica.named_parameters()):
        assert a is not b and a.primitive.node is not b.primitive.node, name
        assert b.device == device
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    plain = inner_backend()
    inference = model.replicate(backend=plain)
    out = inference(rg.random((2, 1, 8, 8), backend=plain))
    assert out.backend is plain and not out.requires_grad


def test_initialization_is_seeded():
    rg.seed(7)
    a = nn.Linear(5, 3).state_dict()
    rg.seed(7)
    b = nn.Linear(5, 3).state_dict()
    np.testing.assert_array_equal(a["weight"], b["weight"])
    bound = 1 / np.sqrt(5)
    assert np.all(np.abs(a["weight"]) <= bound) and a["weight"].dtype == np.float32


def test_modules_match_pytorch_with_the_same_weights():
    torch = pytest.importorskip("torch")
    rg.seed(3)
    model = small_cnn().eval()
    reference = torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(4, 6, 3, padding=1),
        torch.nn.GELU(),
        torch.nn.AvgPool2d(2),
        torch.nn.Flatten(),
        torch.nn.LayerNorm(24),
        torch.nn.Dropout(0.25),
        torch.nn.Linear(24, 3),
    ).eval()
    reference.load_state_dict({k: torch.from_numpy(v) for k, v in model.state_dict().items()})
    x = np.random.default_rng(0).random((3, 1, 8, 8), dtype=np.float32)
    with torch.no_grad():
        expected = reference(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(model(rg.tensor(x)).numpy(), expected, rtol=1e-4, atol=1e-5)
