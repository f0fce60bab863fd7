"""Round 65's defects in mixed precision, each against torch.

- SGD on the torch inner backend left most of a float16 or bfloat16 parameter unstepped: the
  CPU's ``torch._fused_sgd_`` writes only the tail past its 16-element chunks in those dtypes,
  so a ``model.half()``/``.bfloat16()`` trained with SGD kept its weights;
- the refusal of operands of different dtypes by an op that does not promote them (a matrix
  product, ``linear``, a convolution, ``layer_norm``'s parameters) -- what mixed-precision
  code meets inside ``autocast(enabled=False)`` -- was a ``TypeError`` only, where torch
  raises a ``RuntimeError``;
- ``GradScaler.update()`` before any ``step()`` raised a ``RuntimeError``, where torch asserts
  (an ``AssertionError``); a ``step()`` for an optimizer none of whose parameters has a
  gradient stepped and grew the scale, where torch asserts; unscaling float16 gradients was
  a ``TypeError`` only, where torch raises a ``ValueError``.
"""

from __future__ import annotations

import numpy as np
import pytest

import backends
import retrograd as rg

torch = pytest.importorskip("torch")


# -- SGD on half-precision parameters ---------------------------------------------------------
@pytest.mark.skipif(not backends.on_torch(), reason="NumPy inner backend has no half dtypes")
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(
    "settings",
    [{}, {"momentum": 0.9}, {"momentum": 0.9, "nesterov": True, "weight_decay": 0.01},
     {"momentum": 0.5, "dampening": 0.3}],
    ids=["plain", "momentum", "nesterov", "dampening"],
)  # fmt: skip
def test_sgd_steps_every_element_of_a_half_precision_parameter(dtype, settings):
    values = np.linspace(-1.0, 1.0, 40).reshape(5, 8)  # 40 elements: two 16-element chunks
    mine = rg.tensor(values).to(getattr(rg, dtype)).require_grad()
    theirs = torch.tensor(values).to(getattr(torch, dtype)).requires_grad_()
    opt = rg.optim.SGD([mine], lr=0.05, **settings)
    their_opt = torch.optim.SGD([theirs], lr=0.05, **settings)
    for _ in range(3):
        opt.step((mine * mine * mine).sum().backward())
        their_opt.zero_grad()
        (theirs * theirs * theirs).sum().backward()
        their_opt.step()
    assert mine.dtype == dtype
    # torch eager's single-tensor loop, op for op: the same bits
    np.testing.assert_array_equal(mine.float().numpy(), theirs.detach().float().numpy())
    assert not np.array_equal(mine.float().numpy()[0], values[0])


# -- mixed dtypes refused as torch's RuntimeError -----------------------------------------------
X = np.arange(6.0).reshape(2, 3) / 5


def _mixed(lib):
    """(what, call) pairs whose operands are float64 and float32."""
    F = lib.nn.functional  # noqa: N806
    x64, w32 = lib.tensor(X, dtype=lib.float64), lib.tensor(X.T, dtype=lib.float32)
    return {
        "matmul": lambda: x64 @ w32,
        "mm": lambda: lib.mm(x64, w32),
        "addmm": lambda: lib.addmm(lib.zeros(2, 2, dtype=lib.float64), x64, w32),
        "bmm": lambda: lib.bmm(x64[None], w32[None]),
        "linear": lambda: F.linear(x64, w32.T),
        "linear bias": lambda: F.linear(x64, w32.T.double(), lib.zeros(2, dtype=lib.float32)),
        "conv1d": lambda: F.conv1d(x64[None], w32.T[:, :, None]),
        "layer_norm": lambda: F.layer_norm(x64, (3,), lib.ones(3, dtype=lib.float32)),
    }


@pytest.mark.parametrize("op", sorted(_mixed(rg)))
def test_operands_of_two_dtypes_are_refused_with_torchs_runtime_error(op):
    with pytest.raises(RuntimeError):
        _mixed(torch)[op]()
    with pytest.raises(rg.DTypeError) as caught:
        _mixed(rg)[op]()
    assert isinstance(caught.value, RuntimeError)
    assert "float64" in str(caught.value) and "float32" in str(caught.value)


# -- GradScaler.update() out of order ---------------------------------------------------------
def test_grad_scaler_update_before_any_step_asserts_as_torchs():
    with pytest.raises(AssertionError):
        torch.amp.GradScaler("cpu").update()
    scaler = rg.amp.GradScaler("cpu")
    with pytest.raises(rg.AutodiffError, match="update") as caught:
        scaler.update()
    assert isinstance(caught.value, AssertionError)
    # and again after a full iteration, as torch's ("No inf checks were recorded")
    weight = rg.tensor([1.0, 2.0]).require_grad()
    opt = rg.optim.SGD([weight], lr=0.1)
    scaler.step(opt, scaler.scale((weight * weight).sum()).backward())
    scaler.update()
    with pytest.raises(AssertionError):
        scaler.update()


def _no_gradient_step(lib):
    """A scaler's step for an optimizer none of whose parameters the loss reached."""
    used, unused = lib.tensor([1.0, 2.0]), lib.tensor([3.0])
    used = used.requires_grad_() if lib is torch else used.require_grad()
    unused = unused.requires_grad_() if lib is torch else unused.require_grad()
    opt = lib.optim.SGD([unused], lr=0.1)
    scaler = lib.amp.GradScaler("cpu")
    scaled = scaler.scale((used * used).sum())
    if lib is torch:
        scaled.backward()
        step = lambda: scaler.step(opt)  # noqa: E731
    else:
        grads = scaled.backward()
        step = lambda: scaler.step(opt, grads)  # noqa: E731
    return scaler, step, unused


def test_grad_scaler_step_with_no_gradient_asserts_as_torchs():
    # torch: "No inf checks were recorded for this optimizer", then the same for update();
    # the step was taken (on no gradient) and the scale grown before
    for lib in (torch, rg):
        scaler, step, unused = _no_gradient_step(lib)
        with pytest.raises(AssertionError):
            step()
        with pytest.raises(AssertionError):
            scaler.update()
        assert scaler.get_scale() == 2.0**16
        assert unused.detach().numpy().tolist() == [3.0]


@pytest.mark.skipif(not backends.on_torch(), reason="NumPy inner backend has no float16")
def test_unscaling_float16_gradients_is_torchs_value_error():
    v = rg.tensor([1.0], dtype=rg.float16).require_grad()
    opt = rg.optim.SGD([v], lr=0.1)
    scaler = rg.amp.GradScaler("cpu")
    grads = scaler.scale((v * v).sum()).backward()
    # (torch's: ValueError "Attempting to unscale FP16 gradients.", tests/test_fuzz19_regressions)
    with pytest.raises(ValueError, match="float16"):
        scaler.unscale_(opt, grads)
