"""Gaps against torch 2.13 closed together: the deprecated module backward hook, the
optimizers' implementation switches in their groups, the schedulers' state dicts,
ModuleList/Sequential indexing, mixed-dtype matrix products, the distribution families and
the constraint registry. Every expected value comes from torch."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import retrograd as rg
from retrograd.errors import AutodiffError, DTypeError, RetrogradError


# -- 1. nn.Module.register_backward_hook -----------------------------------------------------------
def _numpy(value):
    if value is None:
        return None
    return value.detach().numpy() if isinstance(value, torch.Tensor) else value.numpy()


def _hooked_call(lib, module, x_np, leaf_input, scale=None):
    """The hook's (grad_input, grad_output), the FutureWarnings of the call and the input's
    gradient, for torch (``lib`` torch) or retrograd."""
    seen = []

    def hook(mod, grad_input, grad_output):
        seen.append(([_numpy(g) for g in grad_input], [_numpy(g) for g in grad_output]))
        if scale is not None:
            return tuple(None if g is None else g * scale for g in grad_input)
        return None

    module.register_backward_hook(hook)
    if lib is torch:
        x = torch.tensor(x_np, requires_grad=True)
    else:
        x = rg.tensor(x_np).require_grad()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = module(x if leaf_input else x * 1)
    weights = lib.arange(y.numel(), dtype=lib.float32).reshape(tuple(y.shape))
    if lib is torch:
        (y * weights).sum().backward()
        x_grad = x.grad.numpy()
    else:
        x_grad = x.grad((y * weights).sum().backward()).numpy()
    messages = [str(w.message) for w in caught if w.category is FutureWarning]
    return seen, messages, x_grad


def _pair(torch_module, rg_module):
    state = {k: rg.tensor(v.detach().numpy()) for k, v in torch_module.state_dict().items()}
    rg_module.load_state_dict(state)
    return torch_module, rg_module


def _modules(kind):
    torch.manual_seed(0)
    tnn, rnn = torch.nn, rg.nn
    if kind == "linear":
        return _pair(tnn.Linear(3, 2), rnn.Linear(3, 2))
    if kind == "linear_no_bias":
        return _pair(tnn.Linear(3, 2, bias=False), rnn.Linear(3, 2, bias=False))
    if kind == "relu":
        return tnn.ReLU(), rnn.ReLU()
    if kind == "conv2d":
        return _pair(tnn.Conv2d(2, 3, 3), rnn.Conv2d(2, 3, 3))
    if kind == "sequential":
        return _pair(
            tnn.Sequential(tnn.Linear(3, 2), tnn.ReLU()),
            rnn.Sequential(rnn.Linear(3, 2), rnn.ReLU()),
        )
    return _pair(
        tnn.Sequential(tnn.ReLU(), tnn.Linear(3, 2)),
        rnn.Sequential(rnn.ReLU(), rnn.Linear(3, 2)),
    )


@pytest.mark.parametrize(
    "kind", ["linear", "linear_no_bias", "relu", "conv2d", "sequential", "relu_then_linear"]
)
@pytest.mark.parametrize("leaf_input", [True, False])
@pytest.mark.parametrize("scale", [None, 3.0])
def test_register_backward_hook_as_torch(kind, leaf_input, scale):
    torch_module, rg_module = _modules(kind)
    shape = (1, 2, 5, 5) if kind == "conv2d" else (4, 3)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    expected = _hooked_call(torch, torch_module, x, leaf_input, scale)
    got = _hooked_call(rg, rg_module, x, leaf_input, scale)
    (torch_seen, torch_warnings, torch_grad), (rg_seen, rg_warnings, rg_grad) = expected, got
    assert len(rg_seen) == len(torch_seen) == 1
    (t_in, t_out), (r_in, r_out) = torch_seen[0], rg_seen[0]
    assert [None if g is None else g.shape for g in r_in] == [
        None if g is None else g.shape for g in t_in
    ]
    for a, b in zip(t_in + t_out, r_in + r_out):
        if a is not None:
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    assert rg_warnings == torch_warnings
    np.testing.assert_allclose(rg_grad, torch_grad, rtol=1e-5, atol=1e-6)


def test_register_backward_hook_untracked_input_and_mixing_kinds():
    torch_module, rg_module = _modules("linear")
    x = np.ones((2, 3), np.float32)
    grads = {}
    for lib, module in ((torch, torch_module), (rg, rg_module)):

        def hook(module, grad_input, grad_output, lib=lib):
            grads[lib] = [g is None for g in grad_input]

        module.register_backward_hook(hook)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module(lib.tensor(x)).sum().backward()
    assert grads[rg] == grads[torch] == [False, True, False]
    with pytest.raises(RuntimeError, match="Cannot use both") as caught:
        rg_module.register_full_backward_hook(lambda m, gi, go: None)
    assert isinstance(caught.value, AutodiffError)
    other = rg.nn.ReLU()
    other.register_full_backward_hook(lambda m, gi, go: None)
    with pytest.raises(AutodiffError, match="Cannot use both"):
        other.register_backward_hook(lambda m, gi, go: None)


# -- 2. the optimizers' implementation switches --------------------------------------------------
_OPTIMIZERS = [
    "ASGD", "Adadelta", "Adafactor", "Adagrad", "Adam", "AdamW", "Adamax", "LBFGS", "NAdam",
    "RAdam", "RMSprop", "Rprop", "SGD", "SparseAdam",
]  # fmt: skip


def _without_params(groups):
    return [{k: v for k, v in g.items() if k != "params"} for g in groups]


@pytest.mark.parametrize("name", _OPTIMIZERS)
def test_optimizer_defaults_and_groups_as_torch(name):
    made = {}
    for lib in (torch, rg):
        first, second = lib.nn.Parameter(lib.ones(2)), lib.nn.Parameter(lib.ones(3))
        groups = [{"params": [first]}]
        if name != "LBFGS":  # (one group only)
            groups.append({"params": [second], "lr": 0.5})
        made[lib] = getattr(lib.optim, name)(groups)
    ours, theirs = made[rg], made[torch]
    assert list(ours.defaults.items()) == list(theirs.defaults.items())
    for own, reference in zip(ours.param_groups, theirs.param_groups):
        assert list(own) == list(reference)
    saved, expected = ours.state_dict()["param_groups"], theirs.state_dict()["param_groups"]
    assert saved == expected


_SWITCHED = {
    "Adam": {"foreach": True, "decoupled_weight_decay": True},
    "AdamW": {"fused": True},
    "SGD": {"fused": True, "momentum": 0.9},
    "Adagrad": {"fused": True},
    "RMSprop": {"foreach": False},
    "NAdam": {"foreach": True, "decoupled_weight_decay": True},
    "Adafactor": {"foreach": True},
}


@pytest.mark.parametrize("name", sorted(_SWITCHED))
def test_optimizer_switches_round_trip_and_keep_the_numbers(name):
    settings = dict(_SWITCHED[name], lr=0.1)
    if name != "Adafactor":
        settings["weight_decay"] = 0.1
    start = np.random.default_rng(2).standard_normal((2, 3))
    results, groups = {}, {}
    for lib in (torch, rg):
        weight = lib.nn.Parameter(lib.tensor(start))
        optimizer = getattr(lib.optim, name)([weight], **settings)
        for _ in range(3):
            loss = (weight * weight * weight).sum()
            if lib is torch:
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            else:
                optimizer.step(loss.backward())
        results[lib] = np.array(weight.detach().numpy())
        groups[lib] = _without_params(optimizer.state_dict()["param_groups"])
    np.testing.assert_allclose(results[rg], results[torch], rtol=1e-12, atol=1e-14)
    assert groups[rg] == groups[torch]
    fresh = getattr(rg.optim, name)([rg.nn.Parameter(rg.tensor(start))], lr=0.1)
    saved = getattr(rg.optim, name)([rg.nn.Parameter(rg.tensor(start))], **settings)
    fresh.load_state_dict(saved.state_dict())
    assert _without_params(fresh.param_groups) == _without_params(saved.param_groups)


def test_optimizer_switches_refused_as_torch():
    weight = [rg.nn.Parameter(rg.ones(2))]
    with pytest.raises(RetrogradError, match="`fused` and `foreach` cannot be `True`"):
        rg.optim.Adam(weight, fused=True, foreach=True)
    with pytest.raises(RetrogradError, match=r"unexpected keyword.*fused"):
        rg.optim.RMSprop(weight, fused=True)
    with pytest.raises(RetrogradError, match="differentiable"):
        rg.optim.SGD(weight).add_param_group(
            {"params": [rg.nn.Parameter(rg.ones(1))], "differentiable": True}
        )


# -- 3. the schedulers' state dicts ----------------------------------------------------------------
def _schedules(S, o):  # noqa: N803 (torch's module name)
    return {
        "StepLR": lambda: S.StepLR(o, 2, 0.5),
        "MultiStepLR": lambda: S.MultiStepLR(o, [1, 3, 3], 0.1),
        "ConstantLR": lambda: S.ConstantLR(o, 0.5, 3),
        "LinearLR": lambda: S.LinearLR(o, 0.5, 1.0, 3),
        "ExponentialLR": lambda: S.ExponentialLR(o, 0.9),
        "CosineAnnealingLR": lambda: S.CosineAnnealingLR(o, 5, 0.001),
        "PolynomialLR": lambda: S.PolynomialLR(o, 6, 2.0),
        "LambdaLR": lambda: S.LambdaLR(o, lambda e: 0.9**e),
        "MultiplicativeLR": lambda: S.MultiplicativeLR(o, lambda e: 0.9),
        "CosineAnnealingWarmRestarts": lambda: S.CosineAnnealingWarmRestarts(o, 3, 2, 0.01),
        "CyclicLR": lambda: S.CyclicLR(o, 0.01, 0.1, 2),
        "OneCycleLR": lambda: S.OneCycleLR(o, 0.1, total_steps=10),
        "ReduceLROnPlateau": lambda: S.ReduceLROnPlateau(o, patience=1),
        "SequentialLR": lambda: S.SequentialLR(
            o, [S.ConstantLR(o, 0.5, 2), S.ExponentialLR(o, 0.9)], [2]
        ),
        "ChainedScheduler": lambda: S.ChainedScheduler(
            [S.ExponentialLR(o, 0.9), S.StepLR(o, 2, 0.5)]
        ),
    }


def _stepped_schedule(lib, name, steps):
    weight = lib.nn.Parameter(lib.ones(2))
    optimizer = lib.optim.SGD([weight], lr=0.1, momentum=0.9)
    schedule = _schedules(lib.optim.lr_scheduler, optimizer)[name]()
    for step in range(steps):
        if name == "ReduceLROnPlateau":
            schedule.step(1.0 if step else 2.0)
        else:
            schedule.step()
    return schedule, optimizer


def _same_state(ours, theirs, where=""):
    if isinstance(theirs, dict):
        assert isinstance(ours, dict), where
        assert list(ours) == list(theirs), where
        for key in theirs:
            _same_state(ours[key], theirs[key], f"{where}.{key}")
    elif isinstance(theirs, list | tuple):
        assert len(ours) == len(theirs), where
        for index, (a, b) in enumerate(zip(ours, theirs)):
            _same_state(a, b, f"{where}[{index}]")
    elif isinstance(theirs, float):
        assert ours == pytest.approx(theirs, rel=1e-12, abs=1e-15), where
    else:
        assert ours == theirs, where


@pytest.mark.parametrize("name", sorted(_schedules(None, None)))
@pytest.mark.parametrize("steps", [0, 4])
def test_scheduler_state_dict_as_torch(name, steps):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = _stepped_schedule(torch, name, steps)[0].state_dict()
        ours = _stepped_schedule(rg, name, steps)[0].state_dict()
    _same_state(ours, theirs, name)


@pytest.mark.parametrize("name", sorted(_schedules(None, None)))
def test_scheduler_loads_torch_state_and_goes_on_as_torch(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference, reference_optimizer = _stepped_schedule(torch, name, 3)
        schedule, optimizer = _stepped_schedule(rg, name, 0)
        optimizer.load_state_dict(
            {
                "state": {},
                "param_groups": [dict(g) for g in reference_optimizer.state_dict()["param_groups"]],
            }
        )
        schedule.load_state_dict(reference.state_dict())
        _same_state(schedule.state_dict(), reference.state_dict(), name)
        for _ in range(2):
            for one in (schedule, reference):
                one.step(1.0) if name == "ReduceLROnPlateau" else one.step()
            assert schedule.get_last_lr() == pytest.approx(reference.get_last_lr(), rel=1e-12)


# -- 4. ModuleList / Sequential indexing -----------------------------------------------------------
def _layers(lib, kind):
    made = [lib.nn.Linear(i + 1, 1) for i in range(4)]
    return lib.nn.ModuleList(made) if kind == "ModuleList" else lib.nn.Sequential(*made)


def _layout(container):
    return [(name, type(m).__name__, getattr(m, "in_features", None)) for name, m in
            container._modules.items()]  # fmt: skip


@pytest.mark.parametrize("kind", ["ModuleList", "Sequential"])
@pytest.mark.parametrize("index", [-4, -3, -1, 0, 2, 4])
def test_insert_in_range_as_torch_sequential(kind, index):
    # torch's Sequential.insert is the rule (its ModuleList.insert fails on a negative index)
    expected = _layers(torch, "Sequential")
    expected.insert(index, torch.nn.ReLU())
    got = _layers(rg, kind)
    got.insert(index, rg.nn.ReLU())
    assert _layout(got) == _layout(expected)


@pytest.mark.parametrize("kind", ["ModuleList", "Sequential"])
@pytest.mark.parametrize("index", [-5, 5, 10])
def test_insert_out_of_range_refused_as_torch_sequential(kind, index):
    with pytest.raises(IndexError):
        _layers(torch, "Sequential").insert(index, torch.nn.ReLU())
    container = _layers(rg, kind)
    before = _layout(container)
    with pytest.raises(IndexError, match=f"{kind}.insert: index {index}") as caught:
        container.insert(index, rg.nn.ReLU())
    assert isinstance(caught.value, RetrogradError)
    assert _layout(container) == before


@pytest.mark.parametrize("kind", ["ModuleList", "Sequential"])
@pytest.mark.parametrize(
    "index", [np.int64(-1), np.int32(2), slice(1, 3), slice(None, None, -1), slice(-2, None)]
)
def test_container_get_set_delete_as_torch(kind, index):
    for operation in ("get", "set", "del"):
        if operation == "set" and isinstance(index, slice):
            continue
        results = []
        for lib in (torch, rg):
            container = _layers(lib, kind)
            if operation == "get":
                item = container[index]
                results.append((_layout(container), _layout(item) if hasattr(item, "_modules")
                                and len(item._modules) else type(item).__name__))  # fmt: skip
            elif operation == "set":
                container[index] = lib.nn.Tanh()
                results.append(_layout(container))
            else:
                del container[index]
                results.append(_layout(container))
        assert results[1] == results[0], operation


@pytest.mark.parametrize("kind", ["ModuleList", "Sequential"])
def test_container_bad_indices_refused_as_torch(kind):
    for index, error in ((1.0, TypeError), ("1", TypeError), (-5, IndexError), (4, IndexError)):
        for operation in (
            lambda c, lib, index=index: c[index],
            lambda c, lib, index=index: c.__setitem__(index, lib.nn.Tanh()),
            lambda c, lib, index=index: c.__delitem__(index),
        ):
            with pytest.raises(error):
                operation(_layers(torch, kind), torch)
            container = _layers(rg, kind)
            with pytest.raises(error) as caught:
                operation(container, rg)
            assert isinstance(caught.value, RetrogradError)
            assert len(container) == 4
    with pytest.raises(TypeError):  # torch's containers assign one module at a time
        _layers(torch, kind)[1:3] = torch.nn.Tanh()
    with pytest.raises(DTypeError, match="index must be an integer"):
        _layers(rg, kind)[1:3] = rg.nn.Tanh()


# -- 5. matrix products of mixed dtypes ------------------------------------------------------------
def _mixed_cases(lib):
    F = lib.nn.functional  # noqa: N806 (torch's name)
    return {
        "linear": lambda a, b: F.linear(a((2, 3)), b((4, 3))),
        "linear_bias": lambda a, b: F.linear(a((2, 3)), a((4, 3)), b((4,))),
        "linear_3d": lambda a, b: F.linear(a((2, 2, 3)), b((4, 3))),
        "linear_vector_input": lambda a, b: F.linear(a((3,)), b((4, 3))),
        "linear_weight_vector": lambda a, b: F.linear(a((2, 3)), b((3,))),
        "Linear": lambda a, b: _linear_of(lib, b)(a((2, 3))),
        "bilinear": lambda a, b: F.bilinear(a((2, 3)), a((2, 3)), b((4, 3, 3))),
        "conv1d": lambda a, b: F.conv1d(a((1, 2, 5)), b((3, 2, 2))),
        "prelu": lambda a, b: F.prelu(a((2, 3)), b((1,))),
        "binary_cross_entropy": lambda a, b: F.binary_cross_entropy(a((3,)) * 0.5, b((3,))),
        "matmul": lambda a, b: lib.matmul(a((2, 3)), b((3, 4))),
        "@": lambda a, b: a((2, 3)) @ b((3, 4)),
        "mm": lambda a, b: lib.mm(a((2, 3)), b((3, 4))),
        "bmm": lambda a, b: lib.bmm(a((2, 2, 3)), b((2, 3, 4))),
        "addmm": lambda a, b: lib.addmm(a((2, 4)), a((2, 3)), b((3, 4))),
        "addmm_input": lambda a, b: lib.addmm(b((2, 4)), a((2, 3)), a((3, 4))),
        "baddbmm": lambda a, b: lib.baddbmm(a((2, 2, 4)), a((2, 2, 3)), b((2, 3, 4))),
        "baddbmm_input": lambda a, b: lib.baddbmm(b((2, 2, 4)), a((2, 2, 3)), a((2, 3, 4))),
    }


def _linear_of(lib, make):
    layer = lib.nn.Linear(3, 4)
    probe = make((1,))
    return layer.to(probe.dtype) if lib is torch else layer.to(dtype=probe.dtype)


_OP_NAMES = {"Linear": "linear", "@": "matmul", "addmm_input": "addmm",
             "baddbmm_input": "baddbmm", "linear_bias": "linear", "linear_3d": "linear",
             "linear_vector_input": "linear", "linear_weight_vector": "linear"}  # fmt: skip


def _ones(lib, dtype, backend=None):
    if lib is torch:
        return lambda shape: torch.ones(shape, dtype=getattr(torch, dtype))
    if backend is None:
        return lambda shape: rg.ones(shape, dtype=dtype)
    return lambda shape: rg.ones(shape, dtype=dtype, backend=backend)


@pytest.mark.parametrize("dtypes", [("float32", "float64"), ("float64", "float32")])
@pytest.mark.parametrize("case", sorted(_mixed_cases(torch)))
def test_mixed_dtype_products_refused_as_torch(case, dtypes):
    first, second = dtypes
    with pytest.raises(RuntimeError):
        _mixed_cases(torch)[case](_ones(torch, first), _ones(torch, second))
    with pytest.raises(DTypeError) as caught:
        _mixed_cases(rg)[case](_ones(rg, first), _ones(rg, second))
    message = str(caught.value)
    assert _OP_NAMES.get(case, case) in message
    assert first in message and second in message


@pytest.mark.parametrize("case", ["linear", "linear_bias", "matmul", "bmm", "addmm", "baddbmm"])
def test_half_with_float_products_refused_as_torch(case):
    backend = rg.Autodiff(rg.TorchBackend("cpu"))
    with pytest.raises(RuntimeError):
        _mixed_cases(torch)[case](_ones(torch, "float16"), _ones(torch, "float32"))
    with pytest.raises(DTypeError, match="float16") as caught:
        _mixed_cases(rg)[case](_ones(rg, "float16", backend), _ones(rg, "float32", backend))
    assert "float32" in str(caught.value)


# -- 6. the exponential families and transformed distributions -----------------------------------
_LOC = [0.3, -1.2, 2.0]
_POSITIVE = [0.7, 1.5, 2.5]
_FAMILIES = {
    "Bernoulli": (lambda lib, t: lib.distributions.Bernoulli(t([0.2, 0.5, 0.9])), [0.0, 1.0, 1.0]),
    "Beta": (lambda lib, t: lib.distributions.Beta(t(_POSITIVE), t([1.1, 0.6, 3.0])),
             [0.2, 0.5, 0.9]),
    "Chi2": (lambda lib, t: lib.distributions.Chi2(t(_POSITIVE)), [0.4, 1.0, 3.0]),
    "Dirichlet": (lambda lib, t: lib.distributions.Dirichlet(t(_POSITIVE)), [0.2, 0.3, 0.5]),
    "Exponential": (lambda lib, t: lib.distributions.Exponential(t(_POSITIVE)), [0.4, 1.0, 3.0]),
    "Gamma": (lambda lib, t: lib.distributions.Gamma(t(_POSITIVE), t([1.1, 0.6, 3.0])),
              [0.4, 1.0, 3.0]),
    "Normal": (lambda lib, t: lib.distributions.Normal(t(_LOC), t(_POSITIVE)), [0.4, -1.0, 3.0]),
    "Poisson": (lambda lib, t: lib.distributions.Poisson(t(_POSITIVE)), [0.0, 1.0, 4.0]),
}  # fmt: skip
_TRANSFORMED = {
    "Gumbel": lambda lib, t: lib.distributions.Gumbel(t(_LOC), t(_POSITIVE)),
    "HalfNormal": lambda lib, t: lib.distributions.HalfNormal(t(_POSITIVE)),
    "LogNormal": lambda lib, t: lib.distributions.LogNormal(t(_LOC), t(_POSITIVE)),
}


def _float64(lib):
    return lambda values: lib.tensor(values, dtype=lib.float64)


@pytest.mark.parametrize("name", sorted(_FAMILIES))
def test_exponential_families_as_torch(name):
    make, value = _FAMILIES[name]
    theirs, ours = make(torch, _float64(torch)), make(rg, _float64(rg))
    assert isinstance(ours, rg.distributions.ExponentialFamily)
    np.testing.assert_allclose(
        ours.log_prob(rg.tensor(value, dtype=rg.float64)).numpy(),
        theirs.log_prob(torch.tensor(value, dtype=torch.float64)).numpy(),
        rtol=1e-10,
    )
    ours_natural, theirs_natural = ours._natural_params, theirs._natural_params
    for a, b in zip(ours_natural, theirs_natural, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)
    np.testing.assert_allclose(
        ours._log_normalizer(*ours_natural).numpy(),
        theirs._log_normalizer(*theirs_natural).numpy(),
        rtol=1e-10,
    )
    if name == "Poisson":  # torch's has no entropy: no carrier measure
        with pytest.raises(NotImplementedError):
            theirs.entropy()
        with pytest.raises(NotImplementedError):
            ours.entropy()
        return
    expected = theirs.entropy().numpy()
    np.testing.assert_allclose(ours.entropy().numpy(), expected, rtol=1e-10)
    if name not in ("Beta", "Dirichlet"):  # (no carrier measure in torch's either)
        bregman = rg.distributions.ExponentialFamily.entropy(ours)
        np.testing.assert_allclose(bregman.detach().numpy(), expected, rtol=1e-9)
    if theirs.has_rsample:
        rg.manual_seed(0)
        draws = ours.rsample((4,))
        assert tuple(draws.shape) == tuple(theirs.rsample((4,)).shape)
        np.testing.assert_allclose(
            ours.log_prob(draws).detach().numpy(),
            theirs.log_prob(torch.tensor(draws.detach().numpy())).numpy(),
            rtol=1e-9,
        )


@pytest.mark.parametrize("name", sorted(_TRANSFORMED))
def test_transformed_families_as_torch(name):
    theirs = _TRANSFORMED[name](torch, _float64(torch))
    ours = _TRANSFORMED[name](rg, _float64(rg))
    assert isinstance(ours, rg.distributions.TransformedDistribution)
    assert type(ours.base_dist).__name__ == type(theirs.base_dist).__name__
    assert [type(t).__name__ for t in ours.transforms] == [
        type(t).__name__ for t in theirs.transforms
    ]
    np.testing.assert_allclose(ours.entropy().numpy(), theirs.entropy().numpy(), rtol=1e-10)
    values = [0.4, 1.0, 3.0]
    np.testing.assert_allclose(
        ours.log_prob(rg.tensor(values, dtype=rg.float64)).numpy(),
        theirs.log_prob(torch.tensor(values, dtype=torch.float64)).numpy(),
        rtol=1e-10,
    )
    # rsample: torch's density at the draws, and the pathwise derivatives of each family's
    # transform computed by hand from the draws
    rg.manual_seed(1)
    loc = rg.tensor(_LOC, dtype=rg.float64).require_grad()
    scale = rg.tensor(_POSITIVE, dtype=rg.float64).require_grad()
    made = {
        "Gumbel": lambda: rg.distributions.Gumbel(loc, scale),
        "HalfNormal": lambda: rg.distributions.HalfNormal(scale),
        "LogNormal": lambda: rg.distributions.LogNormal(loc, scale),
    }[name]()
    draws = made.rsample()
    grads = draws.sum().backward()
    x = draws.detach().numpy()
    np.testing.assert_allclose(
        made.log_prob(draws.detach()).detach().numpy(),
        theirs.log_prob(torch.tensor(x)).numpy(),
        rtol=1e-9,
    )
    loc_np, scale_np = np.array(_LOC), np.array(_POSITIVE)
    if name == "Gumbel":
        expected = {"loc": np.ones(3), "scale": (x - loc_np) / scale_np}
    elif name == "LogNormal":
        expected = {"loc": x, "scale": x * (np.log(x) - loc_np) / scale_np}
    else:
        expected = {"scale": x / scale_np}
    for key, gradient in expected.items():
        got = {"loc": loc, "scale": scale}[key].grad(grads).numpy()
        np.testing.assert_allclose(got, gradient, rtol=1e-10)


# -- 7. the constraint registry ------------------------------------------------------------------
def _constraints(lib):
    C = lib.distributions.constraints  # noqa: N806 (torch's name)
    return {
        "real": (C.real, (2, 3)),
        "positive": (C.positive, (2, 3)),
        "nonnegative": (C.nonnegative, (2, 3)),
        "greater_than": (C.greater_than(1.5), (2, 3)),
        "greater_than_eq": (C.greater_than_eq(-2.0), (2, 3)),
        "interval": (C.interval(-1.0, 3.0), (2, 3)),
        "half_open_interval": (C.half_open_interval(0.5, 2.0), (2, 3)),
        "unit_interval": (C.unit_interval, (2, 3)),
        "simplex": (C.simplex, (2, 3)),
        "lower_cholesky": (C.lower_cholesky, (2, 3, 3)),
        "positive_definite": (C.positive_definite, (2, 3, 3)),
        "real_vector": (C.real_vector, (2, 3)),
        "independent_positive": (C.independent(C.positive, 1), (2, 3)),
        "corr_cholesky": (C.corr_cholesky, (2, 3)),
    }


@pytest.mark.parametrize("registry", ["transform_to", "biject_to"])
@pytest.mark.parametrize("name", sorted(_constraints(torch)))
def test_constraint_registry_as_torch(registry, name):
    constraint, shape = _constraints(torch)[name]
    theirs_registry = getattr(torch.distributions, registry)
    ours_registry = getattr(rg.distributions, registry)
    assert ours_registry is getattr(rg.distributions.constraint_registry, registry)
    ours_constraint = _constraints(rg)[name][0]
    try:
        theirs = theirs_registry(constraint)
    except NotImplementedError:
        with pytest.raises(NotImplementedError, match=type(ours_constraint).__name__):
            ours_registry(ours_constraint)
        return
    ours = ours_registry(ours_constraint)
    assert type(ours).__name__ == type(theirs).__name__
    u = np.random.default_rng(3).standard_normal(shape)
    y_theirs = theirs(torch.tensor(u))
    y_ours = ours(rg.tensor(u))
    np.testing.assert_allclose(y_ours.numpy(), y_theirs.numpy(), rtol=1e-10, atol=1e-12)
    assert bool(ours_constraint.check(y_ours).all().item())
    try:
        expected = theirs.log_abs_det_jacobian(torch.tensor(u), y_theirs).numpy()
    except NotImplementedError:  # (not a bijection: softmax, the Cholesky factors)
        with pytest.raises(NotImplementedError):
            ours.log_abs_det_jacobian(rg.tensor(u), y_ours)
    else:
        got = ours.log_abs_det_jacobian(rg.tensor(u), y_ours).numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)
    if registry == "biject_to":
        np.testing.assert_allclose(
            ours.inv(y_ours).numpy(), theirs.inv(y_theirs).numpy(), rtol=1e-8, atol=1e-10
        )


def test_constraint_registry_register_and_refusals():
    registry = rg.distributions.constraint_registry.ConstraintRegistry()
    with pytest.raises(NotImplementedError, match="_Real"):
        registry(rg.distributions.constraints.real)
    registry.register(rg.distributions.constraints.real, lambda c: rg.distributions.ExpTransform())
    assert isinstance(registry(rg.distributions.constraints.real), rg.distributions.ExpTransform)
    with pytest.raises(TypeError):
        torch.distributions.constraint_registry.ConstraintRegistry().register(int, lambda c: 0)
    with pytest.raises(DTypeError, match="Constraint subclass"):
        registry.register(int, lambda c: 0)
