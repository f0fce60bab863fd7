"""``rg.fft`` swept against torch 2.13 (round 94): every transform of the namespace with every
``norm``, ``n``/``s`` that cut and pad, negative and repeated dims, ``dim=None`` with ``s``,
real, complex, integer and bool inputs, odd and even lengths, size-1 and empty dims and
non-contiguous inputs; values (exact zeros where torch's are zero, by structure), result
dtypes, errors, and first- and second-order gradients against torch and float64 finite
differences. A seeded sweep: each case is drawn from one generator, so a failure names its
case and reruns the same."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg

SEED = 94
ONE_DIMENSIONAL = ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft"]
SEVERAL_DIMENSIONAL = [
    "fft2", "ifft2", "fftn", "ifftn", "rfft2", "irfft2",
    "rfftn", "irfftn", "hfft2", "ihfft2", "hfftn", "ihfftn",
]  # fmt: skip
REAL_ONLY = {"rfft", "ihfft", "rfft2", "rfftn", "ihfft2", "ihfftn"}
NORMS = [None, "backward", "ortho", "forward"]


def numpy_of(t):
    return t.resolve_conj().detach().numpy() if isinstance(t, torch.Tensor) else t.numpy()


def signal(rng, shape, dtype):
    if dtype == "bool":
        return rng.random(shape) > 0.5
    if dtype.startswith(("int", "uint")):
        return rng.integers(-3 if dtype.startswith("int") else 0, 4, shape).astype(dtype)
    values = rng.standard_normal(shape)
    if dtype.startswith("complex"):
        values = values + 1j * rng.standard_normal(shape)
    return values.astype(dtype)


def mirrored(spectrum, dims):
    """``conj(X[-k mod n])`` over ``dims``: equal to ``X`` for an exactly Hermitian one."""
    out = spectrum
    for d in dims:
        out = np.roll(np.flip(out, d), 1, d)
    return np.conjugate(out)


# -- the complex transforms of a real input: exactly Hermitian, as torch's ----------------------


@pytest.mark.parametrize("op", ["fft2", "ifft2", "fftn", "ifftn"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_complex_transforms_of_a_real_input_are_exactly_hermitian_as_torchs(op, dtype):
    # torch takes a real input of fft2/fftn as complex (fft_c2c), and its kernel gives an
    # exactly Hermitian spectrum: exactly real at frequency 0 and n / 2 along every dim.
    # Ours rounded those imaginary parts to about 1e-16 (angle: 0 or pi became +-pi or 1e-16)
    rng = np.random.default_rng(SEED)
    cases = [
        ((4, 6), {}, (0, 1)),
        ((5, 7), {"norm": "ortho"}, (0, 1)),
        ((3, 4, 6), {"dim": (0, 2), "norm": "forward"}, (0, 2)),
        ((4, 6), {"dim": (1, 0), "s": (8, 3)}, (0, 1)),
        ((2, 8, 4), {"s": (6, 4)} if op.endswith("2") else {"s": (6, 4), "dim": (1, 2)}, (1, 2)),
    ]
    for shape, kwargs, dims in cases:
        x = signal(rng, shape, dtype)
        theirs = numpy_of(getattr(torch.fft, op)(torch.tensor(x), **kwargs))
        ours = getattr(rg.fft, op)(rg.tensor(x), **kwargs).numpy()
        assert ours.dtype == theirs.dtype
        tolerance = 1e-5 if dtype == "float32" else 1e-12
        np.testing.assert_allclose(ours, theirs, rtol=tolerance, atol=tolerance)
        real_bins = theirs.imag == 0
        assert real_bins[(0,) * ours.ndim]  # (frequency 0 at least)
        np.testing.assert_array_equal(ours.imag[real_bins], 0.0, err_msg=f"{shape} {kwargs}")
        np.testing.assert_array_equal(np.angle(ours)[real_bins], np.angle(theirs)[real_bins])
        np.testing.assert_array_equal(mirrored(theirs, dims), theirs)  # (torch's, exactly)
        np.testing.assert_array_equal(mirrored(ours, dims), ours, err_msg=f"{shape} {kwargs}")


@pytest.mark.parametrize(
    ("op", "shape", "kwargs"),
    [
        ("fft2", (6, 1), {"s": (-1, 4)}),
        ("ifft2", (1, 6), {"s": (3, -1)}),
        ("fftn", (6, 1), {"s": (-1, 3), "dim": (0, 1), "norm": "ortho"}),
        ("rfftn", (1, 6), {"s": (-1, 3), "dim": (1, 0)}),
        ("rfft2", (1, 6), {"s": (-1, 3), "dim": (-1, -2), "norm": "forward"}),
        ("ihfft2", (6, 1), {"s": (-1, 4)}),
        ("ihfftn", (1, 6), {"s": (-1, 3), "dim": (1, 0)}),
    ],
)
def test_a_padded_dim_of_one_entry_keeps_the_spectrum_exact_as_torchs(op, shape, kwargs):
    # a dim of one entry zero-padded transforms to that entry repeated: the rest is the
    # transform of a real signal, exactly real at frequency 0 and n / 2 in torch's; the
    # NumPy backend's complex passes over it rounded those to about 1e-16
    x = signal(np.random.default_rng(SEED), shape, "float64")
    theirs = numpy_of(getattr(torch.fft, op)(torch.tensor(x), **kwargs))
    ours = getattr(rg.fft, op)(rg.tensor(x), **kwargs).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12)
    real_bins = theirs.imag == 0
    np.testing.assert_array_equal(ours.imag[real_bins], 0.0)


# -- the namespace, swept: values, dtypes and errors --------------------------------------------


def one_dimensional_arguments(rng, shape):
    dim = int(rng.choice([-1, 0, len(shape) - 1, -len(shape)]))
    size = shape[dim]
    n = rng.choice([None, 1, max(size - 1, 1), size, size + 1, 2 * size + 1, 0, -1])
    return {"n": None if n is None else int(n), "dim": dim, "norm": rng.choice(NORMS)}


def several_dimensional_arguments(rng, op, shape):
    ndim = len(shape)
    choice = rng.integers(6)
    kwargs = {"norm": rng.choice(NORMS)}
    if choice == 0:  # the defaults
        return kwargs
    if choice == 1:  # s with dim=None: the last len(s) dims
        count = 2 if op.endswith("2") else int(rng.integers(1, ndim + 1))
        kwargs["s"] = tuple(int(rng.choice([-1, 1, 2, 3, 5, 8])) for _ in range(count))
        return kwargs
    dims = list(rng.permutation(ndim)[: int(rng.integers(1, ndim + 1))])
    dims = [int(d) - ndim if rng.random() < 0.5 else int(d) for d in dims]
    if choice == 2 and len(dims) > 1:  # a dim twice (also as its negative)
        dims[-1] = dims[0] - ndim if dims[0] >= 0 else dims[0]
    kwargs["dim"] = tuple(dims)
    if choice >= 4:
        kwargs["s"] = tuple(int(rng.choice([-1, 1, 2, 3, 4, 7, 0])) for _ in dims)
    return kwargs


def outcome(lib, op, data, kwargs, transposed):
    try:
        x = lib.tensor(data)
        if transposed:
            x = x.transpose(0, -1)
        return getattr(lib.fft, op)(x, **kwargs), None
    except Exception as error:  # (both libraries' errors are compared)
        return None, error


def check_same_outcome(label, op, data, kwargs, transposed=False):
    theirs, their_error = outcome(torch, op, data, kwargs, transposed)
    ours, our_error = outcome(rg, op, data, kwargs, transposed)
    if their_error is not None:
        assert isinstance(our_error, rg.RetrogradError), f"{label}: torch raised {their_error!r}"
        assert f"fft.{op}" in str(our_error), f"{label}: {our_error}"
        return "error"
    assert our_error is None, f"{label}: raised {our_error!r}"
    expected = numpy_of(theirs)
    assert ours.dtype == str(theirs.dtype).removeprefix("torch."), label
    assert ours.shape == tuple(theirs.shape), label
    got = ours.numpy()
    single = expected.dtype in (np.float32, np.complex64)
    tolerance = 2e-5 if single else 1e-12
    scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
    np.testing.assert_allclose(got, expected, rtol=tolerance, atol=tolerance * scale, err_msg=label)
    if np.issubdtype(data.dtype, np.floating) or np.issubdtype(data.dtype, np.complexfloating):
        # (an integer signal's sums can be exactly zero in torch's kernel by its order of
        # operations: only a float signal's zeros are the structure's)
        for part in (np.real, np.imag):
            zeros = part(expected) == 0
            np.testing.assert_array_equal(part(got)[zeros], 0.0, err_msg=f"{label}: {part}")
    return "value"


@pytest.mark.parametrize("op", ONE_DIMENSIONAL + SEVERAL_DIMENSIONAL)
def test_the_namespace_matches_torch_values_dtypes_and_errors(op):
    rng = np.random.default_rng([SEED, (ONE_DIMENSIONAL + SEVERAL_DIMENSIONAL).index(op)])
    shapes = [(8,), (7,), (1,), (4, 6), (5, 7), (1, 6), (6, 1), (3, 4, 5), (2, 1, 3), (0,), (2, 0)]
    dtypes = ["float64", "float32", "complex128", "complex64", "int64", "int32", "bool", "uint8"]
    seen = {"value": 0, "error": 0}
    for case in range(45):
        shape = shapes[int(rng.integers(len(shapes)))]
        dtype = dtypes[int(rng.integers(len(dtypes)))] if case % 3 == 0 else "float64"
        if case % 3 == 1:
            dtype = "complex128" if op not in REAL_ONLY else "float32"
        data = signal(rng, shape, dtype)
        if op in ONE_DIMENSIONAL:
            kwargs = one_dimensional_arguments(rng, shape)
        else:
            kwargs = several_dimensional_arguments(rng, op, shape)
        transposed = len(shape) > 1 and case % 4 == 3
        label = f"{op} case {case}: {dtype}{shape} {kwargs} transposed={transposed}"
        seen[check_same_outcome(label, op, data, kwargs, transposed)] += 1
    assert seen["value"] >= 18, seen  # (the sweep mostly computes, and reaches some errors)
    assert seen["error"] >= 1, seen


@pytest.mark.parametrize("op", ONE_DIMENSIONAL + SEVERAL_DIMENSIONAL)
def test_bad_arguments_are_refused_as_torch_refuses_them(op):
    data = signal(np.random.default_rng(SEED), (4, 6), "float64")
    if op in ONE_DIMENSIONAL:
        bad = [{"n": 0}, {"n": -2}, {"dim": 2}, {"dim": -3}, {"norm": "half"}, {"n": 2.0}]
    else:
        bad = [{"dim": (0, 0)}, {"dim": (1, -1)}, {"dim": (2,)}, {"s": (0, 3)}, {"norm": "x"},
               {"s": (3,), "dim": (0, 1)}, {"s": (2, 3, 4)}, {"s": (3.0, 4)}]  # fmt: skip
    for kwargs in bad:
        assert check_same_outcome(f"{op} {kwargs}", op, data, kwargs) == "error"
    for shape in [(0,), (3, 0)]:
        assert check_same_outcome(f"{op} of {shape}", op, np.zeros(shape), {}) == "error"
    check_same_outcome(f"{op} of a 0-d tensor", op, np.array(1.5), {})  # (fftn's is itself)


def test_a_failed_transform_leaves_its_input_usable():
    x = rg.tensor(signal(np.random.default_rng(SEED), (4, 6), "float64"), requires_grad=True)
    with pytest.raises(rg.RetrogradError, match=r"fft\.fft2"):
        rg.fft.fft2(x, dim=(0, 0))
    y = rg.fft.fft2(x * 2)
    expected = torch.fft.fft2(torch.tensor(x.detach().numpy()) * 2).abs().sum()
    np.testing.assert_allclose(y.abs().sum().item(), expected.item(), rtol=1e-12)
    assert x.grad(y.abs().sum().backward()).shape == (4, 6)


# -- gradients: first and second order against torch, first order against finite differences --


def real_loss(lib, y, weights, linear):
    """A real loss of the (complex or real) output, torch's convention for complex gradients:
    the real part of a linear form plus a weighted squared modulus (so second derivatives
    are not zero)."""
    if y.is_complex():
        return (y * linear).real.sum() + (y.abs() ** 2 * weights).sum()
    return (y * linear.real).sum() + (y**2 * weights).sum()


def gradients(lib, op, data, kwargs, transposed, linear, weights, direction):
    x = lib.tensor(data, requires_grad=True)
    y = getattr(lib.fft, op)(x.transpose(0, -1) if transposed else x, **kwargs)
    loss = real_loss(lib, y, lib.tensor(weights), lib.tensor(linear))
    (first,) = lib.autograd.grad(loss, [x], create_graph=True)
    along = lib.tensor(direction)
    second_loss = (first * along).real.sum() if first.is_complex() else (first * along.real).sum()
    second_loss = second_loss + (first.abs() ** 2).sum()
    (second,) = lib.autograd.grad(second_loss, [x])
    return numpy_of(y), numpy_of(first), numpy_of(second)


def gradient_cases():
    cases = []
    for op in ONE_DIMENSIONAL:
        cases += [(op, (4, 6), {"n": 5, "dim": 0, "norm": "ortho"}), (op, (3, 7), {"n": 9})]
    for op in SEVERAL_DIMENSIONAL:
        cases += [(op, (3, 5, 4), {"norm": "forward"})]
        cases += [(op, (4, 5), {"s": (3, 8), "dim": (1, 0), "norm": "ortho"})]
    return cases


@pytest.mark.parametrize(("op", "shape", "kwargs"), gradient_cases())
def test_first_and_second_order_gradients_are_torchs(op, shape, kwargs):
    rng = np.random.default_rng([SEED, len(op), *shape])
    for dtype in ["float64"] if op in REAL_ONLY else ["float64", "complex128"]:
        transposed = dtype == "complex128"  # (a non-contiguous input for half the cases)
        data = signal(rng, shape, dtype)
        x = torch.tensor(data)
        out_shape = getattr(torch.fft, op)(x.transpose(0, -1) if transposed else x, **kwargs)
        linear = signal(rng, tuple(out_shape.shape), "complex128")
        weights = rng.random(tuple(out_shape.shape))
        direction = signal(rng, shape, "complex128")
        theirs = gradients(torch, op, data, kwargs, transposed, linear, weights, direction)
        ours = gradients(rg, op, data, kwargs, transposed, linear, weights, direction)
        for what, expected, got in zip(("value", "gradient", "second"), theirs, ours):
            assert got.shape == expected.shape, what
            scale = max(1.0, float(np.abs(expected).max()))
            np.testing.assert_allclose(
                got, expected, rtol=1e-10, atol=1e-10 * scale, err_msg=f"{dtype} {what}"
            )


@pytest.mark.parametrize("op", ONE_DIMENSIONAL + SEVERAL_DIMENSIONAL)
def test_gradients_agree_with_finite_differences(op):
    rng = np.random.default_rng([SEED, 7, len(op)])
    shape = (3, 4)
    kwargs = {"norm": "ortho"} | ({"n": 5} if op in ONE_DIMENSIONAL else {"s": (4, 3)})
    dtype = "float64" if op in REAL_ONLY else "complex128"
    data = signal(rng, shape, dtype)
    out_shape = tuple(getattr(torch.fft, op)(torch.tensor(data), **kwargs).shape)
    linear, weights = signal(rng, out_shape, "complex128"), rng.random(out_shape)

    def loss(values):  # float64 NumPy, independent of both libraries' gradients
        y = numpy_of(getattr(torch.fft, op)(torch.tensor(values), **kwargs))
        if np.iscomplexobj(y):
            return float((y * linear).real.sum() + (np.abs(y) ** 2 * weights).sum())
        return float((y * linear.real).sum() + (y**2 * weights).sum())

    step = 1e-6
    expected = np.zeros(data.shape, dtype)
    for index in np.ndindex(shape):
        for unit in (1.0, 1j) if dtype == "complex128" else (1.0,):
            plus, minus = data.copy(), data.copy()
            plus[index] += step * unit
            minus[index] -= step * unit
            expected[index] += unit * (loss(plus) - loss(minus)) / (2 * step)
    x = rg.tensor(data, requires_grad=True)
    y = getattr(rg.fft, op)(x, **kwargs)
    got = x.grad(real_loss(rg, y, rg.tensor(weights), rg.tensor(linear)).backward()).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6 * np.abs(expected).max())


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_inputs_are_refused_as_torchs_cpu_kernels_refuse_them(dtype):
    # torch's CPU transforms compute in float32/float64 only ("Unsupported dtype Half"); ours
    # computed a float16 signal's transform in complex64, a result torch never gives
    if isinstance(rg.current_backend().inner, rg.NumpyBackend):
        return  # NumPy has no half-precision tensors to refuse (float16 data becomes float32)
    data = signal(np.random.default_rng(SEED), (4, 6), "float32")
    for op in ONE_DIMENSIONAL + SEVERAL_DIMENSIONAL:
        with pytest.raises(RuntimeError, match="Unsupported dtype"):
            getattr(torch.fft, op)(torch.tensor(data, dtype=getattr(torch, dtype)))
        x = rg.tensor(data, dtype=dtype)
        with pytest.raises(rg.DTypeError, match=rf"^fft\.{op}: unsupported dtype {dtype}"):
            getattr(rg.fft, op)(x)
        assert x.dtype == dtype and getattr(rg.fft, op)(x.float()).dtype.startswith(("c", "f"))


@pytest.mark.parametrize("op", ["fftn", "ifftn", "rfftn", "irfftn", "hfftn", "ihfftn"])
def test_an_s_longer_than_the_input_is_named_as_torch_names_it(op):
    # torch: "Got shape with 3 values but input tensor only has 2 dimensions"; ours named
    # the dimension -3 that s implied ("dimension -3 is out of range"), not s
    with pytest.raises(RuntimeError, match="Got shape with 3 values but input tensor only has 2"):
        getattr(torch.fft, op)(torch.ones(4, 6), s=(2, 3, 4))
    with pytest.raises(rg.ShapeError, match=rf"^fft\.{op}: s=\(2, 3, 4\) has 3 sizes but the "):
        getattr(rg.fft, op)(rg.ones(4, 6), s=(2, 3, 4))


# -- the helpers ----------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["fftshift", "ifftshift"])
def test_a_shift_of_no_dims_is_refused_as_torch_refuses_it(op):
    # torch's shifts are a roll, which refuses no shifts ("`shifts` required"): a 0-d input
    # (its default dims are none) or dim=(); ours gave the input back
    for shape, dim in [((), None), ((3, 4), ())]:
        with pytest.raises(RuntimeError, match="`shifts` required"):
            getattr(torch.fft, op)(torch.ones(shape), dim=dim)
        with pytest.raises(rg.InvalidArgumentError, match=rf"^fft\.{op}: no dims to shift"):
            getattr(rg.fft, op)(rg.ones(shape), dim=dim)
    data = signal(np.random.default_rng(SEED), (3, 4), "complex128")
    for dim in [None, 0, -1, (1, 0), [0]]:  # (and what they shift, as torch's)
        theirs = getattr(torch.fft, op)(torch.tensor(data).transpose(0, 1), dim=dim).numpy()
        ours = getattr(rg.fft, op)(rg.tensor(data).transpose(0, 1), dim=dim).numpy()
        np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("op", ["fftfreq", "rfftfreq"])
@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_frequencies_of_a_complex_dtype_are_refused_as_torch_refuses_them(op, dtype):
    # torch's dtype check lets a complex dtype through, and its CPU arange refuses it
    # ('"arange_cpu" not implemented for 'ComplexFloat''); ours computed complex frequencies
    for n in (0, 5):
        with pytest.raises(NotImplementedError, match="not implemented for 'Complex"):
            getattr(torch.fft, op)(n, dtype=getattr(torch, dtype))
        with pytest.raises(rg.DTypeError, match=rf"^fft\.{op}: the frequencies of a complex"):
            getattr(rg.fft, op)(n, dtype=dtype)
    theirs = getattr(torch.fft, op)(6, 0.5, dtype=torch.float64).numpy()
    np.testing.assert_array_equal(getattr(rg.fft, op)(6, 0.5, dtype="float64").numpy(), theirs)


# -- arguments --------------------------------------------------------------------------------


def test_lengths_of_any_integer_type_are_taken_as_torch_takes_them():
    # torch's parser takes anything with __index__ for n and s (NumPy's int64, a 0-d integer
    # tensor); ours refused them as "invalid number of data points (np.int64(5))"
    data = signal(np.random.default_rng(SEED), (6, 8), "float64")
    calls = [
        lambda lib: lib.fft.fft(lib.tensor(data), n=np.int64(5)),
        lambda lib: lib.fft.irfft(lib.tensor(data), n=np.int32(7), norm="ortho"),
        lambda lib: lib.fft.fft(lib.tensor(data), n=lib.tensor(5)),
        lambda lib: lib.fft.fftn(lib.tensor(data), s=[np.int64(3), np.int64(-1)]),
        lambda lib: lib.fft.irfft2(lib.tensor(data), s=(np.int16(4), 9)),
    ]
    for call in calls:
        theirs, ours = numpy_of(call(torch)), call(rg).numpy()
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12)
    for bad in [np.float64(5), 5.0, None, True, "tensor"]:  # (torch: "must be tuple of ints")
        with pytest.raises(TypeError, match="must be tuple of ints"):
            theirs = torch.tensor(5.0) if bad == "tensor" else bad
            torch.fft.fftn(torch.tensor(data), s=(theirs, 3))
        ours = rg.tensor(5.0) if bad == "tensor" else bad
        with pytest.raises(rg.InvalidArgumentError, match=r"^fft\.fftn: invalid number of data"):
            rg.fft.fftn(rg.tensor(data), s=(ours, 3))


@pytest.mark.parametrize("op", ["irfft", "irfft2", "irfftn", "hfft", "hfft2", "hfftn"])
def test_a_real_transform_refuses_a_complex_out_as_torch(op):
    # torch: "irfft expects a floating point output tensor, but got ComplexDouble"; ours
    # wrote the real result into the complex out
    data = signal(np.random.default_rng(SEED), (4, 6), "complex128")
    shape = tuple(getattr(torch.fft, op)(torch.tensor(data)).shape)
    with pytest.raises(RuntimeError, match="expects a floating point output tensor"):
        getattr(torch.fft, op)(torch.tensor(data), out=torch.zeros(shape, dtype=torch.complex128))
    out = rg.zeros(shape, dtype="complex128")
    with pytest.raises(rg.DTypeError, match=rf"^fft\.{op} expects a floating point output"):
        getattr(rg.fft, op)(rg.tensor(data), out=out)
    assert not out.numpy().any()  # (left as it was)
    theirs = torch.zeros(shape, dtype=torch.float64)
    getattr(torch.fft, op)(torch.tensor(data), out=theirs)
    ours = rg.zeros(shape, dtype="float64")
    assert getattr(rg.fft, op)(rg.tensor(data), out=ours) is ours
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12, atol=1e-12)
