"""Random calls in float16 and bfloat16 against PyTorch, round 77.

Each seed draws a few calls and runs them on torch and on retrograd (on its torch backend:
the NumPy backend has no 16-bit dtypes, and refuses them, checked below) from the same inputs:
elementwise math (exp/log/pow/sqrt/rsqrt/trig, ``lerp``, ``addcmul``, ``clamp``, ``where``),
reductions with and without ``dtype=`` (sum/mean/var/std/prod/cumsum/logsumexp/softmax/
log_softmax, vector norms), losses in every reduction, normalization layers (training and
eval), the linear/matmul family, conv1d/2d, pooling, ``interpolate``, ``embedding``/
``embedding_bag`` and the type promotion of a 16-bit tensor with float32, integer and 0-d
tensors and Python scalars.

The leaves are float64 tensors (values that the 16-bit dtype holds exactly) that the program
casts, so the gradients are float64 on both sides. Where torch's kernel computes in float32
and rounds once (the elementwise ops, the promotions) the value must be torch's bit for bit;
elsewhere (sums in other orders) within a few 16-bit units of the largest value. Dtypes and
shapes are compared exactly; where torch raises, retrograd must raise an instance of torch's
exception class.

Round 75's ports listed ops where retrograd's 16-bit values are not torch's bits (unfixed):
``huber``/``smooth_l1``, eval ``batch_norm``, ``addmm``/``baddbmm``, bfloat16
``embedding_bag`` are compared within a few 16-bit units here; ``binary_cross_entropy`` by
its values alone (torch's target gradient is -inf where the bfloat16 input rounds to 1);
``instance_norm``, ``logit(eps)``, ``index_add(alpha)`` and ``cdist`` (torch refuses 16 bits,
retrograd computes) are not drawn. Nor is an ``exp2`` that overflows float16 (torch's
gradient is its 16-bit backward's inf, retrograd's finite).
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")

BK = rg.Autodiff(rg.TorchBackend("cpu"))
#: the spacing of the 16-bit formats at 1
EPS = {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23, "float64": 2.0**-52}


class Mismatch(AssertionError):  # noqa: N818 (read as "a mismatch with torch")
    pass


def _lib_dtype(lib, name):
    return getattr(lib, name)


def _leaf(rng, shape, dtype, kind="normal", scale=2.0):
    """float64 values that ``dtype`` holds exactly."""
    v = rng.standard_normal(shape) * scale
    if kind == "pos":
        v = np.abs(v) + 0.05
    elif kind == "unit":
        v = np.tanh(v) * 0.9
    return torch.tensor(v).to(getattr(torch, dtype)).double().numpy()


class Call:
    """``fn(lib, *tensors)``: ``leaves`` are float64 arrays cast to ``dtypes`` in the program
    (differentiated), ``ints`` integer arrays; ``units``: the tolerance in units of the
    result's format (0: bit for bit)."""

    def __init__(self, name, fn, leaves, dtypes, ints=(), units=0, grad=True, grad_units=8):
        self.name, self.fn, self.leaves, self.dtypes = name, fn, leaves, dtypes
        self.ints, self.units, self.grad, self.grad_units = list(ints), units, grad, grad_units

    def __repr__(self):
        shapes = [f"{d}{list(a.shape)}" for a, d in zip(self.leaves, self.dtypes)]
        return f"{self.name}({shapes}, ints={[list(i.shape) for i in self.ints]})"


def _run(lib, call):
    kw = {"backend": BK} if lib is rg else {}
    leaves = [
        lib.tensor(a.copy(), dtype=lib.float64, requires_grad=call.grad, **kw) for a in call.leaves
    ]
    args = [x.to(_lib_dtype(lib, d)) for x, d in zip(leaves, call.dtypes)]
    ints = [lib.tensor(i.copy(), **kw) for i in call.ints]
    return leaves, call.fn(lib, *args, *ints)


# -- the draws ---------------------------------------------------------------------------------
UNARY = {  # name: (domain, fn): torch computes each in float32 and rounds once
    "exp": ("normal", lambda lib, a: a.exp()),
    "log": ("pos", lambda lib, a: a.log()),
    "sqrt": ("pos", lambda lib, a: a.sqrt()),
    "rsqrt": ("pos", lambda lib, a: a.rsqrt()),
    "sin": ("normal", lambda lib, a: a.sin()),
    "cos": ("normal", lambda lib, a: a.cos()),
    "tan": ("unit", lambda lib, a: a.tan()),
    "tanh": ("normal", lambda lib, a: a.tanh()),
    "sigmoid": ("normal", lambda lib, a: a.sigmoid()),
    "expm1": ("normal", lambda lib, a: a.expm1()),
    "log1p": ("pos", lambda lib, a: a.log1p()),
    "erf": ("normal", lambda lib, a: a.erf()),
    "reciprocal": ("pos", lambda lib, a: a.reciprocal()),
    "square": ("normal", lambda lib, a: a**2),
    "pow": ("pos", lambda lib, a: a.pow(1.7)),
    "pow_neg": ("pos", lambda lib, a: a**-0.5),
    "log2": ("pos", lambda lib, a: a.log2()),
    "log10": ("pos", lambda lib, a: a.log10()),
    "exp2": ("normal", lambda lib, a: a.exp2()),
    "asin": ("unit", lambda lib, a: a.asin()),
    "atan": ("normal", lambda lib, a: a.atan()),
    "sinh": ("normal", lambda lib, a: a.sinh()),
    "softplus": ("normal", lambda lib, a: lib.nn.functional.softplus(a)),
    "silu": ("normal", lambda lib, a: lib.nn.functional.silu(a)),
    "gelu": ("normal", lambda lib, a: lib.nn.functional.gelu(a)),
    "logsigmoid": ("normal", lambda lib, a: lib.nn.functional.logsigmoid(a)),
    "abs": ("normal", lambda lib, a: a.abs()),
    "clamp": ("normal", lambda lib, a: a.clamp(-0.7, 1.3)),
    "mul_py": ("normal", lambda lib, a: a * 0.1 + 2),
    "div_py": ("normal", lambda lib, a: a / 3.0),
}
BINARY = {  # (domain of b, fn): one rounding each
    "add_alpha": ("normal", lambda lib, a, b: lib.add(a, b, alpha=0.3)),
    "div": ("pos", lambda lib, a, b: a / b),
    "pow_t": ("normal", lambda lib, a, b: b.abs() ** a),
    "atan2": ("normal", lambda lib, a, b: lib.atan2(a, b)),
    "hypot": ("normal", lambda lib, a, b: lib.hypot(a, b)),
    "lerp": ("normal", lambda lib, a, b: lib.lerp(a, b, 0.3)),
    "lerp_t": ("unit", lambda lib, a, b: lib.lerp(a, b.abs() * 2, b)),
    "addcmul": ("normal", lambda lib, a, b: lib.addcmul(a, b, a, value=0.7)),
    "addcdiv": ("pos", lambda lib, a, b: lib.addcdiv(a, a, b, value=-0.3)),
    "where": ("normal", lambda lib, a, b: lib.where(a > 0, a, b)),
    "clamp_t": ("normal", lambda lib, a, b: a.clamp(min=b)),
    "maximum": ("normal", lambda lib, a, b: lib.maximum(a, b)),
    "logaddexp": ("normal", lambda lib, a, b: lib.logaddexp(a, b)),
    "xlogy": ("pos", lambda lib, a, b: lib.xlogy(b, b)),
}


def _shape(rng):
    return tuple(int(s) for s in rng.integers(1, 6, size=int(rng.integers(1, 4))))


def draw_unary(rng, dt):
    name = str(rng.choice(list(UNARY)))
    dom, fn = UNARY[name]
    # overflows (exp(12) in float16) too; not exp2's: where 2**x overflows float16, torch's
    # gradient is its 16-bit backward's inf, retrograd's the float32 one's finite value (left
    # alone, reported)
    scale = 8.0 if rng.random() < 0.2 and name != "exp2" else 2.0
    return Call(name, fn, [_leaf(rng, _shape(rng), dt, dom, scale)], [dt])


def draw_binary(rng, dt):
    name = str(rng.choice(list(BINARY)))
    dom, fn = BINARY[name]
    s = _shape(rng)
    t = s[-int(rng.integers(0, len(s) + 1)) :] if rng.random() < 0.3 else s  # broadcast
    if rng.random() < 0.05:
        t = (s[0] + 1,)  # shapes that do not broadcast: torch's RuntimeError
    return Call(name, fn, [_leaf(rng, s, dt), _leaf(rng, t or (1,), dt, dom)], [dt, dt])


def draw_promotion(rng, dt):
    s = _shape(rng)
    other = str(rng.choice(["float32", "float64", "int", "zero_d32", "bf_f16", "py_int", "mixed"]))
    if other == "mixed":  # torch's kernels of three operands promote, or refuse, mixed dtypes
        o = str(rng.choice(["float32", "float16", "bfloat16"]))
        table = {
            "lerp": lambda lib, a, b: lib.lerp(a, b, 0.25),
            "addcmul": lambda lib, a, b: lib.addcmul(a, b, b, value=0.5),
            "addcdiv": lambda lib, a, b: lib.addcdiv(a, a, b.abs() + 1),
            "clamp": lambda lib, a, b: lib.clamp(a, min=b),
            "where": lambda lib, a, b: lib.where(a > 0, a, b),
            "mse": lambda lib, a, b: lib.nn.functional.mse_loss(a, b),
            "atan2": lambda lib, a, b: lib.atan2(a, b),
        }
        name = str(rng.choice(list(table)))
        return Call(
            f"mixed_{name}", table[name], [_leaf(rng, s, dt), _leaf(rng, s, o)], [dt, o], units=2
        )
    if other in ("float32", "float64"):
        return Call(
            f"promote_{other}",
            lambda lib, a, b: a * b + a,
            [_leaf(rng, s, dt), _leaf(rng, s, other)],
            [dt, other],
        )
    if other == "zero_d32":  # a 0-d float32 tensor does not promote a 16-bit one
        return Call(
            "promote_0d",
            lambda lib, a, b: a * b - b,
            [_leaf(rng, s, dt), _leaf(rng, (), "float32")],
            [dt, "float32"],
        )
    if other == "bf_f16":  # float16 with bfloat16: float32
        o = "float16" if dt == "bfloat16" else "bfloat16"
        return Call(
            "promote_16_16", lambda lib, a, b: a + b, [_leaf(rng, s, dt), _leaf(rng, s, o)], [dt, o]
        )
    if other == "py_int":
        return Call("promote_py", lambda lib, a: (a * 3 - 1) / 7, [_leaf(rng, s, dt)], [dt])
    ints = rng.integers(-4, 5, size=s)
    return Call("promote_int", lambda lib, a, i: a * i + i, [_leaf(rng, s, dt)], [dt], [ints])


def draw_reduction(rng, dt):
    s = _shape(rng)
    dim = int(rng.integers(0, len(s)))
    f32 = rng.random() < 0.4
    correction = int(rng.integers(0, 2))
    kw = {"dtype_": "float32"} if f32 else {}

    def with_dtype(method, **extra):
        def fn(lib, a):
            k = dict(extra)
            if kw:
                k["dtype"] = lib.float32
            return getattr(a, method)(**k)

        return fn

    table = {
        "sum": with_dtype("sum", dim=dim),
        "sum_all": with_dtype("sum"),
        "mean": with_dtype("mean", dim=dim),
        "cumsum": with_dtype("cumsum", dim=dim),
        "softmax": with_dtype("softmax", dim=dim),
        "log_softmax": with_dtype("log_softmax", dim=dim),
        "prod": with_dtype("prod", dim=dim),
        "var": lambda lib, a: a.var(dim, correction=correction),
        "std": lambda lib, a: a.std(dim),
        "logsumexp": lambda lib, a: a.logsumexp(dim),
        "norm2": lambda lib, a: lib.linalg.vector_norm(a, 2, dim=dim),
        "norm1": lambda lib, a: lib.linalg.vector_norm(a, 1),
        "norm_inf": lambda lib, a: lib.linalg.vector_norm(a, float("inf"), dim=dim),
        "norm3": lambda lib, a: a.norm(3, dim=dim),
        "amax": lambda lib, a: a.amax(dim),
    }
    name = str(rng.choice(list(table)))
    # the cancellation of var/std loses the relative precision of the squares' sum
    units = 8 if name in ("var", "std", "prod") else 3
    # the std of two bfloat16 values a unit apart: the 16-bit backwards' x - mean are rounding
    # noise on both sides (measured 8.5 units in 6,000 seeds)
    grad_units = 16 if name in ("var", "std") else 8
    f32 = f32 and name in ("sum", "sum_all", "mean", "cumsum", "softmax", "log_softmax", "prod")
    return Call(
        name + ("_f32" if f32 else ""),
        table[name],
        [_leaf(rng, s, dt, "pos" if name == "prod" else "normal", 1.0)],
        [dt],
        units=units,
        grad_units=grad_units,
    )


def draw_loss(rng, dt):
    red = str(rng.choice(["none", "mean", "sum"]))
    n, c = int(rng.integers(1, 5)), int(rng.integers(2, 5))
    table = {
        "mse": lambda lib, a, b: lib.nn.functional.mse_loss(a, b, reduction=red),
        "l1": lambda lib, a, b: lib.nn.functional.l1_loss(a, b, reduction=red),
        "huber": lambda lib, a, b: lib.nn.functional.huber_loss(a, b, reduction=red, delta=0.8),
        "smooth_l1": lambda lib, a, b: lib.nn.functional.smooth_l1_loss(
            a, b, reduction=red, beta=0.5
        ),
        "bce_logits": lambda lib, a, b: lib.nn.functional.binary_cross_entropy_with_logits(
            a, (b > 0).to(a.dtype), reduction=red
        ),
        "kl_div": lambda lib, a, b: lib.nn.functional.kl_div(
            a.log_softmax(-1), b.softmax(-1), reduction=red
        ),
        "bce": lambda lib, a, b: lib.nn.functional.binary_cross_entropy(
            a.sigmoid(), b.sigmoid(), reduction=red
        ),
    }
    if rng.random() < 0.35:
        target = rng.integers(0, c, size=n)
        ls = float(rng.choice([0.0, 0.1]))
        return Call(
            f"cross_entropy_{red}",
            lambda lib, a, t: lib.nn.functional.cross_entropy(
                a, t, reduction=red, label_smoothing=ls
            ),
            [_leaf(rng, (n, c), dt)],
            [dt],
            [target],
            units=4,
        )
    name = str(rng.choice(list(table)))
    s = (n, c)
    # binary_cross_entropy is in round 75's unfixed list: where the bfloat16 input rounds to
    # 1, torch's target gradient is -inf (log(1 - x)), retrograd's finite: values alone
    return Call(
        f"{name}_{red}",
        table[name],
        [_leaf(rng, s, dt), _leaf(rng, s, dt)],
        [dt, dt],
        units=4,
        grad=name != "bce",
    )


def draw_norm_layer(rng, dt):
    n, c, w = int(rng.integers(2, 4)), 4, int(rng.integers(2, 6))
    x = _leaf(rng, (n, c, w), dt)
    pdt = "float32" if rng.random() < 0.15 else dt  # float32 parameters with a 16-bit input
    wt, b = _leaf(rng, (c,), pdt), _leaf(rng, (c,), pdt)
    # not instance_norm: in round 75's unfixed list (its 16-bit values here off by up to 2.2x
    # the tolerance, its gradient by 6x)
    name = str(
        rng.choice(["layer_norm", "group_norm", "batch_norm_train", "batch_norm_eval", "rms_norm"])
    )
    nnf = lambda lib: lib.nn.functional  # noqa: E731

    def fn(lib, x, wt, b):
        if name == "layer_norm":
            return nnf(lib).layer_norm(x, (w,))
        if name == "rms_norm":
            return nnf(lib).rms_norm(x, (w,), eps=1e-5)
        if name == "group_norm":
            return nnf(lib).group_norm(x, 2, wt, b)
        mean = lib.zeros(c, dtype=x.dtype, **({"backend": BK} if lib is rg else {})) + 0.1
        var = mean * 0 + 1.5
        return nnf(lib).batch_norm(x, mean, var, wt, b, training=name == "batch_norm_train")

    return Call(name, fn, [x, wt, b], [dt, pdt, pdt], units=4)


def draw_linear(rng, dt):
    m, k, n = (int(v) for v in rng.integers(1, 7, size=3))
    name = str(rng.choice(["linear", "matmul", "bmm", "einsum", "addmm", "baddbmm"]))
    if rng.random() < 0.1:  # a float32 operand, or shapes that do not fit: torch refuses both
        other = str(rng.choice(["float32", "float16" if dt == "bfloat16" else "bfloat16"]))
        k2 = k + 1 if rng.random() < 0.5 else k
        return Call(
            f"{name}_refused",
            lambda lib, a, b: a @ b,
            [_leaf(rng, (m, k), dt), _leaf(rng, (k2, n), other)],
            [dt, other],
        )
    if name == "linear":
        return Call(
            name,
            lambda lib, a, w, b: lib.nn.functional.linear(a, w, b),
            [_leaf(rng, (m, k), dt), _leaf(rng, (n, k), dt), _leaf(rng, (n,), dt)],
            [dt] * 3,
            units=3,
        )
    if name == "matmul":
        return Call(
            name,
            lambda lib, a, b: a @ b,
            [_leaf(rng, (2, m, k), dt), _leaf(rng, (k, n), dt)],
            [dt] * 2,
            units=3,
        )
    if name == "bmm":
        return Call(
            name,
            lambda lib, a, b: lib.bmm(a, b),
            [_leaf(rng, (2, m, k), dt), _leaf(rng, (2, k, n), dt)],
            [dt] * 2,
            units=3,
        )
    if name == "einsum":
        return Call(
            name,
            lambda lib, a, b: lib.einsum("ij,kj->ik", a, b),
            [_leaf(rng, (m, k), dt), _leaf(rng, (n, k), dt)],
            [dt] * 2,
            units=3,
        )
    if name == "addmm":
        return Call(
            name,
            lambda lib, c, a, b: lib.addmm(c, a, b, beta=0.5, alpha=0.7),
            [_leaf(rng, (m, n), dt), _leaf(rng, (m, k), dt), _leaf(rng, (k, n), dt)],
            [dt] * 3,
            units=4,
        )
    return Call(
        name,
        lambda lib, c, a, b: lib.baddbmm(c, a, b, beta=0.5, alpha=0.3),
        [_leaf(rng, (2, m, n), dt), _leaf(rng, (2, m, k), dt), _leaf(rng, (2, k, n), dt)],
        [dt] * 3,
        units=4,
    )


def draw_spatial(rng, dt):
    name = str(
        rng.choice(
            [
                "conv1d",
                "conv2d",
                "max_pool2d",
                "avg_pool2d",
                "adaptive_avg",
                "interp_nearest",
                "interp_bilinear",
                "interp_linear",
            ]
        )
    )
    n, c = int(rng.integers(1, 3)), int(rng.integers(1, 4))
    nnf = lambda lib: lib.nn.functional  # noqa: E731
    if name == "conv1d":
        o, k, w = int(rng.integers(1, 4)), int(rng.integers(1, 4)), int(rng.integers(3, 8))
        pad = int(rng.integers(0, 2))
        return Call(
            name,
            lambda lib, x, wt, b: nnf(lib).conv1d(x, wt, b, padding=pad),
            [_leaf(rng, (n, c, w), dt), _leaf(rng, (o, c, k), dt), _leaf(rng, (o,), dt)],
            [dt] * 3,
            units=3,
        )
    h, w = (int(v) for v in rng.integers(3, 7, size=2))
    x = _leaf(rng, (n, c, h, w), dt)
    if name == "conv2d":
        o, stride = int(rng.integers(1, 4)), int(rng.integers(1, 3))
        return Call(
            name,
            lambda lib, x, wt: nnf(lib).conv2d(x, wt, stride=stride),
            [x, _leaf(rng, (o, c, 2, 2), dt)],
            [dt] * 2,
            units=3,
        )
    table = {
        "max_pool2d": lambda lib, x: nnf(lib).max_pool2d(x, 2, ceil_mode=True),
        "avg_pool2d": lambda lib, x: nnf(lib).avg_pool2d(x, 2, padding=1, count_include_pad=False),
        "adaptive_avg": lambda lib, x: nnf(lib).adaptive_avg_pool2d(x, (2, 3)),
        "interp_nearest": lambda lib, x: nnf(lib).interpolate(x, scale_factor=1.5, mode="nearest"),
        "interp_bilinear": lambda lib, x: nnf(lib).interpolate(x, size=(4, 5), mode="bilinear"),
        "interp_linear": lambda lib, x: nnf(lib).interpolate(
            x[:, :, 0], scale_factor=2, mode="linear", align_corners=True
        ),
    }
    return Call(name, table[name], [x], [dt], units=3)


def draw_embedding(rng, dt):
    v, d = int(rng.integers(2, 7)), int(rng.integers(1, 5))
    idx = rng.integers(0, v, size=(int(rng.integers(1, 4)), int(rng.integers(1, 4))))
    if rng.random() < 0.05:
        idx[0, 0] = v  # out of range: torch raises IndexError
    if rng.random() < 0.5:
        return Call(
            "embedding",
            lambda lib, w, i: lib.nn.functional.embedding(i, w),
            [_leaf(rng, (v, d), dt)],
            [dt],
            [idx],
        )
    mode = str(rng.choice(["sum", "mean", "max"]))
    return Call(
        f"embedding_bag_{mode}",
        lambda lib, w, i: lib.nn.functional.embedding_bag(i, w, mode=mode),
        [_leaf(rng, (v, d), dt)],
        [dt],
        [idx],
        units=2,
    )


DRAWS = [
    draw_unary,
    draw_binary,
    draw_promotion,
    draw_reduction,
    draw_loss,
    draw_norm_layer,
    draw_linear,
    draw_spatial,
    draw_embedding,
]
WEIGHTS = np.array([3, 3, 2, 3, 2, 1.5, 1.5, 1.5, 1])


def draw(rng):
    dt = str(rng.choice(["float16", "bfloat16"]))
    return DRAWS[int(rng.choice(len(DRAWS), p=WEIGHTS / WEIGHTS.sum()))](rng, dt)


# -- the comparison ----------------------------------------------------------------------------
def _values(t):
    return (
        t.detach().to(torch.float64).numpy()
        if isinstance(t, torch.Tensor)
        else (t.detach().cast("float64").numpy())
    )


def check(call):
    log = repr(call)
    try:
        t_leaves, expected = _run(torch, call)
    except Exception as err:  # (the class is what is compared)
        try:
            _run(rg, call)
        except type(err):
            return
        except Exception as mine:
            raise Mismatch(f"{log}\ntorch raised {err!r}; retrograd {mine!r}") from mine
        raise Mismatch(f"{log}\ntorch raised {err!r}; retrograd did not") from err
    r_leaves, got = _run(rg, call)
    e_dt = str(expected.dtype).removeprefix("torch.")
    if str(got.dtype) != e_dt:
        raise Mismatch(f"{log}\ndtype {got.dtype} vs torch's {e_dt}")
    if tuple(got.shape) != tuple(expected.shape):
        raise Mismatch(f"{log}\nshape {tuple(got.shape)} vs torch's {tuple(expected.shape)}")
    a = got.detach().to(rg.float64).numpy()
    b = expected.detach().double().numpy()
    _compare(log, "value", a, b, call.units * EPS[e_dt])
    if not call.grad or not expected.requires_grad or expected.numel() == 0:
        return
    weights = np.cos(np.arange(expected.numel())).reshape(tuple(expected.shape))
    (expected.double() * torch.tensor(weights)).sum().backward()
    grads = (got.to(rg.float64) * rg.tensor(weights, backend=BK)).sum().backward()
    for i, (tl, rl) in enumerate(zip(t_leaves, r_leaves)):
        if tl.grad is None:
            continue
        mine = rl.grad(grads)
        # the backward runs in 16 bits on both sides, its sums in other orders: a few units
        coarsest = max(EPS[d] for d in call.dtypes)
        _compare(log, f"grad {i}", mine.numpy(), tl.grad.numpy(), call.grad_units * coarsest)


def _compare(log, what, a, b, tol):
    finite = np.isfinite(b)
    if not np.array_equal(finite, np.isfinite(a)) or not np.array_equal(
        a[~finite], b[~finite], equal_nan=True
    ):
        raise Mismatch(f"{log}\n{what}: non-finite entries differ\n{a}\n{b}")
    if tol == 0:
        if not np.array_equal(a, b):
            n = np.count_nonzero(a != b)
            raise Mismatch(f"{log}\n{what}: {n} entries not torch's bits\n{a}\n{b}")
        return
    scale = float(np.max(np.abs(b[finite]), initial=0.0)) + 1.0
    err = float(np.max(np.abs(a[finite] - b[finite]), initial=0.0))
    if err > tol * scale:
        raise Mismatch(f"{log}\n{what}: off by {err:.3g} > {tol * scale:.3g}\n{a}\n{b}")


@pytest.mark.parametrize("seed", range(30))
def test_random_16_bit_calls_match_torch(seed):
    rng = np.random.default_rng(77_000 + seed)
    for _ in range(8):
        check(draw(rng))


def test_the_numpy_backend_refuses_16_bit_dtypes():
    with pytest.raises(TypeError, match="float16"):
        rg.tensor([1.0], dtype="float16", backend=rg.Autodiff(rg.NumpyBackend()))
