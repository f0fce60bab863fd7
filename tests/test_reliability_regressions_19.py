"""Round 19 of the reliability work: one regression per defect the sweep
(``test_reliability_sweep_19.py``) and its probes found; each fails on the code before the fix.

Expected values come from torch (the same program run there), or from math where torch's own
behaviour is the defect (said at the test)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as TF  # noqa: N812

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812  (PyTorch's idiom)
from retrograd import nn, optim

_RNG = np.random.default_rng(19)
_X = _RNG.standard_normal((8, 3)).astype(np.float32)
_Y = _RNG.standard_normal((8, 1)).astype(np.float32)
_W = _RNG.standard_normal((1, 3)).astype(np.float32)


# == L-BFGS: a closure raising mid-step ==========================================================
def _torch_lbfgs_run(steps: int, **options) -> list[np.ndarray]:
    """The weights after each of ``steps`` clean torch steps (the first entry: before any)."""
    w = torch.nn.Parameter(torch.tensor(_W))
    opt = torch.optim.LBFGS([w], **options)

    def closure():
        opt.zero_grad()
        loss = ((torch.tensor(_X) @ w.T - torch.tensor(_Y)) ** 2).mean()
        loss.backward()
        return loss

    out = [w.detach().numpy().copy()]
    for _ in range(steps):
        opt.step(closure)
        out.append(w.detach().numpy().copy())
    return out


@pytest.mark.parametrize(
    ("line_search", "failing_call"),
    [(None, 2), (None, 3), (None, 6), ("strong_wolfe", 2), ("strong_wolfe", 3)],
)
def test_lbfgs_step_whose_closure_raises_mid_step_leaves_the_optimizer_as_before(
    line_search, failing_call
):
    # The closure raising on its 2nd or 3rd call (inside the first step's iterations) left
    # n_iter counted but no direction saved: every later step failed with "sub: cannot combine
    # a tensor with NoneType" (torch's with "sub(): argument 'other' must be Tensor"). Inside
    # the line search the parameters were also left at a trial point. A step that raises now
    # changes nothing: the run goes on as torch's run without that step.
    options = {"lr": 0.5, "max_iter": 4, "line_search_fn": line_search}
    w = nn.Parameter(rg.tensor(_W))
    opt = optim.LBFGS([w], **options)
    calls = [0]

    def closure():
        calls[0] += 1
        if calls[0] == failing_call:
            raise KeyboardInterrupt
        loss = ((rg.tensor(_X) @ w.T - rg.tensor(_Y)) ** 2).mean()
        return loss, loss.backward()

    results = []
    for _ in range(4):
        try:
            opt.step(closure)
            results.append(w.numpy().copy())
        except KeyboardInterrupt:
            results.append("raised")
    assert sum(isinstance(r, str) for r in results) == 1
    clean = iter(_torch_lbfgs_run(3, **options)[1:])
    before = _W
    for got in results:
        if isinstance(got, str):
            continue
        expected = next(clean)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)
        before = got
    np.testing.assert_allclose(results[-1], before)


def test_lbfgs_first_step_raising_leaves_no_state_behind():
    w = nn.Parameter(rg.tensor(_W))
    opt = optim.LBFGS([w], lr=0.5, max_iter=4)
    calls = [0]

    def closure():
        calls[0] += 1
        if calls[0] == 2:
            raise RuntimeError("a bad batch")
        loss = ((rg.tensor(_X) @ w.T - rg.tensor(_Y)) ** 2).mean()
        return loss, loss.backward()

    with pytest.raises(RuntimeError, match="a bad batch"):
        opt.step(closure)
    np.testing.assert_array_equal(w.numpy(), _W)
    assert opt.state_dict()["state"] == {}


# == hyper-parameters set wrong between steps ===================================================
_OPTIMIZERS = ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam",
               "RAdam", "ASGD", "Rprop", "Adafactor", "SparseAdam"]  # fmt: skip


@pytest.mark.parametrize("name", _OPTIMIZERS)
@pytest.mark.parametrize("value", ["0.1", None])
def test_a_groups_lr_set_to_a_non_number_is_named_before_any_group_steps(name, value):
    # Adagrad, Adamax, NAdam, ASGD, Rprop, SparseAdam and Adafactor failed with a bare
    # TypeError or ValueError ("unsupported operand type(s) for /: 'str' and 'float'"), and
    # every optimizer had already stepped the groups before the bad one.
    first, second = nn.Parameter(rg.ones(2)), nn.Parameter(rg.ones(3))
    opt = getattr(optim, name)([{"params": [first]}, {"params": [second]}], lr=0.1)
    opt.param_groups[1]["lr"] = value
    grads = (first.sum() + second.sum()).backward()
    with pytest.raises(
        rg.DTypeError, match=rf"{name}\.step: hyper-parameter 'lr' of param_groups\[1\]"
    ):
        opt.step(grads)
    np.testing.assert_array_equal(first.numpy(), np.ones(2, np.float32))
    # no state stepped (torch's Adagrad makes every parameter's at step 0 when it is made)
    untouched = {"step", "sum"} if name == "Adagrad" else set()
    assert all(
        set(state) <= untouched and int(state.get("step", 0)) == 0 for state in opt.state.values()
    )
    opt.param_groups[1]["lr"] = 0.1  # fixed: the next step is the first one
    opt.step(grads)
    assert not np.array_equal(first.numpy(), np.ones(2, np.float32))


@pytest.mark.parametrize(
    ("name", "key", "value"),
    [("Adam", "betas", (0.9,)), ("NAdam", "betas", [0.9, "x"]), ("Rprop", "etas", 1.2),
     ("Adafactor", "eps", None), ("RMSprop", "momentum", None), ("ASGD", "lambd", "q")],
)  # fmt: skip
def test_other_hyper_parameters_set_wrong_are_named(name, key, value):
    # each was a bare ValueError ("not enough values to unpack") or TypeError before
    parameter = nn.Parameter(rg.ones(2))
    opt = getattr(optim, name)([parameter], lr=0.1)
    opt.param_groups[0][key] = value
    with pytest.raises(
        rg.DTypeError, match=rf"{name}\.step: hyper-parameter '{key}' of param_groups\[0\]"
    ):
        opt.step(parameter.sum().backward())


def test_lbfgs_lr_set_to_a_str_is_named():
    w = nn.Parameter(rg.tensor(_W))
    opt = optim.LBFGS([w])
    opt.param_groups[0]["lr"] = "1"

    def closure():
        loss = (w**2).sum()
        return loss, loss.backward()

    with pytest.raises(
        rg.DTypeError, match=r"LBFGS\.step: hyper-parameter 'lr' of param_groups\[0\]"
    ):
        opt.step(closure)


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "NAdam"])
def test_a_tensor_lr_steps_as_torchs_on_either_backend(name):
    # torch's idiom group["lr"] = torch.tensor(...): on the torch backend SGD's, Adam's,
    # AdamW's and RMSprop's fused kernels took the 0-d rg.Tensor for a torch tensor and failed
    # ("mul(): argument 'other' must be Tensor, not Tensor")
    parameter = nn.Parameter(rg.tensor(_W))
    opt = getattr(optim, name)([parameter], lr=0.1)
    opt.param_groups[0]["lr"] = rg.tensor(0.05)
    theirs = torch.nn.Parameter(torch.tensor(_W))
    torch_opt = getattr(torch.optim, name)([theirs], lr=0.1)
    torch_opt.param_groups[0]["lr"] = torch.tensor(0.05)
    for _ in range(2):
        opt.step((parameter * rg.tensor(_X[:1])).sum().backward())
        torch_opt.zero_grad()
        (theirs * torch.tensor(_X[:1])).sum().backward()
        torch_opt.step()
    np.testing.assert_allclose(parameter.numpy(), theirs.detach().numpy(), rtol=1e-5, atol=1e-7)


# == a schedule's state of another optimizer ====================================================
def _groups(count: int) -> optim.SGD:
    return optim.SGD([{"params": [nn.Parameter(rg.ones(2))]} for _ in range(count)], lr=0.1)


def test_a_schedules_per_group_list_that_is_not_a_list_is_refused():
    # (lists longer or shorter than the groups load, as torch's: a schedule saved after groups
    # were added to its optimizer, resumed before or after adding them again;
    # tests/test_leftovers_8.py, tests/test_fuzz_training_30.py)
    opt = _groups(1)
    schedule = optim.lr_scheduler.StepLR(opt, 1, 0.5)
    before = dict(schedule.__dict__)
    with pytest.raises(rg.ShapeError, match=r"StepLR\.load_state_dict: base_lrs must hold one"):
        schedule.load_state_dict({**schedule.state_dict(), "base_lrs": 0.1})
    assert schedule.__dict__ == before


@pytest.mark.parametrize(
    ("make", "key"),
    [(lambda o: optim.lr_scheduler.ReduceLROnPlateau(o), "min_lrs"),
     (lambda o: optim.lr_scheduler.CyclicLR(o, 0.01, 0.1), "max_lrs"),
     (lambda o: optim.lr_scheduler.OneCycleLR(o, 1.0, total_steps=10), "base_lrs")],
)  # fmt: skip
def test_every_schedules_per_group_lists_are_checked(make, key):
    saved = make(_groups(3)).state_dict()
    saved[key] = [0.1, "x", 0.1]
    with pytest.raises(rg.DTypeError, match=f"{key} must hold numbers"):
        make(_groups(2)).load_state_dict(saved)


def test_a_schedules_counter_of_another_type_is_refused_not_a_typeerror_at_the_next_step():
    schedule = optim.lr_scheduler.StepLR(_groups(1), 2)
    with pytest.raises(
        rg.DTypeError, match=r"StepLR\.load_state_dict: last_epoch must be a number"
    ):
        schedule.load_state_dict({"last_epoch": "3"})
    schedule.step()  # unchanged, usable
    assert schedule.last_epoch == 1


def test_a_composite_schedules_state_is_checked_whole_before_any_member_loads():
    # a SequentialLR state with a damaged second member set the composite's own entries and
    # the first member's before the second refused; a state with fewer members loaded those
    # it had (zip) and kept the rest silently
    def make(opt):
        first = optim.lr_scheduler.LinearLR(opt, 0.1, total_iters=3)
        second = optim.lr_scheduler.ExponentialLR(opt, 0.9)
        return optim.lr_scheduler.SequentialLR(opt, [first, second], milestones=[3])

    source = make(_groups(1))
    for _ in range(4):
        source.step()
    saved = source.state_dict()
    target = make(_groups(1))
    members = [dict(s.__dict__) for s in target._schedulers]
    damaged = {**saved, "_schedulers": [saved["_schedulers"][0], {"last_epoch": None}]}
    with pytest.raises(rg.DTypeError, match=r"ExponentialLR\.load_state_dict: last_epoch"):
        target.load_state_dict(damaged)
    assert [dict(s.__dict__) for s in target._schedulers] == members
    assert target.last_epoch == 0
    short = {**saved, "_schedulers": saved["_schedulers"][:1]}
    with pytest.raises(rg.ShapeError, match="holds 1 schedulers' states, this SequentialLR has 2"):
        target.load_state_dict(short)
    # the good state still loads and, with the optimizer's rates restored as a resumed run
    # restores them (the schedules' steps scale the current rates, as torch's), goes on as
    # the source
    target.optimizer.load_state_dict(source.optimizer.state_dict())
    target.load_state_dict(saved)
    assert [target.step() for _ in range(3)] == [source.step() for _ in range(3)]


class _Factor:
    """A callable object as lr_lambda: torch saves its attributes."""

    def __init__(self, rate: float):
        self.rate = rate

    def __call__(self, epoch: int) -> float:
        return self.rate**epoch


@pytest.mark.parametrize("kind", ["LambdaLR", "MultiplicativeLR"])
def test_torchs_lambda_schedule_state_loads_and_keeps_the_functions(kind):
    # torch's state holds lr_lambdas (None for a function, a callable object's attributes):
    # loaded as an attribute it replaced the schedule's functions with None, and the next
    # step failed as "'NoneType' object is not callable"
    def make(lib, module, factor):
        opt = lib.SGD(
            [{"params": [module.Parameter(module_ones(module))]} for _ in range(2)], lr=1.0
        )
        return opt, getattr(lib.lr_scheduler, kind)(opt, [lambda e: 0.9, factor])

    def module_ones(module):
        return rg.ones(1) if module is nn else torch.ones(1)

    torch_opt, theirs = make(torch.optim, torch.nn, _Factor(0.8))
    for _ in range(3):
        torch_opt.step()
        theirs.step()
    saved = theirs.state_dict()
    assert saved["lr_lambdas"] == [None, {"rate": 0.8}]
    opt, ours = make(optim, nn, _Factor(0.5))
    opt.load_state_dict({"state": {}, "param_groups": torch_opt.state_dict()["param_groups"]})
    ours.load_state_dict(saved)
    assert ours.lr_lambdas[1].rate == 0.8  # the object's attributes, as torch sets them
    for _ in range(3):
        ours.step()
        torch_opt.step()
        theirs.step()
        np.testing.assert_allclose(
            [g["lr"] for g in opt.param_groups], [g["lr"] for g in torch_opt.param_groups]
        )
    assert ours.state_dict()["lr_lambdas"] == [None, {"rate": 0.8}]


_ADDED_GROUP = {
    "StepLR": lambda s, o: s.StepLR(o, 1, 0.5),
    "ExponentialLR": lambda s, o: s.ExponentialLR(o, 0.5),
    "MultiStepLR": lambda s, o: s.MultiStepLR(o, [1, 3]),
    "LinearLR": lambda s, o: s.LinearLR(o, 0.5, total_iters=3),
    "PolynomialLR": lambda s, o: s.PolynomialLR(o, 4, 2.0),
    "CosineAnnealingLR": lambda s, o: s.CosineAnnealingLR(o, 8),
    "ReduceLROnPlateau": lambda s, o: s.ReduceLROnPlateau(o, patience=0),
}


def _rates_with_a_group_added(lib, name: str) -> list:
    module = nn if lib is optim else torch.nn
    ones = rg.ones if lib is optim else torch.ones
    opt = lib.SGD([module.Parameter(ones(1))], lr=0.1, momentum=0.9)
    schedule = _ADDED_GROUP[name](lib.lr_scheduler, opt)
    schedule.step(1.0) if name == "ReduceLROnPlateau" else schedule.step()
    opt.add_param_group({"params": [module.Parameter(ones(1))], "lr": 0.2})  # unfreezing
    rates = []
    for _ in range(4):
        schedule.step(1.0) if name == "ReduceLROnPlateau" else schedule.step()
        rates.append([g["lr"] for g in opt.param_groups])
    return rates


@pytest.mark.parametrize("name", sorted(_ADDED_GROUP))
def test_a_group_added_after_the_schedule_is_scheduled_as_torchs(name):
    # the closed form zipped the groups with base_lrs: the new group kept its rate for ever
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's "lr_scheduler.step() before optimizer.step()"
        expected = _rates_with_a_group_added(torch.optim, name)
    np.testing.assert_allclose(_rates_with_a_group_added(optim, name), expected, rtol=1e-12)


_NOTHING_FOR_AN_ADDED_GROUP = {
    "LambdaLR": lambda s, o: s.LambdaLR(o, lambda e: 0.5),
    "MultiplicativeLR": lambda s, o: s.MultiplicativeLR(o, lambda e: 0.5),
    "CyclicLR": lambda s, o: s.CyclicLR(o, 0.01, 0.1, step_size_up=2),
    "CosineAnnealingWarmRestarts": lambda s, o: s.CosineAnnealingWarmRestarts(o, 3),
}


@pytest.mark.parametrize("name", sorted(_NOTHING_FOR_AN_ADDED_GROUP))
def test_a_schedule_with_nothing_for_an_added_group_refuses_it_as_torch(name):
    # LambdaLR and MultiplicativeLR (one function per group), CosineAnnealingWarmRestarts
    # kept the new group's rate for ever; CyclicLR failed with a bare IndexError. torch's
    # refuse (zip(strict=True)'s ValueError; ours is one too)
    def make(lib, module, ones):
        opt = lib.SGD([module.Parameter(ones(1))], lr=0.1, momentum=0.9)
        schedule = _NOTHING_FOR_AN_ADDED_GROUP[name](lib.lr_scheduler, opt)
        schedule.step()
        opt.add_param_group({"params": [module.Parameter(ones(1))], "lr": 0.2})
        return opt, schedule

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, theirs = make(torch.optim, torch.nn, torch.ones)
        with pytest.raises(ValueError):
            theirs.step()
    opt, ours = make(optim, nn, rg.ones)
    before = [g["lr"] for g in opt.param_groups]
    with pytest.raises(rg.InvalidArgumentError, match="has 2 param_groups, the schedule was"):
        ours.step()
    assert [g["lr"] for g in opt.param_groups] == before


# == a module's names of another kind ===========================================================
def test_add_module_over_a_parameter_is_refused_as_torch():
    # it dropped the Linear's weight: the layer failed at its next call ("weight must be a
    # tensor, got ReLU") and its state dict had lost the weight
    layer = nn.Linear(2, 2)
    with pytest.raises(
        rg.errors.KeyMismatchError, match="'weight' is already a parameter of Linear"
    ):
        layer.add_module("weight", nn.ReLU())
    with pytest.raises(KeyError):  # torch's KeyError "attribute 'weight' already exists"
        torch.nn.Linear(2, 2).add_module("weight", torch.nn.ReLU())
    assert list(layer.state_dict()) == ["weight", "bias"]
    layer(rg.ones((3, 2)))


def test_register_parameter_over_a_buffer_or_a_sub_module_is_refused_as_torch():
    # it made BatchNorm's running mean a trained parameter (listed by parameters(), stepped by
    # the optimizer) and removed a sub-module
    norm = nn.BatchNorm1d(2)
    with pytest.raises(rg.errors.KeyMismatchError, match="'running_mean' is already a buffer"):
        norm.register_parameter("running_mean", nn.Parameter(rg.zeros(2)))
    assert [name for name, _ in norm.named_parameters()] == ["weight", "bias"]
    with pytest.raises(KeyError):
        torch.nn.BatchNorm1d(2).register_parameter(
            "running_mean", torch.nn.Parameter(torch.zeros(2))
        )
    seq = nn.Sequential(nn.Linear(2, 2))
    with pytest.raises(
        rg.errors.KeyMismatchError, match="'0' is already a sub-module of Sequential"
    ):
        seq.register_parameter("0", nn.Parameter(rg.zeros(2)))
    with pytest.raises(rg.errors.KeyMismatchError, match="'running_var' is already a buffer"):
        norm.register_module("running_var", nn.ReLU())
    # the same kind is replaced, as torch replaces it
    norm.register_parameter("weight", nn.Parameter(rg.zeros(2)))
    norm.register_buffer("running_mean", rg.ones(2))
    assert norm.weight.numpy().tolist() == [0.0, 0.0]


# == losses at infinities and NaN ===============================================================
def test_gaussian_nll_loss_of_an_infinite_variance_is_torchs_inf():
    # max(var, eps) entered as var + (clamp(var) - var): inf - inf, NaN, at var = inf; its
    # gradient was NaN too where torch's is 0
    x = np.array([2.0, 0.0, 1.0], np.float32)
    var = np.array([np.inf, np.inf, 2.0], np.float32)
    ours_var = rg.tensor(var).require_grad()
    ours = F.gaussian_nll_loss(rg.tensor(x), rg.tensor(x), ours_var, reduction="none")
    theirs_var = torch.tensor(var, requires_grad=True)
    theirs = TF.gaussian_nll_loss(torch.tensor(x), torch.tensor(x), theirs_var, reduction="none")
    np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=1e-6)
    theirs.sum().backward()
    grad = ours_var.grad(ours.sum().backward()).numpy()
    np.testing.assert_allclose(grad, theirs_var.grad.numpy(), rtol=1e-6)


def test_multilabel_margin_loss_skips_nan_terms_as_torchs_kernel_and_multi_margin_loss():
    # relu kept a NaN logit's NaN term (and an infinite one's NaN), where torch's kernel (and
    # our multi_margin_loss) counts a term only where it is > 0
    x = np.array([[1.0, np.nan, -np.inf, 2.0], [np.inf, 0.0, -1.0, np.nan]], np.float32)
    target = [[0, 3, -1, 0], [1, -1, 0, 0]]
    ours_x = rg.tensor(x).require_grad()
    ours = F.multilabel_margin_loss(ours_x, rg.tensor(target), reduction="none")
    theirs_x = torch.tensor(x, requires_grad=True)
    theirs = TF.multilabel_margin_loss(theirs_x, torch.tensor(target), reduction="none")
    np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy())  # [0, inf]
    theirs[0].backward()
    np.testing.assert_allclose(
        ours_x.grad(ours[0].backward()).numpy(), theirs_x.grad.numpy(), equal_nan=True
    )


# == rg.save of a structure that holds itself ===================================================
def test_a_container_holding_itself_saves_and_loads_as_torchs(tmp_path):
    # the walk into JSON recursed until Python's limit: a bare RecursionError (torch's pickle
    # keeps such references)
    weights = rg.tensor([1.0, 2.0])
    history: list = [weights, {"step": 3}]
    history.append(history)
    state = {"w": weights, "history": history}
    state["self"] = state
    rg.save(state, tmp_path / "cyclic.pt")
    torch_state = {"w": torch.tensor([1.0, 2.0])}
    torch_state["self"] = torch_state
    torch.save(torch_state, tmp_path / "torch.pt")  # torch saves it too
    loaded = rg.load(tmp_path / "cyclic.pt")  # weights_only=True: no class needed
    assert loaded["self"] is loaded and loaded["history"][2] is loaded["history"]
    assert loaded["history"][0] is loaded["w"] and loaded["w"].tolist() == [1.0, 2.0]
    assert loaded["history"][1] == {"step": 3}


def test_a_structure_nested_too_deeply_is_named_and_writes_nothing(tmp_path):
    deep: list = []
    inner = deep
    for _ in range(5000):
        inner.append([])
        inner = inner[0]
    with pytest.raises(rg.InvalidArgumentError, match="save: the saved object is nested too"):
        rg.save(deep, tmp_path / "deep.pt")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("strict", [True, False])
def test_a_state_with_a_key_that_is_no_name_is_refused_by_name(strict):
    # an int key failed inside the key matching as "'int' object is not subscriptable"
    # (torch's as "'int' object has no attribute 'startswith'")
    layer = nn.Linear(2, 2)
    before = layer.weight.numpy().copy()
    state = {0: rg.zeros((2, 2)), "weight": rg.ones((2, 2)), "bias": rg.zeros(2)}
    with pytest.raises(rg.DTypeError, match=r"load_state_dict: the state's keys must be dotted"):
        layer.load_state_dict(state, strict=strict)
    np.testing.assert_array_equal(layer.weight.numpy(), before)


@pytest.mark.parametrize("inputs", [[], ()])
def test_autograd_grad_with_no_inputs_is_refused_as_torch(inputs):
    # it returned () (a typo's silent answer); torch: "`inputs` argument to `grad()` cannot
    # be empty." The graph stays usable
    x = rg.ones(3).require_grad()
    y = (x * 2).sum()
    with pytest.raises(RuntimeError, match="cannot be empty"):
        torch.autograd.grad(torch.ones(3, requires_grad=True).sum(), inputs)
    with pytest.raises(rg.AutodiffError, match=r"autograd\.grad: the inputs argument cannot be"):
        rg.autograd.grad(y, inputs)
    assert x.grad(y.backward()).tolist() == [2.0, 2.0, 2.0]
