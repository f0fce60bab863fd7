"""Burn's tests that a coverage audit found without a port carrying Burn's own values
(tracel-ai/burn at 2c06be351006851d42fdb6df16b976f4a82d9747, ``crates/burn-backend-tests/tests``,
and the older ``burn-tensor/src/tests`` and ``burn-autodiff/src/tests`` of 2023-2025): every test
function there was matched against the numbers in this project's tests, and these are the ones
whose inputs and expected values appeared nowhere. Each runs under every checkpointing strategy
on the chosen inner backend; expected values are Burn's, and torch 2.13 computes the same case
where it has the op."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812
from test_burn_ports import backend  # noqa: F401 (the autouse fixture: each strategy)

#: every test runs under the autouse fixture's backend, one per strategy of its own
pytestmark = pytest.mark.own_checkpointing("the backend fixture picks each strategy")


def close(actual, expected, tol=1e-5):
    np.testing.assert_allclose(np.asarray(actual, dtype=np.float64), expected, rtol=tol, atol=tol)


# ---- autodiff/div.rs, mul.rs, log_sigmoid.rs -----------------------------------------------------


def test_should_diff_div():
    t1 = rg.tensor([1.0, 7.0]).require_grad()
    t2 = rg.tensor([4.0, 7.0]).require_grad()
    grads = t1.div(t2).backward()
    close(t1.grad(grads), [0.25, 0.14285715])
    close(t2.grad(grads), [-0.0625, -0.14285715])
    r1 = torch.tensor([1.0, 7.0], requires_grad=True)
    r2 = torch.tensor([4.0, 7.0], requires_grad=True)
    (r1 / r2).sum().backward()
    close(t2.grad(grads), r2.grad.numpy())


def test_should_diff_div_scalar():
    t = rg.tensor([1.0, 7.0]).require_grad()
    grads = t.div_scalar(4.0).backward()
    np.testing.assert_array_equal(t.grad(grads).numpy(), [0.25, 0.25])


def test_should_diff_mul():
    t1 = rg.tensor([1.0, 7.0]).require_grad()
    t2 = rg.tensor([4.0, 7.0]).require_grad()
    t3 = t1.mul(t2)
    grads = t3.backward()
    np.testing.assert_array_equal(t1.grad(grads).numpy(), [4.0, 7.0])
    np.testing.assert_array_equal(t2.grad(grads).numpy(), [1.0, 7.0])
    np.testing.assert_array_equal(t3.numpy(), [4.0, 49.0])


def test_should_diff_log_sigmoid_at_extremes():
    data = [[0.8762, -0.1423], [-300.0, 200.0]]
    x = rg.tensor(data).require_grad()
    grads = F.log_sigmoid(x).backward()
    expected = [[0.293966, 0.535515], [1.0, 0.0]]
    close(x.grad(grads), expected)
    reference = torch.tensor(data, requires_grad=True)
    torch.nn.functional.logsigmoid(reference).sum().backward()
    close(x.grad(grads), reference.grad.numpy())


# ---- autodiff/checkpoint.rs: a graph where one leaf feeds every node many times -----------------


def _many_duplicates(lib_add, lib_mul, lib_matmul, lib_where, lib_add_scalar, t0):
    t1 = lib_add(t0, t0)
    t2 = lib_where(t0, t0)
    t3 = lib_mul(t0, t0)
    t4 = lib_matmul(t0, t0)
    t5 = lib_add(t1, t0)
    t6 = lib_add(t0, t5)
    t7 = lib_matmul(t3, t5)
    t8 = lib_where(t4, t2)
    t9 = lib_mul(t6, t7)
    t10 = lib_add(t0, t9)
    t11 = lib_add_scalar(t10, 9.0)
    return lib_matmul(t8, t11)


def test_autodiff_checkpoint_with_many_duplicates():
    data = [[4.0, 7.0], [7.0, 7.0]]
    t0 = rg.tensor(data).require_grad()
    no_mask = rg.tensor([[False, False], [False, False]])
    out = _many_duplicates(
        lambda a, b: a.add(b),
        lambda a, b: a.mul(b),
        lambda a, b: a.matmul(b),
        lambda a, b: a.mask_where(no_mask, b),
        lambda a, s: a.add_scalar(s),
        t0,
    )
    grads = out.backward()
    r0 = torch.tensor(data, dtype=torch.float64, requires_grad=True)
    r_out = _many_duplicates(
        torch.add,
        torch.mul,
        torch.matmul,
        lambda a, b: torch.where(torch.zeros(2, 2, dtype=torch.bool), b, a),
        lambda a, s: a + s,
        r0,
    )
    r_out.sum().backward()
    close(out, r_out.detach().numpy(), 1e-6)
    close(t0.grad(grads), r0.grad.numpy(), 1e-6)


# ---- tensor/float/activation/{sigmoid, softsign, softmax, quiet_softmax, log_sigmoid}.rs ---------

ACTIVATION_INPUT = [[1.0, 7.0], [13.0, -3.0]]


def test_sigmoid():
    out = rg.tensor(ACTIVATION_INPUT).sigmoid()
    close(out, [[0.731059, 0.999089], [0.999998, 0.047426]])
    close(out, torch.sigmoid(torch.tensor(ACTIVATION_INPUT)).numpy())


def test_softsign():
    out = F.softsign(rg.tensor(ACTIVATION_INPUT))
    close(out, [[0.5, 0.875], [0.928571, -0.75]])
    close(out, torch.nn.functional.softsign(torch.tensor(ACTIVATION_INPUT)).numpy())


def test_softmax_and_quiet_softmax_negative_dim():
    # Burn expects the same values of both, to its default tolerance (0.5% relative): quiet_softmax
    # is exp(x_i) / (1 + sum_j exp(x_j)), which differs from softmax by 0.09% on these inputs.
    expected = [[2.47e-03, 9.975e-01], [1.0, 1.1254e-07]]
    data = torch.tensor(ACTIVATION_INPUT, dtype=torch.float64)
    out = F.softmax(rg.tensor(ACTIVATION_INPUT), -1)
    close(out, expected, 5e-3)
    close(out, torch.softmax(data, -1).numpy(), 1e-6)
    out = F.quiet_softmax(rg.tensor(ACTIVATION_INPUT), -1)
    close(out, expected, 5e-3)
    exp = data.exp()
    close(out, (exp / (1 + exp.sum(-1, keepdim=True))).numpy(), 1e-6)


def test_log_sigmoid_numerical_stability():
    close(F.log_sigmoid(rg.tensor([300.0, -300.0])), [0.0, -300.0])
    f32 = np.finfo(np.float32)
    out = F.log_sigmoid(rg.tensor([float(f32.max), float(f32.min)])).numpy()
    reference = torch.nn.functional.logsigmoid(torch.tensor([f32.max, f32.min])).numpy()
    np.testing.assert_allclose(out, [0.0, f32.min], rtol=1e-6)
    np.testing.assert_allclose(out, reference, rtol=1e-6)


def test_log_sigmoid_values():
    # burn-tensor/src/tests/activation/log_sigmoid.rs (January 2025)
    out = F.log_sigmoid(rg.tensor(ACTIVATION_INPUT))
    close(out, [[-3.132617e-1, -9.114665e-4], [-2.260327e-6, -3.0485873]], 1e-6)
    close(out, torch.nn.functional.logsigmoid(torch.tensor(ACTIVATION_INPUT)).numpy(), 1e-6)


def test_sigmoid_and_hard_sigmoid_at_the_float32_extremes():
    # burn-tensor/src/tests/activation/{sigmoid, hard_sigmoid}.rs (2023-2025): no overflow to NaN
    f32 = np.finfo(np.float32)
    extremes = [float(f32.max), float(f32.min)]
    np.testing.assert_array_equal(rg.tensor(extremes).sigmoid().numpy(), [1.0, 0.0])
    np.testing.assert_array_equal(F.hard_sigmoid(rg.tensor(extremes), 0.2, 0.5).numpy(), [1.0, 0.0])
    np.testing.assert_array_equal(torch.sigmoid(torch.tensor(extremes)).numpy(), [1.0, 0.0])


# ---- cubecl/unary.rs, cubecl/normal.rs: GPU kernels' bugs, checked on every backend here ------


def test_tanh_saturates_without_nan():
    # Metal's tanh gave 0 within 43.67..44.36 and NaN above; the gradient there is exactly 0.
    x = rg.tensor([43.0, 44.0, 45.0, -45.0]).require_grad()
    y = x.tanh()
    np.testing.assert_array_equal(y.numpy(), [1.0, 1.0, 1.0, -1.0])
    np.testing.assert_array_equal(x.grad(y.backward()).numpy(), [0.0] * 4)


def test_normal_respects_the_68_95_99_rule():
    rg.seed(0)
    numbers = rg.random((1000, 1000), distribution="normal").numpy().astype(np.float64)
    assert abs(numbers.mean()) < 0.01 and abs(numbers.std() - 1.0) < 0.01
    # a fraction of a million samples has a standard deviation under 0.0005; 0.005 is 10 of them
    for sigmas, fraction in ((1, 0.6827), (2, 0.9545), (3, 0.9973)):
        assert abs(np.mean(np.abs(numbers) < sigmas) - fraction) < 0.005


# ---- tensor/float/ops/{fmod, remainder}.rs, tensor/int/ops/remainder.rs --------------------------


def test_fmod_with_infinite_divisor_returns_the_dividend():
    dividend = [5.3, -5.3, 0.0, -0.0]
    divisor = [math.inf, -math.inf, math.inf, -math.inf]
    out = rg.tensor(dividend).fmod(rg.tensor(divisor)).numpy()
    close(out, [5.3, -5.3, 0.0, -0.0])
    reference = torch.fmod(torch.tensor(dividend), torch.tensor(divisor)).numpy()
    np.testing.assert_array_equal(np.signbit(out), np.signbit(reference))


def test_remainder_scalar_of_zeros_and_of_a_large_divisor():
    close(rg.tensor([0.0, 0.0, 0.0]).remainder_scalar(3.5), [0.0, 0.0, 0.0])
    close(rg.tensor([-1.0, 1.0]).remainder_scalar(10.0), [9.0, 1.0])
    close(torch.remainder(torch.tensor([-1.0, 1.0]), 10.0).numpy(), [9.0, 1.0])


def test_remainder_of_exact_multiples_is_zero():
    lhs = [-1.0, 1.5, -2.0, 2.5, 0.5, 4.0]
    rhs = [1.0, 1.5, 2.0, 2.5, 0.5, 4.0]
    out = rg.tensor(lhs).remainder(rg.tensor(rhs)).numpy()
    close(out, [0.0] * 6)
    # Burn writes -0. for the negative dividends; torch (and API.md's remainder, torch's) takes the
    # divisor's sign, so every zero here is +0.
    reference = torch.remainder(torch.tensor(lhs), torch.tensor(rhs)).numpy()
    np.testing.assert_array_equal(np.signbit(out), np.signbit(reference))


def test_remainder_scalar_takes_the_divisor_sign():
    # burn-tensor/src/tests/ops/remainder.rs (July 2024): the scalar forms and the % operator
    cases = [
        ([-4.0, 4.0], 4.0, [0.0, 0.0]),
        ([-7.0, -3.0, 2.0, 6.0], -2.5, [-2.0, -0.5, -0.5, -1.5]),
        ([-7.5, -2.5, 2.5, 7.5], 3.0, [1.5, 0.5, 2.5, 1.5]),
    ]
    for data, divisor, expected in cases:
        out = rg.tensor(data).remainder_scalar(divisor).numpy()
        close(out, expected)
        reference = torch.remainder(torch.tensor(data), divisor).numpy()
        np.testing.assert_array_equal(out, reference)
    data = [-3.0, -2.0, -1.0, 1.0, 2.0, 3.0]
    close(rg.tensor(data) % 2.0, [1.0, 0.0, 1.0, 1.0, 0.0, 1.0])


def test_int_remainder_broadcasts():
    out = rg.tensor(np.array([[10, 20, 30]])).remainder(rg.tensor(np.array([[7]])))
    assert out.dtype == "int64"
    np.testing.assert_array_equal(out.numpy(), [[3, 6, 2]])


# ---- tensor/bool/ops/logical.rs: a vector long enough for a vectorized kernel --------------------


def test_logical_or_and_of_256_lanes():
    falses = rg.full((256,), False)
    trues = rg.full((256,), True)
    assert falses.dtype == "bool"
    np.testing.assert_array_equal((falses | trues).numpy(), [True] * 256)
    np.testing.assert_array_equal((falses & trues).numpy(), [False] * 256)


# ---- tensor/float/ops/matmul.rs: a vector-matrix product through a transposed view ---------------


def test_float_matmul_vecmat_transposed_fused():
    weight = rg.arange(0, 32 * 2).reshape([1, 2, 1, 32]).float()
    signal = rg.arange(0, 3 * 32 * 2).reshape([1, 2, 3, 32]).float()
    out = signal.matmul(weight.transpose()) + 5
    expected = [[[[10421.0], [26293.0], [42165.0]], [[172213.0], [220853.0], [269493.0]]]]
    np.testing.assert_array_equal(out.numpy(), expected)


# ---- tensor/float/module/conv_transpose2d.rs: groups with more output than input channels --------


def test_conv_transpose2d_groups_different_channels():
    x = rg.arange(0, 1 * 2 * 2 * 2).reshape([1, 2, 2, 2]).float()
    weight = rg.arange(0, 2 * 3 * 3 * 3).reshape([2, 3, 3, 3]).float()
    bias = rg.arange(0, 6).float()
    out = F.conv_transpose2d(x, weight, bias, stride=1, padding=0, groups=2)
    expected = [
        [[0, 0, 1, 2], [0, 5, 11, 11], [6, 23, 29, 23], [12, 32, 37, 24]],
        [[1, 10, 11, 12], [19, 60, 66, 48], [25, 78, 84, 60], [31, 78, 83, 52]],
        [[2, 20, 21, 22], [38, 115, 121, 85], [44, 133, 139, 97], [50, 124, 129, 80]],
        [[111, 250, 259, 148], [285, 634, 656, 366], [315, 700, 722, 402], [201, 438, 451, 248]],
        [[148, 332, 341, 194], [376, 833, 855, 475], [406, 899, 921, 511], [256, 556, 569, 312]],
        [
            [185, 414, 423, 240],
            [467, 1032, 1054, 584],
            [497, 1098, 1120, 620],
            [311, 674, 687, 376],
        ],
    ]
    close(out, [expected])
    reference = torch.nn.functional.conv_transpose2d(
        torch.arange(8.0).reshape(1, 2, 2, 2),
        torch.arange(54.0).reshape(2, 3, 3, 3),
        torch.arange(6.0),
        groups=2,
    )
    close(out, reference.numpy())


# ---- tensor/float/module/ctc.rs: an empty target, and a target with one valid path ---------------


@pytest.mark.parametrize("targets, target_length", [([[0]], 0), ([[1, 1]], 2)])
def test_ctc_loss_uniform_probabilities(targets, target_length):
    log_probs = rg.full((3, 1, 2), math.log(0.5))
    targets_rg = rg.tensor(np.array(targets, dtype=np.int64))
    loss = F.ctc_loss(log_probs, targets_rg, [3], [target_length], 0, reduction="sum")
    close(loss, 3.0 * math.log(2.0), 1e-3)
    reference = torch.nn.functional.ctc_loss(
        torch.full((3, 1, 2), math.log(0.5)),
        torch.tensor(targets),
        [3],
        [target_length],
        0,
        reduction="sum",
    )
    close(loss, reference.item(), 1e-5)
