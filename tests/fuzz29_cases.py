"""Seeded random programs over bool, uint8, int32, int64, float32 and float64 tensors (and
Python numbers and 0-d tensors) with edge values, run by retrograd and by torch 2.13: the same
dtype and values, or, where torch raises, an error of retrograd's own hierarchy
(``tests/test_fuzz29.py``). Four families: binary ops (arithmetic, comparisons, bitwise ops,
shifts, rounding divisions) either side of a number, their in-place forms, unary ops and
reductions with ``dim``/``keepdim``/``dtype=``, indexing and scatter/gather with int32, uint8
and bool indices, chains of a few steps, and creation, casts, fills and searches (MISC)."""

# (a program is written once for both libraries: ``lib`` is torch or retrograd)
import operator
import random

import numpy as np
import torch

import retrograd as rg

DTYPES = ["bool", "uint8", "int32", "int64", "float32", "float64"]
EDGE = {
    "bool": [0, 1],
    "uint8": [0, 1, 127, 128, 255, 3, 7],
    "int32": [0, 1, -1, 127, 128, 255, 2**31 - 1, -(2**31), 5, -7],
    "int64": [0, 1, -1, 255, 2**40, -(2**40), 2**31, 3, -9],
    "float32": [0.0, 1.0, -1.0, 2.5, -0.5, 255.0, 128.0, 3.75],
    "float64": [0.0, 1.0, -1.5, 2.0, 1e10, -3.25, 0.5],
}
SCALARS = [0, 1, -1, 2, 3, 127, 128, 255, 256, 300, 2**31 - 1, 2.5, -0.5, True, False]


def make(rnd, dtype=None, shape=None):
    dtype = dtype or rnd.choice(DTYPES)
    shape = shape if shape is not None else rnd.choice([(), (3,), (2, 3), (4,), (1, 3)])
    n = int(np.prod(shape)) if shape else 1
    vals = [rnd.choice(EDGE[dtype]) for _ in range(n)]
    return ("t", dtype, shape, vals)


def build(lib, spec):
    if spec[0] == "s":
        return spec[1]
    _, dtype, shape, vals = spec
    t = torch.tensor(vals, dtype=getattr(torch, dtype)).reshape(shape)
    if lib is torch:
        return t
    return rg.tensor(t.numpy().copy())  # from numpy keeps dtype


BIN = [
    "add",
    "sub",
    "mul",
    "truediv",
    "floordiv",
    "mod",
    "pow",
    "lt",
    "le",
    "gt",
    "ge",
    "eq",
    "ne",
    "and_",
    "or_",
    "xor",
    "lshift",
    "rshift",
    "maximum",
    "minimum",
    "fmod",
    "remainder",
    "div_trunc",
    "div_floor",
    "bitwise_and",
    "atan2",
    "eq_m",
    "rsub",
]
INPLACE = [
    "iadd",
    "isub",
    "imul",
    "itruediv",
    "ifloordiv",
    "imod",
    "ipow",
    "iand",
    "ior",
    "ixor",
    "ilshift",
    "irshift",
    "add_",
    "mul_",
    "sub_",
    "div_",
    "clamp_",
    "floor_divide_",
    "remainder_",
    "bitwise_xor_",
    "fill_",
    "copy_",
    "masked_fill_",
]


def binop(lib, name, a, b):
    if name == "rsub":
        return b - a
    if name == "div_trunc":
        return (
            lib.div(a, b, rounding_mode="trunc") if isinstance(a, (torch.Tensor, rg.Tensor)) else a
        )
    if name == "div_floor":
        return (
            lib.div(a, b, rounding_mode="floor") if isinstance(a, (torch.Tensor, rg.Tensor)) else a
        )
    if name in ("maximum", "minimum", "fmod", "remainder", "bitwise_and", "atan2"):
        return getattr(lib, name)(a, b)
    if name == "eq_m":
        return a.eq(b)
    return getattr(operator, name)(a, b)


def inplace(lib, name, a, b):
    if name.startswith("i") and not name.endswith("_"):
        return getattr(operator, name)(a, b)
    if name == "clamp_":
        return a.clamp_(min=b) if not isinstance(b, (torch.Tensor, rg.Tensor)) else a.clamp_(b)
    if name == "fill_":
        return a.fill_(b)
    if name == "copy_":
        return a.copy_(b)
    if name == "masked_fill_":
        return a.masked_fill_(a.bool() if a.dtype != lib.bool else a, b)
    return getattr(a, name)(b)


UN = [
    "abs",
    "neg",
    "sign",
    "sum",
    "sum0",
    "sumk",
    "sumdt",
    "prod",
    "prod0",
    "cumsum",
    "cumprod",
    "cumsumdt",
    "max",
    "max0",
    "min0",
    "amax",
    "amin",
    "argmax",
    "argmin",
    "any",
    "all",
    "any0",
    "count_nonzero",
    "count_nonzero0",
    "byte",
    "int",
    "float",
    "long",
    "double",
    "bool_",
    "to_u8",
    "to_i32",
    "type_byte",
    "tolist",
    "item",
    "sort",
    "topk",
    "unique",
    "clamp_i",
    "clamp_f",
    "clamp_t",
    "neg_",
    "abs_",
    "bitwise_not",
    "square",
    "sqrt",
    "exp",
    "floor",
    "ceil",
    "round",
    "trunc",
    "reciprocal",
    "logical_not",
    "nonzero",
    "argsort",
    "flip",
    "bincount",
    "histc",
    "sign_",
    "cummax",
    "mean",
    "msort",
    "kthvalue",
    "median",
    "mode",
    "signbit",
    "isnan",
    "fmax",
    "clone",
    "t_",
    "where_s",
    "masked_select",
    "diff",
    "cumprod0",
    "nansum",
    "logsumexp",
    "std",
    "var",
    "norm",
    "dot",
    "matmul",
    "trace",
    "diag",
    "repeat",
    "tril",
    "roll",
    "outer",
    "unique_c",
    "unique_consecutive",
    "searchsorted",
    "lerp",
    "sum_u8",
    "sum_f",
    "prod_dt",
    "amax_t",
    "argmax0",
    "argmin_k",
    "all0",
    "max_other",
    "min_other",
    "type_str",
    "type_int",
    "to_float",
    "int_float_int",
    "byte_int",
    "where_u8",
    "where_sc",
    "bitwise_not",
    "lshift1",
    "rshift_big",
    "rpow",
    "rsub_s",
    "rdiv",
    "rfloordiv",
    "rmod",
    "rand_",
    "ror",
    "rlshift",
    "sum_dim_dt",
    "cumsum_f",
    "mul_bool",
    "sign_f",
    "tensor_of_list",
    "tensor_of_list_dt",
    "clamp_tt",
    "clamp_int_f",
    "add_alpha",
    "sub_alpha",
    "eq_item",
    "nonzero_t",
    "float_power",
    "true_divide",
    "max_all",
    "chunk_cat",
    "expand_sum",
]


def unop(lib, name, a):
    def dtype_of(d):
        return getattr(lib, d)

    nd = a.dim()
    if name == "sum0":
        return a.sum(0) if nd else a.sum()
    if name == "sumk":
        return a.sum(-1, keepdim=True) if nd else a.sum()
    if name == "sumdt":
        return a.sum(dtype=dtype_of("int32"))
    if name == "prod0":
        return a.prod(0) if nd else a.prod()
    if name == "cumsum":
        return a.cumsum(0)
    if name == "cumprod":
        return a.cumprod(-1)
    if name == "cumprod0":
        return a.cumprod(0, dtype=dtype_of("uint8"))
    if name == "cumsumdt":
        return a.cumsum(0, dtype=dtype_of("int32"))
    if name == "max0":
        return tuple(a.max(0)) if nd else a.max()
    if name == "min0":
        return tuple(a.min(-1, keepdim=True)) if nd else a.min()
    if name == "any0":
        return a.any(0) if nd else a.any()
    if name == "count_nonzero0":
        return lib.count_nonzero(a, dim=0) if nd else lib.count_nonzero(a)
    if name == "count_nonzero":
        return lib.count_nonzero(a)
    if name == "bool_":
        return a.bool()
    if name == "to_u8":
        return a.to(dtype_of("uint8"))
    if name == "to_i32":
        return a.to(dtype_of("int32")).to(a.dtype)
    if name == "type_byte":
        return a.type(dtype_of("ByteTensor"))
    if name == "tolist":
        return a.tolist()
    if name == "item":
        return a.flatten()[0].item()
    if name == "sort":
        return tuple(a.sort(descending=True, stable=True)) if nd else a
    if name == "argsort":
        return a.argsort(stable=True) if nd else a
    if name == "topk":
        return tuple(a.flatten().topk(1)).__getitem__(0)
    if name == "unique":
        return a.unique()
    if name == "unique_c":
        return tuple(lib.unique(a, return_counts=True, return_inverse=True))
    if name == "clamp_i":
        return a.clamp(0, 200)
    if name == "clamp_f":
        return a.clamp(min=0.5)
    if name == "clamp_t":
        return a.clamp(max=-1)
    if name == "neg_":
        return a.neg_()
    if name == "abs_":
        return a.abs_()
    if name == "sign_":
        return a.sign_()
    if name == "nonzero":
        return a.nonzero()
    if name == "flip":
        return a.flip(0) if nd else a
    if name == "bincount":
        return lib.bincount(a.flatten())
    if name == "histc":
        return lib.histc(a, bins=4, min=0, max=3)
    if name == "cummax":
        return tuple(a.cummax(0))
    if name == "kthvalue":
        return tuple(a.flatten().kthvalue(1))
    if name in ("median", "mode"):
        return getattr(a.flatten(), name)(0)
    if name == "fmax":
        return lib.fmax(a, a)
    if name == "t_":
        return a.t()
    if name == "where_s":
        return lib.where(a > 0, a, 7)
    if name == "masked_select":
        return a.masked_select(a != 0)
    if name == "diff":
        return a.flatten().diff()
    if name == "logsumexp":
        return a.logsumexp(0) if nd else a
    if name == "norm":
        return a.norm()
    if name == "dot":
        return a.flatten().dot(a.flatten())
    if name == "matmul":
        return a.flatten() @ a.flatten()
    if name == "trace":
        return a.reshape(1, -1).trace()
    if name == "diag":
        return a.flatten().diag()
    if name == "repeat":
        return a.repeat(2)
    if name == "tril":
        return a.reshape(1, -1).tril()
    if name == "roll":
        return a.roll(1)
    if name == "outer":
        return lib.outer(a.flatten(), a.flatten())
    if name == "unique_consecutive":
        return a.flatten().unique_consecutive()
    if name == "searchsorted":
        s = a.flatten().sort()[0]
        return lib.searchsorted(s, a)
    if name == "lerp":
        return lib.lerp(a, a, 0.5)
    if name == "isnan":
        return a.isnan()
    if name == "signbit":
        return a.signbit()
    if name == "msort":
        return a.flatten().sort()[0]
    if name == "sum_u8":
        return a.sum(dtype=dtype_of("uint8"))
    if name == "sum_f":
        return a.sum(0, dtype=dtype_of("float32")) if nd else a.sum(dtype=dtype_of("float64"))
    if name == "prod_dt":
        return a.prod(dtype=dtype_of("int32"))
    if name == "amax_t":
        return a.amax(dim=(0, -1)) if nd else a.amax()
    if name == "argmax0":
        return a.argmax(0, keepdim=True) if nd else a.argmax()
    if name == "argmin_k":
        return a.argmin(-1) if nd else a.argmin()
    if name == "all0":
        return a.all(-1) if nd else a.all()
    if name == "max_other":
        return lib.max(a, a.flip(-1) if nd else a)
    if name == "min_other":
        return lib.minimum(a, lib.tensor(3, dtype=dtype_of("uint8")))
    if name == "type_str":
        return a.type("torch.IntTensor" if lib is torch else "retrograd.IntTensor")
    if name == "type_int":
        return a.type(dtype_of("int32"))
    if name == "to_float":
        return a.to(dtype_of("float32")).to(a.dtype)
    if name == "int_float_int":
        return a.int().float().int()
    if name == "byte_int":
        return a.byte().int().byte()
    if name == "where_u8":
        return lib.where(a.to(dtype_of("uint8")), a, a.flip(-1) if nd else a)
    if name == "where_sc":
        return lib.where(a > 1, 1, 0)
    if name == "lshift1":
        return a << 1
    if name == "rshift_big":
        return a >> 40
    if name == "rpow":
        return 2**a
    if name == "rsub_s":
        return 1 - a
    if name == "rdiv":
        return 3 / a
    if name == "rfloordiv":
        return 300 // a
    if name == "rmod":
        return -7 % a
    if name == "rand_":
        return 255 & a
    if name == "ror":
        return True | a
    if name == "rlshift":
        return 1 << a
    if name == "sum_dim_dt":
        return (
            a.sum(-1, keepdim=True, dtype=dtype_of("int64"))
            if nd
            else a.sum(dtype=dtype_of("int64"))
        )
    if name == "cumsum_f":
        return a.cumsum(0, dtype=dtype_of("float64")) if nd else a
    if name == "mul_bool":
        return a * lib.tensor(True)
    if name == "sign_f":
        return a.sgn()
    if name == "tensor_of_list":
        return lib.tensor(a.tolist())
    if name == "tensor_of_list_dt":
        return lib.tensor(a.tolist(), dtype=dtype_of("int32"))
    if name == "clamp_tt":
        return a.clamp(
            lib.tensor(1, dtype=dtype_of("uint8")), lib.tensor(200, dtype=dtype_of("int32"))
        )
    if name == "clamp_int_f":
        return a.clamp(-1.5, 300)
    if name == "add_alpha":
        return lib.add(a, a, alpha=3)
    if name == "sub_alpha":
        return lib.sub(a, 1, alpha=2)
    if name == "eq_item":
        return a.flatten()[-1].item() == a.tolist()
    if name == "nonzero_t":
        return a.nonzero(as_tuple=True)
    if name == "float_power":
        return lib.float_power(a, 2)
    if name == "true_divide":
        return lib.true_divide(a, 2)
    if name == "max_all":
        return a.max()
    if name == "chunk_cat":
        return lib.cat([a.flatten(), a.flatten().int(), a.flatten().bool()])
    if name == "expand_sum":
        return a.expand(2, *a.shape).sum(0)
    f = getattr(a, name)
    return f()


INDEX = [
    "getitem_i32",
    "getitem_u8mask",
    "getitem_bool",
    "setitem_i32",
    "setitem_scalar",
    "index_select",
    "gather",
    "scatter",
    "scatter_add",
    "index_add",
    "take_along_dim",
    "cat",
    "stack",
    "where",
    "index_put",
    "setitem_mask",
    "scatter_reduce",
    "index_fill",
]


def idxop(lib, name, a, b, rnd_vals):
    def dtype_of(d):
        return getattr(lib, d)

    af = a.flatten()
    n = af.shape[0]
    idx_vals = [v % n for v in rnd_vals]
    i32 = lib.tensor(idx_vals, dtype=dtype_of("int32"))
    i64 = lib.tensor(idx_vals)
    if name == "getitem_i32":
        return af[i32]
    if name == "getitem_u8mask":
        m = lib.tensor([v % 2 for v in range(n)], dtype=dtype_of("uint8"))
        return af[m]
    if name == "getitem_bool":
        return af[af > 0]
    if name == "setitem_i32":
        af = af.clone()
        af[i32] = b if not hasattr(b, "shape") else b.flatten()[:1]
        return af
    if name == "setitem_scalar":
        af = af.clone()
        af[0] = b if not hasattr(b, "shape") else b.flatten()[0]
        return af
    if name == "setitem_mask":
        af = af.clone()
        af[af != 0] = b if not hasattr(b, "shape") else b.flatten()[0]
        return af
    if name == "index_select":
        return af.index_select(0, i32)
    if name == "gather":
        return af.gather(0, i32)
    if name == "take_along_dim":
        return lib.take_along_dim(af, i64)
    bf = b.flatten() if hasattr(b, "shape") else b
    if name == "scatter":
        return af.clone().scatter(0, i32, bf[: len(idx_vals)] if hasattr(bf, "shape") else bf)
    if name == "scatter_add":
        return af.clone().scatter_add(0, i64, bf[: len(idx_vals)] if hasattr(bf, "shape") else bf)
    if name == "scatter_reduce":
        return af.clone().scatter_reduce(
            0, i64, bf[: len(idx_vals)] if hasattr(bf, "shape") else bf, "amax"
        )
    if name == "index_add":
        return af.clone().index_add(0, i32, bf[: len(idx_vals)] if hasattr(bf, "shape") else bf)
    if name == "index_put":
        return af.clone().index_put(
            (i32,), bf[: len(idx_vals)] if hasattr(bf, "shape") else lib.tensor(bf), accumulate=True
        )
    if name == "index_fill":
        return af.clone().index_fill(0, i64, bf.flatten()[0] if hasattr(bf, "shape") else bf)
    if name == "cat":
        return lib.cat([af, bf if hasattr(bf, "shape") and bf.dim() else af])
    if name == "stack":
        return lib.stack([af, af.to(bf.dtype) if hasattr(bf, "dtype") else af])
    if name == "where":
        return lib.where(af > 0, af, bf.flatten()[0] if hasattr(bf, "shape") else bf)
    raise AssertionError(name)


def tensor_bounds(lib, rnd):
    d = rnd.choice(["uint8", "int32", "int64", "bool"])
    v = rnd.choice(
        [0, -1, 255, 256, 300, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**63 - 1, 1.5, True]
    )
    return lib.tensor([v, 1], dtype=getattr(lib, d))


def program(rnd):
    """Returns a function f(lib) that runs one random program."""
    kind = rnd.choice(["bin", "bin", "inplace", "un", "un", "idx", "bounds"])
    a = make(rnd)
    if rnd.random() < 0.3:
        b = ("s", rnd.choice(SCALARS))
    else:
        b = make(rnd, shape=rnd.choice([a[2], (), (1,)]) if rnd.random() < 0.8 else None)
    if kind == "bin":
        name = rnd.choice(BIN)
        flip = rnd.random() < 0.2 and b[0] == "s"

        def f(lib):
            x, y = build(lib, a), build(lib, b)
            return binop(lib, name, y, x) if flip else binop(lib, name, x, y)

        desc = f"bin {name} flip={flip} {a} {b}"
    elif kind == "inplace":
        name = rnd.choice(INPLACE)

        def f(lib):
            x, y = build(lib, a), build(lib, b)
            r = inplace(lib, name, x, y)
            return (r, x)

        desc = f"inplace {name} {a} {b}"
    elif kind == "un":
        name = rnd.choice(UN)

        def f(lib):
            return unop(lib, name, build(lib, a))

        desc = f"un {name} {a}"
    elif kind == "idx":
        name = rnd.choice(INDEX)
        vals = [rnd.choice([0, 1, 2, 5]) for _ in range(2)]

        def f(lib):
            return idxop(lib, name, build(lib, a), build(lib, b), vals)

        desc = f"idx {name} {a} {b} {vals}"
    else:
        state = rnd.random()

        def f(lib):
            return tensor_bounds(lib, random.Random(state))

        desc = f"bounds {state}"
    return f, desc


class MismatchError(AssertionError):
    pass


def same(ours, theirs, path="r"):
    if isinstance(theirs, (tuple, list)):
        if not isinstance(ours, (tuple, list)) or len(ours) != len(theirs):
            raise MismatchError(f"{path}: {ours!r} vs {theirs!r}")
        for i, (x, y) in enumerate(zip(ours, theirs)):
            same(x, y, f"{path}[{i}]")
        return
    if isinstance(theirs, torch.Tensor):
        if not isinstance(ours, rg.Tensor):
            raise MismatchError(f"{path}: type {type(ours)}")
        if str(ours.dtype) != str(theirs.dtype).removeprefix("torch."):
            raise MismatchError(f"{path}: dtype {ours.dtype} vs {theirs.dtype}")
        if tuple(ours.shape) != tuple(theirs.shape):
            raise MismatchError(f"{path}: shape {tuple(ours.shape)} vs {tuple(theirs.shape)}")
        o, t = ours.numpy(), theirs.numpy()
        if theirs.is_floating_point():
            if not np.allclose(o, t, rtol=1e-5, atol=1e-6, equal_nan=True):
                raise MismatchError(f"{path}: values {o} vs {t}")
        elif not np.array_equal(o, t):
            raise MismatchError(f"{path}: values {o} vs {t}")
        return
    if type(ours) is not type(theirs):
        raise MismatchError(f"{path}: {type(ours)} {ours!r} vs {type(theirs)} {theirs!r}")
    if isinstance(theirs, float) and np.isnan(theirs):
        if not np.isnan(ours):
            raise MismatchError(f"{path}: {ours} vs nan")
        return
    if ours != theirs:
        raise MismatchError(f"{path}: {ours!r} vs {theirs!r}")


TORCH_ERRORS = (RuntimeError, TypeError, IndexError, ValueError, ZeroDivisionError, OverflowError)


def check(f):
    """None when retrograd agrees with torch, else a message."""
    try:
        theirs = f(torch)
    except AttributeError:
        return None  # the program itself is malformed (a method on a Python number)
    except TORCH_ERRORS as e:
        try:
            ours = f(rg)
        except rg.RetrogradError:
            return None
        except Exception as e2:
            return (
                f"torch raised {type(e).__name__}: {str(e)[:80]}; retrograd raised "
                f"{type(e2).__name__} (not a RetrogradError): {str(e2)[:200]}"
            )
        return f"torch raised {type(e).__name__}: {str(e)[:100]}; rg returned {ours!r}"[:400]
    try:
        ours = f(rg)
    except Exception as e:
        return f"rg raised {type(e).__name__}: {str(e)[:200]}; torch gave {theirs!r}"[:400]
    try:
        same(ours, theirs)
    except MismatchError as m:
        return str(m)[:400]
    return None


def _dtype(lib, d):
    return getattr(lib, d)


MISC = {
    "arange_i32": lambda lib, a, b: lib.arange(0, 7, 2, dtype=_dtype(lib, "int32")),
    "arange_u8": lambda lib, a, b: lib.arange(250, 256, dtype=_dtype(lib, "uint8")),
    "full_u8": lambda lib, a, b: lib.full(
        (2,), b if not hasattr(b, "shape") else 3, dtype=_dtype(lib, "uint8")
    ),
    "full_i32": lambda lib, a, b: lib.full(
        (2,), b if not hasattr(b, "shape") else 3, dtype=_dtype(lib, "int32")
    ),
    "zeros_like": lambda lib, a, b: (
        lib.zeros_like(a) + lib.ones_like(a, dtype=_dtype(lib, "uint8"))
    ),
    "linspace_i": lambda lib, a, b: lib.linspace(0, 10, 4, dtype=_dtype(lib, "int32")),
    "eye_u8": lambda lib, a, b: lib.eye(3, dtype=_dtype(lib, "uint8")) ^ 1,
    "numpy_dtype": lambda lib, a, b: str(a.numpy().dtype),
    "element_size": lambda lib, a, b: (
        a.element_size() * 10 + a.is_signed() + a.is_floating_point() * 100
    ),
    "bincount_w": lambda lib, a, b: lib.bincount(
        a.flatten().to(_dtype(lib, "int32")).abs() % 5, weights=a.flatten().double()
    ),
    "scatter_reduce_sum": lambda lib, a, b: a.flatten().scatter_reduce(
        0, lib.tensor([0, 0]), a.flatten()[:2], "sum", include_self=False
    ),
    "scatter_reduce_prod": lambda lib, a, b: a.flatten().scatter_reduce(
        0, lib.tensor([0, 0]), a.flatten()[:2], "prod"
    ),
    "scatter_reduce_mean": lambda lib, a, b: a.flatten().scatter_reduce(
        0, lib.tensor([0, 0]), a.flatten()[:2], "mean"
    ),
    "index_reduce": lambda lib, a, b: a.flatten().index_reduce(
        0, lib.tensor([0, 0], dtype=_dtype(lib, "int32")), a.flatten()[:2], "amax"
    ),
    "index_copy": lambda lib, a, b: a.flatten().index_copy(0, lib.tensor([0]), a.flatten()[-1:]),
    "masked_scatter": lambda lib, a, b: a.masked_scatter(a != 0, a.flatten().flip(0)),
    "put_": lambda lib, a, b: a.clone().put_(lib.tensor([0]), a.flatten()[-1:], accumulate=True),
    "take": lambda lib, a, b: a.take(lib.tensor([0])),
    "repeat_interleave": lambda lib, a, b: a.flatten().repeat_interleave(
        lib.tensor([1] * a.numel(), dtype=_dtype(lib, "int32"))
    ),
    "ri_scalar": lambda lib, a, b: a.repeat_interleave(2),
    "matmul2": lambda lib, a, b: a.reshape(1, -1) @ a.reshape(-1, 1),
    "mm_i32": lambda lib, a, b: lib.mm(a.reshape(1, -1), a.reshape(-1, 1).int()),
    "einsum": lambda lib, a, b: lib.einsum("i,i->", a.flatten().long(), a.flatten()),
    "kron": lambda lib, a, b: lib.kron(a.flatten(), a.flatten()),
    "tensordot": lambda lib, a, b: lib.tensordot(a.flatten(), a.flatten(), dims=1),
    "logcumsumexp": lambda lib, a, b: a.logcumsumexp(0) if a.dim() else a,
    "diff_prepend": lambda lib, a, b: a.flatten().diff(prepend=lib.tensor([1], dtype=a.dtype)),
    "clamp_min": lambda lib, a, b: a.clamp_min(b),
    "clip": lambda lib, a, b: a.clip(max=b),
    "heaviside": lambda lib, a, b: lib.heaviside(a, a),
    "isin": lambda lib, a, b: lib.isin(a, b if hasattr(b, "shape") else lib.tensor([b])),
    "bucketize": lambda lib, a, b: lib.bucketize(
        a, lib.tensor([0, 2, 200], dtype=a.dtype), out_int32=True
    ),
    "searchsorted32": lambda lib, a, b: lib.searchsorted(
        a.flatten().sort()[0], a.flatten(), out_int32=True
    ),
    "argwhere": lambda lib, a, b: lib.argwhere(a),
    "nan_to_num": lambda lib, a, b: lib.nan_to_num(a),
    "copysign": lambda lib, a, b: lib.copysign(a, _operand(lib, b)),
    "hypot": lambda lib, a, b: lib.hypot(a, _operand(lib, b)),
    "logical_and": lambda lib, a, b: lib.logical_and(a, _operand(lib, b)),
    "logical_xor": lambda lib, a, b: lib.logical_xor(a, _operand(lib, b)),
    "bls": lambda lib, a, b: lib.bitwise_left_shift(a, _operand(lib, b)),
    "brs": lambda lib, a, b: lib.bitwise_right_shift(a, _operand(lib, b)),
    "bor": lambda lib, a, b: lib.bitwise_or(a, _operand(lib, b)),
    "mean_dt": lambda lib, a, b: a.mean(dtype=_dtype(lib, "float64")),
    "nanmean": lambda lib, a, b: a.nanmean(),
    "cummin": lambda lib, a, b: tuple(a.cummin(0)) if a.dim() else a,
    "median_all": lambda lib, a, b: a.median(),
    "dist": lambda lib, a, b: lib.dist(a, a),
    "quantile": lambda lib, a, b: a.quantile(0.5),
    "sort_bool": lambda lib, a, b: a.bool().sort()[0] if a.dim() else a,
    # (values only: torch's order of tied indices is unspecified)
    "topk_u8": lambda lib, a, b: a.flatten().topk(2 if a.numel() > 1 else 1, largest=False)[0],
    "div_int": lambda lib, a, b: lib.div(a, _operand(lib, b)),
    "gcd": lambda lib, a, b: lib.gcd(a, _operand(lib, b)),
    "lcm": lambda lib, a, b: lib.lcm(a, _operand(lib, b)),
    "xlogy": lambda lib, a, b: lib.xlogy(a, _operand(lib, b)),
    "ldexp": lambda lib, a, b: lib.ldexp(a, _operand(lib, b)),
    "addcmul": lambda lib, a, b: lib.addcmul(a, a, a, value=2),
    "addcdiv": lambda lib, a, b: lib.addcdiv(a.float(), a, a.float() + 1, value=2),
    "lerp_t": lambda lib, a, b: lib.lerp(a, _operand(lib, b), 0.5),
    "fmin": lambda lib, a, b: lib.fmin(a, _operand(lib, b)),
    "sub_bool": lambda lib, a, b: lib.sub(a, _operand(lib, b)),
    "abs_min": lambda lib, a, b: lib.tensor([-(2**31)], dtype=_dtype(lib, "int32")).abs(),
    "neg_u8": lambda lib, a, b: -lib.tensor([1, 0, 255], dtype=_dtype(lib, "uint8")),
    "one_hot": lambda lib, a, b: __import__(
        "torch.nn.functional" if lib is torch else "retrograd.nn.functional", fromlist=["x"]
    ).one_hot(a.flatten().long().abs() % 4, 4),
    "embedding": lambda lib, a, b: __import__(
        "torch.nn.functional" if lib is torch else "retrograd.nn.functional", fromlist=["x"]
    ).embedding(
        a.flatten().abs() % 3 if a.dtype != _dtype(lib, "bool") else a.flatten(),
        lib.arange(6.0).reshape(3, 2),
    ),
    "split_i": lambda lib, a, b: a.flatten().split(1),
    "chunk": lambda lib, a, b: a.flatten().chunk(2),
    "narrow": lambda lib, a, b: a.flatten().narrow(0, lib.tensor(0, dtype=_dtype(lib, "int32")), 1),
    "reshape_i32": lambda lib, a, b: a.reshape(lib.tensor(a.numel(), dtype=_dtype(lib, "int32"))),
    "tolist_0d": lambda lib, a, b: a.sum().tolist(),
    "item_u8": lambda lib, a, b: a.to(_dtype(lib, "uint8")).flatten()[0].item(),
    "int_of": lambda lib, a, b: (
        int(a.flatten()[0]) + float(a.flatten()[0]) * 0 + bool(a.flatten()[0])
    ),
    "index_int": lambda lib, a, b: a.flatten()[lib.tensor(0, dtype=_dtype(lib, "int32"))],
    "index_u8": lambda lib, a, b: a.flatten()[lib.tensor(0, dtype=_dtype(lib, "uint8"))],
    "index_list_of_tensors": lambda lib, a, b: a.reshape(1, -1)[
        lib.tensor([0], dtype=_dtype(lib, "int32")), lib.tensor([0])
    ],
    "setitem_slice": lambda lib, a, b: _setslice(a, b),
    "fill_diagonal": lambda lib, a, b: (
        a.reshape(1, -1).clone().fill_diagonal_(b if not hasattr(b, "shape") else 1)
    ),
    "index_fill_sc": lambda lib, a, b: a.flatten().index_fill(
        0, lib.tensor([0]), b if not hasattr(b, "shape") else 2
    ),
    "scatter_value": lambda lib, a, b: a.flatten().scatter(
        0, lib.tensor([0]), b if not hasattr(b, "shape") else 2
    ),
    "masked_fill_sc": lambda lib, a, b: a.masked_fill(a != 0, b if not hasattr(b, "shape") else 2),
    "where_2sc": lambda lib, a, b: lib.where(a != 0, b if not hasattr(b, "shape") else 2, 255),
    "full_like": lambda lib, a, b: lib.full_like(a, b if not hasattr(b, "shape") else 2),
    "new_full": lambda lib, a, b: a.new_full((2,), 7),
    "new_tensor": lambda lib, a, b: a.new_tensor([1, 2]),
    "new_zeros": lambda lib, a, b: a.new_zeros(2),
    "sum_list": lambda lib, a, b: sum([a, a]),
    "cat_mixed": lambda lib, a, b: lib.cat(
        [a.flatten(), b.flatten() if hasattr(b, "shape") else a.flatten()]
    ),
    "stack_mixed": lambda lib, a, b: lib.stack([a, b]) if hasattr(b, "shape") else a,
    "hstack": lambda lib, a, b: lib.hstack([a.flatten(), a.flatten().to(_dtype(lib, "uint8"))]),
    "rg_max_dim_tuple": lambda lib, a, b: a.max(dim=-1).values if a.dim() else a,
    "count_nonzero_t": lambda lib, a, b: lib.count_nonzero(a, dim=(0,)) if a.dim() else a,
    "prod_dim_kd": lambda lib, a, b: (
        a.prod(-1, keepdim=True, dtype=_dtype(lib, "uint8")) if a.dim() else a
    ),
    "sum_bool_dt": lambda lib, a, b: a.bool().sum(dtype=_dtype(lib, "bool")),
    "iadd_scalar_py": lambda lib, a, b: _iadd(a, b),
}


def _operand(lib, b):
    """``b`` for the functions whose torch form takes two tensors: a number as a 1-d tensor
    (retrograd also takes a number there, where torch raises a TypeError; and a 0-d operand's
    cast to a narrower common dtype in torch's ``logical_and`` is a quirk left aside)."""
    if not hasattr(b, "shape"):
        return lib.tensor([b])
    return b.reshape(1) if b.dim() == 0 else b


def _setslice(a, b):
    a = a.flatten().clone()
    a[:1] = b if not hasattr(b, "shape") else b.flatten()[:1]
    return a


def _iadd(a, b):
    x = a.clone()
    x += b
    x -= b
    x *= 1
    return x


def misc_program(rnd):
    name = rnd.choice(sorted(MISC))
    a = make(rnd)
    b = (
        ("s", rnd.choice(SCALARS))
        if rnd.random() < 0.4
        else make(rnd, shape=rnd.choice([a[2], ()]))
    )
    fn = MISC[name]

    def f(lib):
        return fn(lib, build(lib, a), build(lib, b))

    return f, f"misc {name} {a} {b}"


STEPS = [
    lambda lib, x, y: x + y,
    lambda lib, x, y: x - y if x.dtype != _dtype(lib, "bool") else x ^ y,
    lambda lib, x, y: x * y,
    lambda lib, x, y: x // y,
    lambda lib, x, y: x % 7,
    lambda lib, x, y: x << 3,
    lambda lib, x, y: x >> 1,
    lambda lib, x, y: x & y,
    lambda lib, x, y: x | y,
    lambda lib, x, y: x ^ y,
    lambda lib, x, y: x.sum(-1) if x.dim() else x,
    lambda lib, x, y: x.cumsum(-1) if x.dim() else x,
    lambda lib, x, y: _narrowed(x, _dtype(lib, "uint8")),
    lambda lib, x, y: _narrowed(x, _dtype(lib, "int32")),
    lambda lib, x, y: x.long(),
    lambda lib, x, y: x.bool(),
    lambda lib, x, y: -x,
    lambda lib, x, y: x.abs(),
    lambda lib, x, y: lib.where(x > y, x, y),
    lambda lib, x, y: lib.maximum(x, y),
    lambda lib, x, y: x.clamp(min=y),
    lambda lib, x, y: x == y,
    lambda lib, x, y: x < y,
    lambda lib, x, y: x.prod(-1) if x.dim() else x,
    lambda lib, x, y: x.max(-1)[0] if x.dim() else x,
    lambda lib, x, y: x.sort(-1)[0] if x.dim() else x,
    lambda lib, x, y: x.unsqueeze(0).expand(2, *x.shape).sum(0),
    lambda lib, x, y: x.T if x.dim() == 2 else x,
    lambda lib, x, y: lib.cat(
        [x.reshape(-1), y.reshape(-1) if hasattr(y, "shape") else x.reshape(-1)]
    ),
    lambda lib, x, y: x.float(),
    lambda lib, x, y: x.double().round().long(),
    lambda lib, x, y: x**2,
    lambda lib, x, y: x.pow(y) if hasattr(y, "shape") else x**3,
    lambda lib, x, y: x.sign(),
    lambda lib, x, y: ~x if not x.is_floating_point() else x,
    lambda lib, x, y: _inplace_step(x, y),
    lambda lib, x, y: _view_step(x, y),
]


def _narrowed(x, dtype):
    """``x`` cast to a narrow integer dtype, floats left as they are: a float past the
    dtype's range casts to an undefined value in torch (C++'s float-to-int conversion)."""
    return x if x.is_floating_point() else x.to(dtype)


def _inplace_step(x, y):
    z = x.clone()
    z += y
    return z


def _view_step(x, y):
    z = x.clone()
    if z.dim():
        z[0] *= 2
        z[..., :1] -= 1
    return z


def chain_program(rnd):
    a = make(
        rnd, dtype=rnd.choice(["uint8", "int32", "uint8", "int32", "int64", "bool", "float32"])
    )
    steps = [
        (
            rnd.randrange(len(STEPS)),
            ("s", rnd.choice(SCALARS))
            if rnd.random() < 0.5
            else make(rnd, shape=rnd.choice([(), (1,)])),
        )
        for _ in range(rnd.randint(2, 4))
    ]

    def f(lib):
        x = build(lib, a)
        for k, b in steps:
            x = STEPS[k](lib, x, build(lib, b))
        return x

    return f, f"chain {a} {steps}"
