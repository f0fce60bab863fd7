"""A seeded sweep of bad and edge input over the public surface (API.md section 7).

Each generator below draws calls from a fixed seed: ``rg.*`` functions, ``rg.Tensor`` methods
and ``nn.functional`` functions given wrong shapes, out-of-range dims and indices, wrong dtypes,
``None`` and strings, NaN and infinities, empty and 0-d tensors; modules and optimizers given
bad arguments; tensors of two backends combined; in-place writes on leaves and views; damaged
files. Every call must give a result or an error of the hierarchy (``rg.RetrogradError``)
naming the operation, never a bare Python, NumPy or torch exception, a hang or a crash; the
graph built before the calls must still give its gradients, and the modules and optimizers
must keep working. Where torch gives a result for an empty or 0-d input, retrograd must give
the same result (:func:`test_empty_and_0d_inputs_agree_with_torch`).

The sweep found the defects of ``tests/test_reliability_regressions.py``.
"""

from __future__ import annotations

import inspect
import io
import math
import pickle
import random
import signal
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import torch

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812  (PyTorch's idiom)
from backends import inner_backend

#: Functions that change the process's state (the default backend, dtype, seed, threads),
#: write files, or run the caller's function: swept elsewhere or not at all.
_GLOBAL = {
    "save", "load", "seed", "manual_seed", "set_default_backend", "set_default_device",
    "set_default_dtype", "set_float32_matmul_precision", "set_num_threads", "set_printoptions",
    "set_rng_state", "use_backend", "use_deterministic_algorithms", "compile", "capture", "vmap",
    "random", "from_numpy",
}  # fmt: skip
#: Methods that hand out memory, hooks or host values, or move the tensor: not arguments' ops.
_METHODS_SKIPPED = {
    "backward", "register_hook", "register_post_accumulate_grad_hook", "apply_", "map_",
    "requires_grad_", "share_memory_", "pin_memory", "record_stream", "cuda", "to", "data_ptr",
    "storage", "untyped_storage", "numpy", "tolist", "item", "from_inner", "set_",
    "set_distributed", "retain_grad", "grad_replace", "grad_remove", "grad", "resize_",
}  # fmt: skip


def _arguments() -> dict[str, Callable[[], Any]]:
    """The argument pool: each entry makes a fresh value (so that in-place ops change no
    other call's input)."""
    rows = np.arange(6, dtype=np.float32).reshape(2, 3) / 3 + 0.1
    return {
        "f23": lambda: rg.tensor(rows),
        "f3": lambda: rg.tensor([0.5, 1.5, 2.5]),
        "f45": lambda: rg.ones((4, 5)),
        "f0": lambda: rg.tensor(1.5),
        "i23": lambda: rg.tensor(np.arange(6).reshape(2, 3)),
        "i3": lambda: rg.tensor([0, 5, -9]),
        "b23": lambda: rg.tensor(np.arange(6).reshape(2, 3) % 2 == 0),
        "e0": lambda: rg.zeros((0,)),
        "e03": lambda: rg.zeros((0, 3)),
        "e30": lambda: rg.zeros((3, 0)),
        "nan": lambda: rg.tensor([float("nan"), float("inf"), -1.0]),
        "fidx": lambda: rg.tensor([0.0, 1.0]),
        "tview": lambda: rg.tensor(rows).t(),  # a non-contiguous view
        "None": lambda: None,
        "str": lambda: "a",
        "0": lambda: 0,
        "1": lambda: 1,
        "-1": lambda: -1,
        "5": lambda: 5,
        "-5": lambda: -5,
        "1.5": lambda: 1.5,
        "nanf": lambda: float("nan"),
        "True": lambda: True,
        "dims": lambda: (1, -3),
        "list": lambda: [0, 5],
        "empty_list": lambda: [],
    }


_TENSORS = [
    "f23",
    "f3",
    "f45",
    "f0",
    "i23",
    "i3",
    "b23",
    "e0",
    "e03",
    "e30",
    "nan",
    "fidx",
    "tview",
]


def _surface() -> list[tuple[str, Callable[..., Any], int]]:
    """``(name, callable, positional arity to draw)`` for every swept entry point (a method
    as its function of the class, the tensor first)."""
    entries = []
    for name in sorted(dir(rg)):
        value = getattr(rg, name)
        if name.startswith("_") or name in _GLOBAL or inspect.isclass(value):
            continue
        if callable(value) and not inspect.ismodule(value):
            entries.append((f"rg.{name}", value, 3))
    for name in sorted(dir(rg.Tensor)):
        if name.startswith("_") or name in _METHODS_SKIPPED:
            continue
        if callable(getattr(rg.Tensor, name, None)):
            entries.append((f"Tensor.{name}", getattr(rg.Tensor, name), 3))
    for name in sorted(dir(F)):
        value = getattr(F, name)
        if name.startswith("_") or inspect.isclass(value) or inspect.ismodule(value):
            continue
        if callable(value):
            entries.append((f"F.{name}", value, 3))
    return entries


class _TimeoutError(Exception):
    pass


def _alarm(*_: Any) -> None:
    raise _TimeoutError


def _bindable(function: Callable[..., Any], args: tuple) -> bool:
    """Whether ``args`` fit ``function``'s signature (a wrong count is Python's own
    TypeError at the call, the same in torch, and says nothing about the op)."""
    try:
        inspect.signature(function).bind(*args)
    except TypeError:
        return False
    except ValueError:  # no signature to read (a builtin): call it
        return True
    return True


def _check_outcome(label: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> str:
    """Run ``call(*args, **kwargs)`` under a time limit: ``"ok"``, ``"refused"``, or a
    failure description."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(30)  # a first call may compile a Numba kernel; a hang takes far longer
    try:
        call(*args, **kwargs)
    except rg.RetrogradError as error:
        message = str(error)
        if not message.strip():
            return f"{label}: {type(error).__name__} without a message"
        return "refused"
    except NotImplementedError:  # a documented limit (complex dtypes, sparse layouts)
        return "refused"
    except _TimeoutError:
        return f"{label}: no answer in 30 s"
    except RecursionError as error:
        return f"{label}: RecursionError {error}"
    except Exception as error:  # (what the sweep looks for)
        return f"{label}: {type(error).__name__}: {str(error)[:160]}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return "ok"


@pytest.fixture
def pending():
    """A graph built before the sweep's calls, and the gradients it must still give."""
    a = rg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]).require_grad()
    b = rg.tensor([[0.5, -1.0, 2.0], [1.5, 0.25, -2.0]]).require_grad()
    yield a, b, (a * b + a.exp()).sum()


def _assert_pending_intact(pending: tuple) -> None:
    a, b, loss = pending
    grads = loss.backward()
    expected_a = torch.tensor(b.numpy()) + torch.tensor(a.numpy()).exp()
    np.testing.assert_allclose(a.grad(grads).numpy(), expected_a.numpy(), rtol=1e-6)
    np.testing.assert_array_equal(b.grad(grads).numpy(), a.numpy())


@pytest.mark.parametrize("part", range(4))
def test_bad_arguments_over_the_public_surface_raise_the_hierarchy(pending, part):
    """About a sixth of (entry point, argument tuple) pairs, drawn with a fixed seed: the
    first argument a tensor of the pool (or None or a str for functions), the others
    anything of the pool."""
    pool = _arguments()
    names = list(pool)
    rng = random.Random(1200 + part)
    entries = _surface()[part::4]
    failures, outcomes = [], {"ok": 0, "refused": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for label, function, arity in entries:
            for _ in range(7):
                first = rng.choice(_TENSORS + (["None", "str"] if label.startswith("rg.") else []))
                rest = [rng.choice(names) for _ in range(rng.randrange(arity))]
                args = tuple(pool[name]() for name in [first, *rest])
                if not _bindable(function, args):
                    continue
                outcome = _check_outcome(f"{label}{(first, *rest)}", function, *args)
                if outcome in outcomes:
                    outcomes[outcome] += 1
                else:
                    failures.append(outcome)
    assert not failures, "\n".join(failures)
    assert outcomes["ok"] > 100 and outcomes["refused"] > 300, outcomes
    _assert_pending_intact(pending)


# -- empty and 0-d tensors against torch --------------------------------------------------------
_EMPTY_UNARY = [
    "sum", "mean", "prod", "amax", "amin", "max", "min", "argmax", "argmin", "logsumexp",
    "softmax", "log_softmax", "cumsum", "cumprod", "std", "var", "norm", "nansum", "nanmean",
    "median", "all", "any", "count_nonzero", "flip", "sort", "argsort", "msort", "cummax",
    "cummin", "logcumsumexp", "diff", "trapezoid", "cumulative_trapezoid", "unique", "var_mean",
    "std_mean", "aminmax", "exp", "relu", "sigmoid", "tanh", "square", "abs", "neg", "flatten",
    "ravel", "t", "squeeze", "trace", "diag", "tril", "triu", "clone", "isfinite", "nonzero",
    "argwhere", "sign", "kthvalue", "topk", "mode", "nanmedian", "quantile", "renorm", "roll",
    "rot90", "fliplr", "flipud", "unbind", "chunk", "split", "tensor_split", "block_diag",
    "combinations", "cartesian_prod", "atleast_1d", "atleast_2d", "atleast_3d", "histc",
    "bincount", "unique_consecutive", "cov", "corrcoef", "vander", "diagflat", "diag_embed",
    "column_stack", "hstack", "vstack", "dstack", "matrix_power", "det", "logdet", "inverse",
]  # fmt: skip
#: extra arguments each may take (``None``: none); a dim where the op has one
_EMPTY_ARGS: dict[str, list[tuple]] = {
    "softmax": [(0,), (-1,)], "log_softmax": [(0,), (-1,)], "cumsum": [(0,), (-1,)],
    "cumprod": [(0,)], "logcumsumexp": [(0,)], "cummax": [(0,)], "cummin": [(0,)],
    "sum": [(), (0,), (-1,), ((0, -1),)], "mean": [(), (0,), (-1,)], "prod": [(), (0,)],
    "amax": [(), (0,), (-1,)], "amin": [(), (-1,)], "max": [(), (0,), (-1,)], "min": [(), (-1,)],
    "argmax": [(), (0,), (-1,)], "argmin": [(), (-1,)], "logsumexp": [(0,), (-1,)],
    "std": [(), (0,), (-1,)], "var": [(), (-1,)], "norm": [(), (2, -1)], "nansum": [(), (-1,)],
    "nanmean": [(), (-1,)], "median": [(), (-1,)], "all": [(), (-1,)], "any": [(), (0,)],
    "count_nonzero": [(), (0,)], "flip": [(0,), (-1,)], "sort": [(), (0,)], "argsort": [(0,)],
    "diff": [(), (1, 0)], "trapezoid": [()], "cumulative_trapezoid": [()], "var_mean": [(-1,)],
    "std_mean": [(0,)], "aminmax": [()], "kthvalue": [(1, 0), (1, -1)], "topk": [(0,), (0, 0)],
    "mode": [(0,), (-1,)], "nanmedian": [(), (0,)], "quantile": [(0.5,), (0.5, -1)],
    "renorm": [(2, 0, 1.0)], "roll": [(1,), (1, 0)], "rot90": [()], "chunk": [(2,), (2, -1)],
    "split": [(1,), (2, -1)], "tensor_split": [(2,), (2, -1)], "combinations": [(), (0,)],
    "histc": [()], "tril": [(), (1,)], "triu": [(), (-1,)], "diag": [(), (1,)],
    "squeeze": [(), (0,), (-1,)], "flatten": [(), (0, -1)], "matrix_power": [(0,), (2,)],
    "diag_embed": [()], "vander": [(), (0,)],
}  # fmt: skip
_PAIRS = [
    ("matmul", (2, 0), (0, 3)), ("matmul", (0, 2), (2, 3)), ("matmul", (0,), (0,)),
    ("matmul", (3, 0), (0,)), ("matmul", (2, 0, 4), (4, 1)), ("mm", (0, 0), (0, 0)),
    ("bmm", (0, 2, 3), (0, 3, 1)), ("bmm", (2, 2, 0), (2, 0, 1)), ("dot", (0,), (0,)),
    ("outer", (0,), (3,)), ("kron", (0, 2), (2, 2)), ("inner", (2, 0), (3, 0)),
    ("cross", (0, 3), (0, 3)), ("cdist", (0, 3), (2, 3)), ("cdist", (2, 3), (0, 3)),
    ("add", (0, 3), (3,)), ("add", (0, 1), (1, 3)), ("mul", (0,), ()), ("maximum", (0, 3), (1, 3)),
    ("where_", (0, 2), (0, 2)), ("atan2", (0,), (0,)), ("tensordot", (0, 2), (2, 0)),
    ("cat0", (0, 3), (2, 3)), ("cat0", (0, 3), (0, 3)), ("cat1", (2, 0), (2, 3)),
    ("cat0", (0,), (2, 3)), ("stack", (0, 2), (0, 2)), ("vdot", (0,), (0,)),
    ("dist", (0,), (0,)), ("lerp_", (0, 2), (0, 2)), ("searchsorted", (0,), (3,)),
    ("searchsorted", (4,), (0,)), ("bucketize", (0,), (3,)), ("isin", (0,), (3,)),
    ("take_along_dim", (0, 2), None), ("gather", (3, 2), None), ("index_select", (3, 2), None),
    ("einsum", (2, 0), (0, 3)), ("linear", (0, 3), (2, 3)), ("bilinear", (0, 3), (0, 2)),
]  # fmt: skip


def _call_pair(lib: Any, name: str, x: Any, y: Any) -> Any:
    if name.startswith("cat"):
        return lib.cat([x, y], int(name[3]))
    if name == "stack":
        return lib.stack([x, y])
    if name == "where_":
        return lib.where(x > 0, x, y)
    if name == "lerp_":
        return lib.lerp(x, y, 0.5)
    if name == "tensordot":
        return lib.tensordot(x, y, 1)
    if name == "einsum":
        return lib.einsum("ij,jk->ik", x, y)
    if name in ("take_along_dim", "gather", "index_select"):
        index = lib.zeros((0, 2) if name != "index_select" else (0,), dtype=lib.int64)
        if name == "take_along_dim":
            return lib.take_along_dim(x, index, 0)
        return (
            getattr(lib, name)(x, 0, index) if name == "index_select" else lib.gather(x, 0, index)
        )
    if name == "linear":
        functional = F if lib is rg else torch.nn.functional
        return functional.linear(x, y)
    if name == "bilinear":
        functional = F if lib is rg else torch.nn.functional
        weight = lib.ones((4, 3, 2), dtype=lib.float64)
        return functional.bilinear(x, y, weight)
    return getattr(lib, name)(x, y)


def _as_numpy(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().numpy()
    if isinstance(value, rg.Tensor):
        return value.numpy()
    if isinstance(value, tuple | list):
        return [_as_numpy(v) for v in value]
    return value


def _agree(label: str, ours: Any, theirs: Any) -> str | None:
    a, b = _as_numpy(ours), _as_numpy(theirs)
    if isinstance(b, list):
        if not isinstance(a, list) or len(a) != len(b):
            return f"{label}: {len(a) if isinstance(a, list) else type(a)} results, torch {len(b)}"
        return next((m for m in (_agree(label, x, y) for x, y in zip(a, b)) if m), None)
    if isinstance(b, np.ndarray):
        a = np.asarray(a)
        if a.shape != b.shape:
            return f"{label}: shape {a.shape}, torch {b.shape}"
        if a.dtype.kind != b.dtype.kind and b.dtype.kind != "u":
            return f"{label}: dtype {a.dtype}, torch {b.dtype}"
        if b.size and not np.allclose(a.astype(np.float64), b.astype(np.float64), equal_nan=True):
            return f"{label}: values {a.ravel()[:4]}, torch {b.ravel()[:4]}"
        return None
    if isinstance(b, float) and math.isnan(b):
        return None if isinstance(a, float) and math.isnan(a) else f"{label}: {a}, torch nan"
    return None if a == b else f"{label}: {a}, torch {b}"


def _empty_cases(rng: random.Random) -> Iterator[tuple[str, Callable[[Any], Any]]]:
    """Unary ops on empty tensors (one zero-size dim among up to three) and on 0-d ones, with
    their dims; binary ops on empty operands."""
    for name in _EMPTY_UNARY:
        for extra in _EMPTY_ARGS.get(name, [()]):
            for shape in rng.sample([(0,), (0, 3), (3, 0), (2, 0, 3), (), (0, 0)], 3):
                yield (
                    f"{name}{extra} of {list(shape)}",
                    lambda lib, n=name, s=shape, e=extra: getattr(lib, n)(
                        lib.zeros(s, dtype=lib.float64) + 0.5, *e
                    ),
                )
    for name, left, right in _PAIRS:

        def call(lib: Any, n: str = name, a: tuple = left, b: tuple | None = right) -> Any:
            x = lib.zeros(a, dtype=lib.float64) + 0.25
            y = lib.zeros(b, dtype=lib.float64) - 0.5 if b is not None else None
            return _call_pair(lib, n, x, y)

        yield f"{name}({list(left)}, {list(right) if right else None})", call


def test_empty_and_0d_inputs_agree_with_torch():
    """Where torch gives a result for an empty or 0-d input, retrograd gives the same (shape,
    dtype kind, values, NaN where torch has NaN); where torch refuses, retrograd refuses with
    the hierarchy's error."""
    rng = random.Random(12)
    failures, compared = [], 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for label, call in _empty_cases(rng):
            try:
                theirs = call(torch)
            except Exception:  # torch refuses: ours must refuse clearly
                theirs = None
            outcome = _check_outcome(label, call, rg)
            if outcome not in ("ok", "refused"):
                failures.append(outcome)
                continue
            if theirs is None:
                continue
            if outcome == "refused":
                try:
                    call(rg)
                except (rg.RetrogradError, NotImplementedError) as error:
                    failures.append(f"{label}: refused ({error}), torch gives a result")
                continue
            compared += 1
            problem = _agree(label, call(rg), theirs)
            if problem:
                failures.append(problem)
    assert not failures, "\n".join(failures)
    assert compared > 300, compared


# -- modules and optimizers ---------------------------------------------------------------------
_MODULES: dict[str, tuple[tuple, Callable[[], Any] | None]] = {
    "Linear": ((3, 4), lambda: rg.ones((2, 3))),
    "Conv1d": ((2, 3, 3), lambda: rg.ones((1, 2, 8))),
    "Conv2d": ((2, 3, 3), lambda: rg.ones((1, 2, 8, 8))),
    "ConvTranspose2d": ((2, 3, 3), lambda: rg.ones((1, 2, 5, 5))),
    "BatchNorm1d": ((3,), lambda: rg.ones((4, 3))),
    "BatchNorm2d": ((3,), lambda: rg.ones((2, 3, 4, 4))),
    "LayerNorm": ((3,), lambda: rg.ones((2, 3))),
    "GroupNorm": ((2, 4), lambda: rg.ones((2, 4, 3))),
    "InstanceNorm1d": ((3,), lambda: rg.ones((2, 3, 5))),
    "Embedding": ((10, 3), lambda: rg.tensor([[1, 2], [3, 4]])),
    "EmbeddingBag": ((10, 3), lambda: rg.tensor([[1, 2], [3, 4]])),
    "LSTM": ((3, 4), lambda: rg.ones((5, 2, 3))),
    "GRU": ((3, 4), lambda: rg.ones((5, 2, 3))),
    "RNNCell": ((3, 4), lambda: rg.ones((2, 3))),
    "MultiheadAttention": ((4, 2), None),
    "TransformerEncoderLayer": ((4, 2, 8), lambda: rg.ones((3, 2, 4))),
    "MaxPool2d": ((2,), lambda: rg.ones((1, 2, 8, 8))),
    "AvgPool1d": ((2,), lambda: rg.ones((1, 2, 8))),
    "AdaptiveAvgPool2d": ((2,), lambda: rg.ones((1, 2, 8, 8))),
    "Upsample": ((None, 2), lambda: rg.ones((1, 2, 4, 4))),
    "PixelShuffle": ((2,), lambda: rg.ones((1, 4, 3, 3))),
    "Dropout": ((0.5,), lambda: rg.ones((2, 3))),
    "Softmax": ((1,), lambda: rg.ones((2, 3))),
    "Flatten": ((0, -1), lambda: rg.ones((2, 3))),
    "Unflatten": ((1, (3, 1)), lambda: rg.ones((2, 3))),
    "ZeroPad2d": ((1,), lambda: rg.ones((1, 1, 3, 3))),
    "Fold": (((4, 4), 2), lambda: rg.ones((1, 4, 9))),
    "Unfold": ((2,), lambda: rg.ones((1, 1, 4, 4))),
    "Hardtanh": ((-1.0, 1.0), lambda: rg.ones((2, 3))),
    "PReLU": ((), lambda: rg.ones((2, 3))),
    "GLU": ((-1,), lambda: rg.ones((2, 4))),
}
_BAD_VALUES = [None, "a", -1, 0, 1.5, float("nan"), (2, 3), []]


def _forward_inputs(good: Any) -> dict[str, Any]:
    ints = good.dtype == "int64"
    return {
        "None": None,
        "str": "a",
        "rank-1": rg.tensor([1]) if ints else rg.ones((3,)),
        "rank+1": good.unsqueeze(0),
        "empty batch": good[:0],
        "other dtype": good.float() if ints else good.long(),
        "bool": good > 0,
        "nan": good.float() * float("nan"),
        "0-d": rg.tensor(1.0),
        "array": good.numpy(),
    }


def test_modules_given_bad_arguments_and_inputs_refuse_and_keep_working():
    failures = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, (good, make) in _MODULES.items():
            cls = getattr(rg.nn, name)
            for i in range(len(good)):
                for bad in _BAD_VALUES:
                    args = (*good[:i], bad, *good[i + 1 :])
                    label = f"{name}{args}"
                    outcome = _check_outcome(label, cls, *args)
                    if outcome == "ok" and make is not None:
                        outcome = _check_outcome(f"{label}.forward", cls(*args), make())
                    if outcome not in ("ok", "refused"):
                        failures.append(outcome)
            if make is None:
                continue
            module = cls(*good)
            for what, value in _forward_inputs(make()).items():
                outcome = _check_outcome(f"{name}.forward({what})", module, value)
                if outcome not in ("ok", "refused"):
                    failures.append(outcome)
            out = module(make())  # still usable, gradients included
            out = out[0] if isinstance(out, tuple) else out
            params = [p for p in module.parameters() if p.is_require_grad()]
            if params and out.dtype in ("float32", "float64"):
                grads = out.sum().backward()
                if any(p.grad(grads) is None for p in params):
                    failures.append(f"{name}: a parameter lost its gradient after the errors")
    assert not failures, "\n".join(failures)


_OPTIMIZERS = ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam",
               "RAdam", "ASGD", "Rprop", "Adafactor"]  # fmt: skip
_BAD_OPTIONS = [
    {"lr": -1.0}, {"lr": "a"}, {"lr": None}, {"betas": (0.9,)}, {"betas": (1.5, 0.9)},
    {"betas": "ab"}, {"eps": -1.0}, {"weight_decay": -1.0}, {"momentum": -1.0}, {"foo": 1},
    {"alpha": -1.0}, {"rho": 2.0}, {"etas": (2.0, 0.5)},
]  # fmt: skip


def test_optimizers_given_bad_options_gradients_and_state_refuse_and_keep_stepping():
    failures = []
    for name in _OPTIMIZERS:
        cls = getattr(rg.optim, name)
        for options in _BAD_OPTIONS:
            label = f"{name}({options})"
            outcome = _check_outcome(label, cls, [rg.nn.Parameter(rg.ones(3))], **options)
            if outcome not in ("ok", "refused"):
                failures.append(outcome)
        for params in ([], None, "a", [1.0], [{"params": []}], [rg.ones(3, dtype="int64")]):
            outcome = _check_outcome(f"{name}(params={params!r})", cls, params)
            if outcome not in ("ok", "refused"):
                failures.append(outcome)
        w = rg.nn.Parameter(rg.tensor([1.0, -2.0, 3.0]))
        reference = rg.nn.Parameter(rg.tensor([1.0, -2.0, 3.0]))
        optimizer, clean = cls([w], lr=0.1), cls([reference], lr=0.1)
        state = optimizer.state_dict()
        group = {**state["param_groups"][0], "params": [0, 1]}
        for method, argument in (
            (optimizer.step, None),
            (optimizer.step, "a"),
            (optimizer.step, 5),
            (optimizer.load_state_dict, None),
            (optimizer.load_state_dict, {}),
            (optimizer.load_state_dict, {"state": {0: "x"}, **state}),
            (optimizer.load_state_dict, {"state": {}, "param_groups": [group]}),
            (optimizer.add_param_group, {"params": [w]}),
            (optimizer.add_param_group, None),
        ):
            outcome = _check_outcome(f"{name}.{method.__name__}({argument!r})", method, argument)
            if outcome not in ("ok", "refused"):
                failures.append(outcome)
        for _ in range(3):  # the failed calls changed nothing: the same steps as a clean one
            optimizer.step((w * w).sum().backward())
            clean.step((reference * reference).sum().backward())
        if not np.allclose(w.numpy(), reference.numpy(), rtol=1e-6):
            failures.append(f"{name}: steps after the errors differ from a clean optimizer's")
    assert not failures, "\n".join(failures)


# -- backends, in-place writes, deep graphs -----------------------------------------------------
def test_tensors_of_two_backends_combine_or_refuse_and_gradients_stay_right():
    """Every pair of: the default autodiff backend, a second instance, its inner backend, and
    an autodiff backend over the other inner kind, through binary ops, either order."""
    inner = inner_backend()
    other_inner = (
        rg.NumpyBackend() if isinstance(inner, rg.TorchBackend) else rg.TorchBackend("cpu")
    )
    backends = {
        "autodiff": rg.Autodiff(inner),
        "autodiff2": rg.Autodiff(inner_backend()),
        "inner": inner,
        "other": rg.Autodiff(other_inner),
    }
    ops = [
        ("add", lambda x, y: x + y, lambda x, y: (1.0, 1.0)),
        ("mul", lambda x, y: x * y, lambda x, y: (y, x)),
        ("sub", lambda x, y: x - y, lambda x, y: (1.0, -1.0)),
        ("div", lambda x, y: x / y, lambda x, y: (1.0 / y, -x / y**2)),
        ("maximum", lambda x, y: rg.maximum(x, y), lambda x, y: (x > y, y > x)),
        ("matmul", lambda x, y: x @ y, None),
        ("cat", lambda x, y: rg.cat([x, y]), None),
        ("where", lambda x, y: rg.where(x > 0, x, y), None),
    ]
    xs, ys = np.array([1.0, -2.0, 3.0], np.float32), np.array([0.5, 4.0, -1.0], np.float32)
    failures = []
    for first, b1 in backends.items():
        for second, b2 in backends.items():
            for name, op, derivative in ops:
                x = rg.tensor(xs, backend=b1)
                y = rg.tensor(ys, backend=b2)
                tracked = [t for t, b in ((x, b1), (y, b2)) if b.is_autodiff]
                for t in tracked:
                    t.require_grad()
                label = f"{name}({first}, {second})"
                outcome = _check_outcome(label, op, x, y)
                if outcome == "refused":
                    continue
                if outcome != "ok":
                    failures.append(outcome)
                    continue
                out = op(x, y)
                if tracked and not out.requires_grad:
                    failures.append(f"{label}: the result dropped the graph of a tracked operand")
                    continue
                if derivative is None or not tracked:
                    continue
                grads = out.sum().backward()
                for t, expected in zip((x, y), derivative(xs, ys)):
                    if t.requires_grad:
                        got = t.grad(grads).numpy()
                        if not np.allclose(got, np.broadcast_to(expected, xs.shape)):
                            failures.append(f"{label}: gradient {got}, expected {expected}")
    assert not failures, "\n".join(failures)


_INPLACE = [
    ("add_", lambda lib, t: t.add_(1.0)), ("mul_", lambda lib, t: t.mul_(2.0)),
    ("zero_", lambda lib, t: t.zero_()), ("copy_", lambda lib, t: t.copy_(lib.ones(t.shape))),
    ("clamp_", lambda lib, t: t.clamp_(0.0, 1.0)), ("exp_", lambda lib, t: t.exp_()),
    ("setitem", lambda lib, t: t.__setitem__(0, 5.0)), ("fill_", lambda lib, t: t.fill_(2.0)),
    ("masked_fill_", lambda lib, t: t.masked_fill_(t > 1, 0.0)),
    ("index_add_", lambda lib, t: t.index_add_(0, lib.tensor([0]), lib.ones((1, *t.shape[1:])))),
    ("div_", lambda lib, t: t.div_(2.0)), ("sigmoid_", lambda lib, t: t.sigmoid_()),
]  # fmt: skip


@pytest.mark.parametrize("write", [w for _, w in _INPLACE], ids=[n for n, _ in _INPLACE])
def test_in_place_writes_follow_torchs_rules_on_leaves_views_and_intermediates(write):
    """A leaf that requires grad (or a view of one) refuses an in-place write while grad is
    recorded and leaves the graph as it was; on an intermediate the gradient flows through
    the write as torch's does; under no_grad the leaf takes the write, as torch's."""
    data = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], np.float32)
    leaf = rg.tensor(data).require_grad()
    pending = (leaf * leaf).sum()
    for target in (leaf, leaf[0:1], leaf.t()):
        with pytest.raises(rg.AutodiffError, match="leaf"):
            write(rg, target)
    np.testing.assert_array_equal(leaf.numpy(), data)
    np.testing.assert_array_equal(leaf.grad(pending.backward()).numpy(), 2 * data)
    theirs_leaf = torch.tensor(data, requires_grad=True)
    ours, theirs = leaf * 1.5, theirs_leaf * 1.5
    write(rg, ours)
    write(torch, theirs)
    grads = (ours * ours).sum().backward()
    (theirs * theirs).sum().backward()
    np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(leaf.grad(grads).numpy(), theirs_leaf.grad.numpy(), rtol=1e-5)
    with rg.no_grad():
        write(rg, leaf)
    with torch.no_grad():
        write(torch, theirs_leaf)
    np.testing.assert_allclose(leaf.numpy(), theirs_leaf.detach().numpy(), rtol=1e-6)
    assert leaf.requires_grad


def test_backward_misuse_is_an_autodiff_error_and_the_graph_stays_usable():
    x = rg.tensor([1.0, 2.0, 3.0]).require_grad()
    loss = (x * x).sum()
    loss.backward(retain_graph=True)
    assert x.grad(loss.backward()).tolist() == [2.0, 4.0, 6.0]  # the retained graph
    with pytest.raises(rg.AutodiffError, match="backward"):
        loss.backward()  # consumed
    stranger = rg.tensor([1.0]).require_grad()
    with pytest.raises(rg.AutodiffError, match=r"autograd\.grad"):
        rg.autograd.grad((x * x).sum(), stranger)
    assert rg.autograd.grad((x * x).sum(), [x, stranger], allow_unused=True)[1] is None
    assert stranger.grad((x * 2).sum().backward()) is None  # not in that graph: no gradient
    with pytest.raises(rg.ShapeError, match="backward"):
        (x * 2).backward(gradient=rg.ones(2))
    with pytest.raises(rg.DTypeError, match="require_grad"):
        rg.tensor([1, 2]).require_grad()  # ints carry no gradients
    assert x.grad((x * 3).sum().backward()).tolist() == [3.0, 3.0, 3.0]


@pytest.mark.parametrize("depth", [100_000])
def test_very_deep_graphs_backpropagate_and_free_without_recursion(depth):
    x = rg.tensor([1.0, 2.0]).require_grad()
    y = x
    for _ in range(depth):
        y = y + 1e-6
    assert x.grad(y.sum().backward()).tolist() == [1.0, 1.0]
    y = x
    for _ in range(depth):
        y = y * 1.0
    assert rg.autograd.grad(y.sum(), x)[0].tolist() == [1.0, 1.0]
    y = x
    for _ in range(depth // 5):
        y = y * 1.0
    (g,) = rg.autograd.grad(y.sum(), x, create_graph=True)
    assert rg.autograd.grad((g * x).sum(), x)[0].tolist() == [1.0, 1.0]
    y = x
    for _ in range(depth):
        y = y.exp().log()
    del y  # freed by reference counting, one node at a time: no recursion either


# -- files --------------------------------------------------------------------------------------
def _same(saved: Any, loaded: Any) -> bool:
    if isinstance(saved, rg.Tensor):
        return (
            isinstance(loaded, rg.Tensor)
            and saved.dtype == loaded.dtype
            and np.array_equal(saved.numpy(), loaded.numpy(), equal_nan=True)
        )
    if isinstance(saved, dict):
        return (
            isinstance(loaded, dict)
            and saved.keys() == loaded.keys()
            and all(_same(saved[k], loaded[k]) for k in saved)
        )
    if isinstance(saved, list | tuple):
        return (
            type(saved) is type(loaded)
            and len(saved) == len(loaded)
            and all(_same(a, b) for a, b in zip(saved, loaded))
        )
    return type(saved) is type(loaded) and saved == loaded


def test_damaged_files_load_whole_or_raise_one_damaged_file_error(tmp_path):
    """Truncations, flipped bits, inserted and overwritten bytes and garbage: ``rg.load``
    gives back exactly what was saved (the damage hit bytes nobody reads) or raises the
    hierarchy's error naming the file, never zipfile's or NumPy's own exceptions."""
    rng = random.Random(13)
    saved = {
        "w": rg.tensor([[1.0, 2.0], [3.0, 4.0]]),
        "steps": rg.tensor(7),
        "nested": [1, 2.5, "x", None, (rg.ones(2), {"k": rg.arange(3)})],
        "empty": rg.zeros((0, 3)),
    }
    buffer = io.BytesIO()
    rg.save(saved, buffer)
    data = buffer.getvalue()
    path = tmp_path / "damaged.pt"
    failures, outcomes = [], {"same": 0, "refused": 0}
    for i in range(600):
        damaged = bytearray(data)
        kind = i % 5
        if kind == 0:
            damaged = damaged[: rng.randrange(len(damaged))]
        elif kind == 1:
            for _ in range(rng.randint(1, 3)):
                damaged[rng.randrange(len(damaged))] ^= 1 << rng.randrange(8)
        elif kind == 2:
            at = rng.randrange(len(damaged))
            damaged[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        elif kind == 3:
            at = rng.randrange(len(damaged))
            damaged[at : at + 8] = bytes(8)
        else:
            damaged = bytearray(rng.randrange(256) for _ in range(rng.randint(0, 200)))
        path.write_bytes(bytes(damaged))
        try:
            loaded = rg.load(path)
        except rg.RetrogradError as error:
            if str(path) not in str(error):
                failures.append(f"damage {i}: the error does not name the file: {error}")
            outcomes["refused"] += 1
            continue
        except Exception as error:  # (what the test looks for)
            failures.append(f"damage {i}: {type(error).__name__}: {error}")
            continue
        if _same(saved, loaded):
            outcomes["same"] += 1
        else:
            failures.append(f"damage {i}: loaded something else without an error")
    assert not failures, "\n".join(failures[:20])
    assert outcomes["refused"] > 400, outcomes


@pytest.mark.parametrize("kind", ["empty", "directory", "text", "pickle", "missing"])
def test_files_that_are_not_checkpoints_get_clear_errors(tmp_path, kind):
    path = tmp_path / "file.pt"
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "directory":
        path.mkdir()
    elif kind == "text":
        path.write_text("hello\n")
    elif kind == "pickle":  # a plain pickle (torch's own files are read: test_torch_files.py)
        path.write_bytes(pickle.dumps({"w": [1.0, 1.0]}))
    expected = {"missing": FileNotFoundError, "directory": IsADirectoryError}  # torch's too
    with pytest.raises(expected.get(kind, rg.InvalidArgumentError)) as raised:
        rg.load(path)
    assert str(path) in str(raised.value)
    model = rg.nn.Linear(2, 2)
    before = model.weight.numpy().copy()
    with pytest.raises((rg.RetrogradError, OSError)):
        model.load_state_dict(str(path))
    np.testing.assert_array_equal(model.weight.numpy(), before)


# -- indexing against torch ---------------------------------------------------------------------
def _indices(lib: Any) -> list[Any]:
    """Index forms of every kind, out-of-range and ill-typed ones included, built with
    ``lib``'s tensors (so that torch reads the same index)."""
    t = lib.tensor
    return [
        0, -1, 2, -3, 5, (0, 0, 0), (1, -1, -1), (2,), (0, 3), (0, 0, 4), (0, 0, -5),
        slice(None), slice(1, None), slice(None, None, 2), slice(5, 10), slice(-10, 1),
        (Ellipsis, 0), (None, 0), (0, None, Ellipsis, None), (Ellipsis, None),
        [0, 1], [0, 2], [[0, 1]], [[0, 1], [1, 0]], [-1, -2], [], [True, False], [True],
        [t([0, 1]), t([1, 2])], [slice(None), 0], [None, 0], [[0, 1], slice(None)],
        t([0, 1]), t([0, 5]), t([-3]), t([[0], [1]]), t([]), t([], dtype=lib.int64),
        t([0.0, 1.0]), t([True, False]), t([True]), t(True), t(False), t(0), t(1.0),
        t([[True, False, True], [False, True, True]]), t(np.ones((2, 3, 4), bool)),
        t(np.ones((2, 4), bool)), (t([0, 1]), t([0, 1])), (t([0, 1]), t([0, 1, 2])),
        (t([0, 1]), slice(None), t([0, 3])), (slice(None), t([0, 2])), (0, t([0, 2]), t([1, 3])),
        (slice(None), [0, 2], [1, 3]), ([0, 1], Ellipsis, [0, 3]), (t([[0], [1]]), t([0, 1, 2])),
        True, False, (0, True), (True, 0), (Ellipsis, False), (t(True), 0), (t(False), Ellipsis, 1),
        (True, t([0, 1])), "a", 1.5, (0, "a"), {0: 1}, (0, 1.0), np.int64(1), np.array([0, 1]),
        np.array([True, False]), (slice(0, 1.5),), slice(None, None, 0),
    ]  # fmt: skip


def _index_ops(lib: Any, x: Any, index: Any, op: str) -> Any:
    if op == "get":
        return x[index]
    if op == "set":
        x[index] = -1.0
        return x
    if op == "set tensor":
        x[index] = lib.tensor(-2.0, dtype=x.dtype)
        return x
    leaf = x.clone().requires_grad_(True) if lib is torch else x.clone().require_grad()
    loss = (leaf[index] * 3.0).sum()
    if lib is torch:
        loss.backward()
        return leaf.grad
    return leaf.grad(loss.backward())


def test_indexing_reads_writes_and_gradients_agree_with_torch():
    """Every index form, read, written (a number, a 0-d tensor) and differentiated: the same
    result as torch's, or, where torch refuses, the hierarchy's error (an out-of-range index:
    an ``IndexError`` subclass)."""
    data = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    failures = []
    for ours_index, theirs_index in zip(_indices(rg), _indices(torch)):
        for op in ("get", "set", "set tensor", "grad"):
            try:
                theirs = _index_ops(torch, torch.tensor(data), theirs_index, op).numpy()
            except Exception:  # torch refuses: ours must refuse clearly
                theirs = None
            label = f"{op} [{ours_index!r}]"
            outcome = _check_outcome(label, _index_ops, rg, rg.tensor(data), ours_index, op)
            if outcome not in ("ok", "refused"):
                failures.append(outcome)
            elif outcome == "refused" and theirs is not None:
                failures.append(f"{label}: refused where torch gives a result")
            elif outcome == "ok" and theirs is not None:
                ours = _index_ops(rg, rg.tensor(data), ours_index, op).numpy()
                if ours.shape != theirs.shape or not np.array_equal(ours, theirs):
                    failures.append(f"{label}: {ours.shape}, torch {theirs.shape}")
    assert not failures, "\n".join(failures)
