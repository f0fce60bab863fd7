"""Random programs against PyTorch, round 44: the callables no other generator draws.

A coverage count of the generators in ``tests/`` (which public ``rg.*``, ``Tensor``,
``rg.nn.functional``, ``rg.linalg``, ``rg.special`` and ``rg.fft`` callables any op table or
lambda names) left out mostly the in-place spellings (``acos_``, ``ldexp_``, ``hardtanh_`` ...),
the ``arc*`` aliases, the numpy-style stacking and splitting helpers, the ``*_scatter`` family,
the window functions, the ``with_indices`` pools and their unpools, the orthogonal-polynomial and
Bessel functions of ``rg.special`` and the n-dimensional ``rg.fft`` transforms. Each case here
calls one of them with random keyword arguments (``dim``, ``keepdim``, ``norm``, ``s``, ``p``,
``periodic``, ``beta`` ...) on random shapes (0-d, size-0 and size-1 dims), dtypes (float32,
float64, int64, int32, bool, complex64 where torch takes them) and, at random, non-contiguous
inputs (a strided slice of a larger leaf). retrograd must agree with torch on whether the call
raises (retrograd with a ``RetrogradError``), on the values, dtypes and shapes of every result
and, for float64 inputs, on the gradients torch can compute. The inner backend and the
checkpointing strategy are the suite's (``RETROGRAD_INNER``, ``RETROGRAD_CHECKPOINTING``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import retrograd as rg

torch = pytest.importorskip("torch")


def _examples(count: int) -> int:
    """``count``, times ``FUZZ44_SCALE`` (a longer hunt than the suite's)."""
    return count * int(os.environ.get("FUZZ44_SCALE", "1"))


class Mismatch(AssertionError):  # noqa: N818 (read as "a mismatch with torch")
    """retrograd and torch disagree."""


FLOATS = ("float32", "float64")
REAL = ("float32", "float64", "int64", "int32")
ALL = ("float32", "float64", "int64", "int32", "bool", "complex64")


@dataclass(frozen=True)
class Case:
    """One callable: ``call(lib, *inputs, **kwargs)`` on ``arity`` inputs of one dtype."""

    call: Callable
    dtypes: tuple = FLOATS
    arity: int = 1
    low: float = -2.0
    high: float = 2.0
    min_ndim: int = 0
    max_ndim: int = 3
    kwargs: Callable | None = None  # shape -> strategy of keyword arguments
    second_shape: Callable | None = None  # shape -> the second input's shape
    differentiable: bool = True


def _F(lib):  # noqa: N802 (torch's own spelling, F)
    return lib.nn.functional


def _dims(shape):
    return st.integers(-max(len(shape), 1), max(len(shape), 1) - 1)


def _inplace(name, *args):
    """``x.clone().name(*args)``: an in-place op on a non-leaf (so gradients flow)."""
    return lambda lib, x, **kw: getattr(x.clone(), name)(*args, **kw)


def _inplace2(name):
    return lambda lib, x, y, **kw: getattr(x.clone(), name)(y, **kw)


CASES: dict[str, Case] = {}

# unary in-place spellings and arc aliases
for _name, _low, _high in [
    ("acos_", -0.9, 0.9),
    ("arccos_", -0.9, 0.9),
    ("asin_", -0.9, 0.9),
    ("arcsin_", -0.9, 0.9),
    ("atan_", -2.0, 2.0),
    ("arctan_", -2.0, 2.0),
    ("acosh_", 1.2, 3.0),
    ("asinh_", -2.0, 2.0),
    ("atanh_", -0.9, 0.9),
    ("arccosh_", 1.2, 3.0),
    ("arcsinh_", -2.0, 2.0),
    ("arctanh_", -0.9, 0.9),
    ("ceil_", -2.0, 2.0),
    ("cos_", -2.0, 2.0),
    ("cosh_", -2.0, 2.0),
    ("sinh_", -2.0, 2.0),
    ("tan_", -1.0, 1.0),
    ("deg2rad_", -90.0, 90.0),
    ("rad2deg_", -2.0, 2.0),
    ("erf_", -2.0, 2.0),
    ("erfc_", -2.0, 2.0),
    ("erfinv_", -0.9, 0.9),
    ("exp2_", -2.0, 2.0),
    ("expm1_", -2.0, 2.0),
    ("fix_", -3.0, 3.0),
    ("trunc_", -3.0, 3.0),
    ("round_", -3.0, 3.0),
    ("frac_", -3.0, 3.0),
    ("i0_", -2.0, 2.0),
    ("log10_", 0.2, 3.0),
    ("log1p_", -0.5, 3.0),
    ("log2_", 0.2, 3.0),
    ("logit_", 0.1, 0.9),
    ("negative_", -2.0, 2.0),
    ("reciprocal_", 0.5, 2.0),
    ("rsqrt_", 0.3, 2.0),
    ("sgn_", -2.0, 2.0),
    ("sinc_", -2.0, 2.0),
    ("digamma_", 0.5, 3.0),
    ("lgamma_", 0.5, 3.0),
    ("absolute_", -2.0, 2.0),
    ("nan_to_num_", -2.0, 2.0),
]:
    CASES[_name] = Case(_inplace(_name), ALL, low=_low, high=_high)
for _name, _low, _high in [("arccosh", 1.2, 3.0), ("arcsinh", -2, 2), ("arctanh", -0.9, 0.9)]:
    CASES[_name] = Case(
        (lambda n: lambda lib, x: getattr(lib, n)(x) + getattr(x, n)())(_name),
        ALL,
        low=_low,
        high=_high,
    )
CASES["round_decimals_"] = Case(
    lambda lib, x, **kw: x.clone().round_(**kw),
    FLOATS,
    low=-30.0,
    high=30.0,
    kwargs=lambda shape: st.fixed_dictionaries({"decimals": st.integers(-1, 2)}),
)
CASES["logit_eps_"] = Case(
    lambda lib, x, **kw: x.clone().logit_(**kw),
    FLOATS,
    low=0.0,
    high=1.0,
    kwargs=lambda shape: st.fixed_dictionaries({"eps": st.sampled_from([0.05, 0.2])}),
)
CASES["nan_to_num_kw_"] = Case(
    lambda lib, x, **kw: (x / (x * 0.0)).clone().nan_to_num_(**kw) + x,
    FLOATS,
    kwargs=lambda shape: st.fixed_dictionaries(
        {"nan": st.sampled_from([0.0, 1.5]), "posinf": st.sampled_from([None, 9.0])}
    ),
    differentiable=False,
)
CASES["clip_"] = Case(
    lambda lib, x, **kw: x.clone().clip_(**kw),
    REAL,
    kwargs=lambda shape: st.fixed_dictionaries(
        {"min": st.sampled_from([None, -1, -0.5]), "max": st.sampled_from([0.5, 1])}
    ),
)
CASES["mvlgamma_"] = Case(
    lambda lib, x, **kw: x.clone().mvlgamma_(**kw),
    FLOATS,
    low=1.6,
    high=4.0,
    kwargs=lambda shape: st.fixed_dictionaries({"p": st.integers(1, 3)}),
)
CASES["polygamma_"] = Case(
    lambda lib, x, **kw: x.clone().polygamma_(**kw),
    FLOATS,
    low=0.5,
    high=3.0,
    kwargs=lambda shape: st.fixed_dictionaries({"n": st.integers(0, 2)}),
)
CASES["renorm_"] = Case(
    lambda lib, x, **kw: x.clone().renorm_(**kw),
    FLOATS,
    min_ndim=1,
    kwargs=lambda shape: st.fixed_dictionaries(
        {"p": st.sampled_from([1.0, 2.0, 3.0]), "dim": _dims(shape), "maxnorm": st.just(0.8)}
    ),
)
CASES["swapaxes_"] = Case(
    lambda lib, x, **kw: x.clone().swapaxes_(**kw),
    ALL,
    min_ndim=1,
    kwargs=lambda shape: st.fixed_dictionaries({"axis0": _dims(shape), "axis1": _dims(shape)}),
)
CASES["swapdims_"] = Case(
    lambda lib, x, **kw: x.clone().swapdims_(**kw) * 2,
    REAL,
    min_ndim=1,
    kwargs=lambda shape: st.fixed_dictionaries({"dim0": _dims(shape), "dim1": _dims(shape)}),
)

# binary in-place spellings
for _name, _dtypes, _low, _high in [
    ("ldexp_", FLOATS, -2.0, 2.0),
    ("xlogy_", FLOATS, 0.1, 2.0),
    ("hypot_", FLOATS, -2.0, 2.0),
    ("copysign_", FLOATS, -2.0, 2.0),
    ("nextafter_", FLOATS, -2.0, 2.0),
    ("float_power_", REAL, 0.2, 2.0),
    ("heaviside_", REAL, -2.0, 2.0),
    ("igamma_", FLOATS, 0.2, 3.0),
    ("igammac_", FLOATS, 0.2, 3.0),
    ("divide_", ALL, 0.5, 2.0),
    ("true_divide_", ALL, 0.5, 2.0),
    ("multiply_", ALL, -2.0, 2.0),
    ("subtract_", REAL, -2.0, 2.0),
    ("arctan2_", FLOATS, -2.0, 2.0),
    ("gcd_", ("int64", "int32", "float32"), -9, 9),
    ("lcm_", ("int64", "int32", "float32"), -9, 9),
    ("bitwise_or_", ("int64", "int32", "bool", "float32"), -9, 9),
    ("bitwise_left_shift_", ("int64", "int32"), 0, 5),
    ("bitwise_right_shift_", ("int64", "int32"), 0, 5),
    ("logical_and_", ALL, -1, 1),
    ("logical_xor_", ALL, -1, 1),
    ("eq_", REAL, -1, 1),
    ("ne_", REAL, -1, 1),
    ("not_equal_", REAL, -1, 1),
    ("ge_", REAL, -1, 1),
    ("gt_", REAL, -1, 1),
    ("le_", REAL, -1, 1),
    ("less_", REAL, -1, 1),
    ("less_equal_", REAL, -1, 1),
    ("greater_", REAL, -1, 1),
    ("greater_equal_", REAL, -1, 1),
]:
    # (torch passes gradients straight through the in-place logical ops, recording only the
    # clone: a torch quirk not copied, so no gradients are compared for them)
    CASES[_name] = Case(
        _inplace2(_name),
        _dtypes,
        arity=2,
        low=_low,
        high=_high,
        differentiable=not _name.startswith("logical"),
    )
CASES["xlogy"] = Case(lambda lib, x, y: lib.xlogy(x, y), ALL, arity=2, low=0.1)
CASES["igammac"] = Case(lambda lib, x, y: lib.igammac(x, y), REAL, arity=2, low=0.2, high=3.0)
CASES["bitwise_not_"] = Case(_inplace("bitwise_not_"), ("int64", "int32", "bool", "float32"))
CASES["logical_not_"] = Case(_inplace("logical_not_"), ALL, low=-1, high=1, differentiable=False)

# shapes, stacking, splitting and scatters
CASES["atleast_2d"] = Case(lambda lib, x: lib.atleast_2d(x) * 1, ALL)
CASES["column_stack"] = Case(lambda lib, x, y: lib.column_stack([x, y]), ALL, arity=2, max_ndim=2)
CASES["row_stack"] = Case(lambda lib, x, y: lib.row_stack((x, y)), ALL, arity=2)
CASES["dstack"] = Case(lambda lib, x, y: lib.dstack([x, y]), ALL, arity=2)
for _name, _min in [("hsplit", 1), ("vsplit", 2), ("dsplit", 3)]:
    CASES[_name] = Case(
        (lambda n: lambda lib, x, **kw: getattr(lib, n)(x, **kw))(_name),
        ALL,
        min_ndim=_min - 1,
        kwargs=lambda shape: st.fixed_dictionaries(
            {"indices_or_sections": st.sampled_from([1, 2, [1], [0, 2], (1, 1)])}
        ),
    )
    CASES[_name + "_method"] = Case(
        (lambda n: lambda lib, x: getattr(x, n)([1]))(_name), FLOATS, min_ndim=_min
    )
CASES["fliplr"] = Case(lambda lib, x: lib.fliplr(x) + x.fliplr(), ALL[:5])
CASES["flipud"] = Case(lambda lib, x: lib.flipud(x) * x.flipud(), ALL[:5])
CASES["frexp"] = Case(lambda lib, x: lib.frexp(x * 5), ALL, differentiable=False)
CASES["frexp_method"] = Case(lambda lib, x: x.frexp()[0] * x, FLOATS)
CASES["conj_physical"] = Case(lambda lib, x: lib.conj_physical(x) * 2, ALL)
CASES["real_imag"] = Case(lambda lib, x: (lib.real(x), lib.imag(x)), ("float64", "complex64"))
CASES["diagonal_scatter"] = Case(
    lambda lib, x, y, **kw: lib.diagonal_scatter(x, lib.diagonal(y, **kw) * 2, **kw),
    ALL,
    arity=2,
    min_ndim=2,
    kwargs=lambda shape: st.fixed_dictionaries(
        {"offset": st.integers(-2, 2), "dim1": st.sampled_from([0, -1]), "dim2": st.just(1)}
    ),
)
CASES["select_scatter"] = Case(
    lambda lib, x, y, **kw: lib.select_scatter(x, y.select(kw["dim"], kw["index"]) * 3, **kw),
    ALL,
    arity=2,
    min_ndim=1,
    kwargs=lambda shape: st.fixed_dictionaries({"dim": _dims(shape), "index": st.integers(-2, 1)}),
)
CASES["slice_scatter"] = Case(
    lambda lib, x, y, **kw: x.slice_scatter(
        y.narrow(kw["dim"], 0, (y.shape[kw["dim"]] + kw["step"] - 1) // kw["step"]), **kw
    ),
    REAL,
    arity=2,
    min_ndim=1,
    kwargs=lambda shape: st.fixed_dictionaries(
        {
            "dim": _dims(shape),
            "start": st.just(None),
            "end": st.just(None),
            "step": st.integers(1, 2),
        }
    ),
)
CASES["split_with_sizes"] = Case(
    lambda lib, x, **kw: x.split_with_sizes([1, x.shape[kw["dim"]] - 1], **kw),
    ALL,
    min_ndim=1,
    kwargs=lambda shape: st.fixed_dictionaries({"dim": _dims(shape)}),
)
CASES["unsafe_chunk"] = Case(
    lambda lib, x, **kw: lib.unsafe_chunk(x, **kw),
    FLOATS,
    min_ndim=1,
    kwargs=lambda shape: st.fixed_dictionaries({"chunks": st.integers(1, 3), "dim": _dims(shape)}),
)
CASES["unsafe_split"] = Case(
    lambda lib, x, **kw: x.unsafe_split(**kw),
    FLOATS,
    min_ndim=1,
    kwargs=lambda shape: st.fixed_dictionaries(
        {"split_size": st.integers(1, 2), "dim": _dims(shape)}
    ),
)
CASES["unravel_index"] = Case(
    lambda lib, x, **kw: lib.unravel_index((x * 3).abs().long(), **kw),
    REAL,
    kwargs=lambda shape: st.fixed_dictionaries(
        {"shape": st.sampled_from([(7,), (2, 4), (3, 1, 3)])}
    ),
    differentiable=False,
)
CASES["trapz"] = Case(
    lambda lib, x, **kw: lib.trapz(x, **kw),
    FLOATS,  # (torch keeps an int dtype for an empty int input only: not copied)
    min_ndim=1,
    kwargs=lambda shape: st.fixed_dictionaries(
        {"dx": st.sampled_from([1.0, 0.5]), "dim": _dims(shape)}
    ),
)
CASES["trapz_x"] = Case(
    lambda lib, y, x, **kw: lib.trapz(y, x.cumsum(-1), **kw),
    FLOATS,
    arity=2,
    min_ndim=1,
    kwargs=lambda shape: st.fixed_dictionaries({"dim": st.just(-1)}),
)
CASES["sum_to_size"] = Case(
    lambda lib, x: x.sum_to_size(*[1 if i % 2 else n for i, n in enumerate(x.shape)]),
    ALL,
    min_ndim=1,  # (torch wants at least one size)
)
CASES["ndimension_is_same_size"] = Case(
    lambda lib, x, y: (x.ndimension(), x.is_same_size(y), lib.is_same_size(x, y[..., :1])),
    ALL,
    arity=2,
    differentiable=False,
)
CASES["is_nonzero"] = Case(lambda lib, x: lib.is_nonzero(x), ALL, differentiable=False)
CASES["fill"] = Case(
    lambda lib, x, **kw: lib.fill(x, **kw) + x,
    ALL,
    kwargs=lambda shape: st.fixed_dictionaries({"value": st.sampled_from([0, 2, -1.5, True])}),
)
CASES["constant_pad_nd"] = Case(
    lambda lib, x, **kw: lib.constant_pad_nd(x, **kw),
    ALL,
    min_ndim=1,
    kwargs=lambda shape: st.fixed_dictionaries(
        {
            "pad": st.sampled_from([(1, 0), (0, 2), (1, 1, 0, 1), (-1, 1)]),
            "value": st.sampled_from([0, 2.5]),
        }
    ),
)
CASES["histogram"] = Case(
    lambda lib, x, **kw: lib.histogram(x, **kw),
    FLOATS,
    kwargs=lambda shape: st.fixed_dictionaries(
        {
            "bins": st.integers(1, 4),
            "range": st.sampled_from([None, (-1.0, 1.0)]),
            "density": st.booleans(),
        }
    ),
    differentiable=False,
)

# linear algebra
CASES["chain_matmul"] = Case(
    lambda lib, x, y: lib.chain_matmul(x, y.mT, x), REAL, arity=2, min_ndim=2, max_ndim=2
)
CASES["ger"] = Case(
    lambda lib, x, y: lib.ger(x, y) + x.ger(y), ALL, arity=2, min_ndim=1, max_ndim=1
)
CASES["pinverse"] = Case(
    lambda lib, x, **kw: lib.pinverse(x, **kw) + x.pinverse().mT.mT,
    FLOATS,
    min_ndim=2,
    kwargs=lambda shape: st.fixed_dictionaries({"rcond": st.sampled_from([1e-15, 1e-3])}),
)
CASES["nuclear_norm"] = Case(
    lambda lib, x, **kw: lib.nuclear_norm(x, **kw),
    FLOATS,
    min_ndim=2,
    kwargs=lambda shape: st.fixed_dictionaries({"keepdim": st.booleans()}),
)
CASES["frobenius_norm"] = Case(
    lambda lib, x, **kw: lib.frobenius_norm(x, **kw),
    FLOATS,
    min_ndim=2,
    kwargs=lambda shape: st.fixed_dictionaries(
        {"dim": st.sampled_from([(0, 1), (-1, -2), (0,)]), "keepdim": st.booleans()}
    ),
)
CASES["triangular_solve"] = Case(
    lambda lib, b, a, **kw: lib.triangular_solve(
        b, a.tril() + 3 * lib.eye(a.shape[-1], dtype=a.dtype), **kw
    ),
    FLOATS,
    arity=2,
    min_ndim=2,
    second_shape=lambda shape: shape[:-1] + shape[-2:-1],
    kwargs=lambda shape: st.fixed_dictionaries(
        {"upper": st.just(False), "transpose": st.booleans(), "unitriangular": st.booleans()}
    ),
)
CASES["eigvals"] = Case(
    # (eigenvalues come in no defined order: compared sorted)
    lambda lib, x: (
        lib.linalg.eigvals(x @ x.mT + lib.eye(x.shape[-1], dtype=x.dtype)).abs().sort(-1).values
    ),
    FLOATS,
    min_ndim=2,
    differentiable=False,
)
CASES["lu_factor_ex_unpack"] = Case(
    lambda lib, x: lib.lu_unpack(*lib.linalg.lu_factor_ex(x)[:2]),
    FLOATS,
    min_ndim=2,
)

# nn.functional
CASES["max_pool1d_indices"] = Case(
    lambda lib, x, **kw: _F(lib).max_pool1d(x, return_indices=True, **kw),
    FLOATS,
    min_ndim=2,
    max_ndim=3,
    kwargs=lambda shape: st.fixed_dictionaries(
        {
            "kernel_size": st.integers(1, 2),
            "stride": st.sampled_from([None, 1]),
            "ceil_mode": st.booleans(),
        }
    ),
)
CASES["max_pool2d_indices_unpool"] = Case(
    lambda lib, x, **kw: _F(lib).max_unpool2d(
        *_F(lib).max_pool2d(x, 2, return_indices=True, **kw), 2, **kw
    ),
    FLOATS,
    min_ndim=3,
    max_ndim=4,
    kwargs=lambda shape: st.fixed_dictionaries({"padding": st.sampled_from([0, 1])}),
)
CASES["max_pool1d_unpool"] = Case(
    lambda lib, x, **kw: _F(lib).max_unpool1d(
        *_F(lib).max_pool1d(x, 2, return_indices=True), 2, output_size=kw["output_size"]
    ),
    FLOATS,
    min_ndim=2,
    max_ndim=3,
    kwargs=lambda shape: st.fixed_dictionaries(
        {"output_size": st.sampled_from([None, [shape[-1]] if shape else [1]])}
    ),
)
CASES["max_pool3d_indices"] = Case(
    lambda lib, x, **kw: _F(lib).max_pool3d(x.unsqueeze(-1), (1, 1, 1), return_indices=True, **kw),
    FLOATS,
    min_ndim=3,
    max_ndim=4,
    kwargs=lambda shape: st.fixed_dictionaries({"dilation": st.integers(1, 2)}),
)
CASES["adaptive_avg_pool3d"] = Case(
    lambda lib, x, **kw: _F(lib).adaptive_avg_pool3d(x.unsqueeze(0), **kw),
    FLOATS,
    min_ndim=3,
    max_ndim=4,
    kwargs=lambda shape: st.fixed_dictionaries(
        {"output_size": st.sampled_from([1, 2, (1, None, 2)])}
    ),
)
CASES["adaptive_max_pool3d"] = Case(
    lambda lib, x, **kw: _F(lib).adaptive_max_pool3d(x.unsqueeze(0), **kw),
    FLOATS,
    min_ndim=3,
    max_ndim=4,
    kwargs=lambda shape: st.fixed_dictionaries(
        {"output_size": st.sampled_from([1, 2, (2, 1, 1)]), "return_indices": st.booleans()}
    ),
)
CASES["lp_pool2d"] = Case(
    lambda lib, x, **kw: _F(lib).lp_pool2d(x * x + 0.1, **kw),
    FLOATS,
    min_ndim=3,
    max_ndim=4,
    kwargs=lambda shape: st.fixed_dictionaries(
        {
            "norm_type": st.sampled_from([1.0, 2.0, 3.0]),
            "kernel_size": st.sampled_from([1, (1, 2)]),
            "ceil_mode": st.booleans(),
        }
    ),
)
for _name, _kw in [
    ("elu_", st.fixed_dictionaries({"alpha": st.sampled_from([1.0, 0.5])})),
    ("celu_", st.fixed_dictionaries({"alpha": st.sampled_from([1.0, 2.0])})),
    ("selu_", st.just({})),
    ("leaky_relu_", st.fixed_dictionaries({"negative_slope": st.sampled_from([0.01, 0.3])})),
    (
        "hardtanh_",
        st.fixed_dictionaries({"min_val": st.just(-0.5), "max_val": st.sampled_from([0.5, 1.5])}),
    ),
    (
        "threshold_",
        st.fixed_dictionaries({"threshold": st.just(0.2), "value": st.sampled_from([0.0, -3.0])}),
    ),
    (
        "rrelu_",
        st.fixed_dictionaries(
            {"lower": st.just(0.1), "upper": st.just(0.3), "training": st.just(False)}
        ),
    ),
]:
    CASES["F." + _name] = Case(
        (lambda n: lambda lib, x, **kw: getattr(_F(lib), n)(x.clone(), **kw))(_name),
        ALL[:4],
        kwargs=(lambda k: lambda shape: k)(_kw),
    )
for _name in ["dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout"]:
    CASES["F." + _name] = Case(
        (lambda n: lambda lib, x, **kw: getattr(_F(lib), n)(x, **kw))(_name),
        FLOATS,
        min_ndim=1,
        max_ndim=4,
        kwargs=lambda shape: st.fixed_dictionaries(
            {"p": st.sampled_from([0.0, 0.5]), "training": st.just(False)}
        ),
    )
CASES["F.upsample_nearest"] = Case(
    lambda lib, x, **kw: _F(lib).upsample_nearest(x, **kw),
    FLOATS,
    min_ndim=3,
    max_ndim=4,
    kwargs=lambda shape: st.fixed_dictionaries({"scale_factor": st.sampled_from([1, 2])}),
)
CASES["F.upsample_bilinear"] = Case(
    lambda lib, x, **kw: _F(lib).upsample_bilinear(x, **kw),
    FLOATS,
    min_ndim=4,
    max_ndim=4,
    kwargs=lambda shape: st.fixed_dictionaries({"size": st.sampled_from([(2, 3), 3])}),
)
CASES["F.native_channel_shuffle"] = Case(
    lambda lib, x: _F(lib).native_channel_shuffle(x.repeat_interleave(2, 1), 2),
    ALL[:4],
    min_ndim=3,
)

# special: polynomials and Bessel functions
for _name in [
    "chebyshev_polynomial_t",
    "chebyshev_polynomial_u",
    "chebyshev_polynomial_v",
    "chebyshev_polynomial_w",
    "shifted_chebyshev_polynomial_t",
    "shifted_chebyshev_polynomial_u",
    "shifted_chebyshev_polynomial_v",
    "shifted_chebyshev_polynomial_w",
    "hermite_polynomial_h",
    "hermite_polynomial_he",
    "laguerre_polynomial_l",
    "legendre_polynomial_p",
]:
    CASES["special." + _name] = Case(
        (lambda n: lambda lib, x, **kw: getattr(lib.special, n)(x, **kw))(_name),
        REAL,
        low=-1.0,
        high=1.0,
        kwargs=lambda shape: st.fixed_dictionaries({"n": st.sampled_from([0, 1, 3, 6, -1])}),
        differentiable=False,
    )
for _name in [
    "airy_ai",
    "bessel_j0",
    "bessel_j1",
    "bessel_y0",
    "bessel_y1",
    "modified_bessel_i0",
    "modified_bessel_i1",
    "modified_bessel_k0",
    "modified_bessel_k1",
    "scaled_modified_bessel_k0",
    "scaled_modified_bessel_k1",
    "spherical_bessel_j0",
]:
    CASES["special." + _name] = Case(
        (lambda n: lambda lib, x: getattr(lib.special, n)(x))(_name),
        REAL,
        low=0.1,
        high=4.0,
        differentiable=False,
    )

# fft
_NORM = st.sampled_from([None, "forward", "backward", "ortho"])
for _name in ["fftn", "ifft2", "rfftn", "irfft2", "hfft2", "hfftn", "ihfft2", "ihfftn"]:
    _min = 2 if _name.endswith("2") else 1
    CASES["fft." + _name] = Case(
        (lambda n: lambda lib, x, **kw: getattr(lib.fft, n)(x, **kw))(_name),
        ("float32", "float64", "int64", "complex64"),
        min_ndim=_min,
        kwargs=(
            lambda m: (
                lambda shape: st.fixed_dictionaries(
                    {"norm": _NORM, "s": st.sampled_from([None, (2,) * m, (3,) * m, (1,) * m])}
                )
            )
        )(_min if _min == 2 else 1),
    )
    CASES["fft." + _name + "_dim"] = Case(
        (lambda n: lambda lib, x, **kw: getattr(lib.fft, n)(x, **kw))(_name),
        FLOATS + ("complex64",),
        min_ndim=2,
        kwargs=lambda shape: st.fixed_dictionaries(
            {"dim": st.sampled_from([(0, 1), (-1, 0), (-2, -1)]), "norm": _NORM}
        ),
    )
for _name in ["fftshift", "ifftshift"]:
    CASES["fft." + _name] = Case(
        (lambda n: lambda lib, x, **kw: getattr(lib.fft, n)(x, **kw))(_name),
        ALL,
        min_ndim=1,  # (torch refuses a 0-d tensor without shifts)
        kwargs=lambda shape: st.fixed_dictionaries(
            {"dim": st.sampled_from([None, -1, (0,), (0, -1)])}
        ),
    )
CASES["fft.fftfreq"] = Case(
    lambda lib, x, **kw: (lib.fft.fftfreq(x.numel(), **kw), lib.fft.rfftfreq(x.numel() + 1, **kw)),
    ("int64",),
    kwargs=lambda shape: st.fixed_dictionaries(
        {"d": st.sampled_from([1.0, 0.5, 2]), "dtype": st.sampled_from(["float64", None])}
    ),
    differentiable=False,
)
# windows
for _name in ["bartlett_window", "blackman_window", "hamming_window", "kaiser_window"]:
    CASES[_name] = Case(
        (lambda n: lambda lib, x, **kw: getattr(lib, n)(x.numel(), **kw))(_name),
        ("int64",),
        kwargs=lambda shape: st.fixed_dictionaries(
            {"periodic": st.booleans(), "dtype": st.sampled_from(["float64", None])}
        ),
        differentiable=False,
    )


def _shape(data, case: Case) -> tuple:
    ndim = data.draw(st.integers(case.min_ndim, case.max_ndim), label="ndim")
    return tuple(data.draw(st.lists(st.sampled_from([0, 1, 2, 3]), min_size=ndim, max_size=ndim)))


def _array(rng, dtype: str, shape: tuple, case: Case) -> np.ndarray:
    values = rng.uniform(case.low, case.high, size=shape)
    if dtype == "bool":
        return values > (case.low + case.high) / 2
    if dtype.startswith("int"):
        return np.round(values).astype(dtype)
    if dtype == "complex64":
        return (values + 1j * rng.uniform(case.low, case.high, size=shape)).astype(dtype)
    return values.astype(dtype)


def _resolve(lib, kwargs: dict) -> dict:
    """The drawn keyword arguments with dtype names turned into ``lib``'s dtypes."""
    return {k: getattr(lib, v) if k == "dtype" and v else v for k, v in kwargs.items()}


def _run(lib, case: Case, arrays, strided: bool, kwargs: dict, want_grad: bool):
    leaves, inputs = [], []
    for array in arrays:
        base = np.stack([array, array], -1) if strided else array
        leaf = lib.tensor(base, requires_grad=want_grad)
        leaves.append(leaf)
        inputs.append(leaf[..., 0] if strided else leaf)
    return leaves, case.call(lib, *inputs, **_resolve(lib, kwargs))


def _flat(out) -> list:
    if isinstance(out, tuple | list):
        return [leaf for item in out for leaf in _flat(item)]
    return [out]


def _numpy(value):
    if isinstance(value, torch.Tensor):
        return value.detach().resolve_conj().numpy(force=True)
    return value.detach().numpy()


def _compare(name: str, got, want, dtype: str) -> None:
    got_flat, want_flat = _flat(got), _flat(want)
    if len(got_flat) != len(want_flat):
        raise Mismatch(f"{name}: {len(got_flat)} results, torch {len(want_flat)}")
    for g, w in zip(got_flat, want_flat, strict=True):
        if not isinstance(w, torch.Tensor):
            if type(g) is not type(w) or g != w:
                raise Mismatch(f"{name}: {g!r}, torch {w!r}")
            continue
        if not isinstance(g, rg.Tensor):
            raise Mismatch(f"{name}: {type(g).__name__} result, torch a tensor")
        if tuple(g.shape) != tuple(w.shape):
            raise Mismatch(f"{name}: shape {tuple(g.shape)}, torch {tuple(w.shape)}")
        if str(g.dtype) != str(w.dtype).removeprefix("torch."):
            raise Mismatch(f"{name}: dtype {g.dtype}, torch {w.dtype}")
        tight = dtype == "float64" and w.dtype == torch.float64
        np.testing.assert_allclose(
            _numpy(g),
            _numpy(w),
            rtol=1e-7 if tight else 2e-4,
            atol=1e-9 if tight else 2e-4,
            err_msg=name,
        )


def _check(data, name: str) -> None:
    case = CASES[name]
    dtype = data.draw(st.sampled_from(case.dtypes), label="dtype")
    shape = _shape(data, case)
    second = case.second_shape(shape) if case.second_shape and len(shape) else shape
    kwargs = data.draw(case.kwargs(shape), label="kwargs") if case.kwargs else {}
    strided = data.draw(st.booleans(), label="strided")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
    arrays = [_array(rng, dtype, shape if i == 0 else second, case) for i in range(case.arity)]
    want_grad = dtype == "float64" and case.differentiable
    try:
        torch_leaves, want = _run(torch, case, arrays, strided, kwargs, want_grad)
    except Exception as torch_error:  # torch refuses: retrograd must refuse in its own terms
        try:
            got = _run(rg, case, arrays, strided, kwargs, want_grad)[1]
        except rg.RetrogradError:
            return
        except Exception as error:
            raise Mismatch(f"{name}{kwargs} raised {error!r}, not a RetrogradError") from error
        raise Mismatch(
            f"{name}{kwargs} on {dtype}{shape}: torch raised {torch_error!r}, got {got}"
        ) from None
    try:
        leaves, got = _run(rg, case, arrays, strided, kwargs, want_grad)
    except Exception as error:
        raise Mismatch(f"{name}{kwargs} on {dtype}{shape}: torch ran, got {error!r}") from error
    _compare(f"{name}{kwargs} on {dtype}{shape} strided={strided}", got, want, dtype)
    if not want_grad:
        return
    pairs = [
        (g, w)
        for g, w in zip(_flat(got), _flat(want), strict=True)
        if isinstance(w, torch.Tensor) and w.requires_grad
    ]
    if not pairs:
        return
    weights = [rng.uniform(-1, 1, size=tuple(w.shape)) for _, w in pairs]
    try:
        want_loss = sum(
            ((w.real if w.is_complex() else w) * torch.tensor(c)).sum()
            for (_, w), c in zip(pairs, weights, strict=True)
        )
        want_grads = torch.autograd.grad(want_loss, torch_leaves, allow_unused=True)
    except RuntimeError:  # torch has no derivative here: nothing to compare
        return
    got_loss = sum(
        ((g.real if g.is_complex() else g) * rg.tensor(c)).sum()
        for (g, _), c in zip(pairs, weights, strict=True)
    )
    got_grads = rg.autograd.grad(got_loss, leaves, allow_unused=True)
    for index, (g, w) in enumerate(zip(got_grads, want_grads, strict=True)):
        g_values = np.zeros(w.shape if w is not None else ()) if g is None else _numpy(g)
        w_values = np.zeros(g_values.shape) if w is None else _numpy(w)
        np.testing.assert_allclose(
            g_values, w_values, rtol=1e-6, atol=1e-8, err_msg=f"{name}{kwargs} grad {index}"
        )


@settings(
    max_examples=_examples(3),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(data=st.data())
@pytest.mark.parametrize("name", sorted(CASES))
def test_callable_matches_torch(name: str, data) -> None:
    _check(data, name)
