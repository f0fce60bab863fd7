"""Round 19 of the reliability sweep (API.md section 7): where rounds 13-18
(``tests/test_reliability_sweep_13.py`` ... ``_18.py``) did not go.

* User code raising in the middle of a step: a forward hook, a forward pre-hook, a custom
  ``autograd.Function``'s forward, a dataset's ``__getitem__`` and a ``collate_fn`` (in this
  process and in workers), an optimizer's closure: the error is the user's own, nothing the
  failed call touched changes, and the next step gives torch's result.
* Saved state mid-run: every optimizer's ``state_dict`` loaded into a fresh optimizer goes on
  bit for bit as the original, and torch's (L-BFGS's too) goes on as torch's run; state of
  the wrong shape, of another number of parameters or groups, refused by name with nothing
  changed; every schedule's state loaded mid-run into a
  fresh one goes on as torch's uninterrupted run, and torch's own state dicts load.
* ``nn.Module`` misuse against torch: names of another kind, bad names and values, containers'
  indices and keys, ``apply``/``to``/``train`` arguments: refused where torch refuses, from the
  hierarchy; ``deepcopy`` of a model with hooks and tied weights keeps both, ``double()`` keeps
  ties and the optimizer's state.
* Extreme input against torch: NaN and infinities through every loss function under each
  reduction (values and gradients), empty batches through every loss, a million elements
  through the reductions and losses real models use.
* The command line at paths it cannot write or read: one line, its status, nothing written.

Found (``tests/test_reliability_regressions_19.py``): L-BFGS's state after a closure raised
mid-step, group hyper-parameters set to non-numbers, a schedule's state of another optimizer,
module names of another kind, ``gaussian_nll_loss`` at an infinite variance,
``multilabel_margin_loss``'s NaN terms.
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as TF  # noqa: N812

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812  (PyTorch's idiom)
from cli_here import run_main
from retrograd import nn, optim
from retrograd.utils.data import DataLoader, Dataset

_RNG = np.random.default_rng(1919)
_X = _RNG.standard_normal((6, 4)).astype(np.float32)


def _pair(seed: int = 0) -> tuple[nn.Module, torch.nn.Module]:
    """A small MLP and torch's twin with the same weights."""
    rg.manual_seed(seed)
    ours = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 2))
    theirs = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
    with torch.no_grad():
        for p, q in zip(ours.parameters(), theirs.parameters(), strict=True):
            q.copy_(torch.tensor(p.numpy()))
    return ours, theirs


def _grads_match(ours: nn.Module, grads, theirs: torch.nn.Module) -> None:
    for p, q in zip(ours.parameters(), theirs.parameters(), strict=True):
        np.testing.assert_allclose(p.grad(grads).numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-6)


# == 1. user code raising mid-step ==============================================================
class _RaisedError(Exception):
    pass


def _raising_hook(*_):
    raise _RaisedError


_INTERRUPTIONS = {
    "forward hook": lambda m: m[0].register_forward_hook(_raising_hook),
    "forward pre-hook": lambda m: m[2].register_forward_pre_hook(_raising_hook),
    "forward hook with kwargs": lambda m: m[1].register_forward_hook(
        lambda *a, **k: _raising_hook(), with_kwargs=True
    ),
}


@pytest.mark.parametrize("where", sorted(_INTERRUPTIONS))
def test_a_hook_raising_mid_forward_leaves_the_model_and_the_next_step_as_torchs(where):
    ours, theirs = _pair()
    handle = _INTERRUPTIONS[where](ours)
    with pytest.raises(_RaisedError):
        ours(rg.tensor(_X))
    handle.remove()
    grads = (ours(rg.tensor(_X)) ** 2).sum().backward()
    (theirs(torch.tensor(_X)) ** 2).sum().backward()
    _grads_match(ours, grads, theirs)


class _FailingForward(rg.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        raise _RaisedError

    @staticmethod
    def backward(ctx, grad):
        return grad


def test_a_functions_forward_raising_leaves_its_input_and_graph_usable():
    ours, theirs = _pair()
    hidden = ours[0](rg.tensor(_X))
    with pytest.raises(_RaisedError):
        _FailingForward.apply(hidden)
    grads = (ours[2](ours[1](hidden)) ** 2).sum().backward()  # the graph built before
    (theirs(torch.tensor(_X)) ** 2).sum().backward()
    _grads_match(ours, grads, theirs)


class _Numbers(Dataset):
    def __init__(self, bad: int):
        self.bad = bad

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int):
        if index == self.bad:
            raise KeyError(f"item {index}")
        return np.float32(index)


def _collate_failing_at_four(batch):
    if 4.0 in batch:
        raise _RaisedError
    return rg.tensor(np.array(batch))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_dataset_or_collate_raising_is_the_users_error_and_the_next_epoch_is_whole(workers):
    loader = DataLoader(_Numbers(5), batch_size=2, num_workers=workers)
    seen = []
    with pytest.raises(KeyError, match="item 5"):
        for batch in loader:
            seen.append(batch.numpy().tolist())
    assert seen == [[0.0, 1.0], [2.0, 3.0]]
    loader.dataset.bad = -1
    assert [b.numpy().tolist() for b in loader] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    loader = DataLoader(
        _Numbers(-1), batch_size=2, num_workers=workers, collate_fn=_collate_failing_at_four
    )
    batches = iter(loader)
    assert next(batches).numpy().tolist() == [0, 1]
    assert next(batches).numpy().tolist() == [2, 3]
    with pytest.raises(_RaisedError):
        next(batches)
    # as torch's: the iterator goes on after the failed batch
    assert [b.numpy().tolist() for b in batches] == [[6, 7]]


@pytest.mark.parametrize("name", ["SGD", "Adam", "RMSprop", "Adagrad", "LBFGS"])
def test_a_closure_raising_at_once_changes_nothing_and_the_next_step_is_torchs(name):
    ours, theirs = _pair()
    options = {"lr": 0.1} if name != "LBFGS" else {"lr": 0.5, "max_iter": 3}
    opt = getattr(optim, name)(ours.parameters(), **options)
    torch_opt = getattr(torch.optim, name)(theirs.parameters(), **options)
    before = [p.numpy().copy() for p in ours.parameters()]

    def failing():
        raise _RaisedError

    with pytest.raises(_RaisedError):
        opt.step(failing)
    for p, value in zip(ours.parameters(), before, strict=True):
        np.testing.assert_array_equal(p.numpy(), value)

    def closure():
        loss = (ours(rg.tensor(_X)) ** 2).mean()
        return loss, loss.backward()

    def torch_closure():
        torch_opt.zero_grad()
        loss = (theirs(torch.tensor(_X)) ** 2).mean()
        loss.backward()
        return loss

    for _ in range(2):
        opt.step(closure)
        torch_opt.step(torch_closure)
    for p, q in zip(ours.parameters(), theirs.parameters(), strict=True):
        np.testing.assert_allclose(p.numpy(), q.detach().numpy(), rtol=1e-4, atol=1e-6)


# == 2. saved state mid-run =====================================================================
_OPTIMIZERS = {
    "SGD": {"lr": 0.1, "momentum": 0.9, "nesterov": True},
    "Adam": {"lr": 0.05},
    "AdamW": {"lr": 0.05, "amsgrad": True},
    "RMSprop": {"lr": 0.01, "momentum": 0.5, "centered": True},
    "Adagrad": {"lr": 0.1},
    "Adadelta": {},
    "Adamax": {},
    "NAdam": {},
    "RAdam": {},
    "ASGD": {},
    "Rprop": {},
    "Adafactor": {},
}


def _loss(model: nn.Module) -> rg.Tensor:
    return (model(rg.tensor(_X)) ** 2).sum()


@pytest.mark.parametrize("name", sorted(_OPTIMIZERS))
def test_an_optimizers_state_loaded_into_a_fresh_one_goes_on_bit_for_bit(name):
    model, _ = _pair()
    opt = getattr(optim, name)(model.parameters(), **_OPTIMIZERS[name])
    for _ in range(3):
        opt.step(_loss(model).backward())
    twin = copy.deepcopy(model)
    fresh = getattr(optim, name)(twin.parameters(), **_OPTIMIZERS[name])
    fresh.load_state_dict(opt.state_dict())
    for _ in range(3):
        opt.step(_loss(model).backward())
        fresh.step(_loss(twin).backward())
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        np.testing.assert_array_equal(p.numpy(), q.numpy())


@pytest.mark.parametrize("name", sorted(_OPTIMIZERS))
def test_an_optimizers_state_of_the_wrong_shape_or_groups_is_refused_and_changes_nothing(name):
    model, _ = _pair()
    opt = getattr(optim, name)(model.parameters(), **_OPTIMIZERS[name])
    opt.step(_loss(model).backward())
    saved = opt.state_dict()
    target_model, _ = _pair(1)
    target = getattr(optim, name)(target_model.parameters(), **_OPTIMIZERS[name])
    target.step(_loss(target_model).backward())
    before = copy.deepcopy(target.state_dict())

    def unchanged():
        after = target.state_dict()
        assert after["param_groups"] == before["param_groups"]
        for number, state in before["state"].items():
            for key, value in state.items():
                np.testing.assert_array_equal(np.asarray(after["state"][number][key]), value)

    vectors = [k for k, v in saved["state"][0].items() if getattr(v, "ndim", 0) > 0]
    if vectors:
        wrong = copy.deepcopy(saved)
        wrong["state"][0][vectors[0]] = rg.zeros((7, 7))
        with pytest.raises(rg.ShapeError, match=f"{name}.load_state_dict: state 0/"):
            target.load_state_dict(wrong)
        unchanged()
    fewer = copy.deepcopy(saved)
    fewer["param_groups"][0]["params"] = fewer["param_groups"][0]["params"][:2]
    with pytest.raises(rg.InvalidArgumentError, match="the saved groups have"):
        target.load_state_dict(fewer)
    unchanged()
    more = copy.deepcopy(saved)
    more["param_groups"].append(dict(more["param_groups"][0]))
    with pytest.raises(rg.InvalidArgumentError, match="the saved groups have"):
        target.load_state_dict(more)
    unchanged()


@pytest.mark.parametrize("name", sorted(_OPTIMIZERS) + ["LBFGS"])
def test_torchs_optimizer_state_taken_mid_run_loads_and_goes_on_as_torchs(name):
    options = _OPTIMIZERS.get(name, {"lr": 0.1, "max_iter": 3})
    ours, theirs = _pair()
    torch_opt = getattr(torch.optim, name)(theirs.parameters(), **options)

    def torch_closure():
        torch_opt.zero_grad()
        loss = (theirs(torch.tensor(_X)) ** 2).mean()  # (a run that does not diverge)
        loss.backward()
        return loss

    def closure():
        loss = (ours(rg.tensor(_X)) ** 2).mean()
        return loss, loss.backward()

    for _ in range(3):
        torch_opt.step(torch_closure)
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    opt = getattr(optim, name)(ours.parameters(), **options)
    opt.load_state_dict(torch_opt.state_dict())
    for _ in range(3):
        torch_opt.step(torch_closure)
        opt.step(closure)
    for p, q in zip(ours.parameters(), theirs.parameters(), strict=True):
        np.testing.assert_allclose(p.numpy(), q.detach().numpy(), rtol=1e-4, atol=1e-6)


_SCHEDULES = {
    "StepLR": lambda s, o: s.StepLR(o, 2, 0.5),
    "MultiStepLR": lambda s, o: s.MultiStepLR(o, [2, 4]),
    "ExponentialLR": lambda s, o: s.ExponentialLR(o, 0.9),
    "CosineAnnealingLR": lambda s, o: s.CosineAnnealingLR(o, 6),
    "PolynomialLR": lambda s, o: s.PolynomialLR(o, total_iters=8, power=2),
    "LinearLR": lambda s, o: s.LinearLR(o, 0.2, total_iters=4),
    "LambdaLR": lambda s, o: s.LambdaLR(o, lambda e: 0.9**e),
    "MultiplicativeLR": lambda s, o: s.MultiplicativeLR(o, lambda e: 0.95),
    "OneCycleLR": lambda s, o: s.OneCycleLR(o, max_lr=1.0, total_steps=20),
    "CyclicLR": lambda s, o: s.CyclicLR(o, 0.01, 0.1, step_size_up=3),
    "CosineAnnealingWarmRestarts": lambda s, o: s.CosineAnnealingWarmRestarts(o, 3, 2),
    "SequentialLR": lambda s, o: s.SequentialLR(
        o, [s.LinearLR(o, 0.1, total_iters=3), s.ExponentialLR(o, 0.9)], milestones=[3]
    ),
    "ChainedScheduler": lambda s, o: s.ChainedScheduler(
        [s.ConstantLR(o, 0.5, total_iters=4), s.ExponentialLR(o, 0.9)]
    ),
    "ReduceLROnPlateau": lambda s, o: s.ReduceLROnPlateau(o, patience=1),
}


def _schedule(lib, name: str):
    module = nn if lib is optim else torch.nn
    groups = [{"params": [module.Parameter(rg.ones(2) if lib is optim else torch.ones(2))]}]
    groups.append({"params": [module.Parameter(rg.ones(1) if lib is optim else torch.ones(1))]})
    opt = lib.SGD(groups, lr=0.1, momentum=0.9)
    return opt, _SCHEDULES[name](lib.lr_scheduler, opt)


def _advance(schedule, name: str) -> None:
    schedule.step(1.0) if name == "ReduceLROnPlateau" else schedule.step()


@pytest.mark.parametrize("name", sorted(_SCHEDULES))
def test_a_schedules_state_loaded_mid_run_goes_on_as_torchs_uninterrupted_run(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's "lr_scheduler.step() before optimizer.step()"
        opt, schedule = _schedule(optim, name)
        torch_opt, torch_schedule = _schedule(torch.optim, name)
        for _ in range(5):
            _advance(schedule, name)
            _advance(torch_schedule, name)
        fresh_opt, fresh = _schedule(optim, name)
        fresh_opt.load_state_dict(opt.state_dict())
        fresh.load_state_dict(schedule.state_dict())
        from_torch_opt, from_torch = _schedule(optim, name)  # torch's state dicts load too
        from_torch_opt.load_state_dict(opt.state_dict())
        from_torch.load_state_dict(torch_schedule.state_dict())
        for _ in range(6):
            for s in (schedule, fresh, from_torch, torch_schedule):
                _advance(s, name)
            rates = [g["lr"] for g in torch_opt.param_groups]
            for o in (opt, fresh_opt, from_torch_opt):
                np.testing.assert_allclose([g["lr"] for g in o.param_groups], rates, rtol=1e-12)
            assert [g["lr"] for g in fresh_opt.param_groups] == [g["lr"] for g in opt.param_groups]


# == 3. nn.Module misuse against torch ==========================================================
def _register_over(lib, kind: str, name: str):
    module = (nn if lib is rg else torch.nn).BatchNorm1d(2)
    value = lib.zeros(2)
    if kind == "parameter":
        module.register_parameter(name, (nn if lib is rg else torch.nn).Parameter(value))
    elif kind == "buffer":
        module.register_buffer(name, value)
    else:
        module.add_module(name, (nn if lib is rg else torch.nn).ReLU())


_MISUSE = {
    "parameter over a buffer": lambda lib: _register_over(lib, "parameter", "running_mean"),
    "buffer over a parameter": lambda lib: _register_over(lib, "buffer", "weight"),
    "module over a parameter": lambda lib: _register_over(lib, "module", "bias"),
    "module over a buffer": lambda lib: _register_over(lib, "module", "running_var"),
    "parameter over a method": lambda lib: _register_over(lib, "parameter", "forward"),
    "buffer over an attribute": lambda lib: _register_over(lib, "buffer", "training"),
    "module over an attribute": lambda lib: _register_over(lib, "module", "eps"),
    "dotted buffer name": lambda lib: _register_over(lib, "buffer", "a.b"),
    "empty parameter name": lambda lib: _register_over(lib, "parameter", ""),
    "buffer of a list": lambda lib: (
        (nn if lib is rg else torch.nn).Linear(2, 2).register_buffer("b", [1.0, 2.0])
    ),
    "module assigned an int": lambda lib: setattr(
        (nn if lib is rg else torch.nn).Sequential((nn if lib is rg else torch.nn).ReLU()),
        "0",
        3,
    ),
    "Sequential index": lambda lib: (nn if lib is rg else torch.nn).Sequential()[2],
    "ModuleList index": lambda lib: (nn if lib is rg else torch.nn).ModuleList(
        [(nn if lib is rg else torch.nn).ReLU()]
    )[-2],
    "ModuleDict key": lambda lib: (nn if lib is rg else torch.nn).ModuleDict()["x"],
    "ModuleList of an int": lambda lib: (nn if lib is rg else torch.nn).ModuleList().append(3),
    "get_parameter": lambda lib: (
        (nn if lib is rg else torch.nn).Linear(2, 2).get_parameter("weights")
    ),
    "apply of an int": lambda lib: (nn if lib is rg else torch.nn).Linear(2, 2).apply(3),
    "to an int dtype": lambda lib: (nn if lib is rg else torch.nn).Linear(2, 2).to(lib.int64),
    "to an unknown device": lambda lib: (nn if lib is rg else torch.nn).Linear(2, 2).to("gpu7"),
    "train of a str": lambda lib: (nn if lib is rg else torch.nn).Linear(2, 2).train("no"),
    "requires_grad_ of a str": lambda lib: (
        (nn if lib is rg else torch.nn).Linear(2, 2).requires_grad_("x")
    ),
    "load_state_dict of a list": lambda lib: (
        (nn if lib is rg else torch.nn).Linear(2, 2).load_state_dict([1])
    ),
}


@pytest.mark.parametrize("case", sorted(_MISUSE))
def test_module_misuse_is_refused_where_torch_refuses_from_the_hierarchy(case):
    with pytest.raises(Exception) as theirs:  # whatever torch raises
        _MISUSE[case](torch)
    with pytest.raises(rg.RetrogradError) as ours:
        _MISUSE[case](rg)
    if case in _SAME_EXCEPT:  # caught by the except clause written for torch's error
        assert isinstance(ours.value, type(theirs.value)), (type(ours.value), theirs.value)


#: refusals whose error is also torch's class (the rest are from the hierarchy only: torch's
#: AttributeError of get_parameter is a KeyError here, its TypeError of requires_grad_("x") a
#: ValueError, as before this round)
_SAME_EXCEPT = {
    "parameter over a buffer", "buffer over a parameter", "module over a parameter",
    "module over a buffer", "parameter over a method", "buffer over an attribute",
    "module over an attribute", "dotted buffer name", "empty parameter name", "buffer of a list",
    "module assigned an int", "Sequential index", "ModuleList index", "ModuleDict key",
    "ModuleList of an int", "apply of an int", "to an int dtype",
}  # fmt: skip


class _Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)
        self.b.weight = self.a.weight
        self.register_buffer("scale", rg.ones(4))

    def forward(self, x):
        return self.b(self.a(x).tanh()) * self.scale


def test_deepcopy_keeps_hooks_and_ties_and_double_meets_the_optimizer_as_torchs():
    model = _Tied()
    seen = []
    model.a.register_forward_hook(lambda module, args, out: seen.append(module))
    copied = copy.deepcopy(model)
    assert copied.a.weight is copied.b.weight and copied.a.weight is not model.a.weight
    copied(rg.tensor(_X))
    assert seen == [copied.a]  # the copied hook is called with the copy
    opt = optim.Adam(copied.parameters(), lr=0.1)
    opt.step((copied(rg.tensor(_X)) ** 2).sum().backward())
    copied.double()
    assert copied.a.weight is copied.b.weight and copied.scale.dtype == rg.float64
    x = rg.tensor(_X.astype(np.float64))
    # Adam's float32 moments beside float64 parameters: torch's next step refuses them
    # ("expected dtype float for `end`"), and so does ours, before any parameter moves
    before = {name: p.numpy().copy() for name, p in copied.named_parameters()}
    with pytest.raises(rg.DTypeError, match="cast"):
        opt.step((copied(x) ** 2).sum().backward())
    for name, p in copied.named_parameters():
        np.testing.assert_array_equal(p.numpy(), before[name])
    # an optimizer whose step casts its state (SGD's momentum, as torch's) goes on
    opt = optim.SGD(copied.parameters(), lr=0.1, momentum=0.9)
    opt.step((copied(x) ** 2).sum().backward())
    opt.step((copied(x) ** 2).sum().backward())
    assert all(p.dtype == rg.float64 for p in copied.parameters())
    assert len(opt.state) == 3  # a.weight (tied), a.bias, b.bias: one state each


# == 4. extreme input against torch =============================================================
_NAN = np.array(
    [[1.0, np.nan, -np.inf, 2.0], [np.inf, 0.0, -1.0, np.nan], [3.0, 3.0, -2.0, 1.0]], np.float32
)
_T = np.array(
    [[0.5, 1.0, 2.0, np.inf], [0.0, np.nan, -1.0, 1.0], [-np.inf, 3.0, 1.0, 0.2]], np.float32
)
_P = np.array([[0.2, 0.5, 1.0, 0.0], [np.nan, 0.3, 0.9, 1.0], [0.1, 0.7, 0.4, 0.6]], np.float32)
_LABELS = np.array([[1, 0, 1, 1], [0, 1, 0, 1], [1, 1, 0, 0]], np.float32)
_SIGNS = np.array([[1, -1, 1, -1], [1, 1, -1, -1], [-1, 1, 1, -1]], np.float32)
_FINITE_T = np.nan_to_num(_T)
_LOSSES = {
    "l1": lambda lib, f, x, r: f.l1_loss(x, lib.tensor(_T), reduction=r),
    "mse": lambda lib, f, x, r: f.mse_loss(x, lib.tensor(_T), reduction=r),
    "smooth_l1": lambda lib, f, x, r: f.smooth_l1_loss(x, lib.tensor(_T), reduction=r, beta=0.5),
    "huber": lambda lib, f, x, r: f.huber_loss(x, lib.tensor(_T), reduction=r, delta=0.5),
    "cross_entropy": lambda lib, f, x, r: f.cross_entropy(x, lib.tensor([0, 3, 1]), reduction=r),
    "cross_entropy smoothed": lambda lib, f, x, r: f.cross_entropy(
        x, lib.tensor([0, 3, 1]), reduction=r, label_smoothing=0.1
    ),
    "cross_entropy NaN weight": lambda lib, f, x, r: f.cross_entropy(
        x, lib.tensor([0, 3, 1]), weight=lib.tensor([1.0, 2.0, np.nan, 1.0]), reduction=r
    ),
    "cross_entropy ignored": lambda lib, f, x, r: f.cross_entropy(
        x, lib.tensor([0, -100, 1]), reduction=r
    ),
    "cross_entropy probabilities": lambda lib, f, x, r: f.cross_entropy(
        x, lib.tensor(_P), reduction=r
    ),
    "nll": lambda lib, f, x, r: f.nll_loss(x, lib.tensor([0, 3, 1]), reduction=r),
    "binary_cross_entropy": lambda lib, f, x, r: f.binary_cross_entropy(
        x.sigmoid(), lib.tensor(_LABELS), reduction=r
    ),
    "bce_with_logits": lambda lib, f, x, r: f.binary_cross_entropy_with_logits(
        x, lib.tensor(_LABELS), reduction=r
    ),
    "bce_with_logits NaN targets": lambda lib, f, x, r: f.binary_cross_entropy_with_logits(
        x, lib.tensor(_P), reduction=r
    ),
    "bce_with_logits pos_weight": lambda lib, f, x, r: f.binary_cross_entropy_with_logits(
        x, lib.tensor(_LABELS), pos_weight=lib.tensor([1.0, 2.0, 0.5, 3.0]), reduction=r
    ),
    "kl_div": lambda lib, f, x, r: f.kl_div(x, lib.tensor(_P), reduction=r),
    "kl_div log_target": lambda lib, f, x, r: f.kl_div(
        x, lib.tensor(_T), reduction=r, log_target=True
    ),
    "poisson_nll": lambda lib, f, x, r: f.poisson_nll_loss(x, lib.tensor(np.abs(_T)), reduction=r),
    "poisson_nll full": lambda lib, f, x, r: f.poisson_nll_loss(
        x.abs(), lib.tensor(np.abs(_T)), log_input=False, full=True, reduction=r
    ),
    "gaussian_nll": lambda lib, f, x, r: f.gaussian_nll_loss(
        x, lib.tensor(_T), lib.tensor(np.abs(_FINITE_T) + 0.1), reduction=r
    ),
    "gaussian_nll variance": lambda lib, f, x, r: f.gaussian_nll_loss(
        lib.tensor(_T), lib.tensor(_FINITE_T), x.abs() + 0.1, reduction=r
    ),
    "hinge_embedding": lambda lib, f, x, r: f.hinge_embedding_loss(
        x, lib.tensor(_SIGNS), reduction=r
    ),
    "margin_ranking": lambda lib, f, x, r: f.margin_ranking_loss(
        x, lib.tensor(_T), lib.tensor(_SIGNS), reduction=r
    ),
    "multi_margin": lambda lib, f, x, r: f.multi_margin_loss(x, lib.tensor([0, 3, 1]), reduction=r),
    "multilabel_margin": lambda lib, f, x, r: f.multilabel_margin_loss(
        x, lib.tensor([[0, 3, -1, 0], [1, -1, 0, 0], [2, 1, 0, -1]]), reduction=r
    ),
    "multilabel_soft_margin": lambda lib, f, x, r: f.multilabel_soft_margin_loss(
        x, lib.tensor(_LABELS), reduction=r
    ),
    "soft_margin": lambda lib, f, x, r: f.soft_margin_loss(x, lib.tensor(_SIGNS), reduction=r),
    "cosine_embedding": lambda lib, f, x, r: f.cosine_embedding_loss(
        x, lib.tensor(_T), lib.tensor([1.0, -1.0, 1.0]), reduction=r
    ),
    "triplet_margin": lambda lib, f, x, r: f.triplet_margin_loss(
        x, lib.tensor(_T), lib.tensor(_FINITE_T), reduction=r
    ),
    "triplet_margin swap": lambda lib, f, x, r: f.triplet_margin_loss(
        x, lib.tensor(_T), lib.tensor(_FINITE_T), swap=True, reduction=r
    ),
    "triplet_margin_with_distance": lambda lib, f, x, r: f.triplet_margin_with_distance_loss(
        x, lib.tensor(_T), lib.tensor(_FINITE_T), reduction=r
    ),
}


def _against_torch(op, data: np.ndarray, reduction: str) -> None:
    """``op``'s value and gradient on ``data`` as torch's (NaN where torch's is NaN)."""
    xt = torch.tensor(data, requires_grad=True)
    xr = rg.tensor(data).require_grad()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out_t = op(torch, TF, xt, reduction)
    except RuntimeError:  # binary_cross_entropy refuses a NaN probability: so do we
        with pytest.raises(rg.InvalidArgumentError):
            op(rg, F, xr, reduction)
        return
    out_r = op(rg, F, xr, reduction)
    assert tuple(out_r.shape) == tuple(out_t.shape)
    np.testing.assert_allclose(
        out_r.numpy(), out_t.detach().numpy(), rtol=1e-4, atol=1e-6, equal_nan=True
    )
    out_t.sum().backward()
    grad = xr.grad(out_r.sum().backward())
    grad = np.zeros(data.shape, np.float32) if grad is None else grad.numpy()
    np.testing.assert_allclose(grad, xt.grad.numpy(), rtol=1e-4, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("name", sorted(_LOSSES))
def test_nan_and_infinities_through_every_loss_as_torch(name, reduction):
    _against_torch(_LOSSES[name], _NAN, reduction)


def test_bce_with_logits_at_an_infinite_pos_weight_has_the_derivative_of_its_value():
    # torch's gradient is NaN there (its formula takes inf - inf); the loss is
    # pos_weight * softplus(-x) for a positive label, whose derivative at x = 2 is -inf
    x = rg.tensor([2.0, -1.0]).require_grad()
    loss = F.binary_cross_entropy_with_logits(
        x, rg.ones(2), pos_weight=rg.tensor([np.inf, 2.0]), reduction="sum"
    )
    assert loss.item() == np.inf
    grad = x.grad(loss.backward()).numpy()
    np.testing.assert_allclose(grad, [-np.inf, -2.0 / (1.0 + np.exp(-1.0))], rtol=1e-6)


_EMPTY_LOSSES = {
    name: op
    for name, op in _LOSSES.items()
    if name not in ("multi_margin", "multilabel_margin")  # torch's read uninitialized memory
}


def _empty_loss(name: str):
    """``name``'s loss on an empty batch: each fixed tensor of the table cut to 0 rows."""

    def op(lib, f, x, reduction):
        def cut(value):
            return value[:0] if hasattr(value, "shape") and len(value.shape) else value

        if name.startswith(("cross_entropy", "nll")) and "probabilities" not in name:
            target = lib.zeros(0, dtype=lib.int64)
            fn = f.nll_loss if name == "nll" else f.cross_entropy
            extra = {"label_smoothing": 0.1} if "smoothed" in name else {}
            return fn(x, target, reduction=reduction, **extra)
        original = lib.tensor
        lib_tensor = lambda data, *a, **k: cut(original(data, *a, **k))  # noqa: E731
        shim = type("Lib", (), {"tensor": staticmethod(lib_tensor)})
        if name == "cosine_embedding":
            return f.cosine_embedding_loss(x, cut(lib.tensor(_T)), lib.ones(0), reduction=reduction)
        if name.startswith("bce_with_logits pos_weight"):
            return f.binary_cross_entropy_with_logits(
                x, lib.zeros(0, 4), pos_weight=lib.ones(4), reduction=reduction
            )
        return _LOSSES[name](shim, f, x, reduction)

    return op


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("name", sorted(_EMPTY_LOSSES))
def test_an_empty_batch_through_every_loss_as_torch(name, reduction):
    _against_torch(_empty_loss(name), np.zeros((0, 4), np.float32), reduction)


@pytest.mark.parametrize("name", ["multi_margin_loss", "multilabel_margin_loss"])
def test_an_empty_batch_through_the_margin_losses_is_an_empty_sum(name):
    # torch's kernels give uninitialized memory here (a different value each run); the sum of
    # no terms is 0 and their mean NaN
    target = rg.zeros(0, dtype=rg.int64) if name == "multi_margin_loss" else rg.zeros((0, 4))
    target = target.cast(rg.int64)
    x = rg.zeros((0, 4)).require_grad()
    fn = getattr(F, name)
    assert fn(x, target, reduction="sum").item() == 0.0
    assert np.isnan(fn(x, target, reduction="mean").item())
    assert fn(x, target, reduction="none").shape == (0,)
    assert x.grad(fn(x, target, reduction="sum").backward()).shape == (0, 4)


_MILLION = {
    "cross_entropy over a million classes": (
        (1, 1_000_000),
        lambda lib, f, x: f.cross_entropy(x, lib.tensor([999_999])),
    ),
    "log_softmax": ((1000, 1000), lambda lib, f, x: f.log_softmax(x, -1).sum()),
    "mse": ((1_000_000,), lambda lib, f, x: f.mse_loss(x, x.detach() * 0.5)),
    "logsumexp": ((1_000_000,), lambda lib, f, x: x.logsumexp(0)),
    "layer_norm": ((1000, 1000), lambda lib, f, x: f.layer_norm(x, (1000,))[:, :10].sum()),
    "var": ((1_000_000,), lambda lib, f, x: x.var()),
}


@pytest.mark.parametrize("name", sorted(_MILLION))
def test_a_million_elements_through_the_losses_and_reductions_as_torch(name):
    shape, op = _MILLION[name]
    data = np.random.default_rng(6).standard_normal(shape).astype(np.float32) * 3
    xt = torch.tensor(data, requires_grad=True)
    out_t = op(torch, TF, xt)
    out_t.backward()
    xr = rg.tensor(data).require_grad()
    out_r = op(rg, F, xr)
    np.testing.assert_allclose(out_r.item(), out_t.item(), rtol=1e-4)
    expected = xt.grad.numpy()  # (log_softmax's sums 1 - N * p: float32 cancellation)
    np.testing.assert_allclose(
        xr.grad(out_r.backward()).numpy(), expected, rtol=1e-3, atol=1e-5 * np.abs(expected).max()
    )


# == 5. the command line at paths it cannot use =================================================
@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["train", "--out", "{file}"], "is a file, not a folder"),
        (["train", "--out", "{file}/run"], "cannot create --out"),
        (["graph", "--out", "{file}"], "is a file, not a folder"),
        (["graph", "--out", "/proc/retrograd-run"], "cannot create --out"),
        (["train", "--out", "/proc/self/retrograd-run"], "cannot create --out"),
        (["sample", "--out", "{tmp}/ünï cødé"], "no GPT checkpoint at"),
        (["sample", "--out", "{file}"], "no GPT checkpoint at"),
        (["train", "--model", "gpt", "--text", "{tmp}/missing ✓.txt", "--out", "{tmp}/r"], ""),
    ],
)
def test_a_path_the_command_cannot_use_is_one_line_and_status_1(args, fragment, tmp_path):
    afile = tmp_path / "a file"
    afile.write_text("x")
    args = [a.format(file=afile, tmp=tmp_path) for a in args]
    completed = run_main(*args)
    err = completed.stderr.strip()
    assert completed.returncode == 1 and len(err.splitlines()) == 1, err
    assert err.startswith(f"retrograd {args[0]}: ") and fragment in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a file"]
