"""Random FFT, STFT and window programs against PyTorch, round 72: every option.

Each seed draws a few programs, run on torch and on retrograd from the same inputs:

* *transforms*: ``torch.fft``'s ``fft``/``ifft``/``rfft``/``irfft``/``hfft``/``ihfft`` (``n=``
  padding and truncating, odd and even, ``dim=`` negative too), ``fft2``/``ifft2``/``rfft2``/
  ``irfft2``/``hfft2``/``ihfft2`` and ``fftn``/``ifftn``/``rfftn``/``irfftn``/``hfftn``/
  ``ihfftn`` (``s=``, ``dim=`` in any order), every ``norm=``, of real, complex and integer
  signals; ``fftshift``/``ifftshift`` with ``dim=`` an int, a tuple or none;
* *spectrograms*: ``torch.stft`` (``n_fft``, ``hop_length``, ``win_length``, a window or none,
  ``center``, every ``pad_mode``, ``normalized``, ``onesided``, ``return_complex`` both ways, a
  complex signal's or a complex window's two-sided one, ``align_to_window``) and
  ``torch.istft`` of its spectrum (``length=``);
* *windows*: ``hann``/``hamming``/``blackman``/``bartlett``/``kaiser`` windows (``periodic=``,
  ``beta=``, dtype) and ``fft.fftfreq``/``rfftfreq`` (``d=``, dtype);
* a complex result passed through ``real``/``imag``/``abs``/``angle``/``conj``/
  ``view_as_real`` (and back with ``view_as_complex``);
* bad options (a zero length, an unknown norm, a dim out of range, ``s`` and ``dim`` of other
  lengths, a window of another size, ...): where torch raises, retrograd must raise an error
  that is an instance of torch's exception class (API.md section 7).

Values, shapes and dtypes (complex64/complex128 too) are compared; for float64 inputs the
gradient of a weighted sum of the result's real and imaginary parts is compared as well, the
signal's and the window's.

Left out by design: ``rfftfreq`` of a negative ``n`` (torch's arange gives ``[-0.]`` or nothing;
retrograd refuses it); torch's refusal of ``view_as_real`` on the lazy conjugate its ``ifft`` of
a real signal returns (retrograd has no conjugate bit: torch's side is resolved first); a
negative ``length=`` of ``istft`` (torch slices its signal by it; retrograd refuses it); torch's
out-of-storage read of ``stft(center=False, align_to_window=True)`` (``TORCH_BUGS``).
float64 to 1e-10 of the result's largest entry, float32 to 1e-4 (sums of up to ~60 terms).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")

#: (rtol, atol) relative to the largest entry of the expected tensor
TOL = {"float64": (1e-10, 1e-12), "float32": (1e-4, 1e-6)}


class Mismatch(AssertionError):  # noqa: N818 (read as "a mismatch with torch")
    """retrograd and torch disagree."""


def _flag(rng, p=0.5):
    return bool(rng.random() < p)


def _pick(rng, options):
    return options[int(rng.integers(len(options)))]


def _np(value):
    if isinstance(value, torch.Tensor):
        value = value.detach()
        return value.resolve_conj().resolve_neg().numpy()
    if isinstance(value, rg.Tensor):
        return np.asarray(value.detach().numpy())
    return np.asarray(value)


def _dtype_name(value):
    return str(value.dtype).rpartition(".")[2]


def _close(log, what, mine, theirs, dtype, angular=False):
    a, b = _np(mine), _np(theirs)
    if a.shape != b.shape:
        raise Mismatch(f"{log}\n{what}: shape {a.shape} vs torch's {b.shape}")
    rtol, atol = TOL[dtype]
    if not np.array_equal(np.isnan(a), np.isnan(b)):
        raise Mismatch(f"{log}\n{what}: NaNs differ\n{a}\nvs torch's\n{b}")
    a, b = np.nan_to_num(a), np.nan_to_num(b)
    if angular and a.shape == b.shape:
        # angles on the branch cut: pi and -pi of an imaginary part +0.0 or -0.0 (torch's lazy
        # conjugate of ifft(real) negates a zero that retrograd's transform leaves positive)
        a = b + (np.mod(a - b + np.pi, 2 * np.pi) - np.pi)
    scale = float(np.max(np.abs(b), initial=0.0))
    err = float(np.max(np.abs(a - b), initial=0.0))
    if err > rtol * scale + atol:
        raise Mismatch(f"{log}\n{what}: off by {err:.3g}\n{a}\nvs torch's\n{b}")


def _attempt(action):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return action(), None
    except Exception as error:  # (each side's error is compared by the caller)
        return None, error


#: torch's words for a dimension out of range (an IndexError), retrograd's ShapeError (API.md
#: section 7)
DIMENSION_OUT_OF_RANGE = "Dimension out of range"


#: torch's own failure, not its contract: stft(center=False, align_to_window=True) whose last
#: frame, shifted to the window, runs past the signal reads out of its storage
TORCH_BUGS = ("setStorage: sizes",)


def _same_outcome(log, what, mine, theirs):
    """Both raised, or neither: True if both. retrograd's error must be a ``RetrogradError``,
    and of torch's Python class where that is no ``RuntimeError`` (a ``ShapeError`` for torch's
    "Dimension out of range" ``IndexError``), as round 62 checks."""
    (_, error), (_, expected) = mine, theirs
    if expected is None and error is None:
        return False
    if expected is not None and any(bug in str(expected) for bug in TORCH_BUGS):
        return True
    if expected is None:
        raise Mismatch(f"{log}\n{what}: retrograd raised {type(error).__name__}: {error}")
    if error is None:
        raise Mismatch(f"{log}\n{what}: retrograd accepted; torch raised {expected!r}")
    wrong = not isinstance(error, rg.RetrogradError)
    if isinstance(expected, IndexError) and DIMENSION_OUT_OF_RANGE in str(expected):
        wrong = wrong or not isinstance(error, rg.ShapeError)
    else:
        for cls in (IndexError, TypeError, ValueError):
            wrong = wrong or (isinstance(expected, cls) and not isinstance(error, cls))
    if wrong:
        raise Mismatch(
            f"{log}\n{what}: raised {type(error).__name__}: {error}\ntorch: "
            f"{type(expected).__name__}: {expected}"
        )
    return True


# -- drawing ---------------------------------------------------------------------------------------
ONE_D = ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft")
TWO_D = ("fft2", "ifft2", "rfft2", "irfft2", "hfft2", "ihfft2")
N_D = ("fftn", "ifftn", "rfftn", "irfftn", "hfftn", "ihfftn")
REAL_INPUT = ("rfft", "ihfft", "rfft2", "rfftn", "ihfft2", "ihfftn")
WINDOWS = ("hann_window", "hamming_window", "blackman_window", "bartlett_window", "kaiser_window")
POST = ("none", "real", "imag", "abs", "angle", "conj", "view_as_real", "roundtrip")
KINDS = ("one_d", "two_d", "n_d", "shift", "stft", "istft", "window", "freq")


def _signal(rng, shape, dtype, complex_):
    values = rng.standard_normal(shape)
    if complex_:
        values = values + 1j * rng.standard_normal(shape)
        return values.astype(np.complex64 if dtype == "float32" else np.complex128)
    return values.astype(dtype)


def _norm(rng, bad):
    if bad and _flag(rng, 0.3):
        return _pick(rng, ["bogus", "Ortho", ""])
    return _pick(rng, [None, "backward", "ortho", "forward"])


def _length(rng, bad):
    if bad and _flag(rng, 0.3):
        return _pick(rng, [0, -2])
    return int(rng.integers(1, 9))


def draw_program(rng):
    kind = _pick(rng, KINDS)
    bad = _flag(rng, 0.15)
    dtype = _pick(rng, ["float64", "float64", "float32"])
    program = {"kind": kind, "bad": bad, "dtype": dtype, "post": _pick(rng, POST)}
    if kind in ("one_d", "two_d", "n_d", "shift"):
        rank = int(rng.integers(1 if kind in ("one_d", "shift") else 2, 4))
        shape = tuple(int(rng.integers(1, 7)) for _ in range(rank))
        if kind == "one_d":
            op = _pick(rng, ONE_D)
        elif kind == "two_d":
            op = _pick(rng, TWO_D)
        elif kind == "n_d":
            op = _pick(rng, N_D)
        else:
            op = _pick(rng, ["fftshift", "ifftshift"])
        complex_ = op not in REAL_INPUT and _flag(rng, 0.6)
        if bad and _flag(rng, 0.2):  # a complex input to a real transform
            complex_ = True
        x = _signal(rng, shape, dtype, complex_)
        if not complex_ and _flag(rng, 0.1):  # an integer signal (torch: complex64, float32)
            x = np.round(x * 5).astype(np.int64)
        program.update(op=op, x=x)
        kw: dict = {}
        if kind == "one_d":
            kw["dim"] = int(rng.integers(-rank, rank))
            if bad and _flag(rng, 0.3):
                kw["dim"] = _pick(rng, [rank, -rank - 1])
            if _flag(rng, 0.5) or bad:
                kw["n"] = _length(rng, bad)
            kw["norm"] = _norm(rng, bad)
        elif kind in ("two_d", "n_d"):
            count = 2 if kind == "two_d" else int(rng.integers(1, rank + 1))
            dims = [int(d) for d in rng.permutation(rank)[:count]]
            dims = [d - rank if _flag(rng) else d for d in dims]
            if bad and _flag(rng, 0.3):
                dims = [dims[0], dims[0] - rank if dims[0] >= 0 else dims[0] + rank] + dims[2:]
            if kind == "two_d" and rank == 2 and _flag(rng, 0.4):
                pass  # the default dims (-2, -1)
            elif kind == "n_d" and _flag(rng, 0.25):
                pass  # every dim (or those of s)
            else:
                kw["dim"] = tuple(dims)
            if _flag(rng, 0.5) or bad:
                n_s = len(kw.get("dim", ()))
                if not n_s:
                    n_s = 2 if kind == "two_d" else int(rng.integers(1, rank + 1))
                s = [_length(rng, bad) for _ in range(n_s)]
                if bad and _flag(rng, 0.3):
                    s = s + [3]
                if _flag(rng, 0.15) and len(s) > 0:  # -1: the input's own length there
                    s[0] = -1
                kw["s"] = tuple(s)
            kw["norm"] = _norm(rng, bad)
        else:
            choice = _pick(rng, ["none", "int", "tuple"])
            if choice == "int":
                kw["dim"] = int(rng.integers(-rank, rank))
            elif choice == "tuple":
                order = rng.permutation(rank)
                kw["dim"] = tuple(int(d) for d in order[: int(rng.integers(1, rank + 1))])
            if bad:
                kw["dim"] = _pick(rng, [rank + 1, (0, 0), (0, rank)])
        program["kwargs"] = kw
    elif kind in ("stft", "istft"):
        complex_ = _flag(rng, 0.2)
        batch = _pick(rng, [(), (2,)])
        n_fft = int(rng.integers(2, 13))
        length = int(rng.integers(n_fft, 40))
        if bad and _flag(rng, 0.3):
            length = max(1, n_fft // 2)
        program["x"] = _signal(rng, (*batch, length), dtype, complex_)
        kw = {"n_fft": n_fft}
        if _flag(rng, 0.7):
            kw["hop_length"] = int(rng.integers(1, n_fft + 1))
        if _flag(rng, 0.5):
            kw["win_length"] = int(rng.integers(1, n_fft + 1))
        win = kw.get("win_length", n_fft)
        window = _pick(rng, [None, "hann_window", "hamming_window", "ones"])
        window_dtype = dtype
        if bad and _flag(rng, 0.3):
            window, win = "ones", win + 1
        elif bad and window is not None and _flag(rng, 0.3):
            window_dtype = "float32" if dtype == "float64" else "float64"
        if kind == "stft" and window is not None and _flag(rng, 0.15):
            window_dtype = "complex64" if window_dtype == "float32" else "complex128"
        program["window"] = (window, win, window_dtype)
        kw["center"] = _flag(rng, 0.7)
        if not kw["center"] and kind == "stft" and _flag(rng, 0.3):
            kw["align_to_window"] = _flag(rng)
        if kw["center"] and _flag(rng, 0.5):
            kw["pad_mode"] = _pick(rng, ["reflect", "constant", "replicate", "circular"])
            if bad and _flag(rng, 0.3):
                kw["pad_mode"] = "bogus"
        kw["normalized"] = _flag(rng, 0.3)
        if _flag(rng, 0.5):
            kw["onesided"] = (_flag(rng) and not complex_) if not bad else True
        kw["return_complex"] = True if kind == "istft" else _pick(rng, [True, False, True])
        if bad and _flag(rng, 0.3):
            kw.pop("return_complex")
            if _flag(rng):
                kw["hop_length"] = 0
        program["kwargs"] = kw
        if kind == "istft":
            ikw = {}
            if _flag(rng, 0.4):
                ikw["length"] = int(rng.integers(max(1, length - 5), length + 5))
                if bad and _flag(rng, 0.3):
                    # (not a negative length: torch slices its signal by it, to a shorter one
                    # or none; retrograd refuses it, by design)
                    ikw["length"] = 0
            program["istft_kwargs"] = ikw
    elif kind == "window":
        op = _pick(rng, WINDOWS)
        kw = {"periodic": _flag(rng)}
        if op == "kaiser_window" and _flag(rng, 0.6):
            kw["beta"] = float(_pick(rng, [0.0, 1.5, 8.0, 12.0]))
        if _flag(rng, 0.7):
            kw["dtype"] = dtype
        length = int(rng.integers(0, 10))
        if bad and _flag(rng, 0.5):
            length = -1
        elif bad:  # an integer dtype
            kw["dtype"] = "int64"
        program.update(op=op, length=length, kwargs=kw)
    else:
        op = _pick(rng, ["fftfreq", "rfftfreq"])
        kw = {}
        if _flag(rng, 0.6):
            kw["d"] = float(_pick(rng, [0.5, 0.1, 2.0, 1.0 / 3]))
        if _flag(rng, 0.6):
            kw["dtype"] = dtype
        n = int(rng.integers(1, 11))
        if bad and _flag(rng, 0.3):
            kw["dtype"] = "int64"
        elif bad:
            # (rfftfreq of a negative n: torch gives [-0.] or an empty tensor, its arange of
            # n // 2 + 1 entries; retrograd refuses it, by design: left out)
            n = _pick(rng, [0, -1]) if op == "fftfreq" else 0
        program.update(op=op, n=n, kwargs=kw)
    return program


# -- running ---------------------------------------------------------------------------------------
def _dtype(lib, name):
    return getattr(lib, name)


def _window(lib, spec):
    """The window (one of float64 a leaf that requires a gradient), of torch's values: the
    window functions themselves are drawn by their own programs."""
    name, length, dtype = spec
    if name is None:
        return None
    real = {"complex64": "float32", "complex128": "float64"}.get(dtype, dtype)
    if name == "ones":
        values = np.ones(length, dtype=real)
    else:
        values = getattr(torch, name)(length, dtype=getattr(torch, real)).numpy()
    if real != dtype:  # a complex window: a phase ramp on it
        values = (values * np.exp(0.3j * np.arange(length))).astype(dtype)
    return lib.tensor(values, requires_grad=dtype in ("float64", "complex128"))


def _post(lib, out, post):
    if not out.is_complex():
        return out
    if post == "real":
        return out.real
    if post == "imag":
        return out.imag
    if post == "abs":
        return out.abs()
    if post == "angle":
        return out.angle()
    if post == "conj":
        return out.conj()
    if post == "view_as_real":
        if lib is torch:
            # (torch's ifft/ihfft of a real signal is a lazy conjugate, which its view_as_real
            # refuses: retrograd has no conjugate bit and takes it, by design)
            out = out.resolve_conj()
        return lib.view_as_real(out)
    if post == "roundtrip":
        if lib is torch:
            out = out.resolve_conj()
        return lib.view_as_complex(lib.view_as_real(out) * 2.0)
    return out


def run(lib, program):
    """``(output, [the inputs that require a gradient]) of the program on ``lib``."""
    kind, dtype = program["kind"], program["dtype"]
    kw = dict(program["kwargs"])
    if kind == "window":
        if "dtype" in kw:
            kw["dtype"] = _dtype(lib, kw["dtype"])
        return getattr(lib, program["op"])(program["length"], **kw), []
    if kind == "freq":
        if "dtype" in kw:
            kw["dtype"] = _dtype(lib, kw["dtype"])
        return getattr(lib.fft, program["op"])(program["n"], **kw), []
    x = lib.tensor(
        program["x"], requires_grad=program["x"].dtype.kind != "i" and dtype == "float64"
    )
    inputs = [x] if x.requires_grad else []
    if kind in ("stft", "istft"):
        window = _window(lib, program["window"])
        inputs += [window] if window is not None and window.requires_grad else []
        out = lib.stft(x, window=window, **kw)
        if kind == "istft":
            ikw = {k: v for k, v in kw.items() if k not in ("pad_mode", "return_complex")}
            ikw.update(program["istft_kwargs"])
            if x.is_complex():
                ikw["return_complex"] = True
            out = lib.istft(out, window=window, **ikw)
    else:
        out = getattr(lib.fft, program["op"])(x, **kw)
    return _post(lib, out, program["post"]), inputs


def _loss(lib, out, weights):
    if out.is_complex():
        return (out.real * lib.tensor(weights[0])).sum() + (out.imag * lib.tensor(weights[1])).sum()
    return (out * lib.tensor(weights[0])).sum()


def check_program(rng, log_prefix=""):
    program = draw_program(rng)
    if program["post"] in ("angle", "abs"):
        # the angle of an entry that is zero up to rounding is the angle of that rounding
        # (0.0 in one library, 1e-17 + 1e-17j in the other), and its gradient (1 / |z|)
        # amplifies a rounding by max|z| / |z| (seed 2034 of the sweep: 2e-10 at |z| ~ 1e-6 of
        # the largest); the gradient of abs there is the rounding's direction (torch's 0.0
        # gives 0; seed 5485: a window's gradient off by 0.1): such programs compare the
        # complex result itself
        plain = _attempt(lambda: run(torch, {**program, "post": "none"}))[0]
        if plain is not None and plain[0].is_complex():
            modulus = plain[0].detach().abs()
            if bool((modulus < 1e-3 * modulus.max()).any()):
                program["post"] = "none"
    log = f"{log_prefix}{ {k: v for k, v in program.items() if k != 'x'} }"
    if "x" in program:
        log += f"\nx: {program['x'].shape} {program['x'].dtype}"
    theirs = _attempt(lambda: run(torch, program))
    mine = _attempt(lambda: run(rg, program))
    if _same_outcome(log, "the call", mine, theirs):
        return
    (out, x), (expected, tx) = mine[0], theirs[0]
    if _dtype_name(out) != _dtype_name(expected):
        raise Mismatch(f"{log}\ndtype {_dtype_name(out)} vs torch's {_dtype_name(expected)}")
    real_dtype = "float32" if _dtype_name(expected) in ("float32", "complex64") else "float64"
    grad_dtype = "float64"
    if program.get("window", (None,))[0] is not None and program["window"][2] in (
        "float32",
        "complex64",
    ):
        # a float32 window of a float64 signal: torch's istft squares and overlap-adds the
        # window in float32 (its envelope), retrograd in the signal's dtype (the sweep: 9e-8,
        # 1.5e-7 in the gradients)
        real_dtype = grad_dtype = "float32"
    _close(log, "value", out, expected, real_dtype, angular=program["post"] == "angle")
    if not tx or not expected.requires_grad:
        return
    shape = tuple(expected.shape)
    weights = (rng.standard_normal(shape), rng.standard_normal(shape))
    expected_grads = torch.autograd.grad(_loss(torch, expected, weights), tx)
    grads = rg.autograd.grad(_loss(rg, out, weights), x)
    for k, (grad, expected_grad) in enumerate(zip(grads, expected_grads, strict=True)):
        what = f"gradient of input {k}"
        if _dtype_name(grad) != _dtype_name(expected_grad):
            raise Mismatch(f"{log}\n{what}: {_dtype_name(grad)} vs {_dtype_name(expected_grad)}")
        _close(log, what, grad, expected_grad, grad_dtype)


PROGRAMS_PER_SEED = 8


@pytest.mark.parametrize("seed", range(40))
def test_random_fft_stft_and_windows_against_torch(seed):
    rng = np.random.default_rng([72, seed])
    for i in range(PROGRAMS_PER_SEED):
        check_program(rng, f"seed {seed} program {i}: ")
