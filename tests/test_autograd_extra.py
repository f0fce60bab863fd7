"""rg.autograd: set_grad_enabled, gradcheck / gradgradcheck (against torch's verdicts on the
same functions, tolerances included), backward(tensors, grad_tensors) returning the
Gradients, and anomaly mode's NaN check."""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest

import retrograd as rg
from retrograd import autograd
from retrograd.errors import AutodiffError, ShapeError

torch = pytest.importorskip("torch")


def skewed(lib, factor: float):
    """sin(x) whose backward is off by ``factor`` (1.0: correct)."""

    class SkewedSin(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.sin()

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * x.cos() * factor

    return SkewedSin.apply


def inputs(lib, arrays, requires=None):
    requires = requires or [True] * len(arrays)
    if lib is torch:
        return tuple(torch.tensor(a, requires_grad=r) for a, r in zip(arrays, requires))
    return tuple(
        rg.tensor(a).require_grad() if r else rg.tensor(a) for a, r in zip(arrays, requires)
    )


FUNCTIONS = {
    "sin-product": (lambda lib: lambda x: x * x.sin(), [(3, 2)]),
    "matmul-tuple": (lambda lib: lambda a, b: (a @ b, (a * a).sum()), [(2, 3), (3, 4)]),
    "softmax": (lambda lib: lambda x: lib.nn.functional.softmax(x, dim=-1), [(2, 5)]),
    "tanh-cubed": (lambda lib: lambda x: x.tanh() ** 3, [(4,)]),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_gradcheck_and_gradgradcheck_agree_with_torch(name):
    build, shapes = FUNCTIONS[name]
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s) for s in shapes]
    assert torch.autograd.gradcheck(build(torch), inputs(torch, arrays))
    assert autograd.gradcheck(build(rg), inputs(rg, arrays)) is True
    assert torch.autograd.gradgradcheck(build(torch), inputs(torch, arrays))
    assert autograd.gradgradcheck(build(rg), inputs(rg, arrays)) is True


def test_an_input_not_requiring_grad_is_left_out():
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal((2, 2)), rng.standard_normal((2, 2))]
    fn = lambda lib: lambda a, b: a * b.exp()  # noqa: E731
    assert torch.autograd.gradcheck(fn(torch), inputs(torch, arrays, [True, False]))
    assert autograd.gradcheck(fn(rg), inputs(rg, arrays, [True, False]))


@pytest.mark.parametrize(
    ("factor", "tolerances"),
    [
        (1.0, {}),
        (1.0 + 5e-4, {}),  # inside torch's default rtol=1e-3
        (1.0 + 5e-4, {"rtol": 1e-4, "atol": 0.0}),
        (1.01, {}),
        (0.0, {}),
    ],
)
def test_verdicts_and_tolerances_match_torch(factor, tolerances):
    x = np.array([0.3, -1.2, 2.0, 0.7])
    try:
        expected = torch.autograd.gradcheck(
            skewed(torch, factor), inputs(torch, [x]), **tolerances, raise_exception=True
        )
    except sys.modules["torch.autograd.gradcheck"].GradcheckError:
        expected = False
    verdict = autograd.gradcheck(
        skewed(rg, factor), inputs(rg, [x]), **tolerances, raise_exception=False
    )
    assert verdict is expected
    if not expected:
        with pytest.raises(autograd.GradcheckError, match="Jacobian mismatch for output 0"):
            autograd.gradcheck(skewed(rg, factor), inputs(rg, [x]), **tolerances)
        assert issubclass(autograd.GradcheckError, RuntimeError)


def test_gradgradcheck_catches_a_wrong_second_derivative():
    class WrongSecond(rg.autograd.Function):
        """x**2 whose backward, 2 x g, is computed outside the graph: its own derivative
        is lost."""

        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * rg.tensor(2.0 * x.numpy())

    x = rg.tensor(np.array([0.5, -1.5])).require_grad()
    assert autograd.gradcheck(WrongSecond.apply, (x,))
    assert autograd.gradgradcheck(WrongSecond.apply, (x,), raise_exception=False) is False


def test_gradcheck_warnings_and_refusals():
    x32 = rg.tensor([1.0, 2.0], dtype="float32").require_grad()
    with pytest.warns(UserWarning, match="not a double precision"):
        autograd.gradcheck(lambda t: t * 2, (x32,), eps=1e-2, atol=1e-2, rtol=1e-2)
    x = rg.tensor([1.0, 2.0], dtype="float64").require_grad()
    with pytest.raises(AutodiffError, match="check_batched_grad"):
        autograd.gradcheck(lambda t: t * 2, (x,), check_batched_grad=True)
    with pytest.raises(AutodiffError, match="at least one input"):
        autograd.gradcheck(lambda t: t * 2, (rg.tensor([1.0]),))


def test_backward_returns_the_gradients_torch_accumulates():
    rng = np.random.default_rng(2)
    a, w1, w2 = rng.standard_normal(3), rng.standard_normal(3), rng.standard_normal(())
    ta = torch.tensor(a, requires_grad=True)
    torch.autograd.backward([ta * ta, ta.sin().sum()], [torch.tensor(w1), torch.tensor(w2)])
    x = rg.tensor(a).require_grad()
    grads = autograd.backward([x * x, x.sin().sum()], [rg.tensor(w1), rg.tensor(w2)])
    np.testing.assert_allclose(x.grad(grads).numpy(), ta.grad.numpy(), rtol=1e-12)
    grads = autograd.backward((x * x * x).sum(), create_graph=True)
    second = autograd.backward(x.grad(grads).sum())  # the gradient is itself differentiable
    np.testing.assert_allclose(x.grad(second).numpy(), 6 * a, rtol=1e-12)
    with pytest.raises(AutodiffError, match="only for scalar outputs"):
        autograd.backward(x * x)
    with pytest.raises(ShapeError, match="gradient of shape"):
        autograd.backward(x * x, rg.ones((2,)))
    assert autograd.set_grad_enabled is rg.set_grad_enabled
    with autograd.set_grad_enabled(False):
        assert not (x * 2).requires_grad


def test_anomaly_mode_checks_for_nan():
    x = rg.tensor([0.0, 4.0]).require_grad()
    assert not autograd.is_anomaly_enabled()
    with pytest.warns(UserWarning, match="Anomaly Detection has been enabled"):
        mode = autograd.detect_anomaly()
    with mode, np.errstate(invalid="ignore", divide="ignore"):
        assert autograd.is_anomaly_enabled()
        with pytest.raises(AutodiffError, match="nan values"):
            autograd.backward((x.sqrt() * 0.0).sum())
        with pytest.raises(AutodiffError, match="'SqrtBackward0' returned nan values in its 0th"):
            autograd.grad((x.sqrt() * 0.0).sum(), x)
        clean = autograd.backward((x * x).sum())
        assert x.grad(clean).tolist() == [0.0, 8.0]
    assert not autograd.is_anomaly_enabled()
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        grads = autograd.backward((x.sqrt() * 0.0).sum())  # off: NaN comes back unchecked
        assert np.isnan(x.grad(grads).numpy()[0])
        with autograd.set_detect_anomaly(True, check_nan=False):
            assert autograd.is_anomaly_enabled() and not autograd.is_anomaly_check_nan_enabled()
            autograd.backward((x.sqrt() * 0.0).sum())
    assert not autograd.is_anomaly_enabled() and autograd.is_anomaly_check_nan_enabled()


def test_a_wgan_gp_penalty_written_with_only_inputs():
    """The gradient penalty as WGAN-GP code writes it (``only_inputs=True``, deprecated and
    ignored in torch), against torch's: the penalty and every parameter's gradient."""
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).standard_normal((5, 4))

    def critic(lib):
        lib.manual_seed(0)
        return lib.nn.Sequential(lib.nn.Linear(4, 8), lib.nn.Tanh(), lib.nn.Linear(8, 1)).double()

    ours, theirs = critic(rg), critic(torch)
    theirs.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in ours.state_dict().items()})

    def penalty(lib, model):
        interpolates = lib.tensor(x, requires_grad=True)
        out = model(interpolates)
        gradients = lib.autograd.grad(
            outputs=out,
            inputs=interpolates,
            grad_outputs=lib.ones_like(out),
            create_graph=True,
            retain_graph=True,
            only_inputs=True,
        )[0]
        return ((gradients.norm(2, dim=1) - 1) ** 2).mean()

    ours_penalty, theirs_penalty = penalty(rg, ours), penalty(torch, theirs)
    grads = ours_penalty.backward()
    theirs_penalty.backward()
    np.testing.assert_allclose(ours_penalty.item(), theirs_penalty.item(), rtol=1e-13)
    for p, q in zip(ours.parameters(), theirs.parameters(), strict=True):
        if q.grad is None or not q.grad.abs().sum():  # the last bias: no path to the penalty
            assert p.grad(grads) is None or not p.grad(grads).abs().sum().item()
        else:
            np.testing.assert_allclose(
                p.grad(grads).numpy(), q.grad.numpy(), rtol=1e-10, atol=1e-14
            )
    with pytest.warns(UserWarning, match="only_inputs argument is deprecated"):
        w = rg.tensor([1.0]).require_grad()
        rg.autograd.grad((w * w).sum(), w, only_inputs=False)


# -- is_grads_batched (found by realports8's probes of PINN code: Jacobians by torch.eye) ----------
def _batched_case(lib):
    x = lib.tensor([0.5, -1.0, 2.0], dtype=lib.float64, requires_grad=True)
    y = lib.stack([x[0] * x[1], (x[2] ** 3).sin(), x.sum()])
    return x, y


def test_is_grads_batched_gives_torchs_jacobian_and_hessian():
    import torch

    got, expected = [], []
    for lib, out in ((rg, got), (torch, expected)):
        x, y = _batched_case(lib)
        eye = lib.eye(3, dtype=lib.float64)
        (jac,) = lib.autograd.grad(y, x, eye, create_graph=True, is_grads_batched=True)
        # the Hessian of y[1] by a second batched grad of the Jacobian's row
        (hess,) = lib.autograd.grad(jac[1], x, eye, retain_graph=True, is_grads_batched=True)
        (penalty,) = lib.autograd.grad((jac**2).sum(), x)
        out += [jac.detach().numpy(), hess.numpy(), penalty.numpy()]
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)


def test_is_grads_batched_unused_inputs_and_errors_as_torch():
    x, y = _batched_case(rg)
    z = rg.tensor([1.0], dtype=rg.float64, requires_grad=True)
    eye = rg.eye(3, dtype=rg.float64)
    jac, unused = autograd.grad(y, [x, z], eye, retain_graph=True, is_grads_batched=True,
                                allow_unused=True)  # fmt: skip
    assert tuple(jac.shape) == (3, 3) and unused is None
    # torch's materialize_grads: zeros of the input's own shape (not batched)
    _, zeros = autograd.grad(y, [x, z], eye, retain_graph=True, is_grads_batched=True,
                             materialize_grads=True)  # fmt: skip
    assert zeros.tolist() == [0.0]
    with pytest.raises(AutodiffError, match="allow_unused"):
        autograd.grad(y, [x, z], eye, retain_graph=True, is_grads_batched=True)
    with pytest.raises(ShapeError, match=r"autograd\.grad: .*\[B, \*output\.shape\].*\[3\]"):
        autograd.grad(y, x, rg.ones(3, dtype=rg.float64), is_grads_batched=True)
    with pytest.raises(AutodiffError, match="needs grad_outputs"):
        autograd.grad(y, x, is_grads_batched=True)
