"""``autocast``: torch's CPU op lists applied where the inner backend has the lower dtype
(torch's), each result compared with torch's autocast run on the same inputs; the region's
state (nesting, ``enabled=False``, the decorator, the per-thread flags, the weight cache),
``custom_fwd``/``custom_bwd``, and NumPy's documented full-precision fallback.
"""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as TF  # noqa: N812 (torch's and retrograd's F side by side)

import backends
import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812
from retrograd import amp
from retrograd.context import current_backend

on_torch_only = pytest.mark.skipif(
    not backends.on_torch(), reason="NumPy inner backend has no bfloat16 to autocast to"
)

RNG = np.random.RandomState(291)


def _pair(*shape: int) -> tuple:
    values = RNG.randn(*shape).astype(np.float32)
    return rg.tensor(values), torch.tensor(values)


X, TX = _pair(4, 6)
W, TW = _pair(5, 6)
B, TB = _pair(5)
A3, TA3 = _pair(2, 3, 4)
B3, TB3 = _pair(2, 4, 5)
IMG, TIMG = _pair(2, 3, 8, 8)
K, TK = _pair(4, 3, 3, 3)
SIG, TSIG = _pair(2, 3, 10)
K1, TK1 = _pair(4, 3, 3)
Q4, TQ4 = _pair(2, 2, 5, 8)

# op -> (retrograd's call, torch's call): float32 inputs, computed in bfloat16 by both
LOWER = {
    "linear": (lambda: F.linear(X, W, B), lambda: TF.linear(TX, TW, TB)),
    "matmul": (lambda: X @ W.T, lambda: TX @ TW.T),
    "mm": (lambda: rg.mm(X, W.T), lambda: torch.mm(TX, TW.T)),
    "bmm": (lambda: rg.bmm(A3, B3), lambda: torch.bmm(TA3, TB3)),
    "addmm": (lambda: rg.addmm(B, X, W.T), lambda: torch.addmm(TB, TX, TW.T)),
    "baddbmm": (lambda: rg.baddbmm(A3 @ B3, A3, B3), lambda: torch.baddbmm(TA3 @ TB3, TA3, TB3)),
    "einsum": (lambda: rg.einsum("ij,kj->ik", X, W), lambda: torch.einsum("ij,kj->ik", TX, TW)),
    "tensordot": (
        lambda: rg.tensordot(X, W, ([1], [1])),
        lambda: torch.tensordot(TX, TW, ([1], [1])),
    ),
    "vecdot": (lambda: rg.linalg.vecdot(X, X), lambda: torch.linalg.vecdot(TX, TX)),
    "conv1d": (lambda: F.conv1d(SIG, K1), lambda: TF.conv1d(TSIG, TK1)),
    "conv2d": (lambda: F.conv2d(IMG, K, padding=1), lambda: TF.conv2d(TIMG, TK, padding=1)),
    "conv_transpose2d": (
        lambda: F.conv_transpose2d(IMG, K.transpose(0, 1)),
        lambda: TF.conv_transpose2d(TIMG, TK.transpose(0, 1)),
    ),
    "prelu": (lambda: F.prelu(X, rg.tensor([0.25])), lambda: TF.prelu(TX, torch.tensor([0.25]))),
    "sdpa": (
        lambda: F.scaled_dot_product_attention(Q4, Q4, Q4),
        lambda: TF.scaled_dot_product_attention(TQ4, TQ4, TQ4),
    ),
}

# op -> calls on bfloat16 inputs (a linear layer's output) that torch computes in float32
LABELS = [0, 1, 2, 3]
FP32 = {
    "cross_entropy": (
        lambda: F.cross_entropy(F.linear(X, W, B), rg.tensor(LABELS)),
        lambda: TF.cross_entropy(TF.linear(TX, TW, TB), torch.tensor(LABELS)),
    ),
    "mse_loss": (
        lambda: F.mse_loss(F.linear(X, W, B), rg.ones((4, 5))),
        lambda: TF.mse_loss(TF.linear(TX, TW, TB), torch.ones(4, 5)),
    ),
    "l1_loss": (
        lambda: F.l1_loss(F.linear(X, W, B), rg.ones((4, 5))),
        lambda: TF.l1_loss(TF.linear(TX, TW, TB), torch.ones(4, 5)),
    ),
    "bce_with_logits": (
        lambda: F.binary_cross_entropy_with_logits(F.linear(X, W, B), rg.ones((4, 5)) * 0.5),
        lambda: TF.binary_cross_entropy_with_logits(TF.linear(TX, TW, TB), torch.ones(4, 5) / 2),
    ),
    "prod": (lambda: F.linear(X, W).prod(), lambda: TF.linear(TX, TW).prod()),
    "pad_reflect": (
        lambda: F.pad(F.conv2d(IMG, K), (1, 1, 1, 1), mode="reflect"),
        lambda: TF.pad(TF.conv2d(TIMG, TK), (1, 1, 1, 1), mode="reflect"),
    ),
}

# ops on no list: they compute in their inputs' dtypes, as torch's
UNLISTED = {
    "mv": (lambda: rg.mv(X, X[0]), lambda: torch.mv(TX, TX[0])),
    "softmax": (lambda: F.softmax(F.linear(X, W), -1), lambda: TF.softmax(TF.linear(TX, TW), -1)),
    "layer_norm": (
        lambda: F.layer_norm(F.linear(X, W, B), (5,)),
        lambda: TF.layer_norm(TF.linear(TX, TW, TB), (5,)),
    ),
    "residual_add": (lambda: F.linear(X, W) + B, lambda: TF.linear(TX, TW) + TB),
    "float64": (lambda: X.double() @ W.double().T, lambda: TX.double() @ TW.double().T),
}


def _run_both(ours, theirs, **region):
    with rg.autocast("cpu", **region):
        mine = ours()
    with torch.autocast(
        "cpu", **{k: getattr(torch, v) if k == "dtype" else v for k, v in region.items()}
    ):
        reference = theirs()
    return mine, reference


def _dtype_name(t) -> str:
    return str(t.dtype).rpartition(".")[2]


@on_torch_only
@pytest.mark.parametrize("op", sorted(LOWER))
def test_lower_precision_ops_match_torchs_autocast_bit_for_bit(op):
    mine, reference = _run_both(*LOWER[op])
    assert _dtype_name(mine) == _dtype_name(reference) == "bfloat16"
    np.testing.assert_array_equal(mine.float().numpy(), reference.float().numpy())


@on_torch_only
@pytest.mark.parametrize("op", ["linear", "conv2d", "bmm"])
def test_float16_autocast_matches_torchs(op):
    mine, reference = _run_both(*LOWER[op], dtype="float16")
    assert _dtype_name(mine) == _dtype_name(reference) == "float16"
    np.testing.assert_array_equal(mine.float().numpy(), reference.float().numpy())


@on_torch_only
@pytest.mark.parametrize("op", sorted(FP32))
def test_float32_ops_compute_bfloat16_inputs_in_float32_as_torchs(op):
    mine, reference = _run_both(*FP32[op])
    assert _dtype_name(mine) == _dtype_name(reference) == "float32"
    # the same float32 arithmetic on the same bfloat16 inputs, to float32 rounding
    # (retrograd's mean of the picked log-probabilities sums in another order than torch's
    # nll_loss kernel: a last-bit difference)
    np.testing.assert_allclose(mine.numpy(), reference.detach().numpy(), rtol=1e-6, atol=0)


@on_torch_only
@pytest.mark.parametrize("op", sorted(UNLISTED))
def test_unlisted_ops_compute_in_their_inputs_dtypes_as_torchs(op):
    mine, reference = _run_both(*UNLISTED[op])
    assert _dtype_name(mine) == _dtype_name(reference)
    np.testing.assert_array_equal(mine.float().numpy(), reference.float().detach().numpy())


def _mlp_grads(cache_enabled: bool):
    """An MLP whose output weight is used twice, trained one step under autocast here and in
    torch: the loss and the parameters' gradients of both."""
    w1, b1, w2 = (RNG.randn(*s).astype(np.float32) * 0.3 for s in ((16, 8), (16,), (4, 16)))
    x, y = RNG.randn(10, 8).astype(np.float32), RNG.randint(0, 4, 10)
    ours = [rg.nn.Parameter(rg.tensor(a)) for a in (w1, b1, w2)]
    theirs = [torch.tensor(a, requires_grad=True) for a in (w1, b1, w2)]
    with rg.autocast("cpu", cache_enabled=cache_enabled):
        hidden = F.relu(F.linear(rg.tensor(x), ours[0], ours[1]))
        out = F.linear(hidden, ours[2]) + F.linear(hidden * 2, ours[2])
        loss = F.mse_loss(out, rg.tensor(np.eye(4, dtype=np.float32)[y]))
    grads = loss.backward()
    with torch.autocast("cpu", cache_enabled=cache_enabled):
        hidden = TF.relu(TF.linear(torch.tensor(x), theirs[0], theirs[1]))
        out = TF.linear(hidden, theirs[2]) + TF.linear(hidden * 2, theirs[2])
        their_loss = TF.mse_loss(out, torch.tensor(np.eye(4, dtype=np.float32)[y]))
    their_loss.backward()
    return loss, [p.grad(grads) for p in ours], their_loss, [p.grad for p in theirs]


@on_torch_only
@pytest.mark.parametrize("cache_enabled", [True, False])
def test_gradients_flow_back_in_the_parameters_dtype_as_torchs(cache_enabled):
    loss, grads, their_loss, their_grads = _mlp_grads(cache_enabled)
    assert loss.dtype == "float32" and loss.item() == their_loss.item()
    for mine, reference in zip(grads, their_grads, strict=True):
        assert mine.dtype == "float32" and reference.dtype is torch.float32
        np.testing.assert_array_equal(mine.numpy(), reference.numpy())


@on_torch_only
def test_a_training_loop_in_one_region_casts_the_weights_again_after_each_backward():
    # the cached cast of a weight carries one backward; the next step casts the updated
    # weight (torch's cache would hand out the stale cast of the weight's first values)
    w0 = RNG.randn(3, 4).astype(np.float32)
    x = RNG.randn(5, 4).astype(np.float32)
    w = rg.nn.Parameter(rg.tensor(w0))
    opt = rg.optim.SGD([w], lr=0.1)
    ours = []
    with rg.autocast("cpu"):
        for _ in range(3):
            loss = F.linear(rg.tensor(x), w).float().square().mean()
            opt.step(loss.backward())
            ours.append(loss.item())
    tw = torch.tensor(w0, requires_grad=True)
    topt = torch.optim.SGD([tw], lr=0.1)
    theirs = []
    for _ in range(3):  # torch's run with a region per step: fresh casts each time
        topt.zero_grad()
        with torch.autocast("cpu"):
            loss = TF.linear(torch.tensor(x), tw).float().square().mean()
        loss.backward()
        topt.step()
        theirs.append(loss.item())
    assert ours == theirs


@on_torch_only
def test_nesting_enabled_false_and_the_dtype_are_restored():
    assert not rg.is_autocast_enabled("cpu")
    with rg.autocast("cpu"):
        assert rg.is_autocast_enabled("cpu") and rg.get_autocast_dtype("cpu") == rg.bfloat16
        assert (X @ W.T).dtype == "bfloat16"
        with rg.autocast("cpu", enabled=False):
            assert not rg.is_autocast_enabled("cpu")
            assert (X @ W.T).dtype == "float32"
            with rg.autocast("cpu", dtype=rg.float16):
                assert rg.get_autocast_dtype("cpu") == rg.float16
                assert (X @ W.T).dtype == "float16"
            assert rg.get_autocast_dtype("cpu") == rg.bfloat16
        assert rg.is_autocast_enabled("cpu")
        assert (X @ W.T).dtype == "bfloat16"
    assert not rg.is_autocast_enabled("cpu")
    assert (X @ W.T).dtype == "float32"


@on_torch_only
def test_an_error_inside_the_region_restores_the_state():
    with pytest.raises(rg.ShapeError), rg.autocast("cpu"):
        rg.mm(X, W)  # [4, 6] @ [5, 6]
    assert not rg.is_autocast_enabled("cpu")
    assert (X @ W.T).dtype == "float32"


@on_torch_only
def test_autocast_as_a_decorator():
    @rg.autocast("cpu")
    def forward(x):
        assert rg.is_autocast_enabled("cpu")
        return F.linear(x, W, B)

    @torch.autocast("cpu")
    def their_forward(x):
        return TF.linear(x, TW, TB)

    out = forward(X)
    assert out.dtype == "bfloat16" and not rg.is_autocast_enabled("cpu")
    np.testing.assert_array_equal(out.float().numpy(), their_forward(TX).float().numpy())
    assert forward.__name__ == "forward"


@on_torch_only
def test_the_state_is_per_thread_as_torchs():
    seen = {}

    def other():
        seen["enabled"] = rg.is_autocast_enabled("cpu")
        seen["dtype"] = (X @ W.T).dtype

    with rg.autocast("cpu"):
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
    assert seen == {"enabled": False, "dtype": "float32"}


@on_torch_only
def test_unsupported_dtype_disables_the_region_with_torchs_warning():
    with pytest.warns(UserWarning, match="not supported"), rg.autocast("cpu", dtype=rg.float64):
        assert not rg.is_autocast_enabled("cpu")
        assert (X @ W.T).dtype == "float32"
    with pytest.warns(UserWarning, match="not supported"):
        torch.autocast("cpu", dtype=torch.float64)


class _Scaled(rg.autograd.Function):
    """A custom op whose forward asks for float32 inputs (torch's ``cast_inputs``)."""

    @staticmethod
    @rg.amp.custom_fwd(device_type="cpu", cast_inputs=rg.float32)
    def forward(ctx, x):
        ctx.forward_state = (x.dtype, rg.is_autocast_enabled("cpu"))
        return x * 2

    @staticmethod
    @rg.amp.custom_bwd(device_type="cpu")
    def backward(ctx, grad):
        ctx.backward_state = rg.is_autocast_enabled("cpu")
        return grad * 2


class _Plain(rg.autograd.Function):
    """A custom op that runs in the region as it is (no ``cast_inputs``)."""

    @staticmethod
    @rg.amp.custom_fwd(device_type="cpu")
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 3

    @staticmethod
    @rg.amp.custom_bwd(device_type="cpu")
    def backward(ctx, grad):
        _Plain.backward_enabled = rg.is_autocast_enabled("cpu")
        return grad * 3


@on_torch_only
def test_custom_fwd_casts_inputs_and_custom_bwd_runs_in_forwards_state():
    w = rg.nn.Parameter(rg.tensor(W.numpy()))
    with rg.autocast("cpu"):
        h = F.linear(X, w)  # bfloat16
        out = _Scaled.apply(h)
    assert h.dtype == "bfloat16" and out.dtype == "float32"
    grads = out.sum().backward()
    assert w.grad(grads).dtype == "float32"
    with rg.autocast("cpu"):
        plain = _Plain.apply(F.linear(X, w))
    assert plain.dtype == "bfloat16"
    plain.float().sum().backward()
    assert _Plain.backward_enabled is True  # forward ran with autocast on
    plain = _Plain.apply(F.linear(X, w))
    plain.sum().backward()
    assert _Plain.backward_enabled is False


def test_custom_fwd_outside_a_region_runs_forward_as_written():
    out = _Scaled.apply(rg.tensor([1.0, 2.0]))
    assert out.tolist() == [2.0, 4.0]


@on_torch_only
def test_a_region_for_another_device_type_leaves_cpu_tensors_alone():
    rg.set_autocast_enabled("cuda", True)  # (the low-level switch: no availability check)
    try:
        assert (X @ W.T).dtype == "float32"
    finally:
        rg.set_autocast_enabled("cuda", False)


@pytest.mark.numpy_only("NumPy has no bfloat16: the documented full-precision fallback")
def test_on_numpy_the_region_computes_in_the_inputs_dtypes(monkeypatch):
    monkeypatch.setattr(amp, "_warned_no_dtype", set())
    with pytest.warns(RuntimeWarning, match="numpy> has no bfloat16"), rg.autocast("cpu"):
        out = F.cross_entropy(F.linear(X, W, B), rg.tensor(LABELS))
        product = X @ W.T
    assert out.dtype == product.dtype == "float32"
    reference = TF.cross_entropy(TF.linear(TX, TW, TB), torch.tensor(LABELS))
    np.testing.assert_allclose(out.item(), reference.item(), rtol=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with rg.autocast("cpu"):  # warned once
            pass


@on_torch_only
def test_float16_autocast_with_a_grad_scaler_trains_as_torchs():
    # torch's "Typical Mixed Precision Training" loop: float16 autocast and dynamic loss
    # scaling, run on the CPU (torch's CPU autocast takes float16 too)
    x, y = RNG.randn(10, 8).astype(np.float32), RNG.randint(0, 4, 10)
    model = rg.nn.Sequential(rg.nn.Linear(8, 16), rg.nn.ReLU(), rg.nn.Linear(16, 4))
    their_model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)
    )
    their_model.load_state_dict({k: torch.tensor(v.numpy()) for k, v in model.state_dict().items()})
    opt = rg.optim.SGD(model.parameters(), lr=0.1)
    their_opt = torch.optim.SGD(their_model.parameters(), lr=0.1)
    scaler = rg.amp.GradScaler("cpu", init_scale=2.0**10)
    their_scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    for _ in range(3):
        with rg.autocast("cpu", dtype=rg.float16):
            loss = F.cross_entropy(model(rg.tensor(x)), rg.tensor(y))
        scaler.step(opt, scaler.scale(loss).backward())
        scaler.update()
        their_opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            their_loss = TF.cross_entropy(their_model(torch.tensor(x)), torch.tensor(y))
        their_scaler.scale(their_loss).backward()
        their_scaler.step(their_opt)
        their_scaler.update()
        assert loss.dtype == "float32"
        # (the loss: to the last bit of the mean in cross_entropy, summed in another order)
        np.testing.assert_allclose(loss.item(), their_loss.item(), rtol=1e-6)
    assert scaler.get_scale() == their_scaler.get_scale()
    for mine, reference in zip(
        model.state_dict().values(), their_model.state_dict().values(), strict=True
    ):
        np.testing.assert_array_equal(mine.numpy(), reference.numpy())


@pytest.mark.parametrize("make", ["amp", "cuda.amp"])
def test_a_scaler_for_cuda_without_a_gpu_turns_itself_off_as_torchs(make):
    # a script written for the GPU, run on the CPU: torch's scaler warns and steps unscaled,
    # an inf gradient included (which an enabled scaler would skip)
    if current_backend().default_device.kind == "cuda":
        pytest.skip("a backend computes on a GPU: the scaler stays on, as torch's there")
    build = {
        "amp": lambda lib: lib.amp.GradScaler(),
        "cuda.amp": lambda lib: lib.cuda.amp.GradScaler(),
    }
    scalers = []
    for lib in (torch, rg):
        with pytest.warns(UserWarning, match="CUDA is not available"), warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # (torch.cuda.amp's deprecation)
            scalers.append(build[make](lib))
    theirs, mine = scalers
    assert (
        (mine.is_enabled(), mine.get_scale(), mine.state_dict())
        == (theirs.is_enabled(), theirs.get_scale(), theirs.state_dict())
        == (False, 1.0, {})
    )
    weight = rg.tensor([1.0, 2.0]).require_grad()
    their_weight = torch.tensor([1.0, 2.0], requires_grad=True)
    opt, their_opt = rg.optim.SGD([weight], lr=0.5), torch.optim.SGD([their_weight], lr=0.5)
    grads = mine.scale((weight * rg.tensor([float("inf"), 1.0])).sum()).backward()
    mine.step(opt, grads)
    mine.update()
    theirs.scale((their_weight * torch.tensor([float("inf"), 1.0])).sum()).backward()
    theirs.step(their_opt)
    theirs.update()
    np.testing.assert_array_equal(weight.numpy(), their_weight.detach().numpy())
    assert np.isinf(weight.numpy()[0])
    # bad factors are not checked by a scaler that is off (torch's), but are by one that is on
    with pytest.warns(UserWarning):
        assert not rg.amp.GradScaler(growth_factor=0.5).is_enabled()
    with pytest.raises(rg.InvalidArgumentError, match="growth_factor"):
        rg.amp.GradScaler("cpu", growth_factor=0.5)
