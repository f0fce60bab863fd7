"""Regressions from the twelfth fuzzing round (third derivatives, optimizer and scheduler
trajectories, module argument grids, tensor creation; generators in
``tests/fuzz12_cases.py``). Expected values all come from torch."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import retrograd as rg
from fuzz12_cases import Trial, _derivatives, check

torch = pytest.importorskip("torch")


# ---- erfinv: derivatives of every order ---------------------------------------------------


def test_erfinv_third_derivative_matches_torch():
    # the recorded Newton step was exact to second order only: its third derivative was 0
    def f(lib, x, y):
        return ((x.tanh() * 0.9).erfinv() * y).sum()

    rng = np.random.default_rng(0)
    xa, ya = rng.uniform(-1.3, 1.3, (3, 4)), rng.uniform(-1.3, 1.3, (3, 4))
    check(Trial("erfinv", lambda lib: _derivatives(lib, f, xa, ya, 3, 1), rtol=1e-7))


def test_erfinv_gradient_at_and_near_the_edges_matches_torch():
    values = np.array([-1.0, -0.999999, -0.5, -1e-12, 0.0, 1e-12, 0.3, 0.9999999999, 1.0, 1.5])

    def fn(lib):
        x = lib.tensor(values, requires_grad=True)
        out = x.erfinv()
        (g,) = lib.autograd.grad(out.sum(), x, create_graph=True)
        (gg,) = lib.autograd.grad(g[1:-3].sum(), x)
        return [out, g, gg]

    check(Trial("erfinv edges", fn, rtol=1e-7))


# ---- maximize in every optimizer ---------------------------------------------------------

MAXIMIZING = {
    "Adadelta": dict(lr=0.5, weight_decay=0.1),
    "Adagrad": dict(lr=0.1, lr_decay=0.1, weight_decay=0.1),
    "Adamax": dict(lr=0.05, weight_decay=0.1),
    "NAdam": dict(lr=0.05, weight_decay=0.1),
    "RAdam": dict(lr=0.05, weight_decay=0.1, decoupled_weight_decay=True),
    "Rprop": dict(lr=0.05),
    "ASGD": dict(lr=0.05, weight_decay=0.1, t0=2.0),
    "Adafactor": dict(lr=0.05, weight_decay=0.1),
}


def _ascend(lib, name, options, in_group):
    """Three steps; ``maximize`` asked of the constructor, or of the second group only."""
    p = lib.nn.Parameter(lib.tensor(np.array([0.5, -1.5, 2.0])))
    q = lib.nn.Parameter(lib.tensor(np.array([[1.0, -0.5], [0.25, 2.0]])))
    groups = [dict(params=[p]), dict(params=[q], maximize=True) if in_group else dict(params=[q])]
    opt = getattr(lib.optim, name)(groups, **options, **({} if in_group else {"maximize": True}))
    out = []
    for _ in range(3):
        loss = (p.sin() * p).sum() + (q * q.cos()).sum()
        if lib is torch:
            opt.zero_grad()
            loss.backward()
            opt.step()
        else:
            opt.step(loss.backward())
        out += [p.detach() * 1, q.detach() * 1]
    return out + [str(opt.param_groups[k]["maximize"]) for k in range(2)]


@pytest.mark.parametrize("in_group", [False, True], ids=["constructor", "group"])
@pytest.mark.parametrize("name", sorted(MAXIMIZING))
def test_maximize_matches_torch(name, in_group):
    # refused outright by these optimizers (their constructors), and silently ignored when a
    # parameter group asked for it
    check(Trial(name, lambda lib: _ascend(lib, name, MAXIMIZING[name], in_group)))


# ---- a scheduler made over an optimizer restored mid-run ---------------------------------

RESUMED = {
    "StepLR": lambda sched, o: sched.StepLR(o, step_size=2, gamma=0.5),
    "MultiStepLR": lambda sched, o: sched.MultiStepLR(o, milestones=[1, 3], gamma=0.1),
    "ExponentialLR": lambda sched, o: sched.ExponentialLR(o, gamma=0.9),
    "CosineAnnealingLR": lambda sched, o: sched.CosineAnnealingLR(o, T_max=5, eta_min=0.001),
    "PolynomialLR": lambda sched, o: sched.PolynomialLR(o, total_iters=6, power=2.0),
    "ChainedScheduler": lambda sched, o: sched.ChainedScheduler(
        [sched.ExponentialLR(o, gamma=0.9), sched.MultiStepLR(o, [2, 5], 0.3)]
    ),
}


def _resume(lib, make):
    """Four epochs, the checkpoint taken, then a fresh optimizer and scheduler loaded from
    it (torch's resume): the rates of the next epochs."""
    S = lib.optim.lr_scheduler  # noqa: N806
    p, q = lib.nn.Parameter(lib.tensor([1.0, 2.0])), lib.nn.Parameter(lib.tensor([3.0]))
    opt = lib.optim.SGD([dict(params=[p]), dict(params=[q], lr=0.05)], lr=0.1, momentum=0.9)
    schedule = make(S, opt)
    for _ in range(4):
        schedule.step()
    saved = copy.deepcopy((opt.state_dict(), schedule.state_dict()))
    opt = lib.optim.SGD([dict(params=[p]), dict(params=[q], lr=0.05)], lr=0.1, momentum=0.9)
    opt.load_state_dict(saved[0])
    schedule = make(S, opt)  # made over the restored rates: it must keep them
    out = [g["lr"] for g in opt.param_groups]
    schedule.load_state_dict(saved[1])
    for _ in range(4):
        schedule.step()
        out += [g["lr"] for g in opt.param_groups]
    return out + list(schedule.get_last_lr())


@pytest.mark.parametrize("name", sorted(RESUMED))
def test_scheduler_made_over_a_restored_optimizer_keeps_its_rates(name):
    # the constructor's first step set each rate from initial_lr (the closed form at epoch 0),
    # so a resumed run trained its first epoch at the initial rate
    check(Trial(name, lambda lib: _resume(lib, RESUMED[name]), rtol=1e-12))


def test_chained_scheduler_takes_the_rates_its_members_set():
    def fn(lib):
        S = lib.optim.lr_scheduler  # noqa: N806
        opt = lib.optim.SGD([lib.nn.Parameter(lib.tensor([1.0]))], lr=0.1)
        members = [S.ConstantLR(opt, factor=0.5, total_iters=2), S.ExponentialLR(opt, 0.9)]
        opt.param_groups[0]["lr"] = 0.02  # changed between the members and the chain
        chain = S.ChainedScheduler(members)
        out = [opt.param_groups[0]["lr"]]
        for _ in range(3):
            chain.step()
            out.append(opt.param_groups[0]["lr"])
        return out

    check(Trial("chained", fn, rtol=1e-12))


# ---- ConvTranspose's output_size ---------------------------------------------------------


@pytest.mark.parametrize(
    "dim, stride, padding, dilation, kernel, size",
    [
        (1, 3, 0, 1, 2, [12]),
        (1, 2, 1, 2, 3, [1, 3, 10]),  # the full size, batch and channels included
        (2, 2, 1, 1, 3, [6, 7]),
        (2, (2, 3), 0, 1, 2, [1, 3, 7, 12]),
        (3, 2, 0, 1, 2, [7, 8, 5]),
        (2, 2, 1, 1, 3, [8, 7]),  # too large: torch's ValueError
        (2, 2, 1, 1, 3, [6]),  # the wrong number of sizes
    ],
)
def test_conv_transpose_output_size_matches_torch(dim, stride, padding, dilation, kernel, size):
    rng = np.random.default_rng(dim)
    xa = rng.standard_normal((1, 2) + (3, 4, 2)[:dim] if dim > 1 else (1, 2, 4))

    def fn(lib):
        lib.manual_seed(0) if lib is torch else None
        m = getattr(lib.nn, f"ConvTranspose{dim}d")(
            2, 3, kernel, stride=stride, padding=padding, dilation=dilation, dtype=lib.float64
        )
        if lib is torch:
            fn.state = {k: v.detach().numpy() for k, v in m.state_dict().items()}
        else:
            m.load_state_dict(fn.state)
        x = lib.tensor(xa, requires_grad=True)
        out = m(x, output_size=size)
        grads = lib.autograd.grad(out.square().sum(), [x, m.weight])
        return [out, *grads]

    check(Trial(f"ConvTranspose{dim}d output_size={size}", fn, rtol=1e-9))


# ---- creation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        (0, 5, 1.5),
        (-0.5, 3, 1),
        (0, -5, -1.5),
        (1.9, 5.5, 2),
        (0, 2.1),
        (2.9,),
        (0.2,),
        (0, 3, 0.5),
        (1.0, 0.0, -0.25),
    ],
)
def test_integer_arange_of_float_arguments_matches_torch(args):
    # torch truncates start, end and step to integers (a step of 0.5 is 0: an error); the
    # float range used to be floored instead
    check(Trial(f"arange{args}", lambda lib: [lib.arange(*args, dtype=lib.int64)]))


@pytest.mark.parametrize("dtype", ["int64", "float32", "float64"])
@pytest.mark.parametrize("base", [2.0, 10.0, 3])
@pytest.mark.parametrize("args", [(0, 5, 6), (-2.5, 3, 4), (-1, 2, 7)])
def test_logspace_matches_torch(args, base, dtype):
    # exp(3 log 2) is 7.999...: the int64 logspace read 7 where torch has 8; and torch
    # truncates an int64 logspace's start and end first
    check(
        Trial("logspace", lambda lib: [lib.logspace(*args, base=base, dtype=getattr(lib, dtype))])
    )


def test_optimizer_refuses_a_non_leaf_tensor_as_torch_does():
    # it was accepted and silently never updated (a non-leaf has no gradient of its own)
    def fn(lib):
        p = lib.nn.Parameter(lib.tensor([1.0, 2.0]))
        lib.optim.SGD([p * 2.0], lr=0.1)
        return []

    check(Trial("non-leaf", fn))
    with pytest.raises(rg.InvalidArgumentError, match=r"non-leaf.*\[2\]"):
        fn(rg)
    # leaves that require no gradient are accepted (and left alone), as torch's
    rg.optim.Adam([rg.tensor([1.0])], lr=0.1)


# ---- clip_grad_norm_ of order 0 and negative orders --------------------------------------


@pytest.mark.parametrize("special", [None, float("inf"), float("nan")])
@pytest.mark.parametrize("norm_type", [0, -1.0, -2.5, float("-inf"), 0.5, float("inf")])
def test_clip_grad_norm_of_any_order_matches_torch(norm_type, special):
    # orders 0 and below were refused; torch's total is then the norm of the per-gradient
    # norms (3 non-zero gradients: order 0 gives 3, not the count of non-zero entries)
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(s) for s in [(3,), (2, 2), (1,)]]
    weights = [rng.standard_normal(a.shape) for a in arrays]
    weights[1][0, 0] = 0.0 if special is None else special

    def fn(lib):
        ps = [lib.nn.Parameter(lib.tensor(a)) for a in arrays]
        loss = sum((p * lib.tensor(w)).sum() for p, w in zip(ps, weights))
        if lib is torch:
            loss.backward()
            total = torch.nn.utils.clip_grad_norm_(ps, 0.5, norm_type=norm_type)
            return [total] + [p.grad for p in ps]
        grads = loss.backward()
        total = rg.nn.utils.clip_grad_norm_(grads, ps, 0.5, norm_type=norm_type, as_tensor=True)
        return [total] + [p.grad(grads) for p in ps]

    check(Trial(f"clip order {norm_type}", fn))
