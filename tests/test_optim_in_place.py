"""Optimizer steps written into the parameters' own buffers: the same bits as the pure update,
taken only where nothing else sees those buffers (``optim.optimizers.sole_reference``)."""

from __future__ import annotations

import resource
import tracemalloc
import weakref

import numpy as np
import pytest

import retrograd as rg
from backends import inner_backend, on_torch
from retrograd import nn, optim
from retrograd.optim.optimizers import sole_reference

STEPS = 4

OPTIMIZERS = {
    "sgd": lambda p: optim.SGD(p, lr=0.1),
    "sgd_decay": lambda p: optim.SGD(p, lr=0.1, weight_decay=0.01),
    "sgd_momentum": lambda p: optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-4),
    "sgd_dampening": lambda p: optim.SGD(p, lr=0.05, momentum=0.9, dampening=0.1),
    "sgd_nesterov": lambda p: optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True, weight_decay=1e-3),
    "adam": lambda p: optim.Adam(p, lr=1e-2),
    "adam_decay": lambda p: optim.Adam(p, lr=3e-3, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1),
    "adamw": lambda p: optim.AdamW(p, lr=1e-2, weight_decay=0.05),
    "rmsprop": lambda p: optim.RMSprop(p, lr=1e-2),
    "rmsprop_all": lambda p: optim.RMSprop(
        p, lr=1e-2, alpha=0.9, weight_decay=0.01, momentum=0.8, centered=True
    ),
}


def _model(dtype):
    rg.seed(0)
    return nn.Sequential(nn.Linear(5, 7, dtype=dtype), nn.Tanh(), nn.Linear(7, 2, dtype=dtype))


def _inner(p):
    return p.backend.inner_value(p.primitive)


def _train(make, dtype, keep_aliases=False):
    """``STEPS`` steps; with ``keep_aliases`` a detached alias of every parameter lives through
    each step (so every step takes the pure path). Returns the values, the state and whether
    each step after the first kept every parameter's array."""
    model = _model(dtype)
    optimizer = make(model.parameters())
    x = rg.tensor(np.linspace(-1, 1, 15, dtype=dtype).reshape(3, 5))
    kept = []
    for _ in range(STEPS):
        grads = model(x).square().sum().backward()
        aliases = [p.detach() for p in model.parameters()] if keep_aliases else []
        before = [weakref.ref(_inner(p)) for p in model.parameters()]  # holding no reference
        optimizer.step(grads)
        kept.append(all(a() is _inner(p) for a, p in zip(before, model.parameters())))
        del before, aliases
    values = {name: p.numpy().copy() for name, p in model.named_parameters()}
    return values, optimizer.state_dict()["state"], kept


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_in_place_steps_give_the_pure_steps_bits(name, dtype):
    with rg.use_backend(rg.Autodiff(inner_backend())):
        values, state, kept = _train(OPTIMIZERS[name], dtype)
        pure_values, pure_state, pure_kept = _train(OPTIMIZERS[name], dtype, keep_aliases=True)
    assert kept[1:] == [True] * (STEPS - 1)  # written in place from the second step
    assert pure_kept == [False] * STEPS  # an alias alive: new arrays every step
    for key in values:
        np.testing.assert_array_equal(values[key], pure_values[key], err_msg=key)
    for number in state:
        for key, value in state[number].items():
            np.testing.assert_array_equal(value, pure_state[number][key], err_msg=key)


KERNEL_CASES = ["sgd", "sgd_decay", "sgd_momentum", "sgd_momentum_decay", "sgd_nesterov"]


@pytest.mark.parametrize("shape", [(6, 5), (260, 260)])  # NumPy: small, and compiled loops
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(
    "name", [*KERNEL_CASES, "adam", "adam_decay", "adamw", "rmsprop", "rmsprop_all"]
)
def test_the_kernels_match_the_protocol_formula(name, dtype, shape):
    """Each backend's kernel, in place or not, against the protocol's composed default (NumPy:
    bit for bit; torch's fused SGD rounds ``add(x, alpha=)`` once, as torch eager does)."""
    backend = inner_backend()
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal(shape).astype(dtype) for _ in range(4)]
    value, grad, first, second = (backend.from_data(a, dtype, None) for a in arrays)
    second = backend.mul(second, second)

    def copy(x):
        return backend.from_data(np.array(backend.to_numpy(x)), dtype, None)

    if name.startswith("sgd"):
        hyper = {
            "sgd": (0.1, 0.0, 0.0, 0.0, False),
            "sgd_decay": (0.1, 0.0, 0.0, 1e-2, False),
            "sgd_momentum": (0.05, 0.9, 0.1, 1e-4, False),
            "sgd_momentum_decay": (0.05, 0.9, 0.0, 1e-4, False),
            "sgd_nesterov": (0.05, 0.8, 0.0, 1e-3, True),
        }[name]
        empty = backend.zeros((0,), dtype, None)

        def run(kernel, inplace, buffer):
            return kernel(copy(value), grad, copy(buffer), *hyper, inplace)

        for buffer in (empty, first):  # the first step, a later one
            expected = run(lambda *a: rg.Backend.sgd_update(backend, *a), False, buffer)
            pure = run(backend.sgd_update, False, buffer)
            for a, b, c in zip(run(backend.sgd_update, True, buffer), pure, expected):
                a, b, c = backend.to_numpy(a), backend.to_numpy(b), backend.to_numpy(c)
                np.testing.assert_array_equal(a, b)
                if on_torch():
                    tolerance = (1e-6 if dtype == "float32" else 1e-15) * np.abs(c).max(initial=0)
                    np.testing.assert_allclose(a, c, rtol=0, atol=tolerance)
                else:
                    np.testing.assert_array_equal(a, c)
        return
    if name.startswith("rmsprop"):
        everything = name == "rmsprop_all"
        hyper = (1e-2, 0.9, 1e-6, 0.01 * everything, 0.8 * everything, everything)
        empty = backend.zeros((0,), dtype, None)
        average = backend.mul_scalar(first, 0.1)  # below the root of the square average
        square = backend.add_scalar(second, 1.0)
        states = (square, average, value) if everything else (square, empty, empty)
        expected = rg.Backend.rmsprop_update(backend, value, grad, *states, *hyper, False)
        for inplace in (False, True):
            args = [copy(a) for a in (value, grad, *states)]
            got = backend.rmsprop_update(*args, *hyper, inplace)
            for a, b in zip(got, expected):
                np.testing.assert_array_equal(backend.to_numpy(a), backend.to_numpy(b))
        return
    decoupled = name == "adamw"
    hyper = (3, 1e-2, 0.8, 0.99, 1e-6, 0.0 if name == "adam" else 0.05, decoupled)
    expected = rg.Backend.adam_update(backend, value, grad, first, second, *hyper)
    pure = None
    for inplace in (False, True):
        args = [copy(a) for a in (value, grad, first, second)]
        got = backend.adam_update(*args, *hyper, inplace)
        pure = got if pure is None else pure
        for a, b, c in zip(got, pure, expected):
            a, b, c = backend.to_numpy(a), backend.to_numpy(b), backend.to_numpy(c)
            np.testing.assert_array_equal(a, b)
            if on_torch():  # torch's Adam (lerp_, addcmul_...): its rounding of the formula
                tolerance = (1e-6 if dtype == "float32" else 1e-15) * np.abs(c).max(initial=0)
                np.testing.assert_allclose(a, c, rtol=0, atol=tolerance)
            else:
                np.testing.assert_array_equal(a, c)


@pytest.mark.skipif(on_torch(), reason="the NumPy backend's choice between its two paths")
@pytest.mark.parametrize("loaded", [False, True])
@pytest.mark.parametrize("name", ["adam", "adam_decay", "adamw"])
def test_small_adam_updates_take_the_loops_once_loaded(monkeypatch, name, loaded):
    """Below COMPILED_MIN_SIZE Adam takes NumPy operations until the compiled loops are
    loaded, the loops after (faster from the smallest parameter on): the formula's bits
    either way."""
    from retrograd.backend import compiled_optim, numpy_optim

    monkeypatch.setattr(numpy_optim, "_LOOPS", compiled_optim if loaded else None)
    calls = []
    numpy_path = numpy_optim._adam_numpy
    monkeypatch.setattr(
        numpy_optim, "_adam_numpy", lambda *a, **k: (calls.append(1), numpy_path(*a, **k))[1]
    )
    for dtype in ("float32", "float64"):
        test_the_kernels_match_the_protocol_formula(name, dtype, (6, 5))
    assert len(calls) == (0 if loaded else 4)  # a pure and an in-place update per dtype


@pytest.mark.skipif(on_torch(), reason="the NumPy backend's choice between its two paths")
@pytest.mark.parametrize("loaded", [False, True])
@pytest.mark.parametrize("name", KERNEL_CASES)
def test_small_sgd_updates_take_the_loops_once_loaded(monkeypatch, name, loaded):
    """SGD as Adam: below COMPILED_MIN_SIZE NumPy operations until the compiled loops are
    loaded, the loops after (4 against 7 us at 200 elements with momentum): the formula's bits
    either way, at the first step and a later one."""
    from retrograd.backend import compiled_optim, numpy_optim

    monkeypatch.setattr(numpy_optim, "_LOOPS", compiled_optim if loaded else None)
    calls = []
    numpy_path = numpy_optim._sgd_numpy
    monkeypatch.setattr(
        numpy_optim, "_sgd_numpy", lambda *a, **k: (calls.append(1), numpy_path(*a, **k))[1]
    )
    for dtype in ("float32", "float64"):
        test_the_kernels_match_the_protocol_formula(name, dtype, (6, 5))
    assert len(calls) == (0 if loaded else 8)  # pure and in place, two steps, per dtype


@pytest.mark.skipif(not on_torch(), reason="torch's own SGD kernel: the torch backend's")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sgd_on_the_torch_backend_is_torch_eagers_bits(dtype):
    import torch

    rng = np.random.default_rng(2)
    start = rng.standard_normal((64, 33)).astype(dtype)
    gradients = [rng.standard_normal((64, 33)).astype(dtype) for _ in range(STEPS)]
    options = {"lr": 0.05, "momentum": 0.9, "weight_decay": 1e-4, "nesterov": True}
    with rg.use_backend(rg.Autodiff(inner_backend())):
        p = nn.Parameter(rg.tensor(start))
        ours = optim.SGD([p], **options)
        for g in gradients:
            ours.step((p * rg.tensor(g)).sum().backward())
    q = torch.nn.Parameter(torch.from_numpy(start.copy()))
    theirs = torch.optim.SGD([q], **options)
    for g in gradients:
        q.grad = torch.from_numpy(g.copy())
        theirs.step()
    np.testing.assert_array_equal(p.numpy(), q.detach().numpy())


@pytest.mark.skipif(not on_torch(), reason="torch's own Adam loop: the torch backend's")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ["Adam", "AdamW"])
def test_adam_on_the_torch_backend_is_torch_eagers_bits(name, dtype):
    import torch

    rng = np.random.default_rng(3)
    start = rng.standard_normal((64, 33)).astype(dtype)
    gradients = [rng.standard_normal((64, 33)).astype(dtype) for _ in range(STEPS)]
    options = {"lr": 0.05, "betas": (0.8, 0.99), "eps": 1e-6, "weight_decay": 1e-2}
    with rg.use_backend(rg.Autodiff(inner_backend())):
        p = nn.Parameter(rg.tensor(start))
        ours = getattr(optim, name)([p], **options)
        for g in gradients:
            ours.step((p * rg.tensor(g)).sum().backward())
    q = torch.nn.Parameter(torch.from_numpy(start.copy()))
    theirs = getattr(torch.optim, name)([q], **options)  # torch's default: single-tensor
    for g in gradients:
        q.grad = torch.from_numpy(g.copy())
        theirs.step()
    np.testing.assert_array_equal(p.numpy(), q.detach().numpy())
    state = theirs.state[q]
    for key in ("exp_avg", "exp_avg_sq"):
        np.testing.assert_array_equal(ours.state[p][key].numpy(), state[key].numpy())


def _step_once(make, keep):
    """A model stepped twice; before the second step, ``keep(model, optimizer, x)`` returns
    what to hold through it. Returns (the held things, the values before the second step)."""
    model = _model("float64")
    optimizer = make(model.parameters())
    x = rg.tensor(np.linspace(-1, 1, 15).reshape(3, 5))
    optimizer.step(model(x).square().sum().backward())
    grads = model(x).square().sum().backward()
    held = keep(model, optimizer, x)
    before = {name: p.numpy().copy() for name, p in model.named_parameters()}
    optimizer.step(grads)
    return model, optimizer, held, before


@pytest.mark.parametrize("name", ["sgd_momentum", "adamw"])
def test_what_others_hold_is_never_written(name):
    make = OPTIMIZERS[name]
    with rg.use_backend(rg.Autodiff(inner_backend())):
        # a NumPy array over the memory keeps the old values; a detached alias and p.data
        # follow the parameter, as torch's do (and as they did before any step wrote in place)
        for attribute in ("numpy", "detach", "data"):

            def hold(m, o, x, attribute=attribute):
                alias = getattr(m[0].weight, attribute)
                return alias if attribute == "data" else alias()

            model, _, held, before = _step_once(make, hold)
            after = model[0].weight.numpy()
            assert not np.array_equal(after, before["0.weight"])
            expected = before["0.weight"] if attribute == "numpy" else after
            np.testing.assert_array_equal(np.asarray(held), expected, err_msg=attribute)
        # a state buffer kept by the caller is the optimizer's and shows the step's values,
        # as torch's buffer updated in place does; a NumPy array taken before keeps the old
        key = "momentum_buffer" if name.startswith("sgd") else "exp_avg"
        _, optimizer, held, _ = _step_once(
            make, lambda m, o, x: (o.state[m[0].weight][key], o.state[m[0].weight][key].numpy())
        )
        assert held[0] is optimizer.state[next(iter(optimizer.state))][key]
        assert not np.array_equal(np.asarray(held[0]), held[1])
        # a forward recorded before the step backpropagates through the values it saw
        leaf = rg.tensor(np.linspace(-2, 2, 15).reshape(3, 5)).require_grad()
        _, _, out, before = _step_once(make, lambda m, o, x: m(leaf).square().sum())
        reference = _model("float64")
        reference.load_state_dict(before)
        expected = reference(leaf).square().sum().backward()
        np.testing.assert_array_equal(
            leaf.grad(out.backward()).numpy(), leaf.grad(expected).numpy()
        )


def test_the_step_holds_on_a_fresh_loop_and_refuses_shared_buffers():
    with rg.use_backend(rg.Autodiff(inner_backend())):
        model = _model("float32")
        optimizer = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        x = rg.ones((3, 5))
        grads = model(x).sum().backward()
        assert all(sole_reference(p, optimizer.state) for p in model.parameters())
        optimizer.step(grads)
        weight = model[0].weight
        assert sole_reference(weight, optimizer.state)
        view = weight[0]
        assert not sole_reference(weight, optimizer.state)
        del view
        entry = optimizer.state[weight]
        assert not sole_reference(weight, optimizer.state)
        del entry
        assert sole_reference(weight, optimizer.state)


@pytest.mark.numpy_only("counts NumPy's allocations")
def test_an_in_place_step_allocates_no_parameter_sized_memory():
    with rg.use_backend(rg.Autodiff(rg.NumpyBackend())):
        rg.seed(0)
        model = nn.Linear(512, 512)
        optimizer = optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
        x = rg.ones((4, 512))
        for _ in range(2):
            optimizer.step(model(x).sum().backward())
        grads = model(x).sum().backward()
        tracemalloc.start()
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        optimizer.step(grads)
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak < 512 * 512 * 4 // 8, peak  # the pure step made five 1 MiB arrays
    assert faults < 64, faults


@pytest.mark.parametrize("layout", ["expanded", "transposed"])
def test_the_sgd_kernel_reads_strided_gradients(layout):
    """A gradient that is a broadcast or transposed view (fused kernels read memory as
    contiguous: such a gradient is copied first, or takes the composed formula)."""
    backend = inner_backend()
    rng = np.random.default_rng(3)
    value, buffer = (
        backend.from_data(rng.standard_normal((300, 260)), "float32", None) for _ in "ab"
    )
    if layout == "expanded":
        grad = backend.expand(
            backend.from_data(rng.standard_normal((1, 260)), "float32", None), (300, 260)
        )
    else:
        grad = backend.swap_dims(
            backend.from_data(rng.standard_normal((260, 300)), "float32", None), 0, 1
        )
    hyper = (0.1, 0.9, 0.0, 1e-4, False)
    expected = rg.Backend.sgd_update(backend, value, grad, buffer, *hyper, False)
    copies = [
        backend.from_data(np.array(backend.to_numpy(a)), "float32", None) for a in (value, buffer)
    ]
    got = backend.sgd_update(copies[0], grad, copies[1], *hyper, True)
    for a, b in zip(got, expected):
        a, b = backend.to_numpy(a), backend.to_numpy(b)
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6 * np.abs(b).max())


TORCH_OPTIMIZERS = {
    "adam": ("Adam", {"lr": 0.05}),
    "adam_decay": ("Adam", {"lr": 0.05, "weight_decay": 0.1}),
    "adamw": ("AdamW", {"lr": 0.05, "weight_decay": 0.1}),
    "rmsprop": ("RMSprop", {"lr": 0.05}),
    "rmsprop_all": ("RMSprop", {"lr": 0.05, "momentum": 0.5, "centered": True}),
    "sgd_momentum": ("SGD", {"lr": 0.05, "momentum": 0.9}),
}


@pytest.mark.parametrize("keep_aliases", [False, True])
@pytest.mark.parametrize("name", sorted(TORCH_OPTIMIZERS))
def test_a_zero_dim_parameter_steps_as_torch(name, keep_aliases):
    # ``nn.Parameter(torch.tensor(0.0))`` (a GP's log length-scale): NumPy's arithmetic on 0-d
    # arrays returns scalars, which the Adam and RMSprop kernels' out= refused (found by
    # realports8's Gaussian-process port)
    import torch

    cls, kwargs = TORCH_OPTIMIZERS[name]
    ours, theirs = nn.Parameter(rg.tensor(0.3)), torch.nn.Parameter(torch.tensor(0.3))
    mine, reference = (
        getattr(optim, cls)([ours], **kwargs),
        getattr(torch.optim, cls)([theirs], **kwargs),
    )
    for _ in range(3):
        alias = ours.detach() if keep_aliases else None  # the pure (not in place) path
        mine.step(((ours * 2.0 - 1.0) ** 2).backward())
        reference.zero_grad()
        ((theirs * 2.0 - 1.0) ** 2).backward()
        reference.step()
        del alias
        assert ours.shape == ()
        np.testing.assert_allclose(ours.item(), theirs.item(), rtol=1e-6)
