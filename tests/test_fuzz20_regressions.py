"""Regressions found by fuzzing round 20 (``tests/fuzz20_cases.py``), each checked against
torch 2.13 or the two's-complement arithmetic it states (Python integers reduced to int64)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")

I64_MIN, I64_MAX = -(2**63), 2**63 - 1


def wrap64(n: int) -> int:
    """``n`` as int64 arithmetic leaves it: reduced modulo 2**64 into [-2**63, 2**63)."""
    return (n + 2**63) % 2**64 - 2**63


def test_integer_power_is_exact_and_wraps_as_int64():
    # (the power was taken in float64 and rounded: wrong past 2**53, saturated past 2**63)
    base = [3, -3, I64_MIN + 1, I64_MAX, 2**31 + 1, 5]
    assert (rg.tensor(base) ** 41).tolist() == [wrap64(b**41) for b in base]
    exponents = [41, 39, 7, 7, 2, 27]
    got = rg.tensor(base) ** rg.tensor(exponents)
    assert got.dtype == rg.int64
    assert got.tolist() == [wrap64(b**e) for b, e in zip(base, exponents)]
    assert rg.pow(3, rg.tensor([40, 41])).tolist() == [wrap64(3**40), wrap64(3**41)]


def test_integer_division_is_exact_at_every_magnitude():
    # (the quotient was taken in float64: 2**62 + 1 lost its last bit, and 1 // -2**63 was 1)
    a = [2**62 + 1, -(2**62) - 1, I64_MAX, I64_MIN, 1, -7, 7]
    b = [3, 3, 2, 3, I64_MIN, 2, -2]
    floor = [x // y for x, y in zip(a, b)]  # Python's // floors
    trunc = [abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1) for x, y in zip(a, b)]
    ta, tb = rg.tensor(a), rg.tensor(b)
    assert (ta // tb).tolist() == floor
    assert rg.div(ta, tb, rounding_mode="floor").tolist() == floor
    assert rg.div(ta, tb, rounding_mode="trunc").tolist() == trunc
    assert rg.floor_divide(ta, tb).tolist() == floor
    assert rg.div(rg.tensor([I64_MAX - 1]), True, rounding_mode="trunc").tolist() == [I64_MAX - 1]
    want = torch.div(torch.tensor(a), torch.tensor(b), rounding_mode="floor").tolist()
    assert (ta // tb).tolist() == want
    # -2**63 by -1: torch's floor division wraps to -2**63; its truncating one dies of
    # SIGFPE (a torch bug, not called here): the quotient 2**63 wraps in two's complement
    x = rg.tensor([I64_MIN, 6])
    assert (x // -1).tolist() == [wrap64(2**63), -6]
    assert rg.div(x, rg.tensor([-1, -1]), rounding_mode="trunc").tolist() == [I64_MIN, -6]
    assert (x // -1).tolist() == (torch.tensor([I64_MIN, 6]) // -1).tolist()


def test_right_shift_by_a_negative_amount_gives_the_sign_as_torch():
    # (the NumPy kernel clipped a negative amount to 0 and returned x)
    x = [-1, 7, -8, 5]
    amounts = [-1, -1, -3, 64]
    want = torch.bitwise_right_shift(torch.tensor(x), torch.tensor(amounts)).tolist()
    assert want == [-1, 0, -1, 0]
    assert (rg.tensor(x) >> rg.tensor(amounts)).tolist() == want
    assert (rg.tensor(x) >> -1).tolist() == (torch.tensor(x) >> -1).tolist()


def test_randint_refuses_bounds_a_bool_cannot_hold():
    # (torch: "from is out of bounds for bool"; retrograd drew and cast them to True)
    for low, high in [(0, 3), (-1, 1), (1, 5)]:
        with pytest.raises(RuntimeError):
            torch.randint(low, high, (3,), dtype=torch.bool)
        with pytest.raises(rg.errors.InvalidArgumentError, match=r"randint.*bool"):
            rg.randint(low, high, (3,), dtype=rg.bool)
    with pytest.raises(rg.errors.InvalidArgumentError, match="randint"):
        rg.randint_like(rg.tensor([True, False]), 3)
    out = rg.randint(0, 2, (50,), dtype=rg.bool)
    assert out.dtype == rg.bool and out.shape == (50,)


@pytest.mark.parametrize("args", [(0.5, 0, 3), (-0.5, 0, -1), (0.5, 0.2, 3), (0, 0.5, -1)])
def test_int64_arange_checks_the_step_sign_on_the_bounds_given(args):
    # (the bounds were truncated first: 0.5 -> 0 made the empty range [] where torch refuses)
    with pytest.raises(RuntimeError, match="inconsistent with step sign"):
        torch.arange(*args, dtype=torch.int64)
    with pytest.raises(rg.errors.InvalidArgumentError, match=r"arange.*sign of step"):
        rg.arange(*args, dtype=rg.int64)
    # (and the bounds are truncated after the check, as torch's)
    for args in [(2.9, 0.1, -1), (0.5, 3, 1), (0, -0.5, -1)]:
        want = torch.arange(*args, dtype=torch.int64).tolist()
        assert rg.arange(*args, dtype=rg.int64).tolist() == want


@pytest.mark.parametrize(
    "args", [(6, -0.25, 7), (-3, 2.5, 5), (0.7, 5, 4), (5, -4, 4), (0, 10, 1), (3, 3, 0)]
)
def test_int64_linspace_is_torch_integer_kernel(args):
    # (it was the float32 linspace truncated: [6 4 3 2 1 0 0] for torch's [6 5 4 3 2 1 0])
    want = torch.linspace(*args, dtype=torch.int64).tolist()
    assert rg.linspace(*args, dtype=rg.int64).tolist() == want


@pytest.mark.parametrize(
    "args, base",
    [((2, -2, 7), 10.0), ((0, 3, 1), 2.0), ((1.5, 3, 1), 10.0), ((1.5, 3, 1), 2.2),
     ((-1, 5, 4), 2.5), ((6, 0.0, 1), 3.0)],
)  # fmt: skip
def test_int64_logspace_is_torch_integer_kernel(args, base):
    # (a middle exponent one rounding from 0 gave 0 where torch's 1, and one step gave
    # base ** end where torch's gives base ** start)
    want = torch.logspace(*args, base=base, dtype=torch.int64).tolist()
    assert rg.logspace(*args, base=base, dtype=rg.int64).tolist() == want


@pytest.mark.parametrize("reduce", ["cumprod", "prod", "prod_dim"])
def test_products_backward_captures_and_replays_as_eager(reduce):
    # (the rules chose between torch's formula and the exact one with zeros by reading
    # ``any(x == 0)`` on the host: ``rg.capture`` refused the step's backward)
    def program(rg_params, x):
        h = x * rg_params[0]
        if reduce == "cumprod":
            return h.cumprod(-1)
        if reduce == "prod":
            return h.prod()
        return h.prod(0, keepdim=True)

    batches = [
        [[0.5, 1.5, -2.0], [1.0, 2.0, 0.25]],
        [[0.5, 0.0, -2.0], [1.0, 2.0, 0.25]],  # a zero: the exact formula
        [[0.0, 1.5, 0.0], [3.0, 0.0, 0.25]],
        [[1.5, 1.5, -2.0], [1.0, -1.0, 0.5]],
    ]

    def run(captured):
        w = rg.nn.Parameter(rg.tensor([0.5, -1.25, 2.0], dtype=rg.float64))
        opt = rg.optim.SGD([w], lr=0.1)

        def step(x):
            loss = (program([w], x) * 1.5).sum()
            grads = loss.backward()
            out = (loss, w.grad(grads))
            opt.step(grads)
            return out

        data = [rg.tensor(b, dtype=rg.float64) for b in batches]
        if not captured:
            return [[t.numpy() for t in step(x)] for x in data] + [w.numpy()]
        replay = rg.capture(step, data[0], state=[opt])
        outs = [replay.result] + [replay(x) for x in data[1:]]
        return [[t.numpy() for t in out] for out in outs] + [w.numpy()]

    eager, captured = run(False), run(True)
    for want, got in zip(eager[:-1], captured[:-1]):
        for a, b in zip(want, got):
            assert a.tobytes() == b.tobytes()
    assert eager[-1].tobytes() == captured[-1].tobytes()
    # the eager gradients are torch's
    w = torch.tensor([0.5, -1.25, 2.0], dtype=torch.float64, requires_grad=True)
    x = torch.tensor(batches[0], dtype=torch.float64)
    loss = (program([w], x) * 1.5).sum()
    loss.backward()
    assert np.allclose(eager[0][1], w.grad.numpy(), rtol=1e-12, atol=0)


def test_clamp_of_bools_between_two_bool_tensors_is_refused_as_torch():
    # (torch's two-bound clamp has no bool kernel; retrograd computed it)
    x = torch.tensor([True, False])
    with pytest.raises(NotImplementedError, match="Bool"):
        torch.clamp(x, torch.tensor(True), torch.tensor([False, True]))
    with pytest.raises(rg.DTypeError, match=r"clamp.*bool"):
        rg.clamp(rg.tensor([True, False]), rg.tensor(True), rg.tensor([False, True]))
    # one bound is torch's maximum (or minimum): bools are fine there, as in retrograd
    want = torch.clamp(x, torch.tensor([False, True])).tolist()
    assert rg.clamp(rg.tensor([True, False]), rg.tensor([False, True])).tolist() == want


def test_integer_alpha_times_a_number_wraps_as_int64():
    # (alpha * other was a Python integer, refused past int64's range; torch multiplies in
    # int64, wrapping)
    cases = [(2**63 - 1, 3), (2**62, 4), (-3, -(2**62)), (2**62, 2)]
    for other, alpha in cases:
        x = [1, 5]
        want = torch.add(torch.tensor(x), other, alpha=alpha).tolist()
        assert want == [wrap64(v + other * alpha) for v in x]
        assert rg.add(rg.tensor(x), other, alpha=alpha).tolist() == want
        assert rg.tensor(x).add_(other, alpha=alpha).tolist() == want
        want = torch.sub(torch.tensor(x), other, alpha=alpha).tolist()
        assert rg.sub(rg.tensor(x), other, alpha=alpha).tolist() == want


@pytest.mark.parametrize(
    "make",
    [
        lambda lib: lib.arange(3, dtype=lib.bool),
        lambda lib: lib.arange(0, 1, 0.5, dtype=lib.bool),
        lambda lib: lib.linspace(0, 1, 3, dtype=lib.bool),
        lambda lib: lib.logspace(0, 1, 2, dtype=lib.bool),
    ],
)
def test_bool_ranges_are_refused_as_torch(make):
    # (retrograd made them: arange(3) was [False, True, True])
    with pytest.raises(NotImplementedError, match="Bool"):
        make(torch)
    with pytest.raises(rg.DTypeError, match="not implemented for bool"):
        make(rg)
    # (torch's 0- and 1-step spaces never reach its kernel: they are made, bool too)
    for steps in (0, 1):
        want = torch.linspace(0.5, 1, steps, dtype=torch.bool).tolist()
        assert rg.linspace(0.5, 1, steps, dtype=rg.bool).tolist() == want
        want = torch.logspace(0.5, 1, steps, dtype=torch.bool).tolist()
        assert rg.logspace(0.5, 1, steps, dtype=rg.bool).tolist() == want


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 1e30])
def test_full_refuses_a_float_int64_cannot_hold(value):
    # (full(..., nan, dtype=int64) was filled with -2**63)
    with pytest.raises(RuntimeError, match="without overflow"):
        torch.full((2,), value, dtype=torch.int64)
    with pytest.raises(rg.errors.InvalidArgumentError, match=r"full.*int64"):
        rg.full((2,), value, dtype=rg.int64)
    with pytest.raises(rg.errors.InvalidArgumentError, match=r"full.*int64"):
        rg.full_like(rg.tensor([1, 2]), value)
    assert rg.full((2,), value, dtype=rg.bool).tolist() == [True, True]
