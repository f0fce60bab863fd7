"""Fused elementwise kernels for the NumPy backend, compiled with Numba.

A fused kernel evaluates a group of elementwise calls (:mod:`.fusion` chooses them) in one loop
over the output's elements: each element's inputs are read once, the calls' arithmetic runs in
registers, and only the values needed after the group are written, one memory pass instead of
one per call, and one call from the replay instead of one per op.

Each fusable protocol op has an entry in :data:`OPS`: how one element of its output is
computed from its operands, written to compute exactly what the NumPy backend's kernel computes
for that element. For the *exact* ops (IEEE arithmetic, square root, comparisons, selection,
``maximum``-style ReLU and clamps, float casts) the fused kernel is bit-identical to the calls
it replaces: the same operations on the same values in the same order, rounded the same way
(float32 stays float32; no fused multiply-add, as Numba emits none without ``fastmath``).
Python constants are rounded to the array's dtype first, as NumPy does with a Python scalar
(NEP 50). The float32 GELU and its gradient are exact too: they are the backend's own compiled
formula (``backend/compiled.py``). The *approximate* ops (``exp``, ``log``, ``sin``, ``tanh``,
the float64 GELU...) call the C library's functions, which may differ from NumPy's own
implementations in the last bit; they are fused only with ``fuse="fast"`` (docs/capture.md
states the tolerance).

Kernels are cached by their source: a kernel depends on the op sequence, the dtypes and which
dimensions broadcast, not on the sizes (passed as arguments) or the constants (arguments too).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import sys
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["OPS", "FusedOp", "Kernel", "available", "build_kernel"]


@dataclass(frozen=True)
class FusedOp:
    """How one protocol op is fused: ``arrays`` operand positions (the rest are constants),
    an ``expression`` over ``{a0}, {a1}...`` (array operands' elements) and ``{c0}...`` (the
    constants, rounded to the dtype of the first array operand), the output dtype (``None``:
    the first operand's; ``"bool"``), and whether it is exact."""

    arrays: tuple[int, ...]
    expression: str
    out: str | None = None
    exact: bool | str = True  # or the one dtype it is exact in, or PROBED
    ufunc: str = ""  # the NumPy ufunc a PROBED op must match
    #: a call-free version of ``expression`` that LLVM can vectorize, exact where ``guard``
    #: is false: a kernel runs its loop with it, and again with ``expression`` where the guard
    #: was true for some element (NumPy's float32 sin of a huge argument, say)
    fast: str = ""
    guard: str = ""

    def is_exact(self, dtype: str) -> bool:
        if self.exact == PROBED:
            return matches_numpy(self.ufunc, dtype)
        return self.exact is True or self.exact == dtype

    def render(self, elements: list[str], constants: list[str], dtype: str) -> str:
        """The expression for operands ``elements``, constants ``constants``, in ``dtype``
        (the floating dtype its literals take)."""
        fields = {f"a{i}": e for i, e in enumerate(elements)}
        fields.update({f"c{i}": k for i, k in enumerate(constants)})
        if "{gelu" in self.expression:
            x = elements[0] if self.expression == "{gelu}" else elements[1]
            gelu, backward = (_gelu_float32 if dtype == "float32" else _gelu_float64)(x)
            fields["gelu"], fields["gelu_backward"] = gelu, backward.format(a0=fields["a0"])
        return self.expression.format(t=dtype, **fields)

    def render_guarded(self, elements: list[str], dtype: str) -> tuple[str, str] | None:
        """``(fast expression, guard)`` for operands ``elements``, or ``None``."""
        if not self.fast:
            return None
        fields = {f"a{i}": e for i, e in enumerate(elements)}
        return self.fast.format(t=dtype, **fields), self.guard.format(t=dtype, **fields)


#: An op exact where :func:`matches_numpy` finds its compiled version equal to NumPy's ufunc.
PROBED = "probed"
_MAX = "({a0} if ({a0} > {a1} or {a0} != {a0}) else {a1})"  # np.maximum: NaN propagates
_MIN = "({a0} if ({a0} < {a1} or {a0} != {a0}) else {a1})"
# NumpyBackend.sigmoid: exp of -|x|, then 1 / (1 + tail) or tail / (1 + tail)
_SIGMOID = (
    "(np.{t}(1.0) / (np.{t}(1.0) + math.exp(-abs({a0}))) if {a0} >= 0 "
    "else math.exp(-abs({a0})) / (np.{t}(1.0) + math.exp(-abs({a0}))))"
)
OPS: dict[str, FusedOp] = {
    "add": FusedOp((0, 1), "{a0} + {a1}"),
    "sub": FusedOp((0, 1), "{a0} - {a1}"),
    "mul": FusedOp((0, 1), "{a0} * {a1}"),
    "div": FusedOp((0, 1), "{a0} / {a1}"),
    "accumulate": FusedOp((0, 1), "{a0} + {a1}"),
    "add_scalar": FusedOp((0,), "{a0} + {c0}"),
    "sub_scalar": FusedOp((0,), "{a0} - {c0}"),
    "mul_scalar": FusedOp((0,), "{a0} * {c0}"),
    "div_scalar": FusedOp((0,), "{a0} / {c0}"),
    "rsub_scalar": FusedOp((0,), "{c0} - {a0}"),
    "rdiv_scalar": FusedOp((0,), "{c0} / {a0}"),
    "neg": FusedOp((0,), "-{a0}"),
    "abs": FusedOp((0,), "abs({a0})"),
    "square": FusedOp((0,), "{a0} * {a0}"),
    "sqrt": FusedOp((0,), "math.sqrt({a0})"),
    "recip": FusedOp((0,), "np.{t}(1.0) / {a0}"),
    "relu": FusedOp((0,), _MAX.replace("{a1}", "np.{t}(0.0)")),
    # np.clip: the minimum of the maximum, each keeping a NaN operand (both bounds given)
    "clamp": FusedOp(
        (0,), _MIN.replace("{a0}", _MAX.replace("{a1}", "{c0}")).replace("{a1}", "{c1}")
    ),
    "leaky_relu": FusedOp((0,), "({a0} if {a0} > 0 else {a0} * {c0})"),
    # grad where the output is not <= 0 (a NaN output keeps its gradient), else +0.0
    "relu_backward": FusedOp((0, 1), "({a0} if not {a1} <= np.{t}(0.0) else np.{t}(0.0))"),
    "mask_fill": FusedOp((0, 1), "({c0} if {a1} else {a0})"),
    "mask_where": FusedOp((0, 1, 2), "({a2} if {a1} else {a0})"),
    "equal": FusedOp((0, 1), "{a0} == {a1}", "bool"),
    "not_equal": FusedOp((0, 1), "{a0} != {a1}", "bool"),
    "greater": FusedOp((0, 1), "{a0} > {a1}", "bool"),
    "greater_equal": FusedOp((0, 1), "{a0} >= {a1}", "bool"),
    "lower": FusedOp((0, 1), "{a0} < {a1}", "bool"),
    "lower_equal": FusedOp((0, 1), "{a0} <= {a1}", "bool"),
    "equal_elem": FusedOp((0,), "{a0} == {c0}", "bool"),
    "not_equal_elem": FusedOp((0,), "{a0} != {c0}", "bool"),
    "greater_elem": FusedOp((0,), "{a0} > {c0}", "bool"),
    "greater_equal_elem": FusedOp((0,), "{a0} >= {c0}", "bool"),
    "lower_elem": FusedOp((0,), "{a0} < {c0}", "bool"),
    "lower_equal_elem": FusedOp((0,), "{a0} <= {c0}", "bool"),
    "logical_not": FusedOp((0,), "not {a0}", "bool"),
    "logical_and": FusedOp((0, 1), "({a0} and {a1})", "bool"),
    "logical_or": FusedOp((0, 1), "({a0} or {a1})", "bool"),
    # approximate: the C library's functions (fuse="fast" only)
    "exp": FusedOp((0,), "math.exp({a0})", exact=False),
    "expm1": FusedOp((0,), "math.expm1({a0})", exact=False),
    "log": FusedOp((0,), "math.log({a0})", exact=False),
    "log2": FusedOp((0,), "math.log2({a0})", exact=False),
    "log10": FusedOp((0,), "math.log10({a0})", exact=False),
    "log1p": FusedOp((0,), "math.log1p({a0})", exact=False),
    # NumPy's own algorithm (float32) or the C library's (float64), as NumPy runs them:
    # exact where the probe agrees (:mod:`.numpy_trig`)
    "sin": FusedOp(
        (0,),
        "_sin_{t}({a0})",
        exact=PROBED,
        ufunc="sin",
        fast="_sin_reduced_{t}({a0})",
        guard="_sin_outside_{t}({a0})",
    ),
    "cos": FusedOp(
        (0,),
        "_cos_{t}({a0})",
        exact=PROBED,
        ufunc="cos",
        fast="_cos_reduced_{t}({a0})",
        guard="_cos_outside_{t}({a0})",
    ),
    "tanh": FusedOp((0,), "math.tanh({a0})", exact=False),
    "sigmoid": FusedOp((0,), _SIGMOID, exact=False),
    "erf": FusedOp((0,), "math.erf({a0})", exact=False),
    # exact in float32 (the backend's compiled formula), the C library's erfc in float64
    "gelu": FusedOp((0,), "{gelu}", exact="float32"),
    "gelu_backward": FusedOp((0, 1), "{gelu_backward}", exact="float32"),
}


def _gelu_float32(x: str) -> tuple[str, str]:
    """The NumPy backend's float32 GELU and its gradient (``backend/compiled.py``), operation
    for operation with the same ``exp``: a fused GELU is bit-identical to the backend's."""
    denominator = f"(_expf(_minus_logit({x}, ({x} * {x}))) + np.float32(1.0))"
    return f"{x} / {denominator}", f"_gelu_slope({x}) * {{a0}}"


_INV_SQRT_2, _INV_SQRT_2PI = 0.7071067811865476, 0.3989422804014327


def _gelu_float64(x: str) -> tuple[str, str]:
    """The float64 GELU and gradient as ``backend/special.py`` writes them (``erfc``)."""
    cdf = f"(0.5 * math.erfc({x} * -{_INV_SQRT_2!r}))"
    gelu = f"(0.5 * {x}) * math.erfc({x} * -{_INV_SQRT_2!r})"
    return gelu, f"{{a0}} * ({cdf} + {x} * (math.exp(-0.5 * ({x} * {x})) * {_INV_SQRT_2PI!r}))"


_NUMBA: Any = None


def available() -> bool:
    """Whether Numba can be imported (fusion is skipped without it)."""
    return _numba() is not None


def _numba() -> Any:
    global _NUMBA
    if _NUMBA is None:
        try:
            import numba

            from ..backend import numba_interrupts  # noqa: F401  (Ctrl-C held while made)
        except ImportError:  # pragma: no cover - numba is a dependency
            _NUMBA = False
        else:
            _allow_memory_checks()
            _NUMBA = numba
    return _NUMBA or None


#: How many runtime alias checks LLVM's loop vectorizer may emit for one loop (LLVM's default
#: is 8). A fused kernel reads and writes many arrays (and rows of the arena's stacks) that
#: LLVM cannot prove distinct, so each pair of them needs a check before the vectorized loop;
#: with the default, a kernel of more than a few outputs stays scalar. The checks run once per
#: call (a few nanoseconds each), and a kernel whose arrays do overlap takes the scalar loop,
#: so results are the same either way.
MEMORY_CHECKS = 4096


def _allow_memory_checks() -> None:
    """Raise LLVM's limits on runtime alias checks (:data:`MEMORY_CHECKS`) for the code Numba
    compiles in this process. They are heuristics' thresholds: they decide whether a loop is
    vectorized, never what it computes."""
    import llvmlite.binding as llvm

    for option in ("runtime-memory-check-threshold", "vectorize-memory-check-threshold"):
        llvm.set_option("retrograd", f"-{option}={MEMORY_CHECKS}")


@dataclass
class Kernel:
    """A compiled fused kernel and how to call it: ``function(*inputs, *constants, *sizes)``
    returns the outputs (a tuple when there are several; ``None`` when there are none)."""

    function: Any
    source: str


_CACHE: dict[str, Any] = {}
#: held while a kernel missing from :data:`_CACHE` is written and compiled: threads capturing
#: at once compile each kernel once, and never write (and rename) the same file together
_COMPILING = threading.Lock()
#: where compiled kernels are kept between processes (Numba's cache beside each source file)
CACHE_DIR = os.environ.get("RETROGRAD_KERNEL_CACHE") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
    "retrograd",
    "kernels",
)
_HEADER = (
    "import math\n\nimport numba\nimport numpy as np\n\n"
    "from retrograd.backend.compiled import _minus_logit, expf as _expf\n"
    "from retrograd.backend.compiled import gelu_slope as _gelu_slope\n"
    "from retrograd.capture.numpy_trig import (\n"
    + "".join(
        f"    {trig}{part}_{dtype} as _{trig}{part}_{dtype},\n"
        for trig in ("cos", "sin")
        for part in ("", "_outside", "_reduced")
        for dtype in ("float32", "float64")
    )
    + ")\n\n\n"
)
_DECORATOR = '@numba.njit(error_model="numpy", nogil=True, cache={cache})\n'


@functools.cache
def _stamp() -> str:
    """A first line naming what a cached kernel was built with: Numba's version and the hash of
    the backend's compiled helpers it inlines (Numba's cache checks only the kernel's own file,
    so a changed helper must change the kernel's file name)."""
    from ..backend import compiled
    from . import numpy_trig

    digest = hashlib.sha1()
    for module in (compiled, numpy_trig):
        with open(module.__file__, "rb") as file:
            digest.update(file.read())
    helpers = digest.hexdigest()[:12]
    numba = _numba()
    return f"# numba {numba.__version__}, helpers {helpers}, memory checks {MEMORY_CHECKS}\n"


#: Arguments on which a PROBED op's compiled version must give NumPy's bits: random bit
#: patterns (every exponent, NaNs, infinities, subnormals), arguments where the float32
#: reduction runs (a tie-breaking difference shows there first), and the edges.
PROBE_SIZE = 1 << 17


@functools.cache
def matches_numpy(ufunc: str, dtype: str) -> bool:
    """Whether the compiled element function of ``ufunc`` in ``dtype`` gives NumPy's bits on
    this machine (NumPy's float32 algorithm depends on the CPU's fused multiply-add)."""
    numba = _numba()
    if numba is None or dtype not in ("float32", "float64"):
        return False
    from . import numpy_trig

    element = getattr(numpy_trig, f"{ufunc}_{dtype}")

    @numba.njit(error_model="numpy")
    def apply(x, out):
        for i in range(x.size):
            out[i] = element(x[i])

    rng = np.random.default_rng(0)
    width = np.uint32 if dtype == "float32" else np.uint64
    raw = rng.integers(0, np.iinfo(width).max, PROBE_SIZE, dtype=width, endpoint=True)
    edges = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 71476.0625, 117435.992, 1e-40]
    x = np.concatenate(
        [
            raw.view(dtype),
            rng.uniform(-2e5, 2e5, PROBE_SIZE).astype(dtype),
            rng.uniform(-8.0, 8.0, PROBE_SIZE).astype(dtype),
            np.array(edges, dtype),
        ]
    )
    out = np.empty_like(x)
    apply(x, out)
    with np.errstate(all="ignore"):
        expected = getattr(np, ufunc)(x)
    return bool(np.array_equal(out.view(width), expected.view(width)))


def _compiled(source: str) -> Any:
    """The Numba function of ``source``: written to a file in :data:`CACHE_DIR` named by its
    hash and imported, so that Numba caches the machine code there (compiling costs a few
    tenths of a second a kernel, loading it a millisecond); compiled in memory where the
    directory cannot be written."""
    function = _CACHE.get(source)
    if function is not None:
        return function
    with _COMPILING:
        function = _CACHE.get(source)
        if function is None:
            function = _CACHE[source] = _compile(source)
    return function


def _compile(source: str) -> Any:
    """:func:`_compiled`'s work, for a source not compiled yet in this process."""
    text = _stamp() + _HEADER + _DECORATOR.format(cache=True) + source + "\n"
    digest = hashlib.sha1(text.encode()).hexdigest()[:20]
    path = os.path.join(CACHE_DIR, f"fused_{digest}.py")
    try:
        if not os.path.exists(path):
            os.makedirs(CACHE_DIR, exist_ok=True)
            partial = f"{path}.{os.getpid()}.tmp"
            with open(partial, "w", encoding="utf-8") as file:
                file.write(text)
            os.replace(partial, path)
        name = f"retrograd_fused_{digest}"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # Numba's cache finds the module by name when loading
        spec.loader.exec_module(module)
        function = module.run
    except OSError:
        namespace: dict[str, Any] = {}
        exec(compile(_HEADER + _DECORATOR.format(cache=False) + source, path, "exec"), namespace)
        function = namespace["run"]
    return function


def build_kernel(
    ndim: int,
    inputs: list[tuple],
    constants: list[str],
    body: list[tuple[str, str, str]],
    outputs: list[tuple],
    stacks: tuple[str, ...] = (),
) -> Kernel:
    """Compile (or find) the kernel that evaluates ``body`` over an ``ndim``-dimensional output.

    ``inputs``: per array input, which of its dimensions (aligned to the output's last ones)
    broadcast, or ``None`` for a NumPy scalar; and its dtype. ``constants``: each constant's
    dtype. ``body``: ``(temporary, expression, dtype)`` in order, expressions over ``x<i>``
    (input elements), ``k<i>`` (constants) and earlier temporaries. ``outputs``: which
    temporaries are written out, with their dtypes.

    A ``body`` entry may carry a call-free alternative expression and its guard
    (:attr:`FusedOp.fast`): the kernel then runs the loop with the alternatives, and again with
    the expressions if any guard was true.

    ``stacks``: the dtypes of *stacked buffers* (:mod:`.fusion`'s arena: a value passed from
    one kernel to another lives in a row of one preallocated array, never as an array of its
    own). An input or output given as ``(..., (stack, row))`` reads or writes row ``rows[row]``
    of stack ``stack``, ``rows`` an int64 array argument; the rows are arguments, so that
    kernels of the same structure share their machine code. The call is then
    ``function(*inputs, *stacks, rows, *constants, *sizes)``.
    """
    sizes = [f"n{d}" for d in range(ndim)]
    index = [f"i{d}" for d in range(ndim)]
    plain = [number for number, spec in enumerate(inputs) if len(spec) < 3 or spec[2] is None]
    args = [f"a{i}" for i in plain] + [f"s{k}" for k in range(len(stacks))]
    args += ["rows"] if stacks else []
    args += [f"k{i}" for i in range(len(constants))]
    written = [n for n, spec in enumerate(outputs) if len(spec) < 3 or spec[2] is None]
    outs = [f"o{number}" for number in written]
    shape = f"({', '.join(sizes)}{',' if ndim == 1 else ''})"
    # Outputs are allocated by a Python wrapper and passed in: returning arrays made inside
    # compiled code costs more (each is boxed with its dtype unpickled).
    wrapper = [f"def run({', '.join(args + sizes)}):"]
    wrapper += [f"    o{n} = np.empty({shape}, np.{outputs[n][1]})" for n in written]
    wrapper.append(f"    kernel({', '.join(args + sizes + outs)})")
    wrapper.append(f"    return {', '.join(outs)}{',' if len(outs) > 1 else ''}")
    lines = [f"def kernel({', '.join(args + sizes + outs)}):"]
    flat = ndim > 1 and all(_full_or_hoisted(spec[0], ndim) for spec in inputs)
    if flat:
        # every operand has the output's shape (or is loaded once): one loop over the
        # elements in C order, which LLVM vectorizes (a nested loop's innermost dimension may
        # be too short to), on contiguous views of the arrays
        lines.append(f"    n = {' * '.join(sizes)}")
        # the stacks read or written element by element (not one read once) have rows of
        # the output's shape
        looped = {spec[2][0] for spec in inputs if spec[0] and len(spec) > 2 and spec[2]}
        looped |= {spec[2][0] for spec in outputs if len(spec) > 2 and spec[2]}
        lines += [f"    s{k}f = s{k}.reshape(s{k}.shape[0], n)" for k in sorted(looped)]
        lines += [f"    f{n} = o{n}.reshape(n)" for n in written]
    loads = []
    for number, (broadcast, _, *stacked) in enumerate(inputs):
        source = f"a{number}"
        row: list[str] = []
        if stacked and stacked[0] is not None:
            stack, at_row = stacked[0]
            lines.append(f"    r{number} = rows[{at_row}]")
            source, row = f"s{stack}", [f"r{number}"]
        if broadcast is None:
            lines.append(f"    x{number} = {source}")
        elif not broadcast:
            lines.append(f"    x{number} = {source}[{row[0] if row else '()'}]")
        elif flat and row:
            loads.append(f"x{number} = {source}f[{row[0]}, i]")
        elif flat:
            # a view of a C-contiguous array, a copy of another (a broadcast view, a slice)
            lines.append(f"    e{number} = {source}.ravel()")
            loads.append(f"x{number} = e{number}[i]")
        else:
            offset = ndim - len(broadcast)
            at = row + ["0" if one else index[offset + d] for d, one in enumerate(broadcast)]
            loads.append(f"x{number} = {source}[{', '.join(at)}]")
    stores = []
    for number, (name, _, *stacked) in enumerate(outputs):
        if stacked and stacked[0] is not None:
            stack, at_row = stacked[0]
            lines.append(f"    w{number} = rows[{at_row}]")
            stores.append((f"s{stack}", f"w{number}, ", name))
        else:
            stores.append((f"o{number}", "", name))
    where = ", ".join(index) if ndim else "()"
    guarded = any(len(entry) > 3 for entry in body)

    def store(target: str, row: str, name: str) -> str:
        if flat:
            return f"{target}f[{row}i] = {name}" if row else f"f{target[1:]}[i] = {name}"
        at = f"{row}{where}" if row and ndim else (row.rstrip(", ") if row else where)
        return f"{target}[{at}] = {name}"

    def loop(fast: bool) -> None:
        depth = "    "
        for d in range(1 if flat else ndim):
            lines.append(
                f"{depth}for {'i' if flat else index[d]} in range({'n' if flat else sizes[d]}):"
            )
            depth += "    "
        lines.extend(depth + load for load in loads)
        for name, expression, dtype, *alternative in body:
            if fast and alternative:
                expression = alternative[0]
            lines.append(f"{depth}{name} = np.{dtype}({expression})")
            if fast and alternative:
                lines.append(f"{depth}outside |= {alternative[1]}")
        lines.extend(depth + store(*entry) for entry in stores)

    if guarded:
        # the vectorized loop first; the exact one again only where a guard was true
        lines.append("    outside = False")
        loop(True)
        lines.append("    if not outside:")
        lines.append("        return")
    loop(False)
    source = "\n".join(lines) + "\n\n\n" + "\n".join(wrapper)
    function = _compiled(source)
    if not written:  # the wrapper allocates nothing: call the compiled function itself
        function = getattr(function, "__globals__", {}).get("kernel", function)
    return Kernel(function, source)


def _full_or_hoisted(broadcast: tuple | None, ndim: int) -> bool:
    """Whether an input of ``broadcast`` has the output's shape, or is read once (a NumPy
    scalar, a 0-d array)."""
    return not broadcast or (len(broadcast) == ndim and not any(broadcast))


def numpy_name(dtype: Any) -> str:
    """``"float32"``, ``"float64"``, ``"bool_"``, ``"int64"`` for a NumPy dtype."""
    name = np.dtype(dtype).name
    return "bool_" if name == "bool" else name
