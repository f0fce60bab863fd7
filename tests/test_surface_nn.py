"""torch's ``nn`` surface beyond API.md section 8 (section 10), each name against torch:
modules (state-dict keys and shapes, outputs and gradients after loading torch's state dict,
in train and eval mode), functions, initializers, optimizers, schedules, hooks, parallel
wrappers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from backends import inner_backend
from retrograd import distributed as dist
from retrograd import nn
from retrograd.nn import functional as F  # noqa: N812
from surface_testing import same_gradients, same_values

RNG = np.random.default_rng(11)


def _a(*shape: int, low: float = -1.0, high: float = 1.0) -> np.ndarray:
    return RNG.uniform(low, high, size=shape)


def check_module(make, *arrays, modes=("train", "eval"), steps: int = 2, rtol=1e-9, atol=1e-10):
    """``make(lib)`` built in both libraries: the same state-dict keys and shapes; with
    torch's state loaded, the same outputs, input gradients, parameter gradients and
    buffers (after ``steps`` forward passes in train mode) in float64."""
    torch.manual_seed(0)
    theirs = make(torch).double()
    ours = make(rg).double()
    their_state = theirs.state_dict()
    own = ours.state_dict()
    assert list(own) == list(their_state)
    assert [tuple(v.shape) for v in own.values()] == [tuple(v.shape) for v in their_state.values()]
    ours.load_state_dict({k: v.detach().numpy() for k, v in their_state.items()})
    for mode in modes:
        getattr(ours, mode)()
        getattr(theirs, mode)()
        for _ in range(steps):
            t_in = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
            r_in = [
                rg.tensor(a).require_grad() if a.dtype.kind == "f" else rg.tensor(a) for a in arrays
            ]
            t_out, r_out = theirs(*t_in), ours(*r_in)
            seed = RNG.standard_normal(tuple(t_out.shape))
            (t_out * torch.tensor(seed)).sum().backward()
            grads = (r_out * rg.tensor(seed)).sum().backward()
            np.testing.assert_allclose(r_out.numpy(), t_out.detach().numpy(), rtol, atol)
            for r, t in zip(r_in, t_in):
                if t.requires_grad:
                    np.testing.assert_allclose(r.grad(grads).numpy(), t.grad.numpy(), rtol, atol)
            their_params = dict(theirs.named_parameters())
            for name, p in ours.named_parameters():
                expected = their_params[name].grad
                np.testing.assert_allclose(p.grad(grads).numpy(), expected.numpy(), rtol, atol)
            theirs.zero_grad()
        for name, value in theirs.state_dict().items():
            np.testing.assert_allclose(ours.state_dict()[name], value.numpy(), rtol, atol)


MODULES = [
    ("Softmax", lambda lib: lib.nn.Softmax(dim=1), [(3, 4)]),
    ("LogSoftmax", lambda lib: lib.nn.LogSoftmax(dim=-1), [(3, 4)]),
    ("Softmin", lambda lib: lib.nn.Softmin(0), [(3, 4)]),
    ("Softmax2d", lambda lib: lib.nn.Softmax2d(), [(2, 3, 2, 2)]),
    ("LeakyReLU", lambda lib: lib.nn.LeakyReLU(0.2), [(3, 4)]),
    ("ReLU6", lambda lib: lib.nn.ReLU6(), [(3, 4)]),
    ("Hardswish", lambda lib: lib.nn.Hardswish(), [(3, 4)]),
    ("Hardsigmoid", lambda lib: lib.nn.Hardsigmoid(), [(3, 4)]),
    ("Hardtanh", lambda lib: lib.nn.Hardtanh(-0.5, 0.5), [(3, 4)]),
    ("ELU", lambda lib: lib.nn.ELU(0.7), [(3, 4)]),
    ("CELU", lambda lib: lib.nn.CELU(0.6), [(3, 4)]),
    ("SELU", lambda lib: lib.nn.SELU(), [(3, 4)]),
    ("Mish", lambda lib: lib.nn.Mish(), [(3, 4)]),
    ("PReLU", lambda lib: lib.nn.PReLU(3, init=0.1), [(2, 3, 4)]),
    ("PReLU_single", lambda lib: lib.nn.PReLU(), [(2, 3)]),
    ("Softplus", lambda lib: lib.nn.Softplus(beta=2.0, threshold=1.0), [(3, 4)]),
    ("Softsign", lambda lib: lib.nn.Softsign(), [(3, 4)]),
    ("Tanhshrink", lambda lib: lib.nn.Tanhshrink(), [(3, 4)]),
    ("Threshold", lambda lib: lib.nn.Threshold(0.1, 20.0), [(3, 4)]),
    ("GLU", lambda lib: lib.nn.GLU(), [(3, 4)]),
    ("LogSigmoid", lambda lib: lib.nn.LogSigmoid(), [(3, 4)]),
    ("Conv3d", lambda lib: lib.nn.Conv3d(2, 3, 2, padding=1, stride=(1, 2, 1)), [(2, 2, 3, 4, 3)]),
    (
        "Conv2d_reflect",
        lambda lib: lib.nn.Conv2d(2, 3, 3, padding=1, padding_mode="reflect"),
        [(1, 2, 5, 5)],
    ),
    (
        "Conv2d_replicate",
        lambda lib: lib.nn.Conv2d(2, 2, 3, padding=(2, 1), padding_mode="replicate"),
        [(1, 2, 4, 5)],
    ),
    (
        "Conv1d_circular",
        lambda lib: lib.nn.Conv1d(2, 2, 3, padding=1, padding_mode="circular"),
        [(2, 2, 6)],
    ),
    ("ConvTranspose1d", lambda lib: lib.nn.ConvTranspose1d(3, 2, 3, stride=2), [(2, 3, 5)]),
    (
        "ConvTranspose3d",
        lambda lib: lib.nn.ConvTranspose3d(2, 2, 2, stride=2, bias=False),
        [(1, 2, 2, 3, 2)],
    ),
    ("MaxPool1d", lambda lib: lib.nn.MaxPool1d(3, 2, padding=1), [(2, 3, 9)]),
    ("MaxPool3d", lambda lib: lib.nn.MaxPool3d(2), [(1, 2, 4, 4, 4)]),
    (
        "AvgPool1d",
        lambda lib: lib.nn.AvgPool1d(3, 2, padding=1, count_include_pad=False),
        [(2, 3, 9)],
    ),
    ("AvgPool3d", lambda lib: lib.nn.AvgPool3d(2, stride=1), [(1, 2, 3, 4, 3)]),
    ("AvgPool2d_divisor", lambda lib: lib.nn.AvgPool2d(2, divisor_override=3), [(1, 2, 4, 4)]),
    ("AdaptiveAvgPool1d", lambda lib: lib.nn.AdaptiveAvgPool1d(3), [(2, 3, 7)]),
    ("AdaptiveAvgPool3d", lambda lib: lib.nn.AdaptiveAvgPool3d((2, 1, 3)), [(1, 2, 5, 3, 4)]),
    ("AdaptiveMaxPool1d", lambda lib: lib.nn.AdaptiveMaxPool1d(3), [(2, 3, 7)]),
    ("AdaptiveMaxPool2d", lambda lib: lib.nn.AdaptiveMaxPool2d((2, 3)), [(2, 3, 5, 7)]),
    ("AdaptiveMaxPool2d_none", lambda lib: lib.nn.AdaptiveMaxPool2d((None, 2)), [(1, 2, 3, 5)]),
    ("InstanceNorm1d", lambda lib: lib.nn.InstanceNorm1d(3), [(2, 3, 5)]),
    ("InstanceNorm2d_affine", lambda lib: lib.nn.InstanceNorm2d(3, affine=True), [(2, 3, 4, 4)]),
    (
        "InstanceNorm2d_tracked",
        lambda lib: lib.nn.InstanceNorm2d(3, momentum=0.3, affine=True, track_running_stats=True),
        [(2, 3, 4, 3)],
    ),
    ("InstanceNorm3d_unbatched", lambda lib: lib.nn.InstanceNorm3d(2), [(2, 3, 2, 3)]),
    ("BatchNorm3d", lambda lib: lib.nn.BatchNorm3d(2), [(3, 2, 2, 3, 2)]),
    ("Dropout2d_eval", lambda lib: lib.nn.Dropout2d(0.4), [(2, 3, 4, 4)]),
    ("ZeroPad2d", lambda lib: lib.nn.ZeroPad2d((1, 0, 2, 1)), [(1, 2, 3, 3)]),
    ("ConstantPad1d", lambda lib: lib.nn.ConstantPad1d(2, 3.5), [(2, 3, 4)]),
    (
        "ConstantPad3d",
        lambda lib: lib.nn.ConstantPad3d((1, 0, 0, 1, 1, 1), -1.0),
        [(1, 1, 2, 2, 2)],
    ),
    ("ReflectionPad1d", lambda lib: lib.nn.ReflectionPad1d((2, 1)), [(2, 3, 5)]),
    ("ReflectionPad2d", lambda lib: lib.nn.ReflectionPad2d(1), [(1, 2, 3, 4)]),
    ("ReplicationPad2d", lambda lib: lib.nn.ReplicationPad2d((0, 2, 1, 0)), [(1, 2, 3, 3)]),
    ("CircularPad2d", lambda lib: lib.nn.CircularPad2d(1), [(1, 2, 3, 3)]),
    (
        "Unfold",
        lambda lib: lib.nn.Unfold((2, 3), dilation=(1, 2), padding=1, stride=(2, 1)),
        [(2, 3, 5, 6)],
    ),
    ("Fold", lambda lib: lib.nn.Fold((4, 5), (2, 2), stride=(2, 1), padding=(1, 0)), [(2, 12, 12)]),
    ("PixelShuffle", lambda lib: lib.nn.PixelShuffle(2), [(2, 8, 3, 2)]),
    ("PixelUnshuffle", lambda lib: lib.nn.PixelUnshuffle(2), [(1, 2, 4, 6)]),
    ("Unflatten", lambda lib: lib.nn.Unflatten(1, (2, 3)), [(4, 6)]),
    ("Identity", lambda lib: lib.nn.Identity(), [(4, 6)]),
]


#: torch's backward of these rounds a constant to float32 (hardsigmoid's 1/6; celu's
#: 1/alpha, taken with ``alpha.toFloat()``): its float64 gradients are off by ~1e-8 relative
#: from the exact ones, which is what retrograd computes.
FLOAT32_CONSTANTS_IN_TORCH_BACKWARD = {"Hardsigmoid": 1e-7, "CELU": 1e-7}


@pytest.mark.parametrize("name, make, shapes", MODULES, ids=[m[0] for m in MODULES])
def test_modules_match_torch(name, make, shapes):
    modes = ("eval",) if name.startswith("Dropout") else ("train", "eval")
    rtol = FLOAT32_CONSTANTS_IN_TORCH_BACKWARD.get(name, 1e-9)
    check_module(make, *[_a(*s) for s in shapes], modes=modes, rtol=rtol)


LOSSES = [
    (
        "BCELoss",
        lambda lib: lib.nn.BCELoss(),
        [_a(3, 4, low=0.05, high=0.95), _a(3, 4, low=0.0, high=1.0)],
    ),
    (
        "BCELoss_weight_sum",
        lambda lib: lib.nn.BCELoss(weight=lib.tensor(_a(4, low=0.5, high=2.0)), reduction="sum"),
        [_a(3, 4, low=0.05, high=0.95), (_a(3, 4) > 0).astype(np.float64)],
    ),
    (
        "BCEWithLogitsLoss",
        lambda lib: lib.nn.BCEWithLogitsLoss(),
        [_a(3, 4) * 20, _a(3, 4, low=0.0)],
    ),
    (
        "BCEWithLogitsLoss_pos_weight",
        lambda lib: lib.nn.BCEWithLogitsLoss(
            pos_weight=lib.tensor(_a(4, low=0.5, high=3.0)), reduction="none"
        ),
        [_a(3, 4) * 5, _a(3, 4, low=0.0)],
    ),
    ("L1Loss", lambda lib: lib.nn.L1Loss(), [_a(3, 4), _a(3, 4)]),
    ("L1Loss_sum", lambda lib: lib.nn.L1Loss(reduction="sum"), [_a(3, 4), _a(3, 4)]),
    ("SmoothL1Loss", lambda lib: lib.nn.SmoothL1Loss(beta=0.5), [_a(3, 4), _a(3, 4)]),
    ("SmoothL1Loss_beta0", lambda lib: lib.nn.SmoothL1Loss(beta=0.0), [_a(3, 4), _a(3, 4)]),
    ("HuberLoss", lambda lib: lib.nn.HuberLoss(delta=0.4, reduction="none"), [_a(3, 4), _a(3, 4)]),
    (
        "KLDivLoss_batchmean",
        lambda lib: lib.nn.KLDivLoss(reduction="batchmean"),
        [np.log(_a(3, 4, low=0.1)), _a(3, 4, low=0.0)],
    ),
    (
        "KLDivLoss_log_target",
        lambda lib: lib.nn.KLDivLoss(reduction="sum", log_target=True),
        [_a(3, 4), _a(3, 4)],
    ),
]


@pytest.mark.parametrize("name, make, arrays", LOSSES, ids=[m[0] for m in LOSSES])
def test_losses_match_torch(name, make, arrays):
    check_module(make, *arrays, modes=("train",), steps=1)


def test_binary_cross_entropy_clamps_its_logs_at_minus_100_as_torch():
    """A saturated probability (0 or 1) has a finite loss and torch's finite gradient."""
    target = np.array([1.0, 0.0, 1.0, 0.3])
    same_gradients(
        lambda lib, x: lib.nn.functional.binary_cross_entropy(
            x, lib.tensor(target), reduction="none"
        ),
        [np.array([0.0, 1.0, 0.5, 1e-50])],
    )
    same_gradients(  # the target's gradient: log(1 - x) - log(x), as torch's
        lambda lib, x, y: lib.nn.functional.binary_cross_entropy(x, y),
        [np.array([0.2, 0.9, 0.5, 1e-50]), target],
    )


KL_TARGET = np.where(_a(3, 4) > 0, _a(3, 4, low=0.0), 0.0)  # with zeros: they contribute 0
FUNCTIONS = [
    (
        "normalize",
        lambda lib, x: (
            lib.nn.functional.normalize(x) + lib.nn.functional.normalize(x, p=1.0, dim=0)
        ),
        [_a(3, 4)],
    ),
    ("normalize_zero", lambda lib, x: lib.nn.functional.normalize(x * 0.0, dim=-1), [_a(3, 4)]),
    (
        "relu6_hardtanh",
        lambda lib, x: lib.nn.functional.relu6(x * 8) + lib.nn.functional.hardtanh(x, -0.3, 0.3),
        [_a(3, 4)],
    ),
    (
        "elu_selu_celu",
        lambda lib, x: (
            lib.nn.functional.elu(x) + lib.nn.functional.selu(x) + lib.nn.functional.celu(x, 2.0)
        ),
        [_a(3, 4)],
    ),
    ("prelu", lambda lib, x, w: lib.nn.functional.prelu(x, w), [_a(2, 3, 4), _a(3)]),
    (
        "softplus_threshold",
        lambda lib, x: lib.nn.functional.softplus(x * 30, beta=1.0, threshold=20.0),
        [_a(3, 4)],
    ),
    (
        "softmax_dtype",
        lambda lib, x: lib.nn.functional.softmax(x, dim=1, dtype=lib.float64),
        [_a(3, 4)],
    ),
    (
        "instance_norm",
        lambda lib, x, w, b: lib.nn.functional.instance_norm(x, weight=w, bias=b),
        [_a(2, 3, 5), _a(3), _a(3)],
    ),
    (
        "pixel_shuffle",
        lambda lib, x: lib.nn.functional.pixel_shuffle(lib.nn.functional.pixel_unshuffle(x, 3), 3),
        [_a(2, 1, 6, 3)],
    ),
    (
        "unfold_fold",
        lambda lib, x: lib.nn.functional.fold(lib.nn.functional.unfold(x, 2), (4, 4), 2),
        [_a(1, 2, 4, 4)],
    ),
    (
        "adaptive_max_pool2d",
        lambda lib, x: lib.nn.functional.adaptive_max_pool2d(x, 2),
        [_a(2, 3, 5, 4)],
    ),
    (
        "max_avg_pool3d",
        lambda lib, x: (
            lib.nn.functional.max_pool3d(x, 2, 1) + lib.nn.functional.avg_pool3d(x, 2, 1)
        ),
        [_a(1, 2, 3, 3, 3)],
    ),
    (
        "l1_smooth_huber",
        lambda lib, x, y: (
            lib.nn.functional.l1_loss(x, y)
            + lib.nn.functional.smooth_l1_loss(x, y)
            + lib.nn.functional.huber_loss(x, y, delta=0.3)
        ),
        [_a(3, 4), _a(3, 4)],
    ),
    (
        "kl_div_mean",
        lambda lib, x: lib.nn.functional.kl_div(x, lib.tensor(KL_TARGET), reduction="mean"),
        [_a(3, 4)],
    ),
]


@pytest.mark.parametrize("name, fn, arrays", FUNCTIONS, ids=[f[0] for f in FUNCTIONS])
def test_functions_match_torch(name, fn, arrays):
    same_gradients(fn, arrays)


def test_one_hot_and_dropout_variants():
    same_values(
        lambda lib, i: (
            lib.nn.functional.one_hot(i),
            lib.nn.functional.one_hot(i, 6),
            lib.nn.functional.one_hot(i.reshape(2, 2), 5),
        ),
        [np.array([0, 3, 1, 4])],
    )
    with pytest.raises(rg.IndexOutOfRangeError):
        F.one_hot(rg.tensor([3]), 2)
    rg.manual_seed(2)
    x = rg.ones(200, 50, 2, 2)
    out = F.dropout2d(x, 0.3)
    channels = out.numpy().reshape(200, 50, 4)
    assert np.all((channels == 0).all(-1) | np.isclose(channels, 1 / 0.7).all(-1))
    assert 0.25 < float((channels[..., 0] == 0).mean()) < 0.35
    assert F.dropout2d(x, 0.3, training=False) is x
    assert nn.Dropout1d(0.5).eval()(rg.ones(2, 3, 4)).tolist() == np.ones((2, 3, 4)).tolist()


# -- initializers ----------------------------------------------------------------------------------
def test_orthogonal_init_is_orthogonal_with_the_gain():
    for shape in ((5, 3), (3, 5), (4, 2, 3)):
        w = nn.Parameter(rg.zeros(*shape))
        assert nn.init.orthogonal_(w, gain=2.0) is w and w.is_require_grad()
        flat = w.numpy().reshape(shape[0], -1)
        gram = flat @ flat.T if shape[0] <= flat.shape[1] else flat.T @ flat
        np.testing.assert_allclose(gram, 4.0 * np.eye(gram.shape[0]), atol=1e-5)


def test_deterministic_inits_match_torch():
    for make in (
        lambda lib, t: lib.nn.init.eye_(t),
        lambda lib, t: lib.nn.init.constant(t, 0.3),
    ):
        ours, theirs = rg.zeros(3, 4), torch.zeros(3, 4)
        make(rg, ours)
        make(torch, theirs)
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    ours, theirs = rg.zeros(4, 2, 3, 3), torch.zeros(4, 2, 3, 3)
    nn.init.dirac_(ours, groups=2)
    torch.nn.init.dirac_(theirs, groups=2)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    w = rg.zeros(200, 300)
    nn.init.kaiming_normal(w)
    assert abs(float(w.std()) - np.sqrt(2.0 / 300)) < 0.003
    nn.init.normal(w, 1.0, 0.5)
    assert abs(float(w.mean()) - 1.0) < 0.01


# -- optimizers and schedules ---------------------------------------------------------------------
OPTIMIZERS = [
    ("Adadelta", {"lr": 0.5, "rho": 0.8, "weight_decay": 0.1}),
    (
        "Adagrad",
        {"lr": 0.1, "lr_decay": 0.01, "weight_decay": 0.05, "initial_accumulator_value": 0.2},
    ),
    ("Adamax", {"lr": 0.02, "betas": (0.8, 0.9), "weight_decay": 0.1}),
    ("NAdam", {"lr": 0.02, "weight_decay": 0.1}),
    ("NAdam", {"lr": 0.02, "weight_decay": 0.1, "decoupled_weight_decay": True}),
    ("RAdam", {"lr": 0.02, "weight_decay": 0.1}),
    (
        "RAdam",
        {"lr": 0.05, "betas": (0.9, 0.9), "decoupled_weight_decay": True, "weight_decay": 0.1},
    ),
    ("Rprop", {"lr": 0.05}),
    ("Rprop", {"lr": 0.01, "etas": (0.3, 1.5), "step_sizes": (1e-3, 0.02)}),
    ("ASGD", {"lr": 0.05}),
    ("ASGD", {"lr": 0.05, "t0": 3, "weight_decay": 0.1}),  # averaging from step 4
    ("Adafactor", {"lr": 0.05}),
    ("Adafactor", {"lr": 0.05, "weight_decay": 0.1, "eps": (1e-20, 1e-3), "d": 1.5}),
]


@pytest.mark.parametrize(
    "name, options", OPTIMIZERS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(OPTIMIZERS)]
)
def test_optimizers_match_torch(name, options):
    torch.manual_seed(1)
    theirs = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    theirs = theirs.double()
    ours = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    opt_theirs = getattr(torch.optim, name)(theirs.parameters(), **options)
    opt_ours = getattr(rg.optim, name)(ours.parameters(), **options)
    for step in range(8):  # RAdam's rectified branch starts after a few steps
        x, y = _a(5, 3), _a(5, 2)
        opt_theirs.zero_grad()
        ((theirs(torch.tensor(x)) - torch.tensor(y)) ** 2).sum().backward()
        opt_theirs.step()
        grads = ((ours(rg.tensor(x)) - rg.tensor(y)) ** 2).sum().backward()
        opt_ours.step(grads)
        for key, value in theirs.state_dict().items():
            np.testing.assert_allclose(
                ours.state_dict()[key], value.numpy(), rtol=1e-10, atol=1e-12, err_msg=f"{step}"
            )


SCHEDULES = [
    ("LambdaLR", {"lr_lambda": lambda epoch: 0.9**epoch + 0.1 * (epoch % 3)}),
    ("MultiplicativeLR", {"lr_lambda": lambda epoch: 0.9 if epoch % 2 else 0.8}),
    ("MultiStepLR", {"milestones": [2, 5, 6], "gamma": 0.3}),
    ("ExponentialLR", {"gamma": 0.8}),
    ("LinearLR", {"start_factor": 0.25, "total_iters": 4}),
    ("ConstantLR", {"factor": 0.5, "total_iters": 3}),
    ("PolynomialLR", {"total_iters": 6, "power": 2.0}),
]


@pytest.mark.parametrize("name, options", SCHEDULES, ids=[s[0] for s in SCHEDULES])
def test_schedules_match_torch(name, options):
    t_opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.5)
    r_opt = rg.optim.SGD([rg.zeros(1).require_grad()], lr=0.5)
    theirs = getattr(torch.optim.lr_scheduler, name)(t_opt, **options)
    ours = getattr(rg.optim.lr_scheduler, name)(r_opt, **options)
    for _ in range(9):
        assert ours.get_last_lr() == pytest.approx(theirs.get_last_lr(), rel=1e-12)
        t_opt.step()
        theirs.step()
        ours.step()
    state = ours.state_dict()
    assert state["last_epoch"] == theirs.state_dict()["last_epoch"]


def test_reduce_lr_on_plateau_matches_torch():
    t_opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    r_opt = rg.optim.SGD([rg.zeros(1).require_grad()], lr=1.0)
    options = {"factor": 0.5, "patience": 1, "threshold": 0.1, "cooldown": 1, "min_lr": 0.1}
    theirs = torch.optim.lr_scheduler.ReduceLROnPlateau(t_opt, **options)
    ours = rg.optim.lr_scheduler.ReduceLROnPlateau(r_opt, **options)
    for metric in [5.0, 4.9, 4.95, 4.0, 4.1, 4.2, 4.3, 4.35, 4.4, 1.0, 1.1, 1.2, 1.3]:
        theirs.step(metric)
        ours.step(rg.tensor(metric))
        assert r_opt.param_groups[0]["lr"] == pytest.approx(t_opt.param_groups[0]["lr"])


# -- module methods ------------------------------------------------------------------------------
def test_parameters_and_buffers_are_iterators_as_torch_s():
    model = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))
    first = next(model.parameters())
    assert first is model[0].weight
    assert len(list(model.parameters())) == 4 and len(list(model.buffers())) == 3
    reference = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.BatchNorm1d(3))
    assert type(model.parameters()).__name__ == type(reference.parameters()).__name__


def test_forward_hooks_as_torch_s():
    calls = []
    for lib in (rg, torch):
        layer = lib.nn.Linear(2, 2)

        def pre(module, args, lib=lib):
            calls.append((lib.__name__, "pre", type(module).__name__))
            return (args[0] * 2,)

        def post(module, args, output, lib=lib):
            calls.append((lib.__name__, "post"))
            return output + 1

        handle = layer.register_forward_pre_hook(pre)
        layer.register_forward_hook(post)
        x = lib.ones(1, 2)
        with lib.no_grad():
            hooked = layer(x)
            handle.remove()
            plain = layer(x)
            expected = (layer.weight @ (x * 2).T).T + layer.bias + 1
            reference = x @ layer.weight.T + layer.bias + 1
        np.testing.assert_allclose(hooked.numpy(), expected.numpy())
        np.testing.assert_allclose(plain.numpy(), reference.numpy())
    assert [c[1:] for c in calls if c[0] == "retrograd"] == [
        c[1:] for c in calls if c[0] == "torch"
    ]


def test_module_casts_and_devices_take_torch_s_forms():
    model = nn.Linear(2, 3)
    assert model.to(torch.float64) is model and model.weight.dtype == rg.float64
    model.to(rg.float32)
    model.type(rg.DoubleTensor)
    assert model.weight.dtype == rg.float64
    model.to(rg.zeros(1))
    assert model.weight.dtype == rg.float32
    assert model.cpu() is model
    # torch's share_memory returns the module, its tensors marked shared (sending one to
    # another process is refused: test_leftovers22_fixes.py)
    assert model.share_memory() is model and model.weight.is_shared()
    assert model.weight.share_memory_() is model.weight
    with pytest.raises(rg.DTypeError, match="computes on the CPU"):
        model.cuda()


def test_parameter_containers_name_their_members_as_torch_s():
    for lib in (rg, torch):
        params = lib.nn.ParameterList([lib.nn.Parameter(lib.zeros(2)), lib.ones(3)])
        params.append(lib.zeros(1))
        holder = lib.nn.Module()
        holder.params = params
        holder.table = lib.nn.ParameterDict({"a": lib.nn.Parameter(lib.zeros(2))})
        holder.table["b"] = lib.ones(1)
        names = [name for name, _ in holder.named_parameters()]
        assert isinstance(params[1], lib.nn.Parameter) and len(params) == 3
        if lib is rg:
            ours = names
    assert ours == names == ["params.0", "params.1", "params.2", "table.a", "table.b"]


def test_data_parallel_runs_the_module_and_prefixes_its_keys():
    model = nn.Linear(2, 2)
    wrapped = nn.DataParallel(model)
    reference = torch.nn.DataParallel(torch.nn.Linear(2, 2))
    assert list(wrapped.state_dict()) == list(reference.state_dict())
    x = rg.ones(3, 2)
    np.testing.assert_array_equal(wrapped(x).numpy(), model(x).numpy())
    np.testing.assert_array_equal(nn.parallel.data_parallel(model, x).numpy(), model(x).numpy())


def test_distributed_data_parallel_broadcasts_and_averages_as_torch_s():
    devices = [rg.Device("cpu", i) for i in range(2)]
    config = dist.DistributedConfig(all_reduce_op=dist.ReduceOperation.MEAN, timeout=20.0)
    xs = [_a(4, 3), _a(4, 3)]
    results: list = [None, None]
    errors: list = []
    backend = rg.Autodiff(inner_backend())

    import threading

    with dist.DistributedContext(devices, config) as ctx:

        def work(i: int) -> None:
            try:
                with rg.use_backend(backend):
                    rg.manual_seed(100 + i)  # replicas start apart: DDP makes them equal
                    model = nn.Linear(3, 2).double().to(devices[i])
                    ddp = nn.parallel.DistributedDataParallel(model, process_group=ctx)
                    start = {k: v.copy() for k, v in ddp.state_dict().items()}
                    x = rg.tensor(xs[i], device=devices[i])
                    grads = ddp(x).square().sum().backward()
                    results[i] = (start, [p.grad(grads).numpy() for p in ddp.parameters()])
            except BaseException as error:
                errors.append(error)

        threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert not errors, errors
    (start0, grads0), (start1, grads1) = results
    assert list(start0) == ["module.weight", "module.bias"]
    for key in start0:
        np.testing.assert_array_equal(start0[key], start1[key])
    reference = torch.nn.Linear(3, 2).double()
    reference.load_state_dict({k[len("module.") :]: torch.tensor(v) for k, v in start0.items()})
    ddp_reference = [None, None]
    for i in range(2):
        reference.zero_grad()
        reference(torch.tensor(xs[i])).square().sum().backward()
        ddp_reference[i] = [p.grad.numpy().copy() for p in reference.parameters()]
    for mine0, mine1, a, b in zip(grads0, grads1, *ddp_reference):
        np.testing.assert_allclose(mine0, (a + b) / 2, rtol=1e-12)
        np.testing.assert_allclose(mine1, (a + b) / 2, rtol=1e-12)
    # no_sync accumulates (tests/test_distributed_breadth_1.py); outside a context a backward
    # in it is a plain one
    ddp = nn.parallel.DistributedDataParallel(nn.Linear(1, 1))
    with ddp.no_sync():
        assert ddp.module.weight.grad(ddp(rg.ones((1, 1))).sum().backward()).tolist() == [[1.0]]


def test_nn_utils_clip_value_vectors_and_pad_sequence():
    same_values(
        lambda lib, a, b, c: (
            lib.nn.utils.rnn.pad_sequence([a, b, c]),
            lib.nn.utils.rnn.pad_sequence([a, b, c], batch_first=True, padding_value=-1.0),
        ),
        [_a(3, 2), _a(1, 2), _a(4, 2)],
    )
    same_values(
        lambda lib, a, b: lib.nn.utils.rnn.pad_sequence([a, b], batch_first=True),
        [np.array([1, 2, 3]), np.array([4])],
    )
    model = nn.Linear(2, 2)
    vector = nn.utils.parameters_to_vector(model.parameters())
    assert vector.shape == (6,)
    nn.utils.vector_to_parameters(vector * 0.0 + 1.0, model.parameters())
    assert model.weight.tolist() == [[1.0, 1.0], [1.0, 1.0]] and model.weight.is_require_grad()
    grads = (model(rg.tensor([[10.0, -10.0]])) * 100).sum().backward()
    nn.utils.clip_grad_value_(grads, model.parameters(), 0.5)
    assert float(model.weight.grad(grads).abs().max()) == 0.5


def test_torch_s_step_without_gradients_says_what_to_write_instead():
    optimizer = rg.optim.Adam(nn.Linear(2, 1).parameters())
    with pytest.raises(
        rg.AutodiffError, match=r"grads = loss.backward\(\); optimizer.step\(grads\)"
    ):
        optimizer.step()
    # step(closure) is torch's too: the closure returns (loss, grads) (tests/test_lbfgs.py)
    with pytest.raises(rg.InvalidArgumentError, match=r"return \(loss, grads\)"):
        optimizer.step(lambda: None)


@pytest.mark.parametrize("name", ["Rprop", "ASGD", "Adafactor"])
def test_state_of_every_shape_saves_loads_and_takes_torchs(name):
    """Adafactor keeps a row and a column statistic per matrix, not buffers of the weight's
    shape: its state dict, and torch's, load back and the steps continue bit for bit."""
    torch.manual_seed(0)
    theirs = torch.nn.Linear(3, 2).double()
    ours = nn.Linear(3, 2).double()
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    opt_theirs = getattr(torch.optim, name)(theirs.parameters(), lr=0.05)
    opt_ours = getattr(rg.optim, name)(ours.parameters(), lr=0.05)
    x = _a(4, 3)
    for _ in range(2):
        opt_theirs.zero_grad()
        (theirs(torch.tensor(x)) ** 2).sum().backward()
        opt_theirs.step()
        opt_ours.step((ours(rg.tensor(x)) ** 2).sum().backward())
    for saved in (opt_ours.state_dict(), opt_theirs.state_dict()):
        copy = nn.Linear(3, 2).double()
        copy.load_state_dict(ours.state_dict())
        resumed = getattr(rg.optim, name)(copy.parameters(), lr=0.05)
        resumed.load_state_dict(saved)
        resumed.step((copy(rg.tensor(x)) ** 2).sum().backward())
        reference = nn.Linear(3, 2).double()
        reference.load_state_dict(ours.state_dict())
        again = getattr(rg.optim, name)(reference.parameters(), lr=0.05)
        again.load_state_dict(opt_ours.state_dict())
        again.step((reference(rg.tensor(x)) ** 2).sum().backward())
        for mine, other in zip(copy.parameters(), reference.parameters()):
            np.testing.assert_allclose(mine.numpy(), other.numpy(), rtol=1e-12, atol=1e-14)
    bad = opt_ours.state_dict()
    if name == "Adafactor":
        bad["state"][0]["row_var"] = np.zeros((2, 3))
        with pytest.raises(
            rg.ShapeError, match=r"row_var has shape \[2, 3\].*state of shape \[2, 1\]"
        ):
            getattr(rg.optim, name)(nn.Linear(3, 2).double().parameters()).load_state_dict(bad)
