"""Differential fuzzing, round 36: complex tensors against torch.

Seeded cases compare values, dtypes and gradients under torch's convention (the conjugate
Wirtinger derivative) of ``autograd.grad`` with complex ``grad_outputs``, first and second
order, in complex128, against torch and against finite differences; random chains of ops
mixing complex and real; complex parameters under optimizers; saved files; special values.
Each defect the fuzzer found has a focused test below its sweep."""

from __future__ import annotations

import io
import math
import random

import numpy as np
import pytest
import torch

import retrograd as rg
from retrograd.errors import DTypeError


def values(t):
    if isinstance(t, torch.Tensor):
        return t.detach().resolve_conj().resolve_neg().numpy(force=True)
    return t.detach().numpy()


def dtype_name(t):
    return str(t.dtype).split(".")[-1]


def complex_array(rng, *shape):
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


def seeded_grad_outputs(lib, outputs, seed):
    rng = np.random.default_rng(seed)
    made = []
    for out in outputs:
        shape = tuple(out.shape)
        value = complex_array(rng, *shape) if out.is_complex() else rng.standard_normal(shape)
        made.append(lib.tensor(value.astype(dtype_name(out)), requires_grad=True))
    return made


def differentiate(lib, fn, arrays, second=True):
    """``fn``'s outputs, the gradients of the floating inputs weighted by seeded
    ``grad_outputs`` (complex for complex outputs), and, with ``second``, the gradients of
    ``sum |gradient|^2`` with respect to the inputs and the ``grad_outputs``."""
    inputs = [lib.tensor(a, requires_grad=a.dtype.kind in "fc") for a in arrays]
    result = fn(lib, *inputs)
    outputs = list(result) if isinstance(result, tuple | list) else [result]
    tracked = [out for out in outputs if out.requires_grad]
    weights = seeded_grad_outputs(lib, tracked, 7)
    wanted = [x for x in inputs if x.requires_grad]
    grads = lib.autograd.grad(tracked, wanted, weights, create_graph=second, allow_unused=True)
    found = outputs + list(grads)
    if second:
        total = sum((g * g.conj()).real.sum() for g in grads if g is not None)
        found += list(lib.autograd.grad(total, wanted + weights, allow_unused=True))
    return found


def assert_like_torch(fn, arrays, second=True, rtol=1e-6, atol=1e-8):
    expected = differentiate(torch, fn, arrays, second)
    got = differentiate(rg, fn, arrays, second)
    assert len(expected) == len(got)
    for i, (e, g) in enumerate(zip(expected, got)):
        if e is None or g is None:  # (torch's None for a gradient rg may give as zeros)
            present = e if g is None else g
            assert present is None or not np.any(values(present)), i
            continue
        assert dtype_name(e) == dtype_name(g), (i, e.dtype, g.dtype)
        np.testing.assert_allclose(values(g), values(e), rtol=rtol, atol=atol, err_msg=str(i))


def C(rng, *shape):  # noqa: N802
    return complex_array(rng, *shape)


# -- the sweep: every op taking complex operands, values and two orders of gradients ---------
def _cases(rng):
    c23, r23 = (lambda: C(rng, 2, 3)), (lambda: rng.standard_normal((2, 3)))
    return {
        "mul_complex_real": (lambda lib, a, b: a * b, [c23(), r23()]),
        "div_real_complex": (lambda lib, a, b: a / b, [r23(), c23()]),
        "div_broadcast": (lambda lib, a, b: a / b, [c23(), C(rng, 3)]),
        "sub_real_complex_broadcast": (
            lambda lib, a, b: a - b,
            [rng.standard_normal((2, 1)), C(rng, 3)],
        ),
        "pow_complex_complex": (lambda lib, a, b: a**b, [c23(), c23()]),
        "pow_complex_real": (lambda lib, a, b: a**b, [c23(), r23()]),
        "pow_complex_number": (lambda lib, a: a ** (1.5 + 0.5j), [c23()]),
        "pow_int": (lambda lib, a: a**-2, [c23()]),
        "pow_half": (lambda lib, a: a**0.5, [c23()]),
        "rpow_complex_number": (lambda lib, a: (1 + 2j) ** a, [c23()]),
        "real_times_complex_number": (lambda lib, a: a * (2 - 1j), [r23()]),
        "complex_number_over_real": (lambda lib, a: (1 + 1j) / a, [r23()]),
        "matmul_broadcast": (lambda lib, a, b: a @ b, [C(rng, 4, 2, 3), C(rng, 3, 2)]),
        "matvec": (lambda lib, a, b: lib.mv(a, b), [c23(), C(rng, 3)]),
        "dot_vdot_inner_outer": (
            lambda lib, a, b: (lib.dot(a, b), lib.vdot(a, b), lib.inner(a, b), lib.outer(a, b)),
            [C(rng, 3), C(rng, 3)],
        ),
        "einsum_spectral": (
            lambda lib, a, w: lib.einsum("bixy,ioxy->boxy", a, w),
            [C(rng, 2, 3, 2, 2), C(rng, 3, 2, 2, 2)],
        ),
        "linear": (
            lambda lib, a, w, b: lib.nn.functional.linear(a, w, b),
            [c23(), C(rng, 4, 3), C(rng, 4)],
        ),
        "adjoint_and_mH": (lambda lib, a: (a.adjoint(), a.mH, a.mT), [c23()]),
        "normalize_dropout": (
            lambda lib, a: (
                lib.nn.functional.normalize(a),
                lib.nn.functional.normalize(a, p=1.0, dim=0),
                lib.nn.functional.dropout(a, 0.3, training=False),
            ),
            [c23()],
        ),
        "linalg_vecdot": (lambda lib, a, b: lib.linalg.vecdot(a, b), [c23(), c23()]),
        "cross": (lambda lib, a, b: lib.linalg.cross(a, b), [c23(), c23()]),
        "addcmul_addcdiv": (
            lambda lib, c, a, b: (lib.addcmul(c, a, b, value=0.5), lib.addcdiv(c, a, b, value=0.5)),
            [c23(), c23(), c23()],
        ),
        "lerp": (
            lambda lib, a, b, w: (
                lib.lerp(a, b, 0.3),
                lib.lerp(a, b, 0.7 + 0.2j),
                lib.lerp(a, b, w),
            ),
            [c23(), c23(), c23()],
        ),
        "prod_cumprod": (lambda lib, a: (a.prod(), a.prod(1), a.cumprod(1)), [c23()]),
        "prod_with_zeros": (
            lambda lib, a: (a.prod(), a.prod(1), a.cumprod(1)),
            [np.array([[1 + 1j, 0j, 2 - 1j], [0j, 0j, 1j], [1 + 2j, 3j, 0.5 + 0j]])],
        ),
        "logsumexp": (lambda lib, a: (lib.logsumexp(a, 1), lib.logsumexp(a, (0, 1))), [c23()]),
        "var_std": (
            lambda lib, a: (a.var(), a.std(1), *lib.var_mean(a, 0), a.var(1, correction=0)),
            [c23()],
        ),
        "norms": (
            lambda lib, a: (
                a.norm(),
                a.norm(p=1, dim=1),
                lib.linalg.vector_norm(a, ord=3, dim=-1),
                lib.linalg.norm(a),
                lib.linalg.matrix_norm(a),
                lib.linalg.matrix_norm(a, ord=1),
                lib.linalg.norm(a, float("inf")),
                lib.linalg.matrix_norm(a[None], ord=-1),
            ),
            [c23()],
        ),
        "parts": (
            lambda lib, a: (a.real, a.imag, a.angle(), a.abs(), a.sgn(), a.conj() * a),
            [c23()],
        ),
        "polar_complex_views": (
            lambda lib, r, t, v: (
                lib.polar(r.abs(), t),
                lib.complex(r, t),
                lib.view_as_complex(v),
                lib.view_as_real(lib.complex(r, t) * 1j),
            ),
            [r23(), r23(), rng.standard_normal((2, 3, 2))],
        ),
        "reductions": (
            lambda lib, a: (a.sum(1), a.mean(), a.cumsum(0), a.sum(dtype=lib.complex128)),
            [c23()],
        ),
        "shape_and_index": (
            lambda lib, a, b: (
                a[0, 1:] * a[1, :2],
                lib.cat([a, b.to(a.dtype)]),
                a.gather(1, lib.tensor([[0, 2], [1, 1]])),
                lib.where(a.real > 0, a, b.to(a.dtype)),
                a.masked_fill(a.real > 0, 1j),
                a.roll(1, 1).flip(0).unfold(1, 2, 1),
            ),
            [c23(), r23()],
        ),
        "unary": (
            lambda lib, a: (
                a.exp(),
                a.log(),
                a.sqrt(),
                a.rsqrt(),
                a.reciprocal(),
                a.sin(),
                a.tanh(),
                a.asinh(),
                a.acosh(),
                a.sigmoid(),
                a.log2(),
                a.log10(),
                a.square(),
            ),
            [c23()],
        ),
        "casts": (
            lambda lib, a, b: (a.to(lib.complex64), b.to(lib.complex128) * 1j, b.type_as(a) * a),
            [c23(), r23()],
        ),
    }


def test_sweep_of_complex_ops_matches_torch_to_second_order():
    rng = np.random.default_rng(36)
    for name, (fn, arrays) in _cases(rng).items():
        try:
            assert_like_torch(fn, arrays)
        except AssertionError as error:
            raise AssertionError(f"{name}: {error}") from None


@pytest.mark.parametrize(
    "fn, dtype",
    [
        ("fft", "c"), ("ifft", "c"), ("rfft", "r"), ("irfft", "c"), ("hfft", "c"), ("ihfft", "r"),
    ],
)  # fmt: skip
def test_fft_family_with_n_dim_norm_matches_torch(fn, dtype):
    rng = np.random.default_rng(360)
    source = C(rng, 4, 5) if dtype == "c" else rng.standard_normal((4, 5))
    for n, norm, dim in ((None, None, -1), (3, "ortho", 0), (7, "forward", -1), (7, "backward", 0)):

        def transform(lib, a, n=n, dim=dim, norm=norm):
            return getattr(lib.fft, fn)(a, n=n, dim=dim, norm=norm)

        assert_like_torch(transform, [source])
    square = {"fft": "fft2", "ifft": "ifftn", "rfft": "rfft2", "irfft": "irfftn"}.get(fn)
    if square is not None:
        for s in (None, (3, 4)):

            def transform2(lib, a, s=s):
                return getattr(lib.fft, square)(a, s=s, dim=(0, 1), norm="ortho")

            assert_like_torch(transform2, [source])


def test_stft_and_istft_match_torch():
    rng = np.random.default_rng(361)
    signal = rng.standard_normal((2, 20))

    def round_trip(lib, x):
        window = lib.hann_window(8, dtype=lib.float64)
        spectrum = lib.stft(x, 8, hop_length=2, window=window, return_complex=True)
        back = lib.istft(spectrum, 8, hop_length=2, window=window, length=20)
        return spectrum, back

    assert_like_torch(round_trip, [signal])


# -- gradients against finite differences -----------------------------------------------------
def _finite_difference_gradient(loss, z, eps=1e-6):
    """torch's gradient of a real ``loss`` at complex ``z``: dL/dRe + i dL/dIm."""
    grad = np.zeros_like(z)
    for index in np.ndindex(z.shape):
        for unit in (1.0, 1j):
            up, down = z.copy(), z.copy()
            up[index] += eps * unit
            down[index] -= eps * unit
            grad[index] += unit * (loss(up) - loss(down)) / (2 * eps)
    return grad


_WEIGHT = complex_array(np.random.default_rng(366), 2, 3)

#: real losses of a complex z: (retrograd's, NumPy's) (the NumPy one the independent reference)
_REAL_LOSSES = {
    "abs_sum": (lambda z: z.abs().sum(), lambda z: np.abs(z).sum()),
    "z_conj_z": (lambda z: (z * z.conj()).real.sum(), lambda z: (z * np.conj(z)).real.sum()),
    "view_as_real_squares": (
        lambda z: rg.view_as_real(z).pow(2).sum(),
        lambda z: (z.real**2 + z.imag**2).sum(),
    ),
    "weighted_complex_output": (  # the real loss whose gradient grad_outputs=_WEIGHT gives
        lambda z: (z.sin() * rg.tensor(_WEIGHT).conj()).real.sum(),
        lambda z: (np.sin(z) * np.conj(_WEIGHT)).real.sum(),
    ),
    "chain": (
        lambda z: (rg.fft.fft(z * z.exp()).abs() * z.angle().cos()).sum(),
        lambda z: (np.abs(np.fft.fft(z * np.exp(z))) * np.cos(np.angle(z))).sum(),
    ),
}


@pytest.mark.parametrize("name", sorted(_REAL_LOSSES))
def test_gradients_of_real_losses_match_finite_differences(name):
    z0 = complex_array(np.random.default_rng(362), 2, 3)
    loss, reference = _REAL_LOSSES[name]
    z = rg.tensor(z0, requires_grad=True)
    (got,) = rg.autograd.grad(loss(z), z)
    expected = _finite_difference_gradient(reference, z0)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-6)
    if name == "weighted_complex_output":  # the same through grad_outputs
        z = rg.tensor(z0, requires_grad=True)
        (through_weights,) = rg.autograd.grad(z.sin(), z, rg.tensor(_WEIGHT))
        np.testing.assert_allclose(through_weights.numpy(), expected, rtol=1e-5, atol=1e-6)


# -- random chains mixing complex and real ----------------------------------------------------
def _as_complex(lib, z):
    return z if z.is_complex() else lib.complex(z, z * 0.5)


_CHAIN_OPS = [
    lambda lib, z: (z * 0.3).exp(),
    lambda lib, z: z.sin(),
    lambda lib, z: (z * 0.5).tanh(),
    lambda lib, z: z.abs(),
    lambda lib, z: z.conj(),
    lambda lib, z: z.real if z.is_complex() else z,
    lambda lib, z: z.imag if z.is_complex() else z * 2,
    lambda lib, z: z.square(),
    lambda lib, z: (z + 3).reciprocal(),
    lambda lib, z: z * (0.5 - 0.7j),
    lambda lib, z: z + lib.linspace(-1, 1, 4, dtype=lib.float64),
    lambda lib, z: z * _as_complex(lib, z).flip(-1),
    lambda lib, z: z @ _as_complex(lib, z).mT if z.is_complex() else z @ z.mT,
    lambda lib, z: z.cumsum(-1),
    lambda lib, z: (z * 0.5).cumprod(-1),
    lambda lib, z: lib.fft.fft(z, norm="ortho"),
    lambda lib, z: lib.fft.ifft(z),
    lambda lib, z: lib.view_as_real(_as_complex(lib, z).resolve_conj()).sum(-1),
    lambda lib, z: lib.polar(z.abs() + 0.1, z.angle() if z.is_complex() else z),
    lambda lib, z: (z + 2) ** 1.5,
    lambda lib, z: (z + 2) ** (0.5 + 0.5j),
    lambda lib, z: (z + 3).log(),
    lambda lib, z: z * z.prod(-1, keepdim=True),
    lambda lib, z: z * z.var(-1, keepdim=True),
    lambda lib, z: z / (lib.linalg.vector_norm(z, dim=-1, keepdim=True) + 1),
    lambda lib, z: z[:, [2, 0, 1, 3]] - z.mean(0),
]


def test_random_chains_mixing_complex_and_real_match_torch():
    chooser = random.Random(36)
    rng = np.random.default_rng(363)
    for trial in range(40):
        chain = chooser.sample(range(len(_CHAIN_OPS)), chooser.randint(3, 6))

        def run(lib, z, chain=chain):
            for index in chain:
                z = _CHAIN_OPS[index](lib, z)
                if tuple(z.shape) != (3, 4):  # (matmul: back to the chain's shape)
                    z = lib.cat([z.reshape(-1)] * 12)[:12].reshape(3, 4)
            return z

        start = C(rng, 3, 4) if chooser.random() < 0.7 else rng.standard_normal((3, 4))
        try:
            assert_like_torch(run, [start], rtol=1e-5, atol=1e-7)
        except AssertionError as error:
            raise AssertionError(f"chain {chain} (trial {trial}): {error}") from None


# -- optimizers, saved files ------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, options",
    [
        ("SGD", {"lr": 0.1, "momentum": 0.9}),
        ("SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.1}),
        ("Adam", {"lr": 0.1, "amsgrad": True}),
        ("AdamW", {"lr": 0.1, "weight_decay": 0.3}),
        ("RMSprop", {"lr": 0.05, "momentum": 0.5, "centered": True}),
    ],
)
def test_complex_parameters_under_optimizers_match_torch_and_resume(name, options):
    rng = np.random.default_rng(364)
    start, target, scale = C(rng, 3, 2), C(rng, 3, 2), rng.standard_normal(3)

    def losses(lib, p, q):
        return ((p - lib.tensor(target)).abs() ** 2).sum() + (p.sum() * q[0]).abs() + (q**2).sum()

    tp, tq = torch.nn.Parameter(torch.tensor(start)), torch.nn.Parameter(torch.tensor(scale))
    topt = getattr(torch.optim, name)([tp, tq], **options)
    rp, rq = rg.nn.Parameter(rg.tensor(start)), rg.nn.Parameter(rg.tensor(scale))
    ropt = getattr(rg.optim, name)([rp, rq], **options)
    for step in range(4):
        topt.zero_grad()
        losses(torch, tp, tq).backward()
        topt.step()
        ropt.step(losses(rg, rp, rq).backward())
        if step == 1:  # the complex state through a file and back, into a fresh optimizer
            buffer = io.BytesIO()
            rg.save(ropt.state_dict(), buffer)
            buffer.seek(0)
            ropt = getattr(rg.optim, name)([rp, rq], **options)
            ropt.load_state_dict(rg.load(buffer))
    np.testing.assert_allclose(rp.detach().numpy(), tp.detach().numpy(), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(rq.detach().numpy(), tq.detach().numpy(), rtol=1e-6, atol=1e-9)


def test_optimizer_load_state_dict_takes_its_own_complex_state():
    p = rg.nn.Parameter(rg.tensor([1 + 2j, -1j], dtype=rg.complex128))
    opt = rg.optim.Adam([p], lr=0.1)
    opt.step(((p.abs()) ** 2).sum().backward())
    again = rg.optim.Adam([p], lr=0.1)
    again.load_state_dict(opt.state_dict())  # raised "holds complex128 values"
    amsgrad = rg.optim.Adam([p], lr=0.1, amsgrad=True)
    amsgrad.step(((p.abs()) ** 2).sum().backward())
    # its check of the state's keys stepped the complex parameter as a real one: "maximum:
    # not implemented for complex128"
    rg.optim.Adam([p], lr=0.1, amsgrad=True).load_state_dict(amsgrad.state_dict())
    assert again.state_dict()["state"][0]["exp_avg"].dtype == rg.complex128  # a tensor, as torch's
    real = rg.nn.Parameter(rg.tensor([1.0, 2.0], dtype=rg.float64))
    with pytest.raises(DTypeError, match="exp_avg holds complex128"):
        rg.optim.Adam([real], lr=0.1).load_state_dict(opt.state_dict())


def test_save_load_of_complex_tensors_and_torch_files_with_conjugate_bits(tmp_path):
    rng = np.random.default_rng(365)
    z = C(rng, 3, 2)
    for dtype in (rg.complex64, rg.complex128):
        saved = {"w": rg.tensor(z).to(dtype), "parts": [rg.tensor(z).to(dtype).conj()]}
        rg.save(saved, tmp_path / "rg.pt")
        back = rg.load(tmp_path / "rg.pt")
        assert back["w"].dtype == dtype
        np.testing.assert_array_equal(back["w"].numpy(), saved["w"].numpy())
        np.testing.assert_array_equal(back["parts"][0].numpy(), saved["parts"][0].numpy())
    # torch saves a lazily conjugated (or negated) view as its storage and a bit to apply
    for name, view in {
        "conj": torch.tensor(z).conj(),
        "conj_row": torch.tensor(z).conj()[1],
        "neg_imag": torch.tensor(z).conj().imag,
        "conj_parameter": torch.nn.Parameter(torch.tensor(z).conj()),
    }.items():
        torch.save({"v": view}, tmp_path / "torch.pt")
        got = rg.load(tmp_path / "torch.pt")["v"]
        np.testing.assert_array_equal(got.numpy(), values(view), err_msg=name)


# -- special values ---------------------------------------------------------------------------
_SPECIAL_PARTS = [0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, math.nan, 1e-310]


def _same_class(expected, got):
    """Equal where finite (to rounding), and the same NaN-ness and infinities elsewhere.
    Rounding is an ulp of the parts' precision: torch's float32 kernels round some special
    values differently by the CPU's vector width (``angle`` of inf + inf j is pi/4 rounded
    down under AVX2's kernels and to nearest under AVX-512's, 0.7853981 and 0.7853982)."""
    parts = np.asarray(expected).real.dtype
    ulp = float(np.finfo(parts).eps) if parts.kind == "f" else 0.0
    for e, g in zip(np.ravel(expected), np.ravel(got)):
        for a, b in ((e.real, g.real), (e.imag, g.imag)):
            if math.isnan(a) or math.isnan(b):
                assert math.isnan(a) and math.isnan(b), (expected, got)
            else:
                assert a == b or math.isclose(a, b, rel_tol=max(ulp, 1e-12)), (e, g)


@pytest.mark.parametrize("dtype", ["complex128", "complex64"])
def test_special_values_in_either_part_match_torch(dtype):
    z = np.array([complex(a, b) for a in _SPECIAL_PARTS for b in _SPECIAL_PARTS], dtype=dtype)
    exact = {
        "abs": lambda t: t.abs(),
        "sqrt": lambda t: t.sqrt(),
        "pow_half": lambda t: t**0.5,  # was exp(0.5 log z): sqrt(inf j) is inf + inf j
        "log": lambda t: t.log(),
        "log2": lambda t: t.log2(),  # was -inf + nan j at 0
        "log10": lambda t: t.log10(),
        "exp": lambda t: t.exp(),
        "sgn": lambda t: t.sgn(),  # was nan + inf j at 1e-310 j
        "angle": lambda t: t.angle(),
        "nan_to_num": lambda t: t.nan_to_num(),  # left the parts' NaN and infinities
        "nan_to_num_given": lambda t: t.nan_to_num(nan=1.0, posinf=2.0, neginf=-3.0),
        "isfinite": lambda t: t.isfinite(),
        "isnan": lambda t: t.isnan(),
        "equal": lambda t: t == t,
        "isclose": lambda t: t.isclose(t, equal_nan=True),
    }
    for name, fn in exact.items():
        expected = values(fn(torch.tensor(z)))
        got = fn(rg.tensor(z)).numpy()
        assert expected.dtype == got.dtype, name
        if name in ("log2", "log10") and dtype == "complex64":  # (float32 rounding)
            np.testing.assert_allclose(got, expected, rtol=1e-6, err_msg=name)
        else:
            _same_class(expected, got)
    # reciprocal and division: torch's own two forms disagree at 0 (1 / 0j is nan + nan j,
    # reciprocal(0j) inf + nan j); both are non-finite there, equal wherever finite
    normal = np.isfinite(z) & (np.abs(z) > 1e-300)  # (1 / 1e-310j: torch's real part NaN)
    for fn in (lambda t: t.reciprocal(), lambda t: 1 / t, lambda t: t / (1 + 1j)):
        expected, got = values(fn(torch.tensor(z))), fn(rg.tensor(z)).numpy()
        np.testing.assert_allclose(got[normal], expected[normal], rtol=1e-6)
    for fn in (lambda t: t.reciprocal(), lambda t: 1 / t):
        assert not np.isfinite(fn(rg.tensor(z)).numpy()[z == 0]).any()


# -- the defects, one by one ------------------------------------------------------------------
def test_autograd_grad_of_complex_outputs_takes_complex_grad_outputs():
    # refused with "grad can be implicitly created only for real outputs": the weighted sum
    # of the outputs was itself complex
    z = rg.tensor([1 + 1j, 2j], dtype=rg.complex128, requires_grad=True)
    tz = torch.tensor([1 + 1j, 2j], dtype=torch.complex128, requires_grad=True)
    weight = [1 + 0.5j, -1j]
    (got,) = rg.autograd.grad(z * z, z, rg.tensor(weight, dtype=rg.complex128))
    (expected,) = torch.autograd.grad(tz * tz, tz, torch.tensor(weight, dtype=torch.complex128))
    np.testing.assert_allclose(got.numpy(), expected.numpy())
    grads = rg.autograd.backward([z.exp()], [rg.tensor(weight, dtype=rg.complex128)])
    (expected,) = torch.autograd.grad(tz.exp(), tz, torch.tensor(weight, dtype=torch.complex128))
    np.testing.assert_allclose(z.grad(grads).numpy(), expected.numpy())


def test_a_gradient_real_where_the_output_is_complex_is_refused():
    z = rg.tensor([1 + 1j, 2j], requires_grad=True)
    with pytest.raises(DTypeError, match="both the gradient and the output must be complex"):
        rg.autograd.grad(z * z, z, rg.tensor([1.0, 2.0]))
    x = rg.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(DTypeError, match="both the gradient and the output must be complex"):
        (x * 2).backward(rg.tensor([1 + 0j, 1j]))
    assert x.grad((x * 2).sum().backward()).tolist() == [2.0, 2.0]  # still usable


@pytest.mark.parametrize("compare", ["lt", "le", "gt", "ge", "lt_"])
def test_ordering_a_real_tensor_against_a_complex_number_is_refused(compare):
    # gave NumPy's lexicographic order of the real tensor and the complex number
    x = rg.tensor([1.0, 2.0])
    with pytest.raises(DTypeError, match="complex numbers have no order"):
        getattr(x, compare)(1j)
    with pytest.raises(torch_error_types()):
        getattr(torch.tensor([1.0, 2.0]), compare)(1j)
    assert (x == 1j).tolist() == [False, False] and (x != 1 + 0j).tolist() == [False, True]


def torch_error_types():
    return (RuntimeError, NotImplementedError)


def test_adjoint_conjugates():
    a = [[1 + 2j, 3j], [1, 1 - 1j]]
    np.testing.assert_array_equal(
        rg.tensor(a).adjoint().numpy(), torch.tensor(a).adjoint().resolve_conj().numpy()
    )
    np.testing.assert_array_equal(
        rg.adjoint(rg.tensor(a)).numpy(), torch.tensor(a).mH.resolve_conj().numpy()
    )


def test_addcmul_keeps_a_fractional_value_for_complex_tensors():
    # value=0.5 was truncated to 0 (the int rule), returning the input unchanged
    a = [[1 + 2j, 3j], [1, 1 - 1j]]
    expected = torch.addcmul(torch.tensor(a), torch.tensor(a), torch.tensor(a), value=0.5)
    got = rg.addcmul(rg.tensor(a), rg.tensor(a), rg.tensor(a), value=0.5)
    np.testing.assert_allclose(got.numpy(), expected.numpy())
    with pytest.raises(DTypeError, match="cannot be converted"):  # as torch
        rg.addcmul(rg.tensor([1.0]), rg.tensor([1.0]), rg.tensor([1.0]), value=1j)


def test_linalg_vecdot_conjugates_its_first_operand():
    a, b = [[1 + 2j, 3j], [1, 1 - 1j]], [[2 - 1j, 1j], [0.5, 1 + 1j]]
    expected = torch.linalg.vecdot(torch.tensor(a), torch.tensor(b))
    np.testing.assert_allclose(rg.linalg.vecdot(rg.tensor(a), rg.tensor(b)).numpy(), expected)


def test_ops_torch_computes_for_complex_are_no_longer_refused():
    z = rg.tensor([[1 + 2j, 3j, 0.5], [1, 1 - 1j, -2j]], dtype=rg.complex128)
    tz = torch.tensor(values(z))
    pairs = {
        "prod": (z.prod(), tz.prod()),
        "cumprod": (z.cumprod(1), tz.cumprod(1)),
        "var": (z.var(1), tz.var(1)),
        "std": (z.std(), tz.std()),
        "matrix_norm": (rg.linalg.matrix_norm(z), torch.linalg.matrix_norm(tz)),
        "lerp": (z.lerp(z * 1j, 0.25), tz.lerp(tz * 1j, 0.25)),
        "linear": (rg.nn.functional.linear(z, z), torch.nn.functional.linear(tz, tz)),
        "cross": (rg.linalg.cross(z, z.conj()), torch.linalg.cross(tz, tz.conj())),
    }
    for name, (got, expected) in pairs.items():
        assert dtype_name(got) == dtype_name(expected), name
        np.testing.assert_allclose(got.numpy(), values(expected), err_msg=name)
    rg.manual_seed(36)
    dropped = rg.nn.functional.dropout(z, 0.5).numpy()  # each element 0 or scaled, as torch's
    assert dropped.dtype == np.complex128
    assert np.all((dropped == 0) | np.isclose(dropped, 2 * z.numpy()))


@pytest.mark.parametrize(
    "call",
    [
        # (the nuclear norm and det compute now: tests/test_complex_linalg.py; lu_factor and
        # solve_triangular too: tests/test_cplx87_solvers.py)
        # (complex convolutions compute now: tests/test_complex_linalg.py)
        lambda z: rg.nn.functional.relu(z),
        lambda z: z.maximum(z),
    ],
)
def test_ops_still_refused_for_complex_name_themselves(call):
    z = rg.tensor([[1 + 2j, 3j], [1, 1 - 1j]])
    with pytest.raises(DTypeError, match=r"complex64|complex"):
        call(z)


def test_function_transforms_of_complex_inputs_match_torch():
    # func.vjp/grad/jvp refused complex inputs ("only float tensors can be differentiated"),
    # and jvp's dummy cotangent was real for a complex output
    z0, v0 = np.array([1 + 1j, 2 - 0.5j, -0.3j]), np.array([1 + 0.5j, -1j, 2 + 0j])

    def transforms(lib):
        x, v = lib.tensor(z0), lib.tensor(v0)
        return (
            lib.func.vjp(lambda x: x.sin() * x, x)[1](v)[0],
            lib.func.grad(lambda x: (x * x.conj()).real.sum() + x.abs().sum())(x),
            lib.func.jvp(lambda x: x.sin() * x.conj(), (x,), (v,))[1],
            lib.func.jvp(lambda x: lib.fft.fft(x).abs(), (x,), (v,))[1],
            lib.autograd.functional.vjp(lambda x: x.exp(), x, v)[1],
        )

    for got, expected in zip(transforms(rg), transforms(torch)):
        assert dtype_name(got) == dtype_name(expected)
        np.testing.assert_allclose(got.numpy(), values(expected), rtol=1e-12)
    for transform in (rg.func.jacrev, rg.func.jacfwd):  # torch's refusal
        with pytest.raises(DTypeError, match="expected all inputs to be real"):
            transform(lambda x: x.abs())(rg.tensor(z0))
