"""torch's fused elementwise kernels, to the last bit: ``lerp``, ``add``/``sub``/``rsub`` with
an ``alpha`` and ``addcmul`` compute a fused multiply-add on torch's CPU (``vec::fmadd``, one
rounding), so a multiplication and an addition rounded apart differed from torch's in 5 to 25%
of the elements, on both inner backends. Each result (and each gradient) is compared with
torch's bit for bit."""

import math

import numpy as np
import pytest
import torch

import retrograd as rg

DTYPES = ("float32", "float64")


def _bits(array):
    """The bits, each NaN as one (x86's arithmetic makes NaNs of either sign: its default NaN
    is negative, and torch's vectorized and scalar paths differ there)."""
    array = np.where(np.isnan(array), np.nan, array).astype(array.dtype)
    return array.view(np.uint32 if array.dtype == np.float32 else np.uint64)


def assert_same_bits(ours, theirs):
    ours, theirs = np.asarray(ours.numpy()), theirs.detach().numpy()
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    np.testing.assert_array_equal(_bits(ours), _bits(theirs))


def _draws(dtype, count, seed, n=1009):
    """``count`` arrays: normal draws, then signed powers of ten spanning the dtype's range."""
    rng = np.random.default_rng(seed)
    top = 30 if dtype == "float32" else 250
    spans = rng.choice([-1.0, 1.0], (count, n)) * 10.0 ** rng.uniform(-top, top, (count, n))
    return [np.concatenate([rng.standard_normal(n), span]).astype(dtype) for span in spans]


def _pair(array, requires_grad=False):
    return (
        rg.tensor(array, requires_grad=requires_grad),
        torch.tensor(array, requires_grad=requires_grad),
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("weight", [0.3, 0.9, -0.7, 2.5, 0.5, 1.0])
def test_lerp_scalar_weight(dtype, weight):
    start, end = _draws(dtype, 2, seed=1)
    (x, tx), (e, te) = _pair(start), _pair(end)
    assert_same_bits(x.lerp(e, weight), torch.lerp(tx, te, weight))


@pytest.mark.parametrize("dtype", DTYPES)
def test_lerp_tensor_weight_and_gradients(dtype):
    start, end = _draws(dtype, 2, seed=2)
    weight = np.random.default_rng(3).uniform(-1.5, 2.5, start.size).astype(dtype)
    (x, tx), (e, te), (w, tw) = (_pair(a, requires_grad=True) for a in (start, end, weight))
    out, tout = x.lerp(e, w), torch.lerp(tx, te, tw)
    assert_same_bits(out, tout)
    seed = np.random.default_rng(4).standard_normal(start.size).astype(dtype)
    grads = (out * rg.tensor(seed)).sum().backward()
    (tout * torch.tensor(seed)).sum().backward()
    for ours, theirs in ((x, tx), (e, te), (w, tw)):
        assert_same_bits(ours.grad(grads), theirs.grad)


def test_lerp_float32_midpoint_product_with_a_tiny_start():
    # w * (end - start) is exactly halfway between two float32s and start is far below its
    # last bit: one rounding goes towards start's sign, two (through float64) to even
    end = np.float32(1 + 2**-12)
    weight = np.float32(end / 4)
    start = np.array([1e-30, -1e-30, 2e-39, -2e-39, 0.0], np.float32)
    ends = np.full(start.shape, end, np.float32)
    (x, tx), (e, te) = _pair(start), _pair(ends)
    assert_same_bits(x.lerp(e, float(weight)), torch.lerp(tx, te, float(weight)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_lerp_special_values_and_extremes(dtype):
    info = np.finfo(dtype)
    values = [0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -3.0, float(info.max)]
    values += [-float(info.max), float(info.tiny), float(info.smallest_subnormal), 1e-300]
    grid = np.array(values, dtype)
    start, end = (a.ravel() for a in np.meshgrid(grid, grid))
    (x, tx), (e, te) = _pair(start), _pair(end)
    for weight in (0.25, 0.75, -2.0):
        assert_same_bits(x.lerp(e, weight), torch.lerp(tx, te, weight))
    weights = np.resize(np.array([0.25, 0.75, -2.0, 3.5, 1e-300], dtype), start.size)
    (w, tw) = _pair(weights)
    assert_same_bits(x.lerp(e, w), torch.lerp(tx, te, tw))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("alpha", [0.1, -0.3, 3])
def test_add_sub_rsub_with_alpha(dtype, alpha):
    first, second = _draws(dtype, 2, seed=5)
    (a, ta), (b, tb) = _pair(first, requires_grad=True), _pair(second, requires_grad=True)
    for ours, theirs in (
        (a.add(b, alpha=alpha), torch.add(ta, tb, alpha=alpha)),
        (a.sub(b, alpha=alpha), torch.sub(ta, tb, alpha=alpha)),
        (rg.rsub(a, b, alpha=alpha), torch.rsub(ta, tb, alpha=alpha)),
    ):
        assert_same_bits(ours, theirs)
    grads = a.sub(b, alpha=alpha).sum().backward()
    torch.sub(ta, tb, alpha=alpha).sum().backward()
    assert_same_bits(a.grad(grads), ta.grad)
    assert_same_bits(b.grad(grads), tb.grad)


def test_add_with_alpha_promotes_then_fuses():
    first, second = _draws("float32", 2, seed=6)
    (a, ta), (b, tb) = _pair(first), _pair(second.astype(np.float64))
    assert_same_bits(a.add(b, alpha=0.1), torch.add(ta, tb, alpha=0.1))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("value", [1, 0.1, -2.5])
def test_addcmul(dtype, value):
    base, first, second = _draws(dtype, 3, seed=7)
    (x, tx), (t1, tt1), (t2, tt2) = (_pair(a, requires_grad=True) for a in (base, first, second))
    out, tout = x.addcmul(t1, t2, value=value), torch.addcmul(tx, tt1, tt2, value=value)
    assert_same_bits(out, tout)
    grads = out.sum().backward()
    tout.sum().backward()
    for ours, theirs in ((x, tx), (t1, tt1), (t2, tt2)):
        assert_same_bits(ours.grad(grads), theirs.grad)


def test_broadcast_and_in_place_forms():
    rng = np.random.default_rng(8)
    rows, row = rng.standard_normal((7, 5)).astype(np.float32), rng.standard_normal(5)
    row = row.astype(np.float32)
    (x, tx), (r, tr) = _pair(rows), _pair(row)
    assert_same_bits(x.lerp(r, 0.2), torch.lerp(tx, tr, 0.2))
    assert_same_bits(x.add(r, alpha=0.2), torch.add(tx, tr, alpha=0.2))
    assert_same_bits(x.addcmul(r, x, value=0.2), torch.addcmul(tx, tr, tx, value=0.2))
    x.lerp_(r, 0.7)
    tx.lerp_(tr, 0.7)
    x.add_(r, alpha=-0.01)
    tx.add_(tr, alpha=-0.01)
    x.addcmul_(r, r, value=0.3)
    tx.addcmul_(tr, tr, value=0.3)
    assert_same_bits(x, tx)


@pytest.mark.parametrize("dtype", DTYPES)
def test_large_arrays(dtype):
    # (the NumPy backend's one-pass loops, from 65536 elements on)
    rng = np.random.default_rng(9)
    start, end, weight = (rng.standard_normal(1 << 16).astype(dtype) for _ in range(3))
    (x, tx), (e, te), (w, tw) = _pair(start), _pair(end), _pair(weight)
    assert_same_bits(x.lerp(e, 0.1), torch.lerp(tx, te, 0.1))
    assert_same_bits(x.lerp(e, 0.9), torch.lerp(tx, te, 0.9))
    assert_same_bits(x.lerp(e, w), torch.lerp(tx, te, tw))
    assert_same_bits(x.add(e, alpha=0.01), torch.add(tx, te, alpha=0.01))
    assert_same_bits(x.addcmul(e, w, value=0.3), torch.addcmul(tx, te, tw, value=0.3))


@pytest.mark.numpy_only("the NumPy backend's emulation of the fused multiply-add")
@pytest.mark.parametrize("dtype", DTYPES)
def test_numpy_emulation_of_the_fused_kernels(dtype):
    # the NumPy passes that small arrays take until the compiled loops are loaded (another
    # test in the process may have loaded them: these call the emulation itself)
    from retrograd.backend import numpy_fma

    start, end, third = _draws(dtype, 3, seed=10)
    info = np.finfo(dtype)
    specials = [0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0, float(info.max), 1e-300]
    specials += [float(info.tiny), float(info.smallest_subnormal), 2.0**-600, 2.0**600]
    grid = [a.ravel() for a in np.meshgrid(*[np.array(specials, dtype)] * 3)]
    start, end, third = (np.concatenate([a, g]) for a, g in zip((start, end, third), grid))
    weight = np.resize(np.array([0.3, -0.2, 0.75, 4.0], dtype), start.size)
    tx, te, tt, tw = (torch.from_numpy(a) for a in (start, end, third, weight))
    with np.errstate(all="ignore"):
        cases = [
            (numpy_fma.lerp(start, end, weight), torch.lerp(tx, te, tw)),
            (numpy_fma.lerp(start, end, 0.3), torch.lerp(tx, te, 0.3)),
            (numpy_fma.lerp(start, end, 0.8), torch.lerp(tx, te, 0.8)),
            (numpy_fma.add_scaled(start, end, -0.1), torch.add(tx, te, alpha=-0.1)),
            (numpy_fma.addcmul(start, end, third, 0.5), torch.addcmul(tx, te, tt, value=0.5)),
            (numpy_fma.addcmul(start, end, third, 1.0), torch.addcmul(tx, te, tt)),
        ]
    for ours, theirs in cases:
        np.testing.assert_array_equal(_bits(ours), _bits(theirs.numpy()))


@pytest.mark.parametrize("dtype", DTYPES)
def test_hardswish_values_and_gradient(dtype):
    # torch's kernel is x * min(max(x + 3, 0), 6) / 6: x * 6 / 6 (two roundings, not x) from
    # 3 on, -0 for negative x up to -3, NaN at -inf; its gradient g * (x / 3 + 0.5) between
    specials = np.array([-math.inf, -5.0, -3.0, -0.0, 0.0, 3.0, 7.5, math.inf, math.nan], dtype)
    (draw,) = _draws(dtype, 1, seed=11)
    values = np.concatenate([specials, draw, np.linspace(-4, 4, 301).astype(dtype)])
    (x, tx) = _pair(values, requires_grad=True)
    out, tout = rg.nn.functional.hardswish(x), torch.nn.functional.hardswish(tx)
    assert_same_bits(out, tout)
    seed = np.random.default_rng(12).standard_normal(values.size).astype(dtype)
    grads = (out * rg.tensor(seed)).sum().backward()
    (tout * torch.tensor(seed)).sum().backward()
    ours, theirs = x.grad(grads).numpy(), tx.grad.numpy()
    # (torch's own gradient at NaN differs between its vectorized loop, NaN, and its scalar
    # tail, the incoming gradient; retrograd's is the latter)
    finite = ~np.isnan(values)
    np.testing.assert_array_equal(_bits(ours[finite]), _bits(theirs[finite]))


def test_fused_results_follow_the_input_layout():
    first = np.random.default_rng(13).standard_normal((3, 5)).astype(np.float32)
    (a, ta) = _pair(first)
    a, ta = a.T, ta.T
    for ours, theirs in (
        (a.lerp(a, 0.3), ta.lerp(ta, 0.3)),
        (a.add(a, alpha=0.5), ta.add(ta, alpha=0.5)),
        (a.addcmul(a, a, value=0.5), ta.addcmul(ta, ta, value=0.5)),
        (rg.nn.functional.hardswish(a), torch.nn.functional.hardswish(ta)),
    ):
        assert ours.stride() == theirs.stride()
        assert_same_bits(ours, theirs)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rsqrt_values_and_gradient(dtype):
    # torch's rsqrt is 1 / its rounded sqrt, and its rule -0.5 * g * out * out * out (on the
    # torch backend, sqrt then reciprocal differed: torch's float32 sqrt is not correctly
    # rounded on every CPU)
    specials = np.array([-1.0, -0.0, 0.0, 1.0, 4.0, math.inf, math.nan], dtype)
    draw = np.abs(np.random.default_rng(14).standard_normal(1009) * 3).astype(dtype)
    values = np.concatenate([specials, draw])
    (x, tx) = _pair(values, requires_grad=True)
    out, tout = x.rsqrt(), tx.rsqrt()
    assert_same_bits(out, tout)
    seed = np.random.default_rng(15).standard_normal(values.size).astype(dtype)
    grads = (out * rg.tensor(seed)).sum().backward()
    (tout * torch.tensor(seed)).sum().backward()
    assert_same_bits(x.grad(grads), tx.grad)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("number", [3.0, -0.7, 7, 2.0])
def test_number_divided_by_a_tensor_and_its_gradients(dtype, number):
    # torch's number / tensor is reciprocal(tensor) * number: two roundings, each op's gradient
    (values,) = _draws(dtype, 1, seed=11)
    x, tx = _pair(values, requires_grad=True)
    out, tout = number / x, number / tx
    assert_same_bits(out, tout)
    seed = np.random.default_rng(12).standard_normal(values.size).astype(dtype)
    grads = (out * rg.tensor(seed)).sum().backward()
    (tout * torch.tensor(seed)).sum().backward()
    assert_same_bits(x.grad(grads), tx.grad)


@pytest.mark.parametrize("dtype", ["bool", "uint8", "int32", "int64", "complex64"])
def test_number_divided_by_a_tensor_of_another_kind_has_torchs_dtype_and_values(dtype):
    values = np.array([0, 1, 2, 3, 5, 7])
    for number in (3, 2.5, True):
        ours = number / rg.tensor(values).to(dtype)
        theirs = number / torch.tensor(values).to(getattr(torch, dtype))
        assert ours.dtype == str(theirs.dtype).removeprefix("torch.")
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
