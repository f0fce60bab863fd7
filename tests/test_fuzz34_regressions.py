"""Regressions found by round 34 of the differential fuzzer (``tests/test_fuzz34.py``): how
real code calls the names ranked about 151 to 500 by use. Expected values come from torch."""

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")


def test_scalar_tensor_takes_requires_grad():
    """``scalar_tensor(2.5, requires_grad=True)`` was a constant (the flag swallowed)."""
    made = rg.scalar_tensor(2.5, requires_grad=True)
    want = torch.scalar_tensor(2.5, requires_grad=True)
    assert made.requires_grad is want.requires_grad is True
    assert made.is_leaf
    (g,) = rg.autograd.grad(made * 3, made)
    assert g.item() == 3.0
    with pytest.raises(rg.DTypeError, match="scalar_tensor"):
        rg.scalar_tensor(2, dtype=rg.int64, requires_grad=True)  # (torch refuses it too)


@pytest.mark.parametrize(
    "value, boundaries, right",
    [(1.5, [1, 2], False), (2.0, [2.0, 3.0], True), (True, [0.5, 2.0], False), (-4, [0, 1], False)],
)
def test_bucketize_of_a_number(value, boundaries, right):
    """torch's ``bucketize(Scalar, Tensor)``: a Python number input raised
    "'float' object has no attribute '_backend'"."""
    want = torch.bucketize(value, torch.tensor(boundaries), right=right)
    got = rg.bucketize(value, rg.tensor(boundaries), right=right)
    assert got.shape == () and str(got.dtype).split(".")[-1] == "int64"
    assert got.item() == want.item()
    got32 = rg.bucketize(np.float64(value), rg.tensor(boundaries), out_int32=True)
    assert got32.dtype == rg.int32


def test_random_takes_torchs_keywords():
    """``x.random_(to=4)``, ``x.random_(2, to=5)``, ``random_(**{"from": 2, "to": 5})`` and
    ``random_(2, None)`` (up to the dtype's largest) were refused."""
    rg.manual_seed(0)
    x = rg.zeros(200)
    assert ((x.random_(to=4) >= 0) & (x < 4)).all().item()
    assert ((x.random_(2, to=5) >= 2) & (x < 5)).all().item()
    assert ((x.random_(**{"from": 2, "to": 5}) >= 2) & (x < 5)).all().item()
    drawn = x.random_(2, None)
    assert (drawn >= 2).all().item() and drawn.max().item() > 5  # (up to 2**24)
    with pytest.raises(rg.DTypeError, match="random_"):
        x.random_(**{"from": 2})  # (torch: no overload without to)


def test_uniform_takes_torchs_keywords():
    """``x.uniform_(to=0.5)`` and ``uniform_(**{"from": 5, "to": 6})`` were refused
    (retrograd named them a and b)."""
    rg.manual_seed(0)
    x = rg.zeros(100)
    assert ((x.uniform_(to=0.5) >= 0) & (x <= 0.5)).all().item()
    assert ((x.uniform_(**{"from": 5, "to": 6}) >= 5) & (x <= 6)).all().item()
    assert ((x.uniform_(0.2, to=0.3) >= 0.2) & (x <= 0.3)).all().item()


def test_adam_groups_carry_decoupled_weight_decay():
    """AdamW's and Adam's ``param_groups`` lacked torch's ``decoupled_weight_decay`` key, and
    a group's own value was not read (the optimizer's was)."""
    for name, want_default in (("Adam", False), ("AdamW", True)):
        w = rg.zeros(2, requires_grad=True)
        group = getattr(rg.optim, name)([w]).param_groups[0]
        assert group["decoupled_weight_decay"] is want_default
    results = []
    for lib in (torch, rg):
        w = lib.tensor(np.array([1.0, 2.0]), requires_grad=True)
        v = lib.tensor(np.array([1.0, 2.0]), requires_grad=True)
        groups = [{"params": [w], "decoupled_weight_decay": True}, {"params": [v]}]
        opt = lib.optim.Adam(groups, lr=0.1, weight_decay=0.5)
        grads = ((w * w).sum() + (v * v).sum()).backward()
        opt.step() if grads is None else opt.step(grads)
        results.append((w.detach().numpy().copy(), v.detach().numpy().copy()))
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-12)
    np.testing.assert_allclose(results[1][1], results[0][1], rtol=1e-12)


def test_distribution_shapes_are_sizes():
    """``batch_shape``, ``event_shape`` and ``param_shape`` were plain tuples (torch's are
    ``torch.Size``: ``batch_shape.numel()`` failed)."""
    d = rg.distributions.Categorical(logits=rg.zeros(2, 3))
    for shape, want in ((d.batch_shape, (2,)), (d.event_shape, ()), (d.param_shape, (2, 3))):
        assert isinstance(shape, rg.Size) and tuple(shape) == want
    assert d.batch_shape.numel() == 2
    normal = rg.distributions.Normal(rg.zeros(3), 1.0).expand((2, 3))
    assert isinstance(normal.batch_shape, rg.Size) and normal.batch_shape == (2, 3)


def test_autograd_grad_of_named_inputs():
    """torch 2.13's ``autograd.grad(out, {"a": x, "b": y})`` returns the gradients by name;
    retrograd refused a dict ("got an element of type str")."""
    results = []
    for lib in (torch, rg):
        x = lib.tensor(np.array([1.0, 2.0]), requires_grad=True)
        y = lib.tensor(np.array([3.0, -1.0]), requires_grad=True)
        z = lib.tensor(np.array([0.5]), requires_grad=True)
        out = (x * y).sin().sum()
        grads = lib.autograd.grad(out, {"a": x, "b": y, "z": z}, allow_unused=True)
        results.append(grads)
    want, got = results
    assert isinstance(got, dict) and list(got) == list(want) == ["a", "b", "z"]
    for key in ("a", "b"):
        np.testing.assert_allclose(got[key].numpy(), want[key].numpy(), rtol=1e-12)
    assert got["z"] is None and want["z"] is None


@pytest.mark.parametrize(
    "draw",
    [
        lambda lib, g: lib.multinomial(lib.tensor([0.2, 0.3, 0.5]), 2, generator=g),
        lambda lib, g: lib.tensor([0.2, 0.3, 0.5]).multinomial(4, True, generator=g),
        lambda lib, g: lib.rand_like(lib.zeros(3), generator=g),
        lambda lib, g: lib.randn_like(lib.zeros(3), generator=g),
        lambda lib, g: lib.randint_like(lib.zeros(3), 10, generator=g),
        lambda lib, g: list(lib.utils.data.WeightedRandomSampler([1.0, 2.0], 5, generator=g)),
    ],
)
def test_seeded_generator_draws_repeat(draw):
    """``generator=`` was refused by ``multinomial`` and ``WeightedRandomSampler``, and
    silently ignored by ``rand_like``/``randn_like``/``randint_like`` (two draws from the same
    seed differed)."""

    def values(v):
        return v.tolist() if hasattr(v, "tolist") else v

    for lib in (torch, rg):
        first = values(draw(lib, lib.Generator().manual_seed(5)))
        lib.manual_seed(123)  # (the global stream must not matter)
        second = values(draw(lib, lib.Generator().manual_seed(5)))
        assert first == second, lib.__name__


def test_normal_of_numbers_takes_requires_grad():
    """``torch.normal(0., 1., (2,), requires_grad=True)`` was refused."""
    made = rg.normal(0.0, 1.0, (2,), requires_grad=True)
    want = torch.normal(0.0, 1.0, (2,), requires_grad=True)
    assert made.requires_grad is want.requires_grad is True and made.is_leaf
    assert made.dtype == rg.float32
    with pytest.raises(TypeError):
        torch.normal(torch.zeros(2), 1.0, requires_grad=True)
    with pytest.raises(rg.DTypeError, match="normal"):
        rg.normal(rg.zeros(2), 1.0, requires_grad=True)


def test_randperm_takes_requires_grad():
    """``randperm(3, dtype=float64, requires_grad=True)`` gave a tensor that did not require
    grad (the flag silently dropped)."""
    made = rg.randperm(3, dtype=rg.float64, requires_grad=True)
    want = torch.randperm(3, dtype=torch.float64, requires_grad=True)
    assert made.requires_grad is want.requires_grad is True and made.is_leaf
    assert sorted(made.tolist()) == sorted(want.tolist()) == [0.0, 1.0, 2.0]


def test_multinomial_takes_torchs_keyword_names():
    """``multinomial(input=..., num_samples=...)`` was refused (the weights were ``probs``)."""
    weights = [0.0, 1.0]
    want = torch.multinomial(input=torch.tensor(weights), num_samples=2, replacement=True)
    got = rg.multinomial(input=rg.tensor(weights), num_samples=2, replacement=True)
    assert got.tolist() == want.tolist() == [1, 1]


def test_random_of_a_bool_tensor():
    """``bool_tensor.random_()`` raised "can't be cast to bool"; torch draws random bools."""
    rg.manual_seed(0)
    x = rg.zeros(1000, dtype=rg.bool)
    out = x.random_()
    assert out is x and x.dtype == rg.bool
    assert 300 < int(x.sum().item()) < 700
    assert x.random_(0, 2).dtype == rg.bool and x.random_(2).dtype == rg.bool
    with pytest.raises(rg.InvalidArgumentError, match="random_"):
        x.random_(0, 3)  # (torch: "to - 1 is out of bounds for bool")


def test_module_and_optimizer_methods_take_torchs_keyword_names():
    """``register_parameter(name=, param=)``, ``register_buffer(name=, tensor=)``,
    ``get_parameter(target=)``, ``get_buffer(target=)``, ``load_state_dict(state_dict=)`` and
    ``add_param_group(param_group=)`` were refused (retrograd named them otherwise)."""
    for lib in (torch, rg):
        net = lib.nn.Sequential(lib.nn.Linear(2, 2))
        net[0].register_parameter(name="scale", param=lib.nn.Parameter(lib.ones(1)))
        net[0].register_buffer(name="count", tensor=lib.zeros(1), persistent=True)
        assert tuple(net.get_parameter(target="0.scale").shape) == (1,)
        assert tuple(net.get_buffer(target="0.count").shape) == (1,)
        state = {k: v * 0 + 1 for k, v in net.state_dict().items()}
        net.load_state_dict(state_dict=state, strict=True)
        assert net[0].weight.detach().sum().item() == 4.0
        opt = lib.optim.SGD([net[0].weight], lr=0.1)
        opt.add_param_group(param_group={"params": [net[0].bias], "lr": 0.5})
        assert [g["lr"] for g in opt.param_groups] == [0.1, 0.5]


def test_manual_seed_takes_seed_keyword():
    """``manual_seed(seed=3)`` (torch's keyword) was refused: retrograd named it seed_value."""
    torch.manual_seed(seed=3)
    rg.manual_seed(seed=3)
    first = rg.rand(3).tolist()
    rg.manual_seed(3)
    assert rg.rand(3).tolist() == first


def test_checkpoint_consumes_early_stop():
    """``checkpoint(f, x, use_reentrant=False, early_stop=False)`` handed ``early_stop`` to
    ``f`` (a bare TypeError); torch takes it as its own flag."""
    results = []
    for lib in (torch, rg):
        x = lib.tensor(np.array([1.0, -2.0]), requires_grad=True)
        out = lib.utils.checkpoint.checkpoint(
            lambda a: (a * 3).tanh(), x, use_reentrant=False, early_stop=False
        )
        (g,) = lib.autograd.grad(out.sum(), x)
        results.append(g.numpy())
    np.testing.assert_allclose(results[1], results[0], rtol=1e-12)


@pytest.mark.parametrize(
    "name, extra",
    [
        ("zeros_like", {}),
        ("ones_like", {"dtype": "bool"}),
        ("full_like", {"fill_value": 2}),
        ("empty_like", {}),
        ("rand_like", {}),
        ("randn_like", {"dtype": "float64"}),
        ("randint_like", {"high": 3}),
        ("randint_like", {"low": 5, "high": 6}),
    ],
)
def test_like_functions_take_input_keyword(name, extra):
    """``torch.zeros_like(input=x)`` and the other ``*_like`` (torch's keyword ``input``, and
    ``randint_like``'s ``low=``/``high=``) were refused: retrograd named the tensor ``t``."""
    results = []
    for lib in (torch, rg):
        kwargs = {k: getattr(lib, v) if k == "dtype" else v for k, v in extra.items()}
        out = getattr(lib, name)(input=lib.ones(2, 3), **kwargs)
        results.append((tuple(out.shape), str(out.dtype).split(".")[-1]))
        if name in ("full_like", "ones_like", "zeros_like") or "low" in extra:
            results.append(out.tolist())
    assert results[: len(results) // 2] == results[len(results) // 2 :]


def test_pow_and_scalar_tensor_keyword_names():
    """``x.pow(exponent=2)`` and ``scalar_tensor(s=3)`` (torch's names) were refused."""
    for lib in (torch, rg):
        x = lib.tensor(np.array([1.5, -2.0]))
        assert x.pow(exponent=2).tolist() == [2.25, 4.0]
        assert lib.scalar_tensor(s=3).item() == 3.0
