"""Leftover defects, each checked against torch 2.13 (the reference).

- ``clip_grad_norm_`` with a NaN total norm reaches the zero gradients kept by
  ``zero_grad(set_to_none=False)`` (torch's ``0 * nan``); a parameter that had a gradient
  when it joined an optimizer (``add_param_group`` after a backward) is zero-stepped.
- A captured step's replay and ``ZeroRedundancyOptimizer`` run torch's step hooks and the
  kept-zero steps, as the plain optimizer's step does.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import retrograd as rg
from retrograd import distributed as dist

NAN = float("nan")


def _torch_optimizer(name, params):
    if name == "SGD":
        return torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=0.1)
    return torch.optim.Adam(params, lr=0.1, weight_decay=0.1)


def _our_optimizer(name, params):
    if name == "SGD":
        return rg.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=0.1)
    return rg.optim.Adam(params, lr=0.1, weight_decay=0.1)


A, B = [1.0, -2.0], [0.5, 3.0]


# -- clip_grad_norm_ and the kept zero gradients ------------------------------------------------
@pytest.mark.parametrize("name", ["SGD", "Adam"])
def test_a_nan_clipping_factor_reaches_the_kept_zero_gradients(name):
    a, b = (torch.nn.Parameter(torch.tensor(v)) for v in (A, B))
    opt = _torch_optimizer(name, [a, b])
    (a * b).sum().backward()
    opt.step()
    opt.zero_grad(set_to_none=False)
    (a * NAN).sum().backward()
    torch.nn.utils.clip_grad_norm_([a, b], 1.0)
    opt.step()
    expected = [a.detach().numpy(), b.detach().numpy()]

    ra, rb = (rg.tensor(v).require_grad() for v in (A, B))
    ours = _our_optimizer(name, [ra, rb])
    ours.step((ra * rb).sum().backward())
    ours.zero_grad(set_to_none=False)
    grads = (ra * NAN).sum().backward()
    rg.nn.utils.clip_grad_norm_(grads, [ra, rb], 1.0)
    np.testing.assert_array_equal(rb.grad(grads).numpy(), [NAN, NAN])  # torch's b.grad
    ours.step(grads)
    for got, want in zip([ra.numpy(), rb.numpy()], expected):
        np.testing.assert_array_equal(got, want)  # NaN where torch's is


@pytest.mark.parametrize("name", ["SGD", "Adam"])
def test_a_parameter_that_joins_after_a_backward_is_zero_stepped(name):
    a, b = (torch.nn.Parameter(torch.tensor(v)) for v in (A, B))
    opt = _torch_optimizer(name, [a])
    (a * b).sum().backward()
    opt.step()
    opt.add_param_group({"params": [b]})
    for _ in range(3):
        opt.zero_grad(set_to_none=False)
        (a * a).sum().backward()
        opt.step()
    expected = [a.detach().numpy(), b.detach().numpy()]

    ra, rb = (rg.tensor(v).require_grad() for v in (A, B))
    ours = _our_optimizer(name, [ra])
    grads = (ra * rb).sum().backward()
    ours.step(grads)
    ours.add_param_group({"params": [rb]})
    for _ in range(3):
        ours.zero_grad(set_to_none=False)
        grads = (ra * ra).sum().backward()
        ours.step(grads)
    for got, want in zip([ra.numpy(), rb.numpy()], expected):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


# -- a captured step and ZeRO: step hooks and kept-zero steps ------------------------------------
def _hook_log(register_pre, register_post, log, tag):
    return [
        register_pre(lambda o, args, kwargs: log.append(("pre", tag, type(o).__name__))),
        register_post(lambda o, args, kwargs: log.append(("post", tag, type(o).__name__))),
    ]


def test_a_captured_step_runs_the_step_hooks_and_the_kept_zero_steps():
    a, b = (torch.nn.Parameter(torch.tensor(v)) for v in (A, B))
    opt = torch.optim.SGD([a, b], lr=0.1, momentum=0.9)
    expected_log: list = []
    _hook_log(opt.register_step_pre_hook, opt.register_step_post_hook, expected_log, "own")
    (a * b).sum().backward()
    opt.step()
    for _ in range(3):
        opt.zero_grad(set_to_none=False)
        (a * a).sum().backward()
        opt.step()
    expected = [a.detach().numpy(), b.detach().numpy()]

    ra, rb = (rg.tensor(v).require_grad() for v in (A, B))
    ours = rg.optim.SGD([ra, rb], lr=0.1, momentum=0.9)
    log: list = []
    handles = _hook_log(ours.register_step_pre_hook, ours.register_step_post_hook, log, "own")
    ours.step((ra * rb).sum().backward())

    def step(x):
        ours.zero_grad(set_to_none=False)
        loss = (ra * ra * x).sum()
        ours.step(loss.backward())
        return loss

    one = rg.ones(())
    captured = rg.capture(step, one, state=[ours])
    captured(one)
    captured(one)
    for handle in handles:
        handle.remove()
    assert log == expected_log
    for got, want in zip([ra.numpy(), rb.numpy()], expected):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_zero_redundancy_optimizer_runs_the_step_hooks_and_the_kept_zero_steps():
    a, b = (torch.nn.Parameter(torch.tensor(v)) for v in (A, B))
    opt = torch.optim.SGD([a, b], lr=0.1, momentum=0.9)
    (a * b).sum().backward()
    opt.step()
    for _ in range(2):
        opt.zero_grad(set_to_none=False)
        (a * a).sum().backward()
        opt.step()
    expected = [a.detach().numpy(), b.detach().numpy()]
    # torch's ZeroRedundancyOptimizer (tried with gloo, one rank): the global hooks run for it
    # and for the local optimizer it steps, its own hooks around both
    expected_log = [
        ("pre", "global", "ZeroRedundancyOptimizer"),
        ("pre", "own", "ZeroRedundancyOptimizer"),
        ("pre", "global", "SGD"),
        ("post", "global", "SGD"),
        ("post", "own", "ZeroRedundancyOptimizer"),
        ("post", "global", "ZeroRedundancyOptimizer"),
    ]

    device = rg.Device("cpu", 0)
    config = dist.DistributedConfig(dist.ReduceOperation.MEAN, timeout=30.0)
    log: list = []
    with dist.DistributedContext([device], config):
        ra, rb = (rg.tensor(v, device=device).require_grad() for v in (A, B))
        zero = dist.ZeroRedundancyOptimizer([ra, rb], rg.optim.SGD, lr=0.1, momentum=0.9)
        handles = _hook_log(
            rg.optim.optimizer.register_optimizer_step_pre_hook,
            rg.optim.optimizer.register_optimizer_step_post_hook,
            log,
            "global",
        )
        handles += _hook_log(zero.register_step_pre_hook, zero.register_step_post_hook, log, "own")
        try:
            zero.step((ra * rb).sum().backward())
        finally:
            for handle in handles:
                handle.remove()
        for _ in range(2):
            zero.zero_grad(set_to_none=False)
            zero.step((ra * ra).sum().backward())
    assert log == expected_log
    for got, want in zip([ra.numpy(), rb.numpy()], expected):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


# -- a schedule's per-group lists longer than the optimizer's groups ------------------------------
SCHEDULES = {
    "StepLR": (lambda lib, opt: lib.optim.lr_scheduler.StepLR(opt, 2, 0.5), ()),
    "ReduceLROnPlateau": (
        lambda lib, opt: lib.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=0),
        (1.0,),
    ),
}


def _resumed_rates(lib, name, add_again):
    """A schedule saved after a group was added, loaded over an optimizer that has not added
    it yet (the resumed run adds it after loading, or never): the rates of four more steps."""
    make, metric = SCHEDULES[name]
    if lib is torch:
        a, b = torch.nn.Parameter(torch.ones(1)), torch.nn.Parameter(torch.ones(1))
    else:
        a, b = rg.ones(1).require_grad(), rg.ones(1).require_grad()
    opt = lib.optim.SGD([a], lr=0.1)
    schedule = make(lib, opt)
    schedule.step(*metric)
    opt.add_param_group({"params": [b], "lr": 0.05})
    schedule.step(*metric)
    saved = schedule.state_dict()
    resumed_opt = lib.optim.SGD([a], lr=0.1)
    resumed = make(lib, resumed_opt)
    resumed.load_state_dict(saved)
    if add_again:
        resumed_opt.add_param_group({"params": [b], "lr": 0.05})
    rates = []
    for _ in range(4):
        resumed.step(*metric)
        rates.append([float(group["lr"]) for group in resumed_opt.param_groups])
    return rates


@pytest.mark.parametrize("add_again", [True, False])
@pytest.mark.parametrize("name", list(SCHEDULES))
def test_a_schedule_saved_with_more_groups_loads_as_torchs(name, add_again):
    with warnings.catch_warnings():  # (torch's: a schedule stepped before the optimizer)
        warnings.simplefilter("ignore")
        expected = _resumed_rates(torch, name, add_again)
    np.testing.assert_allclose(_resumed_rates(rg, name, add_again), expected, rtol=1e-12)


def test_lr_lambdas_saved_with_more_groups_load_where_torchs_do():
    opt = rg.optim.SGD([rg.ones(1).require_grad()], lr=0.1)
    schedule = rg.optim.lr_scheduler.LambdaLR(opt, lambda epoch: 0.5**epoch)
    saved = schedule.state_dict()
    schedule.load_state_dict({**saved, "lr_lambdas": [None, None]})  # torch's: None skipped
    with pytest.raises(rg.ShapeError, match="lr_lambdas"):  # torch's: an IndexError
        schedule.load_state_dict({**saved, "lr_lambdas": [None, {"x": 1}]})


# -- the optimizers' state after a step: torch's keys (SGD keeps no step count) ------------------
STATE_CASES = {
    "SGD": ("SGD", {}),
    "SGD momentum": ("SGD", {"momentum": 0.9}),
    "Adam": ("Adam", {}),
    "AdamW": ("AdamW", {}),
    "RMSprop": ("RMSprop", {"momentum": 0.9, "centered": True}),
    "Adagrad": ("Adagrad", {}),
    "Adadelta": ("Adadelta", {}),
    "Adamax": ("Adamax", {}),
    "NAdam": ("NAdam", {}),
    "RAdam": ("RAdam", {}),
    "ASGD": ("ASGD", {}),
    "Rprop": ("Rprop", {}),
    "LBFGS": ("LBFGS", {}),
}


@pytest.mark.parametrize("case", list(STATE_CASES))
def test_the_state_after_one_step_has_torchs_keys(case):
    name, kwargs = STATE_CASES[case]
    p = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    theirs = getattr(torch.optim, name)([p], lr=0.1, **kwargs)

    def closure():
        theirs.zero_grad()
        loss = (p * p).sum()
        loss.backward()
        return loss

    theirs.step(closure)
    expected = {k: sorted(v) for k, v in theirs.state_dict()["state"].items()}

    q = rg.tensor([1.0, 2.0]).require_grad()
    ours = getattr(rg.optim, name)([q], lr=0.1, **kwargs)

    def our_closure():
        loss = (q * q).sum()
        return loss, loss.backward()

    ours.step(our_closure)
    assert {k: sorted(v) for k, v in ours.state_dict()["state"].items()} == expected
    assert len(ours.state) == len(theirs.state)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_sgd_resumed_from_its_state_dict_steps_as_torchs(momentum):
    # two steps, a state-dict round trip into a new optimizer, two more: torch's values (a
    # guard: the state without its step count still resumes)
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0], dtype=torch.float64))
    opt = torch.optim.SGD([p], lr=0.1, momentum=momentum, weight_decay=0.01)
    q = rg.tensor([1.0, -2.0], dtype=rg.float64).require_grad()
    ours = rg.optim.SGD([q], lr=0.1, momentum=momentum, weight_decay=0.01)
    for k in range(4):
        if k == 2:
            saved = opt.state_dict()
            opt = torch.optim.SGD([p], lr=0.1, momentum=momentum, weight_decay=0.01)
            opt.load_state_dict(saved)
            our_saved = ours.state_dict()
            ours = rg.optim.SGD([q], lr=0.1)
            ours.load_state_dict(our_saved)
        opt.zero_grad()
        (p.sin() * p).sum().backward()
        opt.step()
        ours.step((q.sin() * q).sum().backward())
    np.testing.assert_allclose(q.numpy(), p.detach().numpy(), rtol=1e-14)


# -- integer convolutions: computed in their dtype, as torch's CPU does ---------------------------
CONVOLUTIONS = [
    ("conv1d", (2, 4, 7), (4, 2, 3), {"stride": 2, "padding": 1, "groups": 2}),
    ("conv2d", (1, 2, 5, 6), (4, 2, 2, 3), {"padding": 1}),
    ("conv3d", (1, 2, 3, 4, 3), (2, 2, 2, 2, 2), {}),
]


@pytest.mark.parametrize("dtype", ["int64", "int32", "int16", "int8", "uint8"])
@pytest.mark.parametrize(("name", "shape", "kernel", "options"), CONVOLUTIONS)
def test_integer_convolutions_compute_as_torchs_cpu(name, shape, kernel, options, dtype):
    rng = np.random.default_rng(8)
    low = 0 if dtype == "uint8" else -100
    x = rng.integers(low, 100, shape).astype(dtype)  # int8 sums wrap, as torch's do
    w = rng.integers(max(low, -5), 6, kernel).astype(dtype)
    b = rng.integers(0, 50, kernel[0]).astype(dtype)
    conv = getattr(torch.nn.functional, name)
    expected = conv(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), **options)
    ours = getattr(rg.nn.functional, name)(rg.tensor(x), rg.tensor(w), rg.tensor(b), **options)
    assert ours.dtype == dtype
    np.testing.assert_array_equal(ours.numpy(), expected.numpy())


def test_a_bool_convolution_and_a_float_bias_of_an_integer_one_are_refused():
    with pytest.raises(rg.DTypeError, match="conv1d: expected float or integer tensors"):
        rg.nn.functional.conv1d(rg.ones((1, 1, 4), dtype="bool"), rg.ones((1, 1, 2), dtype="bool"))
    x, w = rg.ones((1, 1, 4), dtype="int64"), rg.ones((1, 1, 2), dtype="int64")
    with pytest.raises(rg.DTypeError, match="conv1d: bias must be int64"):  # torch: a RuntimeError
        rg.nn.functional.conv1d(x, w, rg.ones(1))


# -- an in-place op through view(dtype) of a value computed in the graph --------------------------
def _through_dtype_view(lib, slice_only):
    """``w.view(float32)`` (or a slice of it) times ``y`` in place, ``y`` requiring grad:
    whether the view and its base require grad, their values, and ``y``'s gradient."""
    if lib is torch:
        w, y = torch.arange(1.0, 5.0), torch.full((2 if slice_only else 4,), 3.0)
        y.requires_grad_(True)
        view = w.view(torch.float32)
    else:
        w, y = rg.arange(1.0, 5.0), rg.full((2 if slice_only else 4,), 3.0).require_grad()
        view = w.view(rg.float32)
    (view[1:3] if slice_only else view).mul_(y)
    loss = (view * view).sum()
    if lib is torch:
        loss.backward()
        grad = y.grad
    else:
        grad = y.grad(loss.backward())
    return view.requires_grad, w.requires_grad, w.tolist(), view.tolist(), grad.tolist()


@pytest.mark.parametrize("slice_only", [False, True])
def test_an_in_place_op_through_a_dtype_view_is_recorded_on_the_view(slice_only):
    assert _through_dtype_view(rg, slice_only) == _through_dtype_view(torch, slice_only)
