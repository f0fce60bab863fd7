"""torch's AMP names (``autocast``, ``GradScaler``), ``torch.backends`` flags, ``compile``, and
the process-wide settings and dtype queries (amp.py, backends.py, runtime_settings.py),
against torch where torch answers.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
import torch

import retrograd as rg
from retrograd import amp, nn, optim

DTYPES = ["bool", "int64", "float32", "float64"]


def test_compile_wraps_the_model_and_works_as_a_decorator():
    model = nn.Linear(3, 2)
    assert rg.compile(model)._orig_mod is model  # torch's OptimizedModule (test_leftovers_13)
    compiled = rg.compile(model, mode="max-autotune", fullgraph=True, dynamic=False)
    assert compiled._orig_mod is model

    @rg.compile(mode="reduce-overhead")
    def double(x):
        return x * 2

    assert double(rg.tensor([1.0])).tolist() == [2.0]
    with pytest.raises(rg.InvalidArgumentError, match="compile"):
        rg.compile(3)


def test_autocast_disabled_is_silent_and_cuda_without_a_gpu_is_turned_off_as_torchs():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with rg.autocast("cpu", enabled=False):
            out = (rg.ones((2,)) * 3).sum()
            assert rg.is_autocast_enabled("cpu") is False
        with rg.cuda.amp.autocast(enabled=False):
            pass
    assert out.dtype == "float32"
    # no backend computes on a GPU: torch's warning, and the region is off
    with (
        pytest.warns(UserWarning, match="CUDA is not available"),
        rg.amp.autocast("cuda", dtype=rg.float16),
    ):
        assert rg.is_autocast_enabled("cuda") is False
        out = rg.ones((2, 2), dtype="float32") @ rg.ones((2, 2), dtype="float32")
    assert out.dtype == "float32"
    with pytest.raises(rg.InvalidArgumentError, match="device_type"):
        rg.autocast("gpu")


@pytest.mark.numpy_only("NumPy has no bfloat16: the documented full-precision fallback")
def test_autocast_on_numpy_warns_once_and_computes_in_the_inputs_dtypes(monkeypatch):
    monkeypatch.setattr(amp, "_warned_no_dtype", set())
    with pytest.warns(RuntimeWarning, match="has no bfloat16"), rg.autocast("cpu"):
        assert rg.is_autocast_enabled("cpu") is True
        out = rg.ones((2, 2)) @ rg.ones((2, 2))
    assert out.dtype == "float32"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with rg.autocast("cpu", dtype=rg.bfloat16):  # the warning was given already
            pass


def _twin_training(grad_inf_steps, growth_interval=2):
    """Five steps of SGD under a GradScaler, here and in torch, with the gradient of the
    listed steps made infinite through the loss; the scales and parameters after each."""
    w0 = np.array([[0.5, -1.0], [2.0, 0.25]])
    x = np.array([[1.0, 2.0], [-1.0, 0.5]])
    ours, theirs = [], []

    w = rg.tensor(w0).require_grad()
    opt = optim.SGD([w], lr=0.1)
    scaler = rg.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=growth_interval)
    for step in range(5):
        loss = (rg.tensor(x) @ w).square().sum()
        if step in grad_inf_steps:
            loss = loss * float("inf")
        grads = scaler.scale(loss).backward()
        scaler.step(opt, grads)
        scaler.update()
        ours.append((scaler.get_scale(), w.numpy().copy()))

    tw = torch.tensor(w0, requires_grad=True)
    topt = torch.optim.SGD([tw], lr=0.1)
    tscaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=growth_interval)
    for step in range(5):
        topt.zero_grad()
        loss = (torch.tensor(x) @ tw).square().sum()
        if step in grad_inf_steps:
            loss = loss * float("inf")
        tscaler.scale(loss).backward()
        tscaler.step(topt)
        tscaler.update()
        theirs.append((tscaler.get_scale(), tw.detach().numpy().copy()))
    return ours, theirs


@pytest.mark.parametrize("grad_inf_steps", [(), (1,), (0, 3)])
def test_grad_scaler_scales_skips_and_grows_as_torch(grad_inf_steps):
    ours, theirs = _twin_training(grad_inf_steps)
    for (scale, w), (tscale, tw) in zip(ours, theirs):
        assert scale == tscale
        np.testing.assert_allclose(w, tw, rtol=1e-12)


def test_grad_scaler_unscale_before_clipping_and_its_state():
    w = rg.tensor([3.0, 4.0], dtype="float64").require_grad()
    opt = optim.SGD([w], lr=1.0)
    scaler = rg.amp.GradScaler("cpu", init_scale=8.0)
    grads = scaler.scale((w * w).sum()).backward()
    assert w.grad(grads).tolist() == [48.0, 64.0]  # scaled
    scaler.unscale_(opt, grads)
    assert w.grad(grads).tolist() == [6.0, 8.0]
    with pytest.raises(rg.AutodiffError, match="already been called"):
        scaler.unscale_(opt, grads)
    rg.nn.utils.clip_grad_norm_(grads, [w], 1.0)
    scaler.step(opt, grads)  # not unscaled twice
    scaler.update()
    np.testing.assert_allclose(w.numpy(), [3.0 - 0.6, 4.0 - 0.8], rtol=1e-6)
    state = scaler.state_dict()
    other = rg.amp.GradScaler("cpu")
    other.load_state_dict(state)
    assert other.state_dict() == state
    disabled = rg.cuda.amp.GradScaler(enabled=False)
    loss = (w * 2).sum()
    assert disabled.scale(loss) is loss and disabled.get_scale() == 1.0
    assert disabled.state_dict() == {}


def test_backends_flags_are_kept_and_queries_answer():
    rg.backends.cudnn.benchmark = True
    rg.backends.cuda.matmul.allow_tf32 = True
    assert rg.backends.cudnn.benchmark and rg.backends.cuda.matmul.allow_tf32
    rg.backends.cudnn.benchmark = False
    assert rg.backends.mps.is_available() is False
    assert rg.backends.cudnn.is_available() == rg.cuda.is_available()


def test_dtype_queries_match_torch():
    for a, b in itertools.product(DTYPES, DTYPES):
        theirs = torch.promote_types(getattr(torch, a), getattr(torch, b))
        assert rg.promote_types(a, b) == str(theirs).removeprefix("torch.")
        assert rg.can_cast(a, b) == torch.can_cast(getattr(torch, a), getattr(torch, b))
    operands = [([1, 2], "int64"), ([1.0], "float32"), (2.0, "float64"), ([True], "bool")]
    for (x, xd), (y, yd) in itertools.product(operands, operands):
        ours = rg.result_type(rg.tensor(x, dtype=xd), rg.tensor(y, dtype=yd))
        theirs = torch.result_type(
            torch.tensor(x, dtype=getattr(torch, xd)), torch.tensor(y, dtype=getattr(torch, yd))
        )
        assert ours == str(theirs).removeprefix("torch."), (x, xd, y, yd)
    for scalar in (2, 2.5, True):
        for x, xd in operands:
            ours = rg.result_type(rg.tensor(x, dtype=xd), scalar)
            theirs = torch.result_type(torch.tensor(x, dtype=getattr(torch, xd)), scalar)
            assert ours == str(theirs).removeprefix("torch."), (x, xd, scalar)


def test_default_dtype_is_float32_and_can_be_changed_as_torchs():
    """The full behaviour is tests/test_default_dtype.py's; here the query and the setter."""
    assert rg.get_default_dtype() == "float32" == str(torch.get_default_dtype())[6:]
    rg.set_default_dtype(rg.float64)
    try:
        assert rg.get_default_dtype() == "float64"
        assert rg.tensor([0.5]).dtype == rg.zeros(1).dtype == "float64"
        assert rg.result_type(2.5, 1) == "float64"
    finally:
        rg.set_default_dtype(rg.float32)
    assert rg.get_default_dtype() == "float32" == rg.tensor(0.5).dtype
    with pytest.raises(TypeError):
        torch.set_default_dtype(torch.int64)
    with pytest.raises(rg.DTypeError, match=r"set_default_dtype: only floating-point.*int64"):
        rg.set_default_dtype(rg.int64)


def test_threads_and_determinism_settings():
    before = rg.get_num_threads()
    rg.set_num_threads(1)
    assert rg.get_num_threads() == 1
    rg.set_num_threads(before)
    with pytest.raises(rg.InvalidArgumentError, match="set_num_threads"):
        rg.set_num_threads(0)
    rg.use_deterministic_algorithms(True)
    assert rg.are_deterministic_algorithms_enabled()
    rg.use_deterministic_algorithms(False)


def test_printoptions_change_how_tensors_print():
    try:
        rg.set_printoptions(precision=2)
        assert repr(rg.tensor([1 / 3])) == "tensor([0.33])"  # torch's
        assert rg.get_printoptions()["precision"] == 2
        rg.set_printoptions(threshold=5, edgeitems=1)
        assert "..." in repr(rg.arange(0, 100))
    finally:
        rg.set_printoptions(profile="default")
    assert repr(rg.tensor([1 / 3])) == "tensor([0.3333])"
    with pytest.raises(rg.InvalidArgumentError, match="profile"):
        rg.set_printoptions(profile="long")
